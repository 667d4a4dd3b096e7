//! Budgets shared across processes: the seam a shared backend (Redis) plugs into.
//!
//! A local bucket stops self-inflicted bursts but cannot stop two processes
//! from spending the key twice. A credential with `shared = true` asks a
//! [`SharedBudget`] for every start slot, and tells it every penalty and
//! quota it learns, so all processes on one key spend one budget.
//! [`InMemoryBudget`] implements it inside one process: the reference the
//! Redis scripts are checked against, and a double for tests.

use std::collections::HashMap;
use std::future::Future;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use crate::limiter::{LimiterCell, Micros, micros};
use crate::{Priority, Rate};

/// The limit a shared scope enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedLimit {
    /// At most N starts in any window W (with the window margin applied).
    pub rate: Rate,
    /// Set: GCRA semantics with this burst.
    pub burst: Option<NonZeroU32>,
}

/// One window of one budget a call spends (issue 14): a request window of
/// a scope (the credential's or its group's), or a window of a unit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedWindow {
    /// The scope it belongs to.
    pub scope: String,
    /// The unit, for a unit's window; `None` for a request window.
    pub unit: Option<String>,
    /// Which of that budget's windows (0 for the first).
    pub index: usize,
    /// The window (with the window margin applied).
    pub rate: Rate,
    /// What the call spends here: 1 for requests, the estimate for a unit.
    pub cost: u64,
    /// The low-priority share of that window (`priorities.low`): only
    /// low-priority calls spend it, besides the whole window; `rate` is
    /// the share.
    pub low: bool,
    /// Set on a first window with `burst`: a GCRA bucket holding this
    /// many at once, instead of a sliding window.
    pub burst: Option<NonZeroU32>,
}

/// One call's request for a start slot.
#[derive(Debug, Clone)]
pub struct ReserveRequest<'a> {
    /// The credential.
    pub credential: &'a str,
    /// Every scope governing the call; the first is the credential's own.
    pub scopes: &'a [&'a str],
    /// The first scope's limit, if it has one (reported scopes have none).
    pub limit: Option<SharedLimit>,
    /// Empty for a call on one request window: `limit` says it all. Else
    /// every window and unit budget the call spends, all or nothing at one
    /// start (`limit` then repeats the first request window).
    pub windows: &'a [SharedWindow],
    /// The start may not come earlier than this, from now.
    pub not_before: Duration,
    /// The start may not come later than this, from now.
    pub max_wait: Duration,
    /// How late after its slot's time the call may still start without
    /// breaking `limit` at the server: half the window margin the engine
    /// widened `limit` by (the other half absorbs transit). A backend may
    /// hand a waiting caller a slot whose time passed by up to this
    /// (`sluice-redis` allows at least 3 ms: a slot due at once is always
    /// a moment past for its caller).
    pub late_start: Duration,
    /// The call's priority: a backend that holds grants until their time
    /// serves this process's waiting callers highest first
    /// ([`crate::priority_seats`]).
    pub priority: Priority,
}

/// What holds a scope back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// Its rate: no slot in time.
    Rate,
    /// The server blocked it (a 429 with a wait, or nothing remaining until a reset).
    Blocked,
    /// Its quota is spent.
    Quota,
    /// A call of higher priority in this process took its start, and the
    /// next is past its wait (a denial's reason only, never a block).
    Outranked,
}

/// A start slot a shared backend granted; give it back with
/// [`SharedBudget::refund`] if the request is not sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The backend's own handle on the slot.
    pub token: String,
}

/// A shared backend's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Start after `wait` from now.
    Granted {
        /// How long from now.
        wait: Duration,
        /// The slot, to refund if unused.
        grant: Grant,
    },
    /// No start within the acceptable wait; nothing was charged.
    Denied {
        /// The earliest start, from now.
        wait: Duration,
        /// The scope that holds the call back.
        scope: String,
        /// Why.
        hold: Hold,
    },
}

/// A boxed future, as trait objects return them.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A budget shared by every process spending a credential.
///
/// `refund` and `block` must not wait on the network: an implementation
/// sends them in the background.
pub trait SharedBudget: Send + Sync + 'static {
    /// Reserves a start slot on every scope of `request`, at one start.
    fn reserve<'a>(&'a self, request: ReserveRequest<'a>) -> BoxFuture<'a, Decision>;

    /// Gives back a slot that was not used.
    fn refund(&self, credential: &str, grant: Grant);

    /// Gives back slots that were not used, resolving once the backend has
    /// them back, so that a reservation asked after it sees the room (a
    /// call of higher priority gives back those of the calls it outranks,
    /// then asks for an earlier start). The default refunds each as
    /// [`SharedBudget::refund`] does, for a backend whose refunds hold at
    /// once.
    fn refund_now<'a>(&'a self, credential: &'a str, grants: Vec<Grant>) -> BoxFuture<'a, ()> {
        for grant in grants {
            self.refund(credential, grant);
        }
        Box::pin(std::future::ready(()))
    }

    /// Tells every process that `scope` is held for `wait` from now:
    /// [`Hold::Blocked`] (nothing starts before it ends, then the bucket
    /// refills from empty) or [`Hold::Quota`] (spent until then).
    fn block(&self, credential: &str, scope: &str, wait: Duration, hold: Hold);

    /// The true-up of a sent call (issue 14): `grant`'s cost in `unit` was
    /// `estimate` and is really `actual`, at the call's own start. Must not
    /// wait on the network. A backend that charges no units ignores it.
    fn settle(&self, credential: &str, grant: &Grant, unit: &str, estimate: u64, actual: u64) {
        let _ = (credential, grant, unit, estimate, actual);
    }

    /// [`SharedBudget::settle`], resolving once the backend has the
    /// true-up, so that a reservation asked after it sees the room it
    /// freed (issue 50: the calls waiting for their starts ask again once
    /// it has landed). The default settles as [`SharedBudget::settle`]
    /// does, for a backend whose true-ups hold at once.
    fn settle_now<'a>(
        &'a self,
        credential: &'a str,
        grant: &'a Grant,
        unit: &'a str,
        estimate: u64,
        actual: u64,
    ) -> BoxFuture<'a, ()> {
        self.settle(credential, grant, unit, estimate, actual);
        Box::pin(std::future::ready(()))
    }

    /// How long an answer takes at most while the backend is well (its
    /// command timeout), `None` for no bound. The calls of a credential
    /// whose asks go in the order they were planned wait no longer than
    /// this for the ask before theirs: past it, the backend is slow or
    /// away, and each call asks (or falls back) on its own rather than
    /// queue behind one timeout after another.
    fn answer_within(&self) -> Option<Duration> {
        None
    }

    /// Whether a hold the backend learned of after granting a start now
    /// covers a call on `scopes` of `credential`: a block another process
    /// saw (its 429), or a spent quota. The engine asks once it has slept
    /// until a granted start; a held call gives its grant back and asks
    /// again, so that the hold decides it. The default: never.
    fn held(&self, credential: &str, scopes: &[&str]) -> bool {
        let _ = (credential, scopes);
        false
    }

    /// [`SharedBudget::reserve`] for a caller that holds `held` already and
    /// asks for an earlier start (issue 50): a backend may leave `held`'s
    /// own charges out of the room it looks at, so that they are not what
    /// keeps the call from moving. Either way `held` stays charged: the
    /// caller gives back whichever of the two it does not use. The default
    /// asks as [`SharedBudget::reserve`] does, with `held` counted.
    fn reserve_instead<'a>(
        &'a self,
        request: ReserveRequest<'a>,
        held: &'a Grant,
    ) -> BoxFuture<'a, Decision> {
        let _ = held;
        self.reserve(request)
    }
}

/// How long a grant can still be refunded.
const GRANT_MEMORY: Micros = 60_000_000;

/// A [`SharedBudget`] inside one process, on tokio's clock.
#[derive(Debug)]
pub struct InMemoryBudget {
    origin: Instant,
    state: Mutex<HashMap<(String, String), Entry>>,
    next_token: Mutex<u64>,
}

#[derive(Debug)]
struct Entry {
    cell: LimiterCell,
    limit: Option<SharedLimit>,
    quota_until: Micros,
    granted: HashMap<u64, crate::limiter::Reservation>,
    /// For a unit's window: the unit (its true-up adjusts this entry).
    unit: Option<String>,
}

impl Default for InMemoryBudget {
    fn default() -> Self {
        InMemoryBudget {
            origin: Instant::now(),
            state: Mutex::new(HashMap::new()),
            next_token: Mutex::new(0),
        }
    }
}

impl InMemoryBudget {
    /// An empty budget.
    pub fn new() -> Self {
        Self::default()
    }

    fn now(&self) -> Micros {
        micros(Instant::now().saturating_duration_since(self.origin))
    }

    fn decide(&self, request: &ReserveRequest<'_>) -> Decision {
        let now = self.now();
        let mut state = self.state.lock();
        let not_before = now.saturating_add(micros(request.not_before));
        let max_wait = micros(request.max_wait);
        // Spent quotas and blocks answer first; then one common start.
        for scope in request.scopes {
            if let Some(entry) = state.get(&key(request.credential, scope))
                && entry.quota_until > now
            {
                return denied(scope, entry.quota_until - now, Hold::Quota);
            }
        }
        if !request.windows.is_empty() {
            return self.decide_windows(&mut state, request, now, not_before, max_wait);
        }
        let mut start = not_before;
        for (index, scope) in request.scopes.iter().enumerate() {
            let limit = if index == 0 { request.limit } else { None };
            let entry = entry(&mut state, request.credential, scope, limit);
            let earliest = entry.cell.earliest(now).max(start);
            if earliest - now > max_wait {
                let hold = if entry
                    .cell
                    .blocked_until(now)
                    .is_some_and(|until| until >= earliest)
                {
                    Hold::Blocked
                } else {
                    Hold::Rate
                };
                return denied(scope, earliest - now, hold);
            }
            start = start.max(earliest);
        }
        // Grants are only refunded shortly after they are made; forget old ones.
        for entry in state.values_mut() {
            entry
                .granted
                .retain(|_, r| r.start().saturating_add(GRANT_MEMORY) > now);
        }
        let id = self.next_id();
        for scope in request.scopes {
            if let Some(entry) = state.get_mut(&key(request.credential, scope)) {
                if let Ok(reservation) = entry.cell.reserve(now, start, micros(Duration::MAX)) {
                    entry.granted.insert(id, reservation);
                }
            }
        }
        Decision::Granted {
            wait: Duration::from_micros(start - now),
            grant: Grant {
                token: format!("{}:{id}", request.credential),
            },
        }
    }
}

impl InMemoryBudget {
    fn next_id(&self) -> u64 {
        let mut token = self.next_token.lock();
        *token += 1;
        *token
    }

    /// Every window and unit of the call at one start, or nothing: the
    /// scopes' blocks first, then each window's earliest start for its
    /// cost, until one start suits them all.
    fn decide_windows(
        &self,
        state: &mut HashMap<(String, String), Entry>,
        request: &ReserveRequest<'_>,
        now: Micros,
        not_before: Micros,
        max_wait: Micros,
    ) -> Decision {
        let mut start = not_before;
        for scope in request.scopes {
            if let Some(until) = state
                .get(&key(request.credential, scope))
                .and_then(|entry| entry.cell.blocked_until(now))
            {
                if until - now > max_wait {
                    return denied(scope, until - now, Hold::Blocked);
                }
                start = start.max(until);
            }
        }
        // Room in front of later grants (a refund, a true-up below the
        // estimate) goes to a call that fits there as asked in every
        // window, as the Redis backend's spend does; no grant moves.
        let fits_as_asked = start.saturating_sub(now) <= max_wait
            && request.windows.iter().all(|window| {
                window_entry(state, request.credential, window)
                    .cell
                    .fits_at(now, start, window.cost)
            });
        // Otherwise: a later start never fits a window worse once the
        // windows have agreed on it, so a few rounds settle on the common
        // start.
        if !fits_as_asked {
            for _ in 0..4 {
                let mut moved = false;
                for window in request.windows {
                    let entry = window_entry(state, request.credential, window);
                    let (earliest, _) = entry.cell.earliest_for(now, start, window.cost);
                    if earliest - now > max_wait {
                        return denied(&window.scope, earliest - now, Hold::Rate);
                    }
                    if earliest > start {
                        start = earliest;
                        moved = true;
                    }
                }
                if !moved {
                    break;
                }
            }
        }
        let id = self.next_id();
        for window in request.windows {
            let entry = window_entry(state, request.credential, window);
            let reservation = entry.cell.charge_at(start, window.cost);
            entry.granted.insert(id, reservation);
        }
        Decision::Granted {
            wait: Duration::from_micros(start - now),
            grant: Grant {
                token: format!("{}:{id}", request.credential),
            },
        }
    }
}

/// The entry of one window of a call's budgets, its limit kept current.
fn window_entry<'a>(
    state: &'a mut HashMap<(String, String), Entry>,
    credential: &str,
    window: &SharedWindow,
) -> &'a mut Entry {
    // NUL never appears in a configured name, so these keys never meet a scope's.
    let name = format!(
        "{}\0{}\0{}\0{}",
        window.scope,
        window.unit.as_deref().unwrap_or(""),
        if window.low { "low" } else { "" },
        window.index
    );
    let limit = Some(SharedLimit {
        rate: window.rate,
        burst: window.burst,
    });
    let entry = entry(state, credential, &name, limit);
    entry.unit.clone_from(&window.unit);
    entry
}

fn grant_id(grant: &Grant) -> Option<u64> {
    grant
        .token
        .rsplit_once(':')
        .and_then(|(_, id)| id.parse::<u64>().ok())
}

impl Entry {
    /// A scope nobody has reserved on yet: no limit, no hold.
    fn fresh() -> Self {
        Entry {
            cell: LimiterCell::unlimited(),
            limit: None,
            quota_until: 0,
            granted: HashMap::new(),
            unit: None,
        }
    }
}

fn key(credential: &str, scope: &str) -> (String, String) {
    (credential.to_owned(), scope.to_owned())
}

fn entry<'a>(
    state: &'a mut HashMap<(String, String), Entry>,
    credential: &str,
    scope: &str,
    limit: Option<SharedLimit>,
) -> &'a mut Entry {
    let entry = state
        .entry(key(credential, scope))
        .or_insert_with(Entry::fresh);
    if entry.limit != limit {
        entry
            .cell
            .set_limit(limit.map(|l| l.rate), limit.and_then(|l| l.burst));
        entry.limit = limit;
    }
    entry
}

fn denied(scope: &str, wait: Micros, hold: Hold) -> Decision {
    Decision::Denied {
        wait: Duration::from_micros(wait),
        scope: scope.to_owned(),
        hold,
    }
}

impl SharedBudget for InMemoryBudget {
    fn reserve<'a>(&'a self, request: ReserveRequest<'a>) -> BoxFuture<'a, Decision> {
        Box::pin(async move { self.decide(&request) })
    }

    fn refund(&self, credential: &str, grant: Grant) {
        let Some(id) = grant_id(&grant) else {
            return;
        };
        let mut state = self.state.lock();
        for ((cred, _), entry) in state.iter_mut() {
            if cred == credential
                && let Some(reservation) = entry.granted.remove(&id)
            {
                entry.cell.refund(&reservation);
            }
        }
    }

    fn held(&self, credential: &str, scopes: &[&str]) -> bool {
        let now = self.now();
        let state = self.state.lock();
        scopes.iter().any(|scope| {
            state.get(&key(credential, scope)).is_some_and(|entry| {
                entry.quota_until > now || entry.cell.blocked_until(now).is_some()
            })
        })
    }

    fn block(&self, credential: &str, scope: &str, wait: Duration, hold: Hold) {
        let now = self.now();
        let until = now.saturating_add(micros(wait));
        let mut state = self.state.lock();
        let entry = state
            .entry(key(credential, scope))
            .or_insert_with(Entry::fresh);
        match hold {
            Hold::Quota => entry.quota_until = entry.quota_until.max(until),
            Hold::Blocked | Hold::Rate | Hold::Outranked => entry.cell.penalize(until, now),
        }
    }

    fn settle(&self, credential: &str, grant: &Grant, unit: &str, estimate: u64, actual: u64) {
        let Some(id) = grant_id(grant) else {
            return;
        };
        let delta = i64::try_from(actual)
            .unwrap_or(i64::MAX)
            .saturating_sub(i64::try_from(estimate).unwrap_or(i64::MAX));
        let mut state = self.state.lock();
        for ((cred, _), entry) in state.iter_mut() {
            if cred == credential
                && entry.unit.as_deref() == Some(unit)
                && let Some(reservation) = entry.granted.get(&id)
            {
                entry.cell.adjust(reservation.start(), delta);
            }
        }
    }
}
