//! The reqwest-middleware middleware against the fake API served over HTTP on
//! loopback: every assertion is on what the fake recorded.
#![cfg(feature = "reqwest")]

use std::time::Duration;

use http::StatusCode;
use http::header::{HeaderValue, RETRY_AFTER};
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};
use sluice::{CredentialConfig, Defaults, GateConfig, Outcome};
use sluice_fake::{Config, FakeApi, FakeServer, Latency, Limits, Reply, Rule};
use sluice_tower::{Sluice, SluiceError, Target};

async fn fake(limits: Limits, latency: Duration) -> FakeServer {
    let api = FakeApi::new(Config::new(limits).with_latency(Latency::Fixed(latency))).unwrap();
    FakeServer::spawn(api).await.unwrap()
}

fn client(sluice: &Sluice) -> ClientWithMiddleware {
    let plain = reqwest::Client::new();
    let middleware = sluice.middleware(plain.clone(), |request: &reqwest::Request| {
        Some(Target::http(
            "api",
            request.method(),
            request.url().path(),
            request.headers(),
        ))
    });
    ClientBuilder::new(plain).with(middleware).build()
}

fn config(rate: &str, max_in_flight: u32) -> GateConfig {
    GateConfig::default()
        .defaults(Defaults {
            inline_wait: Duration::from_secs(10),
            backoff_base: Duration::from_millis(5),
            backoff_cap: Duration::from_millis(20),
            ..Defaults::default()
        })
        .credential(
            "api",
            CredentialConfig::with_rate(rate.parse().unwrap())
                .max_in_flight(max_in_flight)
                .queue(64),
        )
}

#[tokio::test]
async fn concurrency_and_rate_hold_at_the_fake() {
    let server = fake(
        Limits::new(3, Duration::from_secs(1)),
        Duration::from_millis(100),
    )
    .await;
    let sluice = Sluice::builder(config("3/1s", 2)).seed(1).build().unwrap();
    let client = client(&sluice);
    let sends = (0..9).map(|n| {
        client
            .post(format!("{}/w/{n}", server.url()))
            .header("authorization", "Bearer k")
            .body(format!("{{\"n\":{n}}}"))
            .send()
    });
    for response in futures_util::future::join_all(sends).await {
        assert_eq!(response.unwrap().status(), StatusCode::OK);
    }
    let records = server.api().requests();
    assert_eq!(records.len(), 9);
    assert!(records.iter().all(|r| r.status == 200), "{records:?}");
    assert!(records.iter().all(|r| r.in_flight <= 2), "{records:?}");
    let mut starts: Vec<f64> = records.iter().map(|r| r.t_ms).collect();
    starts.sort_by(f64::total_cmp);
    for window in starts.windows(4) {
        assert!(
            window[3] - window[0] >= 1000.0,
            "4 starts within a second: {window:?}"
        );
    }
}

#[tokio::test]
async fn a_429_is_retried_after_its_wait_and_the_response_is_the_upstreams() {
    let server = fake(Limits::new(100, Duration::from_secs(1)), Duration::ZERO).await;
    server.api().script(Rule::nth(
        1,
        Reply::new(StatusCode::TOO_MANY_REQUESTS)
            .header(RETRY_AFTER, HeaderValue::from_static("1")),
    ));
    let sluice = Sluice::builder(config("100/1s", 4))
        .seed(1)
        .build()
        .unwrap();
    let url = format!("{}/items/7?x=1", server.url());
    let response = client(&sluice)
        .get(&url)
        .header("authorization", "Bearer k")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.url().as_str(), url);
    assert!(response.headers().contains_key("date"));
    let body: serde_json::Value = serde_json::from_slice(&response.bytes().await.unwrap()).unwrap();
    assert_eq!(body["path"], "/items/7?x=1");
    let records = server.api().requests();
    assert_eq!(
        records.iter().map(|r| r.status).collect::<Vec<_>>(),
        [429, 200]
    );
    assert!(records[1].t_ms - records[0].t_ms >= 1000.0, "{records:?}");
}

#[tokio::test]
async fn a_deferred_call_is_a_middleware_error_carrying_the_outcome() {
    let server = fake(Limits::new(100, Duration::from_secs(1)), Duration::ZERO).await;
    let sluice = Sluice::builder(config("1/10s", 4)).seed(1).build().unwrap();
    client(&sluice)
        .post(format!("{}/send", server.url()))
        .header("authorization", "Bearer k")
        .send()
        .await
        .unwrap();
    // The next slot is 10 s away; a call with a 1 s deadline cannot wait for it.
    let error = send_with_deadline(&sluice, &server).await;
    let reqwest_middleware::Error::Middleware(error) = error else {
        panic!("not a middleware error: {error:?}");
    };
    let error = error.downcast_ref::<SluiceError>().expect("a SluiceError");
    let SluiceError::Deferred(deferred) = error else {
        panic!("{error:?}");
    };
    assert!(
        matches!(deferred.outcome, Outcome::RateLimited { .. }),
        "{deferred:?}"
    );
    assert!(error.retry_after().unwrap() > Duration::from_secs(5));
    assert_eq!(
        server.api().requests().len(),
        1,
        "the deferred call sent nothing"
    );
}

async fn send_with_deadline(sluice: &Sluice, server: &FakeServer) -> reqwest_middleware::Error {
    let plain = reqwest::Client::new();
    let middleware = sluice.middleware(plain.clone(), |request: &reqwest::Request| {
        Some(
            Target::http(
                "api",
                request.method(),
                request.url().path(),
                request.headers(),
            )
            .deadline(Duration::from_secs(1)),
        )
    });
    ClientBuilder::new(plain)
        .with(middleware)
        .build()
        .post(format!("{}/send", server.url()))
        .header("authorization", "Bearer k")
        .send()
        .await
        .unwrap_err()
}

#[tokio::test]
async fn identical_reads_sharing_a_turn_send_one_request() {
    let server = fake(
        Limits::new(100, Duration::from_secs(1)),
        Duration::from_millis(50),
    )
    .await;
    let sluice = Sluice::builder(config("100/1s", 8))
        .seed(1)
        .build()
        .unwrap();
    let client = client(&sluice);
    let turn = sluice.turn();
    let reads = (0..4).map(|_| {
        client
            .get(format!("{}/search?q=refund", server.url()))
            .header("authorization", "Bearer k")
            .with_extension(turn.clone())
            .send()
    });
    for response in futures_util::future::join_all(reads).await {
        assert_eq!(response.unwrap().status(), StatusCode::OK);
    }
    assert_eq!(server.api().requests().len(), 1);
}

#[tokio::test]
async fn a_connection_that_fails_is_reqwests_own_error() {
    // Nothing listens on this port once the listener is dropped.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let sluice = Sluice::builder(config("100/1s", 4))
        .seed(1)
        .build()
        .unwrap();
    let error = client(&sluice)
        .post(format!("http://127.0.0.1:{port}/x"))
        .send()
        .await
        .unwrap_err();
    let reqwest_middleware::Error::Reqwest(error) = error else {
        panic!("{error:?}");
    };
    assert!(error.is_connect(), "{error:?}");
}
