//! The cost of the pipeline itself: a whole gate call that does not wait,
//! with an executor that answers at once (with no rate-limit field, and
//! with GitHub's, as real APIs answer every request); reading a 200 with a small JSON
//! body for signals (issue 15: the fast path leaves such a body alone); and
//! lookups among 1,000,000 keyed scopes. (The memory an idle scope takes is
//! the `memory` bench's: a counting allocator. The resident set's growth
//! measured here once read 0 when the allocator reused what building the
//! configuration had freed.) The keyed scopes' ratio is also measured in
//! alternating batches: the `keyed_ratio` bench.
//!
//! `cargo bench -p sluice-bench --bench gate`: the gates are built on a
//! running (not paused) runtime, so every call reads the clock production
//! reads (the time-stamp counter).
#![allow(clippy::unwrap_used, missing_docs)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;
use sluice::{Call, Gate, GateConfig, ToolConfig, executor_fn};

mod common;

use common::{idle_credentials, no_op, roomy, routed, runtime, scopes};

fn gate_call(c: &mut Criterion) {
    let rt = runtime();
    let config = GateConfig::default()
        .credential("k", roomy())
        .tool("write", ToolConfig::write("k"))
        .tool("read", ToolConfig::read("k"));
    let gate = rt.block_on(async { Gate::builder(config, no_op()).seed(1).build().unwrap() });
    let mut group = c.benchmark_group("gate call, no wait");
    group.bench_function("write (admission, permit, reservation, outcome)", |b| {
        time_calls(b, &rt, || gate.call(Call::new("write", json!({"id": 1}))))
    });
    group.bench_function("read in its own turn (plus single-flight)", |b| {
        time_calls(b, &rt, || gate.call(Call::new("read", json!({"id": 1}))))
    });
    let turn = gate.turn();
    group.bench_function("read answered by the turn's cache", |b| {
        time_calls(b, &rt, || turn.call(Call::new("read", json!({"id": 1}))))
    });

    // The same, answered with what a search API returns: 20 results of
    // five fields each (about 2 KB). What the turn's cache keeps is shared,
    // so the answer's size should not be paid again on each read.
    let config = GateConfig::default()
        .credential("k", roomy())
        .tool("search", ToolConfig::read("k"))
        .tool("post", ToolConfig::write("k"));
    let gate = rt.block_on(async { Gate::builder(config, search_api()).seed(1).build().unwrap() });
    // Sent each time: every call's outcome holds the answer (kept as the
    // upstream's bytes until something reads it).
    group.bench_function("write, a 2 KB answer", |b| {
        time_calls(b, &rt, || gate.call(Call::new("post", json!({"id": 1}))))
    });
    let turn = gate.turn();
    group.bench_function("read answered by the turn's cache, a 2 KB answer", |b| {
        time_calls(b, &rt, || {
            turn.call(Call::new("search", json!({"q": "rust"})))
        })
    });

    // The same write, answered as GitHub's REST API answers every request:
    // its limit, what remains and when the window resets, for a resource
    // the credential's signals name as a scope of their own.
    let config = GateConfig::default()
        .credential("k", roomy())
        .tool("write", ToolConfig::write("k"));
    let gate = rt.block_on(async {
        Gate::builder(config, rate_limited_api())
            .seed(1)
            .build()
            .unwrap()
    });
    group.bench_function("write, an answer with rate-limit headers", |b| {
        time_calls(b, &rt, || gate.call(Call::new("write", json!({"id": 1}))))
    });
    group.finish();
}

/// Times `iters` calls, each awaited before the next is made.
fn time_calls<F, Fut>(b: &mut criterion::Bencher<'_>, rt: &tokio::runtime::Runtime, call: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future,
{
    b.iter_custom(|iters| {
        rt.block_on(async {
            let start = Instant::now();
            for _ in 0..iters {
                black_box(call().await);
            }
            start.elapsed()
        })
    })
}

/// GitHub's rate-limit headers on an accepted request: 4,999 of 5,000
/// left in the `core` resource's hour.
fn rate_limit_headers() -> http::HeaderMap {
    let reset = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 3_600;
    let mut headers = http::HeaderMap::new();
    for (name, value) in [
        ("content-type", "application/json".to_string()),
        ("x-ratelimit-limit", "5000".to_string()),
        ("x-ratelimit-remaining", "4999".to_string()),
        ("x-ratelimit-reset", reset.to_string()),
        ("x-ratelimit-used", "1".to_string()),
        ("x-ratelimit-resource", "core".to_string()),
    ] {
        headers.insert(
            http::HeaderName::from_static(name),
            http::HeaderValue::from_str(&value).unwrap(),
        );
    }
    headers
}

/// The fields of an answer of GitHub's REST API: its rate-limit fields
/// among twenty that carry no signal.
fn github_answer_headers() -> http::HeaderMap {
    let mut headers = rate_limit_headers();
    for (name, value) in [
        ("server", "github.com"),
        ("date", "Tue, 05 Mar 2024 14:00:00 GMT"),
        ("cache-control", "private, max-age=60, s-maxage=60"),
        ("vary", "Accept, Authorization, Cookie, X-GitHub-OTP"),
        ("etag", "W/\"8f6b1e0c2d4a\""),
        ("last-modified", "Tue, 05 Mar 2024 13:58:12 GMT"),
        ("x-oauth-scopes", "repo, read:org"),
        ("x-accepted-oauth-scopes", "repo"),
        (
            "github-authentication-token-expiration",
            "2024-06-01 00:00:00 UTC",
        ),
        ("x-github-media-type", "github.v3; format=json"),
        ("x-github-api-version-selected", "2022-11-28"),
        (
            "access-control-expose-headers",
            "ETag, Link, Location, Retry-After",
        ),
        ("access-control-allow-origin", "*"),
        (
            "strict-transport-security",
            "max-age=31536000; includeSubdomains; preload",
        ),
        ("x-frame-options", "deny"),
        ("x-content-type-options", "nosniff"),
        ("x-xss-protection", "0"),
        (
            "referrer-policy",
            "origin-when-cross-origin, strict-origin-when-cross-origin",
        ),
        ("content-security-policy", "default-src 'none'"),
        ("x-github-request-id", "C0DE:1F2E:3A4B5C:6D7E8F:65E7256C"),
    ] {
        headers.insert(
            http::HeaderName::from_static(name),
            http::HeaderValue::from_static(value),
        );
    }
    headers
}

/// An API that answers every request with [`rate_limit_headers`].
fn rate_limited_api() -> impl sluice::Executor<Payload = serde_json::Value> {
    let headers = rate_limit_headers();
    executor_fn(move |_request| {
        let mut response = http::Response::new(Bytes::from_static(SMALL_JSON));
        *response.headers_mut() = headers.clone();
        async move { Ok(response) }
    })
}

/// A search API's answer: 20 results of five fields each.
fn search_api() -> impl sluice::Executor<Payload = serde_json::Value> {
    let results: Vec<_> = (0..20)
        .map(|i| {
            json!({"id": i, "title": format!("result number {i}"), "url": format!("https://example.com/items/{i}"),
                   "score": 0.5 + f64::from(i) / 100.0, "tags": ["alpha", "beta"]})
        })
        .collect();
    let body = Bytes::from(serde_json::to_vec(&json!({"total": 20, "results": results})).unwrap());
    executor_fn(move |_request| {
        let body = body.clone();
        async move {
            let mut response = http::Response::new(body);
            response.headers_mut().insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("application/json"),
            );
            Ok(response)
        }
    })
}

/// A 200 with a small JSON body, as most API answers are.
const SMALL_JSON: &[u8] = br#"{"id":42,"name":"octocat","items":[1,2,3],"next":null}"#;

fn json_ok() -> impl sluice::Executor<Payload = serde_json::Value> {
    executor_fn(|_request| async {
        let mut response = http::Response::new(Bytes::from_static(SMALL_JSON));
        response.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json"),
        );
        Ok(response)
    })
}

/// Issue 15's fast path: for a 200 with a small JSON body, reading signals
/// with the body reader costs what reading the headers alone did, unless the
/// credential is marked GraphQL (then the body is parsed, on purpose).
fn body_signals(c: &mut Criterion) {
    use sluice::signal::{self, BodySignals};
    let mut headers = http::HeaderMap::new();
    headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    headers.insert(
        http::header::DATE,
        http::HeaderValue::from_static("Tue, 05 Mar 2024 14:00:00 GMT"),
    );
    let status = http::StatusCode::OK;
    let now = std::time::SystemTime::now();
    let read = |mode: BodySignals| {
        let body: &[u8] = if signal::wants_body(status, &headers, mode) {
            SMALL_JSON
        } else {
            &[]
        };
        signal::read_with_body(status, &headers, body, now)
    };
    let mut group = c.benchmark_group("signals of a 200 with a small JSON body");
    group.bench_function("headers only (the reader before body signals)", |b| {
        b.iter(|| black_box(signal::read(status, black_box(&headers), now)))
    });
    group.bench_function("with the body reader (body_signals = errors)", |b| {
        b.iter(|| black_box(read(black_box(BodySignals::Errors))))
    });
    group.bench_function("with the body reader (body_signals = graphql)", |b| {
        b.iter(|| black_box(read(black_box(BodySignals::Graphql))))
    });
    let limited = rate_limit_headers();
    group.bench_function("headers with GitHub's rate-limit fields", |b| {
        b.iter(|| black_box(signal::read(status, black_box(&limited), now)))
    });
    let whole = github_answer_headers();
    group.bench_function("GitHub's whole answer's headers (26 fields)", |b| {
        b.iter(|| black_box(signal::read(status, black_box(&whole), now)))
    });
    group.finish();

    let rt = runtime();
    let make = |mode: BodySignals| {
        let config = GateConfig::default()
            .credential("k", roomy().body_signals(mode))
            .tool("write", ToolConfig::write("k"));
        rt.block_on(async { Gate::builder(config, json_ok()).seed(1).build().unwrap() })
    };
    let mut group = c.benchmark_group("gate call, a 200 with a small JSON body");
    for (name, mode) in [
        ("write (body_signals = errors)", BodySignals::Errors),
        ("write (body_signals = graphql)", BodySignals::Graphql),
    ] {
        let gate = make(mode);
        group.bench_function(name, |b| {
            time_calls(b, &rt, || gate.call(Call::new("write", json!({"id": 1}))))
        });
    }
    group.finish();
}

fn keyed_scopes(c: &mut Criterion) {
    let rt = runtime();
    let scopes = scopes();
    let (gate, one) = idle_credentials(&rt, scopes);
    let mut group = c.benchmark_group("keyed scopes");
    group.measurement_time(Duration::from_secs(4));
    let mut i = 0usize;
    group.bench_function("call on one of 1,000,000 idle credentials", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    i = (i + 7_919) % scopes;
                    black_box(gate.call(routed(i)).await);
                }
                start.elapsed()
            })
        })
    });
    group.bench_function("call on the only credential", |b| {
        time_calls(b, &rt, || one.call(routed(0)))
    });
    group.finish();
}

criterion_group!(benches, gate_call, body_signals, keyed_scopes);
criterion_main!(benches);
