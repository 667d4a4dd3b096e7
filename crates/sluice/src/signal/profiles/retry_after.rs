//! `retry-after-ms`, `x-amz-retry-after` (milliseconds) and `Retry-After` (RFC 9110 §10.2.3).

use super::Profile;
use crate::signal::clock::{parse_millis, parse_seconds};
use crate::signal::{Fields, ResponseClock, Signal};

pub(super) const PROFILE: Profile = Profile {
    name: "retry-after",
    fields: &["retry-after", "x-amz-retry-after"],
    read,
};

fn read(fields: &Fields<'_>, clock: &ResponseClock, signal: &mut Signal) {
    // Millisecond forms first: they are more precise than whole seconds,
    // which RFC 9110 requires Retry-After to round up to.
    for name in ["retry-after-ms", "x-amz-retry-after"] {
        if let Some(delay) = fields.first(name).and_then(parse_millis) {
            signal.set_retry_after(delay, name);
        }
    }
    if let Some(value) = fields.first("retry-after") {
        // Delta-seconds (decimals tolerated), else an HTTP-date in any of
        // the three forms RFC 9110 §5.6.7 requires recipients to accept.
        if let Some(delay) = parse_seconds(value).or_else(|| clock.until_http_date(value)) {
            signal.set_retry_after(delay, "retry-after");
        }
    }
}

#[cfg(test)]
mod tests {

    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    use http::StatusCode;

    use crate::signal::read;

    fn wait(headers: &[(&str, &str)], received: SystemTime) -> Option<(Duration, &'static str)> {
        let map = crate::signal::testing::header_map(headers);
        read(StatusCode::TOO_MANY_REQUESTS, &map, received)
            .retry_after
            .map(|w| (w.delay, w.source))
    }

    const NOW: u64 = 1_445_412_480; // Wed, 21 Oct 2015 07:28:00 GMT

    fn now() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(NOW)
    }

    #[test]
    fn table() {
        let s = Duration::from_secs;
        let ms = Duration::from_millis;
        type Case<'a> = (&'a [(&'a str, &'a str)], Option<(Duration, &'a str)>);
        let cases: &[Case<'_>] = &[
            (&[("retry-after", "120")], Some((s(120), "retry-after"))),
            (&[("retry-after", "0.2")], Some((ms(200), "retry-after"))),
            (&[("Retry-After", "0")], Some((s(0), "retry-after"))),
            (
                &[("retry-after-ms", "4200")],
                Some((ms(4200), "retry-after-ms")),
            ),
            (
                &[("x-amz-retry-after", "1500")],
                Some((ms(1500), "x-amz-retry-after")),
            ),
            (
                &[("retry-after", "3"), ("retry-after-ms", "2500")],
                Some((ms(2500), "retry-after-ms")),
            ),
            // IMF-fixdate, RFC 850 and asctime forms, 30 s after NOW.
            (
                &[("retry-after", "Wed, 21 Oct 2015 07:28:30 GMT")],
                Some((s(30), "retry-after")),
            ),
            (
                &[("retry-after", "Wednesday, 21-Oct-15 07:28:30 GMT")],
                Some((s(30), "retry-after")),
            ),
            (
                &[("retry-after", "Wed Oct 21 07:28:30 2015")],
                Some((s(30), "retry-after")),
            ),
            // A date in the past means now, never a negative wait.
            (
                &[("retry-after", "Wed, 21 Oct 2015 07:00:00 GMT")],
                Some((s(0), "retry-after")),
            ),
            // Garbage, negatives, huge numbers and far futures are ignored.
            (&[("retry-after", "-5")], None),
            (&[("retry-after", "soon")], None),
            (&[("retry-after", "")], None),
            (
                &[("retry-after", "1234567890123456789012345678901234567890")],
                None,
            ),
            (&[("retry-after", "Fri, 31 Dec 9999 23:59:59 GMT")], None),
            (&[("retry-after-ms", "-1")], None),
        ];
        for (headers, expected) in cases {
            assert_eq!(wait(headers, now()), *expected, "{headers:?}");
        }
    }

    #[test]
    fn http_dates_are_measured_against_the_date_header_not_the_local_clock() {
        // The local clock is three hours fast; the server's own Date says
        // the Retry-After date is 2 s away, and that is what counts.
        let skewed = now() + Duration::from_secs(3 * 3600);
        let headers = [
            ("date", "Wed, 21 Oct 2015 07:28:00 GMT"),
            ("retry-after", "Wed, 21 Oct 2015 07:28:02 GMT"),
        ];
        assert_eq!(
            wait(&headers, skewed),
            Some((Duration::from_secs(2), "retry-after"))
        );
        let slow = now() - Duration::from_secs(3 * 3600);
        assert_eq!(
            wait(&headers, slow),
            Some((Duration::from_secs(2), "retry-after"))
        );
    }
}
