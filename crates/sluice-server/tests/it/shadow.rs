//! Shadow mode through the sidecar (issue 20): `enforce = false` sends
//! every call at once and reports what enforcing would have done in
//! `/v1/status`, `/metrics` and the log. Asserted on the fake API's records.

use crate::support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use sluice_fake::{Latency, Limits, RetryAfter};
use support::{config, fake, get, ms, results, router, send, turn};

fn searches(n: usize) -> Value {
    let calls: Vec<Value> = (0..n)
        .map(|i| json!({"id": format!("c{i}"), "tool": "search_tickets", "args": {"query": format!("q{i}")}}))
        .collect();
    json!({ "calls": calls })
}

/// A log writer the test can read back.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shadow_sends_every_call_at_once_and_reports_what_it_would_do() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .finish();
    let _log = tracing::subscriber::set_default(subscriber);
    // Call sites that first fired on other tests' threads meanwhile may
    // hold an interest computed without this subscriber (see logs.rs).
    tracing::callsite::rebuild_interest_cache();

    // The server takes everything; sluice is told 2 per second, with no
    // margin so that the waits are whole windows.
    let server = fake(
        Limits::new(1_000, Duration::from_secs(1)),
        RetryAfter::Auto,
        Latency::Fixed(ms(50)),
    )
    .await;
    let router = router(config(
        &server.url(),
        "rate = \"2/1s\"\nmax_in_flight = 8\nqueue = 16\nenforce = false",
        "[defaults]\nwindow_margin = \"0ms\"",
    ));
    let answers = results(&send(&router, turn(&searches(8))).await);
    assert!(answers.iter().all(|a| a["status"] == "ok"), "{answers:?}");
    assert_sent_at_once(&server, 8);

    let status = send(&router, get("/v1/status")).await.json();
    let credential = &status["credentials"][0];
    assert_eq!(credential["mode"], "shadow");
    assert_eq!(credential["enforce"], false);
    let scope = &credential["scopes"][0];
    let shadow = &scope["shadow"];
    assert_eq!(shadow["would_wait"], 4, "{shadow}");
    assert_eq!(shadow["would_defer"], 2, "{shadow}");
    assert_eq!(shadow["would_shed"], 0, "{shadow}");
    // Waits of 1 s, 1 s, 2 s and 2 s, less the little time the calls took to arrive.
    let total = shadow["would_wait_ms_total"].as_u64().unwrap();
    assert!((5_800..=6_000).contains(&total), "{shadow}");
    assert_eq!(scope["sent_in_window"], 8, "{scope}");

    let metrics = send(&router, get("/metrics")).await.text();
    for line in [
        r#"sluice_shadow_decisions_total{credential="support",scope="api_key",decision="wait"} 4"#,
        r#"sluice_shadow_decisions_total{credential="support",scope="api_key",decision="defer"} 2"#,
        r#"sluice_credential_mode{credential="support",mode="shadow"} 1"#,
        r#"sluice_credential_mode{credential="support",mode="enforce"} 0"#,
    ] {
        assert!(metrics.contains(line), "{line}\n{metrics}");
    }
    assert!(
        !metrics.contains("sluice_wait_seconds_count"),
        "nothing really waited: {metrics}"
    );

    let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let deferrals: Vec<&str> = log
        .lines()
        .filter(|line| line.contains("would have deferred"))
        .collect();
    assert_eq!(deferrals.len(), 2, "{log}");
    for line in deferrals {
        assert!(line.contains("INFO"), "{line}");
        assert!(
            line.contains("tool=search_tickets") && line.contains("wait_ms="),
            "{line}"
        );
        assert!(!line.contains(support::SECRET), "{line}");
    }
}

/// `n` requests reached the server, all within a few milliseconds.
fn assert_sent_at_once(server: &sluice_fake::FakeServer, n: usize) {
    let starts: Vec<f64> = server.api().requests().iter().map(|r| r.t_ms).collect();
    assert_eq!(starts.len(), n, "{starts:?}");
    let spread = starts.iter().copied().fold(f64::MIN, f64::max)
        - starts.iter().copied().fold(f64::MAX, f64::min);
    assert!(spread < 200.0, "sent at once, not paced: {starts:?}");
}

/// Shadow mode switches off sluice's own throttling only: the server's
/// 429s come back as the structured outcome, after one attempt each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_servers_own_429s_get_the_structured_outcome() {
    let server = fake(
        Limits::new(2, Duration::from_secs(1)),
        RetryAfter::Auto,
        Latency::Fixed(ms(50)),
    )
    .await;
    let router = router(config(&server.url(), "enforce = false", ""));
    let answers = results(&send(&router, turn(&searches(6))).await);
    assert_sent_at_once(&server, 6);
    let ok = answers.iter().filter(|a| a["status"] == "ok").count();
    assert_eq!(ok, 2, "{answers:?}");
    for refused in answers.iter().filter(|a| a["status"] != "ok") {
        assert_eq!(refused["status"], "rate_limited", "{refused}");
        assert_eq!(refused["reason"], "throttled", "{refused}");
        assert_eq!(refused["scope"], "api_key", "{refused}");
        let wait = refused["retry_after_ms"].as_u64().unwrap();
        assert!((1..=1_000).contains(&wait), "{refused}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_enforcing_credential_reports_its_mode_and_no_shadow_counts() {
    let server = fake(
        Limits::new(100, Duration::from_secs(1)),
        RetryAfter::Auto,
        Latency::Zero,
    )
    .await;
    let router = router(config(&server.url(), "rate = \"2/1s\"", ""));
    results(&send(&router, turn(&searches(3))).await);
    let status = send(&router, get("/v1/status")).await.json();
    let credential = &status["credentials"][0];
    assert_eq!(credential["mode"], "enforce");
    assert_eq!(credential["enforce"], true);
    assert_eq!(
        credential["scopes"][0]["shadow"],
        json!({"would_wait": 0, "would_wait_ms_total": 0, "would_defer": 0, "would_shed": 0})
    );
    // Enforced: the third call waited a second for the window.
    let starts: Vec<f64> = server.api().requests().iter().map(|r| r.t_ms).collect();
    assert!(starts[2] - starts[0] >= 990.0, "{starts:?}");
}
