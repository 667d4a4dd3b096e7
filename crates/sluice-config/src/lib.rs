//! `sluice.toml`: one home for reading sluice's configuration file, shared
//! by `sluice serve` (the sidecar) and `sluice mcp` (the MCP proxy).
//!
//! # Mental model
//!
//! - **One schema.** The file has the sections `[server]`, `[defaults]`,
//!   `[credentials.NAME]`, `[tools.NAME]`, `[shared]` and `[mcp]`; a field
//!   nobody knows is refused by name, whichever command reads the file.
//! - **Views.** [`SidecarConfig`] is what `sluice serve` needs: every
//!   credential has a `base_url` and its secret is read from the
//!   environment, every tool a `credential` and a `path`. [`McpConfig`] is
//!   what `sluice mcp` needs: the same limits, the credential its tools
//!   spend, and per-tool overrides; it never sends HTTP, so signing fields
//!   are optional and no secret is read. One file can serve both.
//!   [`EmbeddedConfig`] is what a program embedding the engine (the Python
//!   package) needs: the sidecar's view, with a `base_url` required only of
//!   credentials its configured tools send HTTP on.
//! - **Errors name the field.** Every [`ConfigError`] but an unreadable
//!   file or broken TOML names the field at fault (`credentials.support.rate`),
//!   and none ever quotes a secret.
//! - **Bounded values.** Every duration is at most [`MAX_DURATION`] (a week),
//!   so no configured deadline, wait or window can overflow a clock later.
//!   Secrets live in [`Secret`], which prints `***`.
//!
//! # Example
//!
//! ```
//! use sluice_config::{McpConfig, SidecarConfig};
//!
//! let toml = r#"
//!     [credentials.support]
//!     base_url = "http://127.0.0.1:9000"
//!     rate = "10/1s"
//!
//!     [tools.search_tickets]
//!     credential = "support"
//!     path = "/api/v2/search.json?query={query}"
//!     deadline = "20s"
//! "#;
//! let sidecar = SidecarConfig::from_toml(toml, |_| None)?;
//! let mcp = McpConfig::from_toml(toml, None)?;
//! assert_eq!(sidecar.gate.credentials["support"].rate, mcp.gate.credentials["support"].rate);
//! assert_eq!(mcp.credential, "support");
//!
//! let error = SidecarConfig::from_toml(&toml.replace("\"20s\"", "\"300000000000y\""), |_| None)
//!     .unwrap_err();
//! assert_eq!(error.field(), Some("tools.search_tickets.deadline"));
//! assert_eq!(
//!     error.to_string(),
//!     "tools.search_tickets.deadline: \"300000000000y\" is longer than the longest allowed duration (7d)"
//! );
//! # Ok::<(), sluice_config::ConfigError>(())
//! ```

mod defaults;
mod embedded;
mod error;
mod file;
mod headers;
mod limits;
mod load;
mod mcp;
mod secret;
mod server;
mod shared;
mod sidecar;
mod telemetry;
mod template;
mod tool;
mod upstream;
mod value;

pub use embedded::{EMBEDDED_WINDOW_MARGIN, EmbeddedConfig};
pub use error::ConfigError;
pub use headers::{SLUICE_HEADER_PREFIX, is_hop_by_hop, is_reserved_request_header};
pub use mcp::{
    DEFAULT_MAX_MESSAGE_SIZE, DEFAULT_MAX_SESSIONS, DEFAULT_SESSION_IDLE, DEFAULT_SESSION_QUEUE,
    DEFAULT_SHUTDOWN_GRACE, Deferral, McpConfig, McpExposure, McpHttp, McpSessions, ToolOverride,
    UpstreamAuth,
};
pub use secret::Secret;
pub use server::{
    DEFAULT_HEADER_READ_TIMEOUT, DEFAULT_IDLE_TIMEOUT, DEFAULT_LISTEN, DEFAULT_MAX_BODY,
    DEFAULT_MAX_CONNECTIONS, MAX_WORKERS, ServerSettings,
};
pub use shared::{DEFAULT_SHARED_TIMEOUT, SharedSettings};
pub use sidecar::SidecarConfig;
pub use telemetry::{
    DEFAULT_EXPORT_INTERVAL, DEFAULT_SERVICE_NAME, RootSampler, Sampler, Telemetry,
    TelemetrySettings,
};
pub use template::{FillError, Filled, PathTemplate, TemplateError};
pub use tool::{ToolRequest, ToolSpec};
pub use upstream::{DEFAULT_AUTH_HEADER, DEFAULT_AUTH_PREFIX, Upstream};
pub use url::Url;
pub use value::MAX_DURATION;
