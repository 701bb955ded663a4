//! Timestamps as the interface writes them (RFC 3339, UTC, microseconds, `Z`) and durations as
//! the statistics' `interval` writes them (Prometheus durations).

use std::time::Duration;

/// Parses a Prometheus duration (`1h30m`, `15m`, `0`): units y (365 days), w, d, h, m, s, ms,
/// each at most once, from largest to smallest. `None` for anything else, or a duration
/// beyond `u64` milliseconds.
pub fn parse_prometheus_duration(value: &str) -> Option<Duration> {
    if value == "0" {
        return Some(Duration::ZERO);
    }
    const UNITS: [(&str, u64); 7] = [
        ("y", 365 * 24 * 3600 * 1000),
        ("w", 7 * 24 * 3600 * 1000),
        ("d", 24 * 3600 * 1000),
        ("h", 3600 * 1000),
        ("m", 60 * 1000),
        ("s", 1000),
        ("ms", 1),
    ];
    let mut rest = value;
    let mut next_unit = 0;
    let mut total: u64 = 0;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let number: u64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        // `ms` must be tried before `m`.
        let unit = if rest.starts_with("ms") {
            "ms"
        } else {
            let end = rest.char_indices().nth(1).map_or(rest.len(), |(i, _)| i);
            &rest[..end]
        };
        let position = UNITS.iter().position(|(u, _)| *u == unit)?;
        if position < next_unit {
            return None;
        }
        next_unit = position + 1;
        total = total.checked_add(number.checked_mul(UNITS[position].1)?)?;
        rest = &rest[unit.len()..];
    }
    Some(Duration::from_millis(total))
}

/// Serde adapter for `DateTime<Utc>` fields.
pub mod rfc3339 {
    use chrono::{DateTime, SecondsFormat, Utc};
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn format(ts: &DateTime<Utc>) -> String {
        ts.to_rfc3339_opts(SecondsFormat::Micros, true)
    }

    pub fn serialize<S: Serializer>(ts: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format(ts))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<DateTime<Utc>, D::Error> {
        DateTime::<Utc>::deserialize(d)
    }

    /// The same for `Option<DateTime<Utc>>`.
    pub mod option {
        use chrono::{DateTime, Utc};
        use serde::{Deserialize, Deserializer, Serializer};

        pub fn serialize<S: Serializer>(
            ts: &Option<DateTime<Utc>>,
            s: S,
        ) -> Result<S::Ok, S::Error> {
            match ts {
                Some(ts) => s.serialize_str(&super::format(ts)),
                None => s.serialize_none(),
            }
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(
            d: D,
        ) -> Result<Option<DateTime<Utc>>, D::Error> {
            Option::<DateTime<Utc>>::deserialize(d)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_durations() {
        let ms = |value: &str| parse_prometheus_duration(value).map(|d| d.as_millis());
        assert_eq!(ms("0"), Some(0));
        assert_eq!(ms("15m"), Some(900_000));
        assert_eq!(ms("1h30m"), Some(5_400_000));
        assert_eq!(ms("1d2h3m4s5ms"), Some(93_784_005));
        assert_eq!(ms("500ms"), Some(500));
        assert_eq!(ms("1y1w"), Some((365 + 7) * 24 * 3600 * 1000));
        for bad in [
            "", "1", "h", "1m1h", "1h1h", "1x", "-1h", "1.5h", "1 h", "0s0",
        ] {
            assert_eq!(ms(bad), None, "{bad}");
        }
    }
}
