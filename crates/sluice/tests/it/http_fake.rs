//! End to end over loopback HTTP against the fake API: the article's tests,
//! asserted on the request times and counts the fake recorded.

use crate::support;

use std::time::Duration;

use serde_json::json;
use sluice::{Call, CredentialConfig, Defaults, Gate, GateConfig, Outcome, Reason, ToolConfig};
use sluice_fake::{Config, FakeApi, FakeServer, Limits, Reply, RetryAfter, Rule};
use support::http_executor::HttpExecutor;
use tokio::sync::Mutex;
use tokio::time::Instant;

/// These tests measure request times over loopback: run them one at a time
/// so that they do not add scheduling jitter to each other's measurements.
static SERIAL: Mutex<()> = Mutex::const_new(());

async fn fake(limits: Limits, retry_after: RetryAfter) -> FakeServer {
    let config = Config::new(limits).with_retry_after(retry_after);
    FakeServer::spawn(FakeApi::new(config).unwrap())
        .await
        .unwrap()
}

fn gate(server: &FakeServer, rate: &str, defaults: Defaults) -> Gate<HttpExecutor> {
    let config = GateConfig::default()
        .defaults(defaults)
        .credential(
            "support",
            CredentialConfig::with_rate(rate.parse().unwrap()),
        )
        .tool("search_tickets", ToolConfig::read("support"));
    Gate::builder(config, HttpExecutor::new(&server.url(), "Bearer k1"))
        .seed(1)
        .build()
        .unwrap()
}

fn search(q: &str) -> Call {
    Call::new("search_tickets", json!({ "q": q }))
}

/// The article's test: the fake allows 3 requests per 200 ms with
/// Retry-After 0.2 s; five distinct calls go through the gate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn article_fanout_respects_the_window() {
    let _serial = SERIAL.lock().await;
    let server = fake(
        Limits::new(3, Duration::from_millis(200)),
        RetryAfter::Fixed(Duration::from_millis(200)),
    )
    .await;
    let gate = gate(&server, "3/200ms", Defaults::default());
    let outcomes = gate.turn().run(["a", "b", "c", "d", "e"].map(search)).await;

    let starts: Vec<f64> = server.api().requests().iter().map(|r| r.t_ms).collect();
    // Requests 4 and 5 must not start before the window elapses.
    assert!(starts[3] - starts[2] >= 200.0, "{starts:?}");
    assert!(starts[4] - starts[2] >= 200.0, "{starts:?}");
    // Nothing exploded into retries: exactly one request per logical call.
    assert_eq!(starts.len(), 5);
    assert_eq!(server.api().stats().throttled, 0);
    // Short inline waits stayed invisible to the model.
    assert!(
        outcomes.iter().all(|o| o.status() != "rate_limited"),
        "{outcomes:?}"
    );
    assert!(outcomes.iter().all(Outcome::is_ok));
}

/// Retry-After longer than the call's deadline: the call is deferred at
/// once, not slept on, and the blocked scope sends nothing more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_beyond_the_deadline_defers_without_sending() {
    let _serial = SERIAL.lock().await;
    let server = fake(Limits::new(100, Duration::from_secs(1)), RetryAfter::Auto).await;
    server.api().script(Rule::next(
        Reply::new(http::StatusCode::TOO_MANY_REQUESTS).header(
            http::header::RETRY_AFTER,
            http::HeaderValue::from_static("10"),
        ),
    ));
    let gate = gate(&server, "100/1s", Defaults::default());

    let started = Instant::now();
    let first = gate
        .call(search("a").deadline(Duration::from_secs(2)))
        .await;
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "did not sleep: {:?}",
        started.elapsed()
    );
    let Outcome::RateLimited {
        reason,
        retry_after_ms,
        ..
    } = &first
    else {
        panic!("{first:?}")
    };
    assert_eq!(*reason, Reason::Throttled);
    assert!((9_000..=10_000).contains(retry_after_ms), "{first:?}");

    let second = gate
        .call(search("b").deadline(Duration::from_secs(2)))
        .await;
    assert_eq!(second.status(), "rate_limited");
    assert_eq!(
        server.api().requests().len(),
        1,
        "the second call sent nothing"
    );
}

/// Two processes, each with its own local bucket at the key's rate, spend
/// twice the key: what a local bucket cannot prevent (the Redis backend
/// can). The fake allows far more here, so it records what the clients
/// offered rather than what it would have accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_local_buckets_spend_twice_the_key() {
    let _serial = SERIAL.lock().await;
    const R: usize = 5;
    let server = fake(Limits::new(1_000, Duration::from_secs(1)), RetryAfter::Auto).await;
    // The third wave starts 2.04 s in (two windows and their margins):
    // within an inline wait of 3 s.
    let defaults = Defaults {
        inline_wait: Duration::from_secs(3),
        ..Defaults::default()
    };
    let one = gate(&server, "5/1s", defaults.clone());
    let two = gate(&server, "5/1s", defaults);
    let drive = |gate: Gate<HttpExecutor>, name: &'static str| async move {
        // 15 calls: 5 now, 5 a window later, 5 two windows later (inline waits).
        let calls = (0..15).map(|i| search(&format!("{name}{i}")));
        gate.turn().run(calls).await
    };
    let (a, b) = tokio::join!(drive(one, "a"), drive(two, "b"));
    assert!(a.iter().chain(&b).all(Outcome::is_ok), "{a:?} {b:?}");

    let mut starts: Vec<f64> = server.api().requests().iter().map(|r| r.t_ms).collect();
    starts.sort_by(f64::total_cmp);
    assert_eq!(starts.len(), 30);
    let busiest = starts
        .iter()
        .map(|t| {
            starts
                .iter()
                .filter(|u| **u >= *t && **u < t + 1_000.0)
                .count()
        })
        .max()
        .unwrap();
    // Each gate keeps its own promise (at most R per window of its own
    // send times), so together they start 2R in one window: twice what the
    // key allows. (Arrival jitter can add a request or two at the server.)
    assert!(busiest >= 2 * R, "{starts:?}");
}

/// `rate = "auto"` over real loopback HTTP: it finds a 10/s limit it was
/// never told, and keeps most of the key's rate without hammering it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_rate_finds_an_unknown_limit() {
    let _serial = SERIAL.lock().await;
    let server = fake(Limits::new(10, Duration::from_secs(1)), RetryAfter::Auto).await;
    let config = GateConfig::default()
        .credential("support", CredentialConfig::default().auto_rate())
        .tool("search_tickets", ToolConfig::read("support"));
    let gate = Gate::builder(config, HttpExecutor::new(&server.url(), "Bearer auto"))
        .seed(5)
        .build()
        .unwrap();

    // Offer 25 calls a second for 8 seconds.
    let mut calls = tokio::task::JoinSet::new();
    for n in 0..200 {
        let gate = gate.clone();
        calls.spawn(async move {
            gate.call(search(&format!("q{n}")).deadline(Duration::from_secs(3)))
                .await
        });
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    while calls.join_next().await.is_some() {}

    let records = server.api().requests();
    let throttled = records.iter().filter(|r| r.status == 429).count();
    assert!(throttled >= 1, "it probed up to the limit");
    assert!(
        (throttled as f64) < 0.1 * records.len() as f64,
        "{throttled} of {} throttled",
        records.len()
    );
    let end = records.iter().map(|r| r.t_ms).fold(0.0, f64::max);
    let late_ok = records
        .iter()
        .filter(|r| r.status == 200 && r.t_ms > end - 3_000.0)
        .count();
    assert!(
        late_ok >= 21,
        "kept at least 70% of 10/s in the last 3 s: {late_ok}"
    );
    let status = gate.status();
    let auto = status[0].auto_rate.as_ref().unwrap();
    assert_ne!(auto.phase, "slow_start", "{auto:?}");
}
