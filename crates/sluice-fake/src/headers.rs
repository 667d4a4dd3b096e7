//! Rate-limit response headers in each [`HeaderStyle`], rendered from limiter statuses.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::header::{HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};

use crate::config::HeaderStyle;
use crate::limiter::Status;

/// The name the IETF style gives the daily quota's policy.
const DAILY_POLICY: &str = "daily";

/// A day, the daily quota's window.
pub(crate) const DAY: Duration = Duration::from_secs(86_400);

/// The state of one scope at the moment a response is decided.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Snapshot<'a> {
    /// The resource's name.
    pub(crate) resource: &'a str,
    /// The request limit's window.
    pub(crate) window: Duration,
    /// The request limiter.
    pub(crate) requests: Status,
    /// The token limiter, when the resource has one.
    pub(crate) tokens: Option<Status>,
    /// The daily quota, when the resource has one.
    pub(crate) daily: Option<Status>,
}

impl Snapshot<'_> {
    /// The policy a single-policy style (GitHub, OpenAI) shows: the one with the fewest
    /// remaining, the daily quota on a tie, since it is the one that lasts.
    fn binding(&self) -> (Status, Duration) {
        match self.daily {
            Some(daily) if daily.remaining <= self.requests.remaining => (daily, DAY),
            _ => (self.requests, self.window),
        }
    }
}

/// Adds the style's rate-limit headers (not Retry-After) describing `snapshot`.
pub(crate) fn add_rate_limit_headers(
    style: HeaderStyle,
    snapshot: &Snapshot<'_>,
    wall_now: SystemTime,
    headers: &mut HeaderMap,
) {
    match style {
        HeaderStyle::None | HeaderStyle::RetryAfter => {}
        HeaderStyle::Ietf => add_ietf(snapshot, headers),
        HeaderStyle::Github => add_github(snapshot, wall_now, headers),
        HeaderStyle::Openai => add_openai(snapshot, headers),
    }
}

// draft-ietf-httpapi-ratelimit-headers-09 §3-4: lists of items, a policy's `q` and `w`,
// the limit's `r` and `t`, all integers; sub-second values are rounded up, never down.
fn add_ietf(snapshot: &Snapshot<'_>, headers: &mut HeaderMap) {
    let mut policies = vec![format!(
        "\"{}\";q={};w={}",
        snapshot.resource,
        snapshot.requests.limit,
        ceil_seconds(snapshot.window).max(1)
    )];
    let mut limits = vec![format!(
        "\"{}\";r={};t={}",
        snapshot.resource,
        snapshot.requests.remaining,
        ceil_seconds(snapshot.requests.reset)
    )];
    if let Some(daily) = snapshot.daily {
        policies.push(format!(
            "\"{DAILY_POLICY}\";q={};w={}",
            daily.limit,
            DAY.as_secs()
        ));
        limits.push(format!(
            "\"{DAILY_POLICY}\";r={};t={}",
            daily.remaining,
            ceil_seconds(daily.reset)
        ));
    }
    insert(headers, "ratelimit-policy", policies.join(", "));
    insert(headers, "ratelimit", limits.join(", "));
}

fn add_github(snapshot: &Snapshot<'_>, wall_now: SystemTime, headers: &mut HeaderMap) {
    let (status, _) = snapshot.binding();
    let reset_at = wall_now
        .checked_add(status.reset)
        .and_then(|at| at.duration_since(UNIX_EPOCH).ok())
        .unwrap_or_default();
    let used = status.limit.saturating_sub(status.remaining);
    insert(headers, "x-ratelimit-limit", status.limit.to_string());
    insert(
        headers,
        "x-ratelimit-remaining",
        status.remaining.to_string(),
    );
    insert(
        headers,
        "x-ratelimit-reset",
        ceil_seconds(reset_at).to_string(),
    );
    insert(headers, "x-ratelimit-used", used.to_string());
    insert(
        headers,
        "x-ratelimit-resource",
        snapshot.resource.to_owned(),
    );
}

fn add_openai(snapshot: &Snapshot<'_>, headers: &mut HeaderMap) {
    let (requests, _) = snapshot.binding();
    let rows = [("requests", Some(requests)), ("tokens", snapshot.tokens)];
    for (unit, status) in rows {
        let Some(status) = status else { continue };
        insert(
            headers,
            &format!("x-ratelimit-limit-{unit}"),
            status.limit.to_string(),
        );
        insert(
            headers,
            &format!("x-ratelimit-remaining-{unit}"),
            status.remaining.to_string(),
        );
        insert(
            headers,
            &format!("x-ratelimit-reset-{unit}"),
            go_duration(status.reset),
        );
    }
}

/// Adds `Retry-After` (whole seconds, rounded up) and `retry-after-ms` (rounded up).
pub(crate) fn add_retry_after(wait: Duration, headers: &mut HeaderMap) {
    let (seconds, millis) = retry_after_values(wait);
    headers.insert(RETRY_AFTER, HeaderValue::from(seconds));
    headers.insert(
        HeaderName::from_static("retry-after-ms"),
        HeaderValue::from(millis),
    );
}

/// `Retry-After` and `retry-after-ms` for a wait. RFC 9110 §10.2.3 allows only whole
/// seconds; rounding up means a client that obeys is never early, and a positive wait is
/// never sent as 0.
pub(crate) fn retry_after_values(wait: Duration) -> (u64, u64) {
    (ceil_seconds(wait), ceil_millis(wait))
}

/// A duration as Go's `time.Duration.String()` prints it (`1s`, `6m0s`, `120ms`, `1.5s`),
/// as OpenAI sends resets, rounded up to the millisecond.
pub(crate) fn go_duration(duration: Duration) -> String {
    let millis = ceil_millis(duration);
    if millis == 0 {
        return "0s".to_owned();
    }
    if millis < 1000 {
        return format!("{millis}ms");
    }
    let total_seconds = millis / 1000;
    let fraction = millis % 1000;
    let seconds = total_seconds % 60;
    let minutes = total_seconds / 60 % 60;
    let hours = total_seconds / 3600;
    let seconds = if fraction == 0 {
        seconds.to_string()
    } else {
        let fraction = format!("{fraction:03}");
        format!("{seconds}.{}", fraction.trim_end_matches('0'))
    };
    if hours > 0 {
        format!("{hours}h{minutes}m{seconds}s")
    } else if minutes > 0 {
        format!("{minutes}m{seconds}s")
    } else {
        format!("{seconds}s")
    }
}

fn ceil_seconds(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos().div_ceil(1_000_000_000)).unwrap_or(u64::MAX)
}

fn ceil_millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX)
}

/// Inserts a header built from trusted parts (numbers and validated resource names);
/// a value that still does not fit is dropped rather than allowed to panic.
fn insert(headers: &mut HeaderMap, name: &str, value: String) {
    let name = HeaderName::from_bytes(name.as_bytes());
    let value = HeaderValue::try_from(value);
    if let (Ok(name), Ok(value)) = (name, value) {
        headers.insert(name, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(millis: u64) -> Duration {
        Duration::from_millis(millis)
    }

    fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
        headers.get(name).and_then(|value| value.to_str().ok())
    }

    fn status(limit: u32, remaining: u32, reset: Duration) -> Status {
        Status {
            limit,
            remaining,
            reset,
        }
    }

    #[test]
    fn retry_after_rounds_up_to_whole_seconds() {
        assert_eq!(retry_after_values(ms(200)), (1, 200));
        assert_eq!(retry_after_values(ms(1000)), (1, 1000));
        assert_eq!(retry_after_values(ms(1001)), (2, 1001));
        assert_eq!(retry_after_values(Duration::from_nanos(1)), (1, 1));
        assert_eq!(retry_after_values(Duration::ZERO), (0, 0));
        let mut headers = HeaderMap::new();
        add_retry_after(ms(200), &mut headers);
        assert_eq!(header(&headers, "retry-after"), Some("1"));
        assert_eq!(header(&headers, "retry-after-ms"), Some("200"));
    }

    #[test]
    fn go_durations_look_like_go() {
        assert_eq!(go_duration(Duration::ZERO), "0s");
        assert_eq!(go_duration(ms(120)), "120ms");
        assert_eq!(go_duration(Duration::from_micros(1)), "1ms");
        assert_eq!(go_duration(ms(1000)), "1s");
        assert_eq!(go_duration(ms(1500)), "1.5s");
        assert_eq!(go_duration(ms(1250)), "1.25s");
        assert_eq!(go_duration(ms(360_000)), "6m0s");
        assert_eq!(go_duration(ms(61_005)), "1m1.005s");
        assert_eq!(go_duration(ms(3_600_000)), "1h0m0s");
        assert_eq!(go_duration(ms(86_399_000)), "23h59m59s");
    }

    fn snapshot(daily: Option<Status>) -> Snapshot<'static> {
        Snapshot {
            resource: "search",
            window: ms(60_000),
            requests: status(30, 27, ms(1500)),
            tokens: Some(status(1000, 900, ms(200))),
            daily,
        }
    }

    #[test]
    fn ietf_lists_the_window_and_the_daily_quota() {
        let mut headers = HeaderMap::new();
        let daily = Some(status(1000, 997, Duration::from_secs(86_000)));
        add_rate_limit_headers(
            HeaderStyle::Ietf,
            &snapshot(daily),
            UNIX_EPOCH,
            &mut headers,
        );
        assert_eq!(
            header(&headers, "ratelimit-policy"),
            Some("\"search\";q=30;w=60, \"daily\";q=1000;w=86400")
        );
        assert_eq!(
            header(&headers, "ratelimit"),
            Some("\"search\";r=27;t=2, \"daily\";r=997;t=86000")
        );
        let mut plain = HeaderMap::new();
        add_rate_limit_headers(HeaderStyle::Ietf, &snapshot(None), UNIX_EPOCH, &mut plain);
        assert_eq!(header(&plain, "ratelimit"), Some("\"search\";r=27;t=2"));
    }

    #[test]
    fn github_resets_are_epoch_seconds_rounded_up() {
        let mut headers = HeaderMap::new();
        let now = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        add_rate_limit_headers(HeaderStyle::Github, &snapshot(None), now, &mut headers);
        assert_eq!(header(&headers, "x-ratelimit-limit"), Some("30"));
        assert_eq!(header(&headers, "x-ratelimit-remaining"), Some("27"));
        assert_eq!(header(&headers, "x-ratelimit-used"), Some("3"));
        assert_eq!(header(&headers, "x-ratelimit-reset"), Some("1700000002"));
        assert_eq!(header(&headers, "x-ratelimit-resource"), Some("search"));
        assert_eq!(header(&headers, "retry-after"), None);
    }

    #[test]
    fn single_policy_styles_show_an_exhausted_daily_quota() {
        let mut headers = HeaderMap::new();
        let daily = Some(status(100, 0, Duration::from_secs(3600)));
        add_rate_limit_headers(
            HeaderStyle::Openai,
            &snapshot(daily),
            UNIX_EPOCH,
            &mut headers,
        );
        assert_eq!(header(&headers, "x-ratelimit-limit-requests"), Some("100"));
        assert_eq!(
            header(&headers, "x-ratelimit-remaining-requests"),
            Some("0")
        );
        assert_eq!(
            header(&headers, "x-ratelimit-reset-requests"),
            Some("1h0m0s")
        );
        assert_eq!(header(&headers, "x-ratelimit-limit-tokens"), Some("1000"));
        assert_eq!(
            header(&headers, "x-ratelimit-remaining-tokens"),
            Some("900")
        );
        assert_eq!(header(&headers, "x-ratelimit-reset-tokens"), Some("200ms"));
    }

    #[test]
    fn quiet_styles_add_nothing() {
        for style in [HeaderStyle::None, HeaderStyle::RetryAfter] {
            let mut headers = HeaderMap::new();
            add_rate_limit_headers(style, &snapshot(None), UNIX_EPOCH, &mut headers);
            assert!(headers.is_empty(), "{style}");
        }
    }
}
