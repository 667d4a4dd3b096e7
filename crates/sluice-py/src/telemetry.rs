//! Traces from Python: each gate whose configuration turns them on (its
//! `[telemetry]` section or the `OTEL_*` variables, read as the sidecar
//! reads them) gets its own exporter; every live one is flushed at
//! interpreter exit, waiting a bounded time. A traced call joins the
//! caller's current OpenTelemetry span, read by `sluice._otel`.

use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use sluice_config::{ConfigError, Telemetry};
use sluice_http::trace::{TraceParent, Tracer};

use crate::errors::config_error;
use crate::runtime;

/// The exporters of the gates alive, for the flush at exit. Weak: a
/// dropped gate's exporter sends what it holds and ends by itself.
static TRACERS: Mutex<Vec<Weak<Tracer>>> = Mutex::new(Vec::new());

/// The longest a flush may wait: a collector that does not answer never
/// holds the interpreter longer than this.
const MAX_FLUSH: Duration = Duration::from_secs(30);

/// The tracer `telemetry` and the environment ask for, or `None` when
/// traces are off.
///
/// A gate whose configuration has no `[telemetry]` section did not ask
/// for traces: an `OTEL_*` variable that sluice cannot use (the
/// application's own `OTEL_EXPORTER_OTLP_PROTOCOL=grpc`, say) then warns,
/// naming it, and leaves traces off instead of refusing the gate. With the
/// section, it is refused as `sluice serve` refuses it.
pub(crate) fn start(py: Python<'_>, telemetry: &Telemetry) -> PyResult<Option<Arc<Tracer>>> {
    let settings = match telemetry.resolve(&|name| std::env::var(name).ok()) {
        Ok(settings) => settings,
        Err(error) if *telemetry == Telemetry::default() => {
            let message = format!("sluice: traces are off: {error}");
            let warning = py.get_type::<pyo3::exceptions::PyRuntimeWarning>();
            PyErr::warn(
                py,
                &warning,
                &std::ffi::CString::new(message).unwrap_or_default(),
                1,
            )?;
            return Ok(None);
        }
        Err(error) => return Err(config_error(&error)),
    };
    let Some(settings) = settings else {
        return Ok(None);
    };
    let tracer = Tracer::start(&settings)
        .map_err(|error| config_error(&ConfigError::invalid("telemetry", error.to_string())))?;
    let mut tracers = TRACERS.lock();
    tracers.retain(|tracer| tracer.strong_count() > 0);
    tracers.push(Arc::downgrade(&tracer));
    Ok(Some(tracer))
}

/// Sends the spans `tracers` still hold, waiting at most `timeout_s`
/// seconds in all (capped at [`MAX_FLUSH`]), with the GIL released. False
/// when some did not leave in time.
pub(crate) fn flush(py: Python<'_>, tracers: &[Arc<Tracer>], timeout_s: f64) -> PyResult<bool> {
    if tracers.is_empty() {
        return Ok(true);
    }
    let runtime = runtime::runtime()?;
    // NaN and negative waits are no wait; too long (or infinite) is the cap.
    let within = if timeout_s > 0.0 {
        Duration::try_from_secs_f64(timeout_s).map_or(MAX_FLUSH, |wait| wait.min(MAX_FLUSH))
    } else {
        Duration::ZERO
    };
    Ok(py.detach(|| {
        runtime.block_on(async {
            let all =
                futures_util::future::join_all(tracers.iter().map(|tracer| tracer.flush(within)));
            all.await.into_iter().all(|flushed| flushed)
        })
    }))
}

/// Every live gate's exporter: what the flush at exit sends.
pub(crate) fn live() -> Vec<Arc<Tracer>> {
    TRACERS.lock().iter().filter_map(Weak::upgrade).collect()
}

/// `sluice._otel.traceparent`, looked up once.
static CURRENT_SPAN: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// The caller's current OpenTelemetry span, which a traced call's span
/// joins (as the sidecar's calls join their request's `traceparent`).
/// Asked only for a gate that traces: an untraced call runs no Python.
pub(crate) fn caller_span(py: Python<'_>) -> PyResult<Option<TraceParent>> {
    let read = CURRENT_SPAN.get_or_try_init(py, || {
        py.import("sluice._otel")?
            .getattr("traceparent")
            .map(Bound::unbind)
    })?;
    let text: Option<String> = read.bind(py).call0()?.extract()?;
    Ok(text.as_deref().and_then(TraceParent::parse))
}
