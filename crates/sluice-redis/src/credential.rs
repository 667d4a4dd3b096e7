//! One credential as this process sees it: its lease pool, known holds, fallback cells and counters, behind one lock.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use parking_lot::Mutex;
use serde::Serialize;
use sluice::shared::{Decision, SharedLimit, SharedWindow};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::beat::Beat;
use crate::clock::ServerClock;
use crate::fallback::Fallback;
use crate::holds::{Holds, Kind};
use crate::keys::part;
use crate::lease::{Pool, Waiting};
use crate::windows::Told;
use crate::worker::Unwritten;

/// Where a credential's decisions are made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// In Redis, shared with every process.
    Shared,
    /// Locally, at this process's share of the rate.
    Fallback,
}

/// Decisions on one credential.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct DecisionCounts {
    /// Granted by a reservation in Redis.
    pub shared: u64,
    /// Granted from a leased slot (no round trip).
    pub leased: u64,
    /// Granted locally while Redis was unreachable.
    pub fallback: u64,
    /// Denied (by Redis, by a known hold, or by the fallback cell).
    pub denied: u64,
    /// Leased slots given back unused.
    pub returned: u64,
}

/// One credential as this process sees it.
pub(crate) struct Cred {
    pub(crate) name: String,
    /// The name as it appears in keys and events.
    pub(crate) part: String,
    pub(crate) state: Mutex<CredState>,
    /// A reservation finished (callers waiting on it look at the pool again).
    pub(crate) reserved: Notify,
    /// A block or quota was noted (callers holding slots look again).
    pub(crate) held: Notify,
    /// Callers holding a slot until its time, by priority.
    pub(crate) waiting: Waiting,
    /// A fallback spell began and may still bind: calls look at it (under
    /// the lock) only while this is set.
    pub(crate) spell: AtomicBool,
    /// The server's clock (of the node holding this credential's keys) on ours.
    pub(crate) clock: ServerClock,
    /// Local starts the worker has not written to Redis's log yet: a spell
    /// does not end before they are there.
    pub(crate) unwritten: Unwritten,
}

pub(crate) struct CredState {
    pub(crate) pool: Pool,
    pub(crate) holds: Holds,
    pub(crate) fallback: Fallback,
    /// Processes the heartbeat last counted on this credential.
    pub(crate) processes: u32,
    /// Where decisions are made, and why when in fallback.
    pub(crate) mode: (Mode, Option<String>),
    pub(crate) decisions: DecisionCounts,
    /// The limit the last call asked for (the status shows its fallback share).
    pub(crate) limit: Option<SharedLimit>,
    /// The earliest free shared slot, as the last answer said (a denial's
    /// wait, or a grant's next start); forgotten when this process gives
    /// room back or hears of a hold.
    pub(crate) busy_until: Option<Instant>,
    /// The name this process beats under, and the check a spell owes.
    pub(crate) beat: Beat,
}

impl CredState {
    /// Redis counted `processes` at `now` (0: it did not say).
    pub(crate) fn counted(&mut self, processes: u32, now: Instant) {
        if processes > 0 {
            self.processes = processes;
            self.fallback.spell.counted(processes, now);
        }
    }

    /// Takes in what Redis said beside a spend's decision: the processes
    /// it counted, the credential's blocks and spent quotas, and the
    /// earliest free start (as a one-window reservation's `next` says).
    pub(crate) fn told(&mut self, told: &Told) {
        self.counted(told.view.processes, told.at);
        self.holds.absorb(&told.view, told.at);
        if told.busy.is_some() {
            self.busy_until = told.busy;
        }
    }

    /// Counts what Redis decided for a spend on `windows` (answered at
    /// `now`): a grant is remembered by the fallback, which counts it if
    /// Redis goes away before it starts, and, while a spell `recovering`
    /// at that share binds, held in its cells too.
    pub(crate) fn count_spend(
        &mut self,
        windows: &[SharedWindow],
        decision: &Decision,
        (leased, recovering): (bool, Option<f64>),
        now: Instant,
    ) {
        let Decision::Granted { wait, .. } = decision else {
            self.decisions.denied += 1;
            return;
        };
        if leased {
            self.decisions.leased += 1;
        } else {
            self.decisions.shared += 1;
        }
        let at = crate::instant::after(now, *wait);
        self.fallback.remember(windows, at, now);
        if let Some(share) = recovering {
            self.fallback.count_shared(windows, share, at);
        }
    }
}

impl Cred {
    fn new(name: &str, origin: Instant) -> Self {
        Cred {
            name: name.to_owned(),
            part: part(name),
            state: Mutex::new(CredState {
                pool: Pool::default(),
                holds: Holds::default(),
                fallback: Fallback::new(origin),
                processes: 0,
                mode: (Mode::Shared, None),
                decisions: DecisionCounts::default(),
                limit: None,
                busy_until: None,
                beat: Beat::default(),
            }),
            reserved: Notify::new(),
            held: Notify::new(),
            clock: ServerClock::default(),
            waiting: Waiting::default(),
            spell: AtomicBool::new(false),
            unwritten: Unwritten::default(),
        }
    }

    /// Notes a hold on `scope` (a key part): leased slots it voids are
    /// dropped (Redis voided them too), the fallback cells restart empty,
    /// waiting callers look again.
    pub(crate) fn note_hold(&self, kind: Kind, scope: &str, until: Instant, now: Instant) {
        {
            let mut state = self.state.lock();
            state.holds.note(kind, scope, until);
            state.busy_until = None;
            if kind == Kind::Blocked {
                state.holds.announce(scope, now);
                state.fallback.penalize(scope, until, now);
            }
            // Leased slots on the held scope were voided in Redis (a block bumps
            // the generation and drops future window entries): drop them here.
            // Holds on other scopes are checked when a call takes a slot.
            if state.pool.key().is_some_and(|key| key.scope == scope) {
                state.pool.drain_all();
            }
        }
        self.held.notify_waiters();
    }
}

/// Every credential this process has used, by name.
pub(crate) struct Credentials {
    by_name: Mutex<HashMap<String, Arc<Cred>>>,
    /// The fallback cells count time from here.
    origin: Instant,
}

impl Credentials {
    pub(crate) fn new(origin: Instant) -> Self {
        Credentials {
            by_name: Mutex::new(HashMap::new()),
            origin,
        }
    }

    /// The credential `name`, created on first use.
    pub(crate) fn get(&self, name: &str) -> Arc<Cred> {
        let mut creds = self.by_name.lock();
        if let Some(cred) = creds.get(name) {
            return cred.clone();
        }
        let cred = Arc::new(Cred::new(name, self.origin));
        creds.insert(name.to_owned(), cred.clone());
        cred
    }

    /// The credential whose key part is `part`, if this process used it.
    pub(crate) fn by_part(&self, part: &str) -> Option<Arc<Cred>> {
        self.by_name
            .lock()
            .values()
            .find(|cred| cred.part == part)
            .cloned()
    }

    /// Every credential used so far.
    pub(crate) fn all(&self) -> Vec<Arc<Cred>> {
        self.by_name.lock().values().cloned().collect()
    }
}
