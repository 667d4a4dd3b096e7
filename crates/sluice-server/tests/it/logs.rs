//! Secrets never reach a log line at any level: every request path runs with
//! a TRACE subscriber (and the `log` bridge) capturing everything.

use crate::support;

use std::cell::RefCell;
use std::io::Write;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use http::Request;
use serde_json::json;
use support::{Echo, SECRET, Sidecar, TOKEN, config, get, send, state, turn};
use tracing::dispatcher::DefaultGuard;

#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

thread_local! {
    /// The capture, as the default subscriber of a thread of this test's runtime.
    static CAPTURING: RefCell<Option<DefaultGuard>> = const { RefCell::new(None) };
}

/// The test shares its process with the crate's other tests, so its
/// subscriber is not the global one (which would capture their lines, and
/// can be set once): it is the default of this thread and of every thread
/// of the runtime the test runs on. The `log` bridge forwards `log` records
/// (reqwest's, hyper's) to the calling thread's subscriber, so it stays
/// process-wide; other tests' threads have none and drop them.
#[test]
fn no_secret_in_any_log_line_at_trace() {
    let capture = Capture::default();
    let writer = capture.clone();
    let subscriber = tracing::Dispatch::new(
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish(),
    );
    let _ = tracing_log::LogTracer::init();
    let _here = tracing::dispatcher::set_default(&subscriber);
    let workers = subscriber.clone();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .on_thread_start(move || {
            let guard = tracing::dispatcher::set_default(&workers);
            CAPTURING.with(|slot| *slot.borrow_mut() = Some(guard));
        })
        .on_thread_stop(|| CAPTURING.with(|slot| drop(slot.borrow_mut().take())))
        .build()
        .unwrap();
    runtime.block_on(logged(capture));
}

async fn logged(capture: Capture) {
    // A log line's interest is cached per call site when it first fires.
    // One that first fired on another test's thread while this capture was
    // being registered can keep the interest of the dispatchers before it
    // (tracing-core computes it outside the registry's lock), and the
    // engine's `outcome` line was then never captured: recompute them all,
    // with this capture among the dispatchers, before any request.
    tracing::callsite::rebuild_interest_cache();
    let echo = Echo::spawn().await;
    let extra = r#"
[server]
auth_token_env = "SLUICE_TOKEN"

[credentials.down]
base_url = "http://127.0.0.1:1"
secret_env = "SUPPORT_API_KEY"

[tools.down]
credential = "down"
path = "/x"
"#;
    let state = state(config(&echo.url, "", extra));
    let router = sluice_server::app(state.clone());
    let authorized = |request: Request<Body>| {
        let (mut parts, body) = request.into_parts();
        parts
            .headers
            .insert("authorization", format!("Bearer {TOKEN}").parse().unwrap());
        Request::from_parts(parts, body)
    };

    let calls = json!({"turn_id": "t1", "calls": [
        {"id": "a", "tool": "get_ticket", "args": {"id": 1}},
        {"id": "b", "tool": "create_ticket", "args": {"subject": "x"}},
        {"id": "c", "tool": "search_tickets", "args": {}},
        {"id": "d", "tool": "down", "deadline_ms": 2000},
        {"id": "e", "tool": "get_ticket", "args": {"id": "fail"}},
    ]});
    let reply = send(&router, authorized(turn(&calls))).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    send(&router, turn(&calls)).await; // 401
    send(&router, authorized(get("/proxy/support/redirect"))).await;
    send(&router, authorized(get("/proxy/support/fail"))).await;
    send(&router, authorized(get("/proxy/support/../x"))).await;
    send(&router, authorized(get("/v1/status"))).await;
    send(&router, authorized(get("/metrics"))).await;

    // And over a real socket, with the HTTP stack's own logging.
    let sidecar = Sidecar::spawn(state).await;
    let client = reqwest::Client::new();
    let response = client
        .get(format!("{}/proxy/support/items", sidecar.url))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    drop(sidecar);

    assert!(
        echo.seen()
            .iter()
            .any(|s| s.headers["authorization"] == format!("Bearer {SECRET}").as_str())
    );
    let logs = String::from_utf8(capture.0.lock().unwrap().clone()).unwrap();
    assert!(
        logs.contains("TRACE") || logs.contains("DEBUG"),
        "capture works"
    );
    assert!(logs.contains("outcome"), "the engine's lines are captured");
    assert!(!logs.contains(SECRET), "the credential's secret was logged");
    assert!(!logs.contains(TOKEN), "the sidecar's token was logged");
    assert!(!logs.contains("sk-test"), "part of the secret was logged");
}
