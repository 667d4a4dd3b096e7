//! [`SpendScripts`]: the spend, settle, refund and record scripts, called.

use redis::{Script, ScriptInvocation, Value};

use super::reply::{int, parse_spent};
use super::types::{Bucket, Budget, Granted, Heartbeat, Lease, Micros, Seen, Spent, Window};
use crate::keys::CredentialKeys;
use crate::store::Clock;
use crate::{Error, lua};

/// How long keys outlive the windows they hold (as the reserve script's).
const TTL_SLACK: Micros = 5_000_000;

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
            record: lua::script(include_str!("../lua/record.lua")),
        }
    }
}

fn clock_arg(clock: Clock) -> String {
    match clock {
        Clock::Server => String::new(),
        Clock::At(now) => now.to_string(),
    }
}

/// The record script (`lua/record.lua`) on `logs`, one key per budget in
/// order (a budget's own key, or the reserve script's log or bucket of a
/// call on one limit), for `spends` (signed µs from now, each with its
/// member) at each budget's cost.
pub(crate) fn record_invocation<'a>(
    script: &'a Script,
    logs: impl IntoIterator<Item = String>,
    budgets: &[Budget],
    spends: &[(i64, String)],
    clock: Clock,
) -> ScriptInvocation<'a> {
    let mut invocation = script.prepare_invoke();
    for log in logs {
        invocation.key(log);
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
    invocation
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
        let window = Window {
            not_before: 0,
            max_wait,
            scopes: &[],
        };
        self.reserve_seen(conn, keys, budgets, member, window, None, clock)
            .await
            .map(|seen| seen.spent)
    }

    /// [`SpendScripts::reserve`] in `window` (no earlier than its
    /// `not_before`, held by its scopes' blocks and quotas), beating
    /// `heartbeat`'s process in the credential's heartbeat set (the one
    /// the reserve script keeps); the answer says the processes present
    /// (the fallback's share is one over them) and the active holds.
    #[allow(clippy::too_many_arguments)]
    pub async fn reserve_seen<C>(
        &self,
        conn: &mut C,
        keys: &CredentialKeys,
        budgets: &[Budget],
        member: &str,
        window: Window<'_>,
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
        window: Window<'_>,
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
            scopes,
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
        invocation
            .key(keys.processes())
            .key(keys.void(member))
            .key(keys.blocks())
            .key(keys.quota());
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
        for scope in scopes {
            invocation.arg(scope);
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
        let logs = budgets.iter().map(|budget| budget.key(keys));
        let invocation = record_invocation(&self.record, logs, budgets, spends, clock);
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
