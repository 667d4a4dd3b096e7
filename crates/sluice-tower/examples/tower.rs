//! cargo run -p sluice-tower --example tower
//!
//! A harness's HTTP client as a tower stack with sluice in it, against the
//! throttling fake API on loopback. The fake allows 4 requests per second;
//! the "model" fires a turn of 12 calls at once: 4 identical searches and 8
//! distinct ticket writes. The searches share one request; sluice runs 2
//! requests at a time at 4 per second, lets 4 more calls wait in its queue
//! and sheds the rest at once with an honest wait. It prints what each call got and what the
//! fake recorded.
//!
//! The inner service adapts `reqwest::Client` to `http::Request<Bytes>` in
//! and `http::Response<Bytes>` out: the same adapter serves any client with
//! other body types.

use std::error::Error;
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::join_all;
use sluice::{CredentialConfig, GateConfig, Outcome};
use sluice_fake::{Config, FakeApi, FakeServer, Latency, Limits};
use sluice_tower::{Sluice, SluiceError, Target};
use tower::{ServiceBuilder, ServiceExt, service_fn};

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let limits = Limits::new(4, Duration::from_secs(1));
    let latency = Latency::Fixed(Duration::from_millis(150));
    let server =
        FakeServer::spawn(FakeApi::new(Config::new(limits).with_latency(latency))?).await?;
    let base = server.url();
    println!("fake API on {base}: 4 requests per rolling second, 150 ms each\n");

    // Any client, as a service over Bytes bodies.
    let http = reqwest::Client::new();
    let client = service_fn(move |request: http::Request<Bytes>| {
        let http = http.clone();
        async move {
            let response = http.execute(reqwest::Request::try_from(request)?).await?;
            let mut out = http::Response::builder().status(response.status());
            if let Some(headers) = out.headers_mut() {
                *headers = response.headers().clone();
            }
            Ok::<_, Box<dyn Error + Send + Sync>>(out.body(response.bytes().await?)?)
        }
    });

    let config = GateConfig::default().credential(
        "tickets",
        CredentialConfig::with_rate("4/1s".parse()?)
            .max_in_flight(2)
            .queue(4),
    );
    let sluice = Sluice::builder(config).seed(7).build()?;
    let stack = ServiceBuilder::new()
        .layer(sluice.layer(|request: &http::Request<Bytes>| {
            Some(Target::http(
                "tickets",
                request.method(),
                request.uri().path(),
                request.headers(),
            ))
        }))
        .service(client);

    let turn = sluice.turn();
    let mut calls = Vec::new();
    for _ in 0..4 {
        let mut request = http::Request::get(format!("{base}/search?q=refund"))
            .header("authorization", "Bearer sk-example")
            .body(Bytes::new())?;
        request.extensions_mut().insert(turn.clone());
        calls.push(("GET /search?q=refund".to_owned(), request));
    }
    for n in 0..8 {
        let mut request = http::Request::post(format!("{base}/tickets/{n}"))
            .header("authorization", "Bearer sk-example")
            .body(Bytes::from(format!("{{\"subject\":\"ticket {n}\"}}")))?;
        request.extensions_mut().insert(turn.clone());
        calls.push((format!("POST /tickets/{n}"), request));
    }
    let started = tokio::time::Instant::now();
    let answers = join_all(calls.into_iter().map(|(name, request)| {
        let stack = stack.clone();
        async move { (name, stack.oneshot(request).await, started.elapsed()) }
    }))
    .await;
    for (name, answer, elapsed) in answers {
        let at = elapsed.as_millis();
        match answer {
            Ok(response) => println!("{name:<22} {at:>5} ms  {}", response.status()),
            Err(SluiceError::Deferred(deferred)) => match &deferred.outcome {
                Outcome::RateLimited {
                    reason,
                    retry_after_ms,
                    ..
                } => println!(
                    "{name:<22} {at:>5} ms  deferred: rate_limited ({}), retry after {retry_after_ms} ms",
                    reason.as_str()
                ),
                other => println!("{name:<22} {at:>5} ms  deferred: {}", other.status()),
            },
            Err(error) => println!("{name:<22} {at:>5} ms  failed: {error}"),
        }
    }

    let stats = server.api().stats();
    let peak = stats
        .requests
        .iter()
        .map(|r| r.in_flight)
        .max()
        .unwrap_or(0);
    println!(
        "\nthe fake recorded {} requests, {} throttled (429), at most {peak} in flight;",
        stats.total, stats.throttled
    );
    println!(
        "the turn's 4 identical searches cost {} request(s)",
        stats
            .requests
            .iter()
            .filter(|r| r.path.starts_with("/search"))
            .count()
    );
    server.shutdown().await?;
    Ok(())
}
