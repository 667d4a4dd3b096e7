//! The tower [`Service`]: each request classified, gated, sent through a clone of the inner service, and answered as is or with the outcome.

use std::future::poll_fn;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::future::BoxFuture;
use parking_lot::Mutex;
use sluice::Gate;
use tower_service::Service;

use crate::call::{Attempt, AttemptError, BoxError, Dispatch, HttpCall, read_key};
use crate::error::{Failed, SluiceError, finish};
use crate::target::Target;
use crate::turn::Turn;

/// An HTTP client service behind a sluice gate; see [`crate::SluiceLayer`].
///
/// For each request, the classifying function names its [`Target`] (or
/// `None`: sent as is, outside the gate). The call then goes through the
/// engine's pipeline; each attempt clones the inner service, waits for it
/// to be ready and sends a clone of the request. The result is the
/// upstream response as is, whatever its status, or a [`SluiceError`]
/// carrying the outcome when there is no response to give (deferred, timed
/// out, or failed below).
///
/// The service is always ready: readiness is decided per attempt, inside
/// the gate, where waiting is charged to the call's deadline.
pub struct SluiceService<S, F> {
    inner: S,
    gate: Gate<Dispatch>,
    classify: Arc<F>,
}

impl<S: Clone, F> Clone for SluiceService<S, F> {
    fn clone(&self) -> Self {
        SluiceService {
            inner: self.inner.clone(),
            gate: self.gate.clone(),
            classify: self.classify.clone(),
        }
    }
}

impl<S, F> std::fmt::Debug for SluiceService<S, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SluiceService")
            .field("gate", &self.gate)
            .finish_non_exhaustive()
    }
}

impl<S, F> SluiceService<S, F> {
    pub(crate) fn new(inner: S, gate: Gate<Dispatch>, classify: Arc<F>) -> Self {
        SluiceService {
            inner,
            gate,
            classify,
        }
    }
}

impl<S, F> Service<http::Request<Bytes>> for SluiceService<S, F>
where
    S: Service<http::Request<Bytes>, Response = http::Response<Bytes>> + Clone + Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    F: Fn(&http::Request<Bytes>) -> Option<Target> + Send + Sync + 'static,
{
    type Response = http::Response<Bytes>;
    type Error = SluiceError;
    type Future = BoxFuture<'static, Result<http::Response<Bytes>, SluiceError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Bytes>) -> Self::Future {
        let inner = self.inner.clone();
        let gate = self.gate.clone();
        let target = (self.classify)(&request);
        Box::pin(async move {
            let Some(target) = target else {
                return ServiceAttempt::send_once(inner, request)
                    .await
                    .map_err(|failed| {
                        SluiceError::Failed(Box::new(Failed {
                            outcome: sluice::Outcome::error(None, failed.error.to_string()),
                            source: Some(failed.error),
                        }))
                    });
            };
            let turn = Turn::of(request.extensions(), &gate);
            let uri = request.uri().to_string();
            let key = read_key(request.method(), &uri, request.headers(), request.body());
            let (payload, failure) = HttpCall::new(
                key,
                ServiceAttempt {
                    service: Mutex::new(inner),
                    request,
                },
            );
            let completion = turn.complete(target.into_call(payload)).await;
            let failure = failure.lock().take();
            finish(completion, failure)
        })
    }
}

/// One request and the service that sends it, re-sendable.
struct ServiceAttempt<S> {
    service: Mutex<S>,
    request: http::Request<Bytes>,
}

impl<S> ServiceAttempt<S>
where
    S: Service<http::Request<Bytes>, Response = http::Response<Bytes>> + Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    async fn send_once(
        mut service: S,
        request: http::Request<Bytes>,
    ) -> Result<http::Response<Bytes>, AttemptError> {
        // A service that fails to become ready sent nothing.
        poll_fn(|cx| service.poll_ready(cx))
            .await
            .map_err(|error| AttemptError {
                not_sent: true,
                error: error.into(),
            })?;
        service.call(request).await.map_err(|error| AttemptError {
            not_sent: false,
            error: error.into(),
        })
    }
}

impl<S> Attempt for ServiceAttempt<S>
where
    S: Service<http::Request<Bytes>, Response = http::Response<Bytes>> + Clone + Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    fn send(&self) -> BoxFuture<'static, Result<http::Response<Bytes>, AttemptError>> {
        let service = self.service.lock().clone();
        Box::pin(Self::send_once(service, self.request.clone()))
    }
}
