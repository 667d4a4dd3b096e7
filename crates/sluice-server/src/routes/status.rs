//! `GET /v1/status` (credentials, their scopes, the tools; never a secret),
//! `GET /metrics` (Prometheus) and `GET /healthz`.

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use http::HeaderValue;
use http::header::CONTENT_TYPE;
use serde::Serialize;
use serde_json::json;
use sluice::scope::ScopeStatus;

use crate::metrics::CONTENT_TYPE as METRICS_CONTENT_TYPE;
use crate::state::AppState;

#[derive(Debug, Serialize)]
struct Status {
    credentials: Vec<CredentialStatus>,
    tools: Vec<ToolStatus>,
    /// Added to every rate's window against transit jitter.
    window_margin_ms: u128,
    /// Turns remembered by `turn_id`.
    open_turns: usize,
    /// The shared backend (Redis): mode per credential, errors, leases.
    shared_backend: Option<sluice_redis::Status>,
    /// When the configuration in force was loaded, and its file's SHA-256.
    config: crate::reload::Loaded,
}

#[derive(Debug, Serialize)]
struct CredentialStatus {
    name: String,
    /// The base URL (it cannot hold user info or a query: checked at load).
    base_url: String,
    /// The header the secret goes in: its name, never its value.
    auth_header: String,
    has_secret: bool,
    secret_env: Option<String>,
    rate: Option<String>,
    /// `rate = "auto"`: probing for the server's limit (`rate`, if set, is the ceiling).
    auto_rate: bool,
    /// `max_in_flight = "auto"`: following rate x latency.
    auto_concurrency: bool,
    /// Adopting lower rates the server states.
    learn: bool,
    burst: Option<u32>,
    max_in_flight: Option<u32>,
    queue: Option<u32>,
    shared: bool,
    /// `enforce` or `shadow` (`enforce = false`, or `sluice serve --shadow`).
    mode: sluice_ui::Mode,
    /// `false` in shadow mode.
    enforce: bool,
    in_flight: usize,
    /// Live scopes; none until the credential's first call.
    scopes: Vec<ScopeStatus>,
}

#[derive(Debug, Serialize)]
struct ToolStatus {
    name: String,
    credential: String,
    method: String,
    path: String,
    read: bool,
    idempotent: bool,
    deadline_ms: Option<u128>,
}

pub(crate) async fn status(State(state): State<AppState>) -> Response {
    let inner = &state.inner;
    let config = &inner.config;
    let gate = inner.gate();
    let scopes = gate.status();
    // The limits in force: a reload changes them, not the rest of `config`.
    let limits_in_force = inner.live.gate_config();
    let credentials = config
        .credentials
        .iter()
        .map(|(name, upstream)| {
            let limits = limits_in_force.credentials.get(name);
            CredentialStatus {
                name: name.clone(),
                base_url: upstream.base_url.to_string(),
                auth_header: upstream.auth_header.to_string(),
                has_secret: upstream.secret.is_some(),
                secret_env: upstream.secret_env.clone(),
                rate: limits.and_then(|l| l.rate).map(|rate| rate.to_string()),
                auto_rate: limits.is_some_and(|l| l.auto_rate),
                auto_concurrency: limits.is_some_and(|l| l.auto_concurrency),
                learn: limits.is_some_and(|l| l.learn),
                burst: limits.and_then(|l| l.burst),
                max_in_flight: limits.and_then(|l| l.max_in_flight),
                queue: limits.and_then(|l| l.queue),
                shared: upstream.shared,
                mode: sluice_ui::Mode::of(limits.is_none_or(|l| l.enforce)),
                enforce: limits.is_none_or(|l| l.enforce),
                in_flight: gate.in_flight(name),
                scopes: scopes
                    .iter()
                    .filter(|scope| &scope.credential == name)
                    .cloned()
                    .collect(),
            }
        })
        .collect();
    let tools = config
        .tools
        .iter()
        .map(|(name, spec)| {
            let route = limits_in_force.tools.get(name);
            ToolStatus {
                name: name.clone(),
                credential: spec.credential.clone(),
                method: spec.method.to_string(),
                path: spec.path.to_string(),
                read: route.is_some_and(|r| r.read),
                idempotent: route.is_some_and(|r| r.idempotent || r.read),
                deadline_ms: route.and_then(|r| r.deadline).map(|d| d.as_millis()),
            }
        })
        .collect();
    Json(Status {
        credentials,
        tools,
        window_margin_ms: config.gate.defaults.window_margin.as_millis(),
        open_turns: inner.turn_registry.len(),
        shared_backend: state.shared_status(),
        config: state.loaded(),
    })
    .into_response()
}

pub(crate) async fn metrics(State(state): State<AppState>) -> Response {
    let inner = &state.inner;
    let text = inner
        .metrics
        .encode(&inner.gate().status(), state.shared_status().as_ref());
    let mut response = text.into_response();
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(METRICS_CONTENT_TYPE));
    response
}

pub(crate) async fn healthz() -> Response {
    Json(json!({"status": "ok"})).into_response()
}
