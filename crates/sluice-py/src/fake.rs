//! `FakeCore`: sluice-fake's throttling API served on loopback for Python
//! tests, with its rate limit changeable while it runs (`set_rate_limit`
//! swaps in a fresh fake behind the same address; the records of every
//! fake it served are kept, on one clock).

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::response::Response;
use parking_lot::Mutex;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyList;
use sluice_fake::{Config, FakeApi, HeaderStyle, Latency, Limits, Record, RetryAfter};
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::convert::to_py;
use crate::errors::{guard, internal};
use crate::runtime;

/// The fake API; `sluice.testing.FakeApi` wraps it.
#[pyclass(module = "sluice._sluice", frozen)]
pub(crate) struct FakeCore {
    current: Arc<Mutex<FakeApi>>,
    /// When the first fake started: every record's time is since then.
    origin: Instant,
    /// The records of fakes replaced by `set_rate_limit`, on `origin`'s clock.
    retired: Mutex<Vec<Record>>,
    base: Config,
    addr: SocketAddr,
    stop: Mutex<Option<oneshot::Sender<()>>>,
}

fn seconds(value: f64, field: &str) -> PyResult<Duration> {
    Duration::try_from_secs_f64(value)
        .ok()
        .filter(|duration| !duration.is_zero())
        .ok_or_else(|| {
            PyValueError::new_err(format!("{field} must be a positive number of seconds"))
        })
}

fn limited(
    base: &Config,
    allowed: u32,
    retry_after_s: Option<f64>,
    window_s: Option<f64>,
) -> PyResult<Config> {
    let retry_after = retry_after_s
        .map(|s| seconds(s, "retry_after_s"))
        .transpose()?;
    let window = match window_s {
        Some(s) => seconds(s, "window_s")?,
        None => retry_after.unwrap_or(Duration::from_secs(1)),
    };
    let mut config = base.clone();
    config.limits = Limits::new(allowed, window);
    config.retry_after = retry_after.map_or(RetryAfter::Auto, RetryAfter::Fixed);
    Ok(config)
}

fn fake(config: Config) -> PyResult<FakeApi> {
    FakeApi::new(config).map_err(|error| PyValueError::new_err(error.to_string()))
}

async fn answer(State(current): State<Arc<Mutex<FakeApi>>>, request: Request) -> Response {
    let api = current.lock().clone();
    let mut router = sluice_fake::router(api);
    match tower_service::Service::call(&mut router, request).await {
        Ok(response) => response,
        Err(never) => match never {},
    }
}

#[pymethods]
impl FakeCore {
    #[new]
    #[pyo3(signature = (allowed=None, retry_after_s=None, window_s=None, latency_s=0.0, headers="retry-after"))]
    fn new(
        py: Python<'_>,
        allowed: Option<u32>,
        retry_after_s: Option<f64>,
        window_s: Option<f64>,
        latency_s: f64,
        headers: &str,
    ) -> PyResult<Self> {
        guard(|| {
            let headers: HeaderStyle =
                headers
                    .parse()
                    .map_err(|error: sluice_fake::ParseNameError| {
                        PyValueError::new_err(format!("headers: {error}"))
                    })?;
            let latency = if latency_s == 0.0 {
                Latency::Zero
            } else {
                Latency::Fixed(seconds(latency_s, "latency_s")?)
            };
            let base = Config::default()
                .with_headers(headers)
                .with_latency(latency);
            let config = match allowed {
                Some(allowed) => limited(&base, allowed, retry_after_s, window_s)?,
                None => base.clone(),
            };
            let runtime = runtime::runtime()?;
            let _entered = runtime.enter();
            let api = fake(config)?;
            let origin = api.origin();
            let current = Arc::new(Mutex::new(api));
            let listener = py
                .detach(|| {
                    runtime.block_on(tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)))
                })
                .map_err(|error| internal(format!("cannot listen on loopback: {error}")))?;
            let addr = listener
                .local_addr()
                .map_err(|error| internal(format!("cannot listen on loopback: {error}")))?;
            let (stop, stopped) = oneshot::channel::<()>();
            let app = Router::new().fallback(answer).with_state(current.clone());
            let server = axum::serve(listener, app).with_graceful_shutdown(async {
                let _ = stopped.await;
            });
            runtime.spawn(server.into_future());
            Ok(FakeCore {
                current,
                origin,
                retired: Mutex::new(Vec::new()),
                base,
                addr,
                stop: Mutex::new(Some(stop)),
            })
        })
    }

    /// `http://127.0.0.1:PORT`.
    #[getter]
    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// From now on at most `allowed` requests start in any rolling window
    /// (of `window_s`, else `retry_after_s`, else 1 s); each key's window
    /// starts afresh. Past it: 429 with `Retry-After: retry_after_s`, or
    /// the time until the window frees.
    #[pyo3(signature = (allowed, retry_after_s=None, window_s=None))]
    fn set_rate_limit(
        &self,
        allowed: u32,
        retry_after_s: Option<f64>,
        window_s: Option<f64>,
    ) -> PyResult<()> {
        guard(|| {
            let config = limited(&self.base, allowed, retry_after_s, window_s)?;
            let _entered = runtime::enter()?;
            let next = fake(config)?;
            let previous = std::mem::replace(&mut *self.current.lock(), next);
            let shift_ms = previous
                .origin()
                .saturating_duration_since(self.origin)
                .as_secs_f64()
                * 1e3;
            let mut retired = self.retired.lock();
            retired.extend(previous.requests().into_iter().map(|mut record| {
                record.t_ms += shift_ms;
                record.end_ms += shift_ms;
                record
            }));
            Ok(())
        })
    }

    /// Every request so far, in order, as dicts (`t_ms` is since the fake started).
    fn requests(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        guard(|| {
            let list = PyList::empty(py);
            for record in self.records() {
                let value =
                    serde_json::to_value(&record).map_err(|error| internal(error.to_string()))?;
                list.append(to_py(py, &value)?)?;
            }
            Ok(list.into_any().unbind())
        })
    }

    /// When each request arrived, in seconds since the fake started, in order.
    fn request_starts(&self) -> Vec<f64> {
        self.records()
            .iter()
            .map(|record| record.t_ms / 1e3)
            .collect()
    }

    /// Forgets every request and every key's window.
    fn reset(&self) {
        self.retired.lock().clear();
        self.current.lock().reset();
    }

    /// Stops serving.
    fn close(&self) {
        if let Some(stop) = self.stop.lock().take() {
            let _ = stop.send(());
        }
    }
}

impl FakeCore {
    fn records(&self) -> Vec<Record> {
        let current = self.current.lock().clone();
        let shift_ms = current
            .origin()
            .saturating_duration_since(self.origin)
            .as_secs_f64()
            * 1e3;
        let mut records = self.retired.lock().clone();
        records.extend(current.requests().into_iter().map(|mut record| {
            record.t_ms += shift_ms;
            record.end_ms += shift_ms;
            record
        }));
        records
    }
}
