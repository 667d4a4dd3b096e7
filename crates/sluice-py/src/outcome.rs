//! `sluice.Outcome`: what the model is told about one call, read-only, with
//! `to_dict()` giving exactly the sidecar's JSON.

use pyo3::prelude::*;
use sluice::Outcome;

use crate::convert::to_py;
use crate::errors::internal;

/// The model-facing result of one call. `status` is one of `"ok"`,
/// `"rate_limited"`, `"quota_exhausted"`, `"timed_out"` and `"error"`;
/// fields that do not apply to it are `None`.
#[pyclass(name = "Outcome", module = "sluice", frozen)]
pub(crate) struct PyOutcome {
    pub(crate) outcome: Outcome,
}

impl PyOutcome {
    pub(crate) fn new(outcome: Outcome) -> Self {
        PyOutcome { outcome }
    }
}

#[pymethods]
impl PyOutcome {
    /// `"ok"`, `"rate_limited"`, `"quota_exhausted"`, `"timed_out"` or `"error"`.
    #[getter]
    fn status(&self) -> &'static str {
        self.outcome.status()
    }

    /// True when `status == "ok"`.
    #[getter]
    fn ok(&self) -> bool {
        self.outcome.is_ok()
    }

    /// How long to wait before re-issuing the call (deferrals and spent quotas).
    #[getter]
    fn retry_after_ms(&self) -> Option<u64> {
        match &self.outcome {
            Outcome::RateLimited { retry_after_ms, .. }
            | Outcome::QuotaExhausted { retry_after_ms, .. } => Some(*retry_after_ms),
            _ => None,
        }
    }

    /// Why it was deferred: `"throttled"`, `"shed"`, `"budget"` or `"turn_budget"`.
    #[getter]
    fn reason(&self) -> Option<&'static str> {
        match &self.outcome {
            Outcome::RateLimited { reason, .. } => Some(reason.as_str()),
            _ => None,
        }
    }

    /// The scope (bucket) that deferred it, e.g. `"api_key"`.
    #[getter]
    fn scope(&self) -> Option<&str> {
        match &self.outcome {
            Outcome::RateLimited { scope, .. } | Outcome::QuotaExhausted { scope, .. } => {
                Some(scope)
            }
            _ => None,
        }
    }

    /// One sentence the model can act on.
    #[getter]
    fn hint(&self) -> Option<&str> {
        match &self.outcome {
            Outcome::RateLimited { hint, .. }
            | Outcome::QuotaExhausted { hint, .. }
            | Outcome::TimedOut { hint, .. } => Some(hint),
            _ => None,
        }
    }

    /// The upstream HTTP status, when there was a response.
    #[getter]
    fn http_status(&self) -> Option<u16> {
        match &self.outcome {
            Outcome::Ok { http_status, .. } => Some(*http_status),
            Outcome::Error { http_status, .. } => *http_status,
            _ => None,
        }
    }

    /// The upstream body of an `ok` outcome: JSON as Python values, other text as `str`.
    #[getter]
    fn body(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        match &self.outcome {
            Outcome::Ok { body, .. } => to_py(py, body),
            _ => Ok(py.None()),
        }
    }

    /// What went wrong, for an `error` outcome.
    #[getter]
    fn message(&self) -> Option<&str> {
        match &self.outcome {
            Outcome::Error { message, .. } => Some(message),
            _ => None,
        }
    }

    /// The deadline a `timed_out` call had.
    #[getter]
    fn after_ms(&self) -> Option<u64> {
        match &self.outcome {
            Outcome::TimedOut { after_ms, .. } => Some(*after_ms),
            _ => None,
        }
    }

    /// The outcome as the sidecar returns it: what the model should see.
    fn to_dict(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        // Through the JSON text, so the keys keep the sidecar's order.
        let text = self.to_json()?;
        Ok(py.import("json")?.call_method1("loads", (text,))?.unbind())
    }

    /// The outcome as JSON text, e.g. for a tool message.
    fn to_json(&self) -> PyResult<String> {
        serde_json::to_string(&self.outcome)
            .map_err(|error| internal(format!("cannot serialize an outcome: {error}")))
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .cast::<PyOutcome>()
            .is_ok_and(|other| other.get().outcome == self.outcome)
    }

    fn __repr__(&self) -> String {
        let json = serde_json::to_string(&self.outcome).unwrap_or_default();
        format!("Outcome({json})")
    }
}
