//! The sidecar's part of `[credentials.NAME]`: the only origin its requests
//! go to, and how they are signed with the secret from the environment.

use http::{HeaderName, HeaderValue};
use url::Url;

use crate::error::ConfigError;
use crate::file::CredentialFile;
use crate::headers::is_reserved_request_header;
use crate::secret::{self, Env, Secret};

/// The header a credential's secret goes in by default.
pub const DEFAULT_AUTH_HEADER: &str = "authorization";
/// What precedes the secret in that header by default.
pub const DEFAULT_AUTH_PREFIX: &str = "Bearer ";

/// A credential's destination and signature.
#[derive(Debug, Clone)]
pub struct Upstream {
    /// The only origin its requests go to; paths are joined below its path.
    pub base_url: Url,
    /// The variable the secret was read from.
    pub secret_env: Option<String>,
    /// The secret, if the credential has one.
    pub secret: Option<Secret>,
    /// The header the secret goes in.
    pub auth_header: HeaderName,
    /// What precedes the secret in that header.
    pub auth_prefix: String,
    /// True when the budget should live in the shared backend.
    pub shared: bool,
    /// Which answers' bodies the signal reader needs (`body_signals`).
    pub body_signals: sluice::signal::BodySignals,
}

/// A credential's upstream, its secret read from the environment.
pub(crate) fn upstream(
    name: &str,
    file: &CredentialFile,
    env: Env<'_>,
) -> Result<Upstream, ConfigError> {
    let field = |f: &str| format!("credentials.{name}.{f}");
    // The sidecar's rule; the schema leaves it optional for `sluice mcp`.
    let base_url_text = file.base_url.as_deref().ok_or_else(|| {
        ConfigError::invalid(format!("credentials.{name}"), "missing field `base_url`")
    })?;
    let base_url = base_url(base_url_text, &field("base_url"))?;
    let auth_header_text = file.auth_header.as_deref().unwrap_or(DEFAULT_AUTH_HEADER);
    let auth_header = HeaderName::from_bytes(auth_header_text.as_bytes())
        .ok()
        .filter(|header| !is_reserved_request_header(header))
        .ok_or_else(|| {
            ConfigError::invalid(
                field("auth_header"),
                format!("{auth_header_text:?} is not a header name the sidecar can set"),
            )
        })?;
    let auth_prefix = file
        .auth_prefix
        .clone()
        .unwrap_or_else(|| DEFAULT_AUTH_PREFIX.to_owned());
    if HeaderValue::from_str(&auth_prefix).is_err() {
        return Err(ConfigError::invalid(
            field("auth_prefix"),
            "holds characters not allowed in a header value",
        ));
    }
    let secret = match &file.secret_env {
        None => None,
        Some(variable) => {
            let secret = secret::from_env(variable, &field("secret_env"), env)?;
            let combined = format!("{auth_prefix}{}", secret.expose());
            if HeaderValue::from_str(&combined).is_err() {
                return Err(ConfigError::invalid(
                    field("secret_env"),
                    format!(
                        "the variable {variable} holds characters not allowed in a header value (the value is not shown)"
                    ),
                ));
            }
            Some(secret)
        }
    };
    Ok(Upstream {
        base_url,
        secret_env: file.secret_env.clone(),
        secret,
        auth_header,
        auth_prefix,
        shared: file.shared,
        body_signals: crate::limits::body_signals(file, &field("body_signals"))?,
    })
}

/// An `http(s)` URL with a host and nothing that could carry a secret or
/// redirect a request: no user info, query or fragment.
fn base_url(text: &str, field: &str) -> Result<Url, ConfigError> {
    let invalid = |message: String| ConfigError::invalid(field, message);
    let url = Url::parse(text.trim())
        .map_err(|error| invalid(format!("{text:?} is not a URL: {error}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(invalid(format!(
            "{text:?} must be an http:// or https:// URL"
        )));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(invalid(format!("{text:?} has no host")));
    }
    if !url.username().is_empty() || url.password().is_some() {
        // Not quoted: the user info may be a secret.
        return Err(invalid(
            "must not carry a user name or password; use secret_env".to_owned(),
        ));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(invalid(format!(
            "{text:?} must not have a query or fragment; use secret_env for keys"
        )));
    }
    // A URL host may hold characters (`*`, `}`) that a request's
    // authority cannot: refused here, not when the client is built.
    let authority = &url[url::Position::BeforeHost..url::Position::AfterPort];
    if http::uri::Authority::try_from(authority).is_err() {
        return Err(invalid(format!(
            "{text:?} has a host an HTTP request cannot name"
        )));
    }
    Ok(url)
}
