//! The table of live scopes, found by credential and scope name; idle scopes are evicted.

use std::hash::BuildHasher;
use std::sync::Arc;

use hashbrown::HashTable;
use parking_lot::{Mutex, MutexGuard};

use super::{Scope, ScopeRef};
use crate::hash::{BuildFastHasher, FastMap};
use crate::limiter::Micros;
use crate::signal::DEFAULT_SCOPE;

/// Scopes examined for eviction per look-up that creates one: idle scopes
/// leave at least as fast as new ones arrive, and no look-up ever pays for
/// more than two.
const EXAMINED_PER_INSERT: usize = 2;

/// Buckets the hand passes per scope it is to examine, at most: a table
/// between its growths is from 7/16 to 7/8 full, so eight buckets nearly
/// always hold the two scopes an insert examines, and a sparse table
/// (most of its scopes evicted) costs a look-up no more than eight.
const BUCKETS_PER_EXAMINED: usize = 4;

/// Look-ups of a live scope per scope examined. The table only grows on an
/// insert, which pays for its own room; a look-up that finds its scope
/// examines one now and then, so that idle scopes still leave a table that
/// stopped growing. Examining is a cache miss or more for each scope on a
/// large table, so it is not paid on every call. A credential's own scope
/// found through its record counts the same way
/// ([`Credential::own_scope`](crate::engine::Credential::own_scope)).
pub(crate) const HITS_PER_EXAMINED: u32 = 8;

/// Asked before forgetting an idle scope that one more holder keeps: gives
/// it up and says so if that holder is the scope's credential's record,
/// which keeps its own scope ([`Registry::get`]).
pub(crate) type Release<'a> = &'a dyn Fn(&Scope) -> bool;

/// Live scopes. A scope is only evicted while nobody holds it and it is as
/// good as fresh, so recreating it on the next call changes nothing. A
/// credential's record keeps its own scope besides the table; `release`
/// takes it from the record when the scope is to be forgotten.
///
/// One flat table holds every scope, found by the hash of its credential
/// and name and compared on the names the scope itself keeps: a look-up on
/// a table of a million is one probe and the scope, not a credential's
/// entry, then its own map of scopes, then the scope (each a cache miss),
/// and an entry is one pointer.
///
/// Eviction is incremental, like a clock hand sweeping the table's buckets
/// in order: a look-up examines the scopes in the next ones (two when it
/// creates a scope, one every eight look-ups otherwise), evicting those
/// idle. A sweep of the whole table instead would, with 100,000 keys, hold
/// the lock for milliseconds while every call waits. The hand is a bucket
/// number, not a ring of its own: a ring held every scope a second time,
/// 8 bytes and a reference each (issue 18, the memory of an idle scope).
/// When the table grows its scopes move, and a sweep may pass one twice or
/// not at all; the next sweep sees it.
#[derive(Debug)]
pub(crate) struct Registry {
    table: Mutex<Table>,
    hasher: BuildFastHasher,
    idle: Micros,
    /// Scopes forgotten so far, for tests that must know eviction ran.
    #[cfg(test)]
    pub(crate) forgotten: std::sync::atomic::AtomicUsize,
}

#[derive(Debug, Default)]
struct Table {
    scopes: HashTable<ScopeRef>,
    /// Per credential with any, its scopes other than its own
    /// ([`DEFAULT_SCOPE`]): the server-reported ones and groups, which are
    /// capped per credential.
    others: FastMap<Arc<str>, usize>,
    /// The next bucket the eviction hand examines (taken modulo the
    /// table's buckets, which change as it grows).
    hand: usize,
    /// Look-ups that found their scope since one was last examined.
    hits: u32,
}

impl Registry {
    pub(crate) fn new(idle: Micros) -> Self {
        Registry {
            table: Mutex::new(Table::default()),
            hasher: BuildFastHasher::default(),
            idle,
            #[cfg(test)]
            forgotten: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        self.table.lock()
    }

    fn hash(&self, credential: &str, name: &str) -> u64 {
        self.hasher.hash_one((credential, name))
    }

    /// The scope `(credential, name)`, created by `make` if absent (which
    /// must make it with these names). `release` is asked before an idle
    /// scope held once more than by the table is forgotten.
    pub(crate) fn get(
        &self,
        credential: &Arc<str>,
        name: &str,
        now: Micros,
        make: impl FnOnce() -> Scope,
        release: Release<'_>,
    ) -> ScopeRef {
        let hash = self.hash(credential, name);
        let mut table = self.table();
        let found = table.find(hash, credential, name).cloned();
        let (scope, examined) = match found {
            Some(scope) => {
                table.hits += 1;
                let examined = if table.hits == HITS_PER_EXAMINED {
                    table.hits = 0;
                    1
                } else {
                    0
                };
                (scope, examined)
            }
            None => {
                let scope = ScopeRef::new(make());
                debug_assert!(scope.is(credential, name));
                table.insert(scope.clone(), self);
                (scope, EXAMINED_PER_INSERT)
            }
        };
        scope.touch(now);
        table.examine(examined, now, self, release);
        scope
    }

    /// Examines one scope for eviction, as a look-up that found its scope
    /// does every [`HITS_PER_EXAMINED`] times.
    pub(crate) fn examine_one(&self, now: Micros, release: Release<'_>) {
        self.table().examine(1, now, self, release);
    }

    /// The scope if it exists; never creates one.
    pub(crate) fn find(&self, credential: &str, name: &str) -> Option<ScopeRef> {
        let hash = self.hash(credential, name);
        self.table().find(hash, credential, name).cloned()
    }

    /// Number of scopes a credential has now.
    pub(crate) fn count(&self, credential: &str) -> usize {
        let hash = self.hash(credential, DEFAULT_SCOPE);
        let table = self.table();
        let own = table.find(hash, credential, DEFAULT_SCOPE).is_some();
        usize::from(own) + table.others.get(credential).copied().unwrap_or(0)
    }

    /// Every live scope.
    pub(crate) fn all(&self) -> Vec<ScopeRef> {
        let mut scopes: Vec<_> = self.table().scopes.iter().cloned().collect();
        scopes.sort_by(|a, b| (&a.credential, &a.name).cmp(&(&b.credential, &b.name)));
        scopes
    }

    /// Total number of live scopes.
    pub(crate) fn len(&self) -> usize {
        self.table().scopes.len()
    }
}

impl Table {
    /// The scope `name` of `credential`, whose hash is `hash`.
    fn find(&self, hash: u64, credential: &str, name: &str) -> Option<&ScopeRef> {
        self.scopes.find(hash, |scope| scope.is(credential, name))
    }

    /// Adds `scope`, placed by its own names (so that the table stays
    /// whole even if a maker named it otherwise than it was asked for).
    fn insert(&mut self, scope: ScopeRef, registry: &Registry) {
        let hash = registry.hash(&scope.credential, &scope.name);
        if &*scope.name != DEFAULT_SCOPE {
            *self.others.entry(scope.credential.clone()).or_default() += 1;
        }
        self.scopes.insert_unique(hash, scope, |scope| {
            registry.hash(&scope.credential, &scope.name)
        });
    }

    /// Examines the scopes in the next buckets, `count` of them at most:
    /// forgets those idle and unheld (or held only by a holder that
    /// `release` makes give them up).
    fn examine(&mut self, count: usize, now: Micros, registry: &Registry, release: Release<'_>) {
        let buckets = self.scopes.num_buckets();
        let mut examined = 0;
        for _ in 0..count * BUCKETS_PER_EXAMINED {
            if examined == count || buckets == 0 {
                return;
            }
            let index = self.hand % buckets;
            self.hand = index + 1;
            let Some(scope) = self.scopes.get_bucket(index) else {
                continue;
            };
            examined += 1;
            // Holding the lock, no new reference can be handed out, so a
            // count of one means only the table holds it; of two, a holder
            // that `release` can make give it up (asked last: it does).
            let holders = ScopeRef::count(scope);
            if holders <= 2
                && scope.is_evictable(now, registry.idle)
                && (holders == 1 || release(scope))
                && let Ok(entry) = self.scopes.get_bucket_entry(index)
            {
                let (scope, _) = entry.remove();
                self.forget(&scope);
                #[cfg(test)]
                registry
                    .forgotten
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }

    /// Counts `scope`, just removed, out of its credential's others.
    fn forget(&mut self, scope: &Scope) {
        if &*scope.name != DEFAULT_SCOPE
            && let Some(others) = self.others.get_mut(&*scope.credential)
        {
            *others = others.saturating_sub(1);
            if *others == 0 {
                self.others.remove(&*scope.credential);
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

    fn get(registry: &Registry, credential: &str, now: Micros) -> ScopeRef {
        registry.get(
            &Arc::from(credential),
            "api_key",
            now,
            || make(credential, now),
            &|_| false,
        )
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
    fn a_scope_is_forgotten_only_once_idle_the_whole_time_and_within_a_second_after() {
        let registry = Registry::new(IDLE);
        // Used at 1.5 s: its time is kept in whole seconds, rounded up.
        get(&registry, "a", 1_500_000);
        // Enough look-ups of another scope to sweep the table many times.
        let sweep = |now| {
            for _ in 0..20 * HITS_PER_EXAMINED {
                get(&registry, "b", now);
            }
        };
        sweep(IDLE + 1_500_000);
        assert_eq!(registry.count("a"), 1, "idle exactly the threshold: kept");
        sweep(IDLE + 1_999_999);
        assert_eq!(
            registry.count("a"),
            1,
            "a microsecond short of the rounded second"
        );
        sweep(IDLE + 2_000_000);
        assert_eq!(
            registry.count("a"),
            0,
            "forgotten within a second of the threshold"
        );
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
        // sweeps of the table's four scopes (and its empty buckets).
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
    fn a_credential_counts_its_own_and_its_reported_scopes() {
        let registry = Registry::new(IDLE);
        let credential: Arc<str> = Arc::from("k");
        let limits = CredentialConfig::with_rate("10/1s".parse().unwrap())
            .resolve("k", &Defaults::default())
            .unwrap();
        for name in ["search", "write"] {
            registry.get(
                &credential,
                name,
                0,
                || Scope::reported(credential.clone(), Arc::from(name), &limits, 0),
                &|_| false,
            );
        }
        get(&registry, "other", 0);
        assert_eq!(registry.count("k"), 2);
        get(&registry, "k", 0);
        assert_eq!(registry.count("k"), 3);
        assert_eq!(registry.count("other"), 1);
        assert!(registry.find("k", "search").is_some());
        assert!(registry.find("other", "search").is_none());
        // All idle: new keys evict them, and the counts follow.
        for i in 0..10 {
            get(&registry, &format!("new{i}"), IDLE + 1);
        }
        assert_eq!(registry.count("k"), 0);
        assert!(registry.table().others.is_empty());
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
        assert_eq!(again.status(later).scope, "api_key");
    }
}
