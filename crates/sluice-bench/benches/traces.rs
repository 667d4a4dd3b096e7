//! What traces cost a call (issue 53): the gate bench's non-waiting write,
//! wrapped as every front end wraps a call (`sluice_http::trace::traced`,
//! the engine's events through `TraceObserver`), with traces off, on but
//! not sampled, and on and sampled.
//!
//! `cargo bench -p sluice-bench --bench traces`. The sampled case exports
//! to a port nothing listens on: the exporter thread fails its posts and,
//! at this rate, its 2,048-span queue is full, so most spans are dropped
//! at the queue. What is measured is the call's own path: the span built
//! and queued (or dropped), never the export.
#![allow(clippy::unwrap_used, missing_docs)]

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;
use sluice::{Call, Gate, GateConfig, ToolConfig};
use sluice_config::Telemetry;
use sluice_http::trace::{TraceObserver, TraceParent, Tracer, traced};

mod common;

use common::{no_op, roomy, runtime};

fn tracer(sampler: &str) -> Arc<Tracer> {
    let sampler = sampler.to_owned();
    let env = move |name: &str| match name {
        "OTEL_EXPORTER_OTLP_ENDPOINT" => Some("http://127.0.0.1:9".to_owned()),
        "OTEL_TRACES_SAMPLER" => Some(sampler.clone()),
        _ => None,
    };
    Tracer::start(&Telemetry::default().resolve(&env).unwrap().unwrap()).unwrap()
}

fn traced_write(c: &mut Criterion) {
    let rt = runtime();
    let config = || {
        GateConfig::default()
            .credential("k", roomy())
            .tool("write", ToolConfig::write("k"))
    };
    let parent = TraceParent::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
    let mut group = c.benchmark_group("gate call, no wait, traced");
    for (name, tracer) in [
        ("write, traces off", None),
        ("write, traces on, not sampled", Some(tracer("always_off"))),
        ("write, traces on, sampled", Some(tracer("always_on"))),
    ] {
        let gate = rt.block_on(async {
            let mut builder = Gate::builder(config(), no_op()).seed(1);
            if let Some(observer) = TraceObserver::wrap(tracer.as_ref(), None) {
                builder = builder.observer(observer);
            }
            builder.build().unwrap()
        });
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let start = Instant::now();
                    for _ in 0..iters {
                        let call = gate.call(Call::new("write", json!({"id": 1})));
                        black_box(traced(tracer.as_ref(), parent, "write", Some("c1"), call).await);
                    }
                    start.elapsed()
                })
            })
        });
    }
    group.finish();
}

criterion_group!(benches, traced_write);
criterion_main!(benches);
