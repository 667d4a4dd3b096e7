//! The `Host` and `Origin` check of `--listen`, against DNS rebinding: a
//! request naming a host or coming from a site the listener was not set up
//! for is refused (421, 403) before it reaches a session.
//!
//! Loopback names (`localhost`, any loopback address, with or without a
//! port) are always answered, and so is a request with no `Origin` (one
//! not made by a browser page); `[mcp] allowed_hosts` / `allowed_origins`
//! add the names of a deliberate exposure.

use std::net::IpAddr;

use sluice_config::McpExposure;

/// Why a request is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// `Host` missing or naming a host not allowed: 421 Misdirected Request.
    Host,
    /// `Origin` naming a site not allowed: 403 Forbidden.
    Origin,
}

/// Checks a request's `Host` (or, lacking one, its URI's authority) and
/// `Origin` against loopback names and `exposure`.
pub(crate) fn check(
    exposure: &McpExposure,
    host: Option<&[u8]>,
    origin: Option<&[u8]>,
) -> Result<(), Refusal> {
    let host = host
        .and_then(|host| std::str::from_utf8(host).ok())
        .ok_or(Refusal::Host)?;
    if !host_allowed(exposure, host) {
        return Err(Refusal::Host);
    }
    match origin {
        None => Ok(()),
        Some(origin) => match std::str::from_utf8(origin) {
            Ok(origin) if origin_allowed(exposure, origin) => Ok(()),
            _ => Err(Refusal::Origin),
        },
    }
}

fn host_allowed(exposure: &McpExposure, host: &str) -> bool {
    let host = host.trim().to_ascii_lowercase();
    let Some((name, port)) = split_port(&host) else {
        return false;
    };
    is_loopback(name)
        || exposure
            .allowed_hosts
            .iter()
            .any(|allowed| match split_port(allowed) {
                Some((allowed_name, None)) => allowed_name == name,
                Some((allowed_name, Some(allowed_port))) => {
                    allowed_name == name && port == Some(allowed_port)
                }
                None => false,
            })
}

fn origin_allowed(exposure: &McpExposure, origin: &str) -> bool {
    let origin = origin.trim().to_ascii_lowercase();
    let host = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"));
    if let Some((name, _)) = host.and_then(split_port)
        && is_loopback(name)
    {
        return true;
    }
    exposure.allowed_origins.contains(&origin)
}

/// `name[:port]` or `[v6][:port]` into the name (brackets kept) and the
/// port; `None` when the port is not a number or there is nothing else.
fn split_port(host: &str) -> Option<(&str, Option<u16>)> {
    let (name, port) = if host.starts_with('[') {
        let end = host.find(']')?;
        let (name, rest) = host.split_at(end + 1);
        match rest {
            "" => (name, None),
            rest => (name, Some(rest.strip_prefix(':')?)),
        }
    } else {
        match host.rsplit_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (host, None),
        }
    };
    if name.is_empty() || name.contains(['/', '@', ' ']) {
        return None;
    }
    match port {
        None => Some((name, None)),
        Some(port) => port.parse().ok().map(|port| (name, Some(port))),
    }
}

fn is_loopback(name: &str) -> bool {
    if name == "localhost" {
        return true;
    }
    let bare = name
        .strip_prefix('[')
        .and_then(|name| name.strip_suffix(']'))
        .unwrap_or(name);
    // An IPv6 address must come in brackets; a bare one is not a Host.
    if bare.contains(':') && bare.len() == name.len() {
        return false;
    }
    bare.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exposure(hosts: &[&str], origins: &[&str]) -> McpExposure {
        let mut exposure = McpExposure::default();
        for host in hosts {
            exposure.add_host(host, "test").unwrap();
        }
        for origin in origins {
            exposure.add_origin(origin, "test").unwrap();
        }
        exposure
    }

    fn verdict(
        exposure: &McpExposure,
        host: Option<&str>,
        origin: Option<&str>,
    ) -> Result<(), Refusal> {
        check(exposure, host.map(str::as_bytes), origin.map(str::as_bytes))
    }

    #[test]
    fn loopback_hosts_with_or_without_a_port_and_nothing_else() {
        let none = McpExposure::default();
        for host in [
            "localhost",
            "localhost:7879",
            "LOCALHOST:1",
            "127.0.0.1",
            "127.0.0.1:7879",
            "[::1]",
            "[::1]:7879",
        ] {
            assert_eq!(verdict(&none, Some(host), None), Ok(()), "{host}");
        }
        for host in [
            "evil.example.com",
            "evil.example.com:7879",
            "localhost.evil.example.com",
            "127.0.0.1.nip.io",
            "0.0.0.0:7879",
            "::1",
            "[::1",
            "localhost:port",
            "",
            "user@localhost",
        ] {
            assert_eq!(
                verdict(&none, Some(host), None),
                Err(Refusal::Host),
                "{host:?}"
            );
        }
        assert_eq!(verdict(&none, None, None), Err(Refusal::Host));
    }

    #[test]
    fn a_missing_or_loopback_origin_and_nothing_else() {
        let none = McpExposure::default();
        for origin in [
            "http://localhost:3000",
            "http://127.0.0.1",
            "https://[::1]:8443",
        ] {
            assert_eq!(
                verdict(&none, Some("localhost"), Some(origin)),
                Ok(()),
                "{origin}"
            );
        }
        for origin in [
            "http://evil.example.com",
            "http://localhost.evil.example.com",
            "null",
            "file://",
            "http://127.0.0.1.nip.io",
        ] {
            assert_eq!(
                verdict(&none, Some("localhost:1"), Some(origin)),
                Err(Refusal::Origin),
                "{origin}"
            );
        }
        // The host is judged first: both wrong is a 421.
        assert_eq!(
            verdict(
                &none,
                Some("evil.example.com"),
                Some("http://evil.example.com")
            ),
            Err(Refusal::Host)
        );
    }

    #[test]
    fn the_lists_add_names() {
        let open = exposure(
            &["mcp.example.com", "10.0.0.5:7879"],
            &["https://app.example.com"],
        );
        assert_eq!(verdict(&open, Some("MCP.example.com:443"), None), Ok(()));
        assert_eq!(verdict(&open, Some("10.0.0.5:7879"), None), Ok(()));
        assert_eq!(
            verdict(&open, Some("10.0.0.5:80"), None),
            Err(Refusal::Host)
        );
        assert_eq!(verdict(&open, Some("localhost"), None), Ok(()));
        assert_eq!(
            verdict(
                &open,
                Some("mcp.example.com"),
                Some("https://app.example.com")
            ),
            Ok(())
        );
        assert_eq!(
            verdict(
                &open,
                Some("mcp.example.com"),
                Some("http://app.example.com")
            ),
            Err(Refusal::Origin)
        );
    }
}
