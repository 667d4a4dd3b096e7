//! Scopes the server reports become their own buckets, end to end over
//! loopback against the fake API's `github` and `openai` header styles: an
//! exhausted scope defers the tools bound to it and nothing else.

use crate::support;

use std::time::Duration;

use serde_json::json;
use sluice::{Call, CredentialConfig, Gate, GateConfig, Outcome, ToolConfig};
use sluice_fake::{Config, FakeApi, FakeServer, HeaderStyle, Limits, Resource};
use support::http_executor::HttpExecutor;

fn gate(server: &FakeServer) -> Gate<HttpExecutor> {
    let config = GateConfig::default()
        .credential(
            "github",
            CredentialConfig::with_rate("100/1s".parse().unwrap()),
        )
        .tool("search_code", ToolConfig::read("github"))
        .tool("get_repo", ToolConfig::read("github"));
    Gate::builder(config, HttpExecutor::new(&server.url(), "Bearer gh"))
        .seed(3)
        .build()
        .unwrap()
}

fn call(tool: &str, q: &str) -> Call {
    Call::new(tool, json!({ "q": q }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn github_search_scope_defers_only_search() {
    // GitHub's search resource allows far fewer requests than core.
    let config = Config::new(Limits::new(100, Duration::from_secs(60)))
        .with_headers(HeaderStyle::Github)
        .with_resource(Resource::new(
            "search",
            "/api/search",
            Limits::new(2, Duration::from_secs(30)),
        ));
    let server = FakeServer::spawn(FakeApi::new(config).unwrap())
        .await
        .unwrap();
    let gate = gate(&server);

    // Two searches spend the search resource; the second response says so
    // (x-ratelimit-resource: search, remaining 0, reset ~30 s away).
    for q in ["a", "b"] {
        assert!(gate.call(call("search_code", q)).await.is_ok());
    }
    let deferred = gate.call(call("search_code", "c")).await;
    let Outcome::RateLimited {
        scope,
        retry_after_ms,
        ..
    } = &deferred
    else {
        panic!("{deferred:?}")
    };
    assert_eq!(scope, "search");
    assert!((25_000..=31_000).contains(retry_after_ms), "{deferred:?}");
    // Another tool on the same key is not held back.
    for q in ["x", "y", "z"] {
        assert!(gate.call(call("get_repo", q)).await.is_ok());
    }
    let records = server.api().requests();
    let searches = records
        .iter()
        .filter(|r| r.path.starts_with("/api/search"))
        .count();
    assert_eq!(searches, 2, "the deferred search sent nothing");
    assert_eq!(records.len(), 5);
    assert!(
        records.iter().all(|r| r.status == 200),
        "nothing was throttled by the server"
    );
    let status = gate.status();
    assert!(
        status
            .iter()
            .any(|s| s.scope == "search" && s.blocked_for_ms.is_some()),
        "{status:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_tokens_scope_defers_until_its_reset() {
    // 1000 tokens per request, 2000 per minute: the second response shows no
    // tokens left, so the third call is deferred until the token reset,
    // without sending, although the requests scope has plenty of room.
    let limits = Limits::new(100, Duration::from_secs(60)).with_tokens(1_000, 2_000);
    let config = Config::new(limits).with_headers(HeaderStyle::Openai);
    let server = FakeServer::spawn(FakeApi::new(config).unwrap())
        .await
        .unwrap();
    let gate = gate(&server);

    assert!(gate.call(call("get_repo", "a")).await.is_ok());
    assert!(gate.call(call("get_repo", "b")).await.is_ok());
    let deferred = gate.call(call("get_repo", "c")).await;
    let Outcome::RateLimited {
        scope,
        retry_after_ms,
        ..
    } = &deferred
    else {
        panic!("{deferred:?}")
    };
    assert_eq!(scope, "tokens");
    assert!(*retry_after_ms > 2_000, "{deferred:?}");
    assert_eq!(
        server.api().requests().len(),
        2,
        "the deferred call sent nothing"
    );
}
