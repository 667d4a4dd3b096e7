//! The penalty subscription: blocks and quotas other processes publish, delivered to this one.
//!
//! The block script publishes `kind|µs from now|credential part|scope part`
//! on `{prefix}:events`. Classic pub/sub is broadcast to every node of a
//! cluster, so one subscription to any node (the seeds are tried one after another)
//! hears every credential. A message lost while the subscription is down is
//! not lost for long: every reservation's reply carries the credential's
//! active holds too.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use sluice::limiter::Micros;
use tokio::time::Instant;

use crate::RedisConfig;
use crate::credential::Credentials;
use crate::holds::Kind;
use crate::redact::RedisUrl;

/// One published hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Event {
    pub(crate) kind: Kind,
    pub(crate) wait: Micros,
    pub(crate) credential: String,
    pub(crate) scope: String,
}

/// Reads a message written by the block script.
pub(crate) fn parse(payload: &str) -> Option<Event> {
    let mut fields = payload.splitn(4, '|');
    let kind = match fields.next()? {
        "blocked" => Kind::Blocked,
        "quota" => Kind::Quota,
        _ => return None,
    };
    Some(Event {
        kind,
        wait: fields.next()?.parse().ok()?,
        credential: fields.next()?.to_owned(),
        scope: fields.next()?.to_owned(),
    })
}

/// Notes `event`, which arrived at `at`, on its credential (if this
/// process uses it).
pub(crate) fn deliver(credentials: &Credentials, event: Event, at: Instant) {
    if let Some(cred) = credentials.by_part(&event.credential) {
        let until = at + Duration::from_micros(event.wait);
        cred.note_hold(event.kind, &event.scope, until, at);
    }
}

/// The subscription for `config`'s servers on `channel`, delivering to
/// `credentials` for as long as they exist.
pub(crate) fn subscribe(
    config: &RedisConfig,
    channel: &str,
    live: Arc<AtomicBool>,
    credentials: Weak<Credentials>,
) -> impl Future<Output = ()> + Send + 'static {
    run(
        config.urls.clone(),
        channel.to_owned(),
        config.connect_timeout,
        live,
        move |event, at| match credentials.upgrade() {
            Some(credentials) => {
                deliver(&credentials, event, at);
                true
            }
            None => false,
        },
    )
}

/// Reconnection backoff for the subscription.
const MIN_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// Subscribes and delivers events to `deliver` (with the instant they
/// arrived) until it returns false; reconnects with backoff; `live` says
/// whether the subscription is up.
pub(crate) async fn run(
    urls: Vec<RedisUrl>,
    channel: String,
    connect_timeout: Duration,
    live: Arc<AtomicBool>,
    deliver: impl Fn(Event, Instant) -> bool + Send + 'static,
) {
    let mut backoff = MIN_BACKOFF;
    let mut next = 0usize;
    loop {
        let Some(url) = urls.get(next % urls.len().max(1)) else {
            return;
        };
        next = next.wrapping_add(1);
        if let Ok(client) = redis::Client::open(url.expose())
            && let Ok(Ok(mut pubsub)) =
                tokio::time::timeout(connect_timeout, client.get_async_pubsub()).await
            && let Ok(Ok(())) =
                tokio::time::timeout(connect_timeout, pubsub.subscribe(&channel)).await
        {
            live.store(true, Ordering::SeqCst);
            backoff = MIN_BACKOFF;
            let mut messages = pubsub.on_message();
            while let Some(message) = messages.next().await {
                let payload = String::from_utf8_lossy(message.get_payload_bytes());
                if let Some(event) = parse(&payload)
                    && !deliver(event, Instant::now())
                {
                    return;
                }
            }
            live.store(false, Ordering::SeqCst);
            tracing::debug!(server = %url, "penalty subscription lost; reconnecting");
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_parse_or_are_ignored() {
        assert_eq!(
            parse("blocked|2000000|openai|api_key"),
            Some(Event {
                kind: Kind::Blocked,
                wait: 2_000_000,
                credential: "openai".into(),
                scope: "api_key".into(),
            })
        );
        assert_eq!(
            parse("quota|5|c|a%7Cb").map(|e| e.scope),
            Some("a%7Cb".into())
        );
        assert_eq!(parse("nonsense"), None);
        assert_eq!(parse("blocked|-1|c|s"), None);
    }
}
