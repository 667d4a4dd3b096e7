//! Graceful shutdown over a real socket: new connections are refused, calls
//! in flight still get their outcomes.

use crate::support;

use std::time::Duration;

use serde_json::{Value, json};
use sluice_fake::{Latency, Limits, RetryAfter};
use support::{Sidecar, config, fake, ms, state};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_in_flight_finish_after_the_signal() {
    let server = fake(
        Limits::new(100, Duration::from_secs(1)),
        RetryAfter::Auto,
        Latency::Fixed(ms(400)),
    )
    .await;
    let mut sidecar = Sidecar::spawn(state(config(&server.url(), "", ""))).await;
    let client = reqwest::Client::new();
    let url = sidecar.url.clone();
    let in_flight = tokio::spawn({
        let client = client.clone();
        let url = url.clone();
        async move {
            let calls = json!({"calls": [
                {"id": "a", "tool": "search_tickets", "args": {"query": "a"}},
                {"id": "b", "tool": "get_ticket", "args": {"id": 1}},
            ]});
            client
                .post(format!("{url}/v1/turns"))
                .json(&calls)
                .send()
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()
        }
    });
    tokio::time::sleep(ms(100)).await;
    sidecar.stop();
    tokio::time::sleep(ms(50)).await;

    // No new connections once the shutdown has begun.
    let refused = reqwest::Client::new()
        .get(format!("{url}/healthz"))
        .timeout(ms(500))
        .send()
        .await;
    assert!(refused.is_err(), "{refused:?}");

    let answer = in_flight.await.unwrap();
    let results = answer["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    assert!(results.iter().all(|r| r["status"] == "ok"), "{answer}");
    assert_eq!(server.api().requests().len(), 2);

    let task = sidecar.task.take().unwrap();
    tokio::time::timeout(Duration::from_secs(2), task)
        .await
        .expect("the server stops once the calls are answered")
        .unwrap()
        .unwrap();
}

#[tokio::test(start_paused = true)]
async fn the_grace_period_covers_the_longest_deadline() {
    let state = state(config(
        "http://127.0.0.1:9",
        "",
        "[tools.long]\ncredential = \"support\"\npath = \"/l\"\ndeadline = \"10m\"",
    ));
    assert_eq!(state.shutdown_grace(), Duration::from_secs(601));
    let short = support::state(config("http://127.0.0.1:9", "", ""));
    assert_eq!(
        short.shutdown_grace(),
        sluice_server::MIN_DEADLINE_CAP + Duration::from_secs(1)
    );
}

/// The same on worker threads, each with its own runtime and socket
/// (`serve_workers`, what `sluice serve` runs): calls in flight on any
/// worker finish, new connections are refused, and every worker stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_finish_their_calls_in_flight_and_stop() {
    let server = fake(
        Limits::new(100, Duration::from_secs(1)),
        RetryAfter::Auto,
        Latency::Fixed(ms(400)),
    )
    .await;
    let listeners = sluice_server::bind("127.0.0.1:0".parse().unwrap(), 3).unwrap();
    assert_eq!(listeners.workers(), 3);
    let url = format!("http://{}", listeners.local_addr());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(sluice_server::serve_workers(
        listeners,
        state(config(&server.url(), "", "")),
        async {
            let _ = stopped.await;
        },
    ));
    // Several connections, so that the kernel spreads them over the workers.
    let in_flight: Vec<_> = (0..6)
        .map(|i| {
            let url = url.clone();
            tokio::spawn(async move {
                let calls = json!({"calls": [
                    {"id": "a", "tool": "search_tickets", "args": {"query": format!("q{i}")}},
                ]});
                reqwest::Client::new()
                    .post(format!("{url}/v1/turns"))
                    .json(&calls)
                    .send()
                    .await
                    .unwrap()
                    .json::<Value>()
                    .await
                    .unwrap()
            })
        })
        .collect();
    // The calls take 400 ms upstream: all accepted by now, none answered.
    tokio::time::sleep(ms(250)).await;
    stop.send(()).unwrap();
    tokio::time::sleep(ms(50)).await;
    let refused = reqwest::Client::new()
        .get(format!("{url}/healthz"))
        .timeout(ms(500))
        .send()
        .await;
    assert!(refused.is_err(), "{refused:?}");
    for call in in_flight {
        let answer = call.await.unwrap();
        assert_eq!(answer["results"][0]["status"], "ok", "{answer}");
    }
    assert_eq!(server.api().requests().len(), 6);
    tokio::time::timeout(Duration::from_secs(2), task)
        .await
        .expect("every worker stops once the calls are answered")
        .unwrap()
        .unwrap();
}
