//! `params._meta.traceparent` of a `tools/call`: the agent's span, which
//! the call's span joins (read only when traces are on), and the span of
//! the request sluice forwards, which the server's joins (written only
//! for a traced call).

use std::sync::Arc;

use serde::Deserialize;
use serde_json::value::RawValue;
use sluice_http::trace::{TraceParent, Tracer};

/// `params._meta.traceparent` of a `tools/call`: the agent's span.
#[derive(Deserialize)]
struct TraceMeta<'a> {
    #[serde(borrow, default, rename = "_meta")]
    meta: Option<TraceMetaFields<'a>>,
}

#[derive(Deserialize)]
struct TraceMetaFields<'a> {
    #[serde(borrow, default)]
    traceparent: Option<std::borrow::Cow<'a, str>>,
}

/// The agent's span, read only when traces are on.
pub(crate) fn trace_parent(tracer: Option<&Arc<Tracer>>, params: &RawValue) -> Option<TraceParent> {
    tracer?;
    let meta = serde_json::from_str::<TraceMeta<'_>>(params.get()).ok()?;
    TraceParent::parse(&meta.meta?.traceparent?)
}

/// `params` with `_meta.traceparent` set to `parent` (the forwarded
/// request's CLIENT span), the other `_meta` keys kept; `None` when
/// `params` or its `_meta` is not an object, which is forwarded as it is.
/// Re-encoded, so the keys may change order (a JSON object has none).
pub(crate) fn with_trace_parent(params: &RawValue, parent: TraceParent) -> Option<String> {
    let mut params = serde_json::from_str::<serde_json::Value>(params.get()).ok()?;
    let meta = params
        .as_object_mut()?
        .entry("_meta")
        .or_insert_with(|| serde_json::Value::Object(serde_json::Map::new()));
    let header = parent.header();
    let traceparent = header.to_str().ok()?.to_owned();
    meta.as_object_mut()?.insert(
        "traceparent".to_owned(),
        serde_json::Value::String(traceparent),
    );
    Some(params.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(json: &str) -> Box<RawValue> {
        serde_json::from_str(json).unwrap()
    }

    const SPAN: &str = "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01";

    #[test]
    fn the_forwarded_span_replaces_the_agent_s_and_keeps_the_rest() {
        let parent = TraceParent::parse(SPAN).unwrap();
        let params = raw(
            r#"{"name":"t","_meta":{"progressToken":7,"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}"#,
        );
        let written: serde_json::Value =
            serde_json::from_str(&with_trace_parent(&params, parent).unwrap()).unwrap();
        assert_eq!(
            written,
            serde_json::json!({"name": "t", "_meta": {"progressToken": 7, "traceparent": SPAN}})
        );
        let bare: serde_json::Value =
            serde_json::from_str(&with_trace_parent(&raw(r#"{"name":"t"}"#), parent).unwrap())
                .unwrap();
        assert_eq!(bare["_meta"], serde_json::json!({"traceparent": SPAN}));
        assert_eq!(with_trace_parent(&raw(r#"{"_meta":1}"#), parent), None);
        assert_eq!(with_trace_parent(&raw("[1]"), parent), None);
    }
}
