//! `POST /v1/turns`: a turn's tool calls in, exactly one outcome per call out, in order.

use std::collections::HashMap;

use axum::Json;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::future::join_all;
use serde::{Deserialize, Serialize};
use serde_json::error::Category;
use serde_json::{Map, Value};
use sluice::{Call, Outcome, Priority};
use sluice_http::trace::{TraceParent, traced};
use sluice_http::{Outbound, Refusal, ToolCall, tool_call};

use super::error::ApiError;
use super::limit::read_body;
use crate::state::{AppState, Inner};

/// Most calls one request may carry: a turn is a model step, not a batch job.
pub(crate) const MAX_CALLS: usize = 1_024;
/// Longest accepted `turn_id`.
const MAX_TURN_ID: usize = 256;
/// The `tool` label of calls naming no configured tool.
const UNKNOWN_TOOL: &str = "unknown";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TurnRequest {
    pub(crate) turn_id: Option<String>,
    pub(crate) calls: Vec<CallRequest>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CallRequest {
    pub(crate) id: String,
    pub(crate) tool: String,
    #[serde(default)]
    pub(crate) args: Value,
    pub(crate) deadline_ms: Option<u64>,
    /// `"high"`, `"normal"` or `"low"`; the tool's `priority` otherwise.
    pub(crate) priority: Option<Priority>,
}

#[derive(Debug, Serialize)]
struct CallResult<'a> {
    id: &'a str,
    #[serde(flatten)]
    outcome: &'a Outcome,
}

#[derive(Debug, Serialize)]
struct TurnResponse<'a> {
    results: Vec<CallResult<'a>>,
}

pub(crate) async fn run_turn(State(state): State<AppState>, request: Request) -> Response {
    // Read only when traces are on: the caller's span parents the calls'.
    let parent = state
        .inner
        .tracer
        .as_ref()
        .and_then(|_| TraceParent::of_headers(request.headers()));
    let max = state.inner.config.server.max_body;
    let within = state.inner.config.gate.defaults.deadline;
    let body = match read_body(request.into_body(), max, within).await {
        Ok(body) => body,
        Err(error) => return error.into_response(),
    };
    let turn = match parse(&body) {
        Ok(turn) => turn,
        Err(error) => return error.into_response(),
    };
    let inner = &state.inner;
    let lease = inner
        .turn_registry
        .lease(turn.turn_id.as_deref(), &inner.gate());
    let outcomes = join_all(turn.calls.iter().map(|call| {
        let engine_turn = &lease.turn;
        async move {
            match prepare(inner, call) {
                Ok(prepared) => {
                    let tracer = inner.tracer.as_ref();
                    let run = engine_turn.call(prepared);
                    traced(tracer, parent, &call.tool, Some(&call.id), run).await
                }
                Err(outcome) => outcome,
            }
        }
    }))
    .await;
    tracing::debug!(
        calls = turn.calls.len(),
        shared_turn = turn.turn_id.is_some(),
        "turn answered"
    );
    let results = turn
        .calls
        .iter()
        .zip(&outcomes)
        .map(|(call, outcome)| CallResult {
            id: &call.id,
            outcome,
        })
        .collect();
    Json(TurnResponse { results }).into_response()
}

/// The request, checked as a whole: malformed JSON, unknown fields, an
/// empty or oversized call list, duplicate ids and bad turn ids are 400s.
pub(crate) fn parse(body: &Bytes) -> Result<TurnRequest, ApiError> {
    // serde would take a struct from an array too; a turn is an object.
    if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(ApiError::bad_request(
            "malformed JSON: the body must be an object such as {\"calls\": [...]}",
        ));
    }
    let mut deserializer = serde_json::Deserializer::from_slice(body);
    let turn: TurnRequest =
        serde_path_to_error::deserialize(&mut deserializer).map_err(|error| {
            let path = error.path().to_string();
            let inner = error.inner();
            if !matches!(inner.classify(), Category::Data) {
                ApiError::bad_request(format!("malformed JSON: {inner}"))
            } else if path == "." {
                ApiError::bad_request(inner.to_string())
            } else {
                ApiError::bad_request(format!("{path}: {inner}"))
            }
        })?;
    deserializer
        .end()
        .map_err(|error| ApiError::bad_request(format!("malformed JSON: {error}")))?;
    if turn.calls.is_empty() {
        return Err(ApiError::bad_request("calls: the list of calls is empty"));
    }
    if turn.calls.len() > MAX_CALLS {
        return Err(ApiError::bad_request(format!(
            "calls: at most {MAX_CALLS} calls per request, got {}",
            turn.calls.len()
        )));
    }
    if let Some(id) = &turn.turn_id
        && (id.is_empty() || id.len() > MAX_TURN_ID)
    {
        return Err(ApiError::bad_request(format!(
            "turn_id: must be 1 to {MAX_TURN_ID} bytes long"
        )));
    }
    let mut seen: HashMap<&str, usize> = HashMap::with_capacity(turn.calls.len());
    for (index, call) in turn.calls.iter().enumerate() {
        if let Some(first) = seen.insert(&call.id, index) {
            return Err(ApiError::bad_request(format!(
                "calls[{index}].id: duplicate call id {:?} (also calls[{first}].id)",
                call.id
            )));
        }
    }
    Ok(turn)
}

/// A call as the engine takes it, or the outcome that answers it without
/// sending anything (unknown tool, bad arguments, bad deadline).
fn prepare(inner: &Inner, call: &CallRequest) -> Result<Call<Outbound>, Outcome> {
    // An absent `args` is no arguments.
    let empty = Map::new();
    let args = match &call.args {
        Value::Null => Some(&empty),
        Value::Object(args) => Some(args),
        _ => None,
    };
    let config = &inner.config;
    let prepared = tool_call(
        &config.tools,
        &config.credentials,
        &call.tool,
        args,
        call.deadline_ms,
        inner.deadline_cap,
    );
    let ToolCall { outbound, deadline } = match prepared {
        Ok(prepared) => prepared,
        Err(Refusal {
            outcome,
            credential,
        }) => {
            let (credential, tool) = match credential {
                Some(credential) => (credential, call.tool.as_str()),
                None => ("", UNKNOWN_TOOL),
            };
            inner.metrics.record_outcome(credential, tool, &outcome);
            return Err(outcome);
        }
    };
    let mut prepared = Call::with_payload(&call.tool, outbound);
    if let Some(deadline) = deadline {
        prepared = prepared.deadline(deadline);
    }
    if let Some(priority) = call.priority {
        prepared = prepared.priority(priority);
    }
    Ok(prepared)
}
