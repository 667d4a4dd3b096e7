//! Turning the server's absolute times into delays, server clock against server clock.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::Fields;
use super::model::MAX_DELAY;

/// When a response was produced, as the server's own `Date` header says, or
/// as the local clock says when there is none.
///
/// Absolute times in a response (HTTP-dates, epoch seconds, RFC 3339) are
/// measured against this, so a skewed local clock cannot turn "wait 2 s"
/// into "wait 6 hours" or into "wait in the past".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponseClock {
    reference: SystemTime,
    from_date_header: bool,
}

impl ResponseClock {
    /// The clock for one response: its `Date` header if valid, else `received`.
    pub fn new(fields: &Fields<'_>, received: SystemTime) -> Self {
        match fields
            .first("date")
            .and_then(|d| httpdate::parse_http_date(d).ok())
        {
            Some(date) => ResponseClock {
                reference: date,
                from_date_header: true,
            },
            None => ResponseClock {
                reference: received,
                from_date_header: false,
            },
        }
    }

    /// A clock at a fixed reference time (for tests and `inspect --now`).
    pub fn at(reference: SystemTime) -> Self {
        ResponseClock {
            reference,
            from_date_header: false,
        }
    }

    /// True when times are measured against the response's `Date` header.
    pub fn uses_date_header(&self) -> bool {
        self.from_date_header
    }

    /// The delay until `instant`: zero if it has passed, `None` if it lies
    /// beyond [`MAX_DELAY`] (an absurd value, ignored rather than obeyed).
    pub fn until(&self, instant: SystemTime) -> Option<Duration> {
        let delay = instant
            .duration_since(self.reference)
            .unwrap_or(Duration::ZERO);
        (delay <= MAX_DELAY).then_some(delay)
    }

    /// The delay until an HTTP-date in any of RFC 9110's three forms.
    pub fn until_http_date(&self, text: &str) -> Option<Duration> {
        self.until(httpdate::parse_http_date(text.trim()).ok()?)
    }

    /// The delay until `seconds` since the Unix epoch (fractions allowed).
    pub fn until_epoch(&self, seconds: Duration) -> Option<Duration> {
        self.until(UNIX_EPOCH.checked_add(seconds)?)
    }

    /// The delay until the next midnight at a fixed offset from UTC (in
    /// seconds, west negative), as quotas that reset daily say it.
    pub fn until_next_midnight(&self, utc_offset_s: i64) -> Option<Duration> {
        let now = self.reference.duration_since(UNIX_EPOCH).ok()?;
        let local = i64::try_from(now.as_secs())
            .ok()?
            .checked_add(utc_offset_s)?;
        let next = (local.div_euclid(86_400) + 1) * 86_400 - utc_offset_s;
        let seconds = u64::try_from(next).ok()?;
        self.until_epoch(Duration::from_secs(seconds))
    }

    /// The delay until an RFC 3339 / ISO 8601 timestamp with an offset.
    pub fn until_rfc3339(&self, text: &str) -> Option<Duration> {
        let timestamp: jiff::Timestamp = text.trim().parse().ok()?;
        let seconds = u64::try_from(timestamp.as_second()).ok()?;
        let nanos = u32::try_from(timestamp.subsec_nanosecond()).ok()?;
        self.until_epoch(Duration::new(seconds, nanos))
    }
}

/// Seconds as a non-negative decimal (`"2"`, `"0.25"`), to the microsecond;
/// negative, exponent, NaN, or over [`MAX_DELAY`] is `None`.
pub(crate) fn parse_seconds(text: &str) -> Option<Duration> {
    let (whole, millionths) = parse_decimal(text)?;
    bounded(Duration::from_secs(whole) + Duration::from_micros(millionths))
}

/// Milliseconds as a non-negative decimal, bounded like [`parse_seconds`].
pub(crate) fn parse_millis(text: &str) -> Option<Duration> {
    let (whole, millionths) = parse_decimal(text)?;
    bounded(Duration::from_millis(whole) + Duration::from_nanos(millionths))
}

fn bounded(delay: Duration) -> Option<Duration> {
    (delay <= MAX_DELAY).then_some(delay)
}

/// A plain decimal: up to 15 integer digits, the fraction kept to six places.
fn parse_decimal(text: &str) -> Option<(u64, u64)> {
    let text = text.trim();
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if (whole.is_empty() && fraction.is_empty())
        || whole.len() > 15
        || !digits(whole)
        || !digits(fraction)
    {
        return None;
    }
    let whole: u64 = if whole.is_empty() {
        0
    } else {
        whole.parse().ok()?
    };
    let millionths = fraction
        .bytes()
        .chain(std::iter::repeat(b'0'))
        .take(6)
        .fold(0, |acc, b| acc * 10 + u64::from(b - b'0'));
    Some((whole, millionths))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_accept_integers_and_decimals_only() {
        assert_eq!(parse_seconds("2"), Some(Duration::from_secs(2)));
        assert_eq!(parse_seconds("0.25"), Some(Duration::from_millis(250)));
        assert_eq!(parse_seconds(".5"), Some(Duration::from_millis(500)));
        assert_eq!(
            parse_seconds("1.0000019"),
            Some(Duration::from_micros(1_000_001))
        );
        for bad in ["", ".", "-1", "1e3", "NaN", "inf", "1.2.3", "0x10", " 1 2"] {
            assert_eq!(parse_seconds(bad), None, "{bad}");
        }
        assert_eq!(parse_seconds("99999999999"), None);
        assert_eq!(parse_seconds("1.5.2"), None);
        assert_eq!(parse_seconds(&"9".repeat(40)), None);
    }

    #[test]
    fn millis_scale() {
        assert_eq!(parse_millis("4200"), Some(Duration::from_millis(4200)));
        assert_eq!(parse_millis("12.5"), Some(Duration::from_micros(12_500)));
        assert_eq!(
            parse_millis("172800000"),
            Some(Duration::from_secs(172_800))
        );
    }

    #[test]
    fn absolute_times_use_the_reference_and_never_go_negative() {
        let reference = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let clock = ResponseClock::at(reference);
        assert_eq!(
            clock.until_epoch(Duration::from_secs(1_700_000_030)),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            clock.until_epoch(Duration::from_secs(1_600_000_000)),
            Some(Duration::ZERO)
        );
        assert_eq!(clock.until_epoch(Duration::from_secs(4_000_000_000)), None);
        assert_eq!(
            clock.until_rfc3339("2023-11-14T22:13:50Z"),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            clock.until_http_date("Tue, 14 Nov 2023 22:13:50 GMT"),
            Some(Duration::from_secs(30))
        );
    }
}
