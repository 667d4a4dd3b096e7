//! Traces for `sluice serve` and `sluice mcp`: the exporter started from
//! `[telemetry]` and the `OTEL_*` variables, and flushed before exit.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use sluice_config::Telemetry;
use sluice_http::trace::Tracer;

/// How long an exit waits for the last spans to leave.
const FLUSH_WITHIN: Duration = Duration::from_secs(5);

/// The tracer the configuration and the environment ask for, or `None`
/// when traces are off.
pub(crate) fn start(telemetry: &Telemetry) -> anyhow::Result<Option<Arc<Tracer>>> {
    let Some(settings) = telemetry
        .resolve(&|name| std::env::var(name).ok())
        .context("invalid telemetry settings")?
    else {
        return Ok(None);
    };
    Ok(Some(Tracer::start(&settings)?))
}

/// Sends the spans still queued (on SIGTERM, SIGINT or the end of the
/// session), waiting a bounded time.
pub(crate) async fn flush(tracer: Option<&Arc<Tracer>>) {
    if let Some(tracer) = tracer
        && !tracer.flush(FLUSH_WITHIN).await
    {
        tracing::warn!("the last spans could not be sent before exit");
    }
}
