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
//! Every call has a [`Deadline`]: its length is bounded by
//! [`Deadline::MAX_LEN`] (a week), as is every other duration the library
//! takes, so no value makes a call panic. A longer one is refused where
//! it is given: an `error` outcome for a call, a [`ConfigError`] naming
//! the field for a configuration.
//!
//! # Where things live
//!
//! A call can be followed from the file tree:
//!
//! - `gate.rs`, `turn.rs` — the handles a harness holds, thin shells over
//!   `engine/`: the state they share (`state.rs`: defaults, executor,
//!   credentials, tools, scopes, RNG, clock, observer, shared budget;
//!   `credential.rs`; `routing.rs`: a call's route, credential and scopes;
//!   `turn_state.rs`: a turn's flights and request budget);
//! - `pipeline/` — the call path, in order: `driver/` runs steps 1 to 9
//!   (`mod.rs` a call's entry and step 9, `attempts.rs` steps 2 to 8),
//!   `holds.rs` is step 2, `admit.rs` steps 3 and 4 (the concurrency
//!   permits and their queue), `reserve/` step 5 (with the one guard that
//!   owns every refund), `learn.rs` step 7, `classify.rs` step 8's verdicts,
//!   `shadow.rs` what shadow mode (`enforce = false`) records instead of acting;
//! - `coalesce.rs` (step 1), [`scope`] (admission, concurrency and each
//!   bucket's state), [`limiter`] (the pure bucket maths), [`signal`]
//!   (reading the server), `retry.rs`, `outcome.rs`, `deadline.rs`;
//! - `config/` — [`GateConfig`] as written (`model.rs`), checked
//!   (`validate.rs`) and resolved per credential (`limits.rs`);
//! - [`priority_seats`] — the callers sleeping until their start, so that
//!   higher priorities are served first (the engine's and a shared
//!   backend's; `scope/seats.rs` is what the engine's callers hold there);
//! - [`shared`] — the seam a budget shared across processes plugs into;
//!   [`adapt`] — `rate = "auto"` and `max_in_flight = "auto"`.
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
mod body;
mod call;
mod canonical;
pub mod clock;
mod coalesce;
mod config;
mod deadline;
mod engine;
mod executor;
mod gate;
mod hash;
pub mod limiter;
mod observe;
mod outcome;
mod pipeline;
pub mod priority_seats;
mod rate;
mod retry;
pub mod scope;
pub mod shared;
pub mod signal;
mod stream;
mod turn;

pub use body::Body;
pub use call::{Call, Completion, Route};
pub use config::{
    ConfigError, Cost, CredentialConfig, Defaults, GateConfig, GroupConfig, Priority,
    PriorityError, Reserve, Settle, Spend, ToolConfig, UnitConfig,
};
pub use deadline::{Deadline, DeadlineError};
pub use executor::{
    Executor, FnExecutor, NoRetry, Payload, Reply, Request, TransportError, executor_fn,
};
pub use gate::{Gate, GateBuilder};
pub use observe::{Event, Observer, ShadowDecision, WaitKind};
pub use outcome::{Outcome, Reason};
pub use rate::{Rate, RateError};
pub use retry::{Failure, RetryBudget, full_jitter};
pub use stream::{BodyStream, BoxError, StreamSlot};
pub use turn::Turn;
