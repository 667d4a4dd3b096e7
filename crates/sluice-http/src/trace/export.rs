//! [`Tracer`]: the sampler, and the batch exporter that posts finished
//! spans to the OTLP/HTTP endpoint from a thread of its own.
//!
//! A span is queued without waiting (dropped, and counted, when the queue
//! is full: tracing never slows a call); the thread sends what it holds
//! every [`TelemetrySettings::export_interval`], when a batch is full, and
//! on [`Tracer::flush`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{HeaderValue, Method, Request};
use http_body_util::Full;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use prost::Message as _;
use sluice_config::{RootSampler, TelemetrySettings};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::context::{TraceId, TraceParent};
use super::otlp;
use crate::executor::https_connector;

/// Spans waiting to leave; past this many, new ones are dropped (the
/// OpenTelemetry SDKs' `OTEL_BSP_MAX_QUEUE_SIZE` default).
const MAX_QUEUE: usize = 2048;
/// Spans per export request (the SDKs' `OTEL_BSP_MAX_EXPORT_BATCH_SIZE`).
const MAX_BATCH: usize = 512;
/// How long one export may take (the SDKs' `OTEL_EXPORTER_OTLP_TIMEOUT`).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the exporter could not start.
#[derive(Debug, thiserror::Error)]
#[error("cannot start the trace exporter: {0}")]
pub struct TraceError(String);

enum Message {
    Span(otlp::Span),
    Flush(oneshot::Sender<()>),
}

/// Decides which calls are traced and sends their spans. One per process;
/// cheap to share (`Arc`).
#[derive(Debug)]
pub struct Tracer {
    sampler: sluice_config::Sampler,
    queue: mpsc::Sender<Message>,
    dropped: AtomicU64,
}

impl Tracer {
    /// Starts the exporter thread for `settings`.
    pub fn start(settings: &TelemetrySettings) -> Result<Arc<Tracer>, TraceError> {
        let exporter = Exporter::new(settings)?;
        let (queue, receiver) = mpsc::channel(MAX_QUEUE);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|error| TraceError(format!("its runtime: {error}")))?;
        std::thread::Builder::new()
            .name("sluice-otlp".to_owned())
            .spawn(move || runtime.block_on(exporter.run(receiver)))
            .map_err(|error| TraceError(format!("its thread: {error}")))?;
        tracing::info!(
            endpoint = %settings.traces_endpoint,
            service = %settings.service_name,
            "exporting OpenTelemetry traces"
        );
        Ok(Arc::new(Tracer {
            sampler: settings.sampler,
            queue,
            dropped: AtomicU64::new(0),
        }))
    }

    /// Is a call of `trace_id` traced? A parent-based sampler follows the
    /// caller's flag; the ratio keeps a trace whole by reading its id.
    pub(crate) fn sampled(&self, parent: Option<&TraceParent>, trace_id: &TraceId) -> bool {
        if self.sampler.parent_based
            && let Some(parent) = parent
        {
            return parent.sampled;
        }
        match self.sampler.root {
            RootSampler::AlwaysOn => true,
            RootSampler::AlwaysOff => false,
            RootSampler::Ratio(ratio) => {
                let mut low = [0; 8];
                low.copy_from_slice(&trace_id[8..]);
                // The id's last 8 bytes are random (W3C level 2), as a
                // share of their range.
                (u64::from_be_bytes(low) as f64) < ratio * (u64::MAX as f64)
            }
        }
    }

    /// Queues a finished span; never waits.
    pub(crate) fn send(&self, span: otlp::Span) {
        if self.queue.try_send(Message::Span(span)).is_err() {
            let dropped = self.dropped.fetch_add(1, Ordering::Relaxed);
            if dropped.is_power_of_two() || dropped == 0 {
                tracing::warn!(
                    dropped = dropped + 1,
                    "the trace exporter is behind: spans dropped"
                );
            }
        }
    }

    /// Sends every span queued so far, waiting at most `within` (a
    /// shutdown calls it). False when they did not all leave in time.
    pub async fn flush(&self, within: Duration) -> bool {
        let (done, sent) = oneshot::channel();
        let flushed =
            async { self.queue.send(Message::Flush(done)).await.is_ok() && sent.await.is_ok() };
        tokio::time::timeout(within, flushed).await.unwrap_or(false)
    }
}

/// The exporter thread's side: the endpoint, the client, the resource.
struct Exporter {
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    endpoint: http::Uri,
    headers: Vec<(http::HeaderName, HeaderValue)>,
    service_name: String,
    interval: Duration,
    failing: bool,
}

impl Exporter {
    fn new(settings: &TelemetrySettings) -> Result<Exporter, TraceError> {
        let connector = https_connector().map_err(|error| TraceError(error.to_string()))?;
        let client = Client::builder(TokioExecutor::new()).build(connector);
        let endpoint = settings
            .traces_endpoint
            .as_str()
            .parse()
            .map_err(|_| TraceError("the traces endpoint is not a valid URI".to_owned()))?;
        let mut headers = Vec::with_capacity(settings.headers.len());
        for (name, value) in &settings.headers {
            let mut value = HeaderValue::from_str(value.expose())
                .map_err(|_| TraceError(format!("the value of the {name} header is not valid")))?;
            value.set_sensitive(true);
            headers.push((name.clone(), value));
        }
        Ok(Exporter {
            client,
            endpoint,
            headers,
            service_name: settings.service_name.clone(),
            interval: settings.export_interval,
            failing: false,
        })
    }

    /// Until every [`Tracer`] is gone: collect, and send on time, when
    /// full, or when asked.
    async fn run(mut self, mut queue: mpsc::Receiver<Message>) {
        let mut batch = Vec::new();
        let mut next = Instant::now() + self.interval;
        loop {
            match tokio::time::timeout_at(next, queue.recv()).await {
                Ok(Some(Message::Span(span))) => {
                    batch.push(span);
                    if batch.len() >= MAX_BATCH {
                        self.export(&mut batch).await;
                    }
                }
                Ok(Some(Message::Flush(done))) => {
                    self.export(&mut batch).await;
                    let _ = done.send(());
                }
                Ok(None) => {
                    self.export(&mut batch).await;
                    return;
                }
                Err(_) => {
                    self.export(&mut batch).await;
                    next = Instant::now() + self.interval;
                }
            }
        }
    }

    /// Posts `batch` (emptying it); a failure is logged once until an
    /// export succeeds again, and the batch is not retried.
    async fn export(&mut self, batch: &mut Vec<otlp::Span>) {
        if batch.is_empty() {
            return;
        }
        let spans = std::mem::take(batch);
        let count = spans.len();
        let body = self.request(spans).encode_to_vec();
        let mut request = Request::new(Full::new(Bytes::from(body)));
        *request.method_mut() = Method::POST;
        *request.uri_mut() = self.endpoint.clone();
        let headers = request.headers_mut();
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("application/x-protobuf"),
        );
        for (name, value) in &self.headers {
            headers.insert(name.clone(), value.clone());
        }
        let answer = tokio::time::timeout(EXPORT_TIMEOUT, self.client.request(request)).await;
        let problem = match answer {
            Ok(Ok(response)) if response.status().is_success() => None,
            Ok(Ok(response)) => Some(format!("the collector answered {}", response.status())),
            Ok(Err(error)) => Some(format!("cannot reach the collector: {error}")),
            Err(_) => Some("the collector did not answer in time".to_owned()),
        };
        match problem {
            None => self.failing = false,
            Some(problem) => {
                if !self.failing {
                    tracing::warn!(spans = count, "trace export failed: {problem}");
                }
                self.failing = true;
            }
        }
    }

    fn request(&self, spans: Vec<otlp::Span>) -> otlp::ExportTraceServiceRequest {
        use otlp::{KeyValue, Value};
        otlp::ExportTraceServiceRequest {
            resource_spans: vec![otlp::ResourceSpans {
                resource: Some(otlp::Resource {
                    attributes: vec![
                        KeyValue::new("service.name", Value::String(self.service_name.clone())),
                        KeyValue::new("telemetry.sdk.name", Value::String("sluice".to_owned())),
                        KeyValue::new("telemetry.sdk.language", Value::String("rust".to_owned())),
                    ],
                }),
                scope_spans: vec![otlp::ScopeSpans {
                    scope: Some(otlp::InstrumentationScope {
                        name: "sluice".to_owned(),
                        version: env!("CARGO_PKG_VERSION").to_owned(),
                    }),
                    spans,
                }],
            }],
        }
    }
}
