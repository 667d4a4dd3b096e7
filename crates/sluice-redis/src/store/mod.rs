//! The Lua scripts and how to call them: arguments in, replies parsed.
//!
//! [`Store`] is the Redis half of the limiter with no policy of its own:
//! one `EVALSHA` per call (redis-rs's [`redis::Script`] loads the script and
//! tries once more when the server answers `NOSCRIPT`, which means it did
//! not run). Every time in and out is integer microseconds relative to the
//! script's `now`, which is the server's `TIME` ([`Clock::Server`]) except in
//! tests that replay a model's timeline ([`Clock::At`]).

mod calls;
mod reply;
mod types;

pub use calls::Store;
pub(crate) use reply::{hold_of, pairs};
pub use types::{Clock, RecordArgs, ReserveArgs, Reserved, SlotGrant, SlotToken, Undo, View, Void};
