//! Where a time on the Redis server's clock falls on this process's own.
//!
//! A script charges a start at its `now` (the server's `TIME`) plus a wait.
//! That start must happen here at the same moment, give or take the
//! request's `late_start`, or two windows' starts can fall within one: the
//! log allowed N in any window of *charged* times, and the real starts are
//! the charged ones shifted by however late each came. Taking the answer's
//! arrival as the script's `now` shifts each start by its answer's return
//! trip, which on two loaded cores ranged from under a millisecond to
//! hundreds (docs/shared-limiter.md, "Exactness under load"), so slots of a
//! slow answer started late beside slots of a fast one.
//!
//! Instead the server's clock is placed on ours from the answers
//! themselves: the script ran somewhere between sending and receiving, so
//! each answer puts the server's `now` at the midpoint, within half its
//! round trip. The tightest recent answer sets the offset (its uncertainty
//! grows with its age, so a drifting or stepped clock is followed), and
//! every answer's `now` is then placed by that offset, clamped into its own
//! `[sent, received]`: never worse than the arrival time was.

use std::time::Duration;

use parking_lot::Mutex;
use sluice::limiter::Micros;
use tokio::time::Instant;

use crate::instant::{after, since};

/// How fast an offset's uncertainty grows with its age: far above any real
/// drift between two clocks (tens of ppm), so that a sample a few seconds
/// old gives way to any fresh one of ordinary round trip, and a stepped
/// server clock is followed within seconds.
const AGING_PER_SECOND: Duration = Duration::from_millis(1);

/// One answer's placing of the server's clock.
#[derive(Debug, Clone, Copy)]
struct Sample {
    /// The server's time (µs) ...
    server: Micros,
    /// ... at this local instant (the midpoint of sending and receiving).
    local: Instant,
    /// Half the round trip: how far off `local` may be.
    half: Duration,
}

impl Sample {
    /// The sample's uncertainty at `now`: half its round trip, plus aging.
    fn uncertainty(&self, now: Instant) -> Duration {
        let age = since(now, self.local).as_secs_f64();
        self.half + AGING_PER_SECOND.mul_f64(age)
    }

    /// Where server time `server` falls locally by this sample.
    fn place(&self, server: Micros) -> Instant {
        if server >= self.server {
            after(self.local, Duration::from_micros(server - self.server))
        } else {
            let back = Duration::from_micros(self.server - server);
            self.local.checked_sub(back).unwrap_or(self.local)
        }
    }
}

/// One Redis server's clock as seen from this process (a credential's
/// keys all live on one node, so each credential keeps its own).
#[derive(Debug, Default)]
pub(crate) struct ServerClock {
    best: Mutex<Option<Sample>>,
}

impl ServerClock {
    /// An answer sent at `sent` and received at `received` says the
    /// server's time was `server` (µs) when its script ran: learns from it,
    /// and returns that moment on this process's clock.
    pub(crate) fn place(&self, sent: Instant, server: Micros, received: Instant) -> Instant {
        let rtt = since(received, sent);
        let sample = Sample {
            server,
            local: after(sent, rtt / 2),
            half: rtt / 2,
        };
        let placed = {
            let mut best = self.best.lock();
            let keep = best.filter(|best| best.uncertainty(received) < sample.half);
            let chosen = keep.unwrap_or(sample);
            *best = Some(chosen);
            chosen.place(server)
        };
        // The script ran between sending and receiving, whatever the
        // offset says (a clock stepped since it was learned).
        placed.clamp(sent, received)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_slow_answer_is_placed_by_the_offset_a_fast_one_learned() {
        let clock = ServerClock::default();
        let t0 = Instant::now();
        // A fast answer: the server read 1_000_000 µs half a ms after t0.
        let placed = clock.place(t0, 1_000_000, t0 + MS);
        assert_eq!(placed, t0 + MS / 2);
        // A slow one: the script ran 10 ms after t0 (server 1_009_500),
        // and the answer took 300 ms to come back.
        let sent = t0 + 9 * MS;
        let placed = clock.place(sent, 1_009_500, sent + 301 * MS);
        assert_eq!(placed, t0 + 10 * MS);
    }

    #[test]
    fn a_placing_never_leaves_the_answers_own_round_trip() {
        let clock = ServerClock::default();
        let t0 = Instant::now();
        clock.place(t0, 1_000_000, t0 + MS);
        // The server's clock stepped back a second: the old offset would
        // put this answer's script before it was sent.
        let sent = t0 + 20 * MS;
        let placed = clock.place(sent, 20_000, sent + 2 * MS);
        assert_eq!(placed, sent);
    }

    #[test]
    fn an_old_offset_gives_way_to_a_fresh_answer() {
        let clock = ServerClock::default();
        let t0 = Instant::now();
        clock.place(t0, 1_000_000, t0 + MS);
        // Ten seconds on (10 ms of aging), the server's clock has moved 5
        // ms against ours; an answer of 4 ms round trip (2 ms off at most)
        // now sets the offset.
        let sent = t0 + Duration::from_secs(10);
        let placed = clock.place(sent, 11_005_000, sent + 4 * MS);
        assert_eq!(placed, sent + 2 * MS);
    }
}
