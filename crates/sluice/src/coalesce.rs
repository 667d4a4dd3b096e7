//! Single-flight and the turn's read cache: identical reads in one turn send one request.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::OnceCell;
use tokio::time::Instant;

use crate::call::Completion;

/// A read's identity within a turn: (tool, canonical payload key).
pub(crate) type FlightKey = (Arc<str>, String);

/// Flights stop being swept for staleness below this many entries.
const SWEEP_ABOVE: usize = 256;

/// One read: in flight until its cell is set, then cached for the TTL.
#[derive(Debug, Default)]
struct Flight {
    result: OnceCell<(Completion, Instant)>,
}

impl Flight {
    /// Still worth joining: in flight, or answered `ok` within the TTL.
    fn is_live(&self, now: Instant, ttl: Duration) -> bool {
        match self.result.get() {
            None => true,
            Some((completion, at)) => {
                completion.outcome.is_ok() && now.saturating_duration_since(*at) <= ttl
            }
        }
    }
}

/// The flights of one turn.
#[derive(Debug)]
pub(crate) struct Flights {
    table: Mutex<Table>,
    ttl: Duration,
}

#[derive(Debug)]
struct Table {
    flights: HashMap<FlightKey, Arc<Flight>>,
    /// When stale flights were last dropped.
    swept: Instant,
}

impl Flights {
    pub(crate) fn new(ttl: Duration) -> Self {
        Flights {
            table: Mutex::new(Table {
                flights: HashMap::new(),
                swept: Instant::now(),
            }),
            ttl,
        }
    }

    /// Runs `work` for `key` unless an identical read is in flight (join it)
    /// or answered `ok` within the TTL (reuse it). If the call running the
    /// work is cancelled, a joined call takes over and runs its own.
    pub(crate) async fn run<F, Fut>(&self, key: FlightKey, work: F) -> Completion
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Completion>,
    {
        let now = Instant::now();
        let flight = {
            let mut table = self
                .table
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            // Also once per TTL, however few: a turn used for a long time
            // (one `turn_id` for a whole session) would otherwise keep up to
            // SWEEP_ABOVE stale answers, whole responses included, forever;
            // found by the sidecar soak (crates/sluice-testkit/src/soak.rs).
            if table.flights.len() > SWEEP_ABOVE
                || now.saturating_duration_since(table.swept) >= self.ttl
            {
                table
                    .flights
                    .retain(|_, flight| flight.is_live(now, self.ttl));
                table.swept = now;
            }
            let flights = &mut table.flights;
            match flights.get(&key) {
                Some(flight) if flight.is_live(now, self.ttl) => flight.clone(),
                _ => {
                    let flight = Arc::new(Flight::default());
                    flights.insert(key, flight.clone());
                    flight
                }
            }
        };
        let mut led = false;
        let (completion, _) = flight
            .result
            .get_or_init(|| {
                led = true;
                async { (work().await, Instant::now()) }
            })
            .await;
        let mut completion = completion.clone();
        completion.shared = !led;
        completion
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::Outcome;

    fn ok() -> Completion {
        Outcome::Ok {
            http_status: 200,
            body: serde_json::Value::Null,
        }
        .into()
    }

    fn len(flights: &Flights) -> usize {
        flights.table.lock().map(|t| t.flights.len()).unwrap_or(0)
    }

    /// Regression (issue 10's soak): a turn used for a long time kept up to
    /// `SWEEP_ABOVE` stale answers, whole responses included, for good.
    #[tokio::test(start_paused = true)]
    async fn stale_answers_are_dropped_once_a_ttl_has_passed_however_few() {
        let flights = Flights::new(Duration::from_secs(1));
        for i in 0..10 {
            let key = (Arc::from("t"), format!("k{i}"));
            flights.run(key, || async { ok() }).await;
        }
        assert_eq!(len(&flights), 10, "answers are cached for the TTL");
        tokio::time::advance(Duration::from_millis(1_500)).await;
        flights
            .run((Arc::from("t"), "fresh".to_owned()), || async { ok() })
            .await;
        assert_eq!(len(&flights), 1, "the stale ones are gone");
    }
}
