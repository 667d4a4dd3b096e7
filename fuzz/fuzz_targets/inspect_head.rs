//! Fuzzes `sluice inspect`'s input: `sluice::signal::parse_head` over any bytes.
//!
//! Beyond "no panic": a parsed head round-trips (printed back as a response
//! head and parsed again, it has the same status, reason and headers, and
//! nothing is skipped), and the signal inspect reads from it keeps its
//! invariants, as in `signal_read`.
#![no_main]

use std::time::{Duration, UNIX_EPOCH};

use libfuzzer_sys::fuzz_target;
use sluice::signal::{self, Head, MAX_DELAY, parse_head};

/// 2023-11-14T22:13:20Z: inspect's `--now` when the head has no `Date`.
const RECEIVED: u64 = 1_700_000_000;

/// The head as `curl -sD -` would print it.
fn print(head: &Head) -> Vec<u8> {
    let mut out = format!("HTTP/1.1 {} {}\r\n", head.status.as_str(), head.reason).into_bytes();
    for (name, value) in &head.headers {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out
}

fuzz_target!(|data: &[u8]| {
    let Ok(head) = parse_head(data) else {
        return;
    };
    assert!((100..=999).contains(&head.status.as_u16()), "{head:?}");
    assert!(head.reason.chars().count() <= 200, "{head:?}");

    let again = parse_head(&print(&head)).expect("a printed head parses");
    assert_eq!(again.status, head.status);
    assert_eq!(again.reason, head.reason);
    assert_eq!(again.headers, head.headers);
    assert_eq!(again.skipped, 0, "{head:?}");

    let received = UNIX_EPOCH + Duration::from_secs(RECEIVED);
    let signal = signal::read(head.status, &head.headers, received);
    assert!(
        signal
            .retry_after
            .as_ref()
            .is_none_or(|w| w.delay <= MAX_DELAY)
    );
    for scope in &signal.scopes {
        assert!(
            !scope.name.is_empty() && scope.name.len() <= 64,
            "{scope:?}"
        );
        assert!(scope.reset.is_none_or(|r| r <= MAX_DELAY), "{scope:?}");
    }
    if let Some(wait) = signal.wait() {
        assert!(wait.delay <= MAX_DELAY, "{wait:?}");
    }
});
