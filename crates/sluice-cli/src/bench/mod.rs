//! `sluice bench`: sluice against what people use instead, side by side, on
//! real loopback HTTP against the fake API.

mod children;
mod command;
mod json_api;
mod limiters;
mod llm;
mod load;
mod mcp;
mod outcome;
mod overhead;
mod peers;
mod priority;
mod redis_nodes;
mod scale;
mod scenarios;
mod shared;
mod ttfb;

pub(crate) use command::{Args, run};
