//! [`RedisBudget`]: the engine's shared budget on Redis — construction, and each decision orchestrated from holds, leases and the fallback.
//!
//! A call's path: [`SharedBudget::reserve`](sluice::shared::SharedBudget::reserve) looks at the credential's known
//! holds (`credential`, `holds`), gets a slot from `lease` (the pool, or a
//! reservation sent through the command runner, `runner`) and holds it
//! until its time, or, when Redis cannot be asked, lets `fallback` decide.
//! Refunds and blocks go to the background `worker`; `events` brings in
//! the blocks other processes publish; `status` shows it all.

mod decide;
mod handle;
mod instead;
mod recovery;

pub use handle::RedisBudget;
