//! Redis Cluster: three masters started here; the limiter works on it and
//! every key of a credential lives in one slot.

use crate::support;

use std::time::Duration;

use sluice::shared::{Decision, Hold, ReserveRequest, SharedBudget, SharedLimit};
use sluice_redis::{Mode, RedisBudget, RedisConfig};
use support::*;
use tokio::time::Instant;

const R: usize = 40;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_limiter_runs_on_a_three_master_cluster() {
    let _turn = crate::support::module_turn(module_path!());
    let cluster = RedisCluster::start();
    let config = || RedisConfig::cluster(cluster.urls());
    let a = budget(config()).await;
    let b = budget(config()).await;

    // Every key of one credential, even with braces in its name, hashes to
    // one slot: the scripts never cross slots.
    for credential in ["key", "we{ird}:name", "{}"] {
        let keys = a.store().keys(credential);
        let all = [
            keys.blocks(),
            keys.quota(),
            keys.meta(),
            keys.processes(),
            keys.window("api_key"),
            keys.gcra("api_key"),
            keys.window("search"),
        ];
        let slots: Vec<i64> = all
            .iter()
            .map(|key| cluster.nodes[0].command(&["CLUSTER", "KEYSLOT", key]))
            .collect();
        assert!(
            slots.iter().all(|s| *s == slots[0]),
            "{credential}: {all:?} -> {slots:?}"
        );
    }

    // Two processes, one budget.
    let server = fake(10_000).await;
    let until = Instant::now() + Duration::from_secs(3);
    let runs: Vec<_> = [&a, &b]
        .into_iter()
        .enumerate()
        .map(|(i, budget)| {
            // The 100 ms margin: the fake counts arrivals, and on a loaded
            // two-core machine a request can reach it more than the default
            // 20 ms after its slot (support::gate_with_margin).
            let gate = gate_with_margin(&server, "40/1s", Some(budget.clone()), 32, i as u64);
            tokio::spawn(drive(
                gate,
                ["a", "b"][i],
                16,
                until,
                Duration::from_millis(200),
            ))
        })
        .collect();
    for run in runs {
        run.await.unwrap();
    }
    let starts = starts(&server);
    let busiest = max_in_window(&starts, 1_000.0);
    let statuses = [a.status(), b.status()];
    eprintln!(
        "cluster: {} starts in 3 s, busiest 1 s window {busiest} (R = {R}), {} round trips; {:?}",
        starts.len(),
        cluster.round_trips(),
        statuses
            .iter()
            .map(|s| s.credentials[0].decisions)
            .collect::<Vec<_>>()
    );
    assert!(busiest <= R, "{busiest}");
    assert!(starts.len() >= 2 * R);
    for status in &statuses {
        assert_eq!(status.topology, "cluster");
        assert_eq!(status.credentials[0].mode, Mode::Shared, "{status:?}");
        assert_eq!(status.credentials[0].processes_seen, 2, "{status:?}");
        assert!(status.credentials[0].decisions.shared > 0);
    }

    // A block one process learns reaches the other (through the reply, and
    // the subscription on any node).
    a.block("key", "api_key", Duration::from_secs(2), Hold::Blocked);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let decision = b
        .reserve(ReserveRequest {
            credential: "key",
            scopes: &["api_key"],
            limit: Some(SharedLimit {
                rate: "40/1s".parse().unwrap(),
                burst: None,
            }),
            windows: &[],
            not_before: Duration::ZERO,
            max_wait: Duration::from_millis(500),
            late_start: LATE_START,
            priority: sluice::Priority::Normal,
        })
        .await;
    assert!(
        matches!(
            decision,
            Decision::Denied {
                hold: Hold::Blocked,
                ..
            }
        ),
        "{decision:?}"
    );
    let fresh: RedisBudget = RedisBudget::connect(config()).await.unwrap();
    let decision = fresh
        .reserve(ReserveRequest {
            credential: "key",
            scopes: &["api_key"],
            limit: Some(SharedLimit {
                rate: "40/1s".parse().unwrap(),
                burst: None,
            }),
            windows: &[],
            not_before: Duration::ZERO,
            max_wait: Duration::from_millis(500),
            late_start: LATE_START,
            priority: sluice::Priority::Normal,
        })
        .await;
    assert!(
        matches!(
            decision,
            Decision::Denied {
                hold: Hold::Blocked,
                ..
            }
        ),
        "a process that never heard the event learns the block from Redis: {decision:?}"
    );
}
