//! Opaque pagination cursors: URL-safe base64 (no padding) of the compact JSON array of the
//! values of the order fields of one object.
//!
//! The encoding is deliberately dumb JSON so that a cursor survives any field type the API
//! renders (strings, numbers, booleans, null); the kinds are checked against the order fields
//! by [`crate::list::parse_list_query`], not here, because only the request knows its order.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::Value;

use crate::list::{Cursor, ListQueryError};

/// Encodes the order-field values of one object as an opaque cursor.
///
/// URL-safe base64 without padding, so the cursor needs no percent-encoding in a query string.
pub fn encode_cursor(values: &[Value]) -> String {
    // `Display` of a `Value` is infallible compact JSON, unlike `serde_json::to_string`.
    let json = Value::Array(values.to_vec()).to_string();
    URL_SAFE_NO_PAD.encode(json.as_bytes())
}

/// Decodes a cursor produced by [`encode_cursor`].
///
/// Any malformation (not base64, not JSON, not a JSON array) is a
/// [`ListQueryError::Pagination`], the interface's answer to an unreadable cursor.
pub fn decode_cursor(s: &str) -> Result<Cursor, ListQueryError> {
    let bytes = URL_SAFE_NO_PAD
        .decode(s.as_bytes())
        .map_err(|_| ListQueryError::Pagination)?;
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Array(values)) => Ok(Cursor(values)),
        _ => Err(ListQueryError::Pagination),
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests fail loudly")]
mod tests {
    use serde_json::json;

    use super::*;

    fn round_trip(values: Vec<Value>) {
        let encoded = encode_cursor(&values);
        assert!(
            encoded
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
            "cursor must be URL-safe without padding: {encoded}"
        );
        assert_eq!(decode_cursor(&encoded).unwrap(), Cursor(values));
    }

    #[test]
    fn round_trips() {
        round_trip(vec![
            json!("abc"),
            json!("0190a0f1-7f5e-7c3a-9d5b-3a1f2e4d5c6b"),
        ]);
        round_trip(vec![Value::Null, json!("x")]);
        round_trip(vec![json!(42), json!(-7), json!(1.5), json!(true)]);
        round_trip(vec![
            json!("2024-01-02T03:04:05.123456Z"),
            json!("name with ünïcödé & ?=+"),
        ]);
        round_trip(vec![]);
    }

    #[test]
    fn encoding_is_compact_json() {
        let encoded = encode_cursor(&[json!("a"), Value::Null, json!(1)]);
        assert_eq!(URL_SAFE_NO_PAD.decode(encoded).unwrap(), br#"["a",null,1]"#);
    }

    #[test]
    fn malformed_cursors_are_pagination_errors() {
        // Not base64 at all.
        assert_eq!(
            decode_cursor("!!!not base64"),
            Err(ListQueryError::Pagination)
        );
        // Standard (padded) base64 is not what we emit.
        assert_eq!(decode_cursor("WyJhIl0="), Err(ListQueryError::Pagination));
        // Base64 of something that is not JSON.
        let not_json = URL_SAFE_NO_PAD.encode(b"hello world");
        assert_eq!(decode_cursor(&not_json), Err(ListQueryError::Pagination));
        // Base64 of JSON that is not an array.
        let object = URL_SAFE_NO_PAD.encode(br#"{"a":1}"#);
        assert_eq!(decode_cursor(&object), Err(ListQueryError::Pagination));
        let scalar = URL_SAFE_NO_PAD.encode(b"12");
        assert_eq!(decode_cursor(&scalar), Err(ListQueryError::Pagination));
        // Empty cursor (`after=`).
        assert_eq!(decode_cursor(""), Err(ListQueryError::Pagination));
    }
}
