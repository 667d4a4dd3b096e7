//! The secrets `sluice mcp` scrubs from everything it returns to its client.

use super::config::McpConfig;
use crate::secret::Secret;

impl McpConfig {
    /// What `sluice mcp` must never return to its client, read from `env`:
    /// the upstream's token (`[mcp] upstream_secret_env`), the listener's
    /// bearer token (`[server] auth_token_env`), and each credential's
    /// `secret_env` (an MCP server started by the proxy often gets the same
    /// key in its environment, and may echo it in a tool error).
    ///
    /// A variable that is not set, or set empty, is skipped: whether a
    /// required one is set is checked where it is used
    /// ([`McpConfig::upstream_auth`], [`McpConfig::listener`]).
    ///
    /// ```
    /// use sluice_config::McpConfig;
    ///
    /// let config = McpConfig::from_toml(
    ///     "[mcp]\nupstream_secret_env = \"REMOTE\"\n[credentials.gh]\nsecret_env = \"GH\"\nrate = \"1/1s\"",
    ///     None,
    /// )
    /// .unwrap();
    /// let env = |name: &str| (name == "GH").then(|| "ghp-123".to_owned());
    /// let secrets: Vec<String> = config
    ///     .scrubbed_secrets(&env)
    ///     .iter()
    ///     .map(|secret| secret.expose().to_owned())
    ///     .collect();
    /// assert_eq!(secrets, ["ghp-123"]);
    /// ```
    pub fn scrubbed_secrets(&self, env: &dyn Fn(&str) -> Option<String>) -> Vec<Secret> {
        let variables = self
            .http
            .secret_env
            .iter()
            .chain(&self.server.auth_token_env)
            .chain(&self.secret_envs);
        let mut secrets: Vec<Secret> = Vec::new();
        for variable in variables {
            let Some(value) = env(variable).filter(|value| !value.is_empty()) else {
                continue;
            };
            if !secrets.iter().any(|known| known.expose() == value) {
                secrets.push(Secret::new(value));
            }
        }
        secrets
    }
}

#[cfg(test)]
mod tests {
    use crate::McpConfig;

    #[test]
    fn every_configured_secret_that_is_set_once() {
        let config = McpConfig::from_toml(
            r#"
            [mcp]
            upstream_secret_env = "UP"
            [server]
            auth_token_env = "LISTEN"
            [credentials.a]
            secret_env = "KEY_A"
            rate = "1/1s"
            [credentials.b]
            secret_env = "KEY_B"
            rate = "1/1s"
            [credentials.c]
            rate = "1/1s"
            "#,
            Some("a"),
        )
        .unwrap();
        let env = |name: &str| match name {
            "UP" => Some("up-token".to_owned()),
            "LISTEN" => Some("listen-token".to_owned()),
            // The same key twice is scrubbed once.
            "KEY_A" => Some("up-token".to_owned()),
            "KEY_B" => Some(String::new()),
            _ => None,
        };
        let secrets: Vec<String> = config
            .scrubbed_secrets(&env)
            .iter()
            .map(|secret| secret.expose().to_owned())
            .collect();
        assert_eq!(secrets, ["up-token", "listen-token"]);
        assert!(config.scrubbed_secrets(&|_| None).is_empty());
    }
}
