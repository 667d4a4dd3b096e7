//! The sidecar's configuration: the TOML file, its checks, and the typed result.

mod error;
mod file;
mod model;
mod validate;
mod value;

pub use error::ConfigError;
pub use model::{
    Config, DEFAULT_AUTH_HEADER, DEFAULT_AUTH_PREFIX, DEFAULT_LISTEN, DEFAULT_MAX_BODY,
    DEFAULT_SHARED_TIMEOUT, ServerSettings, SharedSettings, Upstream,
};
