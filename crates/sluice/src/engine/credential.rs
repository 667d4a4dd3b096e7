//! A credential at run time: its resolved limits, its retry budget, the scopes its tools are bound to, and its own scope once made.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use parking_lot::Mutex;

use crate::config::{Defaults, Limits};
use crate::limiter::Micros;
use crate::retry::RetryBudget;
use crate::scope::{HITS_PER_EXAMINED, Scope, ScopeRef, Seats};

/// A credential at run time.
#[derive(Debug)]
pub(crate) struct Credential {
    pub(crate) name: Arc<str>,
    pub(crate) limits: Limits,
    pub(crate) retry: RetryBudget,
    /// Tool -> scopes the server reported on that tool's responses.
    pub(crate) bindings: Mutex<HashMap<Arc<str>, Vec<Arc<str>>>>,
    /// Whether any tool has a binding yet: until one does, a call's scopes
    /// are found without the bindings' lock.
    pub(crate) bound: AtomicBool,
    /// Calls sleeping until their start slot, by priority.
    pub(crate) seats: Seats,
    /// Whether a call may take the slots of waiting calls it outranks back
    /// into the cells: enforced, not shared (a shared grant is Redis's, not
    /// ours to give back), and no bucket (a bucket gives a slot back only
    /// while nothing was charged after it, so taking one could lose it for
    /// nothing).
    pub(crate) outranks: bool,
    /// Whether a call may give back the grants of waiting calls it
    /// outranks and ask for an earlier start: shared, enforced, and no
    /// bucket (the shared windows are exact logs, from which a grant comes
    /// back whole).
    pub(crate) outranks_shared: bool,
    /// On a shared credential whose calls the shared budget places by
    /// their spend (several windows, groups, units or a low share), this
    /// process's calls ask it one at a time, in the order their local slots
    /// were planned. A spend places a start that does not fit as asked
    /// after the latest one granted, and a bucket keeps one time, not a
    /// log, so asks that overtook each other on the way to Redis pushed a
    /// burst seconds out (issue 50: three of five calls deferred 4.2 s).
    /// A spend's answer comes back at once (the engine sleeps for its
    /// start), so one ask waits only for the round trips of those before
    /// it. A credential of one request window asks at once: its grants
    /// sleep until their slot inside the budget, which a queue would turn
    /// into one slot at a time.
    pub(crate) asks_in_order: Option<tokio::sync::Mutex<()>>,
    /// The credential's own scope once a call made it, found here through
    /// the record the call's route already holds instead of by the
    /// registry's look-up (issue 18: a call on one of a million idle
    /// credentials reads two fewer lines from memory, the registry's probe).
    /// Only ever a scope the registry holds too: the registry empties this
    /// before it forgets the scope ([`Credential::release_own`]), so status
    /// and eviction see one scope per credential.
    own: Mutex<Own>,
}

/// The credential's own scope, if a call made it, and the look-ups that
/// found it here since the registry last examined a scope for eviction.
#[derive(Debug, Default)]
struct Own {
    scope: Option<ScopeRef>,
    hits: u32,
}

impl Credential {
    /// Whether a call may swap starts with waiting calls it outranks that
    /// spend exactly what it does, or take the start of one whose spend
    /// covers its own: whenever limits are enforced (neither gives back
    /// anything but the caller's own latest start, so buckets and shared
    /// grants allow them).
    pub(crate) fn swaps(&self) -> bool {
        self.limits.enforce
    }

    pub(crate) fn new(name: Arc<str>, limits: Limits, defaults: &Defaults) -> Self {
        let exact = limits.enforce
            && limits.burst.is_none()
            && limits.groups.values().all(|group| group.burst.is_none())
            && limits.units.iter().all(|unit| unit.burst.is_none());
        let (outranks, outranks_shared) = (exact && !limits.shared, exact && limits.shared);
        let one_window = limits.windows.is_empty()
            && limits.groups.is_empty()
            && limits.units.is_empty()
            && limits.low_share.is_none();
        let in_order = limits.enforce && limits.shared && !one_window;
        let asks_in_order = in_order.then(Default::default);
        Credential {
            name,
            limits,
            retry: RetryBudget::new(
                defaults.retry_ratio,
                defaults.retry_floor,
                defaults.retry_window,
            ),
            bindings: Mutex::new(HashMap::new()),
            bound: AtomicBool::new(false),
            seats: Seats::default(),
            outranks,
            outranks_shared,
            asks_in_order,
            own: Mutex::default(),
        }
    }

    /// The credential's own scope, if it is kept here, used `now`; and
    /// whether this look-up is the one in [`HITS_PER_EXAMINED`] that should
    /// examine a scope for eviction, as a look-up in the registry does.
    pub(crate) fn own_scope(&self, now: Micros) -> Option<(ScopeRef, bool)> {
        let mut own = self.own.lock();
        let scope = own.scope.clone()?;
        scope.touch(now);
        own.hits += 1;
        let examine = own.hits == HITS_PER_EXAMINED;
        if examine {
            own.hits = 0;
        }
        Some((scope, examine))
    }

    /// Keeps `scope`, the registry's scope of this credential, for the
    /// next calls' look-ups.
    pub(crate) fn keep_own(&self, scope: &ScopeRef) {
        let mut own = self.own.lock();
        if own.scope.is_none() {
            own.scope = Some(scope.clone());
        }
    }

    /// Gives up `scope` if it is the one kept here and nothing but the
    /// registry and this record holds it, so that the registry may forget
    /// it. The registry calls this holding its table's lock, so no call can
    /// find the scope there meanwhile, and this record's lock keeps calls
    /// from taking it here.
    pub(crate) fn release_own(&self, scope: &Scope) -> bool {
        let mut own = self.own.lock();
        let kept = own.scope.as_ref().is_some_and(|kept| {
            std::ptr::eq::<Scope>(&**kept, scope) && ScopeRef::count(kept) == 2
        });
        if kept {
            own.scope = None;
        }
        kept
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytes::Bytes;

    use super::*;
    use crate::config::{CredentialConfig, GateConfig};
    use crate::engine::Engine;
    use crate::executor::{FnExecutor, executor_fn};
    use crate::limiter::micros;
    use crate::signal::DEFAULT_SCOPE;

    type Executor = FnExecutor<
        fn(
            crate::executor::Request<serde_json::Value>,
        )
            -> std::future::Ready<Result<http::Response<Bytes>, crate::executor::TransportError>>,
    >;

    const IDLE: Duration = Duration::from_secs(60);

    fn engine(credentials: &[&str]) -> Engine<Executor> {
        let mut config = credentials
            .iter()
            .fold(GateConfig::default(), |config, name| {
                config.credential(name, CredentialConfig::with_rate("10/1s".parse().unwrap()))
            });
        config.defaults.scope_idle = IDLE;
        let answer: fn(_) -> _ = |_| std::future::ready(Ok(http::Response::new(Bytes::new())));
        Engine::new(config, executor_fn(answer), None, None, None).unwrap()
    }

    fn credential<'a>(engine: &'a Engine<Executor>, name: &str) -> &'a Credential {
        engine.credentials.get(name).unwrap()
    }

    fn kept(credential: &Credential) -> Option<ScopeRef> {
        credential.own.lock().scope.clone()
    }

    /// Enough look-ups of `name`'s own scope to sweep a small table many
    /// times over.
    fn sweep(engine: &Engine<Executor>, name: &str, now: Micros) {
        for _ in 0..40 * HITS_PER_EXAMINED {
            engine.primary(credential(engine, name), now);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_credential_keeps_its_own_scope_which_is_the_registry_s() {
        let engine = engine(&["a"]);
        let a = credential(&engine, "a");
        assert!(kept(a).is_none(), "no call yet");
        let first = engine.primary(a, 0);
        let second = engine.primary(a, 1);
        assert!(ScopeRef::ptr_eq(&first, &second));
        assert!(ScopeRef::ptr_eq(&first, &kept(a).unwrap()));
        let found = engine.scopes.find("a", DEFAULT_SCOPE).unwrap();
        assert!(ScopeRef::ptr_eq(&first, &found), "one scope, not two");
        assert_eq!(engine.scopes.count("a"), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_own_scope_is_forgotten_and_its_record_lets_it_go() {
        let engine = engine(&["a", "b"]);
        drop(engine.primary(credential(&engine, "a"), 0));
        drop(engine.primary(credential(&engine, "b"), 0));
        let later = micros(IDLE) + 2_000_000;
        // Only "b" is called from here on, each call finding its scope
        // through its record: one in HITS_PER_EXAMINED examines a scope, as
        // a look-up in the registry does.
        sweep(&engine, "b", later);
        assert_eq!(engine.scopes.count("a"), 0, "idle: forgotten");
        assert!(kept(credential(&engine, "a")).is_none(), "and let go");
        assert_eq!(engine.scopes.count("b"), 1, "in use: kept");
        // The next call makes it afresh, kept by the record and the registry alike.
        let again = engine.primary(credential(&engine, "a"), later);
        let found = engine.scopes.find("a", DEFAULT_SCOPE).unwrap();
        assert!(ScopeRef::ptr_eq(&again, &found));
        assert!(ScopeRef::ptr_eq(
            &again,
            &kept(credential(&engine, "a")).unwrap()
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn an_own_scope_a_call_holds_is_not_forgotten() {
        let engine = engine(&["a", "b"]);
        let held = engine.primary(credential(&engine, "a"), 0);
        let later = micros(IDLE) + 2_000_000;
        sweep(&engine, "b", later);
        assert_eq!(engine.scopes.count("a"), 1, "held by a call: kept");
        assert!(ScopeRef::ptr_eq(
            &held,
            &kept(credential(&engine, "a")).unwrap()
        ));
        drop(held);
        sweep(&engine, "b", later);
        assert_eq!(engine.scopes.count("a"), 0);
        assert!(kept(credential(&engine, "a")).is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_record_gives_up_neither_a_scope_a_call_holds_nor_another() {
        let engine = engine(&["a"]);
        let a = credential(&engine, "a");
        let own = engine.primary(a, 0);
        // The table, the record and `own`.
        assert!(!a.release_own(&own));
        assert!(ScopeRef::ptr_eq(&own, &kept(a).unwrap()), "still kept");
        // A scope of the same names that the record does not keep.
        let other = ScopeRef::new(Scope::primary(
            Arc::from("a"),
            Arc::from(DEFAULT_SCOPE),
            &a.limits,
            0,
        ));
        assert!(!a.release_own(&other));
        assert!(ScopeRef::ptr_eq(&own, &kept(a).unwrap()), "still kept");
    }

    /// Four threads on four credentials, each call a whole idle threshold
    /// after the one before it on any thread, so that scopes are forgotten
    /// and made while other calls find them: a scope a call holds
    /// is always the one the registry holds for its credential (never two
    /// scopes splitting one credential's limits), and the record keeps
    /// only that one.
    #[tokio::test]
    async fn calls_on_many_threads_see_one_scope_per_credential_through_eviction() {
        const NAMES: [&str; 4] = ["a", "b", "c", "d"];
        let engine = engine(&NAMES);
        let step = micros(IDLE) + 2_000_000;
        let clock = std::sync::atomic::AtomicU64::new(0);
        std::thread::scope(|threads| {
            for thread in 0..4 {
                let (engine, clock) = (&engine, &clock);
                threads.spawn(move || {
                    for i in 0..20_000u64 {
                        let now = clock.fetch_add(step, std::sync::atomic::Ordering::Relaxed);
                        let name = NAMES[usize::try_from((i + thread) % 4).unwrap()];
                        let scope = engine.primary(credential(engine, name), now);
                        let found = engine.scopes.find(name, DEFAULT_SCOPE);
                        assert!(
                            found.is_some_and(|found| ScopeRef::ptr_eq(&found, &scope)),
                            "a held scope of {name} is the registry's"
                        );
                    }
                });
            }
        });
        let forgotten = engine
            .scopes
            .forgotten
            .load(std::sync::atomic::Ordering::Relaxed);
        assert!(
            forgotten > 100,
            "scopes forgotten while calls ran: {forgotten}"
        );
        for name in NAMES {
            assert!(engine.scopes.count(name) <= 1, "{name}: one scope at most");
            if let Some(kept) = kept(credential(&engine, name)) {
                let found = engine.scopes.find(name, DEFAULT_SCOPE).unwrap();
                assert!(
                    ScopeRef::ptr_eq(&kept, &found),
                    "{name}: the record keeps the registry's"
                );
            }
        }
    }
}
