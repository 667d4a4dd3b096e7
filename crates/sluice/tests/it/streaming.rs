//! A response whose body still streams when its head comes back
//! ([`sluice::BodyStream`]): the call's concurrency permit and in-flight
//! count are held until the body's reader is done, so `max_in_flight`
//! counts streams, not heads (invariant 2 with streamed bodies).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use sluice::{
    BodyStream, Call, Completion, CredentialConfig, Executor, Gate, GateConfig, Payload, Reply,
    Request, Route, ToolConfig, TransportError,
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

/// Answers every request at once with a head whose body is still
/// arriving (`data: 1`, then `data: 2`), and records when each request
/// started.
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

    fn answer(&self) -> Result<Reply, TransportError> {
        let origin = *self.origin.lock().unwrap().get_or_insert_with(Instant::now);
        self.starts.lock().unwrap().push(origin.elapsed());
        let rest = Full::new(Bytes::from_static(b"data: 2\n"));
        Ok(Reply::streaming(
            http::Response::new(()),
            BodyStream::new(Bytes::from_static(b"data: 1\n"), rest),
        ))
    }
}

impl Executor for Streamer {
    type Payload = Once;

    async fn execute(&self, _request: Request<Once>) -> Result<Reply, TransportError> {
        self.answer()
    }
}

#[derive(Clone, Default)]
struct SameStreamer(Streamer);

impl Executor for SameStreamer {
    type Payload = Same;

    async fn execute(&self, _request: Request<Same>) -> Result<Reply, TransportError> {
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

/// The completion's streamed body, taken by its one reader.
fn body(completion: &Completion) -> BodyStream {
    completion
        .stream
        .as_ref()
        .expect("the completion carries the body")
        .take()
        .expect("nobody took the body before")
}

/// A gate on [`config`] over `upstream`, and its first call, answered in
/// a turn of its own.
async fn first_stream(upstream: &Streamer) -> (Gate<Streamer>, Completion) {
    let gate = Gate::builder(config(), upstream.clone())
        .seed(1)
        .build()
        .unwrap();
    let first = gate
        .turn()
        .complete(Call::routed("stream", route(), Once))
        .await;
    (gate, first)
}

#[tokio::test(start_paused = true)]
async fn a_streaming_body_keeps_its_permit_until_its_reader_is_done() {
    let upstream = Streamer::default();
    let (gate, first) = first_stream(&upstream).await;
    assert!(first.outcome.is_ok(), "{:?}", first.outcome);
    let hold = body(&first);
    assert!(
        first.stream.as_ref().unwrap().take().is_none(),
        "taken once"
    );
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
    let second_body = body(&second);
    assert_eq!(in_flight(&gate), 1, "the second call's body holds in turn");
    // The second call's hold goes with its body: nothing is left in flight.
    drop(second_body);
    assert_eq!(in_flight(&gate), 0);
    assert_eq!(gate.status()[0].peak_in_flight, 1);
}

#[tokio::test(start_paused = true)]
async fn a_body_nobody_takes_releases_the_permit_with_the_completion() {
    let upstream = Streamer::default();
    let (gate, first) = first_stream(&upstream).await;
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
    let shared = body(&first);
    assert_eq!(in_flight(&gate), 0, "a shareable read keeps no permit");
    drop(shared);
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
    let hold = body(&first);
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

/// A body read to its end gives the permit back then, before its reader
/// drops it (a server may keep a finished body a while).
#[tokio::test(start_paused = true)]
async fn a_body_read_to_its_end_gives_the_permit_back_at_once() {
    let upstream = Streamer::default();
    let (gate, first) = first_stream(&upstream).await;
    let mut stream = body(&first);
    let mut read = Vec::new();
    while let Some(frame) = stream.frame().await {
        assert_eq!(in_flight(&gate), 1, "in flight until the body ends");
        read.extend_from_slice(&frame.unwrap().into_data().unwrap());
    }
    assert_eq!(read, b"data: 1\ndata: 2\n");
    assert_eq!(
        in_flight(&gate),
        0,
        "given back at the end, the body still held"
    );
    drop(stream);
    assert_eq!(in_flight(&gate), 0);
}
