//! The listener the sidecar and `sluice mcp --listen` serve on: connections accepted and served by hyper, with
//! header-read and idle timeouts, a bound on open connections, accept errors
//! (a full file-descriptor table) backed off, and one worker thread per CPU,
//! each with its own runtime and its own socket on the port.

mod accept;
mod activity;
mod connection;
mod limits;
mod workers;

pub(crate) use accept::accept_loop;
pub use connection::{App, Direct, DirectAnswer};
pub(crate) use limits::Limits;
pub use workers::{Listeners, bind};
