//! The tower [`Layer`]: wraps an HTTP client service so that its requests go through a sluice gate.

use std::sync::Arc;

use sluice::Gate;
use tower_layer::Layer;

use crate::call::Dispatch;
use crate::service::SluiceService;

/// Wraps HTTP client services in [`SluiceService`]; make it with
/// [`Sluice::layer`](crate::Sluice::layer). Every service it makes shares
/// the gate, and so the limits.
pub struct SluiceLayer<F> {
    gate: Gate<Dispatch>,
    classify: Arc<F>,
}

impl<F> SluiceLayer<F> {
    pub(crate) fn new(gate: Gate<Dispatch>, classify: F) -> Self {
        SluiceLayer {
            gate,
            classify: Arc::new(classify),
        }
    }
}

impl<F> Clone for SluiceLayer<F> {
    fn clone(&self) -> Self {
        SluiceLayer {
            gate: self.gate.clone(),
            classify: self.classify.clone(),
        }
    }
}

impl<F> std::fmt::Debug for SluiceLayer<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SluiceLayer")
            .field("gate", &self.gate)
            .finish_non_exhaustive()
    }
}

impl<S, F> Layer<S> for SluiceLayer<F> {
    type Service = SluiceService<S, F>;

    fn layer(&self, inner: S) -> Self::Service {
        SluiceService::new(inner, self.gate.clone(), self.classify.clone())
    }
}
