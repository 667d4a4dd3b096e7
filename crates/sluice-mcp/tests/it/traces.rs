//! Issue 53: a `tools/call`'s span joins the agent's trace through
//! `params._meta.traceparent`, and says why the call waited or was
//! deferred; exported over OTLP/HTTP to a receiver started here.

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
    assert_eq!(spans.len(), 2, "{spans:#?}");
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
