//! One call's fixed facts, resolved once before any step runs.

use std::sync::Arc;

use crate::call::{Call, Route};
use crate::config::Spend;
use crate::deadline::Deadline;
use crate::engine::Credential;
use crate::scope::Ask;

/// A call with its route, its credential, its deadline, and what it spends.
pub(super) struct Job<'a, P> {
    pub(super) call: &'a Call<P>,
    pub(super) route: &'a Route,
    pub(super) credential: &'a Credential,
    pub(super) deadline: Deadline,
    /// Its tool's group, costs and settles (empty for a plain call).
    pub(super) spend: Arc<Spend>,
    /// Its priority and priced costs.
    pub(super) ask: Ask,
}
