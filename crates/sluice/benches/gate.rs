//! The cost of the pipeline itself: a whole gate call that does not wait,
//! with an executor that answers at once; and lookups among 100,000 keyed
//! scopes, with the memory an idle scope takes.
//!
//! `cargo bench -p sluice --bench gate`
#![allow(clippy::unwrap_used, missing_docs)]

use std::hint::black_box;
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;
use sluice::{Call, CredentialConfig, Gate, GateConfig, Route, ToolConfig, executor_fn};

const SCOPES: usize = 100_000;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}

/// Limits far above the load: every call goes straight through.
fn roomy() -> CredentialConfig {
    CredentialConfig::with_rate("1000000/1ms".parse().unwrap())
        .max_in_flight(1_000_000)
        .queue(1_000_000)
}

fn no_op() -> impl sluice::Executor<Payload = serde_json::Value> {
    executor_fn(|_request| async { Ok(http::Response::new(Bytes::from_static(b"{}"))) })
}

fn gate_call(c: &mut Criterion) {
    let rt = runtime();
    let config = GateConfig::default()
        .credential("k", roomy())
        .tool("write", ToolConfig::write("k"))
        .tool("read", ToolConfig::read("k"));
    let gate = rt.block_on(async { Gate::builder(config, no_op()).seed(1).build().unwrap() });
    let mut group = c.benchmark_group("gate call, no wait");
    group.bench_function("write (admission, permit, reservation, outcome)", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    black_box(gate.call(Call::new("write", json!({"id": 1}))).await);
                }
                start.elapsed()
            })
        })
    });
    group.bench_function("read in its own turn (plus single-flight)", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    black_box(gate.call(Call::new("read", json!({"id": 1}))).await);
                }
                start.elapsed()
            })
        })
    });
    let turn = gate.turn();
    group.bench_function("read answered by the turn's cache", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    black_box(turn.call(Call::new("read", json!({"id": 1}))).await);
                }
                start.elapsed()
            })
        })
    });
    group.finish();
}

/// Resident memory of this process, in bytes (Linux).
fn rss() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4_096)
}

fn routed(credential: usize) -> Call {
    let route = Route {
        credential: format!("k{credential}"),
        read: false,
        idempotent: false,
        deadline: None,
    };
    Call::routed("call", route, json!({}))
}

fn keyed_scopes(c: &mut Criterion) {
    let rt = runtime();
    let config = (0..SCOPES).fold(GateConfig::default(), |config, i| {
        config.credential(&format!("k{i}"), roomy())
    });
    let gate = rt.block_on(async { Gate::builder(config, no_op()).seed(1).build().unwrap() });
    let before = rss();
    // Touch every credential once: its scope is created on first use.
    rt.block_on(async {
        for i in 0..SCOPES {
            black_box(gate.call(routed(i)).await);
        }
    });
    if let (Some(before), Some(after)) = (before, rss()) {
        let per_scope = after.saturating_sub(before) / SCOPES as u64;
        println!(
            "memory per idle scope: {per_scope} bytes ({SCOPES} scopes, RSS {before} -> {after})"
        );
    }
    let one = rt.block_on(async {
        let config = GateConfig::default().credential("k0", roomy());
        Gate::builder(config, no_op()).seed(1).build().unwrap()
    });
    let mut group = c.benchmark_group("keyed scopes");
    group.measurement_time(Duration::from_secs(4));
    let mut i = 0usize;
    group.bench_function("call on one of 100,000 credentials", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    i = (i + 7_919) % SCOPES;
                    black_box(gate.call(routed(i)).await);
                }
                start.elapsed()
            })
        })
    });
    group.bench_function("call on the only credential", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    black_box(one.call(routed(0)).await);
                }
                start.elapsed()
            })
        })
    });
    group.finish();
}

criterion_group!(benches, gate_call, keyed_scopes);
criterion_main!(benches);
