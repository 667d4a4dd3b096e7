//! `TurnCore`: one engine turn, and the calls Python prepares for it: a
//! configured tool (rendered as the sidecar renders it), a function tool,
//! or a request through the httpx transport.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::join_all;
use http::header::{ACCEPT, HeaderMap, RANGE};
use http::uri::PathAndQuery;
use http::{HeaderValue, Method};
use parking_lot::Mutex;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyList, PyTuple};
use serde_json::{Map, Value};
use sluice::{Call, Completion, Outcome, Payload as _, Route, Turn};
use sluice_config::MAX_DURATION;
use sluice_http::trace::traced;
use sluice_http::{HttpRequest, Outbound, ToolCall, Url, call_deadline, tool_call};

use crate::bridge::{Answer, BoxFuture, Pending, block_on};
use crate::convert::to_json;
use crate::errors::guard;
use crate::executor::{Payload, PyExecutor, PyWork, outcome_of};
use crate::outcome::PyOutcome;
use crate::state::GateState;
use crate::telemetry;

/// A call ready to run, or the outcome that answers it without sending.
type Ready = Result<Call<Payload>, Outcome>;

/// One call, prepared: run it once.
#[pyclass(module = "sluice._sluice", frozen)]
pub(crate) struct Prepared {
    /// What its span is named after (`execute_tool {tool}`).
    tool: String,
    call: Mutex<Option<Ready>>,
}

impl Prepared {
    fn new(tool: &str, ready: Ready) -> Self {
        Prepared {
            tool: tool.to_owned(),
            call: Mutex::new(Some(ready)),
        }
    }

    fn take(&self) -> PyResult<Ready> {
        self.call
            .lock()
            .take()
            .ok_or_else(|| PyRuntimeError::new_err("this call has already been run"))
    }
}

/// One model step's turn; `sluice.Turn` wraps it.
#[pyclass(module = "sluice._sluice", frozen)]
pub(crate) struct TurnCore {
    state: Arc<GateState>,
    turn: Turn<PyExecutor>,
}

impl TurnCore {
    pub(crate) fn new(state: Arc<GateState>) -> Self {
        let turn = state.gate.turn();
        TurnCore { state, turn }
    }

    /// Runs `prepared` inside its span when the gate traces calls: a
    /// child of the caller's current OpenTelemetry span, read now, on the
    /// caller's thread and in its context (as the sidecar parents a call
    /// by its request's `traceparent`).
    fn complete(
        &self,
        py: Python<'_>,
        prepared: &Prepared,
    ) -> PyResult<impl Future<Output = Completion> + Send + 'static> {
        let ready = prepared.take()?;
        let tool = prepared.tool.clone();
        let tracer = self.state.tracer.clone();
        let parent = match tracer {
            Some(_) => telemetry::caller_span(py)?,
            None => None,
        };
        let turn = self.turn.clone();
        Ok(async move {
            let call = async move {
                match ready {
                    Ok(call) => turn.complete(call).await,
                    Err(outcome) => Completion::from(outcome),
                }
            };
            traced(tracer.as_ref(), parent, &tool, None, call).await
        })
    }
}

/// `args` as a JSON object: `None` is `{}`; anything but a `dict` is `Err(None)`.
fn object_args(args: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Map<String, Value>>> {
    match args {
        None => Ok(Some(Map::new())),
        Some(args) if args.is_none() => Ok(Some(Map::new())),
        Some(args) if args.is_instance_of::<PyDict>() => match to_json(args, "args")? {
            Value::Object(map) => Ok(Some(map)),
            _ => Ok(None),
        },
        Some(_) => Ok(None),
    }
}

/// A call-given deadline, checked as the sidecar checks a call's
/// `deadline_ms` (1 ms to a week); no shutdown grace period caps it here.
fn deadline(label: &str, deadline_ms: Option<u64>) -> Result<Option<Duration>, Outcome> {
    call_deadline(deadline_ms, MAX_DURATION)
        .map_err(|message| Outcome::error(None, format!("{label}: {message}")))
}

fn with_deadline(call: Call<Payload>, deadline: Option<Duration>) -> Call<Payload> {
    match deadline {
        Some(deadline) => call.deadline(deadline),
        None => call,
    }
}

fn outcome(py: Python<'_>, completion: &Completion) -> PyResult<Py<PyAny>> {
    Ok(Py::new(py, PyOutcome::new(outcome_of(completion)))?.into_any())
}

/// `(status, [(name, value)], body)` of the response a completion kept.
fn response(py: Python<'_>, completion: &Completion) -> PyResult<Py<PyAny>> {
    let Some(response) = &completion.response else {
        return Ok(py.None());
    };
    let headers = PyList::empty(py);
    for (name, value) in response.headers() {
        headers.append((
            PyBytes::new(py, name.as_str().as_bytes()),
            PyBytes::new(py, value.as_bytes()),
        ))?;
    }
    let body = PyBytes::new(py, response.body());
    Ok(PyTuple::new(
        py,
        [
            response.status().as_u16().into_pyobject(py)?.into_any(),
            headers.into_any(),
            body.into_any(),
        ],
    )?
    .into_any()
    .unbind())
}

fn pending(future: impl Future<Output = Answer> + Send + 'static) -> Pending {
    let boxed: BoxFuture = Box::pin(future);
    Pending::new(boxed)
}

#[pymethods]
impl TurnCore {
    /// A configured tool's call, rendered as the sidecar renders it.
    #[pyo3(signature = (tool, args=None, deadline_ms=None))]
    fn tool(
        &self,
        tool: &str,
        args: Option<&Bound<'_, PyAny>>,
        deadline_ms: Option<u64>,
    ) -> PyResult<Prepared> {
        guard(|| {
            let args = object_args(args)?;
            let prepared = tool_call(
                &self.state.tools,
                &self.state.upstreams,
                tool,
                args.as_ref(),
                deadline_ms,
                MAX_DURATION,
            );
            let ready = match prepared {
                Ok(ToolCall { outbound, deadline }) => {
                    let call = Call::with_payload(tool, Payload::Http(Arc::new(outbound)));
                    Ok(with_deadline(call, deadline))
                }
                Err(refusal) => Err(refusal.outcome),
            };
            Ok(Prepared::new(tool, ready))
        })
    }

    /// A function tool's call: `start()` begins one attempt as an asyncio task.
    #[pyo3(signature = (label, credential, read, idempotent, tool_deadline_ms, args, deadline_ms, start))]
    #[allow(clippy::too_many_arguments)]
    fn function(
        &self,
        label: &str,
        credential: &str,
        read: bool,
        idempotent: bool,
        tool_deadline_ms: Option<u64>,
        args: Option<&Bound<'_, PyAny>>,
        deadline_ms: Option<u64>,
        start: Py<PyAny>,
    ) -> PyResult<Prepared> {
        guard(|| {
            let deadline = match deadline(label, deadline_ms) {
                Ok(deadline) => deadline,
                Err(outcome) => return Ok(Prepared::new(label, Err(outcome))),
            };
            // Only a read is coalesced: only its arguments' identity matters.
            let key = if read {
                match object_args(args)? {
                    Some(args) => Value::Object(args).coalesce_key(),
                    None => None,
                }
            } else {
                None
            };
            let route = Route {
                credential: credential.to_owned(),
                read,
                idempotent: read || idempotent,
                deadline: tool_deadline_ms.map(Duration::from_millis),
            };
            let work = PyWork {
                key,
                start,
                blocking: false,
            };
            let call = Call::routed(label, route, Payload::Python(work));
            Ok(Prepared::new(label, Ok(with_deadline(call, deadline))))
        })
    }

    /// A request through the httpx transport: `start()` sends one attempt
    /// (as an asyncio task, or at once when `blocking`).
    #[pyo3(signature = (label, credential, method, url, accept, range, deadline_ms, start, blocking))]
    #[allow(clippy::too_many_arguments)]
    fn request(
        &self,
        label: &str,
        credential: &str,
        method: &str,
        url: &str,
        accept: Option<&[u8]>,
        range: Option<&[u8]>,
        deadline_ms: Option<u64>,
        start: Py<PyAny>,
        blocking: bool,
    ) -> PyResult<Prepared> {
        guard(|| {
            let deadline = match deadline(label, deadline_ms) {
                Ok(deadline) => deadline,
                Err(outcome) => return Ok(Prepared::new(label, Err(outcome))),
            };
            let method = Method::from_bytes(method.as_bytes())
                .map_err(|_| PyValueError::new_err(format!("invalid HTTP method {method:?}")))?;
            let read = matches!(method, Method::GET | Method::HEAD);
            // RFC 9110 §9.2.2: these methods are idempotent.
            let idempotent =
                read || matches!(method, Method::PUT | Method::DELETE | Method::OPTIONS);
            // A read is identified as the sidecar's proxy identifies it.
            let key = if read {
                Url::parse(url).ok().and_then(|url| {
                    let target = match url.query() {
                        Some(query) => format!("{}?{query}", url.path()),
                        None => url.path().to_owned(),
                    };
                    let target = PathAndQuery::try_from(target).ok()?;
                    let mut headers = HeaderMap::new();
                    for (name, value) in [(ACCEPT, accept), (RANGE, range)] {
                        if let Some(value) = value.and_then(|v| HeaderValue::from_bytes(v).ok()) {
                            headers.insert(name, value);
                        }
                    }
                    Outbound::Proxy(HttpRequest {
                        method: method.clone(),
                        target,
                        headers,
                        body: Bytes::new(),
                    })
                    .coalesce_key()
                })
            } else {
                None
            };
            let route = Route {
                credential: credential.to_owned(),
                read,
                idempotent,
                deadline: None,
            };
            let work = PyWork {
                key,
                start,
                blocking,
            };
            let call = Call::routed(label, route, Payload::Python(work));
            Ok(Prepared::new(label, Ok(with_deadline(call, deadline))))
        })
    }

    /// Runs one call: awaits to its `Outcome`.
    fn run(&self, py: Python<'_>, prepared: &Prepared) -> PyResult<Pending> {
        guard(|| {
            let completion = self.complete(py, prepared)?;
            Ok(pending(async move {
                let completion = completion.await;
                Box::new(move |py: Python<'_>| outcome(py, &completion)) as Answer
            }))
        })
    }

    /// Runs calls concurrently: awaits to one `Outcome` per call, in order.
    fn run_all(&self, py: Python<'_>, prepared: Vec<PyRef<'_, Prepared>>) -> PyResult<Pending> {
        guard(|| {
            let mut calls = Vec::with_capacity(prepared.len());
            for one in &prepared {
                calls.push(self.complete(py, one)?);
            }
            Ok(pending(async move {
                let completions = join_all(calls).await;
                Box::new(move |py: Python<'_>| {
                    let list = PyList::empty(py);
                    for completion in &completions {
                        list.append(outcome(py, completion)?)?;
                    }
                    Ok(list.into_any().unbind())
                }) as Answer
            }))
        })
    }

    /// Runs a transport request: awaits to `(Outcome, response)` (see `request_answer`).
    fn run_request(&self, py: Python<'_>, prepared: &Prepared) -> PyResult<Pending> {
        guard(|| {
            let completion = self.complete(py, prepared)?;
            Ok(pending(async move {
                let completion = completion.await;
                Box::new(move |py: Python<'_>| request_answer(py, &completion)) as Answer
            }))
        })
    }

    /// [`TurnCore::run_request`] from synchronous code, blocking this thread.
    fn run_request_blocking(&self, py: Python<'_>, prepared: &Prepared) -> PyResult<Py<PyAny>> {
        guard(|| {
            let completion = self.complete(py, prepared)?;
            let future: BoxFuture = Box::pin(async move {
                let completion = completion.await;
                Box::new(move |py: Python<'_>| request_answer(py, &completion)) as Answer
            });
            block_on(py, future)
        })
    }

    /// Upstream requests (attempts) this turn has caused so far.
    fn upstream_requests(&self) -> u32 {
        self.turn.upstream_requests()
    }
}

/// `(Outcome, response)`: `None` when there was no response, `True` when it
/// is this request's own last attempt (the caller still has it, so nothing
/// is copied back), else `(status, headers, body)` from the call it joined.
fn request_answer(py: Python<'_>, completion: &Completion) -> PyResult<Py<PyAny>> {
    let outcome = outcome(py, completion)?;
    let response = match (&completion.response, completion.coalesced) {
        (None, _) => py.None(),
        (Some(_), false) => PyBool::new(py, true).to_owned().into_any().unbind(),
        (Some(_), true) => response(py, completion)?,
    };
    Ok(PyTuple::new(py, [outcome, response])?.into_any().unbind())
}
