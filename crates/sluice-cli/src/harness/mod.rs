//! The harnesses a model's calls can go through, for the demo and the
//! benchmarks: what people do without sluice, and sluice.

mod client;
mod fixed_window;
mod setup;
mod strategy;
mod turn;

pub(crate) use client::engine_response;
pub(crate) use setup::{Harness, Setup};
pub(crate) use strategy::{Strategy, View};
pub(crate) use turn::HarnessTurn;
