//! A response body as the body profiles see it: JSON parsed within bounds, and the start of its text.

use std::sync::OnceLock;

use serde_json::Value;

/// Bodies longer than this are not parsed as JSON: an error object is small,
/// and parsing is the only cost that grows with the body.
pub const MAX_JSON_BYTES: usize = 64 * 1024;

/// Nesting deeper than this is not parsed as JSON. Every format read here is
/// at most five levels deep; serde_json's own limit (128) would also stop a
/// hostile body, but only after recursing into it.
pub const MAX_DEPTH: usize = 32;

/// How much of a body's start the phrase profiles look at: messages such as
/// "Please try again in 6.5s" come first.
pub const MAX_TEXT_BYTES: usize = 4 * 1024;

/// Longest array the profiles walk (`errors[]`, `details[]`).
pub(crate) const MAX_ITEMS: usize = 16;

/// One response body, read lazily: the JSON only when a profile asks.
#[derive(Debug)]
pub struct Body<'a> {
    /// The response's HTTP status.
    pub status: u16,
    bytes: &'a [u8],
    json: OnceLock<Option<Value>>,
    text: OnceLock<String>,
}

impl<'a> Body<'a> {
    /// A body of a response with `status`.
    pub fn new(status: u16, bytes: &'a [u8]) -> Self {
        Body {
            status,
            bytes,
            json: OnceLock::new(),
            text: OnceLock::new(),
        }
    }

    /// The body as JSON, if it is a JSON object or array within
    /// [`MAX_JSON_BYTES`] and [`MAX_DEPTH`].
    pub fn json(&self) -> Option<&Value> {
        self.json.get_or_init(|| parse_bounded(self.bytes)).as_ref()
    }

    /// The first [`MAX_TEXT_BYTES`] of the body as lowercase text (lossy).
    pub fn text(&self) -> &str {
        self.text.get_or_init(|| {
            let start = &self.bytes[..self.bytes.len().min(MAX_TEXT_BYTES)];
            String::from_utf8_lossy(start).to_lowercase()
        })
    }

    /// True for a 2xx response.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

fn parse_bounded(bytes: &[u8]) -> Option<Value> {
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace())?;
    if bytes.len() > MAX_JSON_BYTES || !matches!(first, b'{' | b'[') || too_deep(bytes) {
        return None;
    }
    serde_json::from_slice(bytes).ok()
}

/// True when brackets outside strings nest deeper than [`MAX_DEPTH`]: one
/// pass, no recursion, so a 100,000-deep body is refused in linear time.
fn too_deep(bytes: &[u8]) -> bool {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for &b in bytes {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return true;
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

/// The string at `pointer` (RFC 6901), if it is one.
pub(crate) fn str_at<'v>(value: &'v Value, pointer: &str) -> Option<&'v str> {
    value.pointer(pointer)?.as_str()
}

/// The first [`MAX_ITEMS`] elements of the array at `pointer`.
pub(crate) fn items<'v>(value: &'v Value, pointer: &str) -> impl Iterator<Item = &'v Value> {
    value
        .pointer(pointer)
        .and_then(Value::as_array)
        .into_iter()
        .flat_map(|items| items.iter().take(MAX_ITEMS))
}

/// A finite, non-negative number (integers and floats alike).
pub(crate) fn number(value: &Value) -> Option<f64> {
    value.as_f64().filter(|n| n.is_finite() && *n >= 0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_bodies_are_not_parsed() {
        let deep = "[".repeat(100_000);
        assert!(Body::new(429, deep.as_bytes()).json().is_none());
        let nested = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert!(Body::new(429, nested.as_bytes()).json().is_some());
        let big = format!("{{\"a\":\"{}\"}}", "x".repeat(MAX_JSON_BYTES));
        assert!(Body::new(429, big.as_bytes()).json().is_none());
        assert!(Body::new(429, b"  \"text\"").json().is_none());
        assert!(Body::new(429, b"{\"a\": [1, \"]]]]\"]}").json().is_some());
    }

    #[test]
    fn text_is_a_lowercase_prefix() {
        let body = format!("Try Again {}", "é".repeat(MAX_TEXT_BYTES));
        let body = Body::new(429, body.as_bytes());
        assert!(body.text().starts_with("try again"));
        assert!(body.text().len() <= 2 * MAX_TEXT_BYTES);
    }
}
