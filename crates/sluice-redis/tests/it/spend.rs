//! Issue 14's shared budgets against a real `redis-server`: every window and
//! unit of a call checked and charged in one atomic script, trued up at the
//! call's start, on integer microseconds. Timelines replay explicit server
//! times (`Clock::At`) so that every start is asserted exactly; the last test
//! runs on the server's own clock from several connections at once.

use crate::support;

use sluice_redis::Clock;
use sluice_redis::keys::CredentialKeys;
use sluice_redis::spend::{Budget, SpendScripts, Spent};
use support::RedisServer;

const S: u64 = 1_000_000;

/// A budget's window log: each member and its start.
fn log(server: &RedisServer, key: &str) -> Vec<(String, u64)> {
    server.command(&["ZRANGE", key, "0", "-1", "WITHSCORES"])
}

fn keys() -> CredentialKeys {
    CredentialKeys::new("sluice", "openai")
}

async fn connection(server: &RedisServer) -> redis::aio::MultiplexedConnection {
    server
        .client()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// A request window at 2 per second and 3 per ten seconds on one key.
fn two_windows() -> Vec<Budget> {
    vec![
        Budget::requests("api_key", 0, 2, S),
        Budget::requests("api_key", 1, 3, 10 * S),
    ]
}

/// Requests at 100 a minute, tokens at 1,000 a minute, the call costing `tokens`.
fn llm(tokens: u64) -> Vec<Budget> {
    vec![
        Budget::requests("api_key", 0, 100, 60 * S),
        Budget::unit("tokens", 0, 1000, 60 * S, tokens),
    ]
}

#[tokio::test]
async fn every_window_holds_and_the_longest_wait_wins() {
    let _turn = crate::support::module_turn(module_path!());
    let server = RedisServer::start();
    let mut conn = connection(&server).await;
    let scripts = SpendScripts::default();
    let budgets = two_windows();
    let mut waits = Vec::new();
    for call in 0..4 {
        let member = format!("c{call}");
        let spent = scripts
            .reserve(&mut conn, &keys(), &budgets, &member, 20 * S, Clock::At(0))
            .await
            .unwrap();
        waits.push(spent);
    }
    // Two at once, the third when the 1 s window frees, the fourth when the
    // 10 s window does.
    let granted = |wait| Spent::Granted { wait };
    assert_eq!(waits, [granted(0), granted(0), granted(S), granted(10 * S)]);
    // Past what a call may wait: the 10 s window, full, puts it after the
    // grant at 10 s (the 1 s window has room for it at once); denied, and
    // nothing charged.
    let denied = scripts
        .reserve(&mut conn, &keys(), &budgets, "c4", 5 * S, Clock::At(2 * S))
        .await
        .unwrap();
    assert_eq!(
        denied,
        Spent::Denied {
            wait: 8 * S,
            budget: 1
        }
    );
    let starts = log(&server, "sluice:{openai}:b:api_key:1");
    let starts: Vec<u64> = starts.into_iter().map(|(_, at)| at).collect();
    assert_eq!(starts, [0, 0, S, 10 * S]);
}

#[tokio::test]
async fn a_unit_is_charged_its_estimate_and_settled_at_the_start() {
    let _turn = crate::support::module_turn(module_path!());
    let server = RedisServer::start();
    let mut conn = connection(&server).await;
    let scripts = SpendScripts::default();
    let keys = keys();
    let first = scripts
        .reserve(&mut conn, &keys, &llm(800), "a", S, Clock::At(0))
        .await
        .unwrap();
    assert_eq!(first, Spent::Granted { wait: 0 });
    // 800 + 500 tokens do not fit a minute's 1,000: the tokens decide.
    let refused = scripts
        .reserve(&mut conn, &keys, &llm(500), "b", S, Clock::At(10 * S))
        .await
        .unwrap();
    assert_eq!(
        refused,
        Spent::Denied {
            wait: 50 * S,
            budget: 1
        }
    );
    // The answer says 300: refunded at the call's start, 500 fit now.
    let changed = scripts
        .settle(&mut conn, &keys, &llm(800)[1..], "a", 300)
        .await
        .unwrap();
    assert_eq!(changed, 1);
    let second = scripts
        .reserve(&mut conn, &keys, &llm(500), "b", S, Clock::At(10 * S))
        .await
        .unwrap();
    assert_eq!(second, Spent::Granted { wait: 0 });
    // An over-spend: "b" really used 900. 1,200 spent in the minute, so even
    // one token waits until "a" (300 at t=0) leaves it, at 60 s.
    scripts
        .settle(&mut conn, &keys, &llm(500)[1..], "b", 900)
        .await
        .unwrap();
    let third = scripts
        .reserve(&mut conn, &keys, &llm(1), "c", 120 * S, Clock::At(20 * S))
        .await
        .unwrap();
    assert_eq!(third, Spent::Granted { wait: 40 * S });
    let tokens = log(&server, "sluice:{openai}:b:tokens:0");
    assert_eq!(
        tokens,
        [
            ("a|300".to_owned(), 0),
            ("b|900".to_owned(), 10 * S),
            ("c|1".to_owned(), 60 * S)
        ]
    );
}

#[tokio::test]
async fn a_refund_frees_the_start_in_every_window() {
    let _turn = crate::support::module_turn(module_path!());
    let server = RedisServer::start();
    let mut conn = connection(&server).await;
    let scripts = SpendScripts::default();
    let budgets = two_windows();
    for member in ["a", "b"] {
        scripts
            .reserve(&mut conn, &keys(), &budgets, member, 0, Clock::At(0))
            .await
            .unwrap();
    }
    let removed = scripts
        .refund(&mut conn, &keys(), &budgets, "b")
        .await
        .unwrap();
    assert_eq!(removed, 2);
    let again = scripts
        .reserve(&mut conn, &keys(), &budgets, "c", 0, Clock::At(S / 2))
        .await
        .unwrap();
    assert_eq!(again, Spent::Granted { wait: 0 });
}

#[tokio::test]
async fn a_cost_that_can_never_fit_is_an_error_not_a_wait() {
    let _turn = crate::support::module_turn(module_path!());
    let server = RedisServer::start();
    let mut conn = connection(&server).await;
    let error = SpendScripts::default()
        .reserve(&mut conn, &keys(), &llm(1001), "x", S, Clock::At(0))
        .await
        .unwrap_err();
    assert!(error.to_string().contains("can never fit"), "{error}");
    let exists: u64 = server.command(&["EXISTS", "sluice:{openai}:b:tokens:0"]);
    assert_eq!(exists, 0);
}

/// Three connections (three processes) spending one key on the server's
/// clock: the starts the script recorded hold every window.
#[tokio::test]
async fn concurrent_processes_never_overfill_a_window() {
    let _turn = crate::support::module_turn(module_path!());
    let server = RedisServer::start();
    let budgets = vec![
        Budget::requests("api_key", 0, 5, S / 5),
        Budget::requests("api_key", 1, 12, S),
        Budget::unit("tokens", 0, 40, S, 3),
    ];
    let mut tasks = Vec::new();
    for process in 0..3 {
        let mut conn = connection(&server).await;
        let budgets = budgets.clone();
        tasks.push(tokio::spawn(async move {
            let scripts = SpendScripts::default();
            let mut granted = 0;
            for call in 0..15 {
                let member = format!("p{process}c{call}");
                let spent = scripts
                    .reserve(&mut conn, &keys(), &budgets, &member, 3 * S, Clock::Server)
                    .await
                    .unwrap();
                if matches!(spent, Spent::Granted { .. }) {
                    granted += 1;
                }
            }
            granted
        }));
    }
    let mut granted = 0;
    for task in tasks {
        granted += task.await.unwrap();
    }
    let starts = |key: &str| -> Vec<u64> {
        let log: Vec<(String, u64)> = server.command(&["ZRANGE", key, "0", "-1", "WITHSCORES"]);
        log.into_iter().map(|(_, at)| at).collect()
    };
    let max_in = |starts: &[u64], window: u64| {
        starts
            .iter()
            .map(|from| {
                starts
                    .iter()
                    .filter(|at| **at >= *from && **at < from + window)
                    .count()
            })
            .max()
            .unwrap_or(0)
    };
    let fast = starts("sluice:{openai}:b:api_key:0");
    let slow = starts("sluice:{openai}:b:api_key:1");
    let tokens = starts("sluice:{openai}:b:tokens:0");
    assert_eq!(fast.len(), granted);
    assert_eq!(slow, fast);
    assert_eq!(tokens, fast);
    assert!(max_in(&fast, S / 5) <= 5, "{fast:?}");
    assert!(max_in(&slow, S) <= 12, "{slow:?}");
    // 40 tokens a second at 3 a call: 13 calls.
    assert!(max_in(&tokens, S) * 3 <= 40, "{tokens:?}");
    // Within 3 s of waiting, the one-second windows let at least 24 through.
    assert!(granted >= 24, "{granted}");
}

/// A burst beside a second window: the first window is a GCRA bucket at
/// 10/1s holding 2 at once, the second a sliding window of 4 per 10 s.
/// Two start at once, then one every 100 ms; the fifth waits for the 10 s
/// window. A refund of the latest gives its slot back exactly; a true-up
/// moves the bucket by the difference.
#[tokio::test]
async fn a_bucket_beside_a_window_spends_all_or_nothing() {
    let _turn = crate::support::module_turn(module_path!());
    use sluice_redis::spend::{Bucket, Granted, Seen, Window};
    let server = RedisServer::start();
    let mut conn = connection(&server).await;
    let scripts = SpendScripts::default();
    let budgets = vec![
        Budget::requests("api_key", 0, 10, S).with_burst(2),
        Budget::requests("api_key", 1, 4, 10 * S),
    ];
    let window = Window {
        not_before: 0,
        max_wait: 20 * S,
        scopes: &[],
    };
    let mut seen = Vec::new();
    for call in 0..5 {
        let member = format!("c{call}");
        let answer: Seen = scripts
            .reserve_seen(
                &mut conn,
                &keys(),
                &budgets,
                &member,
                window,
                None,
                Clock::At(0),
            )
            .await
            .unwrap();
        seen.push(answer);
    }
    let waits: Vec<Spent> = seen.iter().map(|s| s.spent.clone()).collect();
    let granted = |wait| Spent::Granted { wait };
    assert_eq!(
        waits,
        [
            granted(0),
            granted(0),
            granted(S / 10),
            granted(S / 5),
            granted(10 * S)
        ]
    );
    // Each grant says what it did to the bucket (T = 100 ms).
    let third = &seen[2];
    assert_eq!(third.start, S / 10);
    assert_eq!(
        third.buckets,
        [Bucket {
            budget: 0,
            before: 2 * S / 10,
            after: 3 * S / 10
        }]
    );
    // The fifth, held back by the 10 s window, left the bucket one T past its start.
    let tat: u64 = server.command(&["GET", "sluice:{openai}:b:api_key:0:g"]);
    assert_eq!(tat, 10 * S + S / 10);
    // The latest grant goes back exactly (the bucket and the window).
    let last = Granted {
        start: seen[4].start,
        buckets: seen[4].buckets.clone(),
    };
    let changed = scripts
        .refund_buckets(&mut conn, &keys(), &budgets, "c4", &last)
        .await
        .unwrap();
    assert_eq!(changed, 2);
    let tat: u64 = server.command(&["GET", "sluice:{openai}:b:api_key:0:g"]);
    assert_eq!(tat, 4 * S / 10);
    // An earlier one cannot move the bucket back (a later slot follows
    // it): only its window entry goes.
    let second = Granted {
        start: seen[1].start,
        buckets: seen[1].buckets.clone(),
    };
    let changed = scripts
        .refund_buckets(&mut conn, &keys(), &budgets, "c1", &second)
        .await
        .unwrap();
    assert_eq!(changed, 1);
    // A true-up of 3 where 1 was charged moves the bucket on by 2 T.
    let unit = vec![Budget::unit("points", 0, 10, S, 1).with_burst(5)];
    let spent = scripts
        .reserve_seen(&mut conn, &keys(), &unit, "p", window, None, Clock::At(0))
        .await
        .unwrap();
    let granted_p = Granted {
        start: spent.start,
        buckets: spent.buckets,
    };
    scripts
        .settle_buckets(&mut conn, &keys(), &unit, "p", &granted_p, 3)
        .await
        .unwrap();
    let tat: u64 = server.command(&["GET", "sluice:{openai}:b:points:0:g"]);
    assert_eq!(tat, 3 * S / 10);
}

/// A lease: further starts of the same spend placed in the same step,
/// each at its own earliest common start after the one before and charged
/// in every budget, no sooner than the lead and no later than the horizon;
/// the next lease's stale members go back before it is placed.
#[tokio::test]
async fn a_lease_places_further_starts_charged_in_every_budget() {
    let _turn = crate::support::module_turn(module_path!());
    use sluice_redis::spend::{Lease, Seen, Window, further_member};
    let server = RedisServer::start();
    let conn = connection(&server).await;
    let scripts = SpendScripts::default();
    // Requests at 3 a second and tokens at 40 a second, 10 a call: the
    // tokens admit four calls a second, the requests three.
    let budgets = vec![
        Budget::requests("api_key", 0, 3, S),
        Budget::unit("tokens", 0, 40, S, 10),
    ];
    let leased = |member: &'static str, max_wait, (slots, horizon), stale: Vec<String>, at| {
        let (scripts, budgets, mut conn) = (scripts.clone(), budgets.clone(), conn.clone());
        async move {
            let window = Window {
                not_before: 0,
                max_wait,
                scopes: &[],
            };
            let lease = Lease {
                slots,
                horizon,
                lead: S / 50,
                stale: &stale,
            };
            let seen: Seen = scripts
                .reserve_leased(
                    &mut conn,
                    &keys(),
                    &budgets,
                    member,
                    window,
                    lease,
                    None,
                    Clock::At(at),
                )
                .await
                .unwrap();
            seen
        }
    };
    let seen = leased("m", 0, (5, 2 * S), vec![], 0).await;
    assert_eq!(seen.spent, Spent::Granted { wait: 0 });
    // The call's own at once, two more no sooner than the 20 ms lead (the
    // requests' 3 in the first second), the fourth when the start at 0
    // leaves the requests' window, the fifth when those at 20 ms do.
    assert_eq!(seen.further, [S / 50, S / 50, S, S + S / 50]);
    let tokens = log(&server, "sluice:{openai}:b:tokens:0");
    let members: Vec<&str> = tokens.iter().map(|(m, _)| m.as_str()).collect();
    assert_eq!(members, ["m|10", "m+2|10", "m+3|10", "m+4|10", "m+5|10"]);
    assert_eq!(further_member("m", 0), "m+2");
    // A horizon holds further starts to what is near: after this call's
    // at 1.02 s, the next would wait for 2 s.
    let near = leased("n", 3 * S, (3, S / 2), vec![], S).await;
    assert_eq!(near.spent, Spent::Granted { wait: S / 50 });
    assert!(near.further.is_empty(), "{near:?}");
    // Stale members of the lease go back first: with m+4 and m+5 unused,
    // a call at 1.1 s starts at once (with them, it would wait for 2 s).
    let stale = vec!["m+4".to_owned(), "m+5".to_owned()];
    let back = leased("o", 0, (1, 0), stale, S + S / 10).await;
    assert_eq!(back.spent, Spent::Granted { wait: 0 }, "{back:?}");
}

/// Room a true-up leaves in front of a later grant goes to the next call
/// that fits it in every window, and no grant moves: tokens at 1,000 a
/// minute, `a` spends 600 at 0 and `b` 600 (granted at 60 s, when `a`
/// leaves); `a` settles at 100. At 1 s, 300 more fit in front of `b`
/// (100 + 300 now, 300 + 600 in the minute ending at `b`); 500 more would
/// overfill `b`'s minute, and go after it.
#[tokio::test]
async fn a_settled_cost_leaves_room_in_front_of_later_grants() {
    let _turn = crate::support::module_turn(module_path!());
    let server = RedisServer::start();
    let conn = connection(&server).await;
    let scripts = SpendScripts::default();
    let keys = keys();
    let reserve = |tokens: u64, member: &'static str, at: u64| {
        let scripts = scripts.clone();
        let keys = keys.clone();
        let mut conn = conn.clone();
        async move {
            scripts
                .reserve(
                    &mut conn,
                    &keys,
                    &llm(tokens),
                    member,
                    120 * S,
                    Clock::At(at),
                )
                .await
                .unwrap()
        }
    };
    assert_eq!(reserve(600, "a", 0).await, Spent::Granted { wait: 0 });
    assert_eq!(reserve(600, "b", 0).await, Spent::Granted { wait: 60 * S });
    let settled = scripts
        .settle(&mut conn.clone(), &keys, &llm(600)[1..], "a", 100)
        .await
        .unwrap();
    assert_eq!(settled, 1);
    assert_eq!(reserve(300, "c", S).await, Spent::Granted { wait: 0 });
    // 100 left in the minute ending at 60 s, and `b` alone 600 of the
    // minute after it: the next 500 start when `b` leaves.
    assert_eq!(reserve(500, "d", S).await, Spent::Granted { wait: 119 * S });
    let starts = log(&server, "sluice:{openai}:b:tokens:0");
    assert_eq!(
        starts,
        [
            ("a|100".to_owned(), 0),
            ("c|300".to_owned(), S),
            ("b|600".to_owned(), 60 * S),
            ("d|500".to_owned(), 120 * S),
        ]
    );
}

/// A spend is held as a call on one limit is: a spent quota on any of its
/// scopes denies it, a block puts its start after the block's end (or
/// denies it, past its wait), and the answer carries every active hold.
#[tokio::test]
async fn blocks_and_spent_quotas_hold_a_spend() {
    let _turn = crate::support::module_turn(module_path!());
    use sluice::shared::Hold;
    use sluice_redis::spend::Window;
    let server = RedisServer::start();
    let mut conn = connection(&server).await;
    let scripts = SpendScripts::default();
    let keys = keys();
    let scopes = ["api_key".to_owned(), "search".to_owned()];
    let ask = |max_wait| Window {
        not_before: 0,
        max_wait,
        scopes: &scopes,
    };
    let mut spend = async |member: &str, max_wait| {
        scripts
            .reserve_seen(
                &mut conn,
                &keys,
                &llm(10),
                member,
                ask(max_wait),
                None,
                Clock::At(0),
            )
            .await
            .unwrap()
    };
    // A block on the second scope until 3 s: a call that can wait starts
    // there; one that cannot is held, and charged nothing.
    let _: i64 = server.command(&["HSET", &keys.blocks(), "search", &(3 * S).to_string()]);
    let seen = spend("waits", 5 * S).await;
    assert_eq!(seen.spent, Spent::Granted { wait: 3 * S });
    assert_eq!(seen.view.blocks, vec![("search".to_owned(), 3 * S)]);
    let seen = spend("hurries", S).await;
    assert_eq!(
        seen.spent,
        Spent::Held {
            wait: 3 * S,
            scope: 1,
            hold: Hold::Blocked
        }
    );
    assert_eq!(log(&server, &keys.budget("api_key", 0)).len(), 1);
    // A spent quota on the first scope denies even a call that could wait.
    let _: i64 = server.command(&["HSET", &keys.quota(), "api_key", &(60 * S).to_string()]);
    let seen = spend("late", 120 * S).await;
    assert_eq!(
        seen.spent,
        Spent::Held {
            wait: 60 * S,
            scope: 0,
            hold: Hold::Quota
        }
    );
    assert_eq!(seen.view.quotas, vec![("api_key".to_owned(), 60 * S)]);
    assert_eq!(log(&server, &keys.budget("api_key", 0)).len(), 1);
}
