//! The cell's decisions on exact times: reservations, refunds, penalties, server budgets, several windows.

use super::*;

const MS: Micros = 1_000;

fn cell(rate: &str) -> LimiterCell {
    LimiterCell::new(rate.parse().unwrap(), None)
}

#[test]
fn a_spent_quota_holds_no_start_back_but_keeps_the_cell_until_it_resets() {
    let mut c = cell("2/1s");
    assert!(c.is_idle(0));
    assert_eq!(c.quota_until(0), None);
    assert!(c.exhaust(5_000 * MS, 0), "the first report is news");
    // A second report keeps the later reset, and is not news.
    assert!(!c.exhaust(3_000 * MS, MS));
    assert_eq!(c.quota_until(MS), Some(5_000 * MS));
    // The quota ends calls elsewhere; the cell's starts are not held.
    assert_eq!(c.reserve(MS, MS, 0).unwrap().start(), MS);
    assert!(
        !c.is_idle(2_000 * MS),
        "forgetting the cell would forget the quota"
    );
    assert_eq!(c.quota_until(5_000 * MS), None);
    assert!(c.is_idle(5_000 * MS));
    // Spent again after the reset: news again.
    assert!(c.exhaust(9_000 * MS, 6_000 * MS));
}

/// A cell with nothing further takes its short path (the window
/// alone); the same cell with an empty `Further` block takes the
/// general one. Both place and charge every start alike.
#[test]
fn the_short_path_of_a_cell_with_one_window_is_the_general_path() {
    let cells = [
        cell("3/1s"),
        LimiterCell::new("4/1s".parse().unwrap(), NonZeroU32::new(2)),
        LimiterCell::unlimited(),
    ];
    for short in cells {
        let mut general = short.clone();
        general.extras_mut();
        let mut short = short;
        let mut now = 0;
        for step in 0..200u64 {
            now += (step * 37) % 300 * MS;
            let not_before = now + (step % 3) * 100 * MS;
            let max_wait = (step % 4) * 400 * MS;
            let amount = step % 3;
            assert_eq!(
                short.earliest_for(now, not_before, amount),
                general.earliest_for(now, not_before, amount),
                "step {step}"
            );
            let (a, b) = (
                short.reserve_n(now, not_before, max_wait, amount),
                general.reserve_n(now, not_before, max_wait, amount),
            );
            assert_eq!(a, b, "step {step}");
            if step % 5 == 0
                && let Ok(reservation) = a
            {
                short.refund(&reservation);
                general.refund(&reservation);
            }
        }
        assert!(short.extras.is_none() && general.extras.is_some());
    }
}

#[test]
fn reserve_returns_the_wait_or_the_earliest_time() {
    let mut c = cell("2/1s");
    assert_eq!(c.reserve(0, 0, 0).unwrap().start(), 0);
    assert_eq!(c.reserve(0, 0, 0).unwrap().start(), 0);
    assert_eq!(c.reserve(0, 0, 500 * MS), Err(NotUntil(1_000 * MS)));
    // The rejected reservation charged nothing.
    assert_eq!(c.reserve(0, 0, 1_000 * MS).unwrap().start(), 1_000 * MS);
}

#[test]
fn not_before_is_respected_and_charged_there() {
    let mut c = cell("1/1s");
    let r = c.reserve(0, 300 * MS, 1_000 * MS).unwrap();
    assert_eq!(r.start(), 300 * MS);
    assert_eq!(c.earliest(0), 1_300 * MS);
}

#[test]
fn penalty_blocks_voids_and_restarts_empty() {
    let mut c = cell("10/1s");
    let waiting = c.reserve(0, 50 * MS, 100 * MS).unwrap();
    c.penalize(2_000 * MS, 10 * MS);
    assert!(!c.is_current(&waiting));
    assert_eq!(c.blocked_until(10 * MS), Some(2_000 * MS));
    let first = c.reserve(10 * MS, 0, 5_000 * MS).unwrap();
    let second = c.reserve(10 * MS, 0, 5_000 * MS).unwrap();
    assert_eq!(first.start(), 2_000 * MS);
    assert_eq!(second.start(), 2_100 * MS);
    // Refunding a voided reservation changes nothing.
    let before = c.clone();
    c.refund(&waiting);
    assert_eq!(c, before);
}

#[test]
fn sync_counts_down_and_zero_blocks_until_reset() {
    let mut c = LimiterCell::unlimited();
    c.sync(2, 1_000 * MS, 0);
    assert!(c.reserve(0, 0, 0).is_ok());
    assert!(c.reserve(0, 0, 0).is_ok());
    assert_eq!(c.reserve(0, 0, 0), Err(NotUntil(1_000 * MS)));
    assert_eq!(c.reserve(1_000 * MS, 0, 0).unwrap().start(), 1_000 * MS);
    c.sync(0, 3_000 * MS, 1_000 * MS);
    assert_eq!(c.blocked_until(1_000 * MS), Some(3_000 * MS));
    assert!(c.is_idle(3_000 * MS));
}

/// A bucket's waiting reservations come back exactly together when
/// they are its latest; a set missing a later one comes back not at
/// all, and says so first. An exact window takes any set back.
#[test]
fn the_latest_reservations_come_back_together() {
    let mut bucket = LimiterCell::new("1/1s".parse().unwrap(), NonZeroU32::new(1));
    let reserved: Vec<Reservation> = (0..3)
        .map(|_| bucket.reserve(0, 0, 10_000 * MS).unwrap())
        .collect();
    assert_eq!(reserved[2].start(), 2_000 * MS);
    assert!(!bucket.gives_back_exactly(&[&reserved[1]]));
    assert!(bucket.gives_back_exactly(&[&reserved[1], &reserved[2]]));
    bucket.refund_all(&[&reserved[1], &reserved[2]]);
    assert_eq!(
        bucket.reserve(0, 0, 10_000 * MS).unwrap().start(),
        1_000 * MS
    );
    let mut window = LimiterCell::new("1/1s".parse().unwrap(), None);
    let reserved: Vec<Reservation> = (0..3)
        .map(|_| window.reserve(0, 0, 10_000 * MS).unwrap())
        .collect();
    assert!(window.gives_back_exactly(&[&reserved[1]]));
    assert!(!window.fits_at(0, 1_000 * MS, 1));
    window.refund_all(&[&reserved[1]]);
    assert!(window.fits_at(0, 1_000 * MS, 1));
}

#[test]
fn refund_restores_the_server_budget() {
    let mut c = LimiterCell::unlimited();
    c.sync(1, 1_000 * MS, 0);
    let r = c.reserve(0, 0, 0).unwrap();
    c.refund(&r);
    assert!(c.reserve(0, 0, 0).is_ok());
}

#[test]
fn every_window_holds_and_names_the_one_that_binds() {
    let mut c = LimiterCell::windows(&["2/1s".parse().unwrap(), "3/10s".parse().unwrap()], None);
    let starts: Vec<Micros> = (0..3)
        .map(|_| c.reserve(0, 0, 20_000 * MS).unwrap().start())
        .collect();
    // Two in the first second, the third a second later; then the
    // ten-second window binds.
    assert_eq!(starts, [0, 0, 1_000 * MS]);
    assert_eq!(c.earliest_for(0, 0, 1), (10_000 * MS, Binding::Window(1)));
    assert_eq!(c.reserve(0, 0, 5_000 * MS), Err(NotUntil(10_000 * MS)));
}

#[test]
fn costs_spend_every_window_and_true_up_at_the_start() {
    let mut c = LimiterCell::windows(
        &["100/1s".parse().unwrap(), "150/1m".parse().unwrap()],
        None,
    );
    assert!(c.fits(100) && !c.fits(101));
    let r = c.reserve_n(0, 0, 0, 80).unwrap();
    assert_eq!(r.amount(), 80);
    // 30 more must wait for the 80 to leave the one-second window.
    assert_eq!(c.earliest_for(0, 0, 30), (1_000 * MS, Binding::Window(0)));
    // The call really spent 20: 60 back, at its start.
    c.adjust(r.start(), -60);
    assert_eq!(c.earliest_for(0, 0, 30).0, 0);
    // An over-spend is charged there too.
    c.adjust(r.start(), 110);
    assert_eq!(c.earliest_for(0, 0, 30), (60_000 * MS, Binding::Window(1)));
}

#[test]
fn a_server_budget_counts_costs() {
    let mut c = LimiterCell::unlimited();
    c.sync(100, 1_000 * MS, 0);
    assert!(c.reserve_n(0, 0, 0, 60).is_ok());
    assert_eq!(c.reserve_n(0, 0, 0, 60), Err(NotUntil(1_000 * MS)));
    assert!(c.reserve_n(0, 0, 0, 40).is_ok());
}

#[test]
fn set_limit_switches_algorithms() {
    let mut c = cell("1/1s");
    c.reserve(0, 0, 0).unwrap();
    c.set_limit(Some("3/1s".parse().unwrap()), None);
    assert_eq!(c.reserve(0, 0, 0).unwrap().start(), 0);
    c.set_limit(None, None);
    assert!(c.is_idle(0));
}
