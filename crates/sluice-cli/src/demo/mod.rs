//! `sluice demo`: the shared-key incident from the article, replayed with a naive harness and with sluice.

pub(crate) mod chart;
mod command;
pub(crate) mod model;
mod progress;
pub(crate) mod replay;
mod report;
pub(crate) mod scenario;

pub(crate) use command::{Args, run};
