//! Instant arithmetic that never panics: a wait too long for an `Instant` stands for "far off".

use std::time::Duration;

use tokio::time::Instant;

/// Far enough to stand for "no limit" without overflowing an `Instant`.
const FAR: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// `instant + wait`, or as far ahead as an `Instant` goes when that overflows.
pub(crate) fn after(instant: Instant, wait: Duration) -> Instant {
    instant
        .checked_add(wait)
        .or_else(|| instant.checked_add(FAR))
        .unwrap_or(instant)
}

/// `later - earlier`, zero when `later` is not later.
pub(crate) fn since(later: Instant, earlier: Instant) -> Duration {
    later.saturating_duration_since(earlier)
}

/// Whether a start at `at` lies past `latest` and is not yet due at `now`.
/// A caller reads its `latest` before asking Redis; a start Redis made for
/// "now" comes back a moment past it (the round trip), and a start due by
/// the time the answer came is no wait, whatever `latest` said.
pub(crate) fn beyond(at: Instant, latest: Instant, now: Instant) -> bool {
    at > latest && at > now
}
