//! Waits and concurrency limits stated in prose: "Please try again in 6.5s", "too many concurrent requests".
//!
//! Sources: OpenAI's 429 messages ("Please try again in 20ms", "in 1m30s":
//! Go durations); Azure OpenAI ("Please retry after 7 seconds"); Cohere,
//! Mistral and many REST APIs ("retry after N seconds", "try again in N
//! seconds"); concurrency limits as Google ("Too many concurrent requests
//! for this user"), Anthropic ("Number of concurrent connections has
//! exceeded your rate limit") and Cloudflare ("too many concurrent
//! requests") word them. Read only from responses that are not a 2xx, and
//! only counted as a refusal with a refusing status (403, 409, 429, 503,
//! 529) or with words about rate next to them.

use std::time::Duration;

use super::{Body, BodyProfile};
use crate::signal::clock::parse_seconds;
use crate::signal::profiles::go_duration;
use crate::signal::{ResponseClock, Signal};

pub(super) const PROFILE: BodyProfile = BodyProfile {
    name: "words",
    read,
};

/// Phrases a wait follows.
const WAIT_PHRASES: &[&str] = &[
    "try again in ",
    "retry after ",
    "retry in ",
    "try again after ",
    "retry-after: ",
];

/// Phrases of a limit on requests in flight.
const CONCURRENCY_PHRASES: &[&str] = &[
    "too many concurrent",
    "concurrent requests limit",
    "concurrent request limit",
    "concurrency limit",
    "concurrent connections has exceeded",
    "maximum number of concurrent",
];

/// Words that make a stated wait about rate.
const RATE_WORDS: &[&str] = &[
    "rate limit",
    "ratelimit",
    "too many requests",
    "throttl",
    "quota",
    "slow down",
];

/// Units a number may carry, in nanoseconds per unit.
const UNITS: &[(&str, u64)] = &[
    ("milliseconds", 1_000_000),
    ("millisecond", 1_000_000),
    ("ms", 1_000_000),
    ("seconds", 1_000_000_000),
    ("second", 1_000_000_000),
    ("secs", 1_000_000_000),
    ("sec", 1_000_000_000),
    ("s", 1_000_000_000),
    ("minutes", 60_000_000_000),
    ("minute", 60_000_000_000),
    ("mins", 60_000_000_000),
    ("min", 60_000_000_000),
    ("m", 60_000_000_000),
    ("hours", 3_600_000_000_000),
    ("hour", 3_600_000_000_000),
    ("h", 3_600_000_000_000),
];

fn read(body: &Body<'_>, _clock: &ResponseClock, signal: &mut Signal) {
    if body.is_success() {
        return;
    }
    let text = body.text();
    if CONCURRENCY_PHRASES
        .iter()
        .any(|phrase| text.contains(phrase))
    {
        signal.concurrency = true;
        signal.reject_by_body(PROFILE.name);
        return;
    }
    let Some(delay) = stated_wait(text) else {
        return;
    };
    let rejecting =
        matches!(body.status, 429 | 503 | 529) || RATE_WORDS.iter().any(|word| text.contains(word));
    if rejecting {
        signal.reject_by_body(PROFILE.name);
        signal.set_body_wait(delay, "body text");
    }
}

/// The first wait stated after one of [`WAIT_PHRASES`].
pub(crate) fn stated_wait(text: &str) -> Option<Duration> {
    WAIT_PHRASES.iter().find_map(|phrase| {
        let at = text.find(phrase)? + phrase.len();
        duration_at(text.get(at..)?)
    })
}

/// A duration at the start of `text`: a Go duration (`1m30s`, `20ms`), or a
/// number and a unit word (`7 seconds`, `6.5s`). A bare number is seconds,
/// as in `Retry-After`.
fn duration_at(text: &str) -> Option<Duration> {
    let token: &str = text
        .split(|c: char| c.is_whitespace() || matches!(c, ',' | ';' | ')' | '"' | '\''))
        .next()?;
    let token = token.trim_end_matches('.');
    if let Some(delay) = go_duration::parse(token) {
        return Some(delay);
    }
    let digits = token
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(token.len());
    let (number, unit) = token.split_at(digits);
    let number = number.trim_end_matches('.');
    let seconds = parse_seconds(number)?;
    let unit = if unit.is_empty() {
        // The unit may be the next word: "7 seconds".
        text.get(token.len()..)
            .unwrap_or("")
            .trim_start()
            .split(|c: char| !c.is_ascii_alphabetic())
            .next()
            .unwrap_or("")
    } else {
        unit
    };
    let per_unit = match UNITS.iter().find(|(name, _)| *name == unit) {
        Some((_, per_unit)) => *per_unit,
        None if unit.is_empty() => 1_000_000_000,
        // "in 5 days" or "in 3 attempts": not a wait we know how to read.
        None => return None,
    };
    let nanos = seconds.as_nanos().checked_mul(u128::from(per_unit))? / 1_000_000_000;
    let delay = Duration::from_nanos(u64::try_from(nanos).ok()?);
    (delay <= crate::signal::MAX_DELAY).then_some(delay)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signal::testing::body_signal;

    #[test]
    fn stated_waits() {
        let ms = |text: &str| stated_wait(text).map(|d| u64::try_from(d.as_millis()).unwrap());
        assert_eq!(ms("please try again in 6.5s."), Some(6_500));
        assert_eq!(ms("please retry after 7 seconds"), Some(7_000));
        assert_eq!(ms("try again in 20ms"), Some(20));
        assert_eq!(ms("try again in 1m30s"), Some(90_000));
        assert_eq!(ms("retry after 2 minutes."), Some(120_000));
        assert_eq!(ms("retry in 3"), Some(3_000));
        assert_eq!(ms("try again in 0.250 sec, thanks"), Some(250));
        assert_eq!(ms("try again in 5 days"), None);
        assert_eq!(ms("try again in a moment"), None);
        assert_eq!(ms("try again in -3s"), None);
        assert_eq!(ms("try again in 99999999999999 hours"), None);
        assert_eq!(ms("try again in "), None);
    }

    #[test]
    fn table() {
        let cases: &[(u16, &str, bool, bool, Option<u64>)] = &[
            (
                429,
                r#"{"error":{"message":"Please try again in 6.5s."}}"#,
                true,
                false,
                Some(6_500),
            ),
            (
                400,
                r#"{"message":"Rate limit is exceeded. Try again in 7 seconds."}"#,
                true,
                false,
                Some(7_000),
            ),
            (
                503,
                "Service busy; retry after 2 seconds",
                true,
                false,
                Some(2_000),
            ),
            // A wait with no word of rate on a status that is not a rejection.
            (
                400,
                "Upload expired; try again in 5 seconds",
                false,
                false,
                None,
            ),
            (
                429,
                r#"{"error":"Too many concurrent requests for this user"}"#,
                true,
                true,
                None,
            ),
            (
                409,
                "Number of concurrent connections has exceeded your rate limit",
                true,
                true,
                None,
            ),
            (
                200,
                "too many concurrent requests; try again in 5s",
                false,
                false,
                None,
            ),
        ];
        for (status, body, throttled, concurrency, wait_ms) in cases {
            let signal = body_signal(*status, &[], body);
            assert_eq!(signal.throttled, *throttled, "{status} {body}");
            assert_eq!(signal.concurrency, *concurrency, "{body}");
            let wait = signal
                .wait()
                .map(|w| u64::try_from(w.delay.as_millis()).unwrap());
            assert_eq!(wait, *wait_ms, "{body}");
        }
    }
}
