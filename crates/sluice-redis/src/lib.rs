//! The shared limiter for sluice on Redis: one budget per API key, spent by many processes.
//!
//! # Mental model
//!
//! A local bucket stops one process's bursts but not two processes spending
//! the same key twice. [`RedisBudget`] implements the engine's
//! [`sluice::shared::SharedBudget`]: every start slot of a shared credential
//! is reserved in Redis, in the same exact sliding window (or GCRA bucket)
//! the engine uses locally, so all processes together keep the promise "at
//! most N starts in any window W".
//!
//! - **Scripts.** One Lua script per decision ([`Store`]), run with
//!   `EVALSHA`, reading the server's `TIME`: no client clock matters. A
//!   denial charges nothing. Every key of a credential carries the hash tag
//!   `{cred}`, so each script touches one slot and runs on Redis Cluster.
//! - **Penalties are shared.** A 429 one process sees blocks the scope in
//!   Redis for all of them, is published to the others at once, and voids
//!   the slots they were holding.
//! - **Leases.** Under load a process reserves several slots in one round
//!   trip and hands them to its own callers at their exact start times;
//!   without load every call is one round trip.
//! - **Failures.** Every command has a timeout and is sent at most once;
//!   a reservation whose answer never came is settled by its id (voided,
//!   so that it charges nothing) before anything is spent for its call;
//!   a circuit breaker stops asking after a few failures, and
//!   meanwhile the process decides locally at its share of the rate — never
//!   unlimited — until Redis answers again.
//!
//! `docs/shared-limiter.md` gives the keys, the lease scheme and a table of
//! failure modes with their overshoot bounds.
//!
//! # Example
//!
//! ```no_run
//! use std::sync::Arc;
//!
//! use bytes::Bytes;
//! use sluice::{CredentialConfig, Gate, GateConfig, ToolConfig, executor_fn};
//! use sluice_redis::{RedisBudget, RedisConfig};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let budget = RedisBudget::connect(RedisConfig::single("redis://127.0.0.1:6379")).await?;
//! let config = GateConfig::default()
//!     .credential(
//!         "search",
//!         CredentialConfig::with_rate("10/1s".parse()?).shared(true),
//!     )
//!     .tool("search", ToolConfig::read("search"));
//! let executor = executor_fn(|_request| async { Ok(http::Response::new(Bytes::new())) });
//! let gate = Gate::builder(config, executor)
//!     .shared(Arc::new(budget.clone()))
//!     .build()?;
//! // ... every process built this way spends one 10/1s budget between them.
//! println!("{}", serde_json::to_string(&budget.status())?);
//! # let _ = gate;
//! # Ok(())
//! # }
//! ```

mod beat;
mod breaker;
mod budget;
mod clock;
mod config;
mod connection;
mod credential;
mod decision;
mod error;
mod events;
mod fallback;
mod holds;
mod instant;
pub mod keys;
mod lease;
mod lua;
mod redact;
mod runner;
pub mod spend;
mod status;
pub mod store;
mod unknown;
mod windows;
mod worker;

pub use breaker::BreakerState;
pub use budget::RedisBudget;
pub use config::RedisConfig;
pub use credential::{DecisionCounts, Mode};
pub use error::Error;
pub use redact::{RedisUrl, redact_url};
pub use runner::ErrorCounts;
pub use status::{CredentialStatus, Status};
pub use store::{Clock, Store};
