//! Rust futures driven from Python: awaited on the caller's asyncio loop
//! ([`Pending`]), or blocked on from synchronous code ([`block_on`]), and
//! Python work driven from Rust ([`PyTaskFuture`]).

mod block;
mod boxed;
mod helpers;
mod pending;
mod task;
mod wake;

pub(crate) use block::block_on;
pub(crate) use boxed::{Answer, BoxFuture};
pub(crate) use pending::Pending;
pub(crate) use task::{PyTaskFuture, WakeOnDone};
pub(crate) use wake::stop as stop_waking;
