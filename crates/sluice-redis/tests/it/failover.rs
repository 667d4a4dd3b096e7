//! Redis Cluster failover: three masters and three replicas; the master
//! owning the credential's slot is killed mid-run and its replica promoted.
//! Two budgets with their own connections stand for two processes (two
//! `sluice` processes would spend most of the test starting up).

use crate::support;

use std::time::Duration;

use sluice_redis::{Mode, RedisBudget, RedisConfig};
use support::*;
use tokio::time::Instant;

const R: usize = 40;
const RATE: &str = "40/1s";
/// The command timeout (the default).
const TIMEOUT: Duration = Duration::from_millis(50);
/// The breaker's first open spell (the default).
const BREAKER_OPEN: Duration = Duration::from_millis(250);

fn mode(budget: &RedisBudget) -> (Mode, u64) {
    let status = budget.status();
    status
        .credentials
        .iter()
        .find(|c| c.credential == "key")
        .map_or((Mode::Shared, 0), |c| (c.mode, c.decisions.shared))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_failover_keeps_the_budget_and_shared_mode_comes_back() {
    let _turn = crate::support::module_turn(module_path!());
    failover(None).await;
}

/// As [`a_master_failover_keeps_the_budget_and_shared_mode_comes_back`],
/// on a credential whose calls spend two windows (`spend.lua`). Its
/// fallback, too, starts no sooner than Redis last said a start was free:
/// without that, the other process's grants still to come (made before the
/// kill) and this one's local starts filled the same second (51 and 52 of
/// 40 in two runs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_failover_keeps_the_budget_on_several_windows() {
    let _turn = crate::support::module_turn(module_path!());
    failover(Some("100000/1h")).await;
}

async fn failover(beside: Option<&str>) {
    let mut cluster = RedisCluster::start_with(1, None);
    let config = || RedisConfig::cluster(cluster.urls()).timeout(TIMEOUT);
    let budgets = [budget(config()).await, budget(config()).await];
    let owner = cluster.master_of(&budgets[0].store().keys("key").meta());
    let server = fake(10_000).await;

    let sent = Sent::default();
    let origin = Instant::now();
    let until = origin + Duration::from_millis(9_000);
    let runs: Vec<_> = budgets
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let gate = gate_naming_modes(
                &server,
                (RATE, beside),
                b.clone(),
                16,
                i as u64,
                Some(sent.clone()),
            );
            tokio::spawn(drive(
                gate,
                ["a", "b"][i],
                8,
                until,
                Duration::from_millis(200),
            ))
        })
        .collect();
    let prober = tokio::spawn(probe(budgets[0].clone(), until));

    tokio::time::sleep_until(origin + Duration::from_millis(1_500)).await;
    let killed_at = origin.elapsed();
    cluster.kill(owner);
    let shared_before: Vec<u64> = budgets.iter().map(|b| mode(b).1).collect();

    // The replica is promoted by the cluster itself (node timeout 1 s).
    let promoted = Instant::now() + Duration::from_secs(6);
    let new_owner = loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let found = tokio::task::block_in_place(|| {
            cluster.try_master_of(&budgets[0].store().keys("key").meta())
        });
        if let Some(index) = found
            && index != owner
        {
            break index;
        }
        assert!(Instant::now() < promoted, "no replica was promoted");
    };
    let promoted_at = origin.elapsed();

    let mut driven = Vec::new();
    for run in runs {
        driven.push(run.await.unwrap());
    }
    let longest_probe = prober.await.unwrap();
    let starts = starts(&server);
    let (busiest, busiest_at) = busiest_window(&starts, 1_000.0);
    let mut own = sent.lock().clone();
    own.sort_by(f64::total_cmp);
    let (own_busiest, own_at) = busiest_window(&own, 1_000.0);
    // Who started the busiest second's calls, and where their credential
    // was decided; the kill and the promotion on the fake's clock.
    let fake_origin = origin - server.api().origin();
    let on_fake = |at: Duration| (fake_origin + at).as_secs_f64() * 1e3;
    let statuses: Vec<_> = budgets.iter().map(|b| b.status()).collect();
    let ok: usize = driven
        .iter()
        .map(|d| d.outcomes.get("ok").copied().unwrap_or(0))
        .sum();
    let answered: usize = driven
        .iter()
        .map(|d| d.outcomes.values().sum::<usize>())
        .sum();
    let calls: usize = driven.iter().map(|d| d.calls).sum();
    eprintln!(
        "failover: killed node {owner} at {:.0} ms, node {new_owner} master at {:.0} ms; \
         {} starts, busiest 1 s {busiest} from {busiest_at:.0} ms: {:?} \
         (R = {R}, overshoot {:.1}%); by the engine's own start times {own_busiest} \
         from {own_at:.0} ms: {:?}; longest probe {longest_probe:?}; \
         driven {:?}; decisions {:?}",
        on_fake(killed_at),
        on_fake(promoted_at),
        starts.len(),
        modes_in(&server, busiest_at, busiest_at + 1_000.0),
        (busiest as f64 / R as f64 - 1.0).max(0.0) * 100.0,
        modes_in(&server, own_at - 100.0, own_at + 1_100.0),
        driven
            .iter()
            .map(|d| d.outcomes.clone())
            .collect::<Vec<_>>(),
        statuses
            .iter()
            .map(|s| s.credentials[0].decisions)
            .collect::<Vec<_>>(),
    );

    // No call stalls past the command timeout plus the breaker's window.
    assert!(
        longest_probe <= TIMEOUT + BREAKER_OPEN,
        "a call stalled {longest_probe:?}"
    );
    // Starts summed over both processes stay within R + 2 in any second,
    // by the engine's own start times and by the upstream's arrivals: a
    // process back on the new master holds to its share until the other
    // has come back too (docs/shared-limiter.md, "The bound, and the
    // timeout"); before that, the switch allowed R·(P−1)/P more.
    assert!(own_busiest <= R + 2, "{own_busiest} starts in one second");
    assert!(busiest <= R + 2, "{busiest} arrivals in one second");
    // Nothing lost or answered twice: every call has one outcome, and the
    // API saw exactly the calls answered ok.
    assert_eq!(answered, calls);
    assert_eq!(ok, starts.len(), "each admitted call reached the API once");
    // Shared mode came back by itself, on the new master.
    for (budget, before) in budgets.iter().zip(&shared_before) {
        let (mode, shared) = mode(budget);
        assert_eq!(mode, Mode::Shared, "{:?}", budget.status());
        assert!(shared > *before, "shared decisions after the failover");
    }
    assert!(cluster.nodes[new_owner].round_trips() > 0);
}
