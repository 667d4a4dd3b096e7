//! The HTTP plumbing sluice's front ends share: the sidecar
//! (`sluice-server`), the MCP proxy (`sluice-mcp`) and the Python package
//! (`sluice-py`) depend on it, and it depends on nothing of theirs.
//!
//! # Mental model
//!
//! - An engine call carries an [`Outbound`]: a configured tool's rendered
//!   [`HttpRequest`] ([`tool_call`] makes it, for every front end), or a
//!   request that arrived at the proxy. [`forward`]
//!   joins its target below the credential's base URL (and refuses a path
//!   that would climb out of it); [`client_deadline`] bounds the deadline a
//!   client gave it.
//! - [`HttpExecutor`] is the engine's executor over hyper's client: it
//!   signs a request with its credential's secret and sends it to that
//!   credential's origin, nowhere else; a streamed answer's body rides
//!   beside its head.
//! - [`scrub`] masks every configured secret as `***` in what a front end
//!   returns, streamed bodies included.
//! - [`serve`] runs an [`App`] (an axum router, and optionally a route
//!   answered without it) on a listener with header-read and idle
//!   timeouts, a bound on connections and accept errors backed off;
//!   [`serve_workers`] does the same on one current-thread runtime per
//!   worker, each with its own socket ([`bind`]). Both stop with a graceful
//!   shutdown bounded by a grace period.

mod deadline;
mod executor;
pub mod forward;
mod function;
mod listener;
mod payload;
pub mod scrub;
mod serve;
#[cfg(feature = "redis")]
mod shared;
mod tool_call;
pub mod trace;

pub use deadline::{Refused, call_deadline, client_deadline};
pub use executor::{ClientError, HttpExecutor};
pub use function::{Raised, outcome_of};
pub use listener::{App, Direct, DirectAnswer, Listeners, bind};
pub use payload::{HttpRequest, Outbound};
pub use serve::{serve, serve_router, serve_workers};
#[cfg(feature = "redis")]
pub use shared::redis_config;
pub use tool_call::{Refusal, ToolCall, tool_call};
pub use url::Url;
