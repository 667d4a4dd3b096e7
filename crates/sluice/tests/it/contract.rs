//! Issue 50, the model-facing contract kept, on tokio's paused clock: queues
//! sized by what can wait, a drain estimate per shed call, and a true-up
//! that moves the calls waiting behind it — asserted on the start times the
//! simulated upstream recorded and on the outcomes the model reads.

use crate::support;

use std::time::Duration;

use serde_json::json;
use sluice::{
    Call, Cost, CredentialConfig, Defaults, GateConfig, GroupConfig, Outcome, Settle, ToolConfig,
    UnitConfig,
};
use support::*;

fn rate(text: &str) -> sluice::Rate {
    text.parse().unwrap()
}

/// Issue 50: a group `rate = "2/1s"` with `inline_wait = "10s"` and a
/// 20 s deadline takes a turn of 6 calls whole. Its default queue holds
/// what can start within the inline wait, so none is shed (the old default,
/// 4 × `max_in_flight`, shed the 6th with `retry_after_ms: 2500`), and the
/// starts keep to the group's window.
#[tokio::test(start_paused = true)]
async fn a_default_queue_holds_every_call_that_can_start_within_the_inline_wait() {
    let sim = Sim::always_ok(100);
    let defaults = Defaults {
        inline_wait: Duration::from_secs(10),
        window_margin: Duration::ZERO,
        ..Defaults::default()
    };
    let credential = CredentialConfig::with_rate(rate("20/1s"))
        .group("search", GroupConfig::with_rate(rate("2/1s")));
    let config = GateConfig::default()
        .defaults(defaults)
        .credential("key", credential)
        .tool("search", ToolConfig::read("key").group("search"));
    let gate = build_gate(config, &sim);
    let calls =
        (0..6).map(|n| Call::new("search", json!({ "n": n })).deadline(Duration::from_secs(20)));
    let outcomes = gate.turn().run(calls).await;
    assert!(outcomes.iter().all(Outcome::is_ok), "{outcomes:?}");
    // One permit (2/s x 500 ms expected), 100 ms per call, two starts in any second.
    assert_eq!(
        sim.starts_ms(),
        [0.0, 100.0, 1_000.0, 1_100.0, 2_000.0, 2_100.0]
    );
    assert!(max_in_window(&sim.starts_ms(), 1_000.0) <= 2);
}

/// What a model that does what it is told makes of a turn: every deferred
/// call re-issued, each after its own `retry_after_ms`, in a turn of its
/// own (or, `same_turn`, all in the first turn), until all are answered.
/// Returns the re-issues and how many of them were deferred again.
async fn reissue_until_answered(
    gate: &sluice::Gate<SimExecutor>,
    calls: Vec<Call>,
    same_turn: bool,
) -> (usize, usize) {
    let first = gate.turn();
    let outcomes = first.run(calls.clone()).await;
    let mut pending: Vec<(Call, Duration)> = calls
        .into_iter()
        .zip(&outcomes)
        .filter_map(|(call, outcome)| match outcome {
            Outcome::RateLimited { .. } => Some((call, outcome.retry_after().unwrap())),
            Outcome::Ok { .. } => None,
            other => panic!("{other:?}"),
        })
        .collect();
    let (mut reissued, mut again) = (0, 0);
    for _round in 0..10 {
        if pending.is_empty() {
            break;
        }
        let issued = pending.len();
        let answers = futures_util::future::join_all(pending.drain(..).map(|(call, wait)| {
            let turn = if same_turn {
                first.clone()
            } else {
                gate.turn()
            };
            async move {
                tokio::time::sleep(wait).await;
                let outcome = turn.call(call.clone()).await;
                (call, outcome)
            }
        }))
        .await;
        reissued += issued;
        for (call, outcome) in answers {
            match &outcome {
                Outcome::Ok { .. } => {}
                Outcome::RateLimited { .. } => {
                    again += 1;
                    pending.push((call, outcome.retry_after().unwrap()));
                }
                other => panic!("{other:?}"),
            }
        }
    }
    assert!(pending.is_empty(), "every call answered in the end");
    (reissued, again)
}

/// Issue 50: "the model issued twelve calls, the system can run four now —
/// tell it exactly that". With `rate = "2/1s"`, `max_in_flight = 1`,
/// `queue = 2` and a 1 s inline wait, a turn of 12 calls defers 10, each told
/// when a start would be free for it given the calls ahead of it, so the
/// waits grow with position (before: every one told 1.5 s, and 6 of the 9
/// re-issues shed again). A model re-issuing each after its own wait finds
/// room: at most 1 in 6 re-issues is deferred again, and the key's window
/// holds on the upstream's records.
#[tokio::test(start_paused = true)]
async fn each_shed_call_is_told_its_own_wait_and_its_reissue_fits() {
    let sim = Sim::always_ok(100);
    let defaults = Defaults {
        inline_wait: Duration::from_secs(1),
        ..Defaults::default()
    };
    let credential = CredentialConfig::with_rate(rate("2/1s"))
        .max_in_flight(1)
        .queue(2);
    let gate = build_gate(config_with(credential, defaults), &sim);
    let calls: Vec<Call> = (0..12)
        .map(|n| Call::new("read", json!({ "n": n })))
        .collect();
    let first = gate.turn().run(calls.clone()).await;
    let waits: Vec<u64> = first
        .iter()
        .filter_map(|o| o.retry_after().map(|w| w.as_millis() as u64))
        .collect();
    // Two start within the 1 s inline wait; the third's slot is at 1.02 s.
    assert_eq!(waits.len(), 10, "{first:?}");
    assert!(
        waits.windows(2).all(|pair| pair[1] > pair[0]),
        "the waits grow with position: {waits:?}"
    );

    let sim = Sim::always_ok(100);
    let credential = CredentialConfig::with_rate(rate("2/1s"))
        .max_in_flight(1)
        .queue(2);
    let gate = build_gate(config_with(credential, defaults_1s()), &sim);
    let (reissued, again) = reissue_until_answered(&gate, calls, false).await;
    eprintln!(
        "re-issued {reissued}, deferred again {again}: {:?}",
        sim.starts_ms()
    );
    assert!(reissued >= 10);
    assert!(
        again * 6 <= reissued,
        "{again} of {reissued} deferred again"
    );
    assert_eq!(sim.count(), 12, "one request per call");
    // The key's 2/1s (plus its 20 ms margin) on the upstream's records.
    assert!(
        max_in_window(&sim.starts_ms(), 1_000.0) <= 2,
        "{:?}",
        sim.starts_ms()
    );
}

fn defaults_1s() -> Defaults {
    Defaults {
        inline_wait: Duration::from_secs(1),
        ..Defaults::default()
    }
}

/// Issue 50: identical reads deferred together are told the same wait, and
/// re-issued together in the turn they coalesce still: one request each.
#[tokio::test(start_paused = true)]
async fn same_turn_reissues_of_identical_reads_still_coalesce() {
    let sim = Sim::always_ok(100);
    let credential = CredentialConfig::with_rate(rate("2/1s"))
        .max_in_flight(1)
        .queue(2);
    let gate = build_gate(config_with(credential, defaults_1s()), &sim);
    // Six reads, each asked twice.
    let calls: Vec<Call> = (0..12)
        .map(|i| Call::new("read", json!({ "n": i / 2 })))
        .collect();
    let (reissued, again) = reissue_until_answered(&gate, calls, true).await;
    assert!(reissued > 0);
    assert!(
        again * 6 <= reissued,
        "{again} of {reissued} deferred again"
    );
    assert_eq!(
        sim.count(),
        6,
        "one request per distinct read: {:?}",
        sim.starts_by_n()
    );
    assert!(max_in_window(&sim.starts_ms(), 1_000.0) <= 2);
}

/// Issue 50: room a true-up frees goes first to the calls already waiting.
/// `chat` costs `{max_tokens}` tokens and settles `/usage/total_tokens` on
/// `units.tokens` of `100/1s`; five calls estimate 40 and use 10. Without
/// the re-plan they started at 0, 0, 1.02, 1.02 and 2.04 s on the exact
/// window, and at 0, 0, 0.204, 0.612 and 1.02 s on a bucket of `burst = 100`
/// (the refunds went to nobody: in a burst no call arrives later). Now
/// each settle moves the calls waiting behind it, on both: their starts go
/// back before the settle's refund, while they are the bucket's last
/// charges, and they ask again.
#[tokio::test(start_paused = true)]
async fn a_settle_moves_the_calls_waiting_behind_it() {
    for burst in [None, Some(100)] {
        let sim = Sim::new(|_, request| {
            let used = request.payload["used"].as_u64().unwrap();
            Reply {
                body: json!({"usage": {"total_tokens": used}}).to_string(),
                ..Reply::ok(100)
            }
        });
        let mut unit = UnitConfig::with_rate(rate("100/1s"));
        unit.burst = burst;
        let credential = CredentialConfig::with_rate(rate("50/1s"))
            .max_in_flight(20)
            .unit("tokens", unit);
        let tool = ToolConfig::write("key")
            .cost("tokens", Cost::Argument("max_tokens".into()))
            .settle("tokens", Settle::Pointer("/usage/total_tokens".into()));
        let defaults = Defaults {
            inline_wait: Duration::from_secs(3),
            ..Defaults::default()
        };
        let config = GateConfig::default()
            .defaults(defaults)
            .credential("key", credential)
            .tool("chat", tool);
        let gate = build_gate(config, &sim);
        let calls =
            (0..5).map(|n| Call::new("chat", json!({ "n": n, "max_tokens": 40, "used": 10 })));
        let outcomes = gate.turn().run(calls).await;
        assert!(
            outcomes.iter().all(Outcome::is_ok),
            "{burst:?}: {outcomes:?}"
        );
        let starts = sim.starts_ms();
        eprintln!("burst {burst:?}: starts {starts:?}");
        let first_second = starts.iter().filter(|t| **t < 1_000.0).count();
        assert!(first_second >= 3, "{burst:?}: {starts:?}");
        // Two at once; each settle (100 ms after a start) makes room for
        // the calls waiting: on the window 40 tokens at a time, the next
        // call at once; the bucket, refilling besides, takes two.
        let expected = match burst {
            None => [0.0, 0.0, 100.0, 200.0, 300.0],
            Some(_) => [0.0, 0.0, 100.0, 100.0, 200.0],
        };
        assert_eq!(starts, expected, "{burst:?}");
    }
}
