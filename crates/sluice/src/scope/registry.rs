//! The map of live scopes, keyed by credential then scope name; idle scopes are evicted.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};

use super::Scope;
use crate::hash::FastMap;
use crate::limiter::Micros;

/// Scopes by credential, then by scope name.
type Map = FastMap<Arc<str>, FastMap<Arc<str>, Arc<Scope>>>;

/// Scopes examined for eviction per look-up that creates one: idle scopes
/// leave at least as fast as new ones arrive, and no look-up ever pays for
/// more than two.
const EXAMINED_PER_INSERT: usize = 2;

/// Look-ups of a live scope per scope examined. The map only grows on an
/// insert, which pays for its own room; a look-up that finds its scope
/// examines one now and then, so that idle scopes still leave a map that
/// stopped growing. Examining is a cache miss or more for each scope on a
/// large map, so it is not paid on every call.
const HITS_PER_EXAMINED: u32 = 8;

/// Live scopes. A scope is only evicted while nobody holds it and it is as
/// good as fresh, so recreating it on the next call changes nothing.
///
/// Eviction is incremental, like a clock hand: every live scope has one
/// place in a ring, and a look-up examines the next ones (two when it
/// creates a scope, one every eight look-ups otherwise), evicting them or
/// sending them round again. A sweep of the whole map instead would, with
/// 100,000 keys, hold the lock for milliseconds while every call waits.
#[derive(Debug)]
pub(crate) struct Registry {
    table: Mutex<Table>,
    idle: Micros,
}

#[derive(Debug, Default)]
struct Table {
    map: Map,
    /// Every live scope, once each: examined without a look-up.
    ring: VecDeque<Arc<Scope>>,
    /// Look-ups that found their scope since one was last examined.
    hits: u32,
}

impl Registry {
    pub(crate) fn new(idle: Micros) -> Self {
        Registry {
            table: Mutex::new(Table::default()),
            idle,
        }
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        self.table.lock()
    }

    /// The scope `(credential, name)`, created by `make` if absent. The
    /// map keeps `credential` itself (the credential's one name, not a
    /// copy), so a look-up's comparison reads bytes the caller has in
    /// cache.
    pub(crate) fn get(
        &self,
        credential: &Arc<str>,
        name: &str,
        now: Micros,
        make: impl FnOnce() -> Scope,
    ) -> Arc<Scope> {
        let mut table = self.table();
        let Table { map, ring, hits } = &mut *table;
        let scopes = match map.get_mut(&**credential) {
            Some(scopes) => scopes,
            None => map.entry(credential.clone()).or_default(),
        };
        let (scope, examined) = match scopes.get(name) {
            Some(scope) => {
                *hits += 1;
                let examined = if *hits == HITS_PER_EXAMINED {
                    *hits = 0;
                    1
                } else {
                    0
                };
                (scope.clone(), examined)
            }
            None => {
                let scope = Arc::new(make());
                scopes.insert(scope.name.clone(), scope.clone());
                ring.push_back(scope.clone());
                (scope, EXAMINED_PER_INSERT)
            }
        };
        scope.touch(now);
        table.examine(examined, now, self.idle);
        scope
    }

    /// The scope if it exists; never creates one.
    pub(crate) fn find(&self, credential: &str, name: &str) -> Option<Arc<Scope>> {
        self.table().map.get(credential)?.get(name).cloned()
    }

    /// Number of scopes a credential has now.
    pub(crate) fn count(&self, credential: &str) -> usize {
        self.table().map.get(credential).map_or(0, HashMap::len)
    }

    /// Every live scope.
    pub(crate) fn all(&self) -> Vec<Arc<Scope>> {
        let table = self.table();
        let map = &table.map;
        let mut scopes: Vec<_> = map
            .values()
            .flat_map(|scopes| scopes.values().cloned())
            .collect();
        scopes.sort_by(|a, b| (&a.credential, &a.name).cmp(&(&b.credential, &b.name)));
        scopes
    }

    /// Total number of live scopes.
    pub(crate) fn len(&self) -> usize {
        self.table().map.values().map(HashMap::len).sum()
    }
}

impl Table {
    /// Examines the next scopes of the ring: forgets those idle and
    /// unheld, sends the others round again.
    fn examine(&mut self, count: usize, now: Micros, idle: Micros) {
        for _ in 0..count.min(self.ring.len()) {
            let Some(scope) = self.ring.pop_front() else {
                return;
            };
            // Holding the lock, no new reference can be handed out, so a
            // count of two means only the map and the ring hold it.
            if Arc::strong_count(&scope) == 2 && scope.is_evictable(now, idle) {
                if let Some(scopes) = self.map.get_mut(&*scope.credential) {
                    scopes.remove(&*scope.name);
                    if scopes.is_empty() {
                        self.map.remove(&*scope.credential);
                    }
                }
            } else {
                self.ring.push_back(scope);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{CredentialConfig, Defaults};

    const IDLE: Micros = 60_000_000;

    fn make(credential: &str, now: Micros) -> Scope {
        let limits = CredentialConfig::with_rate("10/1s".parse().unwrap())
            .resolve(credential, &Defaults::default())
            .unwrap();
        Scope::primary(Arc::from(credential), Arc::from("api_key"), &limits, now)
    }

    fn get(registry: &Registry, credential: &str, now: Micros) -> Arc<Scope> {
        registry.get(&Arc::from(credential), "api_key", now, || {
            make(credential, now)
        })
    }

    #[test]
    fn idle_scopes_are_forgotten_as_new_ones_arrive() {
        let registry = Registry::new(IDLE);
        for i in 0..1_000 {
            get(&registry, &format!("old{i}"), 0);
        }
        assert_eq!(registry.len(), 1_000);
        // Long after, a stream of new keys: each look-up examines two
        // scopes, so the old ones are gone within 500 look-ups and the
        // total never grows past where it started.
        let later = IDLE + 1;
        for i in 0..1_000 {
            get(&registry, &format!("new{i}"), later);
            assert!(registry.len() <= 1_000, "{} live at {i}", registry.len());
        }
        assert_eq!(registry.count("old0"), 0);
        assert_eq!(registry.count("new999"), 1);
    }

    #[test]
    fn scopes_held_or_recently_used_stay() {
        let registry = Registry::new(IDLE);
        let held = get(&registry, "held", 0);
        get(&registry, "recent", 0);
        get(&registry, "stale", 0);
        let later = IDLE + 1;
        // "recent" was used again just before the examinations.
        get(&registry, "recent", later - 1);
        // Look-ups of a live scope examine one in HITS_PER_EXAMINED: ten
        // rounds of the ring's four scopes.
        for _ in 0..40 * HITS_PER_EXAMINED {
            get(&registry, "other", later);
        }
        assert_eq!(registry.count("stale"), 0);
        assert_eq!(registry.count("held"), 1);
        assert_eq!(registry.count("recent"), 1);
        drop(held);
        for _ in 0..40 * HITS_PER_EXAMINED {
            get(&registry, "other", later + IDLE);
        }
        assert_eq!(registry.count("held"), 0);
        assert_eq!(registry.count("recent"), 0);
    }

    #[test]
    fn a_forgotten_scope_comes_back_fresh_and_is_counted_once() {
        let registry = Registry::new(IDLE);
        get(&registry, "a", 0);
        let later = IDLE + 1;
        get(&registry, "b", later);
        assert_eq!(registry.count("a"), 0);
        let again = get(&registry, "a", later);
        assert_eq!(registry.len(), 2);
        assert_eq!(registry.table().ring.len(), 2);
        assert_eq!(again.status(later).scope, "api_key");
    }
}
