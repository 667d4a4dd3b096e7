//! Adaptive limits: probing for an unknown rate, and sizing concurrency from latency.

mod aimd;

pub use aimd::{Aimd, AimdState, MIN_CYCLE};
