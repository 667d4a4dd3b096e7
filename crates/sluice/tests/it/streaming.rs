//! A response whose body still streams when its head comes back
//! ([`sluice::Streaming`]): the call's concurrency permit and in-flight
//! count are held until the body's reader is done, so `max_in_flight`
//! counts streams, not heads (invariant 2 with streamed bodies).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use sluice::{
    Call, CredentialConfig, Executor, Gate, GateConfig, Payload, Request, Route, Streaming,
    ToolConfig, TransportError,
};
use tokio::time::Instant;

/// A payload that never coalesces, like a proxied request answered to one client.
#[derive(Debug)]
struct Once;

impl Payload for Once {
    fn coalesce_key(&self) -> Option<String> {
        None
    }
}

/// A payload every copy of which is the same read.
#[derive(Debug)]
struct Same;

impl Payload for Same {
    fn coalesce_key(&self) -> Option<String> {
        Some("same".to_owned())
    }
}

/// Answers every request at once with a head marked as still streaming,
/// and records when each request started.
#[derive(Clone, Default)]
struct Streamer {
    starts: Arc<Mutex<Vec<Duration>>>,
    origin: Arc<Mutex<Option<Instant>>>,
}

impl Streamer {
    fn starts_ms(&self) -> Vec<u128> {
        self.starts
            .lock()
            .unwrap()
            .iter()
            .map(Duration::as_millis)
            .collect()
    }

    fn answer(&self) -> Result<http::Response<Bytes>, TransportError> {
        let origin = *self.origin.lock().unwrap().get_or_insert_with(Instant::now);
        self.starts.lock().unwrap().push(origin.elapsed());
        let mut response = http::Response::new(Bytes::new());
        response.extensions_mut().insert(Streaming::new());
        Ok(response)
    }
}

impl Executor for Streamer {
    type Payload = Once;

    async fn execute(
        &self,
        _request: Request<Once>,
    ) -> Result<http::Response<Bytes>, TransportError> {
        self.answer()
    }
}

#[derive(Clone, Default)]
struct SameStreamer(Streamer);

impl Executor for SameStreamer {
    type Payload = Same;

    async fn execute(
        &self,
        _request: Request<Same>,
    ) -> Result<http::Response<Bytes>, TransportError> {
        self.0.answer()
    }
}

fn config() -> GateConfig {
    let credential = CredentialConfig::with_rate("1000/1s".parse().unwrap())
        .max_in_flight(1)
        .queue(10);
    GateConfig::default()
        .credential("api", credential)
        .tool("read", ToolConfig::read("api"))
}

fn route() -> Route {
    Route {
        credential: "api".to_owned(),
        read: true,
        idempotent: true,
        deadline: Some(Duration::from_secs(10)),
    }
}

fn in_flight<E: Executor>(gate: &Gate<E>) -> usize {
    gate.status()[0].in_flight
}

#[tokio::test(start_paused = true)]
async fn a_streaming_body_keeps_its_permit_until_its_reader_is_done() {
    let upstream = Streamer::default();
    let gate = Gate::builder(config(), upstream.clone())
        .seed(1)
        .build()
        .unwrap();
    let first = gate
        .turn()
        .complete(Call::routed("stream", route(), Once))
        .await;
    assert!(first.outcome.is_ok(), "{:?}", first.outcome);
    let response = first.response.clone().unwrap();
    let hold = response
        .extensions()
        .get::<Streaming>()
        .unwrap()
        .hold()
        .expect("the gate parked the call's permit");
    assert_eq!(in_flight(&gate), 1, "the stream is still in flight");

    // max_in_flight = 1: the next call waits for the first body to end.
    // It runs in a turn of its own (`Gate::complete`, as the sidecar's
    // proxy sends a request that names no turn): its response is kept too.
    let second = {
        let gate = gate.clone();
        tokio::spawn(async move { gate.complete(Call::routed("stream", route(), Once)).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(upstream.starts_ms(), [0], "the second request waited");
    drop(hold);
    let second = second.await.unwrap();
    assert!(second.outcome.is_ok(), "{:?}", second.outcome);
    assert_eq!(upstream.starts_ms(), [0, 500]);
    assert!(
        second
            .response
            .unwrap()
            .extensions()
            .get::<Streaming>()
            .unwrap()
            .hold()
            .is_some(),
        "the second call's permit is parked in turn"
    );
    // The second call's hold was dropped with its response: nothing is left in flight.
    assert_eq!(in_flight(&gate), 0);
    assert_eq!(gate.status()[0].peak_in_flight, 1);
}

#[tokio::test(start_paused = true)]
async fn a_marker_nobody_takes_releases_the_permit_with_the_response() {
    let upstream = Streamer::default();
    let gate = Gate::builder(config(), upstream.clone())
        .seed(1)
        .build()
        .unwrap();
    let first = gate
        .turn()
        .complete(Call::routed("stream", route(), Once))
        .await;
    assert_eq!(in_flight(&gate), 1);
    drop(first);
    assert_eq!(in_flight(&gate), 0);
    let second = gate
        .turn()
        .complete(Call::routed("stream", route(), Once))
        .await;
    assert!(second.outcome.is_ok());
    assert_eq!(
        upstream.starts_ms(),
        [0, 0],
        "no wait: the permit came back"
    );
}

#[tokio::test(start_paused = true)]
async fn a_read_others_may_share_is_never_held() {
    let upstream = SameStreamer::default();
    let gate = Gate::builder(config(), upstream.clone())
        .seed(1)
        .build()
        .unwrap();
    let turn = gate.turn();
    let first = turn.complete(Call::routed("stream", route(), Same)).await;
    let marker = first
        .response
        .as_ref()
        .unwrap()
        .extensions()
        .get::<Streaming>()
        .unwrap();
    assert!(marker.hold().is_none(), "a shareable read keeps no permit");
    assert_eq!(in_flight(&gate), 0);
    // The cached answer holds nothing either, and a fresh turn's call goes at once.
    let again = gate
        .turn()
        .complete(Call::routed("stream", route(), Same))
        .await;
    assert!(again.outcome.is_ok());
    assert_eq!(upstream.0.starts_ms(), [0, 0]);
}

/// Issue 14: a routed call in a limit group holds the group's permit too
/// while its body streams, so the group's `max_in_flight` counts streams.
#[tokio::test(start_paused = true)]
async fn a_streaming_body_keeps_its_groups_permit_too() {
    let upstream = Streamer::default();
    let credential = CredentialConfig::with_rate("1000/1s".parse().unwrap())
        .max_in_flight(10)
        .group(
            "search",
            sluice::GroupConfig::with_rate("1000/1s".parse().unwrap()).max_in_flight(1),
        );
    let config = GateConfig::default().credential("api", credential);
    let gate = Gate::builder(config, upstream.clone())
        .seed(1)
        .build()
        .unwrap();
    let spend = sluice::Spend {
        group: Some("search".to_owned()),
        ..sluice::Spend::default()
    };
    let call = || Call::routed("stream", route(), Once).spend(spend.clone());
    let first = gate.turn().complete(call()).await;
    assert!(first.outcome.is_ok(), "{:?}", first.outcome);
    let hold = first
        .response
        .clone()
        .unwrap()
        .extensions()
        .get::<Streaming>()
        .unwrap()
        .hold()
        .expect("the gate parked the call's permits");
    let group = || {
        gate.status()
            .into_iter()
            .find(|s| s.scope == "search")
            .unwrap()
    };
    assert_eq!(group().in_flight, 1, "the stream is in flight on the group");
    let second = {
        let (gate, call) = (gate.clone(), call());
        tokio::spawn(async move { gate.turn().complete(call).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(upstream.starts_ms().len(), 1, "the group's permit is held");
    drop(hold);
    assert!(second.await.unwrap().outcome.is_ok());
    assert_eq!(upstream.starts_ms(), [0, 500]);
}
