//! The HTTP client the harnesses share: a tool call is `GET /api/{tool}?{args}` on the key.

use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use reqwest::Url;
use sluice::{Executor, Reply, Request, TransportError};

/// Sends tool calls to the API, signed with one key.
#[derive(Debug, Clone)]
pub(crate) struct ApiClient {
    pub(crate) client: reqwest::Client,
    base: Url,
    key: String,
}

impl ApiClient {
    pub(crate) fn new(base: &str, key: &str) -> anyhow::Result<Self> {
        Ok(ApiClient {
            client: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .context("building the HTTP client")?,
            base: Url::parse(base)
                .with_context(|| format!("parsing the API's address {base:?}"))?,
            key: key.to_owned(),
        })
    }

    fn url(&self, tool: &str, args: &serde_json::Value) -> Url {
        let mut url = self.base.clone();
        if let Ok(mut segments) = url.path_segments_mut() {
            segments.pop_if_empty().extend(["api", tool]);
        }
        if let Some(args) = args.as_object().filter(|args| !args.is_empty()) {
            let mut query = url.query_pairs_mut();
            for (name, value) in args {
                match value.as_str() {
                    Some(text) => query.append_pair(name, text),
                    None => query.append_pair(name, &value.to_string()),
                };
            }
        }
        url
    }

    pub(crate) async fn get(
        &self,
        tool: &str,
        args: &serde_json::Value,
        timeout: Duration,
    ) -> reqwest::Result<reqwest::Response> {
        self.client
            .get(self.url(tool, args))
            .header("authorization", &self.key)
            .timeout(timeout)
            .send()
            .await
    }
}

impl Executor for ApiClient {
    type Payload = serde_json::Value;

    async fn execute(&self, request: Request<serde_json::Value>) -> Result<Reply, TransportError> {
        engine_response(
            self.get(&request.tool, &request.payload, request.timeout)
                .await,
        )
        .await
        .map(Reply::from)
    }
}

/// What reqwest answered, as the engine's response: a connection that was
/// never made is `connect` (safe to retry for any call), anything else
/// `other`.
pub(crate) async fn engine_response(
    sent: reqwest::Result<reqwest::Response>,
) -> Result<http::Response<Bytes>, TransportError> {
    let response = sent.map_err(|error| {
        if error.is_connect() {
            TransportError::connect(error.to_string())
        } else {
            TransportError::other(error.to_string())
        }
    })?;
    let mut builder = http::Response::builder().status(response.status().as_u16());
    for (name, value) in response.headers() {
        builder = builder.header(name.as_str(), value.as_bytes());
    }
    let body = response
        .bytes()
        .await
        .map_err(|error| TransportError::other(error.to_string()))?;
    builder
        .body(body)
        .map_err(|error| TransportError::other(error.to_string()))
}
