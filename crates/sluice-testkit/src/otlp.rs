//! An OTLP/HTTP trace receiver: `POST /v1/traces` bodies decoded with the
//! generated OTLP messages (opentelemetry-proto), their spans kept for
//! tests to check names, attributes and parent links.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use parking_lot::Mutex;
use prost::Message;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One span as received.
#[derive(Debug, Clone)]
pub struct ReceivedSpan {
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root span.
    pub parent_span_id: String,
    pub name: String,
    /// OTLP's `SpanKind`: 1 internal, 3 client.
    pub kind: i32,
    /// Strings, booleans and integers as JSON values.
    pub attributes: BTreeMap<String, Value>,
    /// OTLP's `StatusCode`: 2 error.
    pub status_code: i32,
    /// The resource's `service.name`.
    pub service: String,
    pub start_unix_nano: u64,
    pub end_unix_nano: u64,
}

impl ReceivedSpan {
    pub fn attr(&self, key: &str) -> Option<&Value> {
        self.attributes.get(key)
    }
}

/// Export requests seen: each request's spans, and its path and content type.
#[derive(Debug, Clone)]
pub struct Export {
    pub path: String,
    pub content_type: String,
    pub spans: usize,
}

/// The receiver, on 127.0.0.1 and a free port, until dropped.
pub struct OtlpReceiver {
    addr: std::net::SocketAddr,
    spans: Arc<Mutex<Vec<ReceivedSpan>>>,
    exports: Arc<Mutex<Vec<Export>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

impl OtlpReceiver {
    pub async fn spawn() -> OtlpReceiver {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let spans = Arc::new(Mutex::new(Vec::new()));
        let exports = Arc::new(Mutex::new(Vec::new()));
        let (kept, seen) = (spans.clone(), exports.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let (kept, seen) = (kept.clone(), seen.clone());
                tokio::spawn(async move {
                    let _ = serve(stream, kept, seen).await;
                });
            }
        });
        OtlpReceiver {
            addr,
            spans,
            exports,
            task,
        }
    }

    /// The base URL (`OTEL_EXPORTER_OTLP_ENDPOINT`).
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.spans.lock().clone()
    }

    pub fn exports(&self) -> Vec<Export> {
        self.exports.lock().clone()
    }

    /// The spans once `ready` holds for them, polling up to `within`; the
    /// spans as they are when it runs out.
    pub async fn wait_for(
        &self,
        within: Duration,
        ready: impl Fn(&[ReceivedSpan]) -> bool,
    ) -> Vec<ReceivedSpan> {
        let until = tokio::time::Instant::now() + within;
        loop {
            let spans = self.spans();
            if ready(&spans) || tokio::time::Instant::now() >= until {
                return spans;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// HTTP/1.1 requests on one connection: each body read by its
/// `Content-Length`, decoded, and answered `200` with an empty
/// `ExportTraceServiceResponse`.
async fn serve(
    mut stream: TcpStream,
    kept: Arc<Mutex<Vec<ReceivedSpan>>>,
    seen: Arc<Mutex<Vec<Export>>>,
) -> std::io::Result<()> {
    let mut buffer = Vec::new();
    loop {
        let head_end = loop {
            if let Some(at) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            let mut chunk = [0u8; 8192];
            let read = stream.read(&mut chunk).await?;
            if read == 0 {
                return Ok(());
            }
            buffer.extend_from_slice(&chunk[..read]);
        };
        let head = String::from_utf8_lossy(&buffer[..head_end]).into_owned();
        let path = head.split(' ').nth(1).unwrap_or_default().to_owned();
        let header = |name: &str| {
            head.lines()
                .filter_map(|line| line.split_once(':'))
                .find(|(key, _)| key.trim().eq_ignore_ascii_case(name))
                .map(|(_, value)| value.trim().to_owned())
        };
        let length: usize = header("content-length")
            .and_then(|text| text.parse().ok())
            .unwrap_or(0);
        while buffer.len() < head_end + length {
            let mut chunk = [0u8; 8192];
            let read = stream.read(&mut chunk).await?;
            if read == 0 {
                return Ok(());
            }
            buffer.extend_from_slice(&chunk[..read]);
        }
        let body = buffer[head_end..head_end + length].to_vec();
        buffer.drain(..head_end + length);
        let request = ExportTraceServiceRequest::decode(body.as_slice()).unwrap();
        let mut count = 0;
        for resource in &request.resource_spans {
            let service = resource
                .resource
                .iter()
                .flat_map(|resource| &resource.attributes)
                .find(|kv| kv.key == "service.name")
                .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
                    Any::StringValue(name) => Some(name.clone()),
                    _ => None,
                })
                .unwrap_or_default();
            for scope in &resource.scope_spans {
                for span in &scope.spans {
                    count += 1;
                    let attributes = span
                        .attributes
                        .iter()
                        .filter_map(|kv| {
                            let value = match kv.value.as_ref()?.value.as_ref()? {
                                Any::StringValue(text) => Value::from(text.clone()),
                                Any::BoolValue(flag) => Value::from(*flag),
                                Any::IntValue(int) => Value::from(*int),
                                Any::DoubleValue(float) => Value::from(*float),
                                _ => Value::Null,
                            };
                            Some((kv.key.clone(), value))
                        })
                        .collect();
                    kept.lock().push(ReceivedSpan {
                        trace_id: hex(&span.trace_id),
                        span_id: hex(&span.span_id),
                        parent_span_id: hex(&span.parent_span_id),
                        name: span.name.clone(),
                        kind: span.kind,
                        attributes,
                        status_code: span.status.as_ref().map_or(0, |status| status.code),
                        service: service.clone(),
                        start_unix_nano: span.start_time_unix_nano,
                        end_unix_nano: span.end_time_unix_nano,
                    });
                }
            }
        }
        seen.lock().push(Export {
            path,
            content_type: header("content-type").unwrap_or_default(),
            spans: count,
        });
        stream
            .write_all(
                b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n",
            )
            .await?;
    }
}
