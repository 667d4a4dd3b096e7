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
    flights: Mutex<HashMap<FlightKey, Arc<Flight>>>,
    ttl: Duration,
}

impl Flights {
    pub(crate) fn new(ttl: Duration) -> Self {
        Flights {
            flights: Mutex::new(HashMap::new()),
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
            let mut flights = self
                .flights
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            if flights.len() > SWEEP_ABOVE {
                flights.retain(|_, flight| flight.is_live(now, self.ttl));
            }
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
