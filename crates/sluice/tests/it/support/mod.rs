//! Shared helpers for the engine's integration tests: a simulated upstream
//! on tokio's paused clock that records every request it receives.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use serde_json::Value;
use sluice::{
    CredentialConfig, Defaults, Executor, Gate, GateConfig, Request, ToolConfig, TransportError,
};
use tokio::time::Instant;

pub mod fake_executor;
pub mod http_executor;

/// One request the simulated server received.
#[derive(Debug, Clone)]
pub struct Record {
    /// Milliseconds since the server was created, on tokio's clock.
    pub t_ms: f64,
    pub tool: String,
    pub args: Value,
    pub attempt: u32,
    pub in_flight: usize,
}

/// What the server answers.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(&'static str, String)>,
    pub body: String,
    pub latency: Duration,
    /// Answer with a transport error instead.
    pub transport: Option<TransportError>,
}

impl Reply {
    pub fn ok(latency_ms: u64) -> Self {
        Reply {
            status: 200,
            headers: vec![],
            body: "{\"ok\":true}".into(),
            latency: Duration::from_millis(latency_ms),
            transport: None,
        }
    }

    pub fn status(status: u16) -> Self {
        Reply {
            status,
            ..Reply::ok(0)
        }
    }

    pub fn header(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.headers.push((name, value.into()));
        self
    }

    pub fn latency_ms(mut self, ms: u64) -> Self {
        self.latency = Duration::from_millis(ms);
        self
    }
}

/// Answers request `n` (from 1), arriving with `in_flight` requests in flight (itself included).
type Responder = dyn Fn(usize, usize, &Request<Value>) -> Reply + Send + Sync;

/// The simulated upstream.
pub struct Sim {
    origin: Instant,
    log: Mutex<Vec<Record>>,
    in_flight: AtomicUsize,
    peak: AtomicUsize,
    respond: Box<Responder>,
}

impl Sim {
    pub fn new(
        respond: impl Fn(usize, &Request<Value>) -> Reply + Send + Sync + 'static,
    ) -> Arc<Self> {
        Self::with_responder(Box::new(move |n, _, request| respond(n, request)))
    }

    /// A server whose answer depends on how many requests are in flight.
    pub fn new_with_in_flight(
        respond: impl Fn(usize) -> Reply + Send + Sync + 'static,
    ) -> Arc<Self> {
        Self::with_responder(Box::new(move |_, in_flight, _| respond(in_flight)))
    }

    fn with_responder(respond: Box<Responder>) -> Arc<Self> {
        Arc::new(Sim {
            origin: Instant::now(),
            log: Mutex::new(Vec::new()),
            in_flight: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            respond,
        })
    }

    /// Always 200 after `latency_ms`.
    pub fn always_ok(latency_ms: u64) -> Arc<Self> {
        Sim::new(move |_, _| Reply::ok(latency_ms))
    }

    pub fn records(&self) -> Vec<Record> {
        self.log.lock().unwrap().clone()
    }

    pub fn count(&self) -> usize {
        self.log.lock().unwrap().len()
    }

    pub fn starts_ms(&self) -> Vec<f64> {
        self.records().iter().map(|r| r.t_ms).collect()
    }

    /// Each start, by the call's `n` argument, in start order.
    pub fn starts_by_n(&self) -> Vec<(u64, f64)> {
        self.records()
            .iter()
            .map(|r| (r.args["n"].as_u64().unwrap(), r.t_ms))
            .collect()
    }

    pub fn peak_in_flight(&self) -> usize {
        self.peak.load(Ordering::SeqCst)
    }

    pub fn since_origin_ms(&self) -> f64 {
        self.origin.elapsed().as_secs_f64() * 1_000.0
    }
}

/// The executor handing requests to a [`Sim`].
#[derive(Clone)]
pub struct SimExecutor(pub Arc<Sim>);

impl Executor for SimExecutor {
    type Payload = Value;

    async fn execute(&self, request: Request<Value>) -> Result<sluice::Reply, TransportError> {
        let sim = &self.0;
        let now_in_flight = sim.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        sim.peak.fetch_max(now_in_flight, Ordering::SeqCst);
        let guard = Decrement(&sim.in_flight);
        let n = {
            let mut log = sim.log.lock().unwrap();
            log.push(Record {
                t_ms: sim.origin.elapsed().as_secs_f64() * 1_000.0,
                tool: request.tool.to_string(),
                args: (*request.payload).clone(),
                attempt: request.attempt,
                in_flight: now_in_flight,
            });
            log.len()
        };
        let reply = (sim.respond)(n, now_in_flight, &request);
        tokio::time::sleep(reply.latency).await;
        drop(guard);
        if let Some(error) = reply.transport {
            return Err(error);
        }
        let mut builder = http::Response::builder().status(reply.status);
        for (name, value) in &reply.headers {
            builder = builder.header(*name, value);
        }
        Ok(builder.body(Bytes::from(reply.body)).unwrap().into())
    }
}

struct Decrement<'a>(&'a AtomicUsize);

impl Drop for Decrement<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A config with one credential `key` at `rate` and tools `read` (a read)
/// and `write` (a non-idempotent write) on it.
pub fn config(rate: &str) -> GateConfig {
    GateConfig::default()
        .credential("key", CredentialConfig::with_rate(rate.parse().unwrap()))
        .tool("read", ToolConfig::read("key"))
        .tool("write", ToolConfig::write("key"))
}

pub fn config_with(credential: CredentialConfig, defaults: Defaults) -> GateConfig {
    GateConfig::default()
        .defaults(defaults)
        .credential("key", credential)
        .tool("read", ToolConfig::read("key"))
        .tool("write", ToolConfig::write("key"))
}

pub fn build_gate(config: GateConfig, sim: &Arc<Sim>) -> Gate<SimExecutor> {
    Gate::builder(config, SimExecutor(sim.clone()))
        .seed(42)
        .build()
        .unwrap()
}

/// The most starts in any half-open window of `window_ms`.
pub fn max_in_window(starts: &[f64], window_ms: f64) -> usize {
    let mut starts = starts.to_vec();
    starts.sort_by(f64::total_cmp);
    let mut best = 0;
    let mut lo = 0;
    for hi in 0..starts.len() {
        // A tiny epsilon absorbs float rounding of microsecond times.
        while starts[hi] - starts[lo] >= window_ms - 1e-6 {
            lo += 1;
        }
        best = best.max(hi - lo + 1);
    }
    best
}

pub fn status_of(outcome: &sluice::Outcome) -> &'static str {
    outcome.status()
}
