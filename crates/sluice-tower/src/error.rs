//! What a gated request resolves to when it has no upstream response to return: the outcome, typed.

use std::time::Duration;

use bytes::Bytes;
use sluice::{Completion, Outcome};

use crate::call::BoxError;

/// A request sluice did not complete with an upstream response.
///
/// Upstream responses, whatever their status, are returned as responses;
/// this error is for everything else, and always carries the call's
/// [`Outcome`], the same object the sidecar and `sluice mcp` show a model.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SluiceError {
    /// sluice did not send it, or stopped: `rate_limited` (with
    /// `retry_after_ms`), `quota_exhausted` or `timed_out`.
    #[error(transparent)]
    Deferred(Box<Deferred>),
    /// No response came: the stack below failed on every attempt, or the
    /// target named an unknown tool or credential.
    #[error(transparent)]
    Failed(Box<Failed>),
}

/// See [`SluiceError::Deferred`].
#[derive(Debug, thiserror::Error)]
#[error("sluice deferred the request: {}", describe(outcome))]
#[non_exhaustive]
pub struct Deferred {
    /// The outcome: its `retry_after_ms` says when to try again.
    pub outcome: Outcome,
    /// The last upstream response, when the server refused (a 429 that
    /// used up the call's attempts or deadline).
    pub response: Option<http::Response<Bytes>>,
}

/// See [`SluiceError::Failed`].
#[derive(Debug, thiserror::Error)]
#[error("{}", describe(outcome))]
#[non_exhaustive]
pub struct Failed {
    /// The `error` outcome.
    pub outcome: Outcome,
    /// The last error of the stack below, when there was one.
    #[source]
    pub source: Option<BoxError>,
}

impl SluiceError {
    /// The call's outcome.
    pub fn outcome(&self) -> &Outcome {
        match self {
            SluiceError::Deferred(deferred) => &deferred.outcome,
            SluiceError::Failed(failed) => &failed.outcome,
        }
    }

    /// How long to wait before re-issuing the request, when sluice says.
    pub fn retry_after(&self) -> Option<Duration> {
        self.outcome().retry_after()
    }
}

fn describe(outcome: &Outcome) -> String {
    serde_json::to_string(outcome).unwrap_or_else(|_| outcome.status().to_owned())
}

/// A completed call as the caller gets it: the upstream response as is, or
/// a typed error with the outcome.
pub(crate) fn finish(
    completion: Completion,
    failure: Option<BoxError>,
) -> Result<http::Response<Bytes>, SluiceError> {
    let response = completion.response.map(|shared| {
        // A coalesced read shares its response with the calls it answered.
        std::sync::Arc::try_unwrap(shared).unwrap_or_else(|shared| (*shared).clone())
    });
    match (completion.outcome, response) {
        (
            outcome @ (Outcome::RateLimited { .. }
            | Outcome::QuotaExhausted { .. }
            | Outcome::TimedOut { .. }),
            response,
        ) => Err(SluiceError::Deferred(Box::new(Deferred {
            outcome,
            response,
        }))),
        (_, Some(response)) => Ok(response),
        (outcome, None) => Err(SluiceError::Failed(Box::new(Failed {
            outcome,
            source: failure,
        }))),
    }
}
