//! An executor that hands requests to the fake API in-process: no sockets,
//! so the engine and the fake share tokio's paused clock.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use serde_json::Value;
use sluice::{Executor, Request, TransportError};
use sluice_fake::FakeApi;

/// Sends `GET /api/{tool}?q={args.q}` with `authorization: {key}` to a fake
/// that a test can swap mid-run (to change the hidden limit).
#[derive(Clone)]
pub struct FakeExecutor {
    pub api: Arc<Mutex<FakeApi>>,
    pub key: String,
}

impl FakeExecutor {
    pub fn new(api: FakeApi, key: &str) -> Self {
        FakeExecutor {
            api: Arc::new(Mutex::new(api)),
            key: key.to_owned(),
        }
    }

    pub fn api(&self) -> FakeApi {
        self.api.lock().unwrap().clone()
    }

    pub fn swap(&self, api: FakeApi) {
        *self.api.lock().unwrap() = api;
    }
}

impl Executor for FakeExecutor {
    type Payload = Value;

    async fn execute(&self, request: Request<Value>) -> Result<sluice::Reply, TransportError> {
        let q = request.payload["q"].as_str().unwrap_or_default();
        let uri = format!("/api/{}?q={q}", request.tool);
        let http_request = http::Request::get(uri)
            .header("authorization", &self.key)
            .body(Bytes::new())
            .map_err(|e| TransportError::connect(e.to_string()))?;
        let api = self.api();
        Ok(api.handle(http_request).await.into())
    }
}
