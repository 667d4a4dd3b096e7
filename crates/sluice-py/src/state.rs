//! What a gate and the turns it opens share, in a file of its own so that
//! `gate.rs` (which opens turns) and `turn.rs` (which reads the gate) each
//! import it without importing each other.

use std::collections::BTreeMap;
use std::sync::Arc;

use sluice::Gate;
use sluice_config::{ToolSpec, Upstream};
use sluice_http::trace::Tracer;
use sluice_redis::RedisBudget;

use crate::executor::PyExecutor;

/// What a gate and its turns share.
pub(crate) struct GateState {
    pub(crate) gate: Gate<PyExecutor>,
    pub(crate) tools: BTreeMap<String, ToolSpec>,
    pub(crate) upstreams: BTreeMap<String, Upstream>,
    /// Kept for the gate's life: the shared budget's connection and tasks.
    pub(crate) _budget: Option<Arc<RedisBudget>>,
    /// Where each call's span goes, when the configuration turns traces on.
    pub(crate) tracer: Option<Arc<Tracer>>,
}
