//! A call's span (`execute_tool {tool}`, INTERNAL) and its upstream
//! requests' CLIENT spans: what every front end wraps a call in.
//!
//! [`traced`] holds the call's record in a task-local while the call's
//! future runs; the engine's events ([`TraceObserver`]), reported inline
//! from that future, fill it (why it waited, how many requests, its
//! outcome), and the executors (HTTP, and `sluice mcp`'s) open each
//! request's CLIENT span under it ([`ClientSpan`]). Without a tracer
//! nothing is held or read.

use std::cell::RefCell;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::future::Either;
use http::Method;
use sluice::{Event, Observer, Outcome, WaitKind};

use super::context::{SpanId, TraceId, TraceParent};
use super::export::Tracer;
use super::otlp::{self, KeyValue, Value};

tokio::task_local! {
    static CALL: RefCell<Option<Box<Record>>>;
}

/// What a call's span will say, filled in while it runs.
struct Record {
    tracer: Arc<Tracer>,
    trace_id: TraceId,
    span_id: SpanId,
    credential: String,
    outcome: Option<Summary>,
    /// Waited for admission and start slots.
    waited: Duration,
    attempts: u32,
}

/// The parts of an outcome a span names.
struct Summary {
    status: &'static str,
    reason: Option<&'static str>,
    retry_after_ms: Option<u64>,
    coalesced: bool,
    /// `error.type` and the status message, for `error` and `timed_out`.
    error: Option<(String, String)>,
}

/// When a span began: the wall clock for the collector (OTLP times are
/// Unix nanoseconds), and a monotonic reading for its length.
#[derive(Clone, Copy)]
struct Started {
    unix_nanos: u64,
    at: std::time::Instant,
}

impl Started {
    fn now() -> Started {
        let since_epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        Started {
            unix_nanos: u64::try_from(since_epoch.as_nanos()).unwrap_or(u64::MAX),
            at: std::time::Instant::now(),
        }
    }

    fn end(&self) -> u64 {
        let elapsed = u64::try_from(self.at.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.unix_nanos.saturating_add(elapsed)
    }
}

fn random_id<const N: usize>() -> [u8; N] {
    loop {
        let id: [u8; N] = rand::random();
        // All zeros is the invalid id.
        if id != [0; N] {
            return id;
        }
    }
}

/// Runs `call` (one engine call of `tool`) inside its span, when `tracer`
/// is given and samples it: a child of `parent` (the caller's
/// `traceparent`), or the root of a new trace. `call_id` is the caller's
/// id for the call (`gen_ai.tool.call.id`).
///
/// Not an `async fn`: without a span the call's own future is returned
/// as it is (no allocation, no bytes added to the caller's future, which
/// the sidecar's proxy keeps small); a traced call runs in a box.
pub fn traced<'a, F: Future + 'a>(
    tracer: Option<&Arc<Tracer>>,
    parent: Option<TraceParent>,
    tool: &'a str,
    call_id: Option<&'a str>,
    call: F,
) -> impl Future<Output = F::Output> + use<'a, F> {
    let Some(tracer) = tracer else {
        return Either::Left(call);
    };
    let trace_id = parent.map_or_else(random_id, |parent| parent.trace_id);
    if !tracer.sampled(parent.as_ref(), &trace_id) {
        return Either::Left(call);
    }
    let record = Box::new(Record {
        tracer: tracer.clone(),
        trace_id,
        span_id: random_id(),
        credential: String::new(),
        outcome: None,
        waited: Duration::ZERO,
        attempts: 0,
    });
    let span = Spanned {
        parent,
        tool,
        call_id,
        started: Started::now(),
    };
    Either::Right(Box::pin(spanned(record, span, call)))
}

/// What a call's span is named and parented by.
struct Spanned<'a> {
    parent: Option<TraceParent>,
    tool: &'a str,
    call_id: Option<&'a str>,
    started: Started,
}

async fn spanned<F: Future>(record: Box<Record>, span: Spanned<'_>, call: F) -> F::Output {
    let (output, record) = CALL
        .scope(RefCell::new(Some(record)), async {
            let output = call.await;
            (output, CALL.with(RefCell::take))
        })
        .await;
    if let Some(record) = record {
        let done = call_span(&record, span.parent, span.tool, span.call_id, span.started);
        record.tracer.send(done);
    }
    output
}

fn call_span(
    record: &Record,
    parent: Option<TraceParent>,
    tool: &str,
    call_id: Option<&str>,
    started: Started,
) -> otlp::Span {
    let mut attributes = vec![
        KeyValue::new("gen_ai.operation.name", text("execute_tool")),
        KeyValue::new("gen_ai.tool.name", text(tool)),
    ];
    if let Some(id) = call_id {
        attributes.push(KeyValue::new("gen_ai.tool.call.id", text(id)));
    }
    if !record.credential.is_empty() {
        attributes.push(KeyValue::new("sluice.credential", text(&record.credential)));
    }
    let waited = u64::try_from(record.waited.as_millis()).unwrap_or(u64::MAX);
    attributes.push(KeyValue::new("sluice.wait_ms", int(waited)));
    attributes.push(KeyValue::new(
        "sluice.attempts",
        Value::Int(i64::from(record.attempts)),
    ));
    let mut status = None;
    if let Some(outcome) = &record.outcome {
        attributes.push(KeyValue::new("sluice.outcome", text(outcome.status)));
        if let Some(reason) = outcome.reason {
            attributes.push(KeyValue::new("sluice.reason", text(reason)));
        }
        if let Some(ms) = outcome.retry_after_ms {
            attributes.push(KeyValue::new("sluice.retry_after_ms", int(ms)));
        }
        attributes.push(KeyValue::new(
            "sluice.coalesced",
            Value::Bool(outcome.coalesced),
        ));
        if let Some((kind, message)) = &outcome.error {
            attributes.push(KeyValue::new("error.type", text(kind)));
            status = Some(otlp::Status {
                message: message.clone(),
                code: otlp::STATUS_ERROR,
            });
        }
    }
    otlp::Span {
        trace_id: record.trace_id.to_vec(),
        span_id: record.span_id.to_vec(),
        parent_span_id: parent.map_or_else(Vec::new, |parent| parent.span_id.to_vec()),
        name: format!("execute_tool {tool}"),
        kind: otlp::KIND_INTERNAL,
        start_time_unix_nano: started.unix_nanos,
        end_time_unix_nano: started.end(),
        attributes,
        status,
        flags: 1,
    }
}

fn int(value: u64) -> Value {
    Value::Int(i64::try_from(value).unwrap_or(i64::MAX))
}

impl Summary {
    fn of(outcome: &Outcome, coalesced: bool) -> Summary {
        let (reason, error) = match outcome {
            Outcome::RateLimited { reason, .. } => (Some(reason.as_str()), None),
            Outcome::TimedOut { after_ms, .. } => (
                None,
                Some((
                    "timed_out".to_owned(),
                    format!("the call's {after_ms} ms deadline ran out"),
                )),
            ),
            // The upstream's status when it answered (the HTTP
            // conventions' `error.type`), else what sluice calls it.
            Outcome::Error {
                http_status,
                message,
            } => (
                None,
                Some((
                    http_status.map_or_else(|| "error".to_owned(), |status| status.to_string()),
                    message.clone(),
                )),
            ),
            _ => (None, None),
        };
        Summary {
            status: outcome.status(),
            reason,
            retry_after_ms: outcome
                .retry_after()
                .map(|wait| u64::try_from(wait.as_millis()).unwrap_or(u64::MAX)),
            coalesced,
            error,
        }
    }
}

/// The engine's events, noted on the span of the call that reported them
/// (events come from the call's own future), then handed on to `inner`
/// (the metrics).
pub struct TraceObserver {
    inner: Option<Arc<dyn Observer>>,
}

impl TraceObserver {
    /// The observer a gate is built with: `inner` alone without a tracer.
    pub fn wrap(
        tracer: Option<&Arc<Tracer>>,
        inner: Option<Arc<dyn Observer>>,
    ) -> Option<Arc<dyn Observer>> {
        match tracer {
            None => inner,
            Some(_) => Some(Arc::new(TraceObserver { inner })),
        }
    }
}

impl Observer for TraceObserver {
    fn observe(&self, event: &Event<'_>) {
        // Outside a traced call (or a call not sampled) there is no record.
        let _ = CALL.try_with(|cell| {
            if let Some(record) = cell.borrow_mut().as_mut() {
                note(record, event);
            }
        });
        if let Some(inner) = &self.inner {
            inner.observe(event);
        }
    }
}

fn note(record: &mut Record, event: &Event<'_>) {
    match event {
        Event::Outcome {
            credential,
            outcome,
            coalesced,
            ..
        } => {
            (*credential).clone_into(&mut record.credential);
            record.outcome = Some(Summary::of(outcome, *coalesced));
        }
        Event::Request { .. } => record.attempts += 1,
        Event::Wait {
            wait,
            kind: WaitKind::Rate | WaitKind::Admission,
            ..
        } => record.waited += *wait,
        _ => {}
    }
}

/// One upstream request's CLIENT span, a child of its call's: an HTTP
/// request (the HTTP executor's) or a JSON-RPC request to an MCP server
/// ([`ClientSpan::json_rpc`]); ended with its answer, or as cancelled
/// when the request is dropped.
pub struct ClientSpan {
    tracer: Arc<Tracer>,
    trace_id: TraceId,
    span_id: SpanId,
    parent: SpanId,
    started: Started,
    name: String,
    attributes: Vec<KeyValue>,
    ended: bool,
}

impl ClientSpan {
    /// A span named by `describe` (its name and first attributes), when
    /// the running call is traced; `describe` is not run otherwise.
    fn open(describe: impl FnOnce() -> (String, Vec<KeyValue>)) -> Option<ClientSpan> {
        let (tracer, trace_id, parent) = CALL
            .try_with(|cell| {
                cell.borrow()
                    .as_ref()
                    .map(|record| (record.tracer.clone(), record.trace_id, record.span_id))
            })
            .ok()
            .flatten()?;
        let (name, attributes) = describe();
        Some(ClientSpan {
            tracer,
            trace_id,
            span_id: random_id(),
            parent,
            started: Started::now(),
            name,
            attributes,
            ended: false,
        })
    }

    /// A span for an HTTP request to `origin`, when the running call is traced.
    pub(crate) fn http(method: &Method, origin: &http::Uri) -> Option<ClientSpan> {
        ClientSpan::open(|| {
            let mut attributes = vec![
                KeyValue::new("http.request.method", text(method.as_str())),
                KeyValue::new("server.address", text(origin.host().unwrap_or_default())),
            ];
            if let Some(port) = origin.port_u16() {
                attributes.push(KeyValue::new("server.port", Value::Int(i64::from(port))));
            }
            (method.as_str().to_owned(), attributes)
        })
    }

    /// A span for the JSON-RPC request `method` (of `tool`, for a
    /// `tools/call`) sent to an MCP server under `request_id`, when the
    /// running call is traced: named `{method} {tool}`, as the MCP
    /// semantic conventions name a client's request.
    pub fn json_rpc(method: &str, tool: Option<&str>, request_id: &str) -> Option<ClientSpan> {
        ClientSpan::open(|| {
            let mut attributes = vec![KeyValue::new("mcp.method.name", text(method))];
            let name = match tool {
                Some(tool) => {
                    attributes.push(KeyValue::new("gen_ai.tool.name", text(tool)));
                    format!("{method} {tool}")
                }
                None => method.to_owned(),
            };
            attributes.push(KeyValue::new("rpc.jsonrpc.request_id", text(request_id)));
            (name, attributes)
        })
    }

    /// The context the request carries as its `traceparent`: this span is
    /// the upstream's parent.
    pub fn traceparent(&self) -> TraceParent {
        TraceParent {
            trace_id: self.trace_id,
            span_id: self.span_id,
            sampled: true,
        }
    }

    /// The HTTP request was answered with `status`, or failed (`None`).
    pub(crate) fn end_http(mut self, status: Option<u16>) {
        let error = match status {
            Some(status) => {
                self.attributes.push(KeyValue::new(
                    "http.response.status_code",
                    Value::Int(i64::from(status)),
                ));
                (status >= 400).then(|| status.to_string())
            }
            None => Some("transport".to_owned()),
        };
        self.finish(error);
    }

    /// The server answered; `error` (its `error.type`) when the answer is
    /// an error or none came.
    pub fn end(mut self, error: Option<&str>) {
        self.finish(error.map(str::to_owned));
    }

    fn finish(&mut self, error: Option<String>) {
        self.ended = true;
        let status = error.map(|kind| {
            self.attributes
                .push(KeyValue::new("error.type", text(&kind)));
            otlp::Status {
                message: String::new(),
                code: otlp::STATUS_ERROR,
            }
        });
        self.tracer.send(otlp::Span {
            trace_id: self.trace_id.to_vec(),
            span_id: self.span_id.to_vec(),
            parent_span_id: self.parent.to_vec(),
            name: std::mem::take(&mut self.name),
            kind: otlp::KIND_CLIENT,
            start_time_unix_nano: self.started.unix_nanos,
            end_time_unix_nano: self.started.end(),
            attributes: std::mem::take(&mut self.attributes),
            status,
            flags: 1,
        });
    }
}

fn text(value: &str) -> Value {
    Value::String(value.to_owned())
}

impl Drop for ClientSpan {
    fn drop(&mut self) {
        // The call's deadline dropped the request before an answer.
        if !self.ended {
            self.finish(Some("cancelled".to_owned()));
        }
    }
}
