//! What the spend scripts take and answer: the budgets a call spends, a
//! lease's asks, and what a spend granted.

use redis::ScriptInvocation;

use sluice::shared::{Hold, SharedWindow};

use crate::keys::{CredentialKeys, part};
use crate::store::{View, Void};

/// Integer microseconds.
pub type Micros = u64;

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
    pub(super) fn capacity(&self) -> u64 {
        self.burst.unwrap_or(self.limit)
    }

    /// T, the emission interval of a bucket, µs.
    pub fn interval(&self) -> Micros {
        self.window.max(1).div_ceil(self.limit.max(1))
    }

    /// Its four arguments to the spend and record scripts: limit, window
    /// µs, cost, burst (0: a sliding window).
    pub(super) fn args(&self, invocation: &mut ScriptInvocation<'_>) {
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
    /// A spent quota denied it, or a block put its start past the
    /// acceptable wait; nothing was charged.
    Held {
        /// From now: when the hold ends.
        wait: Micros,
        /// Index (into the window's scopes) of the scope held.
        scope: usize,
        /// Which hold.
        hold: Hold,
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
    /// The processes in the heartbeat set (0: none sent), and every
    /// active block and spent quota of the credential, from the script's
    /// now (known for a grant: its start less its wait).
    pub view: View,
    /// Granted: how far from the script's now the same spend's earliest
    /// start lies after this one and its lease (µs).
    pub next: Option<Micros>,
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

/// When a spend may start, µs from now, and what holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window<'a> {
    /// No earlier than this.
    pub not_before: Micros,
    /// No later than this.
    pub max_wait: Micros,
    /// The call's scopes (key parts): a spent quota on any denies it, and
    /// it starts after the latest block on them.
    pub scopes: &'a [String],
}

/// Further starts of the same spend asked for with it: a lease (its
/// first start is the call's; the others wait for this process's callers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease<'a> {
    /// Starts in all, at least 1 (the call's own among them).
    pub slots: u32,
    /// A further start lies at most this far after the call's own, µs.
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

/// What a granted spend did, for its refund or true-up: its start (µs on
/// the server's clock) and each GCRA budget's arrival times.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Granted {
    /// The start.
    pub start: Micros,
    /// What the spend did to each GCRA budget.
    pub buckets: Vec<Bucket>,
}

/// The Redis budget name of a window: its scope, or `scope:unit` for a
/// unit, with `~low` for the low-priority share of either (a TOML bare key
/// has neither `:` nor `~`, so none of them meet).
fn budget_name(window: &SharedWindow) -> String {
    let name = match &window.unit {
        None => window.scope.clone(),
        Some(unit) => format!("{}:{unit}", window.scope),
    };
    if window.low {
        format!("{name}~low")
    } else {
        name
    }
}

/// Whether the budget `name` is a window of `unit` (or of its low share).
pub(crate) fn is_unit(name: &str, unit: &str) -> bool {
    let name = name.strip_suffix("~low").unwrap_or(name);
    name.strip_suffix(unit)
        .is_some_and(|scope| scope.ends_with(':'))
}

/// The spend script's budgets for `windows`, at the call's costs.
pub(crate) fn budgets(windows: &[SharedWindow]) -> Vec<Budget> {
    windows
        .iter()
        .map(|window| Budget {
            name: budget_name(window),
            index: window.index,
            limit: u64::from(window.rate.count().get()),
            window: u64::try_from(window.rate.window().as_micros()).unwrap_or(u64::MAX),
            cost: window.cost,
            burst: window.burst.map(|burst| u64::from(burst.get())),
        })
        .collect()
}

/// What spend `member` (with `slots` starts) may have logged: its entry
/// `{member}|{cost}`, and each further start's, in every window (a
/// bucket's arrival time cannot be told apart: it is left).
pub(crate) fn void(
    credential: &str,
    budgets: &[Budget],
    member: &str,
    slots: u32,
    keys: &CredentialKeys,
) -> Void {
    let windows = budgets.iter().filter(|budget| budget.burst.is_none());
    let logs: Vec<String> = windows.clone().map(|budget| budget.key(keys)).collect();
    let mut costs: Vec<u64> = windows.map(|budget| budget.cost).collect();
    costs.sort_unstable();
    costs.dedup();
    let names = std::iter::once(member.to_owned())
        .chain((0..slots.saturating_sub(1) as usize).map(|k| further_member(member, k)));
    let members = names
        .flat_map(|name| costs.iter().map(move |cost| format!("{name}|{cost}")))
        .collect();
    Void {
        credential: credential.to_owned(),
        id: member.to_owned(),
        logs,
        members,
    }
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

    #[test]
    fn a_unit_budget_is_named_after_its_scope_and_unit() {
        assert!(is_unit("api_key:tokens", "tokens"));
        assert!(is_unit("search:tokens~low", "tokens"));
        assert!(!is_unit("api_key", "api_key"));
        assert!(!is_unit("api_key:xtokens", "tokens"));
        assert!(!is_unit("api_key:tokens", "images"));
    }
}
