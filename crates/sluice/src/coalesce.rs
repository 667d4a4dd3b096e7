//! Single-flight and the turn's read cache: identical reads in one turn send one request.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hashbrown::{Equivalent, HashMap};
use parking_lot::Mutex;
use tokio::sync::OnceCell;
use tokio::time::Instant;

use crate::call::Completion;
use crate::hash::BuildFastHasher;
use crate::limiter::{Micros, micros};
use crate::scope::ScopeRef;

/// A read's identity within a turn: (tool, canonical payload key).
pub(crate) type FlightKey = (Arc<str>, String);

/// A [`FlightKey`] borrowed from its call: what a look-up asks with, so a
/// read its turn has answered clones nothing to find the answer.
#[derive(Debug, Clone, Copy, Hash)]
pub(crate) struct FlightRef<'a>(pub(crate) &'a str, pub(crate) &'a str);

impl Equivalent<FlightKey> for FlightRef<'_> {
    fn equivalent(&self, key: &FlightKey) -> bool {
        *key.0 == *self.0 && *key.1 == *self.1
    }
}

/// What a flight answers: the completion, and the scope its outcome is
/// counted on (the credential's own, when the call got that far), so that
/// the calls it answers count theirs without a look-up.
pub(crate) type Answer = (Completion, Option<ScopeRef>);

/// One reading of the clock: as an instant (for the work's waits) and in
/// engine microseconds (for the cache's age).
pub(crate) type Reading = (Instant, Micros);

/// Flights stop being swept for staleness below this many entries.
const SWEEP_ABOVE: usize = 256;

/// One read: in flight until its cell is set, then cached for the TTL.
#[derive(Debug, Default)]
struct Flight {
    /// The answer, and when it came.
    result: OnceCell<(Answer, Micros)>,
}

impl Flight {
    /// Still worth joining: in flight, or answered `ok` within the TTL.
    fn is_live(&self, now: Micros, ttl: Micros) -> bool {
        match self.result.get() {
            None => true,
            Some(((completion, _), at)) => {
                completion.outcome.is_ok() && now.saturating_sub(*at) <= ttl
            }
        }
    }
}

/// The flights of one turn.
#[derive(Debug)]
pub(crate) struct Flights {
    table: Mutex<Table>,
    ttl: Micros,
}

#[derive(Debug)]
struct Table {
    flights: HashMap<FlightKey, Arc<Flight>, BuildFastHasher>,
    /// When stale flights were last dropped (the first read's time until
    /// then: a turn made for one write never reads the clock for it).
    swept: Option<Micros>,
}

impl Flights {
    pub(crate) fn new(ttl: Duration) -> Self {
        Flights {
            table: Mutex::new(Table {
                flights: HashMap::default(),
                swept: None,
            }),
            ttl: micros(ttl),
        }
    }

    /// The answer to `key` if this turn has one `ok` within the TTL at
    /// `now`, without waiting: what [`Flights::run`] would reuse, found
    /// before a call builds the future and the deadline timer it needs to
    /// join or lead a flight.
    pub(crate) fn answered(&self, key: FlightRef<'_>, now: Micros) -> Option<Answer> {
        let mut table = self.table.lock();
        table.sweep(now, self.ttl);
        let flight = table.flights.get(&key)?;
        let (answer, _) = flight
            .result
            .get()
            .filter(|_| flight.is_live(now, self.ttl))?;
        let (mut completion, scope) = answer.clone();
        completion.coalesced = true;
        Some((completion, scope))
    }

    /// Runs `work` for `key` unless an identical read is in flight (join it)
    /// or answered `ok` within the TTL (reuse it), at `now` (the call's
    /// reading of the clock). If the call running the work is cancelled, a
    /// joined call takes over and runs its own. `work` is given the reading
    /// it starts at: `now` for a new flight, a new one from `clock` for a
    /// call that waited on another's; `clock` also reads when the answer
    /// came.
    pub(crate) async fn run<F, Fut>(
        &self,
        key: FlightKey,
        now: Reading,
        clock: impl Fn() -> Reading,
        work: F,
    ) -> Answer
    where
        F: FnOnce(Reading) -> Fut,
        Fut: Future<Output = Answer>,
    {
        let flight = {
            let mut table = self.table.lock();
            table.sweep(now.1, self.ttl);
            let flights = &mut table.flights;
            match flights.get(&key) {
                Some(flight) if flight.is_live(now.1, self.ttl) => (flight.clone(), false),
                _ => {
                    let flight = Arc::new(Flight::default());
                    flights.insert(key, flight.clone());
                    (flight, true)
                }
            }
        };
        let (flight, created) = flight;
        let mut led = false;
        let (answer, _) = flight
            .result
            .get_or_init(|| {
                led = true;
                // A flight this call created starts at once; one it takes
                // over from a cancelled call has waited for it.
                let at = if created { now } else { clock() };
                async move {
                    let answer = work(at).await;
                    (answer, clock().1)
                }
            })
            .await;
        let (mut completion, scope) = answer.clone();
        completion.coalesced = !led;
        (completion, scope)
    }
}

impl Table {
    /// Drops stale flights when there are many, and also once per TTL
    /// however few: a turn used for a long time (one `turn_id` for a whole
    /// session) would otherwise keep up to SWEEP_ABOVE stale answers, whole
    /// responses included, forever; found by the sidecar soak
    /// (crates/sluice-testkit/src/soak.rs).
    fn sweep(&mut self, now: Micros, ttl: Micros) {
        let swept = *self.swept.get_or_insert(now);
        if self.flights.len() > SWEEP_ABOVE || now.saturating_sub(swept) >= ttl {
            self.flights.retain(|_, flight| flight.is_live(now, ttl));
            self.swept = Some(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use futures_util::FutureExt;

    use super::*;
    use crate::outcome::Outcome;
    use crate::scope::Scope;

    fn ok() -> Answer {
        let completion = Outcome::Ok {
            http_status: 200,
            body: serde_json::Value::Null.into(),
        }
        .into();
        (completion, None)
    }

    /// A clock for the tests, as the engine reads it: an instant and the
    /// microseconds since `origin`.
    fn clock(origin: Instant) -> impl Fn() -> Reading {
        move || {
            let at = Instant::now();
            (at, micros(at - origin))
        }
    }

    fn len(flights: &Flights) -> usize {
        flights.table.lock().flights.len()
    }

    /// Regression (issue 10's soak): a turn used for a long time kept up to
    /// `SWEEP_ABOVE` stale answers, whole responses included, for good.
    #[tokio::test(start_paused = true)]
    async fn stale_answers_are_dropped_once_a_ttl_has_passed_however_few() {
        let flights = Flights::new(Duration::from_secs(1));
        let clock = clock(Instant::now());
        for i in 0..10 {
            let key = (Arc::from("t"), format!("k{i}"));
            flights.run(key, clock(), &clock, |_| async { ok() }).await;
        }
        assert_eq!(len(&flights), 10, "answers are cached for the TTL");
        tokio::time::advance(Duration::from_millis(1_500)).await;
        let fresh = (Arc::from("t"), "fresh".to_owned());
        flights
            .run(fresh, clock(), &clock, |_| async { ok() })
            .await;
        assert_eq!(len(&flights), 1, "the stale ones are gone");
    }

    /// A call that joins a flight and takes it over when its leader is
    /// cancelled has waited: its work starts at a new reading of the clock,
    /// not at its entry (its reservation would be charged in the past).
    #[tokio::test(start_paused = true)]
    async fn a_call_taking_over_a_cancelled_flight_starts_at_a_new_reading() {
        let flights = Flights::new(Duration::from_secs(60));
        let key = || (Arc::from("t"), "k".to_owned());
        let clock = clock(Instant::now());
        let entry = clock();
        let mut leader = Box::pin(flights.run(key(), entry, &clock, |at| {
            assert_eq!(at, entry, "a new flight starts at its call's reading");
            std::future::pending()
        }));
        let mut joiner = Box::pin(flights.run(key(), entry, &clock, |at| async move {
            assert_eq!(at.0 - entry.0, Duration::from_secs(1));
            assert_eq!(at.1 - entry.1, 1_000_000);
            ok()
        }));
        assert!((&mut leader).now_or_never().is_none());
        assert!((&mut joiner).now_or_never().is_none());
        tokio::time::advance(Duration::from_secs(1)).await;
        drop(leader);
        let (completion, _) = joiner.await;
        assert!(completion.outcome.is_ok() && !completion.coalesced);
    }

    /// `answered` gives what `run` would reuse, and nothing else: not a
    /// flight still in the air, not an error, not an answer past the TTL;
    /// and the scope the leader's outcome was counted on comes with it.
    #[tokio::test(start_paused = true)]
    async fn answered_is_only_an_ok_answer_within_the_ttl() {
        let flights = Flights::new(Duration::from_secs(1));
        let key = |k: &str| (Arc::from("t"), k.to_owned());
        let clock = clock(Instant::now());
        let mut pending =
            Box::pin(flights.run(key("air"), clock(), &clock, |_| std::future::pending()));
        assert!((&mut pending).now_or_never().is_none());
        assert!(flights.answered(FlightRef("t", "air"), clock().1).is_none());
        flights
            .run(key("bad"), clock(), &clock, |_| async {
                (Outcome::error(None, "boom").into(), None)
            })
            .await;
        assert!(flights.answered(FlightRef("t", "bad"), clock().1).is_none());
        assert!(
            flights
                .answered(FlightRef("t", "never"), clock().1)
                .is_none()
        );
        let limits = crate::config::CredentialConfig::with_rate("1/1s".parse().unwrap())
            .resolve("k", &crate::config::Defaults::default())
            .unwrap();
        let scope = ScopeRef::new(Scope::primary(
            Arc::from("k"),
            Arc::from("api_key"),
            &limits,
            0,
        ));
        let (led, _) = flights
            .run(key("ok"), clock(), &clock, |_| async {
                (ok().0, Some(scope.clone()))
            })
            .await;
        assert!(!led.coalesced);
        let (cached, counted_on) = flights.answered(FlightRef("t", "ok"), clock().1).unwrap();
        assert!(cached.outcome.is_ok() && cached.coalesced);
        assert!(counted_on.is_some_and(|counted_on| ScopeRef::ptr_eq(&counted_on, &scope)));
        tokio::time::advance(Duration::from_millis(1_001)).await;
        assert!(flights.answered(FlightRef("t", "ok"), clock().1).is_none());
    }
}
