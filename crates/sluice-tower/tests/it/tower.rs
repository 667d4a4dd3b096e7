//! The tower layer against the fake API, in process on tokio's paused clock:
//! every assertion is on what the fake recorded.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::join_all;
use http::header::{HeaderName, HeaderValue, RETRY_AFTER};
use http::{Method, StatusCode};
use sluice::{CredentialConfig, Defaults, GateConfig, Outcome, Reason, ToolConfig};
use sluice_fake::{Config, FakeApi, Latency, Limits, Reply, Rule};
use sluice_tower::{Sluice, SluiceError, Target};
use tower::{Service, ServiceBuilder, ServiceExt, service_fn};

type Client =
    tower::util::BoxCloneSyncService<http::Request<Bytes>, http::Response<Bytes>, SluiceError>;

/// The fake as a tower service, answering in process on tokio's clock.
fn fake(limits: Limits, latency: Duration) -> FakeApi {
    FakeApi::new(Config::new(limits).with_latency(Latency::Fixed(latency))).unwrap()
}

fn stack(sluice: &Sluice, api: &FakeApi) -> Client {
    let api = api.clone();
    let inner = service_fn(move |request: http::Request<Bytes>| {
        let api = api.clone();
        async move { Ok::<_, Infallible>(api.handle(request).await) }
    });
    let layer = sluice.layer(|request: &http::Request<Bytes>| {
        Some(Target::http(
            "api",
            request.method(),
            request.uri().path(),
            request.headers(),
        ))
    });
    tower::util::BoxCloneSyncService::new(ServiceBuilder::new().layer(layer).service(inner))
}

fn request(method: Method, path: &str) -> http::Request<Bytes> {
    http::Request::builder()
        .method(method)
        .uri(path)
        .header("authorization", "Bearer k")
        .body(Bytes::new())
        .unwrap()
}

fn gate(rate: &str, max_in_flight: u32) -> GateConfig {
    GateConfig::default()
        .defaults(Defaults {
            inline_wait: Duration::from_secs(10),
            deadline: Duration::from_secs(60),
            ..Defaults::default()
        })
        .credential(
            "api",
            CredentialConfig::with_rate(rate.parse().unwrap())
                .max_in_flight(max_in_flight)
                .queue(64),
        )
}

#[tokio::test(start_paused = true)]
async fn concurrency_and_rate_hold_at_the_fake() {
    let api = fake(
        Limits::new(5, Duration::from_secs(1)),
        Duration::from_millis(300),
    );
    let sluice = Sluice::builder(gate("5/1s", 2)).seed(1).build().unwrap();
    let client = stack(&sluice, &api);
    let calls = (0..20).map(|n| {
        client
            .clone()
            .oneshot(request(Method::POST, &format!("/w/{n}")))
    });
    for response in join_all(calls).await {
        assert_eq!(response.unwrap().status(), StatusCode::OK);
    }
    let records = api.requests();
    assert_eq!(records.len(), 20);
    assert!(
        records.iter().all(|r| r.status == 200),
        "no request was throttled"
    );
    assert!(
        records.iter().all(|r| r.in_flight <= 2),
        "at most 2 in flight"
    );
    assert!(records.iter().any(|r| r.in_flight == 2));
    let mut starts: Vec<f64> = records.iter().map(|r| r.t_ms).collect();
    starts.sort_by(f64::total_cmp);
    for pair in starts.windows(6) {
        assert!(
            pair[5] - pair[0] >= 1000.0,
            "6 starts within a second: {pair:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn upstream_responses_come_back_as_they_are() {
    let api = fake(Limits::new(100, Duration::from_secs(1)), Duration::ZERO);
    api.script(Rule::path_prefix(
        "/missing",
        Reply::new(StatusCode::NOT_FOUND)
            .header(
                HeaderName::from_static("x-why"),
                HeaderValue::from_static("gone"),
            )
            .body("no such thing"),
    ));
    api.script(Rule::path_prefix(
        "/broken",
        Reply::new(StatusCode::INTERNAL_SERVER_ERROR),
    ));
    let sluice = Sluice::builder(gate("100/1s", 4)).seed(1).build().unwrap();
    let client = stack(&sluice, &api);

    let missing = client
        .clone()
        .oneshot(request(Method::GET, "/missing"))
        .await
        .unwrap();
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    assert_eq!(missing.headers()["x-why"], "gone");
    assert_eq!(missing.body(), &Bytes::from_static(b"no such thing"));
    // A write that failed at the server is not repeated, and comes back as is.
    let broken = client
        .clone()
        .oneshot(request(Method::POST, "/broken"))
        .await
        .unwrap();
    assert_eq!(broken.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(api.requests().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_429_is_learned_and_retried_after_the_servers_wait() {
    let api = fake(Limits::new(100, Duration::from_secs(1)), Duration::ZERO);
    api.script(Rule::nth(
        1,
        Reply::new(StatusCode::TOO_MANY_REQUESTS)
            .header(RETRY_AFTER, HeaderValue::from_static("1")),
    ));
    let sluice = Sluice::builder(gate("100/1s", 4)).seed(1).build().unwrap();
    let client = stack(&sluice, &api);
    let response = client
        .oneshot(request(Method::POST, "/send"))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let records = api.requests();
    assert_eq!(
        records.iter().map(|r| r.status).collect::<Vec<_>>(),
        [429, 200]
    );
    assert!(records[1].t_ms - records[0].t_ms >= 1000.0, "{records:?}");
}

#[tokio::test(start_paused = true)]
async fn a_call_sluice_defers_is_a_typed_error_with_the_outcome() {
    let api = fake(Limits::new(100, Duration::from_secs(1)), Duration::ZERO);
    let config = GateConfig::default()
        .credential("api", CredentialConfig::with_rate("1/10s".parse().unwrap()));
    let sluice = Sluice::builder(config).seed(1).build().unwrap();
    let client = stack(&sluice, &api);
    client
        .clone()
        .oneshot(request(Method::POST, "/a"))
        .await
        .unwrap();
    let error = client
        .oneshot(request(Method::POST, "/b"))
        .await
        .unwrap_err();
    let SluiceError::Deferred(deferred) = &error else {
        panic!("{error:?}");
    };
    let Outcome::RateLimited {
        reason,
        retry_after_ms,
        ..
    } = &deferred.outcome
    else {
        panic!("{:?}", deferred.outcome);
    };
    assert_eq!(*reason, Reason::Throttled);
    assert!(
        (9_000..=10_100).contains(retry_after_ms),
        "{retry_after_ms}"
    );
    assert!(deferred.response.is_none());
    assert!(error.retry_after().is_some());
    assert!(error.to_string().contains("rate_limited"), "{error}");
    assert_eq!(api.requests().len(), 1, "the deferred call sent nothing");
}

#[tokio::test(start_paused = true)]
async fn identical_reads_in_a_turn_send_one_request() {
    let api = fake(
        Limits::new(100, Duration::from_secs(1)),
        Duration::from_millis(50),
    );
    let sluice = Sluice::builder(gate("100/1s", 8)).seed(1).build().unwrap();
    let client = stack(&sluice, &api);
    let turn = sluice.turn();
    let reads = (0..5).map(|_| {
        let mut read = request(Method::GET, "/items?q=1");
        read.extensions_mut().insert(turn.clone());
        client.clone().oneshot(read)
    });
    let bodies: Vec<Bytes> = join_all(reads)
        .await
        .into_iter()
        .map(|r| r.unwrap().into_body())
        .collect();
    assert!(bodies.windows(2).all(|pair| pair[0] == pair[1]));
    assert_eq!(api.requests().len(), 1);
    assert_eq!(turn.upstream_requests(), 1);
    // Outside the turn each request is its own.
    let alone = (0..2).map(|_| client.clone().oneshot(request(Method::GET, "/items?q=1")));
    join_all(alone).await;
    assert_eq!(api.requests().len(), 3);
}

#[tokio::test(start_paused = true)]
async fn configured_tools_and_unclassified_requests() {
    let api = fake(Limits::new(100, Duration::from_secs(1)), Duration::ZERO);
    let config = GateConfig::default()
        .credential("api", CredentialConfig::with_rate("1/10s".parse().unwrap()))
        .tool("search", ToolConfig::read("api"));
    let sluice = Sluice::builder(config).seed(1).build().unwrap();
    let inner_api = api.clone();
    let inner = service_fn(move |request: http::Request<Bytes>| {
        let api = inner_api.clone();
        async move { Ok::<_, Infallible>(api.handle(request).await) }
    });
    let mut client = ServiceBuilder::new()
        .layer(sluice.layer(
            |request: &http::Request<Bytes>| match request.uri().path() {
                "/health" => None,
                "/search" => Some(Target::tool("search")),
                _ => Some(Target::tool("no_such_tool")),
            },
        ))
        .service(inner);
    for _ in 0..3 {
        let response = client
            .ready()
            .await
            .unwrap()
            .call(request(Method::GET, "/health"))
            .await;
        assert_eq!(
            response.unwrap().status(),
            StatusCode::OK,
            "not gated: never deferred"
        );
    }
    client
        .ready()
        .await
        .unwrap()
        .call(request(Method::GET, "/search"))
        .await
        .unwrap();
    let error = client
        .ready()
        .await
        .unwrap()
        .call(request(Method::GET, "/other"))
        .await
        .unwrap_err();
    let SluiceError::Failed(failed) = &error else {
        panic!("{error:?}");
    };
    assert!(
        matches!(&failed.outcome, Outcome::Error { message, .. } if message.contains("no_such_tool"))
    );
    assert_eq!(api.requests().len(), 4);
}

#[derive(Debug, thiserror::Error)]
#[error("connection reset (test)")]
struct Reset;

#[tokio::test(start_paused = true)]
async fn failures_below_are_retried_for_reads_only_and_handed_back() {
    let attempts = Arc::new(AtomicU32::new(0));
    let counted = attempts.clone();
    let failing = service_fn(move |_request: http::Request<Bytes>| {
        counted.fetch_add(1, Ordering::SeqCst);
        async { Err::<http::Response<Bytes>, _>(Reset) }
    });
    let sluice = Sluice::builder(gate("100/1s", 4)).seed(1).build().unwrap();
    let client = ServiceBuilder::new()
        .layer(sluice.layer(|request: &http::Request<Bytes>| {
            Some(Target::http(
                "api",
                request.method(),
                request.uri().path(),
                request.headers(),
            ))
        }))
        .service(failing);

    let error = client
        .clone()
        .oneshot(request(Method::GET, "/r"))
        .await
        .unwrap_err();
    let SluiceError::Failed(failed) = error else {
        panic!("not a failure");
    };
    assert!(
        failed
            .source
            .as_ref()
            .unwrap()
            .downcast_ref::<Reset>()
            .is_some()
    );
    assert_eq!(
        attempts.load(Ordering::SeqCst),
        4,
        "a read is retried up to max_attempts"
    );

    attempts.store(0, Ordering::SeqCst);
    client
        .oneshot(request(Method::POST, "/w"))
        .await
        .unwrap_err();
    assert_eq!(
        attempts.load(Ordering::SeqCst),
        1,
        "a write that may have been sent is not"
    );
}

/// Issue 15: the layer reads bodies through the engine (the `Bytes` the
/// response holds, no copy): a Google 429 whose wait is only in its body,
/// and a GraphQL throttle in a 200 on a credential marked GraphQL, are each
/// retried after the stated wait, and the caller sees the 200.
#[tokio::test(start_paused = true)]
async fn body_signals_pace_the_retry() {
    use sluice::signal::BodySignals;
    use sluice_fake::{BodyStyle, HeaderStyle};
    for (style, mode) in [
        (BodyStyle::GoogleRetryInfo, BodySignals::Errors),
        (BodyStyle::GraphqlThrottled, BodySignals::Graphql),
    ] {
        let api = FakeApi::new(
            Config::new(Limits::new(1, Duration::from_millis(500)))
                .with_headers(HeaderStyle::None)
                .with_bodies(style),
        )
        .unwrap();
        let config =
            GateConfig::default().credential("api", CredentialConfig::default().body_signals(mode));
        let sluice = Sluice::builder(config).seed(1).build().unwrap();
        let client = stack(&sluice, &api);
        for n in 0..2 {
            let response = client
                .clone()
                .oneshot(request(Method::POST, &format!("/w/{n}")))
                .await
                .unwrap();
            assert_eq!(response.status(), StatusCode::OK, "{style:?}");
        }
        let records = api.requests();
        assert_eq!(records.len(), 3, "{style:?}: {records:?}");
        assert!(
            records[2].t_ms >= records[0].t_ms + 500.0,
            "{style:?} retried early: {records:?}"
        );
    }
}
