//! Reading one line: a message, a batch, or something that is not JSON-RPC, without re-encoding anything.

use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use super::IdKey;

/// What one line holds.
#[derive(Debug)]
pub(crate) enum Frame<'a> {
    /// Only whitespace: ignored, as line-oriented peers do.
    Blank,
    /// Not JSON (or not UTF-8): the parser's complaint.
    Malformed(String),
    /// JSON, but neither an object nor a non-empty array.
    Invalid,
    /// One JSON object.
    Single(Message<'a>),
    /// A non-empty JSON array (protocol revision 2025-03-26 allows batches):
    /// each element is a message, or a value that cannot be one.
    Batch(Vec<Result<Message<'a>, &'a RawValue>>),
}

/// One JSON object, with the members MCP routing looks at borrowed as
/// written. An object whose members do not have JSON-RPC's types is kept
/// as [`Kind::Unknown`] and passed on as is: the peer it is for decides.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Message<'a> {
    /// The object's own text.
    #[serde(skip)]
    pub(crate) raw: &'a str,
    #[serde(borrow, default, deserialize_with = "present")]
    pub(crate) id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    method: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "present")]
    pub(crate) params: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    pub(crate) result: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    pub(crate) error: Option<&'a RawValue>,
}

/// What a message is, by JSON-RPC 2.0 §4 and §5.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A method and an id: it expects a response.
    Request,
    /// A method and no id.
    Notification,
    /// An id and a result or an error.
    Response,
    /// None of these.
    Unknown,
}

/// A member that is present, `null` included (a plain `Option` would read
/// `"id": null` as absent, and a request with a null id is not a notification).
fn present<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(deserializer).map(Some)
}

impl<'a> Message<'a> {
    fn opaque(raw: &'a str) -> Self {
        Message {
            raw,
            ..Message::default()
        }
    }

    fn read(raw: &'a RawValue) -> Self {
        match serde_json::from_str::<Message<'a>>(raw.get()) {
            Ok(mut message) => {
                message.raw = raw.get();
                message
            }
            Err(_) => Message::opaque(raw.get()),
        }
    }

    /// What kind of message this is.
    pub(crate) fn kind(&self) -> Kind {
        match (&self.method, &self.id) {
            (Some(_), Some(_)) => Kind::Request,
            (Some(_), None) => Kind::Notification,
            (None, Some(_)) if self.result.is_some() || self.error.is_some() => Kind::Response,
            _ => Kind::Unknown,
        }
    }

    /// The method, for requests and notifications.
    pub(crate) fn method(&self) -> Option<&str> {
        self.method.as_deref()
    }

    /// The id's key, when the message has an id.
    pub(crate) fn id_key(&self) -> Option<IdKey> {
        self.id.map(IdKey::of)
    }
}

/// What `of` makes of each response in one message or batch (requests and
/// notifications, and what is not JSON-RPC, are skipped).
pub(crate) fn responses<T>(line: &[u8], of: impl Fn(&Message<'_>) -> Option<T>) -> Vec<T> {
    let of = |message: &Message<'_>| {
        (message.kind() == Kind::Response)
            .then(|| of(message))
            .flatten()
    };
    match parse(line) {
        Frame::Single(message) => of(&message).into_iter().collect(),
        Frame::Batch(elements) => elements
            .iter()
            .filter_map(|element| element.as_ref().ok().and_then(of))
            .collect(),
        _ => Vec::new(),
    }
}

/// Reads one line (without its newline).
pub(crate) fn parse(line: &[u8]) -> Frame<'_> {
    let Ok(text) = std::str::from_utf8(line) else {
        return Frame::Malformed("the line is not UTF-8".to_owned());
    };
    if text.trim().is_empty() {
        return Frame::Blank;
    }
    let raw: &RawValue = match serde_json::from_str(text) {
        Ok(raw) => raw,
        Err(error) => return Frame::Malformed(error.to_string()),
    };
    match raw.get().as_bytes().first() {
        Some(b'{') => Frame::Single(Message::read(raw)),
        Some(b'[') => match serde_json::from_str::<Vec<&RawValue>>(raw.get()) {
            Ok(elements) if !elements.is_empty() => Frame::Batch(
                elements
                    .into_iter()
                    .map(|element| {
                        if element.get().starts_with('{') {
                            Ok(Message::read(element))
                        } else {
                            Err(element)
                        }
                    })
                    .collect(),
            ),
            _ => Frame::Invalid,
        },
        _ => Frame::Invalid,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn single(line: &str) -> Message<'_> {
        match parse(line.as_bytes()) {
            Frame::Single(message) => message,
            other => panic!("not a single message: {other:?}"),
        }
    }

    #[test]
    fn kinds_follow_json_rpc() {
        let request =
            single(r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}}"#);
        assert_eq!(request.kind(), Kind::Request);
        assert_eq!(request.method(), Some("tools/call"));
        assert_eq!(request.params.unwrap().get(), r#"{"name":"x"}"#);

        let null_id = single(r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#);
        assert_eq!(null_id.kind(), Kind::Request);

        let note = single(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        assert_eq!(note.kind(), Kind::Notification);

        let response = single(r#"{"jsonrpc":"2.0","id":"a","result":{}}"#);
        assert_eq!(response.kind(), Kind::Response);
        let error = single(r#"{"jsonrpc":"2.0","id":"a","error":{"code":1,"message":"m"}}"#);
        assert_eq!(error.kind(), Kind::Response);

        // Members of the wrong type: kept whole, routed as unknown.
        let odd = single(r#"{"jsonrpc":"2.0","id":1,"method":42}"#);
        assert_eq!(odd.kind(), Kind::Unknown);
        assert_eq!(odd.raw, r#"{"jsonrpc":"2.0","id":1,"method":42}"#);
    }

    #[test]
    fn escaped_methods_are_read() {
        let request = single(r#"{"jsonrpc":"2.0","id":1,"method":"tools\/call"}"#);
        assert_eq!(request.method(), Some("tools/call"));
    }

    #[test]
    fn lines_that_are_not_messages() {
        assert!(matches!(parse(b"   \r"), Frame::Blank));
        assert!(matches!(parse(b"{not json"), Frame::Malformed(_)));
        assert!(matches!(parse(b"\xff\xfe"), Frame::Malformed(_)));
        assert!(matches!(parse(b"42"), Frame::Invalid));
        assert!(matches!(parse(b"[]"), Frame::Invalid));
        let Frame::Batch(elements) = parse(br#"[{"jsonrpc":"2.0","method":"a"}, 1]"#) else {
            panic!("not a batch");
        };
        assert_eq!(elements.len(), 2);
        assert!(elements[0].is_ok());
        assert_eq!(elements[1].as_ref().unwrap_err().get(), "1");
    }
}
