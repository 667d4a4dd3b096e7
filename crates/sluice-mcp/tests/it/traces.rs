//! Issue 53: a `tools/call`'s span joins the agent's trace through
//! `params._meta.traceparent`, and says why the call waited or was
//! deferred; exported over OTLP/HTTP to a receiver started here. The
//! request forwarded to the server is a CLIENT span of the call's, which
//! the server is told is its parent.

use crate::support;

use std::time::Duration;

use serde_json::{Value, json};
use sluice_config::Telemetry;
use sluice_http::trace::Tracer;
use sluice_testkit::{OtlpReceiver, ReceivedSpan};
use support::{Harness, text};

const TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const AGENT: &str = "b7ad6b7169203331";

fn traced_call(id: u64, tool: &str) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
           "params": {"name": tool, "arguments": {"n": id},
                      "_meta": {"traceparent": format!("00-{TRACE}-{AGENT}-01")}}})
    .to_string()
}

fn tracer(receiver: &OtlpReceiver) -> std::sync::Arc<Tracer> {
    let endpoint = receiver.endpoint();
    let env = move |name: &str| (name == "OTEL_EXPORTER_OTLP_ENDPOINT").then(|| endpoint.clone());
    Tracer::start(&Telemetry::default().resolve(&env).unwrap().unwrap()).unwrap()
}

fn span_of<'a>(spans: &'a [ReceivedSpan], id: &str) -> &'a ReceivedSpan {
    spans
        .iter()
        .find(|span| span.attr("gen_ai.tool.call.id") == Some(&json!(id)))
        .unwrap_or_else(|| panic!("no span for call {id}: {spans:#?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_joins_the_agent_s_trace_and_says_how_long_it_queued() {
    let receiver = OtlpReceiver::spawn().await;
    let tracer = tracer(&receiver);
    let config = "[credentials.api]\nrate = \"100/1s\"\nmax_in_flight = 1\nqueue = 8";
    let traced = tracer.clone();
    let mut h = Harness::start_with(config, move |proxy| proxy.trace(Some(traced)));
    h.agent_sends(&traced_call(1, "search")).await;
    let first = h.server_gets().await;
    h.agent_sends(&traced_call(2, "search")).await;
    // The second waits for the one permit while the first is answered.
    tokio::time::sleep(Duration::from_millis(150)).await;
    h.server_answers(&first, text("one")).await;
    let second = h.server_gets().await;
    h.server_answers(&second, text("two")).await;
    let answers: Vec<Value> = vec![h.agent_gets().await, h.agent_gets().await];
    assert!(
        answers
            .iter()
            .all(|answer| answer["result"]["isError"] == false),
        "{answers:?}"
    );
    assert!(tracer.flush(Duration::from_secs(5)).await);
    let spans = receiver.spans();
    // Each call's span, and the CLIENT span of its one forwarded request.
    assert_eq!(spans.len(), 4, "{spans:#?}");
    for id in ["1", "2"] {
        let span = span_of(&spans, id);
        assert_eq!(span.name, "execute_tool search");
        assert_eq!(span.kind, 1);
        assert_eq!(span.trace_id, TRACE);
        assert_eq!(span.parent_span_id, AGENT);
        assert_eq!(span.attr("gen_ai.tool.name"), Some(&json!("search")));
        assert_eq!(span.attr("sluice.credential"), Some(&json!("api")));
        assert_eq!(span.attr("sluice.outcome"), Some(&json!("ok")));
        assert_eq!(span.attr("sluice.attempts"), Some(&json!(1)));
    }
    assert_eq!(span_of(&spans, "1").attr("sluice.wait_ms"), Some(&json!(0)));
    let waited = span_of(&spans, "2")
        .attr("sluice.wait_ms")
        .and_then(Value::as_i64);
    assert!(waited.is_some_and(|ms| ms >= 140), "{waited:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shed_call_s_span_says_so_and_an_untraced_agent_starts_a_trace() {
    let receiver = OtlpReceiver::spawn().await;
    let tracer = tracer(&receiver);
    let config = "[credentials.api]\nrate = \"100/1s\"\nmax_in_flight = 1\nqueue = 0";
    let traced = tracer.clone();
    let mut h = Harness::start_with(config, move |proxy| proxy.trace(Some(traced)));
    h.agent_sends(&support::call(json!("first"), "slow", json!({})))
        .await;
    let first = h.server_gets().await;
    h.agent_sends(&traced_call(2, "slow")).await;
    let shed = h.agent_gets().await;
    assert_eq!(shed["result"]["structuredContent"]["reason"], "shed");
    h.server_answers(&first, text("one")).await;
    assert_eq!(h.agent_gets().await["id"], "first");
    assert!(tracer.flush(Duration::from_secs(5)).await);
    let spans = receiver.spans();
    let shed_span = span_of(&spans, "2");
    assert_eq!(shed_span.parent_span_id, AGENT);
    assert_eq!(
        shed_span.attr("sluice.outcome"),
        Some(&json!("rate_limited"))
    );
    assert_eq!(shed_span.attr("sluice.reason"), Some(&json!("shed")));
    assert_eq!(shed_span.attr("sluice.attempts"), Some(&json!(0)));
    assert_eq!(
        shed_span.attr("sluice.retry_after_ms"),
        Some(&shed["result"]["structuredContent"]["retry_after_ms"])
    );
    // A string id is named without its quotes; no `_meta`: a trace of its own.
    let root = span_of(&spans, "first");
    assert!(root.parent_span_id.is_empty());
    assert_ne!(root.trace_id, TRACE);
}

/// The CLIENT span whose parent is `call`'s span.
fn client_of<'a>(spans: &'a [ReceivedSpan], call: &ReceivedSpan) -> Vec<&'a ReceivedSpan> {
    spans
        .iter()
        .filter(|span| span.parent_span_id == call.span_id)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_forwarded_request_is_a_client_span_the_server_is_told_is_its_parent() {
    let receiver = OtlpReceiver::spawn().await;
    let tracer = tracer(&receiver);
    let config = "[credentials.api]\nrate = \"100/1s\"";
    let traced = tracer.clone();
    let mut h = Harness::start_with(config, move |proxy| proxy.trace(Some(traced)));
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "search", "arguments": {"q": "x"},
                   "_meta": {"progressToken": "p1", "traceparent": format!("00-{TRACE}-{AGENT}-01")}}});
    h.agent_sends(&call.to_string()).await;
    let first = h.server_gets().await;
    let meta = &first["params"]["_meta"];
    assert_eq!(meta["progressToken"], "p1", "{first}");
    assert_eq!(first["params"]["arguments"], json!({"q": "x"}));
    let sent = meta["traceparent"].as_str().unwrap_or_default().to_owned();
    let parts: Vec<&str> = sent.split('-').collect();
    assert_eq!(parts.len(), 4, "{sent}");
    assert_eq!((parts[0], parts[1], parts[3]), ("00", TRACE, "01"));
    assert_ne!(parts[2], AGENT, "the agent's span is replaced");
    h.server_answers(&first, text("one")).await;
    assert_eq!(h.agent_gets().await["result"]["isError"], false);

    // A JSON-RPC error from the server is the CLIENT span's `error.type`.
    h.agent_sends(&traced_call(2, "search")).await;
    let second = h.server_gets().await;
    let refused = json!({"jsonrpc": "2.0", "id": second["id"],
                         "error": {"code": -32602, "message": "bad arguments"}});
    h.server_sends(&refused.to_string()).await;
    assert_eq!(h.agent_gets().await["error"]["code"], -32602);

    assert!(tracer.flush(Duration::from_secs(5)).await);
    let spans = receiver.spans();
    assert_eq!(spans.len(), 4, "{spans:#?}");
    let call_span = span_of(&spans, "1");
    let clients = client_of(&spans, call_span);
    assert_eq!(clients.len(), 1, "{spans:#?}");
    let client = clients[0];
    assert_eq!(client.name, "tools/call search");
    assert_eq!(client.kind, 3, "CLIENT");
    assert_eq!(client.trace_id, TRACE);
    assert_eq!(
        client.span_id, parts[2],
        "the server's parent is the CLIENT span"
    );
    assert_eq!(client.attr("mcp.method.name"), Some(&json!("tools/call")));
    assert_eq!(client.attr("gen_ai.tool.name"), Some(&json!("search")));
    assert_eq!(client.attr("rpc.jsonrpc.request_id"), Some(&first["id"]));
    assert_eq!(client.attr("error.type"), None);
    assert_eq!(client.status_code, 0);

    let failed = client_of(&spans, span_of(&spans, "2"));
    assert_eq!(failed.len(), 1, "{spans:#?}");
    assert_eq!(failed[0].attr("error.type"), Some(&json!("-32602")));
    assert_eq!(failed[0].status_code, 2, "ERROR");
    let told = second["params"]["_meta"]["traceparent"].as_str();
    assert_eq!(
        told,
        Some(format!("00-{TRACE}-{}-01", failed[0].span_id).as_str())
    );
}

/// The params of a call whose bytes are checked as the server reads them:
/// unusual spacing and key order, which a re-encoding would change.
const PARAMS: &str = r#"{"name":"search", "_meta":{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00","progressToken":"p1"},"arguments":{"q":"x"}}"#;

async fn forwarded_params(h: &mut Harness) -> String {
    h.agent_sends(&format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{PARAMS}}}"#
    ))
    .await;
    let line = h.server_line().await;
    let request: Value = serde_json::from_str(&line).unwrap();
    h.server_answers(&request, text("one")).await;
    assert_eq!(h.agent_gets().await["result"]["isError"], false);
    line
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_traces_or_sampling_the_server_reads_the_agent_s_bytes() {
    let config = "[credentials.api]\nrate = \"100/1s\"";
    let mut off = Harness::start(config);
    let line = forwarded_params(&mut off).await;
    assert!(line.ends_with(&format!(r#""params":{PARAMS}}}"#)), "{line}");

    // On, but the agent's span is not sampled (flags 00): nothing to join.
    let receiver = OtlpReceiver::spawn().await;
    let tracer = tracer(&receiver);
    let traced = tracer.clone();
    let mut on = Harness::start_with(config, move |proxy| proxy.trace(Some(traced)));
    let line = forwarded_params(&mut on).await;
    assert!(line.ends_with(&format!(r#""params":{PARAMS}}}"#)), "{line}");
    assert!(tracer.flush(Duration::from_secs(5)).await);
    assert!(receiver.spans().is_empty());
}
