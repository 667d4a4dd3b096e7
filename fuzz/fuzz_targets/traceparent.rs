//! Fuzzes the W3C `traceparent` reader, `TraceParent::parse`, with what a
//! caller sends on `/v1/turns`, `/proxy` and in MCP `_meta`.
//!
//! Beyond "no panic": an accepted header has non-zero ids, and writing
//! it back gives version 00 with the same ids and sampled flag, which
//! reads back to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_http::trace::TraceParent;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Some(parent) = TraceParent::parse(text) else {
        return;
    };
    assert_ne!(parent.trace_id, [0; 16]);
    assert_ne!(parent.span_id, [0; 8]);
    let written = parent.header();
    let written = written.to_str().expect("hex and dashes");
    assert!(written.starts_with("00-"), "{written}");
    assert_eq!(TraceParent::parse(written), Some(parent), "{text:?} -> {written}");
});
