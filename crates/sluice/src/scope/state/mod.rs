//! One scope at run time: its limiter cell, what it learned, its admission, its counters.
//!
//! - `scope` — the scope, its state behind one lock, and how each kind is made;
//! - `admit` — steps 3 and 4: a concurrency permit, and a deferred call's drain estimate;
//! - `slots` — step 5: start slots reserved, given back and trued up;
//! - `told` — what the server said (remaining, penalties, blocks, quotas), as step 2 reads it;
//! - `limit` — the rate in force: configured, stated, learned;
//! - `adapt` — the learned rate and cap (`"auto"`);
//! - `held` — a permit held past its call, while a body streams;
//! - `reload` — a reload's new limits put into a live scope;
//! - `status` — what the status endpoint shows of it.

mod adapt;
mod admit;
mod held;
mod limit;
mod reload;
mod scope;
mod slots;
mod status;
#[cfg(test)]
mod tests;
mod told;

pub(crate) use adapt::Adapted;
pub(crate) use held::Held;
pub(crate) use scope::Scope;
pub use status::ScopeStatus;
