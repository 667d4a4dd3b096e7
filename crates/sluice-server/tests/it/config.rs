//! Loading `sluice.toml`: the issue's example parses, and every invalid value
//! is refused at start with a message naming its field and never a secret.

use std::time::Duration;

use sluice_server::{AppState, ConfigError, SidecarConfig, StartError};

/// The configuration of issue 5, as written there (secret variable set).
const ISSUE_EXAMPLE: &str = r#"
[server]
listen = "127.0.0.1:7878"        # --listen overrides
max_body = "1MiB"
# auth_token_env = "SLUICE_TOKEN" # required to listen on anything but loopback

[defaults]
deadline = "30s"
inline_wait = "2s"
turn_cache_ttl = "3s"
quota_after = "5m"

[credentials.support]
base_url = "http://127.0.0.1:9000"
secret_env = "SUPPORT_API_KEY"   # optional; a missing variable is an error at start
auth_header = "authorization"    # default
auth_prefix = "Bearer "          # default
rate = "10/1s"                   # at most 10 starts in any 1 s window
# burst = 10                     # optional: token-bucket (GCRA) semantics instead
max_in_flight = 4                # default: Little's law
queue = 16
shared = false                   # true: the budget lives in Redis (Redis issue)

[tools.search_tickets]
credential = "support"
method = "GET"
path = "/api/v2/search.json?query={query}"   # {name}: the URL-encoded argument
read = true
deadline = "20s"

[tools.create_ticket]
credential = "support"
method = "POST"
path = "/api/v2/tickets"
read = false
idempotent = false               # args not used in the path go as the JSON body
"#;

const SECRET: &str = "sk-live-very-secret-value";
const TOKEN: &str = "sidecar-token-value";

fn env(name: &str) -> Option<String> {
    match name {
        "SUPPORT_API_KEY" => Some(SECRET.to_owned()),
        "SLUICE_TOKEN" => Some(TOKEN.to_owned()),
        "EMPTY" => Some(String::new()),
        "WITH_NEWLINE" => Some(format!("{SECRET}\r\nx-injected: 1")),
        _ => None,
    }
}

fn load(text: &str) -> Result<SidecarConfig, ConfigError> {
    SidecarConfig::from_toml(text, env)
}

/// The error for `text`, checked to name `field` and to quote no secret.
fn refused(text: &str, field: &str) -> String {
    let error = load(text).expect_err(field);
    let message = error.to_string();
    assert_eq!(error.field(), Some(field), "{message}");
    assert!(message.starts_with(&format!("{field}: ")), "{message}");
    assert!(
        !message.contains(SECRET) && !message.contains(TOKEN),
        "{message}"
    );
    message
}

#[test]
fn the_issue_example_parses() {
    let config = load(ISSUE_EXAMPLE).unwrap();
    assert_eq!(config.server.listen.to_string(), "127.0.0.1:7878");
    assert_eq!(config.server.max_body, 1 << 20);
    assert!(config.server.auth_token.is_none());
    let defaults = &config.gate.defaults;
    assert_eq!(defaults.deadline, Duration::from_secs(30));
    assert_eq!(defaults.inline_wait, Duration::from_secs(2));
    assert_eq!(defaults.turn_cache_ttl, Duration::from_secs(3));
    assert_eq!(defaults.quota_after, Duration::from_secs(300));
    let support = &config.credentials["support"];
    assert_eq!(support.base_url.as_str(), "http://127.0.0.1:9000/");
    assert_eq!(support.secret.as_ref().unwrap().expose(), SECRET);
    assert_eq!(support.auth_header, "authorization");
    assert_eq!(support.auth_prefix, "Bearer ");
    assert!(!support.shared);
    let limits = &config.gate.credentials["support"];
    assert_eq!(limits.rate.unwrap().to_string(), "10/1s");
    assert_eq!((limits.max_in_flight, limits.queue), (Some(4), Some(16)));
    let search = &config.gate.tools["search_tickets"];
    assert!(search.read);
    assert_eq!(search.deadline, Some(Duration::from_secs(20)));
    let create = &config.gate.tools["create_ticket"];
    assert!(!create.read && !create.idempotent);
    assert_eq!(config.tools["create_ticket"].method, http::Method::POST);
    assert_eq!(config.longest_deadline(), Duration::from_secs(30));

    let shown = format!("{config:?}");
    assert!(!shown.contains(SECRET), "{shown}");
}

#[test]
fn defaults_fill_what_the_file_leaves_out() {
    let config = load(
        r#"
        [credentials.api]
        base_url = "https://api.example.com/v1/"

        [tools.get_item]
        credential = "api"
        path = "/items/{id}"

        [tools.put_item]
        credential = "api"
        method = "put"
        path = "/items/{id}"
        "#,
    )
    .unwrap();
    assert_eq!(config.server.listen.to_string(), "127.0.0.1:7878");
    assert_eq!(config.server.max_body, 1 << 20);
    let api = &config.credentials["api"];
    assert!(api.secret.is_none());
    assert_eq!(api.auth_header, "authorization");
    let get = &config.gate.tools["get_item"];
    assert!(get.read && get.idempotent, "GET defaults to a read");
    let put = &config.gate.tools["put_item"];
    assert!(
        !put.read && put.idempotent,
        "PUT is idempotent by HTTP semantics"
    );
    assert_eq!(config.gate.defaults.turn_budget, None);
}

#[test]
fn every_engine_default_and_the_turn_budget_can_be_set() {
    let config = load(
        r#"
        [defaults]
        turn_budget = 12
        max_attempts = 2
        backoff_base = "100ms"
        backoff_cap = "2s"
        retry_ratio = 0.1
        retry_floor = 3
        retry_window = "5s"
        expected_latency = "250ms"
        scope_idle = "1m"
        "#,
    )
    .unwrap();
    let defaults = &config.gate.defaults;
    assert_eq!(defaults.turn_budget, Some(12));
    assert_eq!(defaults.max_attempts, 2);
    assert_eq!(defaults.backoff_base, Duration::from_millis(100));
    assert_eq!(defaults.backoff_cap, Duration::from_secs(2));
    assert_eq!(defaults.retry_floor, 3);
    assert_eq!(defaults.scope_idle, Duration::from_secs(60));
    refused("[defaults]\nturn_budget = 0", "defaults.turn_budget");
}

#[test]
fn adaptive_limits_can_be_configured() {
    let config = load(
        r#"
        [defaults]
        window_margin = "0ms"

        [credentials.auto]
        base_url = "http://a"
        rate = "auto"
        max_in_flight = "auto"
        reserve = "10%"
        learn = false

        [credentials.github]
        base_url = "https://api.github.com"
        rate = "5000/1h"
        max_in_flight = 8
        reserve = 3
        policy_window = "1h"
        "#,
    )
    .unwrap();
    assert_eq!(config.gate.defaults.window_margin, Duration::ZERO);
    let auto = &config.gate.credentials["auto"];
    assert!(auto.auto_rate && auto.auto_concurrency && !auto.learn);
    assert_eq!(auto.rate, None);
    assert_eq!(auto.reserve, Some(sluice::Reserve::Fraction(0.1)));
    let github = &config.gate.credentials["github"];
    assert!(!github.auto_rate && !github.auto_concurrency && github.learn);
    assert_eq!(github.max_in_flight, Some(8));
    assert_eq!(github.reserve, Some(sluice::Reserve::Requests(3)));
    assert_eq!(github.policy_window, Some(Duration::from_secs(3600)));

    let base = "[credentials.c]\nbase_url = \"http://a\"\n";
    for (line, field) in [
        ("max_in_flight = \"many\"", "credentials.c.max_in_flight"),
        ("max_in_flight = -1", "credentials.c.max_in_flight"),
        ("reserve = \"lots\"", "credentials.c.reserve"),
        ("reserve = -3", "credentials.c.reserve"),
        ("reserve = \"100%\"", "credentials.c.reserve"),
        ("policy_window = \"0s\"", "credentials.c.policy_window"),
        ("learn = \"yes\"", "credentials.c.learn"),
        ("body_signals = \"xml\"", "credentials.c.body_signals"),
        ("body_signals = true", "credentials.c.body_signals"),
    ] {
        refused(&format!("{base}{line}"), field);
    }
    refused(
        "[defaults]\nwindow_margin = \"-1ms\"",
        "defaults.window_margin",
    );
}

#[test]
fn unknown_fields_are_refused_by_name() {
    let cases = [
        ("[serverr]\nlisten = \"127.0.0.1:1\"", "serverr"),
        ("[server]\nlisten_on = \"127.0.0.1:1\"", "server.listen_on"),
        ("[defaults]\ndeadlin = \"1s\"", "defaults.deadlin"),
        (
            "[credentials.support]\nbase_url = \"http://a\"\nrat = \"1/1s\"",
            "credentials.support.rat",
        ),
        (
            "[credentials.c]\nbase_url = \"http://a\"\n[tools.t]\ncredential = \"c\"\npath = \"/\"\nmethd = \"GET\"",
            "tools.t.methd",
        ),
        ("[shared]\nredis = \"redis://x\"", "shared.redis"),
    ];
    for (text, field) in cases {
        let message = refused(text, field);
        assert!(message.contains("unknown field"), "{message}");
    }
}

#[test]
fn wrong_types_name_their_field() {
    refused(
        "[credentials.c]\nbase_url = \"http://a\"\nmax_in_flight = \"four\"",
        "credentials.c.max_in_flight",
    );
    refused("[credentials.c]\nrate = \"1/1s\"", "credentials.c");
    refused("[defaults]\ndeadline = 30", "defaults.deadline");
}

#[test]
fn invalid_values_name_their_field() {
    let base = ISSUE_EXAMPLE;
    let cases: Vec<(String, &str)> = vec![
        (
            base.replace("\"10/1s\"", "\"0/1s\""),
            "credentials.support.rate",
        ),
        (
            base.replace("\"10/1s\"", "\"ten\""),
            "credentials.support.rate",
        ),
        (
            base.replace("# burst = 10", "burst = 0"),
            "credentials.support.burst",
        ),
        (
            base.replace("max_in_flight = 4", "max_in_flight = 0"),
            "credentials.support.max_in_flight",
        ),
        (
            base.replace(
                "credential = \"support\"\nmethod = \"POST\"",
                "credential = \"billing\"\nmethod = \"POST\"",
            ),
            "tools.create_ticket.credential",
        ),
        (
            base.replace("query={query}", "query={query"),
            "tools.search_tickets.path",
        ),
        (
            base.replace("query={query}", "query={}"),
            "tools.search_tickets.path",
        ),
        (
            base.replace("/api/v2/tickets\"", "/api/../admin\""),
            "tools.create_ticket.path",
        ),
        (
            base.replace("\"/api/v2/tickets\"", "\"api/v2/tickets\""),
            "tools.create_ticket.path",
        ),
        (
            base.replace("method = \"POST\"", "method = \"BREW\""),
            "tools.create_ticket.method",
        ),
        (
            base.replace("http://127.0.0.1:9000", "ftp://127.0.0.1:9000"),
            "credentials.support.base_url",
        ),
        (
            base.replace("http://127.0.0.1:9000", "127.0.0.1:9000"),
            "credentials.support.base_url",
        ),
        (
            base.replace("http://127.0.0.1:9000", "http://127.0.0.1:9000/?key=1"),
            "credentials.support.base_url",
        ),
        // Found by the config fuzzer: a host `url` takes and a request cannot.
        (
            base.replace("http://127.0.0.1:9000", "https://api.exa*ple.co}"),
            "credentials.support.base_url",
        ),
        (
            base.replace("deadline = \"20s\"", "deadline = \"0s\""),
            "tools.search_tickets.deadline",
        ),
        (
            base.replace("deadline = \"20s\"", "deadline = \"-5s\""),
            "tools.search_tickets.deadline",
        ),
        (
            base.replace("deadline = \"30s\"", "deadline = \"0ms\""),
            "defaults.deadline",
        ),
        (
            base.replace("inline_wait = \"2s\"", "inline_wait = \"soon\""),
            "defaults.inline_wait",
        ),
        (base.replace("\"1MiB\"", "\"0\""), "server.max_body"),
        (base.replace("\"1MiB\"", "\"1 furlong\""), "server.max_body"),
        (
            base.replace("\"127.0.0.1:7878\"", "\"localhost\""),
            "server.listen",
        ),
        (
            base.replace(
                "auth_header = \"authorization\"",
                "auth_header = \"bad header\"",
            ),
            "credentials.support.auth_header",
        ),
        (
            base.replace("auth_header = \"authorization\"", "auth_header = \"host\""),
            "credentials.support.auth_header",
        ),
        (
            base.replace("[credentials.support]", "[credentials.\"sup port\"]"),
            "credentials.sup port",
        ),
    ];
    for (text, field) in &cases {
        refused(text, field);
    }
}

#[test]
fn secrets_come_from_the_environment_and_are_never_quoted() {
    let missing = refused(
        &ISSUE_EXAMPLE.replace("SUPPORT_API_KEY", "NOT_SET_ANYWHERE"),
        "credentials.support.secret_env",
    );
    assert!(missing.contains("NOT_SET_ANYWHERE"), "{missing}");
    refused(
        &ISSUE_EXAMPLE.replace("SUPPORT_API_KEY", "EMPTY"),
        "credentials.support.secret_env",
    );
    let injected = refused(
        &ISSUE_EXAMPLE.replace("SUPPORT_API_KEY", "WITH_NEWLINE"),
        "credentials.support.secret_env",
    );
    assert!(injected.contains("WITH_NEWLINE"), "{injected}");
    let userinfo = refused(
        &ISSUE_EXAMPLE.replace(
            "http://127.0.0.1:9000",
            "http://user:pa55word@127.0.0.1:9000",
        ),
        "credentials.support.base_url",
    );
    assert!(!userinfo.contains("pa55word"), "{userinfo}");
}

#[test]
fn a_non_loopback_listener_needs_a_token() {
    let exposed = ISSUE_EXAMPLE.replace("\"127.0.0.1:7878\"", "\"0.0.0.0:7878\"");
    let message = refused(&exposed, "server.auth_token_env");
    assert!(message.contains("0.0.0.0:7878"), "{message}");

    let with_token = exposed.replace("# auth_token_env", "auth_token_env");
    let config = load(&with_token).unwrap();
    assert_eq!(config.server.auth_token.as_ref().unwrap().expose(), TOKEN);
    assert!(!format!("{config:?}").contains(TOKEN));

    refused(
        &with_token.replace("\"SLUICE_TOKEN\"", "\"NO_SUCH_TOKEN\""),
        "server.auth_token_env",
    );

    // --listen is checked the same way.
    let mut config = load(ISSUE_EXAMPLE).unwrap();
    let error = config.set_listen("0.0.0.0:0".parse().unwrap()).unwrap_err();
    assert_eq!(error.field(), Some("server.auth_token_env"));
    let mut config = load(ISSUE_EXAMPLE).unwrap();
    config.set_listen("[::1]:0".parse().unwrap()).unwrap();
}

#[test]
fn the_shared_section_is_parsed_but_shared_budgets_do_not_start_yet() {
    let shared = ISSUE_EXAMPLE.replace("shared = false", "shared = true");
    refused(&shared, "credentials.support.shared");

    let with_redis = format!(
        "{shared}\n[shared]\nredis_url = \"redis://:hunter2@127.0.0.1:6379\"\ntimeout = \"50ms\"\nfallback_share = 0.5\n"
    );
    let config = load(&with_redis).unwrap();
    let settings = config.shared.as_ref().unwrap();
    assert_eq!(settings.timeout, Duration::from_millis(50));
    assert_eq!(settings.fallback_share, Some(0.5));
    assert_eq!(
        settings.redis_url.as_ref().unwrap().expose(),
        "redis://:hunter2@127.0.0.1:6379"
    );
    assert!(!format!("{config:?}").contains("hunter2"));

    let cluster = "[shared]\nredis_urls = [\"redis://a:1\", \"redis://b:2\"]\n";
    assert_eq!(load(cluster).unwrap().shared.unwrap().redis_urls.len(), 2);
    refused("[shared]\ntimeout = \"1s\"", "shared.redis_url");
    refused("[shared]\nredis_url = \"http://x\"", "shared.redis_url");
    refused(
        "[shared]\nredis_urls = [\"redis://a:1\", \"nope\"]",
        "shared.redis_urls[1]",
    );
    refused(
        "[shared]\nredis_url = \"redis://x\"\nfallback_share = 1.5",
        "shared.fallback_share",
    );

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let error = runtime
        .block_on(async { AppState::new(config) })
        .unwrap_err();
    assert!(matches!(error, StartError::SharedNeedsConnect { .. }));
    let message = error.to_string();
    assert!(
        message.starts_with("credentials.support.shared: ") && message.contains("Redis"),
        "{message}"
    );
    assert!(!message.contains("hunter2"));
}

#[test]
fn bad_toml_is_a_syntax_error() {
    let error = load("[server\nlisten = 1").unwrap_err();
    assert!(matches!(error, ConfigError::Syntax { .. }), "{error}");
    assert!(
        error
            .to_string()
            .starts_with("invalid TOML: line 1, column 8:"),
        "{error}"
    );
    // The offending line is not quoted: it could hold a Redis password.
    let error = load("[shared]\nredis_url = \"redis://:pw@h\" oops").unwrap_err();
    assert!(!error.to_string().contains("pw@"), "{error}");
    let error = load("[shared]\nredis_urls = \"redis://:pw@h\"").unwrap_err();
    assert_eq!(error.field(), Some("shared.redis_urls"));
    assert!(!error.to_string().contains("pw@"), "{error}");
}
