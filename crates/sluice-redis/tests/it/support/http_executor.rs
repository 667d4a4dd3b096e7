//! A minimal HTTP executor for end-to-end tests against the fake API over loopback.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;
use sluice::{Executor, Request, TransportError};

/// Names what decided a request, read as it is sent.
pub type Tag = Arc<dyn Fn() -> &'static str + Send + Sync>;

/// Sends `GET {base}/api/{tool}?q={args.q}` with `authorization: {key}`,
/// and `&m={tag}` when tagged.
#[derive(Clone)]
pub struct HttpExecutor {
    pub client: reqwest::Client,
    pub base: String,
    pub key: String,
    pub tag: Option<Tag>,
}

impl HttpExecutor {
    pub fn new(base: &str, key: &str) -> Self {
        HttpExecutor {
            client: reqwest::Client::new(),
            base: base.to_owned(),
            key: key.to_owned(),
            tag: None,
        }
    }
}

impl Executor for HttpExecutor {
    type Payload = Value;

    async fn execute(&self, request: Request<Value>) -> Result<sluice::Reply, TransportError> {
        let q = request.payload["q"].as_str().unwrap_or_default().to_owned();
        let mut url = format!("{}/api/{}?q={}", self.base, request.tool, q);
        if let Some(tag) = &self.tag {
            url.push_str("&m=");
            url.push_str(tag());
        }
        let response = self
            .client
            .get(url)
            .header("authorization", &self.key)
            .timeout(request.timeout)
            .send()
            .await
            .map_err(|e| TransportError::other(e.to_string()))?;
        let mut builder = http::Response::builder().status(response.status().as_u16());
        for (name, value) in response.headers() {
            builder = builder.header(name.as_str(), value.as_bytes());
        }
        let body = response
            .bytes()
            .await
            .map_err(|e| TransportError::other(e.to_string()))?;
        builder
            .body(body)
            .map(sluice::Reply::from)
            .map_err(|e| TransportError::other(e.to_string()))
    }
}
