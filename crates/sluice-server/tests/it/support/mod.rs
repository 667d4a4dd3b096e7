//! Helpers shared by the sidecar's integration tests: a configuration
//! pointed at a fake upstream, requests through `app()`, a served sidecar on
//! a real socket, and an echo upstream that records what reached it.

#![allow(dead_code, unreachable_pub)]

pub mod chunked;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode};
use serde_json::Value;
use sluice_fake::{Config as FakeConfig, FakeApi, FakeServer, Latency, Limits, RetryAfter};
use sluice_server::{AppState, SidecarConfig, app};
use tokio::net::TcpListener;
use tower::ServiceExt;

/// The support credential's key: it must reach the upstream and nothing else.
pub const SECRET: &str = "sk-test-5e3c1a7d9b-never-print";
/// The sidecar's bearer token, when a test turns auth on.
pub const TOKEN: &str = "tok-sidecar-0c2f4e6a8b";

/// The process environment as the tests see it.
pub fn env(name: &str) -> Option<String> {
    match name {
        "SUPPORT_API_KEY" => Some(SECRET.to_owned()),
        "SLUICE_TOKEN" => Some(TOKEN.to_owned()),
        _ => None,
    }
}

pub fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

/// A fake API on 127.0.0.1:0.
pub async fn fake(limits: Limits, retry_after: RetryAfter, latency: Latency) -> FakeServer {
    let config = FakeConfig::new(limits)
        .with_retry_after(retry_after)
        .with_latency(latency);
    FakeServer::spawn(FakeApi::new(config).unwrap())
        .await
        .unwrap()
}

/// A fake that lets everything through at once.
pub async fn open_fake() -> FakeServer {
    fake(
        Limits::new(10_000, Duration::from_secs(1)),
        RetryAfter::Auto,
        Latency::Zero,
    )
    .await
}

/// The sidecar's TOML for a `support` credential on `base_url` with
/// `credential` appended to its section, the standard tools, then `extra`.
pub fn toml(base_url: &str, credential: &str, extra: &str) -> String {
    format!(
        r#"
[credentials.support]
base_url = "{base_url}"
secret_env = "SUPPORT_API_KEY"
{credential}

[tools.search_tickets]
credential = "support"
method = "GET"
path = "/api/v2/search.json?query={{query}}"
read = true

[tools.get_ticket]
credential = "support"
path = "/api/v2/tickets/{{id}}"

[tools.create_ticket]
credential = "support"
method = "POST"
path = "/api/v2/tickets"
read = false
idempotent = false

{extra}
"#
    )
}

pub fn config(base_url: &str, credential: &str, extra: &str) -> SidecarConfig {
    SidecarConfig::from_toml(&toml(base_url, credential, extra), env).unwrap()
}

/// A seeded state for `config`.
pub fn state(config: SidecarConfig) -> AppState {
    AppState::with_seed(config, 7).unwrap()
}

/// The app for `config`.
pub fn router(config: SidecarConfig) -> Router {
    app(state(config))
}

/// A response, read whole.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Reply {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|_| panic!("not JSON: {:?}", String::from_utf8_lossy(&self.body)))
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|value| value.to_str().unwrap())
    }
}

/// Sends `request` through the router, no socket.
pub async fn send(router: &Router, request: Request<Body>) -> Reply {
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    Reply {
        status,
        headers,
        body,
    }
}

/// `POST /v1/turns` with `body` as JSON.
pub fn turn(body: &Value) -> Request<Body> {
    Request::post("/v1/turns")
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap()
}

/// `GET path`.
pub fn get(path: &str) -> Request<Body> {
    Request::get(path).body(Body::empty()).unwrap()
}

/// The results of a `/v1/turns` answer.
pub fn results(reply: &Reply) -> Vec<Value> {
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    reply.json()["results"].as_array().unwrap().clone()
}

/// The sidecar served on 127.0.0.1:0; dropping it shuts it down.
pub struct Sidecar {
    pub url: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    pub task: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
}

impl Sidecar {
    pub async fn spawn(state: AppState) -> Sidecar {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(sluice_server::serve(listener, state, async {
            let _ = stopped.await;
        }));
        Sidecar {
            url,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// Starts the graceful shutdown.
    pub fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

impl Drop for Sidecar {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What reached the echo upstream.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    /// The path and query exactly as received.
    pub target: String,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// An upstream that records every request and answers by path:
/// `/redirect` 302s elsewhere, `/text` is plain text, `/fail` is a 500,
/// `/slow` takes 300 ms, anything else echoes method, target and body as JSON.
pub struct Echo {
    pub url: String,
    pub seen: Arc<Mutex<Vec<Seen>>>,
}

impl Echo {
    pub async fn spawn() -> Echo {
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let record = seen.clone();
        let router = Router::new().fallback(move |request: Request<Body>| {
            let record = record.clone();
            async move {
                let (parts, body) = request.into_parts();
                let body = axum::body::to_bytes(body, usize::MAX).await.unwrap();
                let target = parts
                    .uri
                    .path_and_query()
                    .map_or("/".to_owned(), |pq| pq.as_str().to_owned());
                record.lock().unwrap().push(Seen {
                    method: parts.method.to_string(),
                    target: target.clone(),
                    headers: parts.headers.clone(),
                    body: body.clone(),
                });
                let path = parts.uri.path();
                let mut response = match path {
                    "/redirect" => http::Response::builder()
                        .status(302)
                        .header("location", "http://127.0.0.1:1/elsewhere")
                        .body(Body::empty())
                        .unwrap(),
                    "/text" => http::Response::builder()
                        .header("content-type", "text/plain")
                        .body(Body::from("plain words"))
                        .unwrap(),
                    "/fail" => http::Response::builder()
                        .status(500)
                        .header("content-type", "application/json")
                        .body(Body::from(r#"{"error":"boom"}"#))
                        .unwrap(),
                    _ => {
                        if path == "/slow" {
                            tokio::time::sleep(Duration::from_millis(300)).await;
                        }
                        let echoed = serde_json::json!({
                            "method": parts.method.as_str(),
                            "target": target,
                            "body": String::from_utf8_lossy(&body),
                        });
                        http::Response::builder()
                            .header("content-type", "application/json")
                            .header("x-upstream", "echo")
                            .body(Body::from(echoed.to_string()))
                            .unwrap()
                    }
                };
                response
                    .headers_mut()
                    .insert("connection", http::HeaderValue::from_static("keep-alive"));
                response
            }
        });
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, router).await });
        Echo { url, seen }
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}
