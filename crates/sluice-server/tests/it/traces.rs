//! Issue 53: a span per call (`execute_tool {tool}`), a CLIENT span per
//! upstream request, parented by the caller's `traceparent`, exported
//! over OTLP/HTTP to a receiver started here, which decodes the protobuf
//! with the generated OTLP messages; the upstream is told the CLIENT span
//! is its parent.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use http::Request;
use serde_json::{Value, json};
use sluice_config::Telemetry;
use sluice_http::trace::Tracer;
use sluice_server::{AppState, app};
use sluice_testkit::{Fault, OtlpReceiver, ReceivedSpan, Upstream};
use support::{config, results, send};

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER: &str = "00f067aa0ba902b7";

fn traceparent() -> String {
    format!("00-{TRACE}-{CALLER}-01")
}

fn tracer(receiver: &OtlpReceiver) -> Arc<Tracer> {
    let endpoint = receiver.endpoint();
    let env = move |name: &str| (name == "OTEL_EXPORTER_OTLP_ENDPOINT").then(|| endpoint.clone());
    let settings = Telemetry::default().resolve(&env).unwrap().unwrap();
    Tracer::start(&settings).unwrap()
}

fn named<'a>(spans: &'a [ReceivedSpan], name: &str, id: Option<&str>) -> &'a ReceivedSpan {
    spans
        .iter()
        .find(|span| {
            span.name == name
                && id.is_none_or(|id| span.attr("gen_ai.tool.call.id") == Some(&json!(id)))
        })
        .unwrap_or_else(|| panic!("no span {name} {id:?} in {spans:#?}"))
}

fn children<'a>(spans: &'a [ReceivedSpan], parent: &ReceivedSpan) -> Vec<&'a ReceivedSpan> {
    spans
        .iter()
        .filter(|span| span.parent_span_id == parent.span_id)
        .collect()
}

/// A call sent and a call deferred by the credential's own window, in a
/// turn whose request carried a `traceparent`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_s_calls_join_the_caller_s_trace_and_say_why_one_was_deferred() {
    let receiver = OtlpReceiver::spawn().await;
    let upstream = Upstream::spawn(Fault::Ok).await;
    let tracer = tracer(&receiver);
    let state = AppState::connect_traced(
        config(&upstream.url(), "rate = \"1/10s\"\nmax_in_flight = 8", ""),
        Some(7),
        Some(tracer.clone()),
    )
    .await
    .unwrap();
    let router = app(state);
    let body = json!({"calls": [
        {"id": "call_sent", "tool": "get_ticket", "args": {"id": 1}, "deadline_ms": 2_000},
        {"id": "call_deferred", "tool": "get_ticket", "args": {"id": 2}, "deadline_ms": 2_000},
    ]});
    let request = Request::post("/v1/turns")
        .header("content-type", "application/json")
        .header("traceparent", traceparent())
        .body(Body::from(body.to_string()))
        .unwrap();
    let results = results(&send(&router, request).await);
    assert_eq!(results[0]["status"], "ok", "{results:?}");
    assert_eq!(results[1]["status"], "rate_limited", "{results:?}");
    assert!(tracer.flush(Duration::from_secs(5)).await);
    let spans = receiver.spans();
    assert_eq!(spans.len(), 3, "two calls and one request: {spans:#?}");

    let sent = named(&spans, "execute_tool get_ticket", Some("call_sent"));
    assert_eq!(sent.kind, 1, "INTERNAL");
    assert_eq!(sent.trace_id, TRACE);
    assert_eq!(sent.parent_span_id, CALLER);
    assert_eq!(sent.service, "sluice");
    for (key, value) in [
        ("gen_ai.operation.name", json!("execute_tool")),
        ("gen_ai.tool.name", json!("get_ticket")),
        ("sluice.credential", json!("support")),
        ("sluice.outcome", json!("ok")),
        ("sluice.attempts", json!(1)),
        ("sluice.coalesced", json!(false)),
        ("sluice.wait_ms", json!(0)),
    ] {
        assert_eq!(sent.attr(key), Some(&value), "{key}: {sent:#?}");
    }
    assert_eq!(sent.attr("error.type"), None);

    let deferred = named(&spans, "execute_tool get_ticket", Some("call_deferred"));
    assert_eq!(deferred.trace_id, TRACE);
    assert_eq!(deferred.parent_span_id, CALLER);
    assert_eq!(
        deferred.attr("sluice.outcome"),
        Some(&json!("rate_limited"))
    );
    assert_eq!(deferred.attr("sluice.reason"), Some(&json!("throttled")));
    assert_eq!(deferred.attr("sluice.attempts"), Some(&json!(0)));
    let retry_after = deferred
        .attr("sluice.retry_after_ms")
        .and_then(Value::as_i64);
    assert_eq!(
        retry_after,
        results[1]["retry_after_ms"].as_i64(),
        "the span says what the model was told"
    );
    assert!(children(&spans, deferred).is_empty(), "nothing was sent");

    let client = children(&spans, sent);
    assert_eq!(client.len(), 1, "{spans:#?}");
    let client = client[0];
    assert_eq!(client.kind, 3, "CLIENT");
    assert_eq!(client.trace_id, TRACE);
    assert_eq!(client.attr("http.request.method"), Some(&json!("GET")));
    assert_eq!(client.attr("http.response.status_code"), Some(&json!(200)));
    assert_eq!(client.attr("server.address"), Some(&json!("127.0.0.1")));
    // The upstream was told the CLIENT span is its parent.
    let seen = upstream.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        seen[0].header("traceparent"),
        Some(format!("00-{TRACE}-{}-01", client.span_id).as_str())
    );
    // Spans went as OTLP/HTTP protobuf to the signal's path.
    let exports = receiver.exports();
    assert!(exports.iter().all(
        |export| export.path == "/v1/traces" && export.content_type == "application/x-protobuf"
    ));
}

/// A call that queued for the credential's one permit says how long.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_queued_for_a_permit_reports_its_wait() {
    let receiver = OtlpReceiver::spawn().await;
    // Each answer takes about 40 bytes × 5 ms.
    let upstream = Upstream::spawn(Fault::Trickle {
        per_byte: Duration::from_millis(5),
    })
    .await;
    let tracer = tracer(&receiver);
    let state = AppState::connect_traced(
        config(&upstream.url(), "max_in_flight = 1", ""),
        Some(7),
        Some(tracer.clone()),
    )
    .await
    .unwrap();
    let router = app(state);
    let body = json!({"calls": [
        {"id": "first", "tool": "get_ticket", "args": {"id": 1}},
        {"id": "second", "tool": "get_ticket", "args": {"id": 2}},
    ]});
    let results = results(&send(&router, support::turn(&body)).await);
    assert!(
        results.iter().all(|result| result["status"] == "ok"),
        "{results:?}"
    );
    assert!(tracer.flush(Duration::from_secs(5)).await);
    let spans = receiver.spans();
    let waits: Vec<i64> = ["first", "second"]
        .iter()
        .map(|id| {
            let span = named(&spans, "execute_tool get_ticket", Some(id));
            span.attr("sluice.wait_ms").and_then(Value::as_i64).unwrap()
        })
        .collect();
    let (least, most) = (waits[0].min(waits[1]), waits[0].max(waits[1]));
    // One went at once; the other waited for the first's answer.
    assert_eq!(least, 0, "{waits:?}");
    let request = upstream.seen()[0].at;
    assert!(
        most >= 100,
        "{waits:?} (the first answer took {request:?}+)"
    );
    // Without a caller's context each call is the root of its own trace.
    let roots: Vec<&ReceivedSpan> = spans.iter().filter(|span| span.kind == 1).collect();
    assert!(roots.iter().all(|span| span.parent_span_id.is_empty()));
    assert_ne!(roots[0].trace_id, roots[1].trace_id);
}

/// `/proxy`: the client's `traceparent` parents the call, and the upstream
/// gets the CLIENT span's instead of the client's own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxied_request_joins_the_client_s_trace() {
    let receiver = OtlpReceiver::spawn().await;
    let upstream = Upstream::spawn(Fault::Ok).await;
    let tracer = tracer(&receiver);
    let state = AppState::connect_traced(
        config(&upstream.url(), "", ""),
        Some(7),
        Some(tracer.clone()),
    )
    .await
    .unwrap();
    let router = app(state);
    let request = Request::get("/proxy/support/api/v2/items/7")
        .header("traceparent", traceparent())
        .body(Body::empty())
        .unwrap();
    let reply = send(&router, request).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert!(tracer.flush(Duration::from_secs(5)).await);
    let spans = receiver.spans();
    assert_eq!(spans.len(), 2, "{spans:#?}");
    let call = spans.iter().find(|span| span.kind == 1).unwrap();
    assert!(call.name.starts_with("execute_tool "), "{call:#?}");
    assert_eq!(call.parent_span_id, CALLER);
    assert_eq!(call.trace_id, TRACE);
    assert_eq!(call.attr("sluice.outcome"), Some(&json!("ok")));
    assert_eq!(call.attr("gen_ai.tool.call.id"), None);
    let client = spans.iter().find(|span| span.kind == 3).unwrap();
    assert_eq!(client.parent_span_id, call.span_id);
    let seen = upstream.seen();
    assert_eq!(
        seen[0].header("traceparent"),
        Some(format!("00-{TRACE}-{}-01", client.span_id).as_str()),
        "the client's own traceparent is replaced"
    );
}

/// Without a tracer, a client's `traceparent` passes through untouched and
/// nothing is exported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_tracer_the_proxy_passes_the_client_s_traceparent_on() {
    let upstream = Upstream::spawn(Fault::Ok).await;
    let router = app(AppState::connect(config(&upstream.url(), "", ""), Some(7))
        .await
        .unwrap());
    let request = Request::get("/proxy/support/api/v2/items/7")
        .header("traceparent", traceparent())
        .body(Body::empty())
        .unwrap();
    let reply = send(&router, request).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert_eq!(
        upstream.seen()[0].header("traceparent"),
        Some(traceparent().as_str())
    );
}
