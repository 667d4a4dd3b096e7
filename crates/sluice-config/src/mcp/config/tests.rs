//! The file `sluice mcp` reads, refused where it should be and read as written.

use super::*;

fn refused(text: &str, credential: Option<&str>, field: &str) -> String {
    let error = McpConfig::from_toml(text, credential).unwrap_err();
    assert_eq!(error.field(), Some(field), "{error}");
    error.to_string()
}

const TWO: &str = r#"
    [credentials.search]
    rate = "5/1s"
    [credentials.github]
    base_url = "https://api.github.com"
    secret_env = "GITHUB_TOKEN_NOT_SET_HERE"
    rate = "10/1s"
"#;

#[test]
fn the_credential_is_the_flag_then_the_section_then_the_only_one() {
    let only = McpConfig::from_toml("[credentials.a]\nrate = \"1/1s\"", None).unwrap();
    assert_eq!(only.credential, "a");

    let message = refused(TWO, None, "mcp.credential");
    assert!(message.contains("github, search"), "{message}");

    let flagged = McpConfig::from_toml(TWO, Some("search")).unwrap();
    assert_eq!(flagged.credential, "search");
    let sectioned =
        McpConfig::from_toml(&format!("[mcp]\ncredential = \"github\"\n{TWO}"), None).unwrap();
    assert_eq!(sectioned.credential, "github");
    let both = McpConfig::from_toml(
        &format!("[mcp]\ncredential = \"github\"\n{TWO}"),
        Some("search"),
    )
    .unwrap();
    assert_eq!(both.credential, "search");

    let message = refused(TWO, Some("nope"), "--credential");
    assert!(message.contains("configured: github, search"), "{message}");
    refused(
        &format!("[mcp]\ncredential = \"nope\"\n{TWO}"),
        None,
        "mcp.credential",
    );
    refused("", None, "credentials");
}

#[test]
fn a_credential_needs_no_base_url() {
    let config = McpConfig::from_toml("[credentials.mcp_only]\nrate = \"2/1s\"", None).unwrap();
    assert_eq!(config.credential, "mcp_only");
    assert_eq!(
        config.gate.credentials["mcp_only"]
            .rate
            .map(|r| r.to_string()),
        Some("2/1s".to_owned())
    );
}

#[test]
fn the_sidecars_signing_fields_and_secrets_are_not_needed() {
    // GITHUB_TOKEN_NOT_SET_HERE is not set: the sidecar would refuse to start.
    let config = McpConfig::from_toml(TWO, Some("github")).unwrap();
    assert_eq!(
        config.gate.credentials["github"]
            .rate
            .map(|r| r.to_string()),
        Some("10/1s".to_owned())
    );
    let with_server = format!("[server]\nlisten = \"0.0.0.0:1\"\n{TWO}");
    assert!(McpConfig::from_toml(&with_server, Some("search")).is_ok());
}

#[test]
fn limits_are_checked_by_the_sidecars_rules() {
    refused(
        "[credentials.a]\nrate = \"0/1s\"",
        None,
        "credentials.a.rate",
    );
    refused("[credentials.a]\nrat = \"1/1s\"", None, "credentials.a.rat");
    refused(
        "[defaults]\ndeadline = \"0s\"\n[credentials.a]",
        None,
        "defaults.deadline",
    );
    // A shared budget needs [shared], as for the sidecar.
    refused(
        "[credentials.a]\nshared = true",
        None,
        "credentials.a.shared",
    );
    let shared = McpConfig::from_toml(
        "[credentials.a]\nshared = true\n[shared]\nredis_url = \"redis://127.0.0.1:1\"",
        None,
    )
    .unwrap();
    assert!(shared.gate.credentials["a"].shared);
    assert!(shared.shared.is_some());
    refused("[credentials.a]\n[extra]\nx = 1", None, "extra");
    let error = McpConfig::from_toml("[credentials.a\n", None).unwrap_err();
    assert!(error.to_string().contains("line 1"), "{error}");
}

#[test]
fn tool_overrides() {
    let text = r#"
        [credentials.a]
        [credentials.b]
        [mcp]
        credential = "a"
        [tools.search]
        read = true
        idempotent = true
        deadline = "20s"
        [tools.write_it]
        credential = "b"
        read = false
        [tools.from_the_sidecar]
        credential = "a"
        method = "GET"
        path = "/x"
    "#;
    let config = McpConfig::from_toml(text, None).unwrap();
    assert_eq!(
        config.tools["search"],
        ToolOverride {
            credential: None,
            read: Some(true),
            idempotent: Some(true),
            deadline: Some(Duration::from_secs(20)),
            destructive: None,
            open_world: None,
            spend: sluice::Spend::default(),
        }
    );
    assert_eq!(config.tools["write_it"].credential.as_deref(), Some("b"));
    assert!(config.tools.contains_key("from_the_sidecar"));

    refused(
        "[credentials.a]\n[tools.t]\ncredential = \"z\"",
        None,
        "tools.t.credential",
    );
    refused(
        "[credentials.a]\n[tools.t]\ndeadline = \"0s\"",
        None,
        "tools.t.deadline",
    );
    refused(
        "[credentials.a]\n[tools.t]\nread = \"yes\"",
        None,
        "tools.t.read",
    );
    refused(
        "[credentials.a]\n[tools.t]\nreed = true",
        None,
        "tools.t.reed",
    );
    refused(
        "[credentials.a]\n[mcp]\ncredentials = \"a\"",
        None,
        "mcp.credentials",
    );
}

#[test]
fn the_mcp_section() {
    let config = McpConfig::from_toml("[credentials.a]", None).unwrap();
    assert_eq!(config.deferral, Deferral::Result);
    assert!(config.rate_limit_patterns.is_empty());
    assert!(config.trust_annotations);
    assert_eq!(config.max_message_size, 16 << 20);
    assert_eq!(config.shutdown_grace, Duration::from_secs(5));

    let text = r#"
        [credentials.a]
        [mcp]
        deferral = "error"
        rate_limit_patterns = ["(?i)slow down", "try again in (\\d+s)"]
        trust_annotations = false
        max_message_size = "1MiB"
        shutdown_grace = "2s"
        [tools.t]
        destructive = false
        open_world = false
    "#;
    let config = McpConfig::from_toml(text, None).unwrap();
    assert_eq!(config.deferral, Deferral::Error);
    assert_eq!(config.rate_limit_patterns.len(), 2);
    assert!(config.rate_limit_patterns[0].is_match("Please SLOW DOWN"));
    assert!(!config.trust_annotations);
    assert_eq!(config.max_message_size, 1 << 20);
    assert_eq!(config.shutdown_grace, Duration::from_secs(2));
    assert_eq!(config.tools["t"].destructive, Some(false));
    assert_eq!(config.tools["t"].open_world, Some(false));

    let message = refused(
        "[credentials.a]\n[mcp]\nrate_limit_patterns = [\"ok\", \"(unclosed\"]",
        None,
        "mcp.rate_limit_patterns[1]",
    );
    assert!(message.contains("not a regular expression"), "{message}");
    refused(
        "[credentials.a]\n[mcp]\ndeferral = \"raise\"",
        None,
        "mcp.deferral",
    );
    refused(
        "[credentials.a]\n[mcp]\nmax_message_size = \"0\"",
        None,
        "mcp.max_message_size",
    );
    refused(
        "[credentials.a]\n[mcp]\nmax_message_size = \"2GiB\"",
        None,
        "mcp.max_message_size",
    );
    refused(
        "[credentials.a]\n[mcp]\nshutdown_grace = \"soon\"",
        None,
        "mcp.shutdown_grace",
    );
    refused(
        "[credentials.a]\n[tools.t]\nopen_world = 1",
        None,
        "tools.t.open_world",
    );
}
