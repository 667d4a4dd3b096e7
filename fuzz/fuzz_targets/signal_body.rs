//! Fuzzes the body reader: `sluice::signal::read_with_body` over any body.
//!
//! The first byte picks the status (a rejection status, a 200 or a 5xx),
//! the rest is the body, read as a credential marked GraphQL reads a JSON
//! 200. Beyond "no panic", the signal keeps its invariants: no wait past
//! `MAX_DELAY`, a concurrency or quota finding only on a rejection.
#![no_main]

use std::time::{Duration, UNIX_EPOCH};

use http::{HeaderMap, StatusCode};
use libfuzzer_sys::fuzz_target;
use sluice::signal::{self, MAX_DELAY};

/// 2023-11-14T22:13:20Z.
const RECEIVED: u64 = 1_700_000_000;

const STATUSES: [u16; 8] = [200, 400, 403, 404, 429, 500, 503, 529];

fuzz_target!(|data: &[u8]| {
    let (first, body) = data.split_first().unwrap_or((&0, &[]));
    let status = StatusCode::from_u16(STATUSES[usize::from(*first) % STATUSES.len()])
        .unwrap_or(StatusCode::TOO_MANY_REQUESTS);
    let received = UNIX_EPOCH + Duration::from_secs(RECEIVED);
    let signal = signal::read_with_body(status, &HeaderMap::new(), body, received);
    if let Some(wait) = signal.wait() {
        assert!(wait.delay <= MAX_DELAY, "{wait:?}");
    }
    if let Some(cost) = &signal.cost {
        assert!(cost.delay <= MAX_DELAY, "{cost:?}");
    }
    if signal.concurrency || signal.quota || signal.body.is_some() {
        assert!(signal.throttled, "{signal:?}");
    }
});
