//! The one function that turns a response's status, headers and body into
//! a [`Signal`]: the header profiles in order of precedence, then the body.

use std::time::SystemTime;

use http::{HeaderMap, StatusCode};

use super::{Fields, ResponseClock, Signal, body, fields, profiles};

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
    read_with_body(status, headers, &[], received)
}

/// Reads every rate signal in a response, its body included: the reader
/// that the engine, the sidecar, the MCP proxy and `sluice inspect` share.
///
/// The caller decides whether the body can matter ([`wants_body`](super::wants_body)) and
/// passes an empty slice when it cannot; a body given is read within fixed
/// bounds ([`body::MAX_JSON_BYTES`], [`body::MAX_DEPTH`],
/// [`body::MAX_TEXT_BYTES`]), whatever its size. Headers take precedence
/// over the body where both state a wait. Never panics.
///
/// ```
/// use http::{HeaderMap, StatusCode};
/// use std::time::{Duration, SystemTime};
///
/// let body = br#"{"error":{"status":"RESOURCE_EXHAUSTED","details":[
///   {"@type":"type.googleapis.com/google.rpc.RetryInfo","retryDelay":"27s"}]}}"#;
/// let signal = sluice::signal::read_with_body(
///     StatusCode::TOO_MANY_REQUESTS, &HeaderMap::new(), body, SystemTime::now());
/// assert!(signal.throttled);
/// assert_eq!(signal.wait().unwrap().delay, Duration::from_secs(27));
/// ```
pub fn read_with_body(
    status: StatusCode,
    headers: &HeaderMap,
    body: &[u8],
    received: SystemTime,
) -> Signal {
    read_with_body_at(status, headers, body, || received)
}

/// [`read_with_body`], asking `received` for the time only when there is a
/// field or body to read it for (most responses have neither).
pub(crate) fn read_with_body_at(
    status: StatusCode,
    headers: &HeaderMap,
    body: &[u8],
    received: impl FnOnce() -> SystemTime,
) -> Signal {
    let mut signal = Signal::new(status.as_u16());
    // Most responses carry no rate field at all, and the rest one family or
    // two: one pass over their names finds the profiles with a field to
    // read, and spares the others their look-ups.
    let fields = Fields::new(headers);
    let mut carriers = Carriers::new();
    let readers = readers(headers, &mut carriers);
    let in_fields = readers != 0;
    let clock = (in_fields || !body.is_empty()).then(|| ResponseClock::new(&fields, received()));
    if let Some(clock) = clock.as_ref().filter(|_| in_fields) {
        // The profiles look through the fields that may carry a signal
        // alone, unless there are so many that the map's own index finds
        // a name sooner.
        let rate_fields = if carriers.len() <= fields::SCAN_UP_TO {
            Fields::carriers(headers, &carriers)
        } else {
            fields
        };
        for (i, profile) in profiles::ALL.iter().enumerate() {
            if readers & (1 << i) != 0 {
                (profile.read)(&rate_fields, clock, &mut signal);
            }
        }
    }
    signal.throttled = is_rejection(status, &signal);
    if let Some(clock) = clock.as_ref().filter(|_| !body.is_empty()) {
        body::read(body, status, clock, &mut signal);
    }
    signal
}

/// A response's fields that may carry a rate signal, inline for a usual
/// answer's handful.
type Carriers<'a> = smallvec::SmallVec<[fields::Carrier<'a>; 8]>;

/// The profiles with a field among `headers`, a bit each, by their place
/// in [`profiles::ALL`]; every field that may carry a rate signal is
/// pushed onto `carriers`, in order (a repeated field once a value).
fn readers<'a>(headers: &'a HeaderMap, carriers: &mut Carriers<'a>) -> u32 {
    const _: () = assert!(profiles::ALL.len() <= 32);
    let mut readers = 0;
    for (name, value) in headers {
        let name = name.as_str();
        if !fields::may_carry_signal(name) {
            continue;
        }
        carriers.push((name, value));
        for (i, profile) in profiles::ALL.iter().enumerate() {
            if profile.may_read(name) {
                readers |= 1 << i;
            }
        }
    }
    readers
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

#[cfg(test)]
mod tests;
