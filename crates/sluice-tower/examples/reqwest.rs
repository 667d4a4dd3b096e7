//! cargo run -p sluice-tower --example reqwest --features reqwest
//!
//! A reqwest-middleware client with sluice as its last middleware, against
//! the throttling fake API on loopback. The key allows 3 requests per
//! second and is shared with another process that keeps spending it, so
//! some requests meet a 429 with Retry-After: sluice reads it, holds the
//! key for the wait, and retries through the same bucket. Calls whose
//! deadline cannot pay for the wait come back as a typed error carrying
//! the `rate_limited` outcome. It prints each call's result and what the
//! fake recorded.

use std::error::Error;
use std::time::Duration;

use futures_util::future::join_all;
use reqwest_middleware::ClientBuilder;
use sluice::{CredentialConfig, GateConfig, Outcome};
use sluice_fake::{Config, FakeApi, FakeServer, Latency, Limits};
use sluice_tower::{Sluice, SluiceError, Target};

const KEY: &str = "Bearer sk-shared";

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let limits = Limits::new(3, Duration::from_secs(1));
    let latency = Latency::Fixed(Duration::from_millis(100));
    let server =
        FakeServer::spawn(FakeApi::new(Config::new(limits).with_latency(latency))?).await?;
    let base = server.url();
    println!("fake API on {base}: 3 requests per rolling second per key\n");

    // Another process on the same key, one request every 500 ms.
    let other = tokio::spawn({
        let url = format!("{base}/sync");
        async move {
            let client = reqwest::Client::new();
            for _ in 0..8 {
                let _ = client.get(&url).header("authorization", KEY).send().await;
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    });

    // sluice budgets the whole key (it cannot see the other process until
    // the server tells it, with a 429 and Retry-After).
    let config = GateConfig::default().credential(
        "shared",
        CredentialConfig::with_rate("3/1s".parse()?).max_in_flight(2),
    );
    let sluice = Sluice::builder(config).seed(7).build()?;
    let plain = reqwest::Client::new();
    let client = ClientBuilder::new(plain.clone())
        // Anything else goes before: sluice sends with `plain` and ends the chain.
        .with(sluice.middleware(plain, |request: &reqwest::Request| {
            let target = Target::http(
                "shared",
                request.method(),
                request.url().path(),
                request.headers(),
            );
            Some(target.deadline(Duration::from_secs(3)))
        }))
        .build();

    let started = tokio::time::Instant::now();
    let calls = (0..10).map(|n| {
        let client = client.clone();
        let url = format!("{base}/orders/{n}");
        async move {
            let answer = client.get(&url).header("authorization", KEY).send().await;
            (n, answer, started.elapsed())
        }
    });
    for (n, answer, elapsed) in join_all(calls).await {
        let at = elapsed.as_millis();
        match answer {
            Ok(response) => println!("GET /orders/{n}  {at:>5} ms  {}", response.status()),
            Err(reqwest_middleware::Error::Middleware(error)) => {
                match error
                    .downcast_ref::<SluiceError>()
                    .map(SluiceError::outcome)
                {
                    Some(Outcome::RateLimited {
                        reason,
                        retry_after_ms,
                        ..
                    }) => println!(
                        "GET /orders/{n}  {at:>5} ms  deferred: rate_limited ({}), retry after {retry_after_ms} ms",
                        reason.as_str()
                    ),
                    Some(outcome) => println!("GET /orders/{n}  {at:>5} ms  {}", outcome.status()),
                    None => println!("GET /orders/{n}  {at:>5} ms  failed: {error}"),
                }
            }
            Err(error) => println!("GET /orders/{n}  {at:>5} ms  failed: {error}"),
        }
    }
    other.await?;

    let stats = server.api().stats();
    let ours = |r: &&sluice_fake::Record| r.path.starts_with("/orders");
    let sent = stats.requests.iter().filter(ours).count();
    let refused = stats
        .requests
        .iter()
        .filter(ours)
        .filter(|r| r.status == 429)
        .count();
    let other_refused = stats
        .requests
        .iter()
        .filter(|r| r.path.starts_with("/sync") && r.status == 429)
        .count();
    println!(
        "\nthe fake recorded {} requests: ours {sent} ({refused} answered 429 and retried after the wait), \
         the other process's {} ({other_refused} refused)",
        stats.total,
        stats.total - sent
    );
    server.shutdown().await?;
    Ok(())
}
