//! `rate = "auto"`: probing for a server's unknown limit with AIMD.
//!
//! Additive increase, multiplicative decrease (Chiu and Jain, 1989, the
//! controller behind TCP congestion avoidance), preceded by TCP's slow start
//! (RFC 5681 §3.1: exponential growth until the first loss):
//!
//! - **slow start**: until the first throttle the rate doubles every 250 ms
//!   of successes, at most once per success (TCP doubles every round trip;
//!   a quarter second is a round trip for most APIs, and at a low starting
//!   rate each answer is the round trip), and grows by at least one request
//!   a second per success, as TCP's window grows by one segment per
//!   acknowledgement: answers that come back together (a burst sent at
//!   once) still double the rate per round of them. The engine then lets
//!   the calls sleeping on starts reserved under the slower rate reserve
//!   again;
//! - **decrease**: on a throttle the rate drops to `β` times the rate the
//!   server *accepted* in the second before the throttled request started
//!   (the requests sent then, less those it refused) — against a rolling
//!   window that is very nearly the server's limit, so one throttle is
//!   enough to settle just under it;
//! - **increase**: while nothing is throttled the rate grows additively,
//!   paced so that climbing from `β·L` back to `L` takes a probe cycle of at
//!   least [`MIN_CYCLE`] and at least 200 requests. One or two throttles per
//!   cycle are then under 2% of requests, and the average rate is
//!   `(1 + β) / 2` of the limit: 97.5%;
//! - **probing**: a throttle in slow start only gives a lower bound (the
//!   second before it ran at half the rate), and a rate above the estimate
//!   that is still not throttled means the estimate was low or the limit
//!   rose; in both cases growth is multiplicative, gently (×1.25 a second,
//!   in the spirit of RFC 3742's limited slow start), until a throttle
//!   measures the limit.

use std::collections::VecDeque;

use crate::limiter::Micros;

/// Multiplicative decrease factor. TCP Reno uses 0.5 and CUBIC 0.7; here the
/// decrease applies to the *accepted* rate, already at the limit, so a
/// gentle cut keeps the sawtooth's average at 97.5% of it. (Measured in
/// simulation against rolling-window limits of 3 to 300 per second: 92-98%
/// of the limit, under 0.6% of requests throttled.)
const BETA: f64 = 0.95;
/// A probe cycle lasts at least this long...
const MIN_CYCLE_SECS: f64 = 10.0;
/// ...and spans at least this many requests.
const MIN_CYCLE_REQUESTS: f64 = 200.0;
/// The accepted rate is measured over this trailing window.
const MEASURE_WINDOW: Micros = 1_000_000;
/// Never slower than this, so the controller can always learn again.
const MIN_RATE: f64 = 0.5;
/// Slow start doubles the rate once per this interval.
const SLOW_START_STEP: Micros = 250_000;
/// Growth per second past the estimated limit.
const PROBE_GROWTH: f64 = 1.25;

/// `MIN_CYCLE_SECS` for docs.
pub const MIN_CYCLE: std::time::Duration = std::time::Duration::from_secs(10);

/// The controller's state, a pure function of what it was told and when.
#[derive(Debug, Clone, PartialEq)]
pub struct Aimd {
    rate: f64,
    ceiling: Option<f64>,
    /// The limit estimated at the last throttle (`None`: still in slow start).
    estimate: Option<f64>,
    /// False while the estimate is only a lower bound from slow start.
    confirmed: bool,
    /// Start times of requests sent in the last two windows and not refused
    /// (a refusal comes back at once; acceptances may still be in flight).
    sent: VecDeque<Micros>,
    /// Last time the rate was raised.
    last_step: Micros,
    /// Last time the rate was cut: throttles of requests started before it
    /// belong to the same congestion event and cut nothing more.
    last_cut: Micros,
    throttles: u64,
}

/// What the controller is doing, for status pages.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct AimdState {
    /// `slow_start` or `avoidance`.
    pub phase: &'static str,
    /// The allowed rate now, requests per second.
    pub rate: f64,
    /// The server's limit as estimated at the last throttle.
    pub estimated_limit: Option<f64>,
    /// Throttles seen so far.
    pub throttles: u64,
}

impl Aimd {
    /// A controller starting at `initial` requests per second, never above `ceiling`.
    pub fn new(initial: f64, ceiling: Option<f64>, now: Micros) -> Self {
        let mut aimd = Aimd {
            rate: initial.max(MIN_RATE),
            ceiling,
            estimate: None,
            confirmed: false,
            sent: VecDeque::new(),
            last_step: now,
            last_cut: 0,
            throttles: 0,
        };
        aimd.clamp();
        aimd
    }

    /// The allowed rate now, requests per second.
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// True until the first throttle: the rate doubles every
    /// 250 ms of successes.
    pub fn in_slow_start(&self) -> bool {
        self.estimate.is_none()
    }

    /// A request starts at `started`.
    pub fn on_send(&mut self, started: Micros) {
        let at = self.sent.partition_point(|&t| t <= started);
        self.sent.insert(at, started);
    }

    /// A response to a request started at `started` arrived at `now`.
    /// Returns the new rate when it changed by more than 1%.
    pub fn on_response(&mut self, started: Micros, now: Micros, throttled: bool) -> Option<f64> {
        let before = self.rate;
        self.forget(now);
        if throttled && let Some(at) = self.sent.iter().rposition(|&t| t == started) {
            self.sent.remove(at);
        }
        if throttled && started <= self.last_cut {
            // Sent at the old rate, before the cut: the same event (as TCP
            // reduces once per window of data in flight).
        } else if throttled {
            // What the server accepted in the window before this request:
            // everything sent then that it did not refuse.
            let from = started.saturating_sub(MEASURE_WINDOW);
            // Its own start was removed above; others at the same instant count.
            let in_window = self
                .sent
                .iter()
                .filter(|&&t| t > from && t <= started)
                .count();
            let accepted = in_window as f64 * 1e6 / MEASURE_WINDOW as f64;
            // Nothing accepted lately (a throttle after a pause): the rate
            // that was sent is all we know.
            let limit = if accepted > 0.0 {
                accepted.min(self.rate)
            } else {
                self.rate
            };
            // Measured from slow start, the window before ran at half the rate.
            self.confirmed = self.estimate.is_some();
            self.estimate = Some(limit);
            self.rate = BETA * limit;
            self.last_step = now;
            self.last_cut = now;
            self.throttles += 1;
        } else if !throttled {
            self.grow(now);
        }
        self.clamp();
        ((self.rate - before).abs() > before * 0.01).then_some(self.rate)
    }

    fn grow(&mut self, now: Micros) {
        let elapsed = now.saturating_sub(self.last_step);
        match self.estimate {
            None => {
                let steps = (elapsed as f64 / SLOW_START_STEP as f64).min(1.0);
                self.rate = (self.rate * 2f64.powf(steps)).max(self.rate + 1.0);
                self.last_step = now;
            }
            Some(limit) if self.confirmed && self.rate < limit => {
                // Climb (1 - β)·L over one cycle of at least MIN_CYCLE and
                // MIN_CYCLE_REQUESTS requests.
                let cycle = MIN_CYCLE_SECS.max(MIN_CYCLE_REQUESTS / limit);
                let per_second = (1.0 - BETA) * limit / cycle;
                self.rate += per_second * elapsed as f64 / 1e6;
                self.last_step = now;
            }
            Some(_) => {
                self.rate *= PROBE_GROWTH.powf(elapsed as f64 / 1e6);
                self.last_step = now;
            }
        }
    }

    fn forget(&mut self, now: Micros) {
        // Keep two windows: a throttle measures the window before its start.
        while self
            .sent
            .front()
            .is_some_and(|&t| t.saturating_add(2 * MEASURE_WINDOW) <= now)
        {
            self.sent.pop_front();
        }
    }

    fn clamp(&mut self) {
        self.rate = self.rate.max(MIN_RATE);
        if let Some(ceiling) = self.ceiling {
            self.rate = self.rate.min(ceiling);
        }
    }

    /// Changes the ceiling, e.g. to a policy the server stated.
    pub fn set_ceiling(&mut self, ceiling: Option<f64>) {
        self.ceiling = ceiling;
        self.clamp();
    }

    /// What the controller is doing.
    pub fn state(&self) -> AimdState {
        AimdState {
            phase: match self.estimate {
                None => "slow_start",
                Some(limit) if self.confirmed && self.rate < limit => "avoidance",
                Some(_) => "probing",
            },
            rate: self.rate,
            estimated_limit: self.estimate,
            throttles: self.throttles,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Micros = 1_000_000;

    #[test]
    fn slow_start_doubles_every_quarter_second_at_most_once_per_answer() {
        let mut aimd = Aimd::new(1.0, None, 0);
        for step in 1..=4 {
            aimd.on_send(step * S / 4 - 1);
            aimd.on_response(step * S / 4 - 1, step * S / 4, false);
        }
        assert_eq!(aimd.rate(), 16.0);
        // One answer after a long silence doubles once, no more.
        aimd.on_response(2 * S, 3 * S, false);
        assert_eq!(aimd.rate(), 32.0);
        // Two answers an eighth of a second apart: sqrt(2) each.
        aimd.on_response(3 * S, 3 * S + S / 8, false);
        assert!((aimd.rate() - 32.0 * 2f64.sqrt()).abs() < 1e-9);
        assert_eq!(aimd.state().phase, "slow_start");
    }

    /// Four answers arriving together, as a burst sent at once comes back,
    /// add one request a second each: the rate doubles per round of them.
    #[test]
    fn slow_start_grows_by_one_per_answer_however_close_they_come() {
        let mut aimd = Aimd::new(4.0, None, 0);
        for i in 0..4 {
            aimd.on_send(0);
            aimd.on_response(0, 50_000 + i, false);
        }
        assert!(aimd.rate() >= 8.0, "{}", aimd.rate());
        assert!(aimd.in_slow_start());
    }

    /// Sends 20 requests in the second before `at`, then one at `at` that is refused.
    fn twenty_then_refused(aimd: &mut Aimd, at: Micros) -> Option<f64> {
        for i in 0..20 {
            aimd.on_send(at - S + 1 + i * 40_000);
        }
        aimd.on_send(at);
        aimd.on_send(at);
        aimd.on_response(at, at, true)
    }

    #[test]
    fn a_throttle_cuts_to_beta_times_what_was_accepted_once_per_event() {
        let mut aimd = Aimd::new(40.0, None, 0);
        // 20 accepted before it, and one more started at the same instant.
        assert!(twenty_then_refused(&mut aimd, 2 * S).is_some());
        assert_eq!(aimd.state().estimated_limit, Some(21.0));
        assert!((aimd.rate() - 0.95 * 21.0).abs() < 1e-9, "{}", aimd.rate());
        // Another refusal of a request sent before the cut: the same event.
        aimd.on_response(2 * S, 2 * S + 10, true);
        assert!((aimd.rate() - 0.95 * 21.0).abs() < 1e-9);
        assert_eq!(aimd.state().throttles, 1);
    }

    #[test]
    fn avoidance_climbs_slowly_then_probes_past_the_estimate() {
        let mut aimd = Aimd::new(40.0, None, 0);
        // The first throttle comes from slow start: only a lower bound.
        twenty_then_refused(&mut aimd, 10 * S);
        assert_eq!(aimd.state().phase, "probing");
        // The second one confirms the estimate.
        twenty_then_refused(&mut aimd, 20 * S);
        assert_eq!(aimd.state().phase, "avoidance");
        let (cut, limit) = (aimd.rate(), aimd.state().estimated_limit.unwrap());
        // A cycle of max(10 s, 200 / L) climbs (1 - β)·L.
        aimd.on_response(20 * S, 25 * S, false);
        let cycle = (200.0 / limit).max(10.0);
        let expected = cut + 0.05 * limit * 5.0 / cycle;
        assert!(
            (aimd.rate() - expected).abs() < 1e-9,
            "{} vs {expected}",
            aimd.rate()
        );
        aimd.on_response(20 * S, 35 * S, false);
        assert_eq!(aimd.state().phase, "probing");
    }

    #[test]
    fn never_above_the_ceiling_or_below_the_floor() {
        let mut aimd = Aimd::new(1.0, Some(3.0), 0);
        for second in 1..=10 {
            aimd.on_response(second * S, second * S, false);
        }
        assert_eq!(aimd.rate(), 3.0);
        for _ in 0..100 {
            aimd.on_response(0, 100 * S, true);
        }
        assert!(aimd.rate() >= MIN_RATE);
    }
}
