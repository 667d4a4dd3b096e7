//! Rate signals from the MCP side (issue 17): a server answering `-32023`,
//! tools whose errors report their API's limit, progress while a call
//! waits, the deferral forms, annotations, and messages over the size cap
//! (issue 19.4). On tokio's paused clock: every time asserted is exact.

use crate::support;

use std::time::Duration;

use serde_json::{Value, json};
use support::{Harness, call, text};
use tokio::time::Instant;

const API: &str = "[credentials.api]\nrate = \"100/1s\"\nmax_in_flight = 4\nqueue = 8";

fn rate_limited_error(request: &Value, retry_after_ms: u64) -> String {
    json!({"jsonrpc": "2.0", "id": request["id"],
           "error": {"code": -32023, "message": "Rate limited", "data": {"retryAfterMs": retry_after_ms}}})
    .to_string()
}

fn tool_error(request: &Value, message: &str) -> String {
    json!({"jsonrpc": "2.0", "id": request["id"],
           "result": {"content": [{"type": "text", "text": message}], "isError": true}})
    .to_string()
}

/// The server lists its tools with these annotations.
async fn list(h: &mut Harness, tools: Value) {
    h.agent_sends(r#"{"jsonrpc":"2.0","id":"list","method":"tools/list"}"#)
        .await;
    let request = h.server_gets().await;
    h.server_answers(&request, json!({ "tools": tools })).await;
    assert_eq!(h.agent_gets().await["id"], "list");
}

async fn read_only(h: &mut Harness, name: &str) {
    list(
        h,
        json!([{"name": name, "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}}]),
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_jsonrpc_rate_limit_is_waited_out_inline_and_nothing_is_sent_early() {
    let mut h = Harness::start(API);
    read_only(&mut h, "search").await;
    h.agent_sends(&call(json!(1), "search", json!({"q": "x"})))
        .await;
    let first = h.server_gets().await;
    let refused_at = Instant::now();
    h.server_sends(&rate_limited_error(&first, 1500)).await;
    // Nothing reaches the server before the wait it asked for.
    assert_eq!(h.try_server_line(Duration::from_millis(1499)).await, None);
    let again = h.server_gets().await;
    assert_eq!(again["params"]["arguments"], json!({"q": "x"}));
    assert_eq!(refused_at.elapsed(), Duration::from_millis(1500));
    h.server_answers(&again, text("found")).await;
    // Below the model's view: the agent sees only the answer.
    let answer = h.agent_gets().await;
    assert_eq!(answer["id"], 1);
    assert_eq!(answer["result"]["content"][0]["text"], "found");
}

#[tokio::test(start_paused = true)]
async fn a_long_jsonrpc_rate_limit_defers_the_call_and_blocks_the_scope() {
    let mut h = Harness::start(API);
    read_only(&mut h, "search").await;
    h.agent_sends(&call(json!(1), "search", json!({}))).await;
    let first = h.server_gets().await;
    h.server_sends(&rate_limited_error(&first, 30_000)).await;
    let answer = h.agent_gets().await;
    let outcome = &answer["result"]["structuredContent"];
    assert_eq!(answer["result"]["isError"], true);
    assert_eq!(outcome["status"], "rate_limited");
    let wait = outcome["retry_after_ms"].as_u64().unwrap();
    assert!((29_000..=30_000).contains(&wait), "{wait}");
    // The scope is blocked: a later call is deferred without sending.
    tokio::time::sleep(Duration::from_secs(10)).await;
    h.agent_sends(&call(json!(2), "search", json!({"other": 1})))
        .await;
    let answer = h.agent_gets().await;
    assert_eq!(answer["id"], 2);
    assert_eq!(
        answer["result"]["structuredContent"]["status"],
        "rate_limited"
    );
    assert_eq!(h.try_server_line(Duration::from_secs(1)).await, None);
}

#[tokio::test(start_paused = true)]
async fn a_tool_error_reporting_a_rate_limit_is_retried_for_reads() {
    let mut h = Harness::start(API);
    read_only(&mut h, "search").await;
    h.agent_sends(&call(json!("a"), "search", json!({}))).await;
    let first = h.server_gets().await;
    let refused_at = Instant::now();
    h.server_sends(&tool_error(
        &first,
        "failed to search: GET https://api.github.com/search/issues: 403 API rate limit exceeded for user ID 1. Retry after 2s",
    ))
    .await;
    assert_eq!(h.try_server_line(Duration::from_millis(1999)).await, None);
    let again = h.server_gets().await;
    assert_eq!(refused_at.elapsed(), Duration::from_secs(2));
    h.server_answers(&again, text("ok")).await;
    assert_eq!(h.agent_gets().await["result"]["content"][0]["text"], "ok");
}

#[tokio::test(start_paused = true)]
async fn a_write_that_hit_a_rate_limit_is_not_run_again_and_the_model_gets_the_outcome() {
    let mut h = Harness::start(API);
    // Not listed: a destructive write by the spec's defaults.
    h.agent_sends(&call(json!(5), "create_issue", json!({"title": "t"})))
        .await;
    let first = h.server_gets().await;
    h.server_sends(&tool_error(
        &first,
        "You have exceeded a secondary rate limit. Retry after 1s.",
    ))
    .await;
    let answer = h.agent_gets().await;
    let outcome = &answer["result"]["structuredContent"];
    assert_eq!(outcome["status"], "rate_limited", "{answer}");
    let wait = outcome["retry_after_ms"].as_u64().unwrap();
    assert!((1_000..=1_050).contains(&wait), "{wait}");
    // Not the server's error text: sluice's outcome.
    assert!(
        !answer["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("secondary"),
        "{answer}"
    );
    assert_eq!(h.try_server_line(Duration::from_secs(5)).await, None);
    // The scope was penalized: a call at once waits out the second.
    let sent = Instant::now();
    h.agent_sends(&call(json!(6), "create_issue", json!({"title": "u"})))
        .await;
    let _next = h.server_gets().await;
    assert!(sent.elapsed() <= Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn configured_patterns_and_structured_content_are_rate_limits_too() {
    let mut h = Harness::start(&format!(
        "{API}\n[mcp]\nrate_limit_patterns = [\"upstream busy, back in (\\\\S+)\"]"
    ));
    read_only(&mut h, "search").await;
    h.agent_sends(&call(json!(1), "search", json!({}))).await;
    let first = h.server_gets().await;
    let at = Instant::now();
    h.server_sends(&tool_error(&first, "upstream busy, back in 1200ms"))
        .await;
    let again = h.server_gets().await;
    assert_eq!(at.elapsed(), Duration::from_millis(1200));
    let answer = json!({"jsonrpc": "2.0", "id": again["id"],
        "result": {"content": [], "structuredContent": {"retryAfterMs": 900}, "isError": true}});
    h.server_sends(&answer.to_string()).await;
    assert_eq!(h.try_server_line(Duration::from_millis(899)).await, None);
    let third = h.server_gets().await;
    // Not before the wait; the refilling bucket may add a slot's spacing.
    let elapsed = at.elapsed();
    assert!(
        elapsed >= Duration::from_millis(2100) && elapsed <= Duration::from_millis(2120),
        "{elapsed:?}"
    );
    // An ordinary error is the tool's answer, passed on as written.
    let plain = tool_error(&third, "Issue #429 not found");
    h.server_sends(&plain).await;
    let answer = h.agent_gets().await;
    assert_eq!(
        answer["result"]["content"][0]["text"],
        "Issue #429 not found"
    );
    assert_eq!(answer["result"]["isError"], true);
}

#[tokio::test(start_paused = true)]
async fn deferral_error_answers_with_a_jsonrpc_rate_limited_error() {
    let mut h = Harness::start(&format!("{API}\n[mcp]\ndeferral = \"error\""));
    read_only(&mut h, "search").await;
    h.agent_sends(&call(json!(9), "search", json!({}))).await;
    let first = h.server_gets().await;
    h.server_sends(&rate_limited_error(&first, 60_000)).await;
    let answer = h.agent_gets().await;
    assert_eq!(answer["id"], 9);
    assert!(answer.get("result").is_none(), "{answer}");
    let error = &answer["error"];
    assert_eq!(error["code"], -32023);
    assert_eq!(error["data"]["scope"], "api_key");
    assert_eq!(error["data"]["reason"], "throttled");
    assert!(error["data"]["retryAfterMs"].as_u64().unwrap() > 59_000);
    assert!(error["data"]["hint"].as_str().unwrap().len() > 10);
}

#[tokio::test(start_paused = true)]
async fn a_long_inline_wait_sends_progress_to_a_client_that_asked() {
    let mut h = Harness::start(API);
    read_only(&mut h, "search").await;
    let request = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "search", "arguments": {}, "_meta": {"progressToken": "tok-9"}}});
    h.agent_sends(&request.to_string()).await;
    let first = h.server_gets().await;
    h.server_sends(&rate_limited_error(&first, 1800)).await;
    let started = Instant::now();
    let progress = h.agent_gets().await;
    assert_eq!(progress["method"], "notifications/progress");
    assert_eq!(progress["params"]["progressToken"], "tok-9");
    assert_eq!(progress["params"]["progress"], 1);
    let message = progress["params"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("waiting for a rate-limit slot, about 1"),
        "{message}"
    );
    assert_eq!(started.elapsed(), Duration::ZERO);
    let again = h.server_gets().await;
    h.server_answers(&again, text("done")).await;
    // No reminder for the last 800 ms; the answer comes next.
    let answer = h.agent_gets().await;
    assert_eq!(answer["id"], 3, "{answer}");

    // A short wait, or no token: no notification.
    h.agent_sends(&call(json!(4), "search", json!({"n": 2})))
        .await;
    let first = h.server_gets().await;
    h.server_sends(&rate_limited_error(&first, 1800)).await;
    let again = h.server_gets().await;
    h.server_answers(&again, text("done")).await;
    assert_eq!(h.agent_gets().await["id"], 4);
}

#[tokio::test(start_paused = true)]
async fn a_tool_that_touches_no_third_party_api_is_not_charged() {
    // One call at a time and no queue: a charged call would be shed.
    let mut h =
        Harness::start("[credentials.api]\nrate = \"100/1s\"\nmax_in_flight = 1\nqueue = 0");
    list(
        &mut h,
        json!([
            {"name": "remote", "inputSchema": {}},
            {"name": "memory", "inputSchema": {}, "annotations": {"openWorldHint": false}}
        ]),
    )
    .await;
    h.agent_sends(&call(json!(1), "remote", json!({}))).await;
    let held = h.server_gets().await;
    assert!(held["id"].as_str().unwrap().starts_with("sluice-"));
    for id in 2..=3 {
        h.agent_sends(&call(json!(id), "memory", json!({}))).await;
        // Straight through, under the agent's own id.
        let passed = h.server_gets().await;
        assert_eq!(passed["id"], id);
        h.server_answers(&passed, text("local")).await;
        assert_eq!(h.agent_gets().await["id"], id);
    }
    h.server_answers(&held, text("remote")).await;
    assert_eq!(h.agent_gets().await["id"], 1);
}

#[tokio::test(start_paused = true)]
async fn an_untrusted_servers_annotations_do_not_widen_retries() {
    let mut h = Harness::start(&format!("{API}\n[mcp]\ntrust_annotations = false"));
    read_only(&mut h, "search").await;
    h.agent_sends(&call(json!(1), "search", json!({}))).await;
    let first = h.server_gets().await;
    h.server_sends(&tool_error(&first, "rate limit exceeded, retry after 1s"))
        .await;
    // Its readOnlyHint is not taken: the tool may have acted, so it is not run again.
    let answer = h.agent_gets().await;
    assert_eq!(
        answer["result"]["structuredContent"]["status"],
        "rate_limited"
    );
    assert_eq!(h.try_server_line(Duration::from_secs(3)).await, None);
}

#[tokio::test(start_paused = true)]
async fn messages_over_the_size_cap_are_refused_and_the_proxy_goes_on() {
    let mut h = Harness::start(&format!("{API}\n[mcp]\nmax_message_size = \"4KiB\""));
    let big = "x".repeat(10_000);
    // A request: an error under its id, and the server never sees it.
    let request = json!({"jsonrpc": "2.0", "id": 11, "method": "tools/call",
        "params": {"name": "search", "arguments": {"blob": big}}});
    h.agent_sends(&request.to_string()).await;
    let answer = h.agent_gets().await;
    assert_eq!(answer["id"], 11);
    assert_eq!(answer["error"]["code"], -32600);
    // A notification: dropped.
    let note =
        json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"data": big}});
    h.agent_sends(&note.to_string()).await;
    assert_eq!(h.try_server_line(Duration::from_secs(1)).await, None);
    assert_eq!(h.try_agent_line(Duration::from_secs(1)).await, None);

    // The server's answer over the cap: the call gets an error, not a hang.
    h.agent_sends(&call(json!(12), "search", json!({}))).await;
    let sent = h.server_gets().await;
    let huge = json!({"jsonrpc": "2.0", "id": sent["id"], "result": {"content": [{"type": "text", "text": big}]}});
    h.server_sends(&huge.to_string()).await;
    let answer = h.agent_gets().await;
    assert_eq!(answer["id"], 12);
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("too large"),
        "{answer}"
    );
    // And both directions still work.
    h.agent_sends(&call(json!(13), "search", json!({}))).await;
    let sent = h.server_gets().await;
    h.server_answers(&sent, text("small")).await;
    assert_eq!(h.agent_gets().await["id"], 13);
}
