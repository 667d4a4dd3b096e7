//! Backpressure for an AI agent's parallel tool calls against rate-limited APIs.
//!
//! # Mental model
//!
//! A [`Gate`] holds the limits of every **credential** (an API key: the unit
//! a server throttles) and the **tools** bound to them. A harness runs each
//! model step as a [`Turn`]: the turn's calls go through the gate together,
//! and each gets exactly one [`Outcome`], in call order — what the model is
//! told. Between the call and the network, every call passes the same
//! pipeline:
//!
//! 1. **coalesce** — an identical read already in flight in this turn is
//!    joined; one answered within the turn's cache TTL is reused;
//! 2. **scope state** — a spent quota, or a server block longer than the
//!    call can wait, answers at once without sending;
//! 3. **admission** — a bounded queue per credential; full, the call is
//!    shed with an honest drain estimate;
//! 4. **concurrency** — a permit (`max_in_flight`);
//! 5. **rate** — a start slot from the scope's [`limiter`] cell; a wait up to
//!    the inline threshold that fits the deadline is slept, longer ones
//!    surface as `rate_limited`;
//! 6. **send** through the harness's [`Executor`], with the remaining deadline;
//! 7. **learn** — the response's rate-limit headers are read into a
//!    [`signal::Signal`] and the scopes synced;
//! 8. **retry** what is retryable, through the same bucket, with full jitter
//!    and within the credential's retry budget;
//! 9. **answer**, filling the turn's cache for reads.
//!
//! The engine never opens a socket, reads time only through tokio's clock
//! (so `#[tokio::test(start_paused = true)]` drives it), and takes its
//! randomness from an injected RNG.
//!
//! # Example
//!
//! ```
//! use bytes::Bytes;
//! use serde_json::json;
//! use sluice::{Call, CredentialConfig, Gate, GateConfig, Outcome, ToolConfig, executor_fn};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
//! let config = GateConfig::default()
//!     .credential("support", CredentialConfig::with_rate("2/1s".parse().unwrap()))
//!     .tool("search_tickets", ToolConfig::read("support"));
//! let executor = executor_fn(|_request| async { Ok(http::Response::new(Bytes::from_static(b"{}"))) });
//! let gate = Gate::builder(config, executor).seed(1).build().unwrap();
//!
//! // Three distinct searches on a key allowing 2 per second: the third waits
//! // a second inline (below the 2 s threshold), so the model sees three answers.
//! let outcomes = gate
//!     .turn()
//!     .run(["a", "b", "c"].map(|q| Call::new("search_tickets", json!({ "query": q }))))
//!     .await;
//! assert!(outcomes.iter().all(Outcome::is_ok));
//! # });
//! ```
pub mod adapt;
mod call;
mod canonical;
mod coalesce;
mod config;
mod executor;
mod gate;
pub mod limiter;
mod observe;
mod outcome;
mod pipeline;
mod rate;
mod retry;
pub mod scope;
pub mod shared;
pub mod signal;
mod turn;

pub use call::{Call, Completion, Route};
pub use config::{ConfigError, CredentialConfig, Defaults, GateConfig, Reserve, ToolConfig};
pub use executor::{Executor, FnExecutor, Payload, Request, TransportError, executor_fn};
pub use gate::{Gate, GateBuilder};
pub use observe::{Event, Observer, WaitKind};
pub use outcome::{Outcome, Reason};
pub use rate::{Rate, RateError};
pub use retry::{Failure, RetryBudget, full_jitter};
pub use turn::Turn;
