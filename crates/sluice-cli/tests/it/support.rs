//! What the command line's tests share: the `sluice` binary under test, a
//! fake API that records, and readings of a served process.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use sluice_fake::{Config, FakeApi, FakeServer, Latency, Limits};

/// The `sluice` binary cargo built for these tests.
pub(crate) fn sluice() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_sluice"))
}

/// A fake API that allows far more than any limit here, answering after
/// `latency`: it only records what reached it.
pub(crate) async fn recording_fake(latency: Option<Duration>) -> FakeServer {
    let config = Config::new(Limits::new(1_000, Duration::from_secs(1)));
    let config = match latency {
        Some(latency) => config.with_latency(Latency::Fixed(latency)),
        None => config,
    };
    FakeServer::spawn(FakeApi::new(config).unwrap())
        .await
        .unwrap()
}

/// `GET /v1/status` of a served process.
pub(crate) async fn status_of(url: &str) -> Value {
    let body = reqwest::get(format!("{url}/v1/status"))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    serde_json::from_slice(&body).unwrap()
}

/// When the fake received the calls tagged `n={tag}-…` for any of `tags`,
/// in ms from its start, in order.
pub(crate) fn starts(fake: &FakeServer, tags: &[&str]) -> Vec<f64> {
    let mut starts: Vec<f64> = fake
        .api()
        .requests()
        .iter()
        .filter(|r| tags.iter().any(|tag| r.path.contains(&format!("n={tag}-"))))
        .map(|r| r.t_ms)
        .collect();
    starts.sort_by(f64::total_cmp);
    starts
}
