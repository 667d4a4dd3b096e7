//! sluice engine (work in progress).
mod rate;
pub use rate::{Rate, RateError};
