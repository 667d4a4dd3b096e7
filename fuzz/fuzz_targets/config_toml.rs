//! Fuzzes the sidecar's configuration loader, `SidecarConfig::from_toml`, with a
//! fixed environment, and builds the sidecar's state from what it accepts.
//!
//! Beyond "no panic": no error message and no `Debug` of an accepted
//! configuration carries the secret or the token from the environment; an
//! accepted configuration is consistent (tools name known credentials,
//! base URLs are http(s) with a host, a non-loopback listener has a token)
//! and the state builds from it, unless it asks for the shared backend,
//! which needs Redis.
#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use sluice_server::{AppState, SidecarConfig, StartError};

const SECRET: &str = "fz-secret-4d9c2b7e61";
const TOKEN: &str = "fz-token-8a1f03c5";

fn env(name: &str) -> Option<String> {
    match name {
        "API_KEY" | "SUPPORT_API_KEY" => Some(SECRET.to_owned()),
        "SLUICE_TOKEN" => Some(TOKEN.to_owned()),
        "EMPTY" => Some(String::new()),
        _ => None,
    }
}

static RUNTIME: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime")
});

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let config = match SidecarConfig::from_toml(text, env) {
        Ok(config) => config,
        Err(error) => {
            // An error may quote the input (a field's name, a bad value):
            // that is the user's own text, not a leak, so only a secret the
            // input does not hold itself must be absent.
            let message = error.to_string();
            assert!(text.contains(SECRET) || !message.contains(SECRET), "{message}");
            assert!(text.contains(TOKEN) || !message.contains(TOKEN), "{message}");
            return;
        }
    };
    let debug = format!("{config:?}");
    assert!(text.contains(SECRET) || !debug.contains(SECRET), "{debug}");
    assert!(text.contains(TOKEN) || !debug.contains(TOKEN), "{debug}");
    for (name, tool) in &config.tools {
        assert!(config.credentials.contains_key(&tool.credential), "{name}");
    }
    for upstream in config.credentials.values() {
        let url = &upstream.base_url;
        assert!(matches!(url.scheme(), "http" | "https"), "{url}");
        assert!(url.host_str().is_some_and(|host| !host.is_empty()), "{url}");
    }
    assert!(config.server.listen.ip().is_loopback() || config.server.auth_token.is_some());
    assert!(config.server.max_body > 0);

    let built = RUNTIME.block_on(async { AppState::new(config.clone()) });
    match built {
        Ok(state) => {
            let status = format!("{:?}", state.gate().status());
            assert!(!status.contains(SECRET), "{status}");
        }
        Err(StartError::SharedNeedsConnect { .. }) => {
            assert!(config.credentials.values().any(|c| c.shared));
        }
        Err(error) => panic!("an accepted configuration does not start: {error}"),
    }
});
