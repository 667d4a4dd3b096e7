//! A credential at run time: its resolved limits, its retry budget, and the scopes its tools are bound to.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::config::{Defaults, Limits};
use crate::retry::RetryBudget;

/// A credential at run time.
#[derive(Debug)]
pub(crate) struct Credential {
    pub(crate) name: Arc<str>,
    pub(crate) limits: Limits,
    pub(crate) retry: Mutex<RetryBudget>,
    /// Tool -> scopes the server reported on that tool's responses.
    pub(crate) bindings: Mutex<HashMap<Arc<str>, Vec<Arc<str>>>>,
}

impl Credential {
    pub(crate) fn new(name: Arc<str>, limits: Limits, defaults: &Defaults) -> Self {
        Credential {
            name,
            limits,
            retry: Mutex::new(RetryBudget::new(
                defaults.retry_ratio,
                defaults.retry_floor,
                defaults.retry_window,
            )),
            bindings: Mutex::new(HashMap::new()),
        }
    }
}
