//! Model-based tests of the Lua scripts: random sequences of reserves,
//! leases, refunds and blocks run against Redis (with the scripts' clock
//! set explicitly) and against the engine's reference, `InMemoryBudget` on
//! a paused tokio clock, at the same times. Every decision must match.

use crate::support;

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use sluice::shared::{
    Decision, Grant, Hold, InMemoryBudget, ReserveRequest, SharedBudget, SharedLimit,
};
use sluice_redis::Store;
use sluice_redis::store::{Clock, ReserveArgs, Reserved, SlotToken};
use support::RedisServer;
use tokio::runtime::Runtime;

const SCOPES: [&str; 3] = ["api_key", "search", "tokens"];
/// Model time starts here, so that a window before the first op never
/// reaches below zero (where the model's arithmetic saturates).
const OFFSET: u64 = 10_000_000;
/// Redis time = BASE + model time: realistic epoch microseconds, to check
/// that Lua's doubles keep them exact.
const BASE: u64 = 1_700_000_000_000_000;

#[derive(Debug, Clone)]
enum Op {
    Advance(u64),
    Reserve {
        extra: u8,
        not_before: u64,
        max_wait: u64,
        slots: u32,
    },
    Refund(usize),
    Block {
        scope: usize,
        wait: u64,
        quota: bool,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u64..400_000).prop_map(Op::Advance),
        6 => (0u8..4, 0u64..1_500_000, 0u64..2_500_000, prop_oneof![3 => Just(1u32), 1 => 2u32..6])
            .prop_map(|(extra, not_before, max_wait, slots)| Op::Reserve { extra, not_before, max_wait, slots }),
        2 => any::<usize>().prop_map(Op::Refund),
        2 => (0usize..3, 0u64..3_000_000, prop::bool::weighted(0.2))
            .prop_map(|(scope, wait, quota)| Op::Block { scope, wait, quota }),
    ]
}

#[derive(Debug, Clone)]
struct Case {
    count: u32,
    window_ms: u64,
    burst: Option<u32>,
    ops: Vec<Op>,
}

fn case(gcra: bool) -> impl Strategy<Value = Case> {
    let burst = if gcra {
        (1u32..5).prop_map(Some).boxed()
    } else {
        Just(None).boxed()
    };
    (
        1u32..6,
        100u64..2_000,
        burst,
        prop::collection::vec(op(), 1..40),
    )
        .prop_map(|(count, window_ms, burst, ops)| Case {
            count,
            window_ms,
            burst,
            ops,
        })
}

static NEXT_CREDENTIAL: AtomicU64 = AtomicU64::new(0);

fn decision_of(reserved: &Reserved, scopes: &[&str]) -> Vec<Decision> {
    match reserved {
        Reserved::Granted { slots, .. } => slots
            .iter()
            .map(|slot| Decision::Granted {
                wait: Duration::from_micros(slot.wait),
                grant: Grant {
                    token: String::new(),
                },
            })
            .collect(),
        Reserved::Denied {
            wait, scope, hold, ..
        } => vec![Decision::Denied {
            wait: Duration::from_micros(*wait),
            scope: scopes[*scope].to_owned(),
            hold: *hold,
        }],
    }
}

fn blank(decision: &Decision) -> Decision {
    match decision {
        Decision::Granted { wait, .. } => Decision::Granted {
            wait: *wait,
            grant: Grant {
                token: String::new(),
            },
        },
        denied => denied.clone(),
    }
}

fn run_case(server: &RedisServer, redis: &Runtime, case: &Case) -> Result<(), TestCaseError> {
    let model_rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    let model = model_rt.block_on(async { InMemoryBudget::new() });
    let origin = model_rt.block_on(async { tokio::time::Instant::now() });
    model_rt.block_on(tokio::time::advance(Duration::from_micros(OFFSET)));
    let mut conn = redis
        .block_on(server.client().get_multiplexed_async_connection())
        .unwrap();
    let store = Store::new("model");
    let credential = format!("cred-{}", NEXT_CREDENTIAL.fetch_add(1, Ordering::SeqCst));
    let limit = SharedLimit {
        rate: sluice::Rate::new(
            NonZeroU32::new(case.count).unwrap(),
            Duration::from_millis(case.window_ms),
        )
        .unwrap(),
        burst: case.burst.and_then(NonZeroU32::new),
    };
    let mut granted: Vec<(Grant, SlotToken)> = Vec::new();
    let mut member = 0u64;
    for (step, op) in case.ops.iter().enumerate() {
        let now = model_rt.block_on(async { tokio::time::Instant::now() });
        let t = BASE + u64::try_from((now - origin).as_micros()).unwrap();
        match op {
            Op::Advance(us) => {
                model_rt.block_on(tokio::time::advance(Duration::from_micros(*us)));
            }
            Op::Reserve {
                extra,
                not_before,
                max_wait,
                slots,
            } => {
                let mut scopes = vec![SCOPES[0]];
                if extra & 1 != 0 {
                    scopes.push(SCOPES[1]);
                }
                if extra & 2 != 0 {
                    scopes.push(SCOPES[2]);
                }
                member += 1;
                let prefix = format!("p:{member}");
                let args = ReserveArgs {
                    credential: &credential,
                    scopes: &scopes,
                    limit: Some(limit),
                    not_before: *not_before,
                    max_wait: *max_wait,
                    slots: *slots,
                    horizon: *max_wait,
                    immediate: *slots,
                    lead: 0,
                    pace: 0,
                    tick: 0,
                    process: None,
                    heartbeat: 5_000_000,
                    member_prefix: &prefix,
                };
                let reserved = redis
                    .block_on(store.reserve(&mut conn, &args, Clock::At(t)))
                    .unwrap();
                // A lease of k slots is k reservations at the same instant,
                // up to the first the model denies.
                let mut expected = Vec::new();
                let mut model_grants = Vec::new();
                for _ in 0..*slots {
                    let decision = model_rt.block_on(model.reserve(ReserveRequest {
                        credential: &credential,
                        scopes: &scopes,
                        limit: Some(limit),
                        windows: &[],
                        not_before: Duration::from_micros(*not_before),
                        max_wait: Duration::from_micros(*max_wait),
                        late_start: Duration::ZERO,
                        priority: sluice::Priority::Normal,
                    }));
                    let stop = matches!(decision, Decision::Denied { .. });
                    expected.push(blank(&decision));
                    if let Decision::Granted { grant, .. } = decision {
                        model_grants.push(grant);
                    }
                    if stop {
                        break;
                    }
                }
                let got = decision_of(&reserved, &scopes);
                // A lease stops early when the model denies: that denial is
                // the reply itself only when no slot was granted.
                let comparable: Vec<Decision> =
                    if got.iter().all(|d| matches!(d, Decision::Granted { .. })) {
                        expected
                            .iter()
                            .take_while(|d| matches!(d, Decision::Granted { .. }))
                            .cloned()
                            .collect()
                    } else {
                        expected.clone()
                    };
                prop_assert_eq!(&got, &comparable, "step {} {:?} at {}", step, op, t - BASE);
                if let Reserved::Granted { slots: grants, .. } = reserved {
                    // The model charged exactly as many as Redis granted,
                    // unless it granted more than Redis's horizon let it (it
                    // cannot: the horizon is the max wait).
                    prop_assert_eq!(grants.len(), model_grants.len().min(*slots as usize));
                    for (slot, grant) in grants.into_iter().zip(model_grants) {
                        granted.push((grant, slot.token));
                    }
                }
            }
            Op::Refund(pick) => {
                if !granted.is_empty() {
                    let (grant, token) = granted.remove(pick % granted.len());
                    model.refund(&credential, grant);
                    redis
                        .block_on(store.refund(&mut conn, &credential, &[token]))
                        .unwrap();
                }
            }
            Op::Block { scope, wait, quota } => {
                let hold = if *quota { Hold::Quota } else { Hold::Blocked };
                model_rt.block_on(async {
                    model.block(
                        &credential,
                        SCOPES[*scope],
                        Duration::from_micros(*wait),
                        hold,
                    )
                });
                redis
                    .block_on(store.block(
                        &mut conn,
                        &credential,
                        SCOPES[*scope],
                        *wait,
                        hold,
                        Clock::At(t),
                    ))
                    .unwrap();
            }
        }
    }
    Ok(())
}

fn check(gcra: bool) {
    let server = RedisServer::start();
    let redis = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    proptest!(ProptestConfig::with_cases(256), |(case in case(gcra))| {
        run_case(&server, &redis, &case)?;
    });
}

#[test]
fn the_window_script_decides_as_the_engine() {
    let _turn = crate::support::module_turn(module_path!());
    check(false);
}

#[test]
fn the_gcra_script_decides_as_the_engine() {
    let _turn = crate::support::module_turn(module_path!());
    check(true);
}

/// A lease in a window with room paces its extra slots where its callers
/// are expected, and those slots hold no other caller back: a start at
/// once still fits in front of them until the whole window is spent, and
/// only then follows the latest, once the oldest has left.
#[test]
fn a_paced_lease_leaves_the_window_open_in_front_of_it() {
    let _turn = crate::support::module_turn(module_path!());
    let server = RedisServer::start();
    let redis = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut conn = redis
        .block_on(server.client().get_multiplexed_async_connection())
        .unwrap();
    let store = Store::new("model");
    let limit = SharedLimit {
        rate: "10/1s".parse().unwrap(),
        burst: None,
    };
    let waits = |reserved: Reserved| match reserved {
        Reserved::Granted { slots, .. } => slots.iter().map(|slot| slot.wait).collect(),
        Reserved::Denied { wait, .. } => vec![u64::MAX, wait],
    };
    let mut reserve = |credential: &str, t_ms: u64, slots: u32, pace_us: u64, member: &str| {
        let args = ReserveArgs {
            credential,
            scopes: &["api_key"],
            limit: Some(limit),
            not_before: 0,
            max_wait: 250_000,
            slots,
            horizon: 1_000_000,
            immediate: 1,
            lead: 20_000,
            pace: pace_us,
            tick: 1_000,
            process: None,
            heartbeat: 5_000_000,
            member_prefix: member,
        };
        let at = Clock::At(BASE + t_ms * 1_000);
        waits(redis.block_on(store.reserve(&mut conn, &args, at)).unwrap())
    };
    const MS: u64 = 1_000;
    // The caller's slot at once, the next four 30 ms apart.
    assert_eq!(
        reserve("paced", 0, 5, 30 * MS, "lease"),
        vec![0, 30 * MS, 60 * MS, 90 * MS, 120 * MS]
    );
    // Another caller, 1 ms on, starts at once: in front of the lease.
    assert_eq!(reserve("paced", 1, 1, 0, "a"), vec![0]);
    // Four more fill the window (10 in all).
    for n in 0..4 {
        assert_eq!(reserve("paced", 2, 1, 0, &format!("b{n}")), vec![0]);
    }
    // Full: the next start follows the latest (120 ms), once the
    // oldest start (at 0) has left the window: 1,000 ms, 998 from now.
    assert_eq!(reserve("paced", 2, 1, 0, "c"), vec![u64::MAX, 998 * MS]);
    // Callers 0.4 ms apart: a slot due sooner than the timer's 1 ms tick
    // is placed at once.
    assert_eq!(
        reserve("quick", 0, 5, 400, "lease"),
        vec![0, 0, 0, 1_200, 1_600]
    );
}
