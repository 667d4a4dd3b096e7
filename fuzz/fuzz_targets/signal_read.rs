//! Fuzzes `sluice::signal::read` over arbitrary header names and values.
//!
//! The input reads like a response head: a first line whose leading three
//! digits are the status (429 otherwise), then `name: value` lines. Lines
//! that are not a valid header are skipped, as a client would never see
//! them. Beyond "no panic", every signal must keep its invariants.
#![no_main]

use std::time::{Duration, UNIX_EPOCH};

use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use libfuzzer_sys::fuzz_target;
use sluice::signal::{self, MAX_DELAY};

/// 2023-11-14T22:13:20Z: used only when the input has no valid `Date`.
const RECEIVED: u64 = 1_700_000_000;

fn status(line: &[u8]) -> StatusCode {
    line.get(..3)
        .and_then(|digits| std::str::from_utf8(digits).ok())
        .and_then(|digits| digits.parse::<u16>().ok())
        .and_then(|code| StatusCode::from_u16(code).ok())
        .unwrap_or(StatusCode::TOO_MANY_REQUESTS)
}

fn header(line: &[u8]) -> Option<(HeaderName, HeaderValue)> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let colon = line.iter().position(|b| *b == b':')?;
    let (name, value) = line.split_at(colon);
    let value = value.get(1..)?.trim_ascii();
    Some((
        HeaderName::from_bytes(name).ok()?,
        HeaderValue::from_bytes(value).ok()?,
    ))
}

fuzz_target!(|data: &[u8]| {
    let mut lines = data.split(|b| *b == b'\n');
    let status = status(lines.next().unwrap_or_default());
    let mut headers = HeaderMap::new();
    for (name, value) in lines.filter_map(header) {
        if headers.try_append(name, value).is_err() {
            break;
        }
    }
    let received = UNIX_EPOCH + Duration::from_secs(RECEIVED);
    let signal = signal::read(status, &headers, received);

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
