//! The local cells: calls on several windows, groups or units, and the
//! one-window case of a call on one limit (its first scope's request window).

use super::*;

/// Redis counts as many processes as the spell began with.
const ALL_BACK: Others = (0, Duration::from_secs(5), false);

/// The earliest start a recovering call at half the rate may take at
/// `now`, nothing held; `None`: Redis alone decides.
fn earliest(f: &mut Fallback, windows: &[SharedWindow], now: Instant) -> Option<Instant> {
    let far = now + Duration::from_secs(3_600);
    match f.hold_recovering(windows, 0.5, (now, now, far), ALL_BACK)? {
        Ok((at, held)) => {
            f.release(&held);
            Some(at)
        }
        Err(late) => Some(late.at),
    }
}

#[test]
fn recovering_calls_hold_their_start_in_every_window() {
    let t0 = Instant::now();
    let s = Duration::from_secs(1);
    let mut f = Fallback::new(t0);
    let call = [window("api_key", None, 0, "2/1s", 1)];
    f.reserve(&call, 1.0, t0, t0, t0).unwrap();
    // Back a moment later, calls at once: the first holds the room left.
    let back = t0 + s / 10;
    let hold = |f: &mut Fallback| f.hold_recovering(&call, 1.0, (back, back, back), ALL_BACK);
    let Some(Ok((at, held))) = hold(&mut f) else {
        panic!("the window had room");
    };
    assert_eq!(at, back);
    assert_eq!(
        hold(&mut f).and_then(Result::err).map(|late| late.at),
        Some(t0 + s)
    );
    // Redis answered: the start is free again.
    f.release(&held);
    assert!(matches!(hold(&mut f), Some(Ok((at, _))) if at == back));
}

fn window(scope: &str, unit: Option<&str>, index: usize, rate: &str, cost: u64) -> SharedWindow {
    SharedWindow {
        scope: scope.into(),
        unit: unit.map(str::to_owned),
        index,
        rate: rate.parse().unwrap(),
        cost,
        low: false,
        burst: None,
    }
}

/// `rate = ["5/1s", "20/10s"]`, a group at 4/1s and tokens at 40/1s.
fn call(tokens: u64) -> Vec<SharedWindow> {
    vec![
        window("api_key", None, 0, "5/1s", 1),
        window("api_key", None, 1, "20/10s", 1),
        window("search", None, 0, "4/1s", 1),
        window("api_key", Some("tokens"), 0, "40/1s", tokens),
    ]
}

#[test]
fn every_window_is_held_at_the_share() {
    let t0 = Instant::now();
    let s = Duration::from_secs(1);
    let mut f = Fallback::new(t0);
    let far = t0 + 60 * s;
    let mut starts = Vec::new();
    for _ in 0..12 {
        let (at, _) = f.reserve(&call(5), 0.5, t0, t0, far).unwrap();
        starts.push(at);
    }
    // Half of each: the group's 2/1s sets the pace, then the 10/10s of
    // the second window stops the eleventh until ten seconds in.
    for pair in starts[..10].chunks(2) {
        assert_eq!(pair[0], pair[1]);
    }
    assert_eq!(starts[2], t0 + s);
    assert_eq!(starts[8], t0 + 4 * s);
    assert_eq!(starts[10], t0 + 10 * s);
    // The unit's share (20 tokens a second) binds a costly call.
    let mut g = Fallback::new(t0);
    g.reserve(&call(15), 0.5, t0, t0, far).unwrap();
    let denied = g.reserve(&call(15), 0.5, t0, t0, t0 + s / 2).unwrap_err();
    assert_eq!(
        denied,
        NotBefore {
            at: t0 + s,
            window: 3
        }
    );
}

#[test]
fn a_bucket_is_cut_to_the_share_with_its_burst() {
    // 10/1s with a burst of 4 beside 20/10s, at half: 5/1s holding 2.
    let t0 = Instant::now();
    let ms = Duration::from_millis(1);
    let mut bucket = window("api_key", None, 0, "10/1s", 1);
    bucket.burst = std::num::NonZeroU32::new(4);
    let call = [bucket, window("api_key", None, 1, "20/10s", 1)];
    let mut f = Fallback::new(t0);
    let far = t0 + Duration::from_secs(60);
    let starts: Vec<Instant> = (0..3)
        .map(|_| f.reserve(&call, 0.5, t0, t0, far).unwrap().0)
        .collect();
    assert_eq!(starts, [t0, t0, t0 + 200 * ms]);
}

#[test]
fn a_refund_gives_back_every_window_and_a_settle_the_unit() {
    let t0 = Instant::now();
    let mut f = Fallback::new(t0);
    let (_, id) = f.reserve(&call(20), 0.5, t0, t0, t0).unwrap();
    // The unit's share of 20 a second is spent; trued up to 10, half is back.
    assert!(f.reserve(&call(1), 0.5, t0, t0, t0).is_err());
    f.settle(id, "tokens", 20, 10);
    let (_, id) = f.reserve(&call(10), 0.5, t0, t0, t0).unwrap();
    // The group's share (2/1s) is spent now; a refund gives one back.
    assert!(f.reserve(&call(1), 0.5, t0, t0, t0).is_err());
    assert!(f.refund(id));
    assert!(!f.refund(id));
    assert!(f.reserve(&call(10), 0.5, t0, t0, t0).is_ok());
}

#[test]
fn a_spend_still_ahead_does_not_make_a_cell_forget_the_window() {
    let t0 = Instant::now();
    let ms = Duration::from_millis(1);
    let mut f = Fallback::new(t0);
    let call = [window("api_key", None, 0, "2/1s", 1)];
    // A spend a moment ago, and a granted one 1.5 s ahead: the window
    // is spent until then (seen from that spend's own time, the first
    // would be forgotten, and one more would fit now).
    let now = t0 + 100 * ms;
    f.remember(&call, t0, now);
    f.remember(&call, t0 + 1_500 * ms, now);
    f.take_over(1.0);
    let denied = f.reserve(&call, 1.0, now, now, now).unwrap_err();
    assert_eq!(denied.at, t0 + 1_500 * ms);
}

#[test]
fn taking_over_counts_the_recent_shared_spends_in_every_window() {
    let t0 = Instant::now();
    let ms = Duration::from_millis(1);
    let mut f = Fallback::new(t0);
    // Two shared spends in the last second: the group's share of two
    // is used up, the second window's share of ten has eight left.
    f.remember(&call(5), t0, t0);
    f.remember(&call(5), t0 + 100 * ms, t0 + 100 * ms);
    f.take_over(0.5);
    let now = t0 + 200 * ms;
    let denied = f.reserve(&call(5), 0.5, now, now, now).unwrap_err();
    assert_eq!(denied.window, 0);
    assert_eq!(denied.at, t0 + 1_000 * ms);
    let far = t0 + Duration::from_secs(60);
    let granted: Vec<Instant> = (0..9)
        .map(|_| f.reserve(&call(5), 0.5, now, now, far).unwrap().0)
        .collect();
    // Eight more in the first ten seconds, the ninth at ten.
    assert!(granted[7] < t0 + Duration::from_secs(10));
    assert_eq!(granted[8], t0 + Duration::from_secs(10));
}

#[test]
fn back_in_shared_mode_the_local_spends_count_for_the_longest_window() {
    let t0 = Instant::now();
    let s = Duration::from_secs(1);
    let mut f = Fallback::new(t0);
    assert_eq!(earliest(&mut f, &call(5), t0), None);
    f.reserve(&call(5), 0.5, t0, t0, t0).unwrap();
    f.reserve(&call(5), 0.5, t0, t0, t0).unwrap();
    // Redis back empty counts one process for a while: the spell's half holds.
    assert_eq!(f.spell.share_in_force(1.0), 0.5);
    let back = t0 + s / 10;
    assert_eq!(earliest(&mut f, &call(5), back), Some(t0 + s));
    f.count_shared(&call(5), 0.5, t0 + s);
    // Ten seconds after the last local start (the longest window), Redis alone decides.
    assert!(earliest(&mut f, &call(5), t0 + 5 * s).is_some());
    assert_eq!(earliest(&mut f, &call(5), t0 + 10 * s), None);
    assert_eq!(f.spell.share_in_force(1.0), 1.0);
}

/// A spell whose every local decision was a denial (the cells full of
/// the shared spends they took in) still bounds the shared starts for
/// a window after it: a Redis back from a restart has forgotten those
/// spends, and without this it let a whole window more through.
#[test]
fn a_spell_of_denials_still_bounds_the_shared_starts_after_it() {
    let t0 = Instant::now();
    let s = Duration::from_secs(1);
    let mut f = Fallback::new(t0);
    // Shared spends filling the share of the 10 s window (10 of 20 at half).
    for i in 0..10 {
        f.remember(&call(1), t0 + i * s / 10, t0);
    }
    f.take_over(0.5);
    let denied = f.reserve(&call(1), 0.5, t0 + s, t0 + s, t0 + 2 * s);
    assert!(denied.is_err(), "{denied:?}");
    // Back in shared mode at 3 s: the cells still hold the call back.
    let late = earliest(&mut f, &call(1), t0 + 3 * s).unwrap();
    assert!(late >= t0 + 10 * s, "{late:?}");
}

// A call on one limit: its first scope's window, at a cost of one. The
// limit here is already this process's share (the share is 1).

/// The one-window case: `api_key` at `rate` (a bucket of `burst`).
fn one(rate: &str, burst: Option<u32>) -> Vec<SharedWindow> {
    let mut only = window("api_key", None, 0, rate, 1);
    only.burst = burst.and_then(std::num::NonZeroU32::new);
    vec![only]
}

/// Records shared starts in the one window's cell, as taking over does.
fn seed(f: &mut Fallback, l: &[SharedWindow], starts: &[Instant]) {
    for at in starts {
        f.count_shared(l, 1.0, *at);
    }
}

/// A one-window reservation: the start, or the earliest start.
fn reserve(
    f: &mut Fallback,
    l: &[SharedWindow],
    (now, not_before, latest): (Instant, Instant, Instant),
) -> Result<(Instant, u64), Instant> {
    f.reserve(l, 1.0, now, not_before, latest)
        .map_err(|late| late.at)
}

#[test]
fn local_cells_limit_refund_and_penalize() {
    let t0 = Instant::now();
    let mut f = Fallback::new(t0);
    let l = one("2/1s", None);
    let far = t0 + Duration::from_secs(5);
    let (a, _) = reserve(&mut f, &l, (t0, t0, far)).unwrap();
    let (b, id) = reserve(&mut f, &l, (t0, t0, far)).unwrap();
    assert_eq!((a, b), (t0, t0));
    assert_eq!(
        reserve(&mut f, &l, (t0, t0, t0)),
        Err(t0 + Duration::from_secs(1))
    );
    f.refund(id);
    assert!(reserve(&mut f, &l, (t0, t0, t0)).is_ok());
    f.penalize("api_key", t0 + Duration::from_secs(3), t0);
    let (c, _) = reserve(&mut f, &l, (t0, t0, far)).unwrap();
    assert_eq!(c, t0 + Duration::from_secs(3));
}

#[test]
fn taking_over_counts_the_starts_of_the_last_window_only() {
    let t0 = Instant::now();
    let ms = Duration::from_millis(1);
    let mut f = Fallback::new(t0);
    let l = one("2/1s", None);
    f.remember(&l, t0, t0);
    f.remember(&l, t0 + 900 * ms, t0 + 900 * ms);
    // A window after the first start, only the second still counts.
    f.remember(&l, t0 + 1_000 * ms, t0 + 1_000 * ms);
    f.take_over(1.0);
    let now = t0 + 1_000 * ms;
    assert_eq!(reserve(&mut f, &l, (now, now, now)), Err(t0 + 1_900 * ms));
}

#[test]
fn a_start_still_ahead_does_not_make_the_cell_forget_the_window() {
    let t0 = Instant::now();
    let ms = Duration::from_millis(1);
    let mut f = Fallback::new(t0);
    let l = one("2/1s", None);
    // A start a moment ago, and a granted slot 1.5 s ahead: the share
    // is spent until that slot (seen from the slot's own time, the
    // first start would be forgotten, and one more would fit now).
    let now = t0 + 100 * ms;
    seed(&mut f, &l, &[t0, t0 + 1_500 * ms]);
    assert_eq!(reserve(&mut f, &l, (now, now, now)), Err(t0 + 1_500 * ms));
}

#[test]
fn seeding_counts_the_recent_shared_starts() {
    let t0 = Instant::now();
    let ms = Duration::from_millis(1);
    let mut f = Fallback::new(t0);
    let l = one("2/1s", None);
    seed(&mut f, &l, &[t0, t0 + 100 * ms, t0 + 200 * ms]);
    // Three starts against a share of two: the next local start waits
    // until two of them have left the window ending at it (t0 + 1.1 s),
    // which then holds the third real start and one local one.
    let now = t0 + 300 * ms;
    assert_eq!(reserve(&mut f, &l, (now, now, now)), Err(t0 + 1_100 * ms));
}

#[test]
fn a_busy_process_waits_at_most_a_window_for_its_share() {
    // Six starts in half a second against a share of two a second: the
    // next local start comes once five of them have left its window,
    // a second after the fifth (each start beyond the share recorded
    // at the first time the share had room put it at t0 + 3 s).
    let t0 = Instant::now();
    let ms = Duration::from_millis(1);
    let mut f = Fallback::new(t0);
    let l = one("2/1s", None);
    let shared: Vec<Instant> = (0..6).map(|i| t0 + i * 100 * ms).collect();
    seed(&mut f, &l, &shared);
    let now = t0 + 600 * ms;
    assert_eq!(reserve(&mut f, &l, (now, now, now)), Err(t0 + 1_400 * ms));
    let later = t0 + 1_400 * ms;
    assert!(reserve(&mut f, &l, (later, later, later)).is_ok());
    // The window ending there holds the sixth real start and it.
    assert_eq!(
        reserve(&mut f, &l, (later, later, later)),
        Err(t0 + 1_500 * ms)
    );
}

#[test]
fn back_in_shared_mode_the_local_starts_count_for_a_window() {
    let t0 = Instant::now();
    let ms = Duration::from_millis(1);
    let mut f = Fallback::new(t0);
    let l = one("2/1s", None);
    assert_eq!(earliest_of(&mut f, &l, t0, ALL_BACK), None);
    f.take_over(1.0);
    reserve(&mut f, &l, (t0, t0, t0)).unwrap();
    reserve(&mut f, &l, (t0, t0, t0)).unwrap();
    // Redis is back 100 ms later: no shared start before the local
    // ones leave the window.
    let back = t0 + 100 * ms;
    assert_eq!(
        earliest_of(&mut f, &l, back, ALL_BACK),
        Some(t0 + 1_000 * ms)
    );
    f.count_shared(&l, 1.0, t0 + 1_000 * ms);
    // A window after the last local start, Redis alone decides.
    assert_eq!(earliest_of(&mut f, &l, t0 + 1_000 * ms, ALL_BACK), None);
}

/// The earliest start a recovering call on `l` may take at `now`,
/// nothing held; `None`: Redis alone decides.
fn earliest_of(
    f: &mut Fallback,
    l: &[SharedWindow],
    now: Instant,
    counted: Others,
) -> Option<Instant> {
    let far = now + Duration::from_secs(3_600);
    match f.hold_recovering(l, 1.0, (now, now, far), counted)? {
        Ok((at, held)) => {
            f.release(&held);
            Some(at)
        }
        Err(late) => Some(late.at),
    }
}

#[test]
fn recovering_calls_hold_their_starts_until_redis_answers() {
    let t0 = Instant::now();
    let s = Duration::from_secs(1);
    let mut f = Fallback::new(t0);
    let l = one("2/1s", None);
    reserve(&mut f, &l, (t0, t0, t0)).unwrap();
    // Back a moment later, three calls at once: the share has room for
    // one more, and the first to look holds it.
    let back = t0 + Duration::from_millis(100);
    let hold = |f: &mut Fallback| f.hold_recovering(&l, 1.0, (back, back, back), ALL_BACK);
    let Some(Ok((at, held))) = hold(&mut f) else {
        panic!("the share had room");
    };
    assert_eq!(at, back);
    assert_eq!(
        hold(&mut f),
        Some(Err(NotBefore {
            at: t0 + s,
            window: 0
        }))
    );
    // Its answer came (Redis said no): the start is free again.
    f.release(&held);
    assert!(matches!(hold(&mut f), Some(Ok((at, _))) if at == back));
}

#[test]
fn back_before_the_others_the_share_holds_until_redis_counts_them() {
    let t0 = Instant::now();
    let s = Duration::from_secs(1);
    let mut f = Fallback::new(t0);
    let l = one("2/1s", None);
    // Three processes when Redis went away.
    f.spell.begin(3);
    f.take_over(1.0);
    reserve(&mut f, &l, (t0, t0, t0)).unwrap();
    reserve(&mut f, &l, (t0, t0, t0)).unwrap();
    let alone = (1, 5 * s, false);
    // Back from an empty restart, two windows on, and the first
    // process Redis has seen: the others may still decide locally, so
    // the share still binds.
    let back = t0 + 2 * s;
    assert_eq!(earliest_of(&mut f, &l, back, alone), Some(back));
    f.count_shared(&l, 1.0, back);
    f.count_shared(&l, 1.0, back);
    assert_eq!(earliest_of(&mut f, &l, back, alone), Some(back + s));
    // Once Redis counts all three, a window more (their last local
    // starts reach Redis as they come back), then Redis alone decides.
    let all = back + s / 2;
    assert_eq!(
        earliest_of(&mut f, &l, all, (3, 5 * s, false)),
        Some(back + s)
    );
    assert_eq!(earliest_of(&mut f, &l, all + s, (3, 5 * s, false)), None);
    // A process that never comes back holds the share for `missing`
    // after the window, no longer.
    let back = all + s;
    f.spell.begin(3);
    reserve(&mut f, &l, (back + s, back + s, back + s)).unwrap();
    let gone = back + 2 * s + 5 * s;
    assert!(earliest_of(&mut f, &l, gone - s, alone).is_some());
    assert_eq!(earliest_of(&mut f, &l, gone, alone), None);
}

#[test]
fn a_second_switch_keeps_the_local_starts_of_the_first() {
    // Fallback, a late shared reply (shared mode for a moment), fallback
    // again: the cell still counts the local starts of the first spell.
    let t0 = Instant::now();
    let ms = Duration::from_millis(1);
    let mut f = Fallback::new(t0);
    let l = one("2/1s", None);
    f.take_over(1.0);
    reserve(&mut f, &l, (t0, t0, t0)).unwrap();
    reserve(&mut f, &l, (t0, t0, t0)).unwrap();
    let late = t0 + 10 * ms;
    f.remember(&l, late, late);
    f.take_over(1.0);
    let now = t0 + 20 * ms;
    assert_eq!(reserve(&mut f, &l, (now, now, now)), Err(t0 + 1_000 * ms));
    // The shared start was taken in once: a third switch adds nothing.
    f.take_over(1.0);
    let later = t0 + 1_000 * ms;
    assert!(reserve(&mut f, &l, (later, later, later)).is_ok());
}

#[test]
fn every_shared_start_is_counted_even_beyond_the_share() {
    // A process that spent more than its share in shared mode (here 6
    // starts, some still ahead, against a share of 3 per second) gets
    // no local start until its real starts leave room: in every window
    // holding a local start, its real and local starts together stay
    // within the share.
    let t0 = Instant::now();
    let ms = Duration::from_millis(1);
    let mut f = Fallback::new(t0);
    let l = one("3/1s", None);
    let shared: Vec<Instant> = (0..6).map(|i| t0 + i * 100 * ms).collect();
    seed(&mut f, &l, &shared);
    let now = t0 + 50 * ms;
    let far = t0 + Duration::from_secs(10);
    let mut local = Vec::new();
    for _ in 0..6 {
        local.push(reserve(&mut f, &l, (now, now, far)).unwrap().0);
    }
    let all: Vec<Instant> = shared.iter().chain(&local).copied().collect();
    for end in &local {
        let in_window = all
            .iter()
            .filter(|t| **t <= *end && **t + Duration::from_secs(1) > *end)
            .count();
        assert!(
            in_window <= 3,
            "{in_window} starts in the window ending at {end:?}"
        );
    }
}

#[test]
fn a_bucket_of_one_limit_moves_on_one_interval_per_start() {
    // 10/1s holding 2 at once: two now, then one every 100 ms.
    let t0 = Instant::now();
    let ms = Duration::from_millis(1);
    let mut f = Fallback::new(t0);
    let l = one("10/1s", Some(2));
    let far = t0 + Duration::from_secs(1);
    let starts: Vec<Instant> = (0..4)
        .map(|_| reserve(&mut f, &l, (t0, t0, far)).unwrap().0)
        .collect();
    assert_eq!(starts, [t0, t0, t0 + 100 * ms, t0 + 200 * ms]);
}
