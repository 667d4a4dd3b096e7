//! `[mcp]`'s Streamable HTTP fields: the header that authenticates sluice
//! to a remote MCP server, and whether a client's own `Authorization` may
//! go to it.

use http::{HeaderName, HeaderValue};

use crate::error::ConfigError;
use crate::file::McpFile;
use crate::headers::is_reserved_request_header;
use crate::secret::{self, Secret};
use crate::upstream::{DEFAULT_AUTH_HEADER, DEFAULT_AUTH_PREFIX};

/// `[mcp]` for a Streamable HTTP upstream (`sluice mcp --upstream URL`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpHttp {
    /// The variable holding the upstream's token (`upstream_secret_env`).
    pub secret_env: Option<String>,
    /// The header it goes in (`upstream_auth_header`, default `authorization`).
    pub auth_header: HeaderName,
    /// What precedes it (`upstream_auth_prefix`, default `"Bearer "`).
    pub auth_prefix: String,
    /// Pass a client's own `Authorization` header to the upstream
    /// (`forward_authorization`, default false). Never when sluice injects
    /// its own header there, nor when the listener's bearer token guards
    /// `--listen` (the client's header is then sluice's token).
    pub forward_authorization: bool,
}

/// The header injected into every request to the upstream. Its value is
/// a [`Secret`]: printed as `***`.
#[derive(Debug, Clone)]
pub struct UpstreamAuth {
    /// The header's name.
    pub header: HeaderName,
    /// Prefix and token, as sent.
    pub value: Secret,
}

pub(crate) fn section(file: &McpFile) -> Result<McpHttp, ConfigError> {
    let text = file
        .upstream_auth_header
        .as_deref()
        .unwrap_or(DEFAULT_AUTH_HEADER);
    let auth_header = HeaderName::from_bytes(text.as_bytes())
        .ok()
        .filter(|header| !is_reserved_request_header(header) && !is_mcp_header(header))
        .ok_or_else(|| {
            ConfigError::invalid(
                "mcp.upstream_auth_header",
                format!("{text:?} is not a header name sluice can set"),
            )
        })?;
    let auth_prefix = file
        .upstream_auth_prefix
        .clone()
        .unwrap_or_else(|| DEFAULT_AUTH_PREFIX.to_owned());
    if HeaderValue::from_str(&auth_prefix).is_err() {
        return Err(ConfigError::invalid(
            "mcp.upstream_auth_prefix",
            "holds characters not allowed in a header value",
        ));
    }
    if file.upstream_secret_env.as_deref() == Some("") {
        return Err(ConfigError::invalid(
            "mcp.upstream_secret_env",
            "must name an environment variable",
        ));
    }
    Ok(McpHttp {
        secret_env: file.upstream_secret_env.clone(),
        auth_header,
        auth_prefix,
        forward_authorization: file.forward_authorization.unwrap_or(false),
    })
}

/// The headers of the transport itself, which sluice carries.
fn is_mcp_header(name: &HeaderName) -> bool {
    let name = name.as_str();
    name == "mcp-session-id" || name == "mcp-protocol-version" || name == "last-event-id"
}

pub(crate) fn resolve(
    http: &McpHttp,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<UpstreamAuth>, ConfigError> {
    let Some(variable) = &http.secret_env else {
        return Ok(None);
    };
    let secret = secret::from_env(variable, "mcp.upstream_secret_env", env)?;
    let combined = format!("{}{}", http.auth_prefix, secret.expose());
    if HeaderValue::from_str(&combined).is_err() {
        return Err(ConfigError::invalid(
            "mcp.upstream_secret_env",
            format!(
                "the variable {variable} holds characters not allowed in a header value (the value is not shown)"
            ),
        ));
    }
    Ok(Some(UpstreamAuth {
        header: http.auth_header.clone(),
        value: Secret::new(combined),
    }))
}

#[cfg(test)]
mod tests {
    use crate::McpConfig;

    const BASE: &str = "[credentials.api]\nrate = \"5/1s\"\n";

    #[test]
    fn the_upstream_token_comes_from_the_environment_and_never_prints() {
        let config = McpConfig::from_toml(
            &format!("[mcp]\nupstream_secret_env = \"REMOTE_TOKEN\"\n{BASE}"),
            None,
        )
        .unwrap();
        let auth = config
            .upstream_auth(&|name| (name == "REMOTE_TOKEN").then(|| "tok-123".to_owned()))
            .unwrap()
            .unwrap();
        assert_eq!(auth.header, "authorization");
        assert_eq!(auth.value.expose(), "Bearer tok-123");
        assert!(!format!("{auth:?} {config:?}").contains("tok-123"));

        let missing = config.upstream_auth(&|_| None).unwrap_err();
        assert_eq!(missing.field(), Some("mcp.upstream_secret_env"));
        assert!(missing.to_string().contains("REMOTE_TOKEN"));
        let bad = config
            .upstream_auth(&|_| Some("line\nbreak-secret".to_owned()))
            .unwrap_err();
        assert!(!bad.to_string().contains("break-secret"), "{bad}");

        let none = McpConfig::from_toml(BASE, None).unwrap();
        assert!(none.upstream_auth(&|_| None).unwrap().is_none());
        assert!(!none.http.forward_authorization);
    }

    #[test]
    fn header_fields_are_checked_by_name() {
        for (field, line) in [
            (
                "mcp.upstream_auth_header",
                "upstream_auth_header = \"mcp-session-id\"",
            ),
            (
                "mcp.upstream_auth_header",
                "upstream_auth_header = \"bad header\"",
            ),
            (
                "mcp.upstream_auth_prefix",
                "upstream_auth_prefix = \"a\\nb\"",
            ),
            ("mcp.upstream_secret_env", "upstream_secret_env = \"\""),
        ] {
            let error = McpConfig::from_toml(&format!("[mcp]\n{line}\n{BASE}"), None).unwrap_err();
            assert_eq!(error.field(), Some(field), "{line}: {error}");
        }
        let custom = McpConfig::from_toml(
            &format!("[mcp]\nupstream_secret_env = \"K\"\nupstream_auth_header = \"x-api-key\"\nupstream_auth_prefix = \"\"\nforward_authorization = true\n{BASE}"),
            None,
        )
        .unwrap();
        assert!(custom.http.forward_authorization);
        let auth = custom
            .upstream_auth(&|_| Some("k".to_owned()))
            .unwrap()
            .unwrap();
        assert_eq!(
            (auth.header.as_str(), auth.value.expose()),
            ("x-api-key", "k")
        );
    }

    #[test]
    fn a_listener_off_loopback_needs_the_token() {
        let config = McpConfig::from_toml(
            &format!(
                "[server]\nauth_token_env = \"CLIENT_TOKEN\"\nidle_timeout = \"5s\"\n[mcp]\nallowed_hosts = [\"mcp.example.com\"]\n{BASE}"
            ),
            None,
        )
        .unwrap();
        let open = McpConfig::from_toml(BASE, None).unwrap();
        let public = "0.0.0.0:0".parse().ok();
        let error = open.listener(public, &|_| None).unwrap_err();
        assert_eq!(error.field(), Some("server.auth_token_env"));
        let loopback = open
            .listener("127.0.0.1:0".parse().ok(), &|_| None)
            .unwrap();
        assert!(loopback.auth_token.is_none());
        let guarded = config.listener(public, &|_| Some("t".to_owned())).unwrap();
        assert_eq!(guarded.idle_timeout, std::time::Duration::from_secs(5));
        assert_eq!(
            guarded.auth_token.map(|t| t.expose().to_owned()).as_deref(),
            Some("t")
        );
    }
}
