//! `sluice mcp`'s view of the configuration file: the sections it reads
//! and what it makes of them.
//!
//! - `config`: the file as a whole, [`McpConfig`], and `[mcp]`'s own fields;
//! - `remote`: the Streamable HTTP fields: how sluice signs in to a remote
//!   MCP server, and whether a client's own `Authorization` goes to it;
//! - `sessions`: the bounds on `--listen`'s sessions (idle time, how many,
//!   requests in progress in one);
//! - `exposure`: the names besides loopback `--listen` answers (`Host`,
//!   `Origin`), against DNS rebinding;
//! - `secrets`: what the proxy must never return to its client.

mod config;
mod exposure;
mod remote;
mod secrets;
mod sessions;

pub use config::{
    DEFAULT_MAX_MESSAGE_SIZE, DEFAULT_SHUTDOWN_GRACE, Deferral, McpConfig, ToolOverride,
};
pub use exposure::McpExposure;
pub use remote::{McpHttp, UpstreamAuth};
pub use sessions::{
    DEFAULT_MAX_SESSIONS, DEFAULT_SESSION_IDLE, DEFAULT_SESSION_QUEUE, McpSessions,
};
