//! The `reqwest-middleware` middleware (feature `reqwest`): the same gate for a `ClientWithMiddleware`.
//!
//! # Why sluice is the last middleware
//!
//! A middleware gets the rest of the chain as [`Next`], which borrows the
//! client and cannot outlive the call to [`Middleware::handle`]; the gate
//! sends each attempt later, from its own queue and retry loop, so it
//! cannot use `Next`. [`SluiceMiddleware`] therefore sends with the
//! [`reqwest::Client`] it was given, and middleware after it never runs.
//! Put sluice last (`ClientBuilder::new(client).with(tracing).with(sluice)`):
//! anything before it still sees every request and every answer, and
//! retry middleware must not be used at all, since the gate retries.

use std::sync::Arc;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use http::Extensions;
use parking_lot::Mutex;
use reqwest::ResponseBuilderExt;
use reqwest_middleware::{Middleware, Next};
use sluice::Gate;

use crate::call::{Attempt, AttemptError, Dispatch, HttpCall, read_key};
use crate::error::{SluiceError, finish};
use crate::gate::Sluice;
use crate::target::Target;
use crate::turn::Turn;

/// A [`reqwest_middleware::Middleware`] that sends every request it
/// classifies through a sluice gate.
///
/// The outcome is the upstream response as is (any status), or
/// `reqwest_middleware::Error::Middleware` wrapping a [`SluiceError`]
/// (downcast it to read the outcome and `retry_after_ms`). Responses are
/// read whole before they are returned (the gate reads every response),
/// and request bodies must be buffered to be retried: a streaming body is
/// sent once and never repeated.
pub struct SluiceMiddleware<F> {
    gate: Gate<Dispatch>,
    client: reqwest::Client,
    classify: Arc<F>,
}

impl<F> std::fmt::Debug for SluiceMiddleware<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SluiceMiddleware")
            .field("gate", &self.gate)
            .finish_non_exhaustive()
    }
}

impl Sluice {
    /// A middleware sending through `client` (give it the client the
    /// `ClientWithMiddleware` wraps); `classify` says what each request is
    /// (`None`: passed down the chain as is).
    pub fn middleware<F>(&self, client: reqwest::Client, classify: F) -> SluiceMiddleware<F>
    where
        F: Fn(&reqwest::Request) -> Option<Target> + Send + Sync + 'static,
    {
        SluiceMiddleware {
            gate: self.gate().clone(),
            client,
            classify: Arc::new(classify),
        }
    }
}

#[async_trait::async_trait]
impl<F> Middleware for SluiceMiddleware<F>
where
    F: Fn(&reqwest::Request) -> Option<Target> + Send + Sync + 'static,
{
    async fn handle(
        &self,
        request: reqwest::Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        let Some(target) = (self.classify)(&request) else {
            return next.run(request, extensions).await;
        };
        let turn = Turn::of(extensions, &self.gate);
        let body = request
            .body()
            .and_then(reqwest::Body::as_bytes)
            .unwrap_or_default();
        let key = read_key(
            request.method(),
            request.url().as_str(),
            request.headers(),
            body,
        );
        let (payload, failure) = HttpCall::new(
            key,
            ClientAttempt {
                client: self.client.clone(),
                request: Mutex::new(Some(request)),
            },
        );
        let completion = turn.complete(target.into_call(payload)).await;
        let failure = failure.lock().take();
        match finish(completion, failure) {
            Ok(response) => Ok(reqwest::Response::from(response)),
            Err(SluiceError::Failed(failed)) => match failed.source {
                // The client's own error, as reqwest-middleware users expect it.
                Some(source) => match source.downcast::<reqwest::Error>() {
                    Ok(error) => Err(reqwest_middleware::Error::Reqwest(*error)),
                    Err(source) => Err(reqwest_middleware::Error::middleware(SluiceError::Failed(
                        Box::new(crate::error::Failed {
                            outcome: failed.outcome,
                            source: Some(source),
                        }),
                    ))),
                },
                None => Err(reqwest_middleware::Error::middleware(SluiceError::Failed(
                    failed,
                ))),
            },
            Err(error) => Err(reqwest_middleware::Error::middleware(error)),
        }
    }
}

/// One request and the client that sends it. Buffered bodies are cloned
/// for each attempt; a streaming body goes out once.
struct ClientAttempt {
    client: reqwest::Client,
    request: Mutex<Option<reqwest::Request>>,
}

impl Attempt for ClientAttempt {
    fn send(&self) -> BoxFuture<'static, Result<http::Response<Bytes>, AttemptError>> {
        let request = {
            let mut slot = self.request.lock();
            match slot.as_ref().and_then(reqwest::Request::try_clone) {
                Some(copy) => Some(copy),
                None => slot.take(),
            }
        };
        let client = self.client.clone();
        Box::pin(async move {
            let Some(request) = request else {
                return Err(AttemptError {
                    not_sent: false,
                    error: "the request body is a stream: it was sent once and cannot be repeated"
                        .into(),
                });
            };
            let response = client
                .execute(request)
                .await
                .map_err(|error| AttemptError {
                    // A connection that was never made carried nothing.
                    not_sent: error.is_connect(),
                    error: Box::new(error),
                })?;
            buffered(response).await
        })
    }
}

/// The response with its body read, keeping status, version, headers,
/// extensions and URL, so that `reqwest::Response::from` restores them.
async fn buffered(response: reqwest::Response) -> Result<http::Response<Bytes>, AttemptError> {
    let mut builder = http::Response::builder()
        .status(response.status())
        .version(response.version())
        .url(response.url().clone());
    if let Some(headers) = builder.headers_mut() {
        *headers = response.headers().clone();
    }
    let extensions = response.extensions().clone();
    let body = response.bytes().await.map_err(|error| AttemptError {
        not_sent: false,
        error: Box::new(error),
    })?;
    let mut buffered = builder.body(body).map_err(|error| AttemptError {
        not_sent: false,
        error: Box::new(error),
    })?;
    buffered.extensions_mut().extend(extensions);
    Ok(buffered)
}
