//! `TurnCore`: one engine turn, and the calls JavaScript prepares for it: a
//! configured tool (rendered as the sidecar renders it), a function tool,
//! or a request through `gate.fetch`.

use std::sync::Arc;
use std::time::Duration;

use crate::{ToolCall, tool_call};
use futures_util::future::join_all;
use napi::bindgen_prelude::{ClassInstance, PromiseRaw};
use napi::{Env, Error, Status};
use napi_derive::napi;
use parking_lot::Mutex;
use serde_json::{Map, Value};
use sluice::{Call, Completion, Outcome, Payload as _, Route, Turn};
use sluice_config::MAX_DURATION;

use crate::cancel::{Canceller, aborted_of, cancellable};
use crate::executor::{JsExecutor, JsWork, Payload, Start, outcome_of};
use crate::order::Ordered;
use crate::state::GateState;

/// A call ready to run, or the outcome that answers it without sending.
type Ready = Result<Call<Payload>, Outcome>;

/// The engine refuses deadlines past a week (`sluice_config::MAX_DURATION`).
const MAX_DEADLINE_MS: f64 = 7.0 * 24.0 * 3600.0 * 1000.0;

/// One call, prepared: run it once.
#[napi]
pub struct Prepared {
    call: Mutex<Option<Ready>>,
}

impl Prepared {
    fn new(ready: Ready) -> Self {
        Prepared {
            call: Mutex::new(Some(ready)),
        }
    }

    fn take(&self) -> napi::Result<Ready> {
        self.call
            .lock()
            .take()
            .ok_or_else(|| Error::new(Status::InvalidArg, "this call has already been run"))
    }
}

/// One model step's turn; `Turn` in `js/lib/gate.js` wraps it.
#[napi]
pub struct TurnCore {
    state: Arc<GateState>,
    turn: Turn<JsExecutor>,
    /// Its single calls, polled in the order they were made.
    ordered: Ordered,
}

impl TurnCore {
    pub(crate) fn new(state: Arc<GateState>) -> Self {
        let turn = state.gate.turn();
        TurnCore {
            state,
            turn,
            ordered: Ordered::default(),
        }
    }

    fn complete(&self, ready: Ready) -> impl Future<Output = Completion> + Send + 'static {
        let turn = self.turn.clone();
        async move {
            match ready {
                Ok(call) => turn.complete(call).await,
                Err(outcome) => Completion::from(outcome),
            }
        }
    }
}

/// `args` (JSON text) as a JSON object; anything else is `None`.
fn object_args(args: &str) -> Option<Map<String, Value>> {
    match serde_json::from_str(args) {
        Ok(Value::Object(map)) => Some(map),
        Ok(Value::Null) => Some(Map::new()),
        _ => None,
    }
}

/// A call-given deadline: at least 1 ms, at most the engine's week.
pub(crate) fn deadline(label: &str, deadline_ms: Option<f64>) -> Result<Option<Duration>, Outcome> {
    match deadline_ms {
        None => Ok(None),
        Some(ms) if ms >= 1.0 => Ok(Some(Duration::from_millis(
            ms.min(MAX_DEADLINE_MS).ceil() as u64
        ))),
        Some(_) => Err(Outcome::error(
            None,
            format!("{label}: deadlineMs must be at least 1"),
        )),
    }
}

pub(crate) fn with_deadline(call: Call<Payload>, deadline: Option<Duration>) -> Call<Payload> {
    match deadline {
        Some(deadline) => call.deadline(deadline),
        None => call,
    }
}

/// The outcome as the sidecar returns it.
pub(crate) fn outcome_json(completion: &Completion) -> napi::Result<String> {
    serde_json::to_string(&outcome_of(completion)).map_err(|error| {
        Error::new(
            Status::GenericFailure,
            format!("cannot serialize an outcome: {error}"),
        )
    })
}

#[napi]
impl TurnCore {
    /// A configured tool's call, rendered as the sidecar renders it; `args`
    /// is JSON text.
    #[napi(catch_unwind)]
    pub fn tool(&self, tool: String, args: String, deadline_ms: Option<f64>) -> Prepared {
        Prepared::new(self.configured(&tool, &args, deadline_ms))
    }

    /// A function tool's call: `start()` begins one attempt in JavaScript.
    #[napi(catch_unwind)]
    #[allow(clippy::too_many_arguments)]
    pub fn function(
        &self,
        label: String,
        credential: String,
        read: bool,
        idempotent: bool,
        tool_deadline_ms: Option<f64>,
        args: String,
        deadline_ms: Option<f64>,
        start: Start,
    ) -> Prepared {
        let deadline = match deadline(&label, deadline_ms) {
            Ok(deadline) => deadline,
            Err(outcome) => return Prepared::new(Err(outcome)),
        };
        let tool_deadline = match self::deadline(&label, tool_deadline_ms) {
            Ok(deadline) => deadline,
            Err(outcome) => return Prepared::new(Err(outcome)),
        };
        // Only a read is coalesced: only its arguments' identity matters.
        let key = if read {
            object_args(&args).and_then(|args| Value::Object(args).coalesce_key())
        } else {
            None
        };
        let route = Route {
            credential,
            read,
            idempotent: read || idempotent,
            deadline: tool_deadline,
        };
        let work = JsWork {
            key,
            start: Arc::new(start),
        };
        let call = Call::routed(&label, route, Payload::Js(work));
        Prepared::new(Ok(with_deadline(call, deadline)))
    }

    /// Runs one call: a promise of its outcome as JSON text.
    #[napi(catch_unwind, ts_return_type = "Promise<string>")]
    pub fn run<'env>(
        &self,
        env: &'env Env,
        prepared: &Prepared,
        canceller: Option<&Canceller>,
    ) -> napi::Result<PromiseRaw<'env, String>> {
        let completion = self.complete(prepared.take()?);
        let aborted = aborted_of(canceller);
        env.spawn_future(self.ordered.run(async move {
            let completion = cancellable(completion, aborted).await?;
            outcome_json(&completion)
        }))
    }

    /// Runs calls concurrently: a promise of one outcome (JSON text) per
    /// call, in order.
    #[napi(catch_unwind, ts_return_type = "Promise<string[]>")]
    pub fn run_all<'env>(
        &self,
        env: &'env Env,
        prepared: Vec<ClassInstance<'env, Prepared>>,
        canceller: Option<&Canceller>,
    ) -> napi::Result<PromiseRaw<'env, Vec<String>>> {
        let mut calls = Vec::with_capacity(prepared.len());
        for one in &prepared {
            calls.push(self.complete(one.take()?));
        }
        let aborted = aborted_of(canceller);
        env.spawn_future(async move {
            let completions = cancellable(join_all(calls), aborted).await?;
            completions.iter().map(outcome_json).collect()
        })
    }

    /// Upstream requests (attempts) this turn has caused so far.
    #[napi]
    pub fn upstream_requests(&self) -> u32 {
        self.turn.upstream_requests()
    }
}

impl TurnCore {
    /// A configured tool's call, prepared by the one function the sidecar
    /// and the Python package use too ([`sluice_http::tool_call`]).
    fn configured(&self, tool: &str, args: &str, deadline_ms: Option<f64>) -> Ready {
        let deadline_ms = deadline(tool, deadline_ms)?.map(|deadline| deadline.as_millis() as u64);
        let args = object_args(args);
        match tool_call(
            &self.state.tools,
            &self.state.upstreams,
            tool,
            args.as_ref(),
            deadline_ms,
            MAX_DURATION,
        ) {
            Ok(ToolCall { outbound, deadline }) => {
                let call = Call::with_payload(tool, Payload::Http(Arc::new(outbound)));
                Ok(with_deadline(call, deadline))
            }
            Err(refusal) => Err(refusal.outcome),
        }
    }
}
