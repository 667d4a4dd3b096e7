//! Secrets masked in what the proxy returns to its client (issue 19), with
//! the sidecar's scrubber: each stdio message whole as it is written
//! (`outbox.rs`), and `--listen`'s responses by the sidecar's layer
//! (`http/listen.rs`), which masks headers, whole bodies, and streamed
//! bodies across chunk boundaries.

use sluice_http::scrub::Scrubber;

/// `message` with every secret masked; unchanged, without a copy, when
/// there is no scrubber or no secret in it.
pub(crate) fn line(scrubber: Option<&Scrubber>, message: Vec<u8>) -> Vec<u8> {
    match scrubber.and_then(|scrubber| scrubber.bytes(&message)) {
        Some(masked) => masked,
        None => message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_is_masked_whole_and_stays_json() {
        let scrubber = Scrubber::new(["ghp-secret-123456"]).unwrap();
        let message =
            br#"{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"bad key ghp-secret-123456"}]}}"#;
        let masked = line(Some(&scrubber), message.to_vec());
        let parsed: serde_json::Value = serde_json::from_slice(&masked).unwrap();
        assert_eq!(parsed["result"]["content"][0]["text"], "bad key ***");
        let clean = b"{}".to_vec();
        let pointer = clean.as_ptr();
        let kept = line(Some(&scrubber), clean);
        assert_eq!(kept.as_ptr(), pointer);
        assert_eq!(line(None, message.to_vec()), message);
    }
}
