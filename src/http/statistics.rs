//! `GET /statistics`.

use serde::Serialize;
use serde_json::Value;

use crate::error::ApiError;

/// Parses a Prometheus duration (`1h30m`, `15m`, `0`): units y, w, d, h, m, s, ms, each at
/// most once, from largest to smallest. Returns milliseconds.
pub fn parse_interval(value: &str) -> Option<u64> {
    if value == "0" {
        return Some(0);
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
    Some(total)
}

/// The statistics object. In this release only `document_queue` carries a value.
#[derive(Debug, Serialize, poem_openapi::Object)]
pub struct Statistics {
    pub documents_added: f64,
    pub documents_processed: f64,
    pub documents_processed_latency: f64,
    pub documents_failed: f64,
    pub agent_executions: f64,
    pub agent_execution_latency: f64,
    pub agent_execution_latencies: Vec<Value>,
    pub document_queue: u64,
    pub document_queue_processed_latencies: Vec<Value>,
}

/// Validates the `interval` query parameter.
pub fn check_interval(query: Option<&str>) -> Result<(), ApiError> {
    let pairs = super::extract::form_pairs(query);
    let mut intervals = pairs.iter().filter(|(name, _)| name == "interval");
    let Some((_, interval)) = intervals.next() else {
        return Err(ApiError::query_string("missing field `interval`"));
    };
    if intervals.next().is_some() {
        return Err(ApiError::query_string("duplicate field `interval`"));
    }
    if parse_interval(interval).is_none() {
        return Err(ApiError::InvalidInterval(interval.clone()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prometheus_durations() {
        assert_eq!(parse_interval("0"), Some(0));
        assert_eq!(parse_interval("15m"), Some(900_000));
        assert_eq!(parse_interval("1h30m"), Some(5_400_000));
        assert_eq!(parse_interval("1d2h3m4s5ms"), Some(93_784_005));
        assert_eq!(parse_interval("500ms"), Some(500));
        assert_eq!(parse_interval("1y1w"), Some((365 + 7) * 24 * 3600 * 1000));
        for bad in [
            "", "1", "h", "1m1h", "1h1h", "1x", "-1h", "1.5h", "1 h", "0s0",
        ] {
            assert_eq!(parse_interval(bad), None, "{bad}");
        }
    }
}
