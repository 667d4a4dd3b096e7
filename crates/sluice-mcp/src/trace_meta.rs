//! `params._meta.traceparent` of a `tools/call`: the agent's span, which
//! the call's span joins (read only when traces are on).

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
