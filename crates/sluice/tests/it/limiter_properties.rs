//! Property tests of the pure limiter cells: the rate promise holds under any
//! mix of reservations, refunds, penalties and server reports, and a refund
//! restores exactly what its reservation took.

use std::num::NonZeroU32;
use std::time::Duration;

use proptest::prelude::*;
use sluice::Rate;
use sluice::limiter::{LimiterCell, Micros, Reservation};

#[derive(Debug, Clone)]
enum Op {
    /// Advance time, then reserve with this max wait and not-before offset.
    Reserve {
        advance: Micros,
        max_wait: Micros,
        not_before: Micros,
    },
    /// Refund the i-th still-waiting reservation (if any).
    Refund(usize),
    Penalize {
        advance: Micros,
        wait: Micros,
    },
    Sync {
        advance: Micros,
        remaining: u64,
        reset: Micros,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let ms = 1_000u64;
    prop_oneof![
        8 => (0..300 * ms, 0..2_000 * ms, 0..500 * ms).prop_map(|(advance, max_wait, not_before)| Op::Reserve { advance, max_wait, not_before }),
        1 => (0usize..8).prop_map(Op::Refund),
        1 => (0..300 * ms, 0..1_500 * ms).prop_map(|(advance, wait)| Op::Penalize { advance, wait }),
        1 => (0..300 * ms, 0u64..5, 0..1_500 * ms).prop_map(|(advance, remaining, reset)| Op::Sync { advance, remaining, reset }),
    ]
}

/// Runs `ops` and returns every start that was actually used: reservations
/// that were neither refunded nor voided before their start time.
fn run(mut cell: LimiterCell, ops: &[Op]) -> Vec<Micros> {
    let mut now: Micros = 0;
    let mut waiting: Vec<Reservation> = Vec::new();
    let mut started: Vec<Micros> = Vec::new();
    let settle = |now: Micros,
                  cell: &LimiterCell,
                  waiting: &mut Vec<Reservation>,
                  started: &mut Vec<Micros>| {
        // A caller whose slot came starts if its reservation still holds;
        // a voided caller re-reserves (modelled as dropping out).
        waiting.retain(|r| {
            if r.start() <= now {
                if cell.is_current(r) {
                    started.push(r.start());
                }
                false
            } else {
                true
            }
        });
    };
    for op in ops {
        match *op {
            Op::Reserve {
                advance,
                max_wait,
                not_before,
            } => {
                now += advance;
                settle(now, &cell, &mut waiting, &mut started);
                if let Ok(r) = cell.reserve(now, now + not_before, max_wait) {
                    waiting.push(r);
                }
            }
            Op::Refund(i) => {
                if !waiting.is_empty() {
                    let r = waiting.remove(i % waiting.len());
                    cell.refund(&r);
                }
            }
            Op::Penalize { advance, wait } => {
                now += advance;
                settle(now, &cell, &mut waiting, &mut started);
                cell.penalize(now + wait, now);
            }
            Op::Sync {
                advance,
                remaining,
                reset,
            } => {
                now += advance;
                settle(now, &cell, &mut waiting, &mut started);
                cell.sync(remaining, now + reset, now);
            }
        }
    }
    settle(Micros::MAX, &cell, &mut waiting, &mut started);
    started.sort_unstable();
    started
}

/// The most starts in any half-open window `[t, t + w)`.
fn max_in_window(starts: &[Micros], w: Micros) -> usize {
    let mut best = 0;
    let mut lo = 0;
    for hi in 0..starts.len() {
        while starts[hi] - starts[lo] >= w {
            lo += 1;
        }
        best = best.max(hi - lo + 1);
    }
    best
}

fn rate(n: u32, window_ms: u64) -> Rate {
    Rate::new(
        NonZeroU32::new(n).unwrap(),
        Duration::from_millis(window_ms),
    )
    .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn sliding_window_never_exceeds_n_in_any_window(
        n in 1u32..12,
        window_ms in 50u64..2_000,
        ops in prop::collection::vec(op(), 1..200),
    ) {
        let starts = run(LimiterCell::new(rate(n, window_ms), None), &ops);
        prop_assert!(max_in_window(&starts, window_ms * 1_000) <= n as usize);
    }

    #[test]
    fn gcra_never_exceeds_burst_plus_rate_times_window(
        n in 1u32..12,
        burst in 1u32..12,
        window_ms in 50u64..2_000,
        ops in prop::collection::vec(op(), 1..200),
    ) {
        let cell = LimiterCell::new(rate(n, window_ms), NonZeroU32::new(burst));
        let starts = run(cell, &ops);
        prop_assert!(max_in_window(&starts, window_ms * 1_000) <= (burst + n) as usize);
    }

    #[test]
    fn a_refund_restores_exactly_what_the_reservation_took(
        n in 1u32..12,
        burst in prop::option::of(1u32..12),
        window_ms in 50u64..2_000,
        ops in prop::collection::vec(op(), 0..60),
        max_wait in 0u64..3_000_000,
        not_before in 0u64..500_000,
    ) {
        let mut cell = LimiterCell::new(rate(n, window_ms), burst.and_then(NonZeroU32::new));
        // Bring the cell to an arbitrary state first.
        let now = run_and_keep(&mut cell, &ops) + 1_000;
        cell.earliest(now);
        let before = cell.clone();
        if let Ok(reservation) = cell.reserve(now, now + not_before, max_wait) {
            cell.refund(&reservation);
        }
        prop_assert_eq!(cell, before);
    }
}

/// Like [`run`], but leaves the cell in its final state; returns the final time.
fn run_and_keep(cell: &mut LimiterCell, ops: &[Op]) -> Micros {
    let mut now: Micros = 0;
    for op in ops {
        match *op {
            Op::Reserve {
                advance,
                max_wait,
                not_before,
            } => {
                now += advance;
                let _ = cell.reserve(now, now + not_before, max_wait);
            }
            Op::Refund(_) => {}
            Op::Penalize { advance, wait } => {
                now += advance;
                cell.penalize(now + wait, now);
            }
            Op::Sync {
                advance,
                remaining,
                reset,
            } => {
                now += advance;
                cell.sync(remaining, now + reset, now);
            }
        }
    }
    now
}
