//! The sidecar under soak: its configuration file, and what its `/v1/status` says.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use super::options::MAX_ATTEMPTS;

/// Writes the soak's `sluice.toml` into `dir`.
/// `shared_section` holds the `[shared]` section's fields.
pub(super) fn config(
    dir: &Path,
    upstream: &str,
    shared_section: &str,
    rate: u32,
    shared: bool,
) -> PathBuf {
    let burst = (rate / 10).max(1);
    let toml = format!(
        r#"
[defaults]
deadline = "2s"
backoff_base = "20ms"
backoff_cap = "200ms"
max_attempts = {MAX_ATTEMPTS}
turn_cache_ttl = "1s"

[credentials.api]
base_url = "{upstream}"
secret_env = "SOAK_API_KEY"
rate = "{rate}/1s"
burst = {burst}
max_in_flight = 256
queue = 2048
shared = {shared}

[tools.read]
credential = "api"
method = "GET"
path = "/fault/{{kind}}/{{n}}"
read = true

[tools.write]
credential = "api"
method = "POST"
path = "/fault/{{kind}}/{{n}}"
read = false

[shared]
{shared_section}"#
    );
    let path = dir.join("soak.toml");
    std::fs::write(&path, toml).unwrap();
    path
}

async fn status(client: &reqwest::Client, base: &str) -> Option<Value> {
    let response = client
        .get(format!("{base}/v1/status"))
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .ok()?;
    serde_json::from_slice(&response.bytes().await.ok()?).ok()
}

pub(super) async fn shared_modes(client: &reqwest::Client, base: &str) -> Option<Vec<String>> {
    let status = status(client, base).await?;
    Some(
        status["shared_backend"]["credentials"]
            .as_array()?
            .iter()
            .filter_map(|c| c["mode"].as_str().map(str::to_owned))
            .collect(),
    )
}

pub(super) async fn final_modes(client: &reqwest::Client, base: &str) -> Vec<String> {
    shared_modes(client, base).await.unwrap_or_default()
}

/// `credential/scope` of every scope with calls in flight or queued.
pub(super) async fn stuck_scopes(client: &reqwest::Client, base: &str) -> Vec<String> {
    let Some(status) = status(client, base).await else {
        return vec!["/v1/status did not answer".to_owned()];
    };
    let mut stuck = Vec::new();
    for credential in status["credentials"].as_array().into_iter().flatten() {
        if credential["in_flight"].as_u64() != Some(0) {
            stuck.push(format!(
                "{}: in_flight {}",
                credential["name"], credential["in_flight"]
            ));
        }
        for scope in credential["scopes"].as_array().into_iter().flatten() {
            if scope["in_flight"].as_u64() != Some(0) || scope["queued"].as_u64() != Some(0) {
                stuck.push(format!(
                    "{}/{}: in_flight {} queued {}",
                    scope["credential"], scope["scope"], scope["in_flight"], scope["queued"]
                ));
            }
        }
    }
    stuck
}
