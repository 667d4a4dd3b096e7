//! The map of live scopes, keyed by credential then scope name; idle scopes are evicted.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use super::Scope;
use crate::limiter::Micros;

/// Scopes by credential, then by scope name.
type Map = HashMap<Arc<str>, HashMap<Arc<str>, Arc<Scope>>>;

/// Look-ups between sweeps for idle scopes.
const SWEEP_EVERY: u64 = 1_024;

/// Live scopes. A scope is only evicted while nobody holds it and it is as
/// good as fresh, so recreating it on the next call changes nothing.
#[derive(Debug)]
pub(crate) struct Registry {
    scopes: Mutex<Map>,
    lookups: AtomicU64,
    idle: Micros,
}

impl Registry {
    pub(crate) fn new(idle: Micros) -> Self {
        Registry {
            scopes: Mutex::new(HashMap::new()),
            lookups: AtomicU64::new(0),
            idle,
        }
    }

    fn map(&self) -> MutexGuard<'_, Map> {
        self.scopes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The scope `(credential, name)`, created by `make` if absent.
    pub(crate) fn get(
        &self,
        credential: &str,
        name: &str,
        now: Micros,
        make: impl FnOnce() -> Scope,
    ) -> Arc<Scope> {
        if self.lookups.fetch_add(1, Ordering::Relaxed) % SWEEP_EVERY == SWEEP_EVERY - 1 {
            self.sweep(now);
        }
        let mut map = self.map();
        let scopes = match map.get_mut(credential) {
            Some(scopes) => scopes,
            None => map.entry(Arc::from(credential)).or_default(),
        };
        let scope = match scopes.get(name) {
            Some(scope) => scope.clone(),
            None => {
                let scope = Arc::new(make());
                scopes.insert(scope.name.clone(), scope.clone());
                scope
            }
        };
        scope.touch(now);
        scope
    }

    /// The scope if it exists; never creates one.
    pub(crate) fn find(&self, credential: &str, name: &str) -> Option<Arc<Scope>> {
        self.map().get(credential)?.get(name).cloned()
    }

    /// Number of scopes a credential has now.
    pub(crate) fn count(&self, credential: &str) -> usize {
        self.map().get(credential).map_or(0, HashMap::len)
    }

    /// Every live scope.
    pub(crate) fn all(&self) -> Vec<Arc<Scope>> {
        let map = self.map();
        let mut scopes: Vec<_> = map
            .values()
            .flat_map(|scopes| scopes.values().cloned())
            .collect();
        scopes.sort_by(|a, b| (&a.credential, &a.name).cmp(&(&b.credential, &b.name)));
        scopes
    }

    /// Forgets idle scopes nobody holds.
    pub(crate) fn sweep(&self, now: Micros) {
        let mut map = self.map();
        for scopes in map.values_mut() {
            // Holding the map lock, no new reference can be handed out, so a
            // count of one means only the map holds it.
            scopes.retain(|_, scope| {
                Arc::strong_count(scope) > 1 || !scope.is_evictable(now, self.idle)
            });
        }
        map.retain(|_, scopes| !scopes.is_empty());
    }

    /// Total number of live scopes.
    pub(crate) fn len(&self) -> usize {
        self.map().values().map(HashMap::len).sum()
    }
}
