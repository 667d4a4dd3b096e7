//! The metric handles every request's events touch, found by the events'
//! own names on the event's thread.
//!
//! An event costs one look-up of borrowed strings, not label strings built,
//! hashed and looked up in each family (issue 18: seven allocations and
//! three SipHash look-ups a request). A miss makes the family's handle once
//! and keeps it. Label values are bounded (credentials and tools come from
//! the configuration), so the caches are too.

use hashbrown::{Equivalent, HashMap};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::Histogram;

type FastState = foldhash::fast::RandomState;

/// A call's labels, owned: credential, tool, outcome status, reason.
type CallKey = (Box<str>, Box<str>, &'static str, &'static str);

/// An upstream answer's labels, owned: credential, status (none: no answer).
type UpstreamKey = (Box<str>, Option<u16>);

/// One thread's handles.
#[derive(Default)]
pub(super) struct Handles {
    calls: HashMap<CallKey, Counter, FastState>,
    upstream: HashMap<UpstreamKey, Counter, FastState>,
    latency: HashMap<Box<str>, Histogram, FastState>,
}

/// A call's labels, borrowed from its event. Hashes as a [`CallKey`] does:
/// field by field, each a `str`.
#[derive(Hash)]
struct CallRef<'a>(&'a str, &'a str, &'a str, &'a str);

impl Equivalent<CallKey> for CallRef<'_> {
    fn equivalent(&self, key: &CallKey) -> bool {
        *key.0 == *self.0 && *key.1 == *self.1 && key.2 == self.2 && key.3 == self.3
    }
}

/// An upstream answer's labels, borrowed; hashes as an [`UpstreamKey`].
#[derive(Hash)]
struct UpstreamRef<'a>(&'a str, Option<u16>);

impl Equivalent<UpstreamKey> for UpstreamRef<'_> {
    fn equivalent(&self, key: &UpstreamKey) -> bool {
        *key.0 == *self.0 && key.1 == self.1
    }
}

impl Handles {
    /// Counts a call of `tool` on `credential` that ended in `(status,
    /// reason)`; `made` makes its counter on the first.
    pub(super) fn count_call(
        &mut self,
        (credential, tool): (&str, &str),
        (status, reason): (&'static str, &'static str),
        made: impl FnOnce() -> Counter,
    ) {
        let found = CallRef(credential, tool, status, reason);
        let key = || (Box::from(credential), Box::from(tool), status, reason);
        act_on(&mut self.calls, &found, key, made, |counter| {
            counter.inc();
        });
    }

    /// Counts one of `credential`'s upstream answers with `status`.
    pub(super) fn count_upstream(
        &mut self,
        credential: &str,
        status: Option<u16>,
        made: impl FnOnce() -> Counter,
    ) {
        let found = UpstreamRef(credential, status);
        let key = || (Box::from(credential), status);
        act_on(&mut self.upstream, &found, key, made, |counter| {
            counter.inc();
        });
    }

    /// Observes one of `credential`'s upstream latencies.
    pub(super) fn observe_latency(
        &mut self,
        credential: &str,
        seconds: f64,
        made: impl FnOnce() -> Histogram,
    ) {
        let key = || Box::from(credential);
        act_on(&mut self.latency, credential, key, made, |histogram| {
            histogram.observe(seconds);
        });
    }

    /// How many handles of each kind this thread keeps (the tests').
    #[cfg(test)]
    pub(super) fn len(&self) -> (usize, usize, usize) {
        (self.calls.len(), self.upstream.len(), self.latency.len())
    }
}

/// `act` on the handle `found` names, made (by `made`, kept under `key()`)
/// if this is its first event: one look-up on a hit.
fn act_on<K, Q, V>(
    map: &mut HashMap<K, V, FastState>,
    found: &Q,
    key: impl FnOnce() -> K,
    made: impl FnOnce() -> V,
    act: impl FnOnce(&V),
) where
    K: std::hash::Hash + Eq,
    Q: std::hash::Hash + Equivalent<K> + ?Sized,
{
    match map.get(found) {
        Some(handle) => act(handle),
        None => {
            let handle = made();
            act(&handle);
            map.insert(key(), handle);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use sluice::{Event, Observer, Outcome, Reason};

    use super::super::Metrics;

    /// Issue 18: the counters a request touches are found again by the
    /// event's names, on any thread, and count into the same series as a
    /// first event's labels made: one entry each, whatever the repeats.
    #[test]
    fn repeated_events_count_into_one_series_each() {
        let metrics = std::sync::Arc::new(Metrics::new());
        let observe = |metrics: &Metrics| {
            let ok = Outcome::Ok {
                http_status: 200,
                body: serde_json::Value::Null.into(),
            };
            let shed =
                Outcome::rate_limited("api_key", Reason::Shed, Duration::from_millis(5), Some(1));
            for _ in 0..3 {
                for (tool, outcome) in [("search", &ok), ("search", &shed), ("get", &ok)] {
                    metrics.observe(&Event::Outcome {
                        credential: "support",
                        tool,
                        outcome,
                        coalesced: false,
                        elapsed: Duration::ZERO,
                    });
                }
                for status in [Some(200), None] {
                    metrics.observe(&Event::Request {
                        credential: "support",
                        tool: "search",
                        status,
                        latency: Duration::from_millis(2),
                    });
                }
            }
        };
        observe(&metrics);
        let other = metrics.clone();
        std::thread::spawn(move || observe(&other)).join().unwrap();
        {
            let handles = metrics.handles().borrow();
            assert_eq!(handles.len(), (3, 2, 1));
        }
        let text = metrics.encode(&[], None);
        for line in [
            r#"sluice_calls_total{credential="support",tool="search",outcome="ok",reason=""} 6"#,
            r#"sluice_calls_total{credential="support",tool="search",outcome="rate_limited",reason="shed"} 6"#,
            r#"sluice_calls_total{credential="support",tool="get",outcome="ok",reason=""} 6"#,
            r#"sluice_upstream_requests_total{credential="support",status="200"} 6"#,
            r#"sluice_upstream_requests_total{credential="support",status="error"} 6"#,
            r#"sluice_upstream_latency_seconds_count{credential="support"} 12"#,
        ] {
            assert!(text.contains(line), "{line}\n{text}");
        }
    }
}
