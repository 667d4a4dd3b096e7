//! The registry of turns by id: a `turn_id` (or `x-sluice-turn-id`) names
//! one engine [`Turn`], so its single-flight and read cache span every
//! request that carries it; idle ids are forgotten, and their count is bounded.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use sluice::{Executor, Gate, Turn};
use tokio::time::Instant;

/// The most turns remembered at once; past it the least recently used idle
/// one is forgotten, so turn ids cannot grow memory without bound.
pub(crate) const MAX_TURNS: usize = 10_000;

/// A turn is forgotten after being idle this many times its cache TTL: by
/// then its cache has expired and nothing is left to share.
const IDLE_TTLS: u32 = 4;

struct Entry<E> {
    turn: Turn<E>,
    last_used: Instant,
    /// One clone per request using the turn; more than one: in use.
    users: Arc<()>,
}

struct Map<E> {
    entries: HashMap<String, Entry<E>>,
    last_sweep: Instant,
}

/// Engine turns by `turn_id`, each held by leases while requests use it.
pub(crate) struct TurnRegistry<E> {
    map: Arc<Mutex<Map<E>>>,
    idle: Duration,
    max: usize,
}

/// A request's hold on a registered turn; while it lives the turn is not forgotten.
pub(crate) struct TurnLease<E> {
    /// The turn.
    pub(crate) turn: Turn<E>,
    registration: Option<Registration<E>>,
}

/// Where a lease's turn is registered: the lease marks it in use (`users`)
/// and touches it when done.
struct Registration<E> {
    map: Arc<Mutex<Map<E>>>,
    id: String,
    users: Arc<()>,
}

impl<E> Drop for TurnLease<E> {
    fn drop(&mut self) {
        // Idleness counts from the end of the last request, not its start.
        if let Some(registration) = self.registration.take() {
            let mut map = registration.map.lock();
            if let Some(entry) = map.entries.get_mut(&registration.id)
                && Arc::ptr_eq(&entry.users, &registration.users)
            {
                entry.last_used = Instant::now();
            }
        }
    }
}

impl<E: Executor> TurnRegistry<E> {
    /// Turns forgotten after `IDLE_TTLS` times `cache_ttl` of idleness, at most `max` of them.
    pub(crate) fn new(cache_ttl: Duration, max: usize) -> Self {
        TurnRegistry {
            map: Arc::new(Mutex::new(Map {
                entries: HashMap::new(),
                last_sweep: Instant::now(),
            })),
            idle: cache_ttl.saturating_mul(IDLE_TTLS),
            max,
        }
    }

    /// The turn named `id` (created if new), or a turn of its own for a
    /// request without an id.
    pub(crate) fn lease(&self, id: Option<&str>, gate: &Gate<E>) -> TurnLease<E> {
        let Some(id) = id else {
            return TurnLease {
                turn: gate.turn(),
                registration: None,
            };
        };
        let now = Instant::now();
        let mut map = self.map.lock();
        if now.saturating_duration_since(map.last_sweep) >= self.idle / 4 {
            self.sweep(&mut map, now);
        }
        if !map.entries.contains_key(id) && map.entries.len() >= self.max {
            self.sweep(&mut map, now);
            if map.entries.len() >= self.max && !evict_oldest_idle(&mut map) {
                tracing::warn!(
                    max = self.max,
                    "every remembered turn is in use; this request gets a turn of its own"
                );
                return TurnLease {
                    turn: gate.turn(),
                    registration: None,
                };
            }
        }
        let entry = map.entries.entry(id.to_owned()).or_insert_with(|| Entry {
            turn: gate.turn(),
            last_used: now,
            users: Arc::new(()),
        });
        entry.last_used = now;
        TurnLease {
            turn: entry.turn.clone(),
            registration: Some(Registration {
                map: self.map.clone(),
                id: id.to_owned(),
                users: entry.users.clone(),
            }),
        }
    }

    /// Turns remembered now.
    pub(crate) fn len(&self) -> usize {
        self.map.lock().entries.len()
    }

    fn sweep(&self, map: &mut Map<E>, now: Instant) {
        map.last_sweep = now;
        let idle = self.idle;
        map.entries.retain(|_, entry| {
            Arc::strong_count(&entry.users) > 1
                || now.saturating_duration_since(entry.last_used) < idle
        });
    }
}

/// Forgets the least recently used turn nobody is using; false if all are in use.
fn evict_oldest_idle<E>(map: &mut Map<E>) -> bool {
    let oldest = map
        .entries
        .iter()
        .filter(|(_, entry)| Arc::strong_count(&entry.users) == 1)
        .min_by_key(|(_, entry)| entry.last_used)
        .map(|(id, _)| id.clone());
    match oldest {
        Some(id) => {
            map.entries.remove(&id);
            true
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use sluice::{CredentialConfig, GateConfig, ToolConfig, executor_fn};

    use super::*;

    fn gate() -> Gate<impl Executor<Payload = serde_json::Value>> {
        let config = GateConfig::default()
            .credential("c", CredentialConfig::default())
            .tool("t", ToolConfig::read("c"));
        let executor =
            executor_fn(|_request| async { Ok(http::Response::new(Bytes::from_static(b"{}"))) });
        Gate::builder(config, executor).seed(1).build().unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn one_id_one_turn_until_idle() {
        let gate = gate();
        let turns = TurnRegistry::new(Duration::from_secs(3), 100);
        let a = turns.lease(Some("t1"), &gate);
        let b = turns.lease(Some("t1"), &gate);
        // Same turn: a request through one is counted by the other.
        a.turn
            .call(sluice::Call::new("t", serde_json::json!({"q": 1})))
            .await;
        assert_eq!(b.turn.upstream_requests(), 1);
        drop((a, b));
        assert_eq!(turns.len(), 1);

        tokio::time::advance(Duration::from_secs(13)).await;
        let fresh = turns.lease(Some("t1"), &gate);
        assert_eq!(
            fresh.turn.upstream_requests(),
            0,
            "idle turns are forgotten"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_turn_in_use_is_never_forgotten_and_the_count_is_bounded() {
        let gate = gate();
        let turns = TurnRegistry::new(Duration::from_secs(3), 2);
        let held = turns.lease(Some("busy"), &gate);
        held.turn
            .call(sluice::Call::new("t", serde_json::json!({})))
            .await;
        tokio::time::advance(Duration::from_secs(60)).await;
        drop(turns.lease(Some("x"), &gate));
        drop(turns.lease(Some("y"), &gate));
        assert_eq!(turns.len(), 2);
        let again = turns.lease(Some("busy"), &gate);
        assert_eq!(again.turn.upstream_requests(), 1);
        // Full and everything in use: a turn of its own, nothing forgotten.
        let _x = turns.lease(Some("x"), &gate);
        let lone = turns.lease(Some("z"), &gate);
        assert_eq!(lone.turn.upstream_requests(), 0);
        assert_eq!(turns.len(), 2);
    }
}
