//! The proxy's routing without a real MCP server: the test plays both peers
//! over in-memory pipes and asserts on what each side received.

use crate::support;

use std::time::Duration;

use serde_json::{Value, json};
use support::{Harness, call, text};

/// One call at a time, no queue: a second concurrent call is shed at once.
const ONE_AT_A_TIME: &str = "[credentials.api]\nrate = \"100/1s\"\nmax_in_flight = 1\nqueue = 0";
/// One at a time with room to wait.
const QUEUED: &str = "[credentials.api]\nrate = \"100/1s\"\nmax_in_flight = 1\nqueue = 8";

#[tokio::test(start_paused = true)]
async fn everything_but_tools_call_passes_through_byte_for_byte() {
    let mut h = Harness::start(QUEUED);
    // Odd spacing, key order, a big integer id and unknown members survive untouched.
    let lines = [
        r#"{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
        r#"{ "method" : "notifications/initialized" , "jsonrpc" : "2.0" }"#,
        r#"{"jsonrpc":"2.0","id":"r-1","method":"resources/read","params":{"uri":"file:///x","x-vendor":[1,2.50,"\u00e9"]}}"#,
        r#"{"jsonrpc":"2.0","id":5,"result":{"roots":[]}}"#,
        r#"{"jsonrpc":"2.0","id":6,"method":"tools/call"}"#,
        r#"{"weird":true}"#,
    ];
    for line in lines {
        h.agent_sends(line).await;
        assert_eq!(h.server_line().await, line);
    }
    let from_server = [
        r#"{"jsonrpc":"2.0","id":123456789012345678901234567890,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"s","version":"1"}}}"#,
        r#"{"jsonrpc":"2.0","id":9,"method":"sampling/createMessage","params":{"messages":[]}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"p","progress":1}}"#,
        r#"[{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"a"}},{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"b"}}]"#,
    ];
    for line in from_server {
        h.server_sends(line).await;
        assert_eq!(h.agent_line().await, line);
    }
}

#[tokio::test(start_paused = true)]
async fn tools_call_goes_out_under_a_proxy_id_and_comes_back_under_the_agents() {
    let mut h = Harness::start(QUEUED);
    let params = r#"{"name":"send_mail","arguments":{"to":"a@example.com","body":"hi \u00e9"},"_meta":{"progressToken":"tok-1"}}"#;
    for id in [r#""abc""#, "42", "-1", "123456789012345678901234567890"] {
        h.agent_sends(&format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{params}}}"#
        ))
        .await;
        let forwarded = h.server_line().await;
        let request: Value = serde_json::from_str(&forwarded).unwrap();
        let proxy_id = request["id"].as_str().unwrap().to_owned();
        assert!(proxy_id.starts_with("sluice-"), "{proxy_id}");
        assert_eq!(request["method"], "tools/call");
        // The params are the agent's, as written.
        assert!(forwarded.contains(params), "{forwarded}");

        let result =
            r#"{"content":[{"type":"text","text":"sent"}],"isError":false,"_meta":{"x":1}}"#;
        h.server_sends(&format!(
            r#"{{"jsonrpc":"2.0","id":"{proxy_id}","result":{result}}}"#
        ))
        .await;
        assert_eq!(
            h.agent_line().await,
            format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{result}}}"#)
        );
    }

    // A JSON-RPC error from the server comes back as that error.
    h.agent_sends(&call(json!(7), "nope", json!({}))).await;
    let request = h.server_gets().await;
    let error = json!({"jsonrpc": "2.0", "id": request["id"], "error": {"code": -32602, "message": "Unknown tool: nope"}});
    h.server_sends(&error.to_string()).await;
    assert_eq!(
        h.agent_gets().await,
        json!({"jsonrpc": "2.0", "id": 7, "error": {"code": -32602, "message": "Unknown tool: nope"}})
    );

    // An answer to an id nobody waits for is not passed on.
    h.server_sends(r#"{"jsonrpc":"2.0","id":"sluice-0000000000000007-999","result":{}}"#)
        .await;
    assert_eq!(h.try_agent_line(Duration::from_secs(5)).await, None);
}

#[tokio::test(start_paused = true)]
async fn a_deferred_call_is_a_structured_tool_error_and_sends_nothing() {
    let mut h = Harness::start(ONE_AT_A_TIME);
    h.agent_sends(&call(json!(1), "slow", json!({"n": 1})))
        .await;
    let first = h.server_gets().await;
    h.agent_sends(&call(json!(2), "slow", json!({"n": 2})))
        .await;
    let shed = h.agent_gets().await;
    assert_eq!(shed["id"], 2);
    assert!(
        shed.get("error").is_none(),
        "never a protocol error: {shed}"
    );
    let result = &shed["result"];
    assert_eq!(result["isError"], true);
    assert_eq!(result["structuredContent"]["status"], "rate_limited");
    assert_eq!(result["structuredContent"]["reason"], "shed");
    assert!(
        result["structuredContent"]["retry_after_ms"]
            .as_u64()
            .unwrap()
            >= 1
    );
    let text: Value = serde_json::from_str(result["content"][0]["text"].as_str().unwrap()).unwrap();
    assert_eq!(&text, &result["structuredContent"]);
    // The server saw only the first call.
    assert_eq!(h.try_server_line(Duration::from_secs(5)).await, None);
    h.server_answers(&first, text_result("one")).await;
    assert_eq!(h.agent_gets().await["id"], 1);
}

#[tokio::test(start_paused = true)]
async fn the_rate_defers_calls_it_cannot_start_within_the_inline_wait() {
    let mut h = Harness::start("[credentials.api]\nrate = \"1/10s\"");
    h.agent_sends(&call(json!(1), "t", json!({"n": 1}))).await;
    let first = h.server_gets().await;
    h.server_answers(&first, text_result("ok")).await;
    assert_eq!(h.agent_gets().await["id"], 1);
    h.agent_sends(&call(json!(2), "t", json!({"n": 2}))).await;
    let deferred = h.agent_gets().await;
    let outcome = &deferred["result"]["structuredContent"];
    assert_eq!(outcome["status"], "rate_limited");
    assert_eq!(outcome["reason"], "throttled");
    let wait = outcome["retry_after_ms"].as_u64().unwrap();
    assert!((9_000..=10_100).contains(&wait), "{wait}");
    assert_eq!(h.try_server_line(Duration::from_secs(1)).await, None);
}

#[tokio::test(start_paused = true)]
async fn identical_reads_send_one_request_once_the_server_marked_them_read_only() {
    let mut h = Harness::start(
        QUEUED
            .replace("max_in_flight = 1", "max_in_flight = 4")
            .as_str(),
    );
    // Before tools/list nothing is known: two identical calls are two requests.
    h.agent_sends(&call(json!(1), "lookup", json!({"key": "a"})))
        .await;
    h.agent_sends(&call(json!(2), "lookup", json!({"key": "a"})))
        .await;
    let a = h.server_gets().await;
    let b = h.server_gets().await;
    h.server_answers(&a, text_result("a")).await;
    h.server_answers(&b, text_result("a")).await;
    h.agent_gets().await;
    h.agent_gets().await;

    h.list_tools(&["lookup"], &["store"]).await;
    // Five identical reads (arguments in any key order, any progress token): one request.
    for id in 10..15 {
        let line = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"arguments": {"y": 2, "key": "b"}, "name": "lookup", "_meta": {"progressToken": id}}});
        h.agent_sends(&line.to_string()).await;
    }
    let read = h.server_gets().await;
    assert_eq!(read["params"]["arguments"]["key"], "b");
    assert_eq!(h.try_server_line(Duration::from_millis(100)).await, None);
    h.server_answers(&read, text_result("b")).await;
    let mut ids = Vec::new();
    for _ in 10..15 {
        let answer = h.agent_gets().await;
        assert_eq!(answer["result"], text_result("b"));
        ids.push(answer["id"].as_u64().unwrap());
    }
    ids.sort_unstable();
    assert_eq!(ids, [10, 11, 12, 13, 14]);
    // A repeat within the cache's TTL is answered without a request.
    h.agent_sends(&call(json!(20), "lookup", json!({"key": "b", "y": 2})))
        .await;
    assert_eq!(h.agent_gets().await["result"], text_result("b"));
    assert_eq!(h.try_server_line(Duration::from_millis(100)).await, None);

    // Writes are never coalesced.
    h.agent_sends(&call(json!(30), "store", json!({"v": 1})))
        .await;
    h.agent_sends(&call(json!(31), "store", json!({"v": 1})))
        .await;
    let one = h.server_gets().await;
    let two = h.server_gets().await;
    assert_ne!(one["id"], two["id"]);

    // After list_changed, the hints are forgotten until the next listing.
    h.server_sends(r#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#)
        .await;
    assert_eq!(
        h.agent_gets().await["method"],
        "notifications/tools/list_changed"
    );
    tokio::time::advance(Duration::from_secs(5)).await;
    h.agent_sends(&call(json!(40), "lookup", json!({"key": "c"})))
        .await;
    h.agent_sends(&call(json!(41), "lookup", json!({"key": "c"})))
        .await;
    h.server_gets().await;
    h.server_gets().await;
}

#[tokio::test(start_paused = true)]
async fn cancelling_a_queued_call_removes_it_and_sends_nothing() {
    let mut h = Harness::start(QUEUED);
    h.agent_sends(&call(json!("a"), "slow", json!({"n": 1})))
        .await;
    let first = h.server_gets().await;
    h.agent_sends(&call(json!("b"), "slow", json!({"n": 2})))
        .await;
    // Let "b" reach the queue.
    tokio::time::sleep(Duration::from_millis(10)).await;
    h.agent_sends(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"b","reason":"user"}}"#)
        .await;
    tokio::time::sleep(Duration::from_millis(10)).await;
    h.server_answers(&first, text_result("one")).await;
    assert_eq!(h.agent_gets().await["id"], "a");
    // "b" never reached the server (neither the call nor its cancellation),
    // and the agent gets no response for it.
    assert_eq!(h.try_server_line(Duration::from_secs(30)).await, None);
    assert_eq!(h.try_agent_line(Duration::from_secs(30)).await, None);
    // The queue is free again.
    h.agent_sends(&call(json!("c"), "slow", json!({"n": 3})))
        .await;
    let third = h.server_gets().await;
    assert_eq!(third["params"]["arguments"]["n"], 3);
}

#[tokio::test(start_paused = true)]
async fn cancelling_a_sent_call_cancels_it_at_the_server_under_the_proxy_id() {
    let mut h = Harness::start(QUEUED);
    h.agent_sends(&call(json!(1), "slow", json!({}))).await;
    let sent = h.server_gets().await;
    h.agent_sends(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,"reason":"took too long"}}"#)
        .await;
    let cancel = h.server_gets().await;
    assert_eq!(
        cancel,
        json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
               "params": {"requestId": sent["id"], "reason": "took too long"}})
    );
    // A late answer is dropped: the agent gave up on the call.
    h.server_answers(&sent, text_result("late")).await;
    assert_eq!(h.try_agent_line(Duration::from_secs(5)).await, None);

    // Cancelling a request that is not a gated call passes through as is.
    let other =
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"r-9"}}"#;
    h.agent_sends(other).await;
    assert_eq!(h.server_line().await, other);
}

#[tokio::test(start_paused = true)]
async fn a_call_past_its_deadline_times_out_and_is_cancelled_at_the_server() {
    let mut h = Harness::start(&format!("{QUEUED}\n[tools.slow]\ndeadline = \"2s\""));
    h.agent_sends(&call(json!(1), "slow", json!({}))).await;
    let sent = h.server_gets().await;
    let timed_out = h.agent_gets().await;
    let outcome = &timed_out["result"]["structuredContent"];
    assert_eq!(outcome["status"], "timed_out");
    assert_eq!(outcome["after_ms"], 2000);
    assert_eq!(timed_out["result"]["isError"], true);
    let cancel = h.server_gets().await;
    assert_eq!(cancel["method"], "notifications/cancelled");
    assert_eq!(cancel["params"]["requestId"], sent["id"]);
}

#[tokio::test(start_paused = true)]
async fn malformed_lines_never_break_the_proxy() {
    let mut h = Harness::start(QUEUED);
    h.agent_sends("this is not json").await;
    let error = h.agent_gets().await;
    assert_eq!(error["id"], Value::Null);
    assert_eq!(error["error"]["code"], -32700);
    h.agent_sends_bytes(b"\xff\xfe{}\n").await;
    assert_eq!(h.agent_gets().await["error"]["code"], -32700);
    for invalid in ["42", "[]", "\"text\"", "null"] {
        h.agent_sends(invalid).await;
        let error = h.agent_gets().await;
        assert_eq!(error["error"]["code"], -32600, "{invalid}");
        assert_eq!(error["id"], Value::Null);
    }
    // Blank lines are ignored; a half-written object is a parse error.
    h.agent_sends("").await;
    h.agent_sends("   ").await;
    h.agent_sends(r#"{"jsonrpc":"2.0","id":1,"method":"#).await;
    assert_eq!(h.agent_gets().await["error"]["code"], -32700);
    // A tools/call with odd params is the server's to refuse.
    for odd in [
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":5}}"#,
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":[1]}"#,
        r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"t"}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":{"a":[]}}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled"}"#,
    ] {
        h.agent_sends(odd).await;
        assert_eq!(h.server_line().await, odd);
    }

    // Garbage from the server is dropped; what follows still passes.
    h.server_sends("Server starting on stdout, oops").await;
    h.server_sends("17").await;
    h.server_sends(r#"{"jsonrpc":"2.0","method":"notifications/message","params":{}}"#)
        .await;
    assert_eq!(h.agent_gets().await["method"], "notifications/message");
    // Still routing.
    h.agent_sends(&call(json!(9), "t", json!({}))).await;
    let request = h.server_gets().await;
    h.server_answers(&request, text_result("fine")).await;
    assert_eq!(h.agent_gets().await["id"], 9);
    assert!(!h.serving.is_finished());
}

#[tokio::test(start_paused = true)]
async fn a_batch_is_split_for_the_server_and_answered_as_one_array() {
    let mut h = Harness::start(QUEUED);
    let batch = json!([
        {"jsonrpc": "2.0", "id": "c1", "method": "tools/call", "params": {"name": "t", "arguments": {}}},
        {"jsonrpc": "2.0", "id": "p1", "method": "ping"},
        {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"},
        5
    ]);
    h.agent_sends(&batch.to_string()).await;
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push(h.server_gets().await);
    }
    let ping = seen.iter().find(|m| m["method"] == "ping").unwrap().clone();
    let tool = seen
        .iter()
        .find(|m| m["method"] == "tools/call")
        .unwrap()
        .clone();
    assert!(
        seen.iter()
            .any(|m| m["method"] == "notifications/roots/list_changed")
    );
    h.server_answers(&ping, json!({})).await;
    // Nothing until every response is in.
    assert_eq!(h.try_agent_line(Duration::from_millis(100)).await, None);
    h.server_answers(&tool, text_result("t")).await;
    let answers = h.agent_gets().await;
    let answers = answers.as_array().unwrap();
    assert_eq!(answers.len(), 3);
    let by_id = |id: Value| answers.iter().find(|a| a["id"] == id).unwrap();
    assert_eq!(by_id(json!("c1"))["result"], text_result("t"));
    assert_eq!(by_id(json!("p1"))["result"], json!({}));
    assert_eq!(by_id(Value::Null)["error"]["code"], -32600);

    // A batch of notifications only gets no answer.
    h.agent_sends(r#"[{"jsonrpc":"2.0","method":"notifications/initialized"}]"#)
        .await;
    assert_eq!(h.server_gets().await["method"], "notifications/initialized");
    assert_eq!(h.try_agent_line(Duration::from_millis(100)).await, None);
}

#[tokio::test(start_paused = true)]
async fn the_agent_closing_its_input_closes_the_servers_and_the_server_ending_ends_the_proxy() {
    let mut h = Harness::start(QUEUED);
    h.agent_sends(&call(json!(1), "slow", json!({}))).await;
    let sent = h.server_gets().await;
    h.agent_closes().await;
    // The call in progress is cancelled, then the server's input closes.
    let cancel = h.server_gets().await;
    assert_eq!(cancel["params"]["requestId"], sent["id"]);
    assert!(h.server_input_closed().await);
    // What the server still writes reaches the agent until it exits.
    h.server_sends(r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"bye"}}"#)
        .await;
    assert_eq!(h.agent_gets().await["params"]["data"], "bye");
    h.server_exits().await;
    assert!(h.serving.await.unwrap().is_ok());
}

#[tokio::test(start_paused = true)]
async fn the_server_ending_fails_calls_in_progress_once_and_flushes_the_rest() {
    // Issue 19.4 changed this: a call in progress when the server exits
    // gets one error outcome (it used to get no answer at all).
    let mut h = Harness::start(QUEUED);
    h.agent_sends(&call(json!(1), "slow", json!({}))).await;
    h.server_gets().await;
    // A second call waits in sluice's queue (one at a time).
    h.agent_sends(&call(json!(2), "slow", json!({"n": 2})))
        .await;
    h.server_sends(
        r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"last"}}"#,
    )
    .await;
    h.server_exits().await;
    assert_eq!(h.agent_gets().await["params"]["data"], "last");
    let mut ids = Vec::new();
    for _ in 0..2 {
        let answer = h.agent_gets().await;
        assert_eq!(
            answer["result"]["structuredContent"]["status"], "error",
            "{answer}"
        );
        ids.push(answer["id"].as_i64().unwrap());
    }
    ids.sort_unstable();
    assert_eq!(ids, [1, 2]);
    // Then the agent's output is closed: nothing more.
    assert_eq!(h.try_agent_line(Duration::from_secs(1)).await, None);
    assert!(h.serving.await.unwrap().is_ok());
}

fn text_result(value: &str) -> Value {
    text(value)
}
