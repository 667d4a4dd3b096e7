//! Calls that spend several windows or any unit (issue 14): one spend
//! script reserves, leases count in every window and unit, and the true-up
//! is sent after the answer.
//!
//! A call that also spends a second window, a group's windows or a unit's
//! cost cannot take a request window's leased slot without overspending
//! the others, so its spends are leased on their own: the spend script
//! ([`crate::spend`]: every budget checked and charged in one atomic step)
//! places further starts of the same spend, each charged in every budget
//! as a call would be, and this process's next callers with the same
//! budgets and costs start at them without a round trip. A pool per
//! spend (credential, budgets and costs) holds them; its size adapts as a
//! request window's lease does, at most this process's fair share of the
//! tightest budget. A start whose time passes unused goes back. The
//! grant token is `w|{member}`; what each member charged is kept here, so
//! that a refund or settle rewrites exactly that.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use sluice::shared::{Decision, Grant, Hold, ReserveRequest};
use tokio::time::Instant;

use crate::Error;
use crate::breaker::Permit;
use crate::clock::ServerClock;
use crate::decision::denied;
use crate::instant::{after, since};
use crate::keys::{CredentialKeys, part};
use crate::lease::{LATE_FLOOR, LEAD, Pool, Pooled, share_cap};
use crate::runner::Runner;
use crate::spend::{
    Budget, Granted, Heartbeat, Lease, Seen, SpendScripts, Spent, Window, budgets, further_member,
    void,
};
use crate::store::{Clock, View};
use crate::unknown;
use crate::worker::Jobs;

mod denials;
mod settle;

use denials::Denials;

/// How long what a member charged is kept for its refund or settle: a
/// call's answer comes within its deadline, far less than this.
const MEMBER_MEMORY: Duration = Duration::from_secs(600);

/// The grant token's prefix for a spend of several windows.
const PREFIX: &str = "w|";

/// One process's spends of several windows, by member.
pub(crate) struct Spends {
    scripts: SpendScripts,
    /// Settles spends whose answer never came, once Redis answers.
    jobs: Jobs,
    process: String,
    /// The heartbeat window, µs: the spends beat the same set as leases.
    heartbeat: u64,
    next: AtomicU64,
    held: Mutex<HashMap<String, MemberCharge>>,
    /// Denials Redis gave moments ago, for calls that cannot outwait them.
    denials: Denials,
    /// Leased starts waiting for this process's callers, by spend.
    pools: Mutex<HashMap<SpendKey, Pool<String>>>,
}

/// What a leased start serves: calls on this credential spending exactly
/// these budgets at these costs.
type SpendKey = (String, Vec<Budget>);

/// A spend's pool with nothing in it and no ask for this long is dropped.
const POOL_IDLE: Duration = Duration::from_secs(10);

/// May this process lease, and how many processes share the credential.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Leasing {
    /// The most starts one lease may take (1: none leased).
    pub(crate) max_lease: u32,
    /// Processes on the credential, as Redis last counted them.
    pub(crate) processes: u32,
}

/// What one member (a granted spend) charged, for its refund or settle.
struct MemberCharge {
    credential: String,
    budgets: Vec<Budget>,
    /// The start and what the spend did to its GCRA budgets.
    granted: Granted,
    at: Instant,
}

/// What asking Redis gave.
pub(crate) enum Asked {
    /// Redis decided, and said this of the credential.
    Decided(Decision, Told),
    /// A leased start of this process's served the call (no round trip).
    Leased(Decision),
    /// Redis cannot be asked: decide locally, for this reason.
    Fallback(String),
    /// Redis's start had passed when its answer came; it went back: ask again.
    Again,
}

/// What Redis said of the credential beside a decision: the processes
/// it counted (0: unknown) and its active holds, their waits counted from
/// `at` on this process's clock; and, when it said so, that no start of
/// the spend is free before `busy` (the fallback starts no sooner).
pub(crate) struct Told {
    pub(crate) view: View,
    pub(crate) at: Instant,
    pub(crate) busy: Option<Instant>,
}

impl Told {
    /// Nothing said (a decision made here).
    fn nothing() -> Told {
        Told {
            view: View::default(),
            at: Instant::now(),
            busy: None,
        }
    }
}

fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

impl Spends {
    pub(crate) fn new(process: &str, heartbeat: Duration, jobs: Jobs) -> Self {
        Spends {
            scripts: SpendScripts::default(),
            jobs,
            process: process.to_owned(),
            heartbeat: micros(heartbeat),
            next: AtomicU64::new(0),
            held: Mutex::new(HashMap::new()),
            denials: Denials::default(),
            pools: Mutex::new(HashMap::new()),
        }
    }

    /// A leased start of `key`'s pool in `[from, to]` (when `take`), and the starts of
    /// `key`'s pool whose time passed unused (for the next spend script to
    /// give back); those of every other pool are given back here. `key`'s
    /// pool allows starts as `late` as the request at hand does.
    fn pooled(
        self: &Arc<Self>,
        runner: &Arc<Runner>,
        key: &SpendKey,
        window: (Instant, Instant),
        (now, late): (Instant, Duration),
        take: bool,
    ) -> (Option<Pooled<String>>, Vec<String>) {
        let (slot, own, others) = {
            let mut pools = self.pools.lock();
            let (mut own, mut others) = (Vec::new(), Vec::new());
            pools.retain(|k, pool| {
                if k == key {
                    pool.allow_late(late);
                    own = pool.sweep(now);
                } else {
                    others.extend(pool.sweep(now));
                }
                !pool.idle(now, POOL_IDLE)
            });
            let slot = pools
                .get_mut(key)
                .filter(|_| take)
                .and_then(|pool| pool.take(window, now));
            (slot, own, others)
        };
        self.refund_all(runner, others);
        (slot, own)
    }

    /// Leased starts waiting for callers on `credential`, every spend's.
    pub(crate) fn waiting(&self, credential: &str) -> usize {
        self.pools
            .lock()
            .iter()
            .filter(|((name, _), _)| name == credential)
            .map(|(_, pool)| pool.pooled())
            .sum()
    }

    fn refund_all(self: &Arc<Self>, runner: &Arc<Runner>, members: Vec<String>) {
        for member in members {
            self.refund(runner, &member);
        }
    }

    /// How many starts to ask for (the call's own among them), and how far
    /// ahead the others may lie: grown and shrunk with demand as a request
    /// window's lease is, capped at this process's fair share of the
    /// tightest budget, reaching (after the call's own start) twice the
    /// time the slowest budget takes to admit them and at most its
    /// shortest window.
    fn lease<'a>(
        &self,
        key: &SpendKey,
        (leasing, max_wait): (Option<Leasing>, Duration),
        stale: &'a [String],
        now: Instant,
    ) -> Lease<'a> {
        let budgets = &key.1;
        let one = Lease {
            stale,
            ..Lease::ONE
        };
        // Further starts lie at least `LEAD` ahead: callers who cannot
        // wait that long (this one's kind) could use none of them, and a
        // burst of them would find the window taken by its own lease.
        let Some(leasing) = leasing.filter(|l| l.max_lease > 1 && max_wait >= LEAD) else {
            return one;
        };
        if budgets.is_empty() || budgets.iter().any(|b| b.burst.is_some() || b.cost == 0) {
            return one;
        }
        let calls = budgets.iter().map(|b| b.limit / b.cost).min().unwrap_or(1);
        let cap = share_cap(calls, leasing.processes, leasing.max_lease);
        // The slowest budget's interval between calls, µs.
        let pace = budgets
            .iter()
            .map(|b| b.window.saturating_mul(b.cost) / b.limit.max(1))
            .max()
            .unwrap_or(0);
        let shortest = budgets.iter().map(|b| b.window).min().unwrap_or(0);
        let want = self.pools.lock().entry(key.clone()).or_default().want(
            cap,
            now,
            Duration::from_micros(pace),
        );
        Lease {
            slots: want,
            horizon: pace.saturating_mul(2 * u64::from(want)).min(shortest),
            lead: micros(LEAD),
            stale,
        }
    }

    /// The window index of the request that `budget` (a budget index) is,
    /// as a scope index for the denial.
    fn scope_index(request: &ReserveRequest<'_>, budget: usize) -> usize {
        let scope = request.windows.get(budget).map(|w| w.scope.as_str());
        scope
            .and_then(|scope| request.scopes.iter().position(|s| *s == scope))
            .unwrap_or(0)
    }

    /// Charges every window of `request` at one start between `not_before`
    /// and `max_wait` from now, or nothing; `beat` is the name this
    /// process beats the credential's heartbeat under. `moving`: the
    /// member whose start the caller holds, left out of the windows while
    /// this start is placed (and kept: the caller gives back the one not
    /// used).
    pub(crate) async fn reserve(
        self: &Arc<Self>,
        runner: &Arc<Runner>,
        (request, moving): (&ReserveRequest<'_>, Option<&str>),
        (not_before, max_wait): (Duration, Duration),
        leasing: Option<Leasing>,
        (beat, clock): (&str, &ServerClock),
    ) -> Asked {
        let budgets = budgets(request.windows);
        let now = Instant::now();
        let key: SpendKey = (request.credential.to_owned(), budgets.clone());
        let window = (now + not_before, now + max_wait);
        let (slot, stale) = self.pooled(
            runner,
            &key,
            window,
            (now, request.late_start),
            leasing.is_some(),
        );
        if let Some(slot) = slot {
            self.refund_all(runner, stale);
            return Asked::Leased(Decision::Granted {
                wait: slot.at.saturating_duration_since(now),
                grant: Grant {
                    token: format!("{PREFIX}{}", slot.token),
                },
            });
        }
        if let Some((budget, until)) =
            self.denials
                .known(request.credential, &budgets, now, now + max_wait)
        {
            self.refund_all(runner, stale);
            let index = Self::scope_index(request, budget);
            let wait = until.saturating_duration_since(now);
            return Asked::Decided(denied(request, index, wait, Hold::Rate), Told::nothing());
        }
        if let Permit::Refuse | Permit::AwaitProbe(_) = runner.permit(now, Duration::from_secs(1)) {
            self.refund_all(runner, stale);
            return Asked::Fallback("circuit breaker open".into());
        }
        let sent: Vec<String> = stale
            .iter()
            .cloned()
            .chain(moving.map(|m| format!("!{m}")))
            .collect();
        let lease = self.lease(&key, (leasing, max_wait), &sent, now);
        let keys = runner.store().keys(request.credential);
        let parts: Vec<String> = request.scopes.iter().map(|s| part(s)).collect();
        let asked = Window {
            not_before: micros(not_before),
            max_wait: micros(max_wait),
            scopes: &parts,
        };
        // A spend that timed out is settled by its id (`crate::unknown`)
        // and, settled, asked again once under a new one.
        let mut tries = 0;
        let (member, result, sent) = loop {
            tries += 1;
            let sent = Instant::now();
            let member = format!(
                "{}.{}",
                self.process,
                self.next.fetch_add(1, Ordering::Relaxed)
            );
            let result = self
                .send(runner, (&budgets, &member, &keys), asked, lease, beat)
                .await;
            if let Err(error) = &result
                && unknown::may_have_run(error)
            {
                let void = void(request.credential, &budgets, &member, lease.slots, &keys);
                if unknown::settle(runner, &self.jobs, void).await && tries < 2 {
                    continue;
                }
            }
            break (member, result, sent);
        };
        let received = Instant::now();
        if result.is_ok() {
            // The script gave them back: room may have come with them.
            if !stale.is_empty() {
                self.denials.forget(request.credential);
            }
            let mut held = self.held.lock();
            for member in &stale {
                held.remove(member);
            }
        } else {
            self.refund_all(runner, stale);
        }
        match result {
            Ok(Seen {
                spent: Spent::Granted { wait },
                view,
                next,
                start,
                buckets,
                further,
            }) => {
                // The waits count from the script's now, placed on this
                // process's clock (`crate::clock`), not from the arrival.
                let base = clock.place(sent, start.saturating_sub(wait), received);
                let first = after(base, Duration::from_micros(wait));
                let mut pooled = Vec::with_capacity(further.len());
                for (k, at) in further.into_iter().enumerate() {
                    let member = further_member(&member, k);
                    let granted = Granted {
                        start: at,
                        buckets: Vec::new(),
                    };
                    self.remember(&member, request.credential, budgets.clone(), granted);
                    let ahead = wait.saturating_add(at.saturating_sub(start));
                    pooled.push(Pooled {
                        at: after(base, Duration::from_micros(ahead)),
                        token: member,
                    });
                }
                if !pooled.is_empty() {
                    self.pools.lock().entry(key).or_default().fill(pooled);
                }
                let granted = Granted { start, buckets };
                self.remember(&member, request.credential, budgets, granted);
                // Too late for its start (past the time every log charged
                // by more than the margin absorbs): it goes back; ask again.
                if first + request.late_start.max(LATE_FLOOR) < received {
                    self.refund(runner, &member);
                    return Asked::Again;
                }
                let decision = Decision::Granted {
                    wait: since(first, Instant::now()),
                    grant: Grant {
                        token: format!("{PREFIX}{member}"),
                    },
                };
                let busy = next.map(|next| after(base, Duration::from_micros(next)));
                Asked::Decided(
                    decision,
                    Told {
                        view,
                        at: base,
                        busy,
                    },
                )
            }
            Ok(Seen {
                spent: Spent::Held { wait, scope, hold },
                view,
                ..
            }) => {
                let index = scope.min(request.scopes.len().saturating_sub(1));
                let wait = Duration::from_micros(wait);
                let told = Told {
                    view,
                    at: received,
                    busy: None,
                };
                Asked::Decided(denied(request, index, wait, hold), told)
            }
            Ok(Seen {
                spent: Spent::Denied { wait, budget },
                view,
                ..
            }) => {
                let index = Self::scope_index(request, budget);
                let wait = Duration::from_micros(wait);
                // Only a denial from now says nothing fits before its wait.
                let busy = not_before.is_zero().then(|| received + wait);
                if let Some(until) = busy
                    && let Some(denying) = budgets.get(budget)
                {
                    self.denials.remember(request.credential, denying, until);
                }
                let told = Told {
                    view,
                    at: received,
                    busy,
                };
                Asked::Decided(denied(request, index, wait, Hold::Rate), told)
            }
            // A cost that can never fit is refused before Redis is asked;
            // the engine's own check says so to the caller first.
            Err(Error::Reply(reason)) if reason.contains("can never fit") => Asked::Decided(
                denied(request, 0, Duration::MAX, Hold::Rate),
                Told::nothing(),
            ),
            Err(error) => Asked::Fallback(error.to_string()),
        }
    }

    /// Runs the spend script once for `member`.
    async fn send(
        &self,
        runner: &Runner,
        (budgets, member, keys): (&[Budget], &str, &CredentialKeys),
        window: Window<'_>,
        lease: Lease<'_>,
        beat: &str,
    ) -> Result<Seen, Error> {
        runner
            .run(|_, mut conn| {
                let heartbeat = Heartbeat {
                    process: beat,
                    window: self.heartbeat,
                };
                async move {
                    self.scripts
                        .reserve_leased(
                            &mut conn,
                            keys,
                            budgets,
                            member,
                            window,
                            lease,
                            Some(heartbeat),
                            Clock::Server,
                        )
                        .await
                }
            })
            .await
    }

    fn remember(&self, member: &str, credential: &str, budgets: Vec<Budget>, granted: Granted) {
        let now = Instant::now();
        let mut held = self.held.lock();
        held.retain(|_, h| now.saturating_duration_since(h.at) < MEMBER_MEMORY);
        held.insert(
            member.to_owned(),
            MemberCharge {
                credential: credential.to_owned(),
                budgets,
                granted,
                at: now,
            },
        );
    }

    /// The member of a grant this module made.
    pub(crate) fn member(grant: &Grant) -> Option<&str> {
        grant.token.strip_prefix(PREFIX)
    }

    /// Removes `member`'s unused start from every window, in the background.
    pub(crate) fn refund(self: &Arc<Self>, runner: &Arc<Runner>, member: &str) {
        if let Some(refunding) = self.refunding(runner, member) {
            spawn(refunding);
        }
    }

    /// Removes `member`'s unused start from every window, resolving once
    /// Redis has it back (or could not be reached). The refund runs on its
    /// own, so a caller that stops waiting does not stop it.
    pub(crate) async fn refund_now(self: &Arc<Self>, runner: &Arc<Runner>, member: &str) {
        if let Some(refunding) = self.refunding(runner, member) {
            spawned(refunding).await;
        }
    }

    /// The refund of `member`, to run; `None` when it is not held here.
    fn refunding(
        self: &Arc<Self>,
        runner: &Arc<Runner>,
        member: &str,
    ) -> Option<impl std::future::Future<Output = ()> + Send + 'static> {
        let held = self.held.lock().remove(member)?;
        self.denials.forget(&held.credential);
        let (this, runner, member) = (self.clone(), runner.clone(), member.to_owned());
        Some(async move {
            let keys = runner.store().keys(&held.credential);
            let done = runner
                .run(|_, mut conn| async move {
                    this.scripts
                        .refund_buckets(&mut conn, &keys, &held.budgets, &member, &held.granted)
                        .await
                })
                .await;
            if let Err(error) = done {
                tracing::debug!(%error, "could not refund a spend; it expires with its windows");
            }
        })
    }
}

/// Runs `task` on the current runtime; outside one (a budget dropped
/// after its runtime) there is nothing left to tell.
fn spawn(task: impl std::future::Future<Output = ()> + Send + 'static) {
    if let Ok(handle) = tokio::runtime::Handle::try_current() {
        handle.spawn(task);
    }
}

/// Runs `task` on its own and waits for it: a caller that stops waiting
/// does not stop it. A task that panicked has nothing more to do.
async fn spawned(task: impl std::future::Future<Output = ()> + Send + 'static) {
    if let Ok(handle) = tokio::runtime::Handle::try_current() {
        let _ = handle.spawn(task).await;
    }
}
