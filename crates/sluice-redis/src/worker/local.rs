//! The fallback's local starts on their way to Redis: kept while it cannot
//! be reached (the latest, each until it counts nowhere), sent with the
//! record scripts once it answers, and the true-ups of local spends on
//! several windows or units sent after them.

use std::collections::HashMap;
use std::time::Duration;

use sluice::limiter::micros;
use sluice::shared::SharedLimit;
use tokio::time::Instant;

use crate::instant::since;
use crate::runner::Runner;
use crate::spend::is_unit;
use crate::spend::{Budget, SpendScripts};
use crate::store::{Clock, RecordArgs};

use super::unwritten::Pending;

/// Local starts kept for recording while Redis is unreachable (the
/// latest; those that count nowhere any more are dropped first), and
/// sent spends remembered for a true-up.
const KEPT: usize = 4_096;

/// A start the fallback granted without Redis, to be added to the shared
/// log so that every process counts it.
#[derive(Debug)]
pub(super) struct LocalStart {
    /// Numbers the start once the worker has it (0 until then).
    pub(super) id: u64,
    pub(super) credential: String,
    pub(super) charged: Charged,
    pub(super) at: Instant,
    /// Counts it in its credential's unwritten starts until it is dropped.
    pub(super) _pending: Pending,
}

/// What a local start charged.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Charged {
    /// The limit of a call on one: its first scope's.
    Limit { scope: String, limit: SharedLimit },
    /// Every budget of a call on several windows, groups or units, at its
    /// costs (as the spend script charges them), and the fallback's id of
    /// the spend (its true-up names it).
    Budgets { budgets: Vec<Budget>, spend: u64 },
}

impl Charged {
    /// How long after its start a start charged here still counts: its
    /// window, the longest of them, or the time a bucket takes to drain
    /// a cost larger than its rate's window holds.
    fn counts_for(&self) -> Duration {
        match self {
            Charged::Limit { limit, .. } => limit.rate.window(),
            Charged::Budgets { budgets, .. } => Duration::from_micros(
                budgets
                    .iter()
                    .map(|budget| {
                        let drained = budget
                            .burst
                            .map_or(0, |_| budget.cost.saturating_mul(budget.interval()));
                        budget.window.max(drained)
                    })
                    .max()
                    .unwrap_or(0),
            ),
        }
    }

    /// Same scope and limit, or same budgets at the same costs: sent in
    /// one command.
    fn goes_with(&self, other: &Charged) -> bool {
        match (self, other) {
            (Charged::Budgets { budgets: a, .. }, Charged::Budgets { budgets: b, .. }) => a == b,
            _ => self == other,
        }
    }
}

impl LocalStart {
    /// Once what it charged has left every window, it counts nowhere.
    fn counts_at(&self, now: Instant) -> bool {
        self.at + self.charged.counts_for() > now
    }
}

/// A local spend's true-up: `unit` cost `actual` where `estimate` was charged.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct TrueUp {
    pub(super) credential: String,
    /// The fallback's id of the spend.
    pub(super) spend: u64,
    pub(super) unit: String,
    pub(super) estimate: u64,
    pub(super) actual: u64,
}

/// A local spend Redis holds: what it was written as.
#[derive(Debug)]
struct Sent {
    member: String,
    budgets: Vec<Budget>,
    until: Instant,
}

/// A true-up of a spend Redis holds, to be sent: `budgets` at the cost
/// written, rewritten to `actual`.
#[derive(Debug)]
struct Rewrite {
    credential: String,
    member: String,
    budgets: Vec<Budget>,
    actual: u64,
    until: Instant,
}

/// What the worker keeps of the fallback's starts.
pub(super) struct Kept {
    /// Names this process's local starts in Redis's logs.
    members: String,
    numbered: u64,
    starts: Vec<LocalStart>,
    /// Spends written, by credential and the fallback's id.
    sent: HashMap<(String, u64), Sent>,
    rewrites: Vec<Rewrite>,
    scripts: SpendScripts,
}

impl Kept {
    pub(super) fn new() -> Self {
        Kept {
            members: format!("{:016x}:l", rand::random::<u64>()),
            numbered: 0,
            starts: Vec::new(),
            sent: HashMap::new(),
            rewrites: Vec::new(),
            scripts: SpendScripts::default(),
        }
    }

    /// Something waits for Redis.
    pub(super) fn waiting(&self) -> bool {
        !self.starts.is_empty() || !self.rewrites.is_empty()
    }

    pub(super) fn add(&mut self, mut start: LocalStart) {
        self.numbered += 1;
        start.id = self.numbered;
        self.starts.push(start);
    }

    /// A local spend's true-up: the cost it is to be written with, if it
    /// still waits; else a rewrite of what was written.
    pub(super) fn true_up(&mut self, up: TrueUp, now: Instant) {
        let waiting = self
            .starts
            .iter_mut()
            .find_map(|start| match &mut start.charged {
                Charged::Budgets { budgets, spend }
                    if start.credential == up.credential && *spend == up.spend =>
                {
                    Some(budgets)
                }
                _ => None,
            });
        if let Some(budgets) = waiting {
            retarget(budgets, &up);
            return;
        }
        let Some(sent) = self.sent.get_mut(&(up.credential.clone(), up.spend)) else {
            return;
        };
        if sent.until <= now {
            return;
        }
        // The settle script rewrites windows; a bucket's share of the
        // spend is not known apart from the others' and stays.
        let written: Vec<Budget> = sent
            .budgets
            .iter()
            .filter(|b| b.burst.is_none() && charged_in(b, &up))
            .cloned()
            .collect();
        retarget(&mut sent.budgets, &up);
        if !written.is_empty() {
            self.rewrites.push(Rewrite {
                credential: up.credential,
                member: sent.member.clone(),
                budgets: written,
                actual: up.actual,
                until: sent.until,
            });
        }
    }

    /// Forgets what counts nowhere any more, and the oldest beyond the cap.
    pub(super) fn prune(&mut self, now: Instant) {
        self.starts.retain(|start| start.counts_at(now));
        if self.starts.len() > KEPT {
            self.starts.sort_by_key(|start| start.at);
            let excess = self.starts.len() - KEPT;
            self.starts.drain(..excess);
        }
        self.sent.retain(|_, sent| sent.until > now);
        if self.sent.len() > KEPT {
            let mut until: Vec<Instant> = self.sent.values().map(|sent| sent.until).collect();
            until.sort();
            let keep_from = until[until.len() - KEPT];
            self.sent.retain(|_, sent| sent.until >= keep_from);
        }
        self.rewrites.retain(|rewrite| rewrite.until > now);
    }

    /// Sends the kept starts, then the rewrites; keeps what failed.
    pub(super) async fn send(&mut self, runner: &Runner) {
        for group in by_charge(std::mem::take(&mut self.starts)) {
            let sent = Instant::now();
            let entries: Vec<(i64, String)> = group
                .iter()
                .map(|start| (offset(start.at, sent), self.member(start)))
                .collect();
            let Some(first) = group.first() else {
                continue;
            };
            let credential = &first.credential;
            let result = match &first.charged {
                Charged::Limit { scope, limit } => {
                    let args = RecordArgs {
                        credential,
                        scope,
                        limit: *limit,
                        starts: &entries,
                    };
                    runner
                        .run(|store, mut conn| {
                            let args = &args;
                            async move { store.record(&mut conn, args, Clock::Server).await }
                        })
                        .await
                }
                Charged::Budgets { budgets, .. } => {
                    let keys = runner.store().keys(credential);
                    runner
                        .run(|_, mut conn| {
                            let (scripts, keys, entries) = (&self.scripts, &keys, &entries);
                            async move {
                                scripts
                                    .record(&mut conn, keys, budgets, entries, Clock::Server)
                                    .await
                            }
                        })
                        .await
                }
            };
            if result.is_err() {
                // The command's fate is unknown: sent again, a window logs
                // each start once (by its member) and a bucket may count it
                // twice (spending less); none is lost (spending more).
                self.starts.extend(group);
                continue;
            }
            for start in group {
                if let Charged::Budgets { budgets, spend } = &start.charged {
                    let written = Sent {
                        member: self.member(&start),
                        budgets: budgets.clone(),
                        until: start.at + start.charged.counts_for(),
                    };
                    self.sent
                        .insert((start.credential.clone(), *spend), written);
                }
            }
        }
        for rewrite in std::mem::take(&mut self.rewrites) {
            let keys = runner.store().keys(&rewrite.credential);
            let result = runner
                .run(|_, mut conn| {
                    let (scripts, keys, rewrite) = (&self.scripts, &keys, &rewrite);
                    async move {
                        scripts
                            .settle(
                                &mut conn,
                                keys,
                                &rewrite.budgets,
                                &rewrite.member,
                                rewrite.actual,
                            )
                            .await
                    }
                })
                .await;
            // Sent again, the script finds the cost already rewritten and
            // changes nothing.
            if result.is_err() {
                self.rewrites.push(rewrite);
            }
        }
    }

    fn member(&self, start: &LocalStart) -> String {
        format!("{}{}", self.members, start.id)
    }
}

/// Whether `budget` is a window of the true-up's unit charged at its estimate.
fn charged_in(budget: &Budget, up: &TrueUp) -> bool {
    is_unit(&budget.name, &up.unit) && budget.cost == up.estimate
}

/// Sets the true-up's unit's budgets charged at the estimate to the actual cost.
fn retarget(budgets: &mut [Budget], up: &TrueUp) {
    for budget in budgets.iter_mut().filter(|b| charged_in(b, up)) {
        budget.cost = up.actual;
    }
}

/// `starts` grouped by credential and what they charged (a scope and its
/// limit, or a call's budgets at its costs), each group earliest first.
fn by_charge(mut starts: Vec<LocalStart>) -> Vec<Vec<LocalStart>> {
    starts.sort_by(|a, b| (&a.credential, a.at).cmp(&(&b.credential, b.at)));
    let mut groups: Vec<Vec<LocalStart>> = Vec::new();
    for start in starts {
        match groups.iter_mut().find(|group| {
            group.first().is_some_and(|first| {
                first.credential == start.credential && first.charged.goes_with(&start.charged)
            })
        }) {
            Some(group) => group.push(start),
            None => groups.push(vec![start]),
        }
    }
    groups
}

/// `at` in signed µs from `now`, as the record script takes a start.
fn offset(at: Instant, now: Instant) -> i64 {
    // One of the two is zero.
    let ahead = i64::try_from(micros(since(at, now))).unwrap_or(i64::MAX);
    let ago = i64::try_from(micros(since(now, at))).unwrap_or(i64::MAX);
    ahead - ago
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worker::unwritten::Unwritten;

    fn start(credential: &str, scope: &str, rate: &str, at: Instant) -> LocalStart {
        LocalStart {
            id: 0,
            credential: credential.to_owned(),
            charged: Charged::Limit {
                scope: scope.to_owned(),
                limit: SharedLimit {
                    rate: rate.parse().unwrap(),
                    burst: None,
                },
            },
            at,
            _pending: Unwritten::default().one(),
        }
    }

    fn spend(credential: &str, budgets: &[Budget], at: Instant) -> LocalStart {
        spend_numbered(credential, budgets, 0, at)
    }

    fn spend_numbered(credential: &str, budgets: &[Budget], spend: u64, at: Instant) -> LocalStart {
        LocalStart {
            id: 0,
            credential: credential.to_owned(),
            charged: Charged::Budgets {
                budgets: budgets.to_vec(),
                spend,
            },
            at,
            _pending: Unwritten::default().one(),
        }
    }

    /// A group's starts as (credential, what they charged, time from `t0`).
    fn seen(groups: &[Vec<LocalStart>], t0: Instant) -> Vec<Vec<(&str, String, Duration)>> {
        groups
            .iter()
            .map(|group| {
                group
                    .iter()
                    .map(|s| {
                        let charged = match &s.charged {
                            Charged::Limit { scope, limit } => {
                                format!("{scope} {}", limit.rate.count())
                            }
                            Charged::Budgets { budgets, .. } => budgets
                                .iter()
                                .map(|b| format!("{}#{} x{}", b.name, b.index, b.cost))
                                .collect::<Vec<_>>()
                                .join(", "),
                        };
                        (s.credential.as_str(), charged, s.at - t0)
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn local_starts_go_out_by_what_they_charged_earliest_first() {
        let t0 = Instant::now();
        let ms = Duration::from_millis(1);
        let requests = Budget::requests("api_key", 0, 10, 1_000_000);
        let small = [
            requests.clone(),
            Budget::unit("tokens", 0, 1_000, 60_000_000, 10),
        ];
        let large = [requests, Budget::unit("tokens", 0, 1_000, 60_000_000, 20)];
        let groups = by_charge(vec![
            start("key", "api_key", "10/1s", t0 + 3 * ms),
            start("other", "api_key", "10/1s", t0),
            start("key", "api_key", "10/1s", t0 + ms),
            start("key", "api_key", "20/1s", t0 + 2 * ms),
            start("key", "model", "10/1s", t0),
            spend_numbered("key", &small, 3, t0 + 5 * ms),
            spend_numbered("key", &large, 2, t0 + 4 * ms),
            spend_numbered("key", &small, 1, t0 + 4 * ms),
        ]);
        let tokens = |cost: u32| format!("api_key#0 x1, tokens#0 x{cost}");
        assert_eq!(
            seen(&groups, t0),
            vec![
                vec![("key", "model 10".to_owned(), Duration::ZERO)],
                vec![
                    ("key", "api_key 10".to_owned(), ms),
                    ("key", "api_key 10".to_owned(), 3 * ms)
                ],
                vec![("key", "api_key 20".to_owned(), 2 * ms)],
                vec![("key", tokens(20), 4 * ms)],
                vec![("key", tokens(10), 4 * ms), ("key", tokens(10), 5 * ms)],
                vec![("other", "api_key 10".to_owned(), Duration::ZERO)],
            ]
        );
    }

    #[test]
    fn a_start_is_sent_as_signed_microseconds_from_now() {
        let now = Instant::now() + Duration::from_secs(10);
        let ms = Duration::from_millis(1);
        assert_eq!(offset(now, now), 0);
        assert_eq!(offset(now + 3 * ms, now), 3_000);
        assert_eq!(offset(now - 2 * ms, now), -2_000);
    }

    #[test]
    fn a_start_counts_for_one_window() {
        let t0 = Instant::now();
        let s = start("key", "api_key", "10/1s", t0);
        assert!(s.counts_at(t0 + Duration::from_millis(999)));
        assert!(!s.counts_at(t0 + Duration::from_secs(1)));
    }

    #[test]
    fn a_start_is_unwritten_until_it_is_gone() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let unwritten = Unwritten::default();
        assert!(unwritten.none());
        let mut kept = Kept::new();
        for at in [t0, t0 + 2 * s] {
            kept.add(LocalStart {
                _pending: unwritten.one(),
                ..start("key", "api_key", "10/1s", at)
            });
        }
        // Kept while Redis is away: both wait.
        kept.prune(t0 + s / 2);
        assert!(!unwritten.none());
        // The first counts nowhere any more; the second still waits.
        kept.prune(t0 + 2 * s);
        assert!(!unwritten.none());
        assert_eq!(kept.starts.len(), 1);
        // Written (taken out of the kept ones and dropped), none waits.
        drop(std::mem::take(&mut kept.starts));
        assert!(unwritten.none());
    }

    #[test]
    fn a_spend_counts_until_it_has_left_its_longest_window_or_drained() {
        let t0 = Instant::now();
        let s = spend(
            "key",
            &[
                Budget::requests("api_key", 0, 10, 1_000_000),
                Budget::unit("tokens", 0, 1_000, 60_000_000, 10),
            ],
            t0,
        );
        assert!(s.counts_at(t0 + Duration::from_secs(59)));
        assert!(!s.counts_at(t0 + Duration::from_secs(60)));
        // A bucket of 10 a second holding 50 at once: a cost of 40 takes
        // 4 s to drain, longer than its rate's window.
        let bucket = Budget::unit("tokens", 0, 10, 1_000_000, 40).with_burst(50);
        let s = spend("key", &[bucket], t0);
        assert!(s.counts_at(t0 + Duration::from_millis(3_999)));
        assert!(!s.counts_at(t0 + Duration::from_secs(4)));
    }

    /// A call's budgets: a request window, and two windows of tokens
    /// (one a bucket) at an estimate of 250.
    fn llm_budgets() -> [Budget; 3] {
        [
            Budget::requests("api_key", 0, 10, 1_000_000),
            Budget::unit("api_key:tokens", 0, 1_000, 10_000_000, 250),
            Budget::unit("api_key:tokens", 1, 100, 1_000_000, 250).with_burst(500),
        ]
    }

    fn up(spend: u64, unit: &str, actual: u64) -> TrueUp {
        TrueUp {
            credential: "key".into(),
            spend,
            unit: unit.into(),
            estimate: 250,
            actual,
        }
    }

    fn costs(budgets: &[Budget]) -> Vec<u64> {
        budgets.iter().map(|b| b.cost).collect()
    }

    #[test]
    fn a_true_up_changes_the_cost_a_waiting_spend_is_written_with() {
        let now = Instant::now();
        let mut kept = Kept::new();
        kept.add(spend_numbered("key", &llm_budgets(), 7, now));
        // Another unit, another spend, or another credential: nothing.
        kept.true_up(up(7, "images", 400), now);
        kept.true_up(up(8, "tokens", 400), now);
        kept.true_up(
            TrueUp {
                credential: "other".into(),
                ..up(7, "tokens", 400)
            },
            now,
        );
        let charged = |kept: &Kept| match &kept.starts[0].charged {
            Charged::Budgets { budgets, .. } => costs(budgets),
            Charged::Limit { .. } => Vec::new(),
        };
        assert_eq!(charged(&kept), [1, 250, 250]);
        kept.true_up(up(7, "tokens", 400), now);
        assert_eq!(charged(&kept), [1, 400, 400]);
        assert!(kept.rewrites.is_empty());
    }

    #[test]
    fn a_true_up_of_a_written_spend_rewrites_its_windows_of_the_unit() {
        let now = Instant::now();
        let mut kept = Kept::new();
        kept.sent.insert(
            ("key".into(), 7),
            Sent {
                member: "m:l1".into(),
                budgets: llm_budgets().to_vec(),
                until: now + Duration::from_secs(10),
            },
        );
        kept.true_up(up(7, "tokens", 400), now);
        // The window written at 250 is rewritten; the bucket is not.
        assert_eq!(kept.rewrites.len(), 1);
        let rewrite = &kept.rewrites[0];
        assert_eq!((rewrite.member.as_str(), rewrite.actual), ("m:l1", 400));
        let names: Vec<(&str, usize, u64)> = rewrite
            .budgets
            .iter()
            .map(|b| (b.name.as_str(), b.index, b.cost))
            .collect();
        assert_eq!(names, [("api_key:tokens", 0, 250)]);
        // What was written is now the actual cost: a second true-up from
        // the estimate finds nothing.
        assert_eq!(costs(&kept.sent[&("key".into(), 7)].budgets), [1, 400, 400]);
        kept.true_up(up(7, "tokens", 300), now);
        assert_eq!(kept.rewrites.len(), 1);
        // Once it counts nowhere, it is forgotten.
        kept.prune(now + Duration::from_secs(10));
        assert!(kept.sent.is_empty() && kept.rewrites.is_empty());
    }
}
