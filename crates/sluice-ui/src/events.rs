//! `GET /v1/events`: the page's live feed, a snapshot every half second as Server-Sent Events.

use std::convert::Infallible;
use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{Stream, StreamExt, stream};
use tokio::time::MissedTickBehavior;

use crate::Snapshot;

/// How often [`events`] sends a snapshot: twice a second, so the page is
/// live at 1 Hz or better even when a tick comes late.
pub const EVENT_PERIOD: Duration = Duration::from_millis(500);

/// Headers for [`events`]' response. Proxies must not buffer it.
pub const EVENTS_HEADERS: [(&str, &str); 3] = [
    ("content-type", "text/event-stream"),
    ("cache-control", "no-store"),
    ("x-accel-buffering", "no"),
];

/// How long a client waits before reconnecting, sent in the first event.
const RETRY_MS: u32 = 1_000;

/// One snapshot as an SSE event: `event: status` and the JSON on one
/// `data:` line (JSON without pretty-printing has no newline).
pub fn encode(snapshot: &Snapshot) -> Bytes {
    // A snapshot is strings, numbers and maps with string keys: it always serializes.
    let json = serde_json::to_string(snapshot).unwrap_or_else(|_| "{}".to_owned());
    Bytes::from(format!("event: status\ndata: {json}\n\n"))
}

/// The SSE stream: a snapshot from `snapshot` at once and then every
/// [`EVENT_PERIOD`], ending when `stop` resolves (the listener is
/// shutting down). A late tick is not made up for with a burst.
pub fn events<F, S>(snapshot: F, stop: S) -> impl Stream<Item = Result<Bytes, Infallible>> + Send
where
    F: FnMut() -> Snapshot + Send + 'static,
    S: Future<Output = ()> + Send + 'static,
{
    let mut ticks = tokio::time::interval(EVENT_PERIOD);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let retry = stream::once(async { Ok(Bytes::from(format!("retry: {RETRY_MS}\n\n"))) });
    let snapshots = stream::unfold((ticks, snapshot), |(mut ticks, mut snapshot)| async move {
        ticks.tick().await;
        let event = encode(&snapshot());
        Some((Ok(event), (ticks, snapshot)))
    });
    retry.chain(snapshots).take_until(Box::pin(stop))
}

#[cfg(test)]
mod tests {
    use sluice::GateConfig;
    use tokio::time::Instant;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_snapshot_at_once_then_every_period_until_stopped() {
        let start = Instant::now();
        let stop = tokio::time::sleep(Duration::from_millis(1_200));
        let stream = events(|| Snapshot::new(&GateConfig::default(), Vec::new()), stop);
        let frames: Vec<(Duration, Bytes)> = stream
            .map(|frame| (start.elapsed(), frame.unwrap()))
            .collect()
            .await;
        assert_eq!(frames[0].1, Bytes::from_static(b"retry: 1000\n\n"));
        let times: Vec<u128> = frames[1..].iter().map(|(t, _)| t.as_millis()).collect();
        assert_eq!(times, [0, 500, 1_000]);
        for (_, frame) in &frames[1..] {
            assert_eq!(
                frame,
                &Bytes::from_static(b"event: status\ndata: {\"credentials\":[]}\n\n")
            );
        }
    }
}
