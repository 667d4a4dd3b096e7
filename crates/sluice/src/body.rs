//! An `ok` answer's body: the upstream's bytes, parsed for the model only when something reads it.

use std::fmt;
use std::ops::Deref;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// The body of an [`Outcome::Ok`](crate::Outcome::Ok): JSON as JSON,
/// anything else as a string (invalid UTF-8 replaced).
///
/// It keeps the bytes the upstream sent and parses them the first time
/// the body is read (through `Deref`, [`Body::value`], or serializing the
/// outcome), so a call whose answer nobody reads does not pay for a parse
/// it never needed. Clones share the bytes and the parsed value: the calls
/// one flight or the turn's cache answers all read the same body.
///
/// ```
/// let body = sluice::Body::from_bytes(bytes::Bytes::from_static(br#"{"id": 7}"#));
/// assert_eq!(body["id"], 7);
/// assert_eq!(*sluice::Body::from_bytes(bytes::Bytes::from_static(b"plain")), "plain");
/// ```
#[derive(Clone)]
pub struct Body(Arc<Parsed>);

struct Parsed {
    /// What the upstream sent; empty for a body made from a value.
    raw: Bytes,
    value: OnceLock<Value>,
}

impl Body {
    /// A body of the upstream's bytes, parsed when first read.
    pub fn from_bytes(raw: Bytes) -> Self {
        Body(Arc::new(Parsed {
            raw,
            value: OnceLock::new(),
        }))
    }

    /// The body as the model sees it, parsed now if it was not yet.
    pub fn value(&self) -> &Value {
        self.0.value.get_or_init(|| body_value(&self.0.raw))
    }
}

impl From<Value> for Body {
    fn from(value: Value) -> Self {
        Body(Arc::new(Parsed {
            raw: Bytes::new(),
            value: OnceLock::from(value),
        }))
    }
}

impl Deref for Body {
    type Target = Value;

    fn deref(&self) -> &Value {
        self.value()
    }
}

impl PartialEq for Body {
    fn eq(&self, other: &Body) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.value() == other.value()
    }
}

impl fmt::Debug for Body {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.value().fmt(f)
    }
}

impl Serialize for Body {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.value().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Body {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Value::deserialize(deserializer).map(Body::from)
    }
}

/// An upstream body as the model sees it: JSON when it parses, else text
/// (invalid UTF-8 replaced), so nothing is lost and nothing is re-encoded.
fn body_value(body: &[u8]) -> Value {
    if body.is_empty() {
        return Value::Null;
    }
    serde_json::from_slice(body)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(body).into_owned()))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_body_reads_as_the_value_it_was_before_it_was_kept_raw() {
        let cases: [(&[u8], Value); 5] = [
            (
                br#"{"b": [1, 2.5], "a": null}"#,
                json!({"a": null, "b": [1, 2.5]}),
            ),
            (b"", Value::Null),
            (b"not json", json!("not json")),
            (b"{\"cut\": ", json!("{\"cut\": ")),
            (b"caf\xe9", json!("caf\u{fffd}")),
        ];
        for (raw, expected) in cases {
            let body = Body::from_bytes(Bytes::copy_from_slice(raw));
            assert_eq!(body.value(), &expected, "{raw:?}");
            assert_eq!(body, Body::from(expected.clone()));
            assert_eq!(serde_json::to_value(&body).unwrap(), expected);
            let back: Body = serde_json::from_value(expected.clone()).unwrap();
            assert_eq!(back.value(), &expected);
        }
    }

    #[test]
    fn clones_share_one_parse() {
        let body = Body::from_bytes(Bytes::from_static(br#"{"id": 1}"#));
        let clone = body.clone();
        assert!(clone.0.value.get().is_none(), "nothing read it yet");
        assert_eq!(body["id"], 1);
        assert!(std::ptr::eq(body.value(), clone.value()));
    }
}
