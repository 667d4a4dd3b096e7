//! `FakeCore`: sluice-fake's throttling API served on loopback for Node
//! tests, with the request records the tests assert on.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use axum::Router;
use napi::bindgen_prelude::within_runtime_if_available;
use napi::{Error, Status};
use napi_derive::napi;
use parking_lot::Mutex;
use sluice_fake::{Config, FakeApi, HeaderStyle, Latency, Limits, RetryAfter};
use tokio::sync::oneshot;

/// How the fake throttles, as `FakeApi.start` was given it.
#[napi(object)]
pub struct FakeOptions {
    /// Requests allowed in any rolling window; none means unlimited.
    pub allowed: Option<u32>,
    /// A fixed `Retry-After`, in seconds; else the time until the window frees.
    pub retry_after_s: Option<f64>,
    /// The window, in seconds (default: `retryAfterS`, else 1).
    pub window_s: Option<f64>,
    /// Each answer's fixed latency, in seconds (default 0).
    pub latency_s: Option<f64>,
    /// The rate-limit header style (default `retry-after`).
    pub headers: Option<String>,
}

/// The fake API; `FakeApi` in `js/lib/fake.js` wraps it.
#[napi]
pub struct FakeCore {
    api: FakeApi,
    addr: SocketAddr,
    stop: Mutex<Option<oneshot::Sender<()>>>,
}

fn invalid(message: String) -> Error {
    Error::new(Status::InvalidArg, message)
}

fn seconds(value: f64, field: &str) -> napi::Result<Duration> {
    Duration::try_from_secs_f64(value)
        .ok()
        .filter(|duration| !duration.is_zero())
        .ok_or_else(|| invalid(format!("{field} must be a positive number of seconds")))
}

fn config(options: &FakeOptions) -> napi::Result<Config> {
    let headers: HeaderStyle = options
        .headers
        .as_deref()
        .unwrap_or("retry-after")
        .parse()
        .map_err(|error: sluice_fake::ParseNameError| invalid(format!("headers: {error}")))?;
    let latency = match options.latency_s {
        None | Some(0.0) => Latency::Zero,
        Some(s) => Latency::Fixed(seconds(s, "latencyS")?),
    };
    let mut config = Config::default()
        .with_headers(headers)
        .with_latency(latency);
    if let Some(allowed) = options.allowed {
        let retry_after = options
            .retry_after_s
            .map(|s| seconds(s, "retryAfterS"))
            .transpose()?;
        let window = match options.window_s {
            Some(s) => seconds(s, "windowS")?,
            None => retry_after.unwrap_or(Duration::from_secs(1)),
        };
        config.limits = Limits::new(allowed, window);
        config.retry_after = retry_after.map_or(RetryAfter::Auto, RetryAfter::Fixed);
    }
    Ok(config)
}

#[napi]
impl FakeCore {
    /// Starts serving on a free loopback port.
    #[napi(constructor, catch_unwind)]
    pub fn new(options: FakeOptions) -> napi::Result<Self> {
        let config = config(&options)?;
        within_runtime_if_available(|| {
            let api = FakeApi::new(config).map_err(|error| invalid(error.to_string()))?;
            let listen = |error: std::io::Error| {
                Error::new(
                    Status::GenericFailure,
                    format!("cannot listen on loopback: {error}"),
                )
            };
            let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(listen)?;
            listener.set_nonblocking(true).map_err(listen)?;
            let addr = listener.local_addr().map_err(listen)?;
            let listener = tokio::net::TcpListener::from_std(listener).map_err(listen)?;
            let (stop, stopped) = oneshot::channel::<()>();
            let app: Router = sluice_fake::router(api.clone());
            let server = axum::serve(listener, app).with_graceful_shutdown(async {
                let _ = stopped.await;
            });
            tokio::spawn(server.into_future());
            Ok(FakeCore {
                api,
                addr,
                stop: Mutex::new(Some(stop)),
            })
        })
    }

    /// `http://127.0.0.1:PORT`.
    #[napi(getter)]
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request so far, in order, as JSON text (`t_ms` is since the
    /// fake started).
    #[napi(catch_unwind)]
    pub fn requests(&self) -> napi::Result<String> {
        serde_json::to_string(&self.api.requests())
            .map_err(|error| Error::new(Status::GenericFailure, error.to_string()))
    }

    /// When each request arrived, in seconds since the fake started, in order.
    #[napi]
    pub fn request_starts(&self) -> Vec<f64> {
        self.api
            .requests()
            .iter()
            .map(|record| record.t_ms / 1e3)
            .collect()
    }

    /// Forgets every request and every key's window.
    #[napi]
    pub fn reset(&self) {
        self.api.reset();
    }

    /// Stops serving.
    #[napi]
    pub fn close(&self) {
        if let Some(stop) = self.stop.lock().take() {
            let _ = stop.send(());
        }
    }
}
