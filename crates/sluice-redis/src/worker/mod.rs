//! The background worker: refunds (batched per credential), blocks and the fallback's local starts (kept and replayed while Redis is unreachable), so that none waits on Redis.

mod jobs;
mod local;
mod run;
mod unwritten;

pub(crate) use jobs::Jobs;
pub(crate) use unwritten::Unwritten;
