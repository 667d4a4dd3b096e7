//! `[mcp] allowed_hosts` and `allowed_origins`: the names besides loopback
//! that `sluice mcp --listen` answers, against DNS rebinding.
//!
//! A browser page on any site can make requests to a loopback port by
//! pointing a name of its own at 127.0.0.1; its requests then carry that
//! name as `Host` and the page's site as `Origin`. The listener therefore
//! answers only loopback `Host` values and a missing or loopback `Origin`,
//! plus what these lists add for a deliberate exposure. A listener on a
//! non-loopback address has no name to assume, so there `allowed_hosts` is
//! required.

use crate::error::ConfigError;
use crate::file::McpFile;

/// Most entries in either list: each is compared against every request.
const MAX_ENTRIES: usize = 256;

/// `[mcp]` names a `--listen` client may use beyond loopback ones.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct McpExposure {
    /// `allowed_hosts`: `Host` values accepted besides loopback ones, each
    /// lowercased: `name` (any port) or `name:port`; an IPv6 address in
    /// brackets (`[fd00::1]:7879`).
    pub allowed_hosts: Vec<String>,
    /// `allowed_origins`: `Origin` values accepted besides loopback ones,
    /// each lowercased, as a browser sends it: `https://app.example.com`
    /// or with a port; no path.
    pub allowed_origins: Vec<String>,
}

impl McpExposure {
    /// Adds a `Host` value (`--allow-host`); an error names `field`.
    pub fn add_host(&mut self, text: &str, field: &str) -> Result<(), ConfigError> {
        let host = host_entry(text).map_err(|message| ConfigError::invalid(field, message))?;
        self.push(host, field, true)
    }

    /// Adds an `Origin` value (`--allow-origin`); an error names `field`.
    pub fn add_origin(&mut self, text: &str, field: &str) -> Result<(), ConfigError> {
        let origin = origin_entry(text).map_err(|message| ConfigError::invalid(field, message))?;
        self.push(origin, field, false)
    }

    fn push(&mut self, entry: String, field: &str, host: bool) -> Result<(), ConfigError> {
        let list = if host {
            &mut self.allowed_hosts
        } else {
            &mut self.allowed_origins
        };
        if list.len() >= MAX_ENTRIES {
            return Err(ConfigError::invalid(
                field,
                format!("more than {MAX_ENTRIES} entries"),
            ));
        }
        if !list.contains(&entry) {
            list.push(entry);
        }
        Ok(())
    }
}

pub(crate) fn section(file: &McpFile) -> Result<McpExposure, ConfigError> {
    let mut exposure = McpExposure::default();
    for (index, text) in file.allowed_hosts.iter().flatten().enumerate() {
        exposure.add_host(text, &format!("mcp.allowed_hosts[{index}]"))?;
    }
    for (index, text) in file.allowed_origins.iter().flatten().enumerate() {
        exposure.add_origin(text, &format!("mcp.allowed_origins[{index}]"))?;
    }
    Ok(exposure)
}

/// A `Host` value as `host` or `host:port`, lowercased.
fn host_entry(text: &str) -> Result<String, String> {
    let host = text.trim().to_ascii_lowercase();
    if host.is_empty() {
        return Err("empty: give a host name such as \"mcp.example.com\"".to_owned());
    }
    if host.contains("://") || host.contains('/') {
        return Err(format!(
            "{text:?} is not a Host value: give the name only, such as \"mcp.example.com\" or \"mcp.example.com:7879\" (a scheme or path goes in allowed_origins)"
        ));
    }
    if host == "*" || !host.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(format!(
            "{text:?} is not a Host value: give a name, an address, or either with :port"
        ));
    }
    Ok(host)
}

/// An `Origin` value: `scheme://host[:port]`, lowercased, no trailing slash.
fn origin_entry(text: &str) -> Result<String, String> {
    let origin = text.trim().trim_end_matches('/').to_ascii_lowercase();
    let rest = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"));
    match rest {
        Some(host) if !host.is_empty() && !host.contains('/') && host_entry(host).is_ok() => {
            Ok(origin)
        }
        _ => Err(format!(
            "{text:?} is not an origin: give it as a browser sends it, such as \"https://app.example.com\""
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::McpConfig;

    #[test]
    fn entries_are_lowercased_and_checked() {
        let config = McpConfig::from_toml(
            "[credentials.a]\n[mcp]\nallowed_hosts = [\"MCP.example.com\", \"10.0.0.5:7879\", \"[fd00::1]\"]\nallowed_origins = [\"https://App.example.com/\"]",
            None,
        )
        .unwrap();
        assert_eq!(
            config.exposure.allowed_hosts,
            ["mcp.example.com", "10.0.0.5:7879", "[fd00::1]"]
        );
        assert_eq!(config.exposure.allowed_origins, ["https://app.example.com"]);
        for (toml, field) in [
            ("allowed_hosts = [\"ok\", \"\"]", "mcp.allowed_hosts[1]"),
            (
                "allowed_hosts = [\"https://x.example\"]",
                "mcp.allowed_hosts[0]",
            ),
            ("allowed_hosts = [\"*\"]", "mcp.allowed_hosts[0]"),
            ("allowed_hosts = [\"a b\"]", "mcp.allowed_hosts[0]"),
            (
                "allowed_origins = [\"x.example\"]",
                "mcp.allowed_origins[0]",
            ),
            (
                "allowed_origins = [\"https://x.example/app\"]",
                "mcp.allowed_origins[0]",
            ),
            ("allowed_hosts = \"x\"", "mcp.allowed_hosts"),
        ] {
            let error =
                McpConfig::from_toml(&format!("[credentials.a]\n[mcp]\n{toml}"), None).unwrap_err();
            assert_eq!(error.field(), Some(field), "{toml}: {error}");
        }
    }

    #[test]
    fn a_listener_off_loopback_needs_allowed_hosts_as_well_as_the_token() {
        let token = |_: &str| Some("t".to_owned());
        let public = "0.0.0.0:7879".parse().ok();
        let bare = McpConfig::from_toml("[credentials.a]\n[server]\nauth_token_env = \"T\"", None)
            .unwrap();
        let error = bare.listener(public, &token).unwrap_err();
        assert_eq!(error.field(), Some("mcp.allowed_hosts"), "{error}");
        assert!(error.to_string().contains("0.0.0.0:7879"), "{error}");
        assert!(bare.listener("127.0.0.1:0".parse().ok(), &token).is_ok());
        assert!(bare.listener("[::1]:0".parse().ok(), &token).is_ok());
        let mut flagged = bare.clone();
        flagged
            .exposure
            .add_host("mcp.example.com", "--allow-host")
            .unwrap();
        assert!(flagged.listener(public, &token).is_ok());
    }

    #[test]
    fn flags_add_to_the_file_and_name_themselves_in_errors() {
        let mut exposure = McpExposure::default();
        exposure.add_host("a.example", "--allow-host").unwrap();
        exposure.add_host("A.example", "--allow-host").unwrap();
        assert_eq!(exposure.allowed_hosts, ["a.example"]);
        let error = exposure
            .add_origin("a.example", "--allow-origin")
            .unwrap_err();
        assert_eq!(error.field(), Some("--allow-origin"));
    }
}
