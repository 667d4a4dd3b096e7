//! The W3C `traceparent` header (Trace Context, level 1): parsed from a
//! caller, written for an upstream. Pure functions of their input.

use http::HeaderValue;

/// A trace's 16-byte id.
pub type TraceId = [u8; 16];
/// A span's 8-byte id.
pub type SpanId = [u8; 8];

/// The header's name, as sent upstream.
pub const TRACEPARENT: &str = "traceparent";

/// The span a call joins: its trace, its parent span, and whether the
/// caller records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceParent {
    /// The trace.
    pub trace_id: TraceId,
    /// The caller's span, the parent of ours.
    pub span_id: SpanId,
    /// The caller's `sampled` flag.
    pub sampled: bool,
}

impl TraceParent {
    /// `00-<32 hex>-<16 hex>-<2 hex>`; `None` for anything else, as the
    /// specification says to ignore a header it cannot read. A later
    /// version is read by its first four fields (§3.2.4).
    pub fn parse(text: &str) -> Option<TraceParent> {
        let text = text.trim().as_bytes();
        // version, trace id, span id, flags and their three dashes.
        const LEN: usize = 2 + 1 + 32 + 1 + 16 + 1 + 2;
        let head = text.get(..LEN)?;
        let version = hex_byte(&head[0..2])?;
        // ff is forbidden; version 00 has nothing after the flags, a
        // later one may, after a dash.
        match (version, text.get(LEN)) {
            (0xff, _) | (0, Some(_)) => return None,
            (_, Some(b'-') | None) => {}
            _ => return None,
        }
        if head[2] != b'-' || head[35] != b'-' || head[52] != b'-' {
            return None;
        }
        let mut trace_id = [0; 16];
        let mut span_id = [0; 8];
        hex_into(&head[3..35], &mut trace_id)?;
        hex_into(&head[36..52], &mut span_id)?;
        let flags = hex_byte(&head[53..55])?;
        // All-zero ids are invalid.
        if trace_id == [0; 16] || span_id == [0; 8] {
            return None;
        }
        Some(TraceParent {
            trace_id,
            span_id,
            sampled: flags & 1 == 1,
        })
    }

    /// A request's `traceparent` header, if it has a valid one.
    pub fn of_headers(headers: &http::HeaderMap) -> Option<TraceParent> {
        TraceParent::parse(headers.get(TRACEPARENT)?.to_str().ok()?)
    }

    /// The header value that names this span as the parent.
    pub fn header(&self) -> HeaderValue {
        let mut text = [0u8; 55];
        text[..3].copy_from_slice(b"00-");
        hex_write(&self.trace_id, &mut text[3..35]);
        text[35] = b'-';
        hex_write(&self.span_id, &mut text[36..52]);
        text[52] = b'-';
        text[53..].copy_from_slice(if self.sampled { b"01" } else { b"00" });
        // Only hex digits and dashes: always a valid header value.
        HeaderValue::from_bytes(&text).unwrap_or_else(|_| HeaderValue::from_static(""))
    }
}

/// Lowercase hex only, as the specification requires.
fn nibble(byte: u8) -> Option<u8> {
    match byte {
        b'0'..=b'9' => Some(byte - b'0'),
        b'a'..=b'f' => Some(byte - b'a' + 10),
        _ => None,
    }
}

fn hex_byte(two: &[u8]) -> Option<u8> {
    Some((nibble(two[0])? << 4) | nibble(two[1])?)
}

fn hex_into(text: &[u8], out: &mut [u8]) -> Option<()> {
    for (byte, pair) in out.iter_mut().zip(text.chunks_exact(2)) {
        *byte = hex_byte(pair)?;
    }
    Some(())
}

fn hex_write(bytes: &[u8], out: &mut [u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for (byte, pair) in bytes.iter().zip(out.chunks_exact_mut(2)) {
        pair[0] = DIGITS[usize::from(byte >> 4)];
        pair[1] = DIGITS[usize::from(byte & 0xf)];
    }
}

/// Lowercase hex of an id, for logs and tests.
pub fn hex(bytes: &[u8]) -> String {
    let mut out = vec![0; bytes.len() * 2];
    hex_write(bytes, &mut out);
    String::from_utf8(out).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn reads_and_writes_the_specification_example() {
        let parent = TraceParent::parse(EXAMPLE).unwrap();
        assert!(parent.sampled);
        assert_eq!(hex(&parent.trace_id), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(hex(&parent.span_id), "00f067aa0ba902b7");
        assert_eq!(parent.header(), EXAMPLE);
        let unsampled = TraceParent::parse(&EXAMPLE.replace("-01", "-00")).unwrap();
        assert!(!unsampled.sampled);
    }

    #[test]
    fn refuses_what_the_specification_refuses() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert_eq!(TraceParent::parse(bad), None, "{bad}");
        }
        // A later version may carry more after a dash.
        let later = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-more";
        assert!(TraceParent::parse(later).is_some());
    }
}
