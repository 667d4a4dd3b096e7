//! The part of OTLP's trace protobuf that sluice sends
//! (`opentelemetry/proto/collector/trace/v1`, `trace/v1`, `common/v1`,
//! `resource/v1`): field numbers as the specification's `.proto` files
//! give them. Written out rather than generated, as the crates that
//! generate them bring an SDK and a gRPC stack with them; the tests decode
//! what these encode with the generated ones.

/// `ExportTraceServiceRequest`: the body of `POST /v1/traces`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ExportTraceServiceRequest {
    #[prost(message, repeated, tag = "1")]
    pub(crate) resource_spans: Vec<ResourceSpans>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ResourceSpans {
    #[prost(message, optional, tag = "1")]
    pub(crate) resource: Option<Resource>,
    #[prost(message, repeated, tag = "2")]
    pub(crate) scope_spans: Vec<ScopeSpans>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Resource {
    #[prost(message, repeated, tag = "1")]
    pub(crate) attributes: Vec<KeyValue>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ScopeSpans {
    #[prost(message, optional, tag = "1")]
    pub(crate) scope: Option<InstrumentationScope>,
    #[prost(message, repeated, tag = "2")]
    pub(crate) spans: Vec<Span>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct InstrumentationScope {
    #[prost(string, tag = "1")]
    pub(crate) name: String,
    #[prost(string, tag = "2")]
    pub(crate) version: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Span {
    #[prost(bytes = "vec", tag = "1")]
    pub(crate) trace_id: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    pub(crate) span_id: Vec<u8>,
    #[prost(bytes = "vec", tag = "4")]
    pub(crate) parent_span_id: Vec<u8>,
    #[prost(string, tag = "5")]
    pub(crate) name: String,
    /// `SpanKind`: 1 internal, 3 client.
    #[prost(int32, tag = "6")]
    pub(crate) kind: i32,
    #[prost(fixed64, tag = "7")]
    pub(crate) start_time_unix_nano: u64,
    #[prost(fixed64, tag = "8")]
    pub(crate) end_time_unix_nano: u64,
    #[prost(message, repeated, tag = "9")]
    pub(crate) attributes: Vec<KeyValue>,
    #[prost(message, optional, tag = "15")]
    pub(crate) status: Option<Status>,
    /// Bits 0-7 the W3C trace flags (bit 0: sampled).
    #[prost(fixed32, tag = "16")]
    pub(crate) flags: u32,
}

/// `SpanKind` values.
pub(crate) const KIND_INTERNAL: i32 = 1;
pub(crate) const KIND_CLIENT: i32 = 3;

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Status {
    #[prost(string, tag = "2")]
    pub(crate) message: String,
    /// `StatusCode`: 0 unset, 1 ok, 2 error.
    #[prost(int32, tag = "3")]
    pub(crate) code: i32,
}

pub(crate) const STATUS_ERROR: i32 = 2;

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct KeyValue {
    #[prost(string, tag = "1")]
    pub(crate) key: String,
    #[prost(message, optional, tag = "2")]
    pub(crate) value: Option<AnyValue>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct AnyValue {
    #[prost(oneof = "Value", tags = "1, 2, 3")]
    pub(crate) value: Option<Value>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
pub(crate) enum Value {
    #[prost(string, tag = "1")]
    String(String),
    #[prost(bool, tag = "2")]
    Bool(bool),
    #[prost(int64, tag = "3")]
    Int(i64),
}

impl KeyValue {
    pub(crate) fn new(key: &str, value: Value) -> KeyValue {
        KeyValue {
            key: key.to_owned(),
            value: Some(AnyValue { value: Some(value) }),
        }
    }
}
