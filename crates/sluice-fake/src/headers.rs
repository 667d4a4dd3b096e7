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
#[derive(Debug, Clone)]
pub(crate) struct Snapshot<'a> {
    /// The resource's name.
    pub(crate) resource: &'a str,
    /// The request limit's window.
    pub(crate) window: Duration,
    /// The request limiter.
    pub(crate) requests: Status,
    /// Further request windows, each with its length.
    pub(crate) windows: Vec<(Status, Duration)>,
    /// The token limiter, when the resource has one.
    pub(crate) tokens: Option<Status>,
    /// The daily quota, when the resource has one.
    pub(crate) daily: Option<Status>,
}

impl Snapshot<'_> {
    /// The policy a single-policy style (GitHub, OpenAI, Anthropic) shows: the one with
    /// the fewest remaining; on a tie the longer window, since it is the one that lasts.
    fn binding(&self) -> (Status, Duration) {
        let mut binding = (self.requests, self.window);
        let longer = self
            .windows
            .iter()
            .copied()
            .chain(self.daily.map(|daily| (daily, DAY)));
        for (status, window) in longer {
            let fewer = status.remaining < binding.0.remaining;
            let tie_longer = status.remaining == binding.0.remaining && window > binding.1;
            if fewer || tie_longer {
                binding = (status, window);
            }
        }
        binding
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
        HeaderStyle::Anthropic => add_anthropic(snapshot, wall_now, headers),
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
    // A further window is a policy of its own, named for the resource and its length.
    for (status, window) in &snapshot.windows {
        let seconds = ceil_seconds(*window).max(1);
        let name = format!("{}-{seconds}s", snapshot.resource);
        policies.push(format!("\"{name}\";q={};w={seconds}", status.limit));
        limits.push(format!(
            "\"{name}\";r={};t={}",
            status.remaining,
            ceil_seconds(status.reset)
        ));
    }
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

// Anthropic's rate-limit headers: limit, remaining and an RFC 3339 reset per unit.
fn add_anthropic(snapshot: &Snapshot<'_>, wall_now: SystemTime, headers: &mut HeaderMap) {
    let (requests, _) = snapshot.binding();
    let rows = [("requests", Some(requests)), ("tokens", snapshot.tokens)];
    for (unit, status) in rows {
        let Some(status) = status else { continue };
        let reset_at = wall_now
            .checked_add(status.reset)
            .and_then(|at| at.duration_since(UNIX_EPOCH).ok())
            .unwrap_or_default();
        let field = |suffix: &str| format!("anthropic-ratelimit-{unit}-{suffix}");
        insert(headers, &field("limit"), status.limit.to_string());
        insert(headers, &field("remaining"), status.remaining.to_string());
        insert(headers, &field("reset"), rfc3339(ceil_seconds(reset_at)));
    }
}

/// Epoch seconds as an RFC 3339 UTC timestamp, `2024-10-15T18:02:08Z`.
pub(crate) fn rfc3339(epoch_seconds: u64) -> String {
    let days = epoch_seconds / 86_400;
    let second_of_day = epoch_seconds % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        second_of_day / 3600,
        second_of_day / 60 % 60,
        second_of_day % 60
    )
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard Hinnant's
/// `civil_from_days`, for days after the epoch).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
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
            windows: Vec::new(),
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

    #[test]
    fn rfc3339_dates_are_civil() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_729_015_328), "2024-10-15T18:02:08Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
    }

    #[test]
    fn anthropic_shows_requests_and_tokens_with_rfc3339_resets() {
        let mut headers = HeaderMap::new();
        let now = UNIX_EPOCH + Duration::from_secs(1_729_015_326);
        add_rate_limit_headers(HeaderStyle::Anthropic, &snapshot(None), now, &mut headers);
        let expected = [
            ("anthropic-ratelimit-requests-limit", "30"),
            ("anthropic-ratelimit-requests-remaining", "27"),
            ("anthropic-ratelimit-requests-reset", "2024-10-15T18:02:08Z"),
            ("anthropic-ratelimit-tokens-limit", "1000"),
            ("anthropic-ratelimit-tokens-remaining", "900"),
            ("anthropic-ratelimit-tokens-reset", "2024-10-15T18:02:07Z"),
        ];
        for (name, value) in expected {
            assert_eq!(header(&headers, name), Some(value), "{name}");
        }
    }

    #[test]
    fn further_windows_are_policies_and_bind_single_policy_styles() {
        let mut several = snapshot(None);
        several.windows = vec![(status(5000, 12, ms(3_000_000)), ms(3_600_000))];
        let mut headers = HeaderMap::new();
        add_rate_limit_headers(HeaderStyle::Ietf, &several, UNIX_EPOCH, &mut headers);
        assert_eq!(
            header(&headers, "ratelimit-policy"),
            Some("\"search\";q=30;w=60, \"search-3600s\";q=5000;w=3600")
        );
        assert_eq!(
            header(&headers, "ratelimit"),
            Some("\"search\";r=27;t=2, \"search-3600s\";r=12;t=3000")
        );
        let mut openai = HeaderMap::new();
        add_rate_limit_headers(HeaderStyle::Openai, &several, UNIX_EPOCH, &mut openai);
        assert_eq!(header(&openai, "x-ratelimit-limit-requests"), Some("5000"));
        assert_eq!(
            header(&openai, "x-ratelimit-remaining-requests"),
            Some("12")
        );
        assert_eq!(header(&openai, "x-ratelimit-reset-requests"), Some("50m0s"));
    }
}
