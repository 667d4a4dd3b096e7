//! Request ids as map keys: equal when JSON-RPC says they name the same request.

use serde_json::value::RawValue;

/// A request id, normalized so that the same id matches however a peer
/// spelled it (`"a"` and `"\u0061"` are one string id); a number and a
/// string with the same digits stay different ids, as JSON-RPC says.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum IdKey {
    /// A string id, unescaped.
    Str(String),
    /// A number id, as written (peers echo numbers back as they got them).
    Num(String),
    /// `null`, or a value JSON-RPC does not allow as an id, as written.
    Other(String),
}

impl IdKey {
    /// The key of an id as it appeared in a message.
    pub(crate) fn of(raw: &RawValue) -> IdKey {
        let text = raw.get().trim();
        match text.as_bytes().first() {
            Some(b'"') => serde_json::from_str::<String>(text)
                .map_or_else(|_| IdKey::Other(text.to_owned()), IdKey::Str),
            Some(b'-' | b'0'..=b'9') => IdKey::Num(text.to_owned()),
            _ => IdKey::Other(text.to_owned()),
        }
    }

    /// The string, for a string id.
    pub(crate) fn as_str(&self) -> Option<&str> {
        match self {
            IdKey::Str(text) => Some(text),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(json: &str) -> IdKey {
        let raw: Box<RawValue> = serde_json::from_str(json).unwrap();
        IdKey::of(&raw)
    }

    #[test]
    fn ids_match_by_json_value_and_type() {
        assert_eq!(key(r#""a""#), key(r#""\u0061""#));
        assert_ne!(key("1"), key(r#""1""#));
        assert_eq!(key("7"), IdKey::Num("7".to_owned()));
        assert_eq!(key("null"), IdKey::Other("null".to_owned()));
        // Beyond u64: kept as written, never rounded through a float.
        assert_eq!(
            key("123456789012345678901234567890"),
            IdKey::Num("123456789012345678901234567890".to_owned())
        );
        assert_eq!(key(r#""x""#).as_str(), Some("x"));
    }
}
