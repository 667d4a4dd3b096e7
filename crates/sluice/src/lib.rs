//! sluice engine (work in progress).
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
pub mod signal;
mod turn;

pub use call::{Call, Completion, Route};
pub use config::{ConfigError, CredentialConfig, Defaults, GateConfig, ToolConfig};
pub use executor::{Executor, FnExecutor, Payload, Request, TransportError, executor_fn};
pub use gate::{Gate, GateBuilder};
pub use observe::{Event, Observer, WaitKind};
pub use outcome::{Outcome, Reason};
pub use rate::{Rate, RateError};
pub use retry::{Failure, RetryBudget, full_jitter};
pub use turn::Turn;
