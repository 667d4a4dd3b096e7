//! Serving a [`FakeApi`] over HTTP with axum, on a listener of the caller's or on 127.0.0.1:0.

use std::io;
use std::net::{Ipv4Addr, SocketAddr};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::fake::FakeApi;

/// The largest request body the server reads (and discards): enough for any test payload.
const MAX_BODY: usize = 16 * 1024 * 1024;

/// An axum router that answers every request with `api`, for embedding in another server.
pub fn router(api: FakeApi) -> Router {
    Router::new().fallback(answer).with_state(api)
}

async fn answer(State(api): State<FakeApi>, request: Request) -> Response {
    let arrived = Instant::now();
    let (parts, body) = request.into_parts();
    let planned = if api.config().needs_body() {
        // A limit charges a body field: read it first, but record the arrival as the start.
        // A broken body charges the default.
        let body = axum::body::to_bytes(body, MAX_BODY)
            .await
            .unwrap_or_default();
        api.decide(&parts.method, &parts.uri, &parts.headers, &body, arrived)
    } else {
        // Decided before the body is read, so the recorded start is the request's arrival.
        let planned = api.decide(&parts.method, &parts.uri, &parts.headers, &[], arrived);
        // Reading the body keeps the connection reusable; a broken one changes nothing.
        let _ = axum::body::to_bytes(body, MAX_BODY).await;
        planned
    };
    api.deliver(planned).await.map(Body::from)
}

/// A running fake API server. Dropping it starts a graceful shutdown too.
#[derive(Debug)]
pub struct FakeServer {
    addr: SocketAddr,
    api: FakeApi,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<io::Result<()>>>,
}

impl FakeServer {
    /// Serves `api` on a free port of 127.0.0.1.
    pub async fn spawn(api: FakeApi) -> io::Result<Self> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        FakeServer::spawn_on(listener, api)
    }

    /// Serves `api` on `listener`, in a task of the current tokio runtime.
    pub fn spawn_on(listener: TcpListener, api: FakeApi) -> io::Result<Self> {
        let addr = listener.local_addr()?;
        let (stop, stopped) = oneshot::channel::<()>();
        let server = axum::serve(listener, router(api.clone())).with_graceful_shutdown(async {
            // A dropped sender means the handle is gone: stop as well.
            let _ = stopped.await;
        });
        let task = tokio::spawn(server.into_future());
        Ok(FakeServer {
            addr,
            api,
            stop: Some(stop),
            task: Some(task),
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its base URL, `http://ADDR`, without a trailing slash.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The fake it serves: the same state as requests over HTTP see.
    pub fn api(&self) -> &FakeApi {
        &self.api
    }

    /// Stops accepting connections, lets requests in progress finish, and waits for that.
    pub async fn shutdown(mut self) -> io::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.task.take() {
            Some(task) => task.await.map_err(io::Error::other)?,
            None => Ok(()),
        }
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}
