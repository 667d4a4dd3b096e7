//! OpenTelemetry traces of calls: a span per call, a CLIENT span per
//! upstream request, exported over OTLP/HTTP; off, and free, without a
//! [`Tracer`].
//!
//! - `context.rs`: the W3C `traceparent` header, read and written.
//! - `call.rs`: [`traced`] wraps a call in its span, [`TraceObserver`]
//!   notes the engine's events on it, and the executors open the CLIENT spans
//!   ([`ClientSpan`]: HTTP requests, and `sluice mcp`'s JSON-RPC ones).
//! - `export.rs`: [`Tracer`], the sampler and the batch exporter.
//! - `otlp.rs`: the protobuf messages sent.

mod call;
mod context;
mod export;
mod otlp;

pub use call::{ClientSpan, TraceObserver, traced};
pub use context::{SpanId, TRACEPARENT, TraceId, TraceParent, hex};
pub use export::{TraceError, Tracer};
