//! Issue 14's configuration syntax, as the contract gives it: rate lists,
//! groups, units, priorities, and tool costs, settles and priorities.

use sluice::{Cost, Priority, Settle};
use sluice_config::{McpConfig, SidecarConfig};

const CONTRACT: &str = r#"
[credentials.github]
base_url = "https://api.github.com"
rate = ["15/1s", "5000/1h"]
max_in_flight = 10

[credentials.github.groups.search]
rate = "30/1m"
max_in_flight = 2

[credentials.github.units.points]
rate = "900/1m"

[credentials.github.priorities]
low = "50%"

[credentials.openai]
base_url = "https://api.openai.com"
rate = "500/1m"

[credentials.openai.units.tokens]
rate = ["90000/1m", "2000000/1d"]

[tools.search_code]
credential = "github"
path = "/search/code?q={q}"
group = "search"
cost = { points = 10 }
priority = "low"

[tools.chat]
credential = "openai"
method = "POST"
path = "/v1/chat/completions"
cost = { tokens = "{max_tokens}" }
settle = { tokens = "/usage/total_tokens" }
"#;

#[test]
fn the_contract_syntax_loads() {
    let config = SidecarConfig::from_toml(CONTRACT, |_| None).unwrap();
    let github = &config.gate.credentials["github"];
    let rates: Vec<String> = github.rates().iter().map(ToString::to_string).collect();
    assert_eq!(rates, ["15/1s", "5000/1h"]);
    assert_eq!(github.groups["search"].rates[0].to_string(), "30/1m");
    assert_eq!(github.groups["search"].max_in_flight, Some(2));
    assert_eq!(github.units["points"].rates[0].to_string(), "900/1m");
    assert_eq!(github.low_share, Some(0.5));
    assert_eq!(
        config.gate.credentials["openai"].units["tokens"]
            .rates
            .len(),
        2
    );
    let search = &config.gate.tools["search_code"].spend;
    assert_eq!(search.group.as_deref(), Some("search"));
    assert_eq!(search.cost["points"], Cost::Fixed(10));
    assert_eq!(search.priority, Priority::Low);
    let chat = &config.gate.tools["chat"].spend;
    assert_eq!(chat.cost["tokens"], Cost::Argument("max_tokens".into()));
    assert_eq!(
        chat.settle["tokens"],
        Settle::Pointer("/usage/total_tokens".into())
    );
    assert_eq!(chat.priority, Priority::Normal);
    // `sluice mcp` reads the same fields.
    let mcp = McpConfig::from_toml(CONTRACT, Some("github")).unwrap();
    assert_eq!(
        mcp.tools["search_code"].spend.cost["points"],
        Cost::Fixed(10)
    );
}

fn error_field(text: &str) -> String {
    let error = SidecarConfig::from_toml(text, |_| None).unwrap_err();
    let field = error.field().unwrap_or_default().to_owned();
    assert!(error.to_string().starts_with(&field), "{error}");
    field
}

fn redis(text: &str) -> String {
    format!("[shared]\nredis_url = \"redis://127.0.0.1:6379\"\n{text}")
}

#[test]
fn errors_name_the_field() {
    let cases = [
        (
            CONTRACT.replace(
                r#"rate = ["15/1s", "5000/1h"]"#,
                r#"rate = ["15/1s", "5000/never"]"#,
            ),
            "credentials.github.rate[1]",
        ),
        (
            CONTRACT.replace(r#"rate = "30/1m""#, r#"rate = ["30/1m", "0/1s"]"#),
            "credentials.github.groups.search.rate[1]",
        ),
        (
            CONTRACT.replace(r#"rate = "900/1m""#, r#"rate = "900""#),
            "credentials.github.units.points.rate",
        ),
        (
            CONTRACT.replace(r#"low = "50%""#, r#"low = "150%""#),
            "credentials.github.priorities.low",
        ),
        (
            CONTRACT.replace(r#"group = "search""#, r#"group = "graphql""#),
            "tools.search_code.group",
        ),
        (
            CONTRACT.replace("cost = { points = 10 }", "cost = { points = 1000 }"),
            "tools.search_code.cost.points",
        ),
        (
            CONTRACT.replace("cost = { points = 10 }", "cost = { stars = 1 }"),
            "tools.search_code.cost.stars",
        ),
        (
            CONTRACT.replace("cost = { points = 10 }", "cost = { points = -1 }"),
            "tools.search_code.cost.points",
        ),
        (
            CONTRACT.replace(r#""{max_tokens}""#, r#""max_tokens""#),
            "tools.chat.cost.tokens",
        ),
        (
            CONTRACT.replace(r#""/usage/total_tokens""#, r#""usage""#),
            "tools.chat.settle.tokens",
        ),
        (
            CONTRACT.replace(r#"priority = "low""#, r#"priority = "urgent""#),
            "tools.search_code.priority",
        ),
    ];
    for (text, field) in cases {
        assert_eq!(error_field(&text), field);
    }
}

/// Issue 14 on Redis: several windows, groups, units and the low share may be shared.
#[test]
fn windows_groups_and_units_may_be_shared() {
    let text = redis(
        &CONTRACT
            .replace("rate = \"500/1m\"\n", "rate = \"500/1m\"\nshared = true\n")
            .replace(
                "max_in_flight = 10\n",
                "max_in_flight = 10\nburst = 5\nshared = true\n",
            ),
    );
    let config = SidecarConfig::from_toml(&text, |_| None).unwrap();
    let github = &config.gate.credentials["github"];
    assert!(github.shared && !github.windows.is_empty() && !github.groups.is_empty());
    assert_eq!((github.low_share, github.burst), (Some(0.5), Some(5)));
    assert!(config.gate.credentials["openai"].shared);
}

#[test]
fn a_one_window_requests_only_credential_may_still_be_shared() {
    let text = r#"
        [shared]
        redis_url = "redis://127.0.0.1:6379"

        [credentials.support]
        base_url = "http://127.0.0.1:9000"
        rate = ["10/1s"]
        shared = true

        [tools.get]
        credential = "support"
        path = "/get"
    "#;
    let config = SidecarConfig::from_toml(text, |_| None).unwrap();
    assert!(config.gate.credentials["support"].shared);
    assert!(config.gate.credentials["support"].windows.is_empty());
}
