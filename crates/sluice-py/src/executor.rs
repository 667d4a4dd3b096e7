//! The gate's executor and what its calls carry: a configured tool's request
//! goes through the sidecar's HTTP executor (signed with the credential's
//! secret, to its base URL only); Python's own work (a function tool, a
//! request through the httpx transport) runs in Python through the bridge.

use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderName, HeaderValue, StatusCode};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use sluice::{Executor, Reply, Request, TransportError};
use sluice_http::{HttpExecutor, Outbound};

use crate::bridge::PyTaskFuture;

/// What one call carries to the executor.
pub(crate) enum Payload {
    /// A configured tool's rendered request.
    Http(Arc<Outbound>),
    /// Work done in Python.
    Python(PyWork),
}

/// One call's Python work: `start()` is called once per attempt.
pub(crate) struct PyWork {
    /// The call's identity for coalescing (reads only).
    pub(crate) key: Option<String>,
    /// Begins an attempt: returns an asyncio task, or (blocking) the result.
    pub(crate) start: Py<PyAny>,
    /// `start()` does the work itself, on the calling thread.
    pub(crate) blocking: bool,
}

impl sluice::Payload for Payload {
    fn coalesce_key(&self) -> Option<String> {
        match self {
            Payload::Http(outbound) => outbound.coalesce_key(),
            Payload::Python(work) => work.key.clone(),
        }
    }
}

// A function tool that raised: one home for both bindings.
pub(crate) use sluice_http::{Raised, outcome_of};

/// Sends configured tools over HTTP and Python's work through the bridge.
pub(crate) struct PyExecutor {
    http: HttpExecutor,
}

impl PyExecutor {
    pub(crate) fn new(http: HttpExecutor) -> Self {
        PyExecutor { http }
    }
}

impl Executor for PyExecutor {
    type Payload = Payload;

    fn execute(
        &self,
        request: Request<Payload>,
    ) -> impl Future<Output = Result<Reply, TransportError>> + Send {
        let http = self.http.clone();
        async move {
            match &*request.payload {
                Payload::Http(outbound) => {
                    http.execute(request.with_payload(outbound.clone())).await
                }
                Payload::Python(work) => {
                    let attempt = Python::attach(|py| {
                        let start = work.start.clone_ref(py);
                        if work.blocking {
                            PyTaskFuture::blocking(start)
                        } else {
                            PyTaskFuture::task(start)
                        }
                    });
                    let result = attempt.await;
                    Python::attach(|py| read(py, result)).map(Reply::from)
                }
            }
        }
    }
}

/// What the Python side of an attempt answered (`sluice/_attempt.py`):
/// `("response", status, [(name, value)], body)`, `("failed", not_sent,
/// message)` or `("raised", message)`.
fn read(
    py: Python<'_>,
    result: PyResult<Py<PyAny>>,
) -> Result<http::Response<Bytes>, TransportError> {
    let answer = match result {
        Ok(answer) => answer,
        Err(error) => return Err(TransportError::other(describe(py, &error))),
    };
    read_answer(answer.bind(py)).map_err(|error| {
        TransportError::other(format!(
            "the attempt's answer is malformed: {}",
            describe(py, &error)
        ))
    })?
}

fn read_answer(
    answer: &Bound<'_, PyAny>,
) -> PyResult<Result<http::Response<Bytes>, TransportError>> {
    let kind: String = answer.get_item(0)?.extract()?;
    match kind.as_str() {
        "response" => {
            let status: u16 = answer.get_item(1)?.extract()?;
            let Ok(status) = StatusCode::from_u16(status) else {
                return Ok(Err(TransportError::other(format!(
                    "invalid HTTP status {status}"
                ))));
            };
            let mut response = http::Response::new(Bytes::new());
            *response.status_mut() = status;
            let headers = response.headers_mut();
            for pair in answer.get_item(2)?.try_iter()? {
                let (name, value): (Vec<u8>, Vec<u8>) = pair?.extract()?;
                // httpx has checked both; one that is still invalid is left out.
                if let (Ok(name), Ok(value)) = (
                    HeaderName::from_bytes(&name),
                    HeaderValue::from_bytes(&value),
                ) {
                    headers.append(name, value);
                }
            }
            let body = answer.get_item(3)?;
            *response.body_mut() = Bytes::copy_from_slice(body.cast::<PyBytes>()?.as_bytes());
            Ok(Ok(response))
        }
        "failed" => {
            let not_sent: bool = answer.get_item(1)?.extract()?;
            let message: String = answer.get_item(2)?.extract()?;
            Ok(Err(TransportError { not_sent, message }))
        }
        "raised" => {
            let message: String = answer.get_item(1)?.extract()?;
            // A refusal: answered as an error, never retried, never cached.
            let mut response = http::Response::new(Bytes::new());
            *response.status_mut() = StatusCode::BAD_REQUEST;
            response.extensions_mut().insert(Raised(message));
            Ok(Ok(response))
        }
        other => Err(pyo3::exceptions::PyValueError::new_err(format!(
            "unknown kind {other:?}"
        ))),
    }
}

/// `TypeName: message`, for an outcome's message.
pub(crate) fn describe(py: Python<'_>, error: &PyErr) -> String {
    let name = error
        .get_type(py)
        .name()
        .map(|name| name.to_string())
        .unwrap_or_else(|_| "Exception".to_owned());
    let text = error.value(py).to_string();
    if text.is_empty() {
        name
    } else {
        format!("{name}: {text}")
    }
}
