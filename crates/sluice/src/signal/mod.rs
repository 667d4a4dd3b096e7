//! Reading the server: one function turns a response's status and headers into a [`Signal`].
//!
//! Each header family is a small profile in [`profiles`], tried in order of
//! precedence; the pipeline only ever sees the merged [`Signal`].

pub(crate) mod clock;
pub(crate) mod fields;
mod head;
mod model;
pub mod profiles;
#[cfg(test)]
mod testing;

pub use clock::ResponseClock;
pub use fields::Fields;
pub use head::{Head, HeadError, parse_head};
pub use model::{DEFAULT_SCOPE, MAX_DELAY, ScopeSignal, Signal, Wait};

use std::time::SystemTime;

use http::{HeaderMap, StatusCode};

/// Reads every rate signal in a response received at `received` (local wall
/// clock; used only when the response carries no `Date` header).
///
/// Never panics, whatever the headers hold; malformed values are ignored.
///
/// ```
/// use http::{HeaderMap, StatusCode};
/// use std::time::{Duration, SystemTime};
///
/// let mut headers = HeaderMap::new();
/// headers.insert("retry-after", "2".parse().unwrap());
/// let signal = sluice::signal::read(StatusCode::TOO_MANY_REQUESTS, &headers, SystemTime::now());
/// assert!(signal.throttled);
/// assert_eq!(signal.wait().unwrap().delay, Duration::from_secs(2));
/// ```
pub fn read(status: StatusCode, headers: &HeaderMap, received: SystemTime) -> Signal {
    let fields = Fields::new(headers);
    let clock = ResponseClock::new(&fields, received);
    let mut signal = Signal::new(status.as_u16());
    for profile in profiles::ALL {
        (profile.read)(&fields, &clock, &mut signal);
    }
    signal.throttled = is_rejection(status, &signal);
    signal
}

/// Which responses are the server refusing for rate or quota: 429 always;
/// 503 when it names a wait; 403 when it names a wait or shows nothing
/// remaining (GitHub's primary and secondary limits answer 403).
fn is_rejection(status: StatusCode, signal: &Signal) -> bool {
    let exhausted = signal.scopes.iter().any(|s| s.remaining == Some(0));
    match status {
        StatusCode::TOO_MANY_REQUESTS => true,
        StatusCode::SERVICE_UNAVAILABLE => signal.retry_after.is_some(),
        StatusCode::FORBIDDEN => signal.retry_after.is_some() || exhausted,
        _ => false,
    }
}
