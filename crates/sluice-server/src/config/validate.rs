//! From the file as written to the typed configuration: every value checked,
//! every error naming its field, no secret ever quoted.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use http::{HeaderName, HeaderValue, Method};
use reqwest::Url;
use sluice::{CredentialConfig, Defaults, GateConfig, Rate, Reserve, ToolConfig};

use super::error::ConfigError;
use super::file::{
    CredentialFile, DefaultsFile, File, NumberOrText, ServerFile, SharedFile, ToolFile,
};
use super::model::{
    Config, DEFAULT_AUTH_HEADER, DEFAULT_AUTH_PREFIX, DEFAULT_LISTEN, DEFAULT_MAX_BODY,
    DEFAULT_SHARED_TIMEOUT, ServerSettings, SharedSettings, Upstream,
};
use super::value;
use crate::forward::is_reserved_request_header;
use crate::secret::Secret;
use crate::template::PathTemplate;
use crate::tool::ToolSpec;

type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

pub(crate) fn config(file: File, env: Env<'_>) -> Result<Config, ConfigError> {
    let server = server(&file.server, env)?;
    let defaults = defaults(&file.defaults)?;
    let mut gate = GateConfig::default().defaults(defaults);
    let mut credentials = BTreeMap::new();
    for (name, credential) in &file.credentials {
        check_name(name, &format!("credentials.{name}"))?;
        let (limits, upstream) = self::credential(name, credential, env)?;
        gate = gate.credential(name, limits);
        credentials.insert(name.clone(), upstream);
    }
    let mut tools = BTreeMap::new();
    for (name, tool) in &file.tools {
        check_name(name, &format!("tools.{name}"))?;
        let (route, spec) = self::tool(name, tool, &credentials)?;
        gate = gate.tool(name, route);
        tools.insert(name.clone(), spec);
    }
    let shared = file.shared.as_ref().map(shared).transpose()?;
    if shared.is_none()
        && let Some((name, _)) = credentials.iter().find(|(_, upstream)| upstream.shared)
    {
        return Err(ConfigError::invalid(
            format!("credentials.{name}.shared"),
            "true needs a [shared] section with redis_url or redis_urls",
        ));
    }
    // The engine checks what it owns (limits, defaults); its errors name the same fields.
    gate.validate()?;
    let config = Config {
        server,
        gate,
        credentials,
        tools,
        shared,
    };
    config.check_exposure()?;
    Ok(config)
}

fn server(file: &ServerFile, env: Env<'_>) -> Result<ServerSettings, ConfigError> {
    let listen_text = file.listen.as_deref().unwrap_or(DEFAULT_LISTEN);
    let listen: SocketAddr = listen_text.trim().parse().map_err(|_| {
        ConfigError::invalid(
            "server.listen",
            format!(
                "{listen_text:?} is not an address such as \"127.0.0.1:7878\" or \"[::1]:7878\""
            ),
        )
    })?;
    let max_body = match &file.max_body {
        None => DEFAULT_MAX_BODY,
        Some(text) => value::size(text).map_err(|m| ConfigError::invalid("server.max_body", m))?,
    };
    let auth_token = match &file.auth_token_env {
        None => None,
        Some(variable) => Some(read_env(variable, "server.auth_token_env", env)?),
    };
    Ok(ServerSettings {
        listen,
        max_body,
        auth_token_env: file.auth_token_env.clone(),
        auth_token,
    })
}

fn defaults(file: &DefaultsFile) -> Result<Defaults, ConfigError> {
    let mut defaults = Defaults::default();
    let durations = [
        ("deadline", &file.deadline, &mut defaults.deadline),
        ("inline_wait", &file.inline_wait, &mut defaults.inline_wait),
        (
            "turn_cache_ttl",
            &file.turn_cache_ttl,
            &mut defaults.turn_cache_ttl,
        ),
        ("quota_after", &file.quota_after, &mut defaults.quota_after),
        (
            "backoff_base",
            &file.backoff_base,
            &mut defaults.backoff_base,
        ),
        ("backoff_cap", &file.backoff_cap, &mut defaults.backoff_cap),
        (
            "retry_window",
            &file.retry_window,
            &mut defaults.retry_window,
        ),
        (
            "expected_latency",
            &file.expected_latency,
            &mut defaults.expected_latency,
        ),
        ("scope_idle", &file.scope_idle, &mut defaults.scope_idle),
    ];
    for (name, text, slot) in durations {
        if let Some(text) = text {
            *slot = duration(text, &format!("defaults.{name}"))?;
        }
    }
    if let Some(margin) = &file.window_margin {
        defaults.window_margin = value::duration_or_zero(margin)
            .map_err(|m| ConfigError::invalid("defaults.window_margin", m))?;
    }
    if let Some(budget) = file.turn_budget {
        defaults.turn_budget = Some(budget);
    }
    if let Some(attempts) = file.max_attempts {
        defaults.max_attempts = attempts;
    }
    if let Some(ratio) = file.retry_ratio {
        defaults.retry_ratio = ratio;
    }
    if let Some(floor) = file.retry_floor {
        defaults.retry_floor = floor;
    }
    Ok(defaults)
}

fn credential(
    name: &str,
    file: &CredentialFile,
    env: Env<'_>,
) -> Result<(CredentialConfig, Upstream), ConfigError> {
    let field = |f: &str| format!("credentials.{name}.{f}");
    let base_url = base_url(&file.base_url, &field("base_url"))?;
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
            let secret = read_env(variable, &field("secret_env"), env)?;
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
    let (rate, auto_rate) = match file.rate.as_deref().map(str::trim) {
        None => (None, false),
        Some("auto") => (None, true),
        Some(text) => {
            let rate = text
                .parse::<Rate>()
                .map_err(|error| ConfigError::invalid(field("rate"), error.to_string()))?;
            (Some(rate), false)
        }
    };
    let (max_in_flight, auto_concurrency) = match &file.max_in_flight {
        None => (None, false),
        Some(NumberOrText::Text(text)) if text.trim() == "auto" => (None, true),
        Some(NumberOrText::Number(n)) => {
            let n = u32::try_from(*n).map_err(|_| {
                ConfigError::invalid(field("max_in_flight"), format!("{n} is out of range"))
            })?;
            (Some(n), false)
        }
        Some(NumberOrText::Text(text)) => {
            return Err(ConfigError::invalid(
                field("max_in_flight"),
                format!("{text:?} is neither a whole number nor \"auto\""),
            ));
        }
    };
    let reserve = file
        .reserve
        .as_ref()
        .map(|value| reserve(value, &field("reserve")))
        .transpose()?;
    let expected_latency = file
        .expected_latency
        .as_deref()
        .map(|text| duration(text, &field("expected_latency")))
        .transpose()?;
    let policy_window = file
        .policy_window
        .as_deref()
        .map(|text| duration(text, &field("policy_window")))
        .transpose()?;
    let limits = CredentialConfig {
        rate,
        auto_rate,
        learn: file.learn.unwrap_or(true),
        policy_window,
        reserve,
        auto_concurrency,
        burst: file.burst,
        max_in_flight,
        queue: file.queue,
        expected_latency,
        shared: file.shared,
    };
    let upstream = Upstream {
        base_url,
        secret_env: file.secret_env.clone(),
        secret,
        auth_header,
        auth_prefix,
        shared: file.shared,
    };
    Ok((limits, upstream))
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
    Ok(url)
}

fn tool(
    name: &str,
    file: &ToolFile,
    credentials: &BTreeMap<String, Upstream>,
) -> Result<(ToolConfig, ToolSpec), ConfigError> {
    let field = |f: &str| format!("tools.{name}.{f}");
    if !credentials.contains_key(&file.credential) {
        return Err(ConfigError::invalid(
            field("credential"),
            format!("names unknown credential {:?}", file.credential),
        ));
    }
    let method_text = file.method.as_deref().unwrap_or("GET");
    let method = match method_text.trim().to_ascii_uppercase().as_str() {
        "GET" => Method::GET,
        "HEAD" => Method::HEAD,
        "POST" => Method::POST,
        "PUT" => Method::PUT,
        "PATCH" => Method::PATCH,
        "DELETE" => Method::DELETE,
        "OPTIONS" => Method::OPTIONS,
        _ => {
            return Err(ConfigError::invalid(
                field("method"),
                format!(
                    "{method_text:?} is not one of GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"
                ),
            ));
        }
    };
    let path: PathTemplate =
        file.path
            .parse()
            .map_err(|error: crate::template::TemplateError| {
                ConfigError::invalid(field("path"), error.to_string())
            })?;
    let safe = matches!(method, Method::GET | Method::HEAD | Method::OPTIONS);
    let read = file.read.unwrap_or(safe);
    // RFC 9110 §9.2.2: PUT and DELETE are idempotent, like the safe methods.
    let idempotent = file
        .idempotent
        .unwrap_or(read || safe || matches!(method, Method::PUT | Method::DELETE));
    let deadline = file
        .deadline
        .as_deref()
        .map(|text| duration(text, &field("deadline")))
        .transpose()?;
    let route = ToolConfig {
        credential: file.credential.clone(),
        read,
        idempotent,
        deadline,
    };
    let spec = ToolSpec {
        credential: file.credential.clone(),
        method,
        path,
    };
    Ok((route, spec))
}

fn shared(file: &SharedFile) -> Result<SharedSettings, ConfigError> {
    let redis = |text: &str, field: &str| -> Result<Secret, ConfigError> {
        // Never quoted: a Redis URL may carry a password.
        let url = Url::parse(text.trim())
            .map_err(|_| ConfigError::invalid(field, "is not a URL (the value is not shown)"))?;
        if !matches!(url.scheme(), "redis" | "rediss" | "redis+unix" | "unix") {
            return Err(ConfigError::invalid(
                field,
                "must be a redis://, rediss:// or unix:// URL",
            ));
        }
        Ok(Secret::new(text.trim()))
    };
    let redis_url = file
        .redis_url
        .as_deref()
        .map(|text| redis(text, "shared.redis_url"))
        .transpose()?;
    let mut redis_urls = Vec::new();
    for (index, text) in file.redis_urls.iter().flatten().enumerate() {
        redis_urls.push(redis(text, &format!("shared.redis_urls[{index}]"))?);
    }
    if redis_url.is_none() && redis_urls.is_empty() {
        return Err(ConfigError::invalid(
            "shared.redis_url",
            "is required (or redis_urls) when [shared] is present",
        ));
    }
    let timeout = file
        .timeout
        .as_deref()
        .map(|text| duration(text, "shared.timeout"))
        .transpose()?
        .unwrap_or(DEFAULT_SHARED_TIMEOUT);
    if let Some(share) = file.fallback_share
        && !(share > 0.0 && share <= 1.0)
    {
        return Err(ConfigError::invalid(
            "shared.fallback_share",
            format!("{share} must be above 0 and at most 1"),
        ));
    }
    Ok(SharedSettings {
        redis_url,
        redis_urls,
        timeout,
        fallback_share: file.fallback_share,
    })
}

/// `reserve = 3` (requests) or `reserve = "10%"` (of the server's stated limit).
fn reserve(value: &NumberOrText, field: &str) -> Result<Reserve, ConfigError> {
    match value {
        NumberOrText::Number(n) => u64::try_from(*n)
            .map(Reserve::Requests)
            .map_err(|_| ConfigError::invalid(field, format!("{n} must not be negative"))),
        NumberOrText::Text(text) => text
            .trim()
            .strip_suffix('%')
            .and_then(|percent| percent.trim().parse::<f64>().ok())
            .filter(|percent| percent.is_finite())
            .map(|percent| Reserve::Fraction(percent / 100.0))
            .ok_or_else(|| {
                ConfigError::invalid(
                    field,
                    format!("{text:?} is neither a number of requests nor a share such as \"10%\""),
                )
            }),
    }
}

fn duration(text: &str, field: &str) -> Result<Duration, ConfigError> {
    value::duration(text).map_err(|message| ConfigError::invalid(field, message))
}

/// Reads a secret from the environment; the error names the variable, never a value.
fn read_env(variable: &str, field: &str, env: Env<'_>) -> Result<Secret, ConfigError> {
    if variable.is_empty() {
        return Err(ConfigError::invalid(
            field,
            "must name an environment variable",
        ));
    }
    match env(variable) {
        None => Err(ConfigError::invalid(
            field,
            format!("the environment variable {variable} is not set"),
        )),
        Some(value) if value.is_empty() => Err(ConfigError::invalid(
            field,
            format!("the environment variable {variable} is empty"),
        )),
        Some(value) => Ok(Secret::new(value)),
    }
}

/// Names appear in URLs (`/proxy/NAME/...`), metrics and logs: keep them plain.
fn check_name(name: &str, field: &str) -> Result<(), ConfigError> {
    let plain = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if plain {
        Ok(())
    } else {
        Err(ConfigError::invalid(
            field,
            "names must be 1 to 64 ASCII letters, digits, '_', '-' or '.'",
        ))
    }
}
