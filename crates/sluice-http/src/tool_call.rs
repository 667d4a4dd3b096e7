//! A configured tool's call made into the request it sends: the sidecar's
//! `/v1/turns` and the Python package prepare tool calls with the one
//! function here, so a tool renders, and is refused, the same everywhere.

use std::collections::BTreeMap;
use std::time::Duration;

use http::HeaderValue;
use http::header::{ACCEPT, CONTENT_TYPE, HeaderMap};
use serde_json::{Map, Value};
use sluice::Outcome;
use sluice_config::{ToolSpec, Upstream};

use crate::deadline::call_deadline;
use crate::forward;
use crate::payload::{HttpRequest, Outbound};

/// A configured tool's call, ready for the engine.
#[derive(Debug, Clone)]
pub struct ToolCall {
    /// The call's arguments and the request they rendered to.
    pub outbound: Outbound,
    /// The deadline its caller gave it, bounded and capped.
    pub deadline: Option<Duration>,
}

/// Why a tool call is answered without sending anything.
#[derive(Debug, Clone)]
pub struct Refusal<'c> {
    /// The error outcome; its message names the tool.
    pub outcome: Outcome,
    /// The tool's credential, when the tool is configured.
    pub credential: Option<&'c str>,
}

/// `tool`'s call with `args` (`None` when the caller's arguments were not
/// a JSON object) and the caller's `deadline_ms` (capped at
/// `deadline_cap`): its request rendered from the tool's template and
/// joined below its credential's base URL, or the refusal that answers it
/// (unknown tool, arguments not an object, bad deadline, a missing
/// argument, a path that would leave the base URL).
pub fn tool_call<'c>(
    tools: &'c BTreeMap<String, ToolSpec>,
    credentials: &BTreeMap<String, Upstream>,
    tool: &str,
    args: Option<&Map<String, Value>>,
    deadline_ms: Option<u64>,
    deadline_cap: Duration,
) -> Result<ToolCall, Refusal<'c>> {
    let Some(spec) = tools.get(tool) else {
        return Err(Refusal {
            outcome: Outcome::error(None, format!("unknown tool {tool:?}")),
            credential: None,
        });
    };
    let refuse = |message: String| Refusal {
        outcome: Outcome::error(None, format!("{tool}: {message}")),
        credential: Some(spec.credential.as_str()),
    };
    let Some(args) = args else {
        return Err(refuse("args must be a JSON object".to_owned()));
    };
    let deadline = call_deadline(deadline_ms, deadline_cap).map_err(refuse)?;
    let rendered = spec
        .render(args)
        .map_err(|error| refuse(error.to_string()))?;
    let Some(upstream) = credentials.get(&spec.credential) else {
        return Err(refuse(format!("unknown credential {:?}", spec.credential)));
    };
    let target = forward::join(
        &upstream.base_url,
        &rendered.path,
        rendered.query.as_deref(),
    )
    .map_err(|error| refuse(error.to_string()))?;
    let mut headers = HeaderMap::new();
    headers.insert(ACCEPT, HeaderValue::from_static("application/json"));
    if rendered.body.is_some() {
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    }
    let request = HttpRequest {
        method: rendered.method,
        target,
        headers,
        body: rendered.body.unwrap_or_default(),
    };
    Ok(ToolCall {
        outbound: Outbound::Tool {
            args: Value::Object(args.clone()),
            request,
        },
        deadline,
    })
}
