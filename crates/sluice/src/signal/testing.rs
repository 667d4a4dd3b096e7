//! Helpers the profiles' table tests share.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::{HeaderMap, StatusCode};

use super::{Signal, read, read_with_body};

/// The reference "now" of the table tests: 2023-11-14T22:13:20Z.
pub(crate) const NOW: u64 = 1_700_000_000;

/// Builds a header map from name/value pairs.
pub(crate) fn header_map(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        let name = http::HeaderName::from_bytes(name.as_bytes()).unwrap();
        map.append(name, value.parse().unwrap());
    }
    map
}

/// What `read` makes of `headers` on a response with `status` received at `received`.
pub(crate) fn signal_at(status: u16, headers: &[(&str, &str)], received: SystemTime) -> Signal {
    read(
        StatusCode::from_u16(status).unwrap(),
        &header_map(headers),
        received,
    )
}

/// As [`signal_at`], received at [`NOW`].
pub(crate) fn signal(status: u16, headers: &[(&str, &str)]) -> Signal {
    signal_at(status, headers, UNIX_EPOCH + Duration::from_secs(NOW))
}

/// Header pairs of a table row.
pub(crate) type Headers = &'static [(&'static str, &'static str)];

/// An expected scope: (name, limit, remaining, reset in ms).
pub(crate) type Row = (&'static str, Option<u64>, Option<u64>, Option<u64>);

/// A scope as read, name owned.
pub(crate) type Got = (String, Option<u64>, Option<u64>, Option<u64>);

/// Every scope a signal describes, as comparable rows.
pub(crate) fn rows(signal: &Signal) -> Vec<Got> {
    signal
        .scopes
        .iter()
        .map(|s| {
            let reset = s.reset.map(|r| u64::try_from(r.as_millis()).unwrap());
            (s.name.clone(), s.limit, s.remaining, reset)
        })
        .collect()
}

/// What `read_with_body` makes of a response received at [`NOW`].
pub(crate) fn body_signal(status: u16, headers: &[(&str, &str)], body: &str) -> Signal {
    read_with_body(
        StatusCode::from_u16(status).unwrap(),
        &header_map(headers),
        body.as_bytes(),
        UNIX_EPOCH + Duration::from_secs(NOW),
    )
}
