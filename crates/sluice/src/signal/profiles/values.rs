//! Repeated rate-limit fields, read so that the tightest value binds.
//!
//! A field may repeat, or carry a comma-separated list (RFC 9110 §5.3), for
//! instance when a gateway adds its own copy in front of the API's. Which copy
//! describes which limiter cannot be known, so profiles take the reading that
//! can never send a request early: the fewest remaining, the lowest limit, the
//! latest reset. Elements that do not parse are ignored; the others still count.

use std::time::Duration;

use crate::signal::Fields;

/// The smallest parsed element of `name` (for remaining counts and limits).
pub(super) fn lowest(
    fields: &Fields<'_>,
    name: &str,
    parse: impl Fn(&str) -> Option<u64>,
) -> Option<u64> {
    fields.elements(name).filter_map(parse).min()
}

/// The largest parsed element of `name` (for resets).
pub(super) fn latest(
    fields: &Fields<'_>,
    name: &str,
    parse: impl Fn(&str) -> Option<Duration>,
) -> Option<Duration> {
    fields.elements(name).filter_map(parse).max()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signal::fields::parse_integer;
    use crate::signal::testing::header_map;

    #[test]
    fn repeated_and_listed_values_bind_at_their_tightest() {
        let map = header_map(&[
            ("x-ratelimit-remaining", "7"),
            ("X-RateLimit-Remaining", "3, junk, -1"),
            ("x-ratelimit-reset", "1, 5"),
        ]);
        let fields = Fields::new(&map);
        assert_eq!(
            lowest(&fields, "x-ratelimit-remaining", parse_integer),
            Some(3)
        );
        assert_eq!(
            latest(&fields, "x-ratelimit-reset", |v| parse_integer(v)
                .map(Duration::from_secs)),
            Some(Duration::from_secs(5))
        );
        assert_eq!(lowest(&fields, "absent", parse_integer), None);
        assert_eq!(
            fields.elements("x-ratelimit-reset").collect::<Vec<_>>(),
            ["1", "5"]
        );
    }
}
