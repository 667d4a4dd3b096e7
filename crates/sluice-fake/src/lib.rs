//! A fake HTTP API that throttles like real APIs do and records every request.
//!
//! # Mental model
//!
//! A [`FakeApi`] is a server with a rate limiter in front of every endpoint:
//!
//! - **Keys.** Each request is counted against a key: its `Authorization` value, else its
//!   `x-api-key` value, else [`ANONYMOUS`]. Every key has its own limiter state.
//! - **Resources.** A request belongs to the first [`Resource`] whose path prefix matches
//!   (GitHub's `search` for `/search...`), else to the default resource (`core` in the GitHub
//!   style, `default` otherwise). A key's limiter on one resource is independent of its
//!   limiter on another, so one exhausted scope does not throttle the others.
//! - **Limits.** [`Limits`] says how many requests may start per window (sliding window,
//!   fixed window or token bucket; see [`limiter`] for the maths), how many may be in flight,
//!   how many a day, and optionally a token budget. A throttled request costs nothing and
//!   gets 429 at once; an admitted one is answered 200 after the configured [`Latency`].
//! - **Signals.** The [`HeaderStyle`] decides which rate-limit headers the fake sends (none,
//!   Retry-After only, IETF, GitHub, OpenAI); [`RetryAfter`] decides the throttled wait it
//!   announces (by default the exact one).
//! - **Records.** Every request is recorded with its start, its end, its key, its status and
//!   how many of its key's requests were in flight: the witness tests assert on.
//! - **Scripts.** [`Rule`]s answer chosen requests with a canned [`Reply`] (a 503, a 429 with
//!   odd headers), bypassing the limiter unless the rule says otherwise.
//! - **Time.** Everything runs on tokio's clock, so on a paused clock the latency, the
//!   windows, the records and even the `Date` header follow virtual time.
//!
//! [`FakeApi::handle`] answers a request in-process, with no socket; [`FakeServer`] serves the
//! same fake over HTTP, where `GET /_fake/stats` returns the records and `POST /_fake/reset`
//! forgets them.
//!
//! # Example
//!
//! ```
//! use std::time::Duration;
//!
//! use bytes::Bytes;
//! use sluice_fake::{Config, FakeApi, FakeServer, Latency, Limits};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // Two requests per second per key, each taking 10 ms.
//! let config = Config::new(Limits::new(2, Duration::from_secs(1)))
//!     .with_latency(Latency::Fixed(Duration::from_millis(10)));
//! let server = FakeServer::spawn(FakeApi::new(config)?).await?;
//! println!("serving on {}", server.url());
//!
//! // In-process, through the same fake the server serves.
//! let api = server.api();
//! for _ in 0..3 {
//!     let request = http::Request::get("/v1/items")
//!         .header("authorization", "Bearer a")
//!         .body(Bytes::new())?;
//!     api.handle(request).await;
//! }
//!
//! let statuses: Vec<u16> = api.requests().iter().map(|r| r.status).collect();
//! assert_eq!(statuses, [200, 200, 429]);
//! assert_eq!(api.stats().throttled, 1);
//! server.shutdown().await?;
//! # Ok(())
//! # }
//! ```

mod bodies;
mod clock;
mod config;
mod fake;
mod headers;
pub mod limiter;
mod record;
mod scope;
mod script;
mod server;

pub use bodies::BodyStyle;
pub use config::{
    Algorithm, Config, ConfigError, CostField, HeaderStyle, KeyLimits, Latency, Limits,
    ParseNameError, Resource, RetryAfter, TokenLimit, Usage, Window,
};
pub use fake::{ANONYMOUS, FakeApi};
pub use record::{Record, Stats};
pub use script::{Reply, Rule};
pub use server::{FakeServer, router};
