//! The listener's limits, from `[server]`.

use std::time::Duration;

use sluice_config::ServerSettings;

/// How long a connection may be idle or take over a request head, and
/// how many may be open at once.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    pub(crate) header_read_timeout: Duration,
    pub(crate) idle_timeout: Duration,
    pub(crate) max_connections: usize,
}

impl Limits {
    pub(crate) fn of(server: &ServerSettings) -> Self {
        Limits {
            header_read_timeout: server.header_read_timeout,
            idle_timeout: server.idle_timeout,
            max_connections: usize::try_from(server.max_connections).unwrap_or(usize::MAX),
        }
    }
}
