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
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::Rate;
use crate::limiter::{LimiterCell, Micros, micros};

/// The limit a shared scope enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SharedLimit {
    /// At most N starts in any window W (with the window margin applied).
    pub rate: Rate,
    /// Set: GCRA semantics with this burst.
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
    /// The start may not come earlier than this, from now.
    pub not_before: Duration,
    /// The start may not come later than this, from now.
    pub max_wait: Duration,
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

    /// Tells every process that `scope` is held for `wait` from now:
    /// [`Hold::Blocked`] (nothing starts before it ends, then the bucket
    /// refills from empty) or [`Hold::Quota`] (spent until then).
    fn block(&self, credential: &str, scope: &str, wait: Duration, hold: Hold);
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
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let not_before = now + micros(request.not_before);
        let max_wait = micros(request.max_wait);
        // Spent quotas and blocks answer first; then one common start.
        for scope in request.scopes {
            if let Some(entry) = state.get(&key(request.credential, scope))
                && entry.quota_until > now
            {
                return denied(scope, entry.quota_until - now, Hold::Quota);
            }
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
            entry.granted.retain(|_, r| r.start() + GRANT_MEMORY > now);
        }
        let mut token = self.next_token.lock().unwrap_or_else(|p| p.into_inner());
        *token += 1;
        let id = *token;
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

impl Entry {
    /// A scope nobody has reserved on yet: no limit, no hold.
    fn fresh() -> Self {
        Entry {
            cell: LimiterCell::unlimited(),
            limit: None,
            quota_until: 0,
            granted: HashMap::new(),
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
        let Some(id) = grant
            .token
            .rsplit_once(':')
            .and_then(|(_, id)| id.parse::<u64>().ok())
        else {
            return;
        };
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        for ((cred, _), entry) in state.iter_mut() {
            if cred == credential
                && let Some(reservation) = entry.granted.remove(&id)
            {
                entry.cell.refund(&reservation);
            }
        }
    }

    fn block(&self, credential: &str, scope: &str, wait: Duration, hold: Hold) {
        let now = self.now();
        let until = now + micros(wait);
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let entry = state
            .entry(key(credential, scope))
            .or_insert_with(Entry::fresh);
        match hold {
            Hold::Quota => entry.quota_until = entry.quota_until.max(until),
            Hold::Blocked | Hold::Rate => entry.cell.penalize(until, now),
        }
    }
}
