//! What the engine's benches share: a runtime, limits that never bind, an
//! executor that answers at once, and a million idle credentials.

// Each bench compiles this module on its own and uses a part of it.
#![allow(dead_code)]

use std::hint::black_box;

use bytes::Bytes;
use serde_json::json;
use sluice::{Call, CredentialConfig, Executor, Gate, GateConfig, Route, executor_fn};

/// Idle credentials in the keyed-scope cases.
const SCOPES: usize = 1_000_000;

/// `SLUICE_BENCH_SCOPES` shrinks the keyed scopes, for a profile under
/// valgrind of the other cases (their figures are unchanged by it).
pub(crate) fn scopes() -> usize {
    std::env::var("SLUICE_BENCH_SCOPES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(SCOPES)
}

pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}

/// Limits far above the load: every call goes straight through.
pub(crate) fn roomy() -> CredentialConfig {
    CredentialConfig::with_rate("1000000/1ms".parse().unwrap())
        .max_in_flight(1_000_000)
        .queue(1_000_000)
}

pub(crate) fn no_op() -> impl Executor<Payload = serde_json::Value> {
    executor_fn(|_request| async { Ok(http::Response::new(Bytes::from_static(b"{}"))) })
}

/// A call on credential `k{credential}`.
pub(crate) fn routed(credential: usize) -> Call {
    let route = Route {
        credential: format!("k{credential}"),
        read: false,
        idempotent: false,
        deadline: None,
    };
    Call::routed("call", route, json!({}))
}

/// A gate of `scopes` credentials, each called once (a credential's scope
/// is made on its first call, and then stays idle), and a gate of only
/// the first of them.
pub(crate) fn idle_credentials(
    rt: &tokio::runtime::Runtime,
    scopes: usize,
) -> (
    Gate<impl Executor<Payload = serde_json::Value>>,
    Gate<impl Executor<Payload = serde_json::Value>>,
) {
    let config = (0..scopes).fold(GateConfig::default(), |config, i| {
        config.credential(&format!("k{i}"), roomy())
    });
    let many = rt.block_on(async { Gate::builder(config, no_op()).seed(1).build().unwrap() });
    rt.block_on(async {
        for i in 0..scopes {
            black_box(many.call(routed(i)).await);
        }
    });
    let one = rt.block_on(async {
        let config = GateConfig::default().credential("k0", roomy());
        Gate::builder(config, no_op()).seed(1).build().unwrap()
    });
    (many, one)
}
