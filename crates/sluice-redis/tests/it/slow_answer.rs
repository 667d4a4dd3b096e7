//! A slow answer is an unknown, not a failure (issue 49): Redis stopped
//! (SIGSTOP) for longer than the command timeout while calls reserve. The
//! reservations that time out are voided by their id before their callers
//! spend anything for them, so the upstream's own records show no window
//! over the limit, and Redis's log keeps no entry of a voided reservation.

use crate::support;

use std::time::Duration;

use sluice::shared::{Decision, ReserveRequest, SharedBudget, SharedLimit};
use sluice_redis::{Mode, RedisBudget};
use support::*;
use tokio::time::Instant;

const N: usize = 100;
const RATE: &str = "100/1s";
/// Small leases: many reservations, so that the stops meet some in flight.
const MAX_LEASE: u32 = 4;
/// The command timeout here: shorter than the stops below, so that
/// reservations time out during them, and longer than half of them, so
/// that the void sent after a timeout is answered once Redis runs again.
const TIMEOUT: Duration = Duration::from_millis(200);
/// How long Redis is stopped each time.
const STOP: Duration = Duration::from_millis(300);

/// Stops (SIGSTOP) the server with `pid` for `STOP`, then resumes it.
async fn stop_for_a_while(pid: u32) {
    let signal = |name: &str| {
        let status = std::process::Command::new("kill")
            .arg(format!("-{name}"))
            .arg(pid.to_string())
            .status()
            .unwrap();
        assert!(status.success(), "kill -{name} {pid}");
    };
    signal("STOP");
    tokio::time::sleep(STOP).await;
    signal("CONT");
}

/// A reservation sent at once, on a credential of its own: whatever the
/// drivers are doing as a stop begins, one reservation meets it.
async fn reserve_now(budget: &RedisBudget) {
    let limit = SharedLimit {
        rate: "1000/1s".parse().unwrap(),
        burst: None,
    };
    let decision = budget
        .reserve(ReserveRequest {
            credential: "probe",
            scopes: &["api_key"],
            limit: Some(limit),
            windows: &[],
            not_before: Duration::ZERO,
            max_wait: Duration::from_secs(2),
            late_start: LATE_START,
            priority: sluice::Priority::Normal,
        })
        .await;
    assert!(matches!(decision, Decision::Granted { .. }), "{decision:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reservation_that_timed_out_is_settled_before_anything_is_spent_for_it() {
    let _turn = crate::support::module_turn(module_path!());
    let redis = RedisServer::start();
    let pid = redis.pid().unwrap();
    let server = fake(10_000).await;
    let mut budgets = Vec::new();
    for _ in 0..2 {
        let config = redis_config(&redis.url())
            .timeout(TIMEOUT)
            .max_lease(MAX_LEASE);
        budgets.push(budget(config).await);
    }
    let origin = Instant::now();
    let until = origin + Duration::from_millis(6_000);
    // Two processes at three times the limit each, always reserving.
    let runs: Vec<_> = budgets
        .iter()
        .zip(["a", "b"])
        .enumerate()
        .map(|(i, (b, name))| {
            let gate = gate_naming_modes(&server, (RATE, None), b.clone(), 32, i as u64, None);
            tokio::spawn(drive(gate, name, 24, until, Duration::from_millis(100)))
        })
        .collect();
    // Starts are granted in bursts as each window opens (about every
    // 1.1 s): stops 0.8 s apart meet them at every phase.
    for at in [1_000, 1_800, 2_600, 3_400, 4_200, 5_000] {
        tokio::time::sleep_until(origin + Duration::from_millis(at)).await;
        tokio::join!(stop_for_a_while(pid), async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            reserve_now(&budgets[0]).await;
        });
    }
    let mut driven = Vec::new();
    for run in runs {
        driven.push(run.await.unwrap());
    }
    let statuses: Vec<_> = budgets.iter().map(|b| b.status()).collect();
    let starts = starts(&server);
    let (busiest, at) = busiest_window(&starts, 1_000.0);
    let timeouts: u64 = statuses.iter().map(|s| s.errors.timeout).sum();
    let fallback: u64 = statuses
        .iter()
        .flat_map(|s| s.credentials.iter())
        .map(|c| c.decisions.fallback)
        .sum();
    eprintln!(
        "{} starts, busiest second {busiest} from {at:.0} ms; {timeouts} timeouts, \
         {fallback} fallback decisions; modes {:?}; driven {:?}",
        starts.len(),
        modes_in(&server, at, at + 1_000.0),
        driven.iter().map(|d| &d.outcomes).collect::<Vec<_>>()
    );
    // The stops did time reservations out...
    assert!(timeouts > 0, "{statuses:?}");
    // ...and each was settled (voided by its id) before its caller did
    // anything else: none fell back to deciding locally.
    assert_eq!(fallback, 0, "{statuses:?}");
    for status in &statuses {
        assert!(status.credentials.iter().all(|c| c.mode == Mode::Shared));
    }
    // Nothing spent twice: no second holds more than the limit, by the
    // upstream's own clock (one more for transit at a window's edge).
    assert!(
        busiest <= N + 1,
        "{busiest} starts in the second from {at:.0} ms"
    );
    // Every call answered once: the upstream saw exactly the calls
    // answered `ok`.
    let ok: usize = driven
        .iter()
        .map(|d| d.outcomes.get("ok").copied().unwrap_or(0))
        .sum();
    assert_eq!(ok, starts.len());
    // Redis's log keeps no entry of a voided reservation: each void mark's
    // id names no member of the key's window log.
    let marks: Vec<String> = redis.command(&["KEYS", "sluice:*:v:*"]);
    assert!(!marks.is_empty(), "no reservation was voided");
    let logs: Vec<String> = redis.command(&["KEYS", "sluice:*:w:*"]);
    assert!(!logs.is_empty());
    let mut log = Vec::new();
    for key in &logs {
        let members: Vec<String> = redis.command(&["ZRANGE", key, "0", "-1"]);
        log.extend(members);
    }
    for mark in &marks {
        let id = mark.rsplit_once(":v:").unwrap().1;
        let prefix = format!("{id}:");
        assert!(
            !log.iter().any(|member| member.starts_with(&prefix)),
            "{id} voided but logged: {log:?}"
        );
    }
}
