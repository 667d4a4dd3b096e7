//! One `sluice.toml`, two views: a file written for `sluice serve` also
//! runs `sluice mcp` with the same limits, and a value out of bounds is
//! refused by both at load, naming its field (issue 13).

use std::time::Duration;

use sluice_config::{ConfigError, MAX_DURATION, McpConfig, SidecarConfig};

const SECRET: &str = "sk-views-3b7e0c9d";

/// A file for both commands: the sidecar's signing fields and tools, and `[mcp]`.
const BOTH: &str = r#"
[server]
listen = "127.0.0.1:7878"

[defaults]
deadline = "30s"

[credentials.github]
base_url = "https://api.github.com"
secret_env = "GITHUB_TOKEN"
rate = "10/1s"
max_in_flight = 4

[credentials.search]
base_url = "https://search.example.com"
rate = "5/1s"

[tools.search_code]
credential = "search"
path = "/code?q={q}"
deadline = "20s"

[mcp]
credential = "github"
"#;

fn env(name: &str) -> Option<String> {
    (name == "GITHUB_TOKEN").then(|| SECRET.to_owned())
}

#[test]
fn one_file_serves_both_with_the_same_limits() {
    let sidecar = SidecarConfig::from_toml(BOTH, env).unwrap();
    // `sluice mcp` reads no secret: the variable need not be set.
    let mcp = McpConfig::from_toml(BOTH, None).unwrap();
    assert_eq!(sidecar.gate.defaults, mcp.gate.defaults);
    assert_eq!(sidecar.gate.credentials, mcp.gate.credentials);
    assert_eq!(mcp.credential, "github");
    assert_eq!(
        mcp.tools["search_code"].credential.as_deref(),
        Some("search")
    );
    assert_eq!(
        mcp.tools["search_code"].deadline,
        Some(Duration::from_secs(20))
    );
    assert_eq!(
        sidecar.gate.tools["search_code"].deadline,
        Some(Duration::from_secs(20))
    );
    assert!(!format!("{sidecar:?} {mcp:?}").contains(SECRET));
}

#[test]
fn each_view_requires_what_its_command_needs() {
    // An MCP override has no path: the sidecar cannot send it.
    let overrides = "[credentials.api]\nbase_url = \"http://a\"\n[tools.index]\nread = false\n";
    assert!(McpConfig::from_toml(overrides, None).is_ok());
    let error = SidecarConfig::from_toml(overrides, |_| None).unwrap_err();
    assert_eq!(error.field(), Some("tools.index"));
    assert_eq!(error.to_string(), "tools.index: missing field `credential`");
    let error = SidecarConfig::from_toml(
        "[credentials.api]\nbase_url = \"http://a\"\n[tools.index]\ncredential = \"api\"\n",
        |_| None,
    )
    .unwrap_err();
    assert_eq!(error.to_string(), "tools.index: missing field `path`");
    // Both refuse what neither knows.
    for text in [
        "[mcp]\ncredentail = \"a\"",
        "[credentials.a]\nbase_ulr = \"x\"",
    ] {
        let sidecar = SidecarConfig::from_toml(text, |_| None).unwrap_err();
        let mcp = McpConfig::from_toml(text, None).unwrap_err();
        assert_eq!(sidecar.field(), mcp.field(), "{text}");
        assert!(sidecar.to_string().contains("unknown field"), "{sidecar}");
    }
}

/// Every duration field, in a file both views read, at one nanosecond over
/// the bound and at the issue's `300000000000y`.
#[test]
fn durations_longer_than_a_week_are_refused_by_both_views() {
    let base = "[credentials.c]\nbase_url = \"http://a\"\n";
    let fields = [
        ("[defaults]\ndeadline = {}\n", "defaults.deadline"),
        ("[defaults]\ninline_wait = {}\n", "defaults.inline_wait"),
        (
            "[defaults]\nturn_cache_ttl = {}\n",
            "defaults.turn_cache_ttl",
        ),
        ("[defaults]\nquota_after = {}\n", "defaults.quota_after"),
        ("[defaults]\nbackoff_base = {}\n", "defaults.backoff_base"),
        ("[defaults]\nbackoff_cap = {}\n", "defaults.backoff_cap"),
        ("[defaults]\nretry_window = {}\n", "defaults.retry_window"),
        (
            "[defaults]\nexpected_latency = {}\n",
            "defaults.expected_latency",
        ),
        ("[defaults]\nwindow_margin = {}\n", "defaults.window_margin"),
        ("[defaults]\nscope_idle = {}\n", "defaults.scope_idle"),
        (
            "{base}expected_latency = {}\n",
            "credentials.c.expected_latency",
        ),
        ("{base}policy_window = {}\n", "credentials.c.policy_window"),
        (
            "{base}[tools.x]\ncredential = \"c\"\npath = \"/\"\ndeadline = {}\n",
            "tools.x.deadline",
        ),
        (
            "[shared]\nredis_url = \"redis://h\"\ntimeout = {}\n",
            "shared.timeout",
        ),
    ];
    for (template, field) in fields {
        for value in ["300000000000y", "7d 1ns", "99999999999999999999999s"] {
            let text = template
                .replace("{base}", base)
                .replace("{}", &format!("{value:?}"));
            let text = if template.starts_with("{base}") {
                text
            } else {
                format!("{base}{text}")
            };
            let expected =
                format!("{field}: {value:?} is longer than the longest allowed duration (7d)");
            let refused = |error: ConfigError| {
                assert_eq!(error.field(), Some(field), "{text}\n{error}");
                assert_eq!(error.to_string(), expected);
            };
            refused(SidecarConfig::from_toml(&text, |_| None).unwrap_err());
            refused(McpConfig::from_toml(&text, None).unwrap_err());
        }
    }
    // The bound itself is allowed.
    let week = format!("{base}[defaults]\ndeadline = \"7d\"\n");
    let config = SidecarConfig::from_toml(&week, |_| None).unwrap();
    assert_eq!(config.gate.defaults.deadline, MAX_DURATION);
    assert_eq!(config.longest_deadline(), MAX_DURATION);
}

/// `enforce = false` is shadow mode for both commands; `--shadow` sets it
/// on every credential; a value that is not a boolean names its field (issue 20).
#[test]
fn enforce_false_is_shadow_mode_in_both_views() {
    let toml = BOTH.replace("max_in_flight = 4", "max_in_flight = 4\nenforce = false");
    let mut sidecar = SidecarConfig::from_toml(&toml, env).unwrap();
    let mcp = McpConfig::from_toml(&toml, None).unwrap();
    assert!(!sidecar.gate.credentials["github"].enforce);
    assert!(sidecar.gate.credentials["search"].enforce, "default true");
    assert!(!mcp.gate.credentials["github"].enforce);
    sidecar.shadow_all();
    assert!(sidecar.gate.credentials.values().all(|c| !c.enforce));

    let error = SidecarConfig::from_toml(
        &BOTH.replace("rate = \"5/1s\"", "rate = \"5/1s\"\nenforce = \"no\""),
        env,
    )
    .unwrap_err();
    assert!(error.to_string().contains("enforce"), "{error}");
}

#[test]
fn shared_tls_ca_file_is_read_and_needs_rediss_urls() {
    let base = "[credentials.c]\nbase_url = \"http://a\"\nshared = true\n";
    let text = format!(
        "{base}[shared]\nredis_url = \"rediss://app:pw@cache.internal:6380\"\ntls_ca_file = \"/etc/sluice/redis-ca.pem\"\n"
    );
    let config = SidecarConfig::from_toml(&text, |_| None).unwrap();
    let shared = config.shared.unwrap();
    assert_eq!(
        shared.tls_ca_file.as_deref(),
        Some(std::path::Path::new("/etc/sluice/redis-ca.pem"))
    );

    for shared in [
        "redis_url = \"redis://app:pw@h:6379\"\ntls_ca_file = \"/ca.pem\"",
        "redis_urls = [\"rediss://h:1\", \"redis://h:2\"]\ntls_ca_file = \"/ca.pem\"",
        "redis_url = \"rediss://h:1\"\ntls_ca_file = \" \"",
    ] {
        let text = format!("{base}[shared]\n{shared}\n");
        for error in [
            SidecarConfig::from_toml(&text, |_| None).unwrap_err(),
            McpConfig::from_toml(&text, None).unwrap_err(),
        ] {
            assert_eq!(error.field(), Some("shared.tls_ca_file"), "{text}\n{error}");
            assert!(!error.to_string().contains("pw"), "{error}");
        }
    }
}
