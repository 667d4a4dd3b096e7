//! The longest message taken from a peer (`[mcp] max_message_size`): reading lines without holding a larger one, and what a refused one said about itself.
//!
//! A line longer than the limit is never held whole: its first bytes are
//! kept (to tell a request from a notification and to find its id, so a
//! request can be refused with an error under that id), and the rest is
//! skipped up to the next newline. Reading goes on with the next line.

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};

/// How much of a refused line is kept to learn what it was.
const HEAD: usize = 64 * 1024;
/// How much of its end is kept: some writers put `id` last.
const TAIL: usize = 256;

/// The most bytes queued for a peer that is not reading: room for two
/// messages of the largest size, and never less than 1 MiB.
pub(crate) fn queue_cap(max_message_size: usize) -> usize {
    max_message_size.saturating_mul(2).max(1 << 20)
}

/// One line, or what is left of one that was too long.
#[derive(Debug)]
pub(crate) enum Line<'a> {
    /// A whole line, without its newline.
    Whole(&'a [u8]),
    /// A line over the limit: its first and last bytes.
    TooLong(Refused),
}

/// What is known of a line over the limit.
#[derive(Debug, Default)]
pub(crate) struct Refused {
    /// Its length in bytes (without the newline).
    pub(crate) len: usize,
    head: Vec<u8>,
    tail: Vec<u8>,
}

/// What a refused line's first and last bytes say it was.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Shape {
    /// Its `id` (JSON text), when one was found.
    pub(crate) id: Option<String>,
    /// It has a `method` (a request, or a notification when it has no id).
    pub(crate) method: bool,
}

impl Refused {
    /// Reads the top-level `id` and whether there is a `method`, from the
    /// head (members before the big one) or the tail (`"id":…}` last).
    pub(crate) fn shape(&self) -> Shape {
        let mut shape = scan_head(&self.head);
        if shape.id.is_none() {
            shape.id = last_member_id(&self.tail);
        }
        shape
    }
}

/// Reads newline-delimited messages of at most `max` bytes until the
/// stream ends or fails; a longer line is passed on as [`Line::TooLong`].
pub(crate) async fn read_lines<R>(
    peer: &'static str,
    reader: R,
    max: usize,
    mut each: impl FnMut(Line<'_>),
) where
    R: AsyncRead + Unpin,
{
    let mut reader = BufReader::with_capacity(64 * 1024, reader);
    let mut line = Vec::new();
    // Set while skipping the rest of a line over the limit.
    let mut refused: Option<Refused> = None;
    loop {
        let buffer = match reader.fill_buf().await {
            Ok(buffer) => buffer,
            Err(error) => {
                tracing::warn!(peer, %error, "cannot read; treating it as the end of the stream");
                return;
            }
        };
        if buffer.is_empty() {
            // The end: a last line without a newline still counts.
            match refused.take() {
                Some(refused) => each(Line::TooLong(refused)),
                None if !line.is_empty() => each(Line::Whole(&line)),
                None => {}
            }
            return;
        }
        let newline = buffer.iter().position(|b| *b == b'\n');
        let chunk = &buffer[..newline.unwrap_or(buffer.len())];
        match refused.as_mut() {
            Some(refused) => refused.extend(chunk),
            None if line.len() + chunk.len() > max => {
                let mut start = Refused::default();
                start.extend(&line);
                start.extend(chunk);
                line.clear();
                line.shrink_to(HEAD);
                refused = Some(start);
            }
            None => line.extend_from_slice(chunk),
        }
        let used = chunk.len() + usize::from(newline.is_some());
        reader.consume(used);
        if newline.is_some() {
            match refused.take() {
                Some(refused) => each(Line::TooLong(refused)),
                None => {
                    each(Line::Whole(&line));
                    line.clear();
                }
            }
        }
    }
}

impl Refused {
    fn extend(&mut self, bytes: &[u8]) {
        self.len += bytes.len();
        let room = HEAD.saturating_sub(self.head.len());
        self.head.extend_from_slice(&bytes[..room.min(bytes.len())]);
        self.tail
            .extend_from_slice(&bytes[bytes.len().saturating_sub(TAIL)..]);
        if self.tail.len() > TAIL {
            self.tail.drain(..self.tail.len() - TAIL);
        }
    }
}

/// Walks the members of the top-level object in `head` (strings and
/// nesting followed, so a nested `"id"` is not the message's) until the
/// head ends.
fn scan_head(head: &[u8]) -> Shape {
    let mut shape = Shape {
        id: None,
        method: false,
    };
    let mut depth = 0usize;
    let mut i = 0;
    // At depth 1, the key just read (waiting for its value).
    let mut key: Option<Vec<u8>> = None;
    let mut expect_key = false;
    while i < head.len() {
        match head[i] {
            b'"' => {
                let Some(end) = string_end(head, i) else {
                    return shape;
                };
                let text = &head[i + 1..end];
                if depth == 1 && expect_key {
                    key = Some(text.to_vec());
                    expect_key = false;
                } else if depth == 1 && key.as_deref() == Some(b"id") {
                    shape.id = Some(String::from_utf8_lossy(&head[i..=end]).into_owned());
                    key = None;
                } else if depth == 1 {
                    key = None;
                }
                i = end + 1;
                continue;
            }
            b'{' | b'[' => {
                if depth == 1 && key.as_deref() == Some(b"method") {
                    key = None;
                }
                depth += 1;
                if depth == 1 {
                    expect_key = head[i] == b'{';
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            b',' if depth == 1 => expect_key = true,
            b':' if depth == 1 => {
                if key.as_deref() == Some(b"method") {
                    shape.method = true;
                }
                if key.as_deref() == Some(b"id") {
                    let value = scalar(&head[i + 1..]);
                    if let Some(value) = value {
                        shape.id = Some(value);
                        key = None;
                    }
                }
            }
            _ => {}
        }
        i += 1;
    }
    shape
}

/// The index of the quote closing the string that opens at `start`.
fn string_end(bytes: &[u8], start: usize) -> Option<usize> {
    let mut i = start + 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'"' => return Some(i),
            _ => i += 1,
        }
    }
    None
}

/// A number or `null` at the start of `bytes` (after blanks), as written.
/// A string id is read by the caller's string scan.
fn scalar(bytes: &[u8]) -> Option<String> {
    let start = bytes.iter().position(|b| !b.is_ascii_whitespace())?;
    let rest = &bytes[start..];
    let len = rest
        .iter()
        .position(|b| !(b.is_ascii_digit() || matches!(b, b'-' | b'+' | b'.' | b'e' | b'E')))
        .unwrap_or(rest.len());
    if len > 0 && len < rest.len() {
        return Some(String::from_utf8_lossy(&rest[..len]).into_owned());
    }
    rest.starts_with(b"null").then(|| "null".to_owned())
}

/// `"id": VALUE }` as the object's last member, read from its end.
fn last_member_id(tail: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(tail).ok().or_else(|| {
        // The tail may begin inside a multi-byte character.
        (1..4).find_map(|skip| std::str::from_utf8(tail.get(skip..)?).ok())
    })?;
    let body = text.trim_end().strip_suffix('}')?.trim_end();
    let at = body.rfind("\"id\"")?;
    let value = body[at + 4..].trim_start().strip_prefix(':')?.trim();
    let simple = !value.is_empty()
        && (value == "null"
            || value.bytes().all(|b| b.is_ascii_digit() || b == b'-')
            || (value.len() >= 2
                && value.starts_with('"')
                && value.ends_with('"')
                && !value[1..value.len() - 1].contains('"')));
    simple.then(|| value.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn lines(input: &[u8], max: usize) -> Vec<Result<String, (usize, Shape)>> {
        let mut out = Vec::new();
        read_lines("test", input, max, |line| {
            out.push(match line {
                Line::Whole(line) => Ok(String::from_utf8_lossy(line).into_owned()),
                Line::TooLong(refused) => Err((refused.len, refused.shape())),
            })
        })
        .await;
        out
    }

    #[tokio::test]
    async fn long_lines_are_refused_and_reading_goes_on() {
        let big = format!(
            r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"x":"{}"}}}}"#,
            "a".repeat(300_000)
        );
        let input = format!("{{\"a\":1}}\n{big}\n{{\"b\":2}}\nlast");
        let got = lines(input.as_bytes(), 1_000).await;
        assert_eq!(got.len(), 4);
        assert_eq!(got[0].as_ref().unwrap(), r#"{"a":1}"#);
        let (len, shape) = got[1].as_ref().unwrap_err();
        assert_eq!(*len, big.len());
        assert_eq!(shape.id.as_deref(), Some("7"));
        assert!(shape.method);
        assert_eq!(got[2].as_ref().unwrap(), r#"{"b":2}"#);
        assert_eq!(got[3].as_ref().unwrap(), "last");
        // Exactly the limit is fine.
        let got = lines(b"12345\n", 5).await;
        assert_eq!(got[0].as_ref().unwrap(), "12345");
    }

    #[test]
    fn shapes_of_refused_lines() {
        let shape = |text: &str| {
            let mut refused = Refused::default();
            refused.extend(text.as_bytes());
            refused.shape()
        };
        let long = "x".repeat(HEAD * 2);
        // id first, a string id, a nested id that is not the message's.
        assert_eq!(
            shape(r#"{"jsonrpc":"2.0","id":"abc","method":"m"}"#),
            Shape {
                id: Some(r#""abc""#.to_owned()),
                method: true
            }
        );
        let nested = format!(r#"{{"method":"m","params":{{"id":5,"big":"{long}"}}}}"#);
        assert_eq!(
            shape(&nested),
            Shape {
                id: None,
                method: true
            }
        );
        // id last, after the big member (the head ends inside it).
        let last =
            format!(r#"{{"jsonrpc":"2.0","method":"m","params":{{"big":"{long}"}},"id":42}}"#);
        assert_eq!(shape(&last).id.as_deref(), Some("42"));
        // A response: no method.
        let response =
            format!(r#"{{"jsonrpc":"2.0","id":"sluice-1-2","result":{{"t":"{long}"}}}}"#);
        assert_eq!(
            shape(&response),
            Shape {
                id: Some(r#""sluice-1-2""#.to_owned()),
                method: false
            }
        );
        // Garbage says nothing.
        assert_eq!(
            shape(&long),
            Shape {
                id: None,
                method: false
            }
        );
        let escaped = r#"{"method":"a\"id\":3","id":null}"#;
        assert_eq!(shape(escaped).id.as_deref(), Some("null"));
    }

    proptest::proptest! {
        /// Any bytes, cut anywhere: reading their shape never panics.
        #[test]
        fn any_refused_line_has_a_shape(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..2_000), split in 0usize..2_000) {
            let mut refused = Refused::default();
            let split = split.min(bytes.len());
            refused.extend(&bytes[..split]);
            refused.extend(&bytes[split..]);
            proptest::prop_assert_eq!(refused.len, bytes.len());
            let _ = refused.shape();
        }
    }
}
