//! Several windows and units of one call, checked and spent in one atomic
//! Lua step on the server's clock (issue 14), and trued up afterwards.
//!
//! A call touches budgets: each request window of its credential and of its
//! group (cost 1), and each window of every unit it spends (cost: its
//! estimate). [`SpendScripts::reserve`] finds the earliest start at which
//! every one of them has room and charges them all, or charges nothing;
//! [`SpendScripts::settle`] rewrites the call's cost in a unit's windows at
//! the call's own start once the answer states the true cost, and
//! [`SpendScripts::refund`] removes an unused start. Every key lives under
//! the credential's hash tag, so each script touches one Cluster slot.

use redis::{Script, ScriptInvocation, Value};

use crate::keys::{CredentialKeys, part};
use crate::store::Clock;
use crate::{Error, lua};

mod reply;

use reply::{int, parse_spent};

/// Integer microseconds.
pub type Micros = u64;

/// How long keys outlive the windows they hold (as the reserve script's).
const TTL_SLACK: Micros = 5_000_000;

/// One window of one budget a call spends.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Budget {
    /// The scope or unit it belongs to (`api_key`, a group, `tokens`).
    pub name: String,
    /// Which of that budget's windows (0 for the first).
    pub index: usize,
    /// At most this much spent by starts in any window.
    pub limit: u64,
    /// The window, µs (at least 1).
    pub window: Micros,
    /// What the call costs here: 1 for requests, the estimate for a unit.
    pub cost: u64,
    /// Set: a GCRA bucket (sustained `limit` per `window`, this many at
    /// once) instead of a sliding window.
    pub burst: Option<u64>,
}

impl Budget {
    /// A request window of `name`: `limit` starts per `window`, cost 1.
    pub fn requests(name: &str, index: usize, limit: u64, window: Micros) -> Self {
        Budget {
            name: name.to_owned(),
            index,
            limit,
            window,
            cost: 1,
            burst: None,
        }
    }

    /// A unit's window: `limit` units per `window`, the call costing `cost`.
    pub fn unit(name: &str, index: usize, limit: u64, window: Micros, cost: u64) -> Self {
        Budget {
            name: name.to_owned(),
            index,
            limit,
            window,
            cost,
            burst: None,
        }
    }

    /// This budget as a GCRA bucket holding `burst` at once.
    pub fn with_burst(mut self, burst: u64) -> Self {
        self.burst = Some(burst);
        self
    }

    /// The most one call can spend here.
    fn capacity(&self) -> u64 {
        self.burst.unwrap_or(self.limit)
    }

    /// T, the emission interval of a bucket, µs.
    pub fn interval(&self) -> Micros {
        self.window.max(1).div_ceil(self.limit.max(1))
    }

    /// Its four arguments to the spend and record scripts: limit, window
    /// µs, cost, burst (0: a sliding window).
    fn args(&self, invocation: &mut ScriptInvocation<'_>) {
        invocation
            .arg(self.limit.max(1))
            .arg(self.window.max(1))
            .arg(self.cost)
            .arg(self.burst.unwrap_or(0));
    }

    /// Its key under `keys`: a sorted set, or a bucket's string.
    pub(crate) fn key(&self, keys: &CredentialKeys) -> String {
        let key = keys.budget(&part(&self.name), self.index);
        // A bucket's string never meets a window's sorted set of the same
        // budget (a config changed between them).
        if self.burst.is_some() {
            format!("{key}:g")
        } else {
            key
        }
    }
}

/// The spend script's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Spent {
    /// Every budget was charged; start after `wait` µs.
    Granted {
        /// From now, on the server's clock.
        wait: Micros,
    },
    /// No common start within the acceptable wait; nothing was charged.
    Denied {
        /// The earliest common start, from now.
        wait: Micros,
        /// Index (into the budgets given) of the budget that put it furthest off.
        budget: usize,
    },
}

/// What a granted spend did to a GCRA budget, to give it back or true it up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bucket {
    /// Which budget (an index into those given).
    pub budget: usize,
    /// Its `tat` before the spend, µs.
    pub before: Micros,
    /// Its `tat` after it, µs.
    pub after: Micros,
}

/// A spend's answer with what the script saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// The decision.
    pub spent: Spent,
    /// The processes in the heartbeat set (0: none sent).
    pub processes: u32,
    /// Granted: the start, µs on the server's clock.
    pub start: Micros,
    /// Granted: what it did to each GCRA budget.
    pub buckets: Vec<Bucket>,
    /// Granted with a [`Lease`]: the further starts, µs on the server's
    /// clock, in order; the k-th (from 0) is the member `{member}+{k + 2}`.
    pub further: Vec<Micros>,
}

/// The member of a lease's further start `k` (from 0).
pub fn further_member(member: &str, k: usize) -> String {
    format!("{member}+{}", k + 2)
}

/// When a spend may start, µs from now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// No earlier than this.
    pub not_before: Micros,
    /// No later than this.
    pub max_wait: Micros,
}

/// Further starts of the same spend asked for with it: a lease (its
/// first start is the call's; the others wait for this process's callers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease<'a> {
    /// Starts in all, at least 1 (the call's own among them).
    pub slots: u32,
    /// A further start lies at most this far from now, µs.
    pub horizon: Micros,
    /// And at least this far (a start due sooner finds no caller).
    pub lead: Micros,
    /// Members of earlier further starts of this same spend (the same
    /// budgets at the same costs) whose time passed unused: removed from
    /// every window in the same step, before the new starts are placed.
    pub stale: &'a [String],
}

impl Lease<'_> {
    /// The call's own start alone.
    pub const ONE: Lease<'static> = Lease {
        slots: 1,
        horizon: 0,
        lead: 0,
        stale: &[],
    };
}

/// A process beating the credential's heartbeat set with a spend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heartbeat<'a> {
    /// The process's id.
    pub process: &'a str,
    /// A process counts as present this long after its last beat, µs.
    pub window: Micros,
}

/// The spend, settle and refund scripts, and the one that records spends
/// made without Redis (run with `EVALSHA`, reloaded on NOSCRIPT).
#[derive(Debug, Clone)]
pub struct SpendScripts {
    spend: Script,
    settle: Script,
    record: Script,
}

impl Default for SpendScripts {
    fn default() -> Self {
        SpendScripts {
            spend: lua::script(include_str!("../lua/spend.lua")),
            settle: lua::script(include_str!("../lua/settle.lua")),
            record: lua::script(include_str!("../lua/record_spends.lua")),
        }
    }
}

fn clock_arg(clock: Clock) -> String {
    match clock {
        Clock::Server => String::new(),
        Clock::At(now) => now.to_string(),
    }
}

fn reply_error(error: &redis::RedisError) -> Error {
    Error::from_redis(error, &[], std::time::Duration::ZERO)
}

/// Runs a script whose reply is a count (of entries changed or recorded).
async fn count<C>(
    invocation: ScriptInvocation<'_>,
    conn: &mut C,
    script: &str,
) -> Result<u64, Error>
where
    C: redis::aio::ConnectionLike + Send,
{
    let value: Value = invocation
        .invoke_async(conn)
        .await
        .map_err(|e| reply_error(&e))?;
    int(&value)
        .and_then(|n| u64::try_from(n).ok())
        .ok_or_else(|| Error::Reply(format!("unexpected {script} reply {value:?}")))
}

impl SpendScripts {
    /// Charges `member` (unique per call) on every budget at one common
    /// start no more than `max_wait` µs from now, or charges nothing.
    ///
    /// A cost above its budget's limit could never fit: it is refused here
    /// with an error naming the budget, before anything is sent to Redis.
    pub async fn reserve<C>(
        &self,
        conn: &mut C,
        keys: &CredentialKeys,
        budgets: &[Budget],
        member: &str,
        max_wait: Micros,
        clock: Clock,
    ) -> Result<Spent, Error>
    where
        C: redis::aio::ConnectionLike + Send,
    {
        self.reserve_after(conn, keys, budgets, member, 0, max_wait, clock)
            .await
    }

    /// [`SpendScripts::reserve`] for a start no earlier than `not_before`
    /// µs from now (another scope of the call starts it later).
    #[allow(clippy::too_many_arguments)]
    pub async fn reserve_after<C>(
        &self,
        conn: &mut C,
        keys: &CredentialKeys,
        budgets: &[Budget],
        member: &str,
        not_before: Micros,
        max_wait: Micros,
        clock: Clock,
    ) -> Result<Spent, Error>
    where
        C: redis::aio::ConnectionLike + Send,
    {
        let window = Window {
            not_before,
            max_wait,
        };
        self.reserve_seen(conn, keys, budgets, member, window, None, clock)
            .await
            .map(|seen| seen.spent)
    }

    /// [`SpendScripts::reserve_after`] that also beats `heartbeat`'s
    /// process in the credential's heartbeat set (the one the reserve
    /// script keeps), and returns the processes present with the answer:
    /// the fallback's share is one over them.
    #[allow(clippy::too_many_arguments)]
    pub async fn reserve_seen<C>(
        &self,
        conn: &mut C,
        keys: &CredentialKeys,
        budgets: &[Budget],
        member: &str,
        window: Window,
        heartbeat: Option<Heartbeat<'_>>,
        clock: Clock,
    ) -> Result<Seen, Error>
    where
        C: redis::aio::ConnectionLike + Send,
    {
        self.reserve_leased(
            conn,
            keys,
            budgets,
            member,
            window,
            Lease::ONE,
            heartbeat,
            clock,
        )
        .await
    }

    /// [`SpendScripts::reserve_seen`] with `lease`'s further starts placed
    /// after the call's in the same atomic step ([`Seen::further`]), each
    /// charged in every budget. A spend with a GCRA budget is never leased.
    #[allow(clippy::too_many_arguments)]
    pub async fn reserve_leased<C>(
        &self,
        conn: &mut C,
        keys: &CredentialKeys,
        budgets: &[Budget],
        member: &str,
        window: Window,
        lease: Lease<'_>,
        heartbeat: Option<Heartbeat<'_>>,
        clock: Clock,
    ) -> Result<Seen, Error>
    where
        C: redis::aio::ConnectionLike + Send,
    {
        let Window {
            not_before,
            max_wait,
        } = window;
        if budgets.is_empty() {
            return Err(Error::Reply("a spend needs at least one budget".into()));
        }
        if let Some(over) = budgets.iter().find(|b| b.cost > b.capacity()) {
            return Err(Error::Reply(format!(
                "a cost of {} exceeds {}'s window of {} and can never fit",
                over.cost,
                over.name,
                over.capacity()
            )));
        }
        let mut invocation = self.spend.prepare_invoke();
        for budget in budgets {
            invocation.key(budget.key(keys));
        }
        invocation.key(keys.processes()).key(keys.void(member));
        invocation
            .arg(clock_arg(clock))
            .arg(max_wait)
            .arg(member)
            .arg(TTL_SLACK)
            .arg(not_before)
            .arg(heartbeat.map_or("", |h| h.process))
            .arg(heartbeat.map_or(0, |h| h.window))
            .arg(lease.slots.max(1))
            .arg(lease.horizon)
            .arg(lease.lead)
            .arg(lease.stale.len());
        for member in lease.stale {
            invocation.arg(member);
        }
        for budget in budgets {
            budget.args(&mut invocation);
        }
        let value: Value = invocation
            .invoke_async(conn)
            .await
            .map_err(|e| reply_error(&e))?;
        parse_spent(&value, budgets.len())
    }

    /// Trues `member`'s cost up in `budgets` (whose `cost` is the estimate
    /// charged) to `actual`, at the call's start. Returns the entries changed.
    /// A GCRA budget is left alone: [`SpendScripts::settle_buckets`] knows
    /// what the spend did to it.
    pub async fn settle<C>(
        &self,
        conn: &mut C,
        keys: &CredentialKeys,
        budgets: &[Budget],
        member: &str,
        actual: u64,
    ) -> Result<u64, Error>
    where
        C: redis::aio::ConnectionLike + Send,
    {
        self.rewrite(
            conn,
            keys,
            budgets,
            member,
            &Granted::default(),
            Some(actual),
        )
        .await
    }

    /// Removes `member`'s unused start from `budgets` (GCRA budgets: see
    /// [`SpendScripts::refund_buckets`]).
    pub async fn refund<C>(
        &self,
        conn: &mut C,
        keys: &CredentialKeys,
        budgets: &[Budget],
        member: &str,
    ) -> Result<u64, Error>
    where
        C: redis::aio::ConnectionLike + Send,
    {
        self.rewrite(conn, keys, budgets, member, &Granted::default(), None)
            .await
    }

    /// [`SpendScripts::settle`], GCRA budgets included: `granted` is what
    /// the spend answered ([`Seen`]'s start and buckets).
    pub async fn settle_buckets<C>(
        &self,
        conn: &mut C,
        keys: &CredentialKeys,
        budgets: &[Budget],
        member: &str,
        granted: &Granted,
        actual: u64,
    ) -> Result<u64, Error>
    where
        C: redis::aio::ConnectionLike + Send,
    {
        self.rewrite(conn, keys, budgets, member, granted, Some(actual))
            .await
    }

    /// [`SpendScripts::refund`], GCRA budgets included (a bucket's slot
    /// comes back only while nothing was charged after it).
    pub async fn refund_buckets<C>(
        &self,
        conn: &mut C,
        keys: &CredentialKeys,
        budgets: &[Budget],
        member: &str,
        granted: &Granted,
    ) -> Result<u64, Error>
    where
        C: redis::aio::ConnectionLike + Send,
    {
        self.rewrite(conn, keys, budgets, member, granted, None)
            .await
    }

    /// Adds spends this process made on its own (its fallback decided
    /// them while Redis could not be asked) to every one of `budgets`, at
    /// each budget's cost: `spends` are signed µs from now (earliest
    /// first) and each spend's member, unique to it, so that a spend sent
    /// again after a timeout is logged once in a window. Nothing is
    /// refused: the spends happened. Returns how many still counted in
    /// some budget (those older than every window are left out).
    pub async fn record<C>(
        &self,
        conn: &mut C,
        keys: &CredentialKeys,
        budgets: &[Budget],
        spends: &[(i64, String)],
        clock: Clock,
    ) -> Result<u64, Error>
    where
        C: redis::aio::ConnectionLike + Send,
    {
        if budgets.is_empty() || spends.is_empty() {
            return Ok(0);
        }
        let mut invocation = self.record.prepare_invoke();
        for budget in budgets {
            invocation.key(budget.key(keys));
        }
        invocation
            .arg(clock_arg(clock))
            .arg(TTL_SLACK)
            .arg(budgets.len());
        for budget in budgets {
            budget.args(&mut invocation);
        }
        for (offset, member) in spends {
            invocation.arg(*offset).arg(member);
        }
        count(invocation, conn, "record").await
    }

    async fn rewrite<C>(
        &self,
        conn: &mut C,
        keys: &CredentialKeys,
        budgets: &[Budget],
        member: &str,
        granted: &Granted,
        actual: Option<u64>,
    ) -> Result<u64, Error>
    where
        C: redis::aio::ConnectionLike + Send,
    {
        // A bucket whose spend is not known is not touched.
        let touched: Vec<(&Budget, Option<&Bucket>)> = budgets
            .iter()
            .enumerate()
            .filter_map(|(index, budget)| match budget.burst {
                None => Some((budget, None)),
                Some(_) => granted
                    .buckets
                    .iter()
                    .find(|bucket| bucket.budget == index)
                    .map(|bucket| (budget, Some(bucket))),
            })
            .collect();
        if touched.is_empty() {
            return Ok(0);
        }
        let mut invocation = self.settle.prepare_invoke();
        for (budget, _) in &touched {
            invocation.key(budget.key(keys));
        }
        invocation.arg(member);
        for (budget, bucket) in &touched {
            invocation
                .arg(budget.cost)
                .arg(actual.map_or_else(String::new, |cost| cost.to_string()));
            match bucket {
                Some(bucket) => invocation
                    .arg(budget.interval())
                    .arg(granted.start)
                    .arg(bucket.before)
                    .arg(bucket.after),
                None => invocation.arg("").arg("").arg("").arg(""),
            };
        }
        count(invocation, conn, "settle").await
    }
}

/// What a granted spend did, for its refund or true-up: its start (µs on
/// the server's clock) and each GCRA budget's arrival times.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Granted {
    /// The start.
    pub start: Micros,
    /// What the spend did to each GCRA budget.
    pub buckets: Vec<Bucket>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_keys_share_the_credential_slot() {
        let keys = CredentialKeys::new("sluice", "openai");
        let budget = Budget::unit("to:kens", 1, 150_000, 60_000_000, 800);
        assert_eq!(budget.key(&keys), "sluice:{openai}:b:to%3Akens:1");
    }
}
