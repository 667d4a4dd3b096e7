//! `sluice::NoRetry`: an executor's word that a call must not go again,
//! kept over a status that would be retried; the server's wait still counts.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use bytes::Bytes;
use serde_json::json;
use sluice::{Call, Gate, NoRetry, Request};
use support::config;

fn refusing(
    marked: bool,
    sent: Arc<AtomicU32>,
) -> Gate<impl sluice::Executor<Payload = serde_json::Value>> {
    let executor = sluice::executor_fn(move |_request: Request<serde_json::Value>| {
        let sent = sent.clone();
        async move {
            // The first attempt is refused with a short wait; later ones succeed.
            if sent.fetch_add(1, Ordering::SeqCst) > 0 {
                return Ok(http::Response::new(Bytes::from_static(b"{}")));
            }
            let mut response = http::Response::new(Bytes::new());
            *response.status_mut() = http::StatusCode::TOO_MANY_REQUESTS;
            response
                .headers_mut()
                .insert("retry-after-ms", http::HeaderValue::from_static("500"));
            if marked {
                response.extensions_mut().insert(NoRetry);
            }
            Ok(response)
        }
    });
    Gate::builder(config("100/1s"), executor)
        .seed(1)
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_marked_refusal_is_not_retried_but_still_penalizes() {
    // Unmarked: a 429 is retried (even for a write) after the server's wait.
    let sent = Arc::new(AtomicU32::new(0));
    let gate = refusing(false, sent.clone());
    let start = tokio::time::Instant::now();
    assert!(gate.call(Call::new("write", json!({"n": 1}))).await.is_ok());
    assert_eq!(sent.load(Ordering::SeqCst), 2);
    assert!(start.elapsed() >= Duration::from_millis(500));

    // Marked: one request, and the outcome is the structured deferral.
    let sent = Arc::new(AtomicU32::new(0));
    let gate = refusing(true, sent.clone());
    let outcome = gate.call(Call::new("write", json!({"n": 1}))).await;
    assert_eq!(outcome.status(), "rate_limited", "{outcome:?}");
    assert_eq!(sent.load(Ordering::SeqCst), 1);
    let wait = outcome.retry_after().unwrap();
    // Never sooner than the server said (the penalized bucket restarts empty,
    // so the engine may ask for up to a window).
    assert!(
        wait >= Duration::from_millis(500) && wait <= Duration::from_millis(1_100),
        "{wait:?}"
    );
    // The scope was penalized: the next call waits out the server's 500 ms.
    let start = tokio::time::Instant::now();
    assert!(gate.call(Call::new("write", json!({"n": 2}))).await.is_ok());
    assert!(
        start.elapsed() >= Duration::from_millis(480),
        "{:?}",
        start.elapsed()
    );
}
