//! The HTTP client of the budget scenarios: a call is `POST /v1/{tool}` with
//! its arguments as the JSON body, on one key (an LLM API's shape).

use std::time::Duration;

use anyhow::Context;
use reqwest::Url;
use sluice::{Executor, Reply, Request, TransportError};

/// Sends calls as JSON bodies, signed with one key.
#[derive(Debug, Clone)]
pub(crate) struct JsonApi {
    client: reqwest::Client,
    base: Url,
    key: String,
}

/// What the comparison strategies read from an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Answer {
    pub(crate) status: u16,
    /// `Retry-After` in whole seconds, when sent.
    pub(crate) retry_after: Option<Duration>,
    /// `usage.total_tokens` of the body, when present.
    pub(crate) used: Option<u64>,
}

impl JsonApi {
    pub(crate) fn new(base: &str, key: &str) -> anyhow::Result<Self> {
        Ok(JsonApi {
            client: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .no_proxy()
                .build()
                .context("building the HTTP client")?,
            base: Url::parse(base)
                .with_context(|| format!("parsing the API's address {base:?}"))?,
            key: key.to_owned(),
        })
    }

    fn url(&self, tool: &str) -> Url {
        let mut url = self.base.clone();
        if let Ok(mut segments) = url.path_segments_mut() {
            segments.pop_if_empty().extend(["v1", tool]);
        }
        url
    }

    async fn send(
        &self,
        tool: &str,
        args: &serde_json::Value,
        timeout: Duration,
    ) -> reqwest::Result<reqwest::Response> {
        self.client
            .post(self.url(tool))
            .header("authorization", &self.key)
            .header("content-type", "application/json")
            .body(serde_json::to_vec(args).unwrap_or_default())
            .timeout(timeout)
            .send()
            .await
    }

    /// One attempt outside sluice, read as the comparison strategies need it.
    pub(crate) async fn call(
        &self,
        tool: &str,
        args: &serde_json::Value,
        timeout: Duration,
    ) -> Option<Answer> {
        let response = self.send(tool, args, timeout).await.ok()?;
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|value| value.to_str().ok())
            .and_then(|text| text.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let body = response.bytes().await.ok()?;
        let used = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|json| json.pointer("/usage/total_tokens")?.as_u64());
        Some(Answer {
            status,
            retry_after,
            used,
        })
    }
}

impl Executor for JsonApi {
    type Payload = serde_json::Value;

    async fn execute(&self, request: Request<serde_json::Value>) -> Result<Reply, TransportError> {
        crate::harness::engine_response(
            self.send(&request.tool, &request.payload, request.timeout)
                .await,
        )
        .await
        .map(Reply::from)
    }
}
