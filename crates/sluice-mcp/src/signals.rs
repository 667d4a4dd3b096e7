//! Rate signals an MCP server gives in its answers: a JSON-RPC `-32023` error, and tool errors that report the API's limit.
//!
//! The engine reads rate signals from HTTP responses, so the executor hands
//! it a `429` carrying `retry-after-ms` for each signal found here; from
//! there the gate penalizes the scope, paces a retry, or defers the call,
//! exactly as for an HTTP API.
//!
//! The tool-level detector is conservative: it looks only at results with
//! `isError: true`, and only at phrases that servers use for a throttled or
//! spent API. A mere mention of a number such as 429 (an issue number, a
//! line) or of "limit" is not a rate limit.

use std::sync::LazyLock;
use std::time::Duration;

use regex::Regex;
use serde::Deserialize;
use serde_json::Value;

/// SEP-3304's proposed JSON-RPC code for "rate limited".
pub(crate) const RATE_LIMITED: i64 = -32023;

/// Most of a tool error's text that the detector reads: rate-limit
/// messages are short, and an error can be megabytes of output.
const MAX_TEXT: usize = 4_096;

/// Longest wait taken from a text, as for headers: anything later is absurd.
const MAX_WAIT: Duration = sluice::signal::MAX_DELAY;

/// A rate signal found in an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Found {
    /// The wait the server stated, if it stated one.
    pub(crate) wait: Option<Duration>,
    /// What said so, for the logs.
    pub(crate) source: &'static str,
}

/// The built-in phrases of a throttled or spent API, plus `[mcp] rate_limit_patterns`.
#[derive(Debug, Clone, Default)]
pub(crate) struct Detector {
    extra: Vec<Regex>,
}

/// Phrases that say the API behind a tool refused for rate or quota. Each
/// is a shape seen in real servers' errors (see the table test below).
static PHRASES: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(concat!(
        r"(?i)",
        // GitHub: "API rate limit exceeded for user ID 1", "You have exceeded a secondary rate limit".
        r"rate[ _-]?limit(?:ed|ing)?\b[^.\n]{0,40}?\b(?:exceeded|reached|hit)\b",
        r"|\b(?:exceeded|reached|hit)\b[^.\n]{0,40}?\brate[ _-]?limit",
        r"|\bsecondary rate limit",
        r"|\b(?:you are being |been |are |is |was |request |requests )rate[ _-]?limited\b",
        r"|\brate_limit_(?:exceeded|error)\b",
        r"|\bratelimited\b",
        // Slack: "ratelimited"; HTTP's reason phrase, also in Python clients' messages.
        r"|\btoo many requests\b",
        // Google: "Quota exceeded for quota metric", "RESOURCE_EXHAUSTED"; OpenAI: "exceeded your current quota".
        r"|\bquota (?:exceeded|exhausted)\b",
        r"|\bexceeded (?:your |the )?(?:current |daily |monthly )?quota\b",
        r"|\bresource[_ ]exhausted\b",
        // A status code stated as one: "HTTP 429", "status code 429", "429 Too Many", "(429)".
        r"|\b(?:http|status|status code|code|error)[ :=]*429\b",
        r"|\b429 (?:too|rate|client error)",
        r"|\(429\)",
    ))
    .ok()
});

/// A stated wait: "retry after 30s", "try again in 6.5s", "rate reset in
/// 50m", "retry-after: 12", "wait 2 minutes". The capture is the duration.
static WAIT: LazyLock<Option<Regex>> = LazyLock::new(|| {
    Regex::new(concat!(
        r"(?i)\b(?:retry|try again|resets?|wait)(?:[ -]after)?\s*[:=]?\s*(?:in|after|for)?\s*",
        // Longer units first: "ms" before "m", "minutes" before "m".
        r"((?:\d+(?:\.\d+)?\s*(?:milliseconds?|ms|minutes?|mins?|m|seconds?|secs?|s|hours?|h)?\s*){1,3})",
    ))
    .ok()
});

impl Detector {
    /// The built-in detector extended by `patterns` (`[mcp] rate_limit_patterns`).
    pub(crate) fn new(patterns: Vec<Regex>) -> Self {
        Detector { extra: patterns }
    }

    /// A `tools/call` result's rate signal, if it reports one.
    pub(crate) fn tool_result(&self, result: &[u8]) -> Option<Found> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct ToolResult {
            #[serde(default)]
            is_error: bool,
            #[serde(default)]
            content: Vec<Value>,
            #[serde(default)]
            structured_content: Option<Value>,
        }
        let parsed: ToolResult = serde_json::from_slice(result).ok()?;
        if !parsed.is_error {
            return None;
        }
        if let Some(found) = parsed.structured_content.as_ref().and_then(structured) {
            return Some(found);
        }
        let mut text = String::new();
        for block in &parsed.content {
            if let Some(part) = block.get("text").and_then(Value::as_str) {
                if !text.is_empty() {
                    text.push('\n');
                }
                text.push_str(part);
                if text.len() >= MAX_TEXT {
                    break;
                }
            }
        }
        let text = clip(&text, MAX_TEXT);
        self.text(text)
    }

    /// A tool error's text, read as a rate limit if it reads as one.
    fn text(&self, text: &str) -> Option<Found> {
        for pattern in &self.extra {
            if let Some(captures) = pattern.captures(text) {
                let wait = captures
                    .get(1)
                    .and_then(|wait| duration(wait.as_str()))
                    .or_else(|| stated_wait(text));
                return Some(Found {
                    wait,
                    source: "mcp.rate_limit_patterns",
                });
            }
        }
        let phrases = PHRASES.as_ref()?;
        if !phrases.is_match(text) {
            return None;
        }
        Some(Found {
            wait: stated_wait(text),
            source: "tool error text",
        })
    }
}

/// A JSON-RPC error object's rate signal: code `-32023` with its wait
/// (`data.retryAfterMs`, or `retry_after_ms`, or seconds in `retryAfter`).
pub(crate) fn jsonrpc_error(error: &[u8]) -> Option<Found> {
    #[derive(Deserialize)]
    struct ErrorObject {
        code: i64,
        #[serde(default)]
        data: Option<Value>,
    }
    let error: ErrorObject = serde_json::from_slice(error).ok()?;
    if error.code != RATE_LIMITED {
        return None;
    }
    let wait = error.data.as_ref().and_then(|data| {
        millis(data.get("retryAfterMs"))
            .or_else(|| millis(data.get("retry_after_ms")))
            .or_else(|| seconds(data.get("retryAfter")))
    });
    Some(Found {
        wait,
        source: "JSON-RPC -32023",
    })
}

/// `structuredContent` that carries a wait: `retryAfterMs`/`retry_after_ms`
/// in milliseconds, `retry_after`/`retryAfter` in seconds (a number, or a
/// duration such as `"30s"`), or another sluice's `rate_limited` outcome.
fn structured(content: &Value) -> Option<Found> {
    let object = content.as_object()?;
    let wait = millis(object.get("retryAfterMs"))
        .or_else(|| millis(object.get("retry_after_ms")))
        .or_else(|| seconds(object.get("retry_after")))
        .or_else(|| seconds(object.get("retryAfter")));
    let said = wait.is_some()
        || matches!(
            object.get("status").and_then(Value::as_str),
            Some("rate_limited" | "quota_exhausted")
        );
    said.then_some(Found {
        wait,
        source: "structuredContent",
    })
}

fn millis(value: Option<&Value>) -> Option<Duration> {
    bounded(value?.as_f64()? / 1_000.0)
}

fn seconds(value: Option<&Value>) -> Option<Duration> {
    match value? {
        Value::Number(number) => bounded(number.as_f64()?),
        Value::String(text) => duration(text),
        _ => None,
    }
}

/// A wait of `seconds`, if it is one: not negative, not NaN, not absurd.
fn bounded(seconds: f64) -> Option<Duration> {
    Duration::try_from_secs_f64(seconds)
        .ok()
        .filter(|wait| *wait <= MAX_WAIT)
}

/// The first wait a text states ("retry after 30s"), if it states one.
fn stated_wait(text: &str) -> Option<Duration> {
    let captures = WAIT.as_ref()?.captures(text)?;
    duration(captures.get(1)?.as_str())
}

/// `"30s"`, `"1m30s"`, `"6.5 seconds"`, `"120ms"`, `"50m"`, or a plain
/// number of seconds. Anything else, or a wait past [`MAX_WAIT`], is none.
pub(crate) fn duration(text: &str) -> Option<Duration> {
    let mut total = Duration::ZERO;
    let mut rest = text.trim();
    let mut parts = 0;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest[..digits].parse().ok()?;
        rest = rest[digits..].trim_start();
        let unit_len = rest
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(rest.len());
        let unit = rest[..unit_len].to_ascii_lowercase();
        rest = rest[unit_len..].trim_start();
        let scale = match unit.as_str() {
            "" | "s" | "sec" | "secs" | "second" | "seconds" => 1.0,
            "ms" | "millisecond" | "milliseconds" => 0.001,
            "m" | "min" | "mins" | "minute" | "minutes" => 60.0,
            "h" | "hour" | "hours" => 3_600.0,
            _ => return None,
        };
        total = total.checked_add(bounded(number * scale)?)?;
        parts += 1;
    }
    (parts > 0 && total <= MAX_WAIT).then_some(total)
}

/// The first `max` bytes of `text`, cut at a character boundary.
fn clip(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn error_result(text: &str) -> Vec<u8> {
        json!({"content": [{"type": "text", "text": text}], "isError": true})
            .to_string()
            .into_bytes()
    }

    fn detect(text: &str) -> Option<Found> {
        Detector::default().tool_result(&error_result(text))
    }

    const S: fn(u64) -> Option<Duration> = |s| Some(Duration::from_secs(s));

    /// Representative tool-error texts of real servers. The shapes come from:
    /// GitHub's REST errors as github-mcp-server passes them on ("API rate
    /// limit exceeded for user ID …", the secondary-limit message, and its
    /// "[rate reset in …]" suffix); Slack's `ratelimited` error; Google APIs'
    /// `RESOURCE_EXHAUSTED` / "Quota exceeded for quota metric"; OpenAI's
    /// "Rate limit reached … Please try again in 6.5s" and "You exceeded your
    /// current quota"; Anthropic's `rate_limit_error`; Notion's
    /// `rate_limited` code; Python SDK servers that wrap httpx's
    /// "Client error '429 Too Many Requests'"; Linear's "Rate limit exceeded".
    #[test]
    fn real_servers_rate_limit_texts() {
        let table: &[(&str, Option<Duration>)] = &[
            (
                "failed to search: GET https://api.github.com/search/issues: 403 API rate limit exceeded for user ID 1234. [rate reset in 50m]",
                S(3000),
            ),
            (
                "403 You have exceeded a secondary rate limit. Please wait a few minutes before you try again.",
                None,
            ),
            ("Slack API error: ratelimited", None),
            (
                "googleapi: Error 429: Quota exceeded for quota metric 'Queries' and limit 'Queries per minute per user', rateLimitExceeded",
                None,
            ),
            (
                "RESOURCE_EXHAUSTED: Resource has been exhausted (e.g. check quota). retry after 30s",
                S(30),
            ),
            (
                "Error code: 429 - {'error': {'message': 'Rate limit reached for gpt-4o in organization org-x on requests per min (RPM): Limit 500, Used 500, Requested 1. Please try again in 6.5s.', 'type': 'requests', 'code': 'rate_limit_exceeded'}}",
                Some(Duration::from_millis(6500)),
            ),
            (
                "You exceeded your current quota, please check your plan and billing details.",
                None,
            ),
            (
                r#"{"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}"#,
                None,
            ),
            (
                "Notion API error: rate_limited. You have been rate limited. Please try again in 1m30s",
                S(90),
            ),
            (
                "Client error '429 Too Many Requests' for url 'https://api.example.com/v1/items'",
                None,
            ),
            ("Rate limit exceeded. Retry after 12 seconds.", S(12)),
            ("HTTP 429: retry-after: 2", S(2)),
            (
                "status code 429, retry in 500ms",
                Some(Duration::from_millis(500)),
            ),
            ("Too many requests; wait 2 minutes", S(120)),
        ];
        for (text, wait) in table {
            let found = detect(text).unwrap_or_else(|| panic!("not detected: {text}"));
            assert_eq!(found.wait, *wait, "{text}");
        }
    }

    /// Ordinary tool errors, some mentioning numbers or limits: none is a rate limit.
    #[test]
    fn ordinary_errors_are_not_rate_limits() {
        for text in [
            "Issue #429 not found",
            "failed to read line 429 of main.rs",
            "Error: file not found: /tmp/x",
            "limit must be between 1 and 100",
            "Invalid rate_limit setting in request body",
            "403 Resource not accessible by integration",
            "422 Validation Failed: title is too long (maximum is 256 characters)",
            "Please retry after fixing the query syntax",
            "The rate of change exceeded the threshold",
            "connection refused; retry after 3s", // a wait alone is not a refusal
            "quota: 5 GiB used of 10 GiB",
            "Timeout after 30s waiting for the database",
        ] {
            assert_eq!(detect(text), None, "{text}");
        }
        // Not an error: never read.
        let ok = json!({"content": [{"type": "text", "text": "API rate limit exceeded"}], "isError": false});
        assert_eq!(
            Detector::default().tool_result(ok.to_string().as_bytes()),
            None
        );
        assert_eq!(Detector::default().tool_result(b"not json"), None);
    }

    #[test]
    fn structured_content_carries_the_wait() {
        let detector = Detector::default();
        let result = |structured: Value| {
            json!({"content": [], "structuredContent": structured, "isError": true})
                .to_string()
                .into_bytes()
        };
        let found = detector.tool_result(&result(json!({"retryAfterMs": 1500})));
        assert_eq!(
            found.map(|f| f.wait),
            Some(Some(Duration::from_millis(1500)))
        );
        let found = detector.tool_result(&result(json!({"error": "x", "retry_after": 30})));
        assert_eq!(found.map(|f| f.wait), Some(S(30)));
        let found = detector.tool_result(&result(json!({"retry_after": "2m"})));
        assert_eq!(found.map(|f| f.wait), Some(S(120)));
        let found = detector.tool_result(&result(
            json!({"status": "rate_limited", "retry_after_ms": 400}),
        ));
        assert_eq!(
            found.map(|f| f.wait),
            Some(Some(Duration::from_millis(400)))
        );
        // A negative or absurd wait is no wait; no wait and no status is nothing.
        assert_eq!(
            detector.tool_result(&result(json!({"retry_after": -5}))),
            None
        );
        assert_eq!(
            detector.tool_result(&result(json!({"retryAfterMs": 1e300}))),
            None
        );
        assert_eq!(detector.tool_result(&result(json!({"code": 7}))), None);
    }

    #[test]
    fn configured_patterns_extend_the_detector() {
        let detector = Detector::new(vec![
            Regex::new(r"(?i)backend busy, come back in (\S+)").unwrap(),
            Regex::new(r"E_THROTTLE").unwrap(),
        ]);
        let found = detector
            .tool_result(&error_result("Backend busy, come back in 45s"))
            .unwrap();
        assert_eq!(found.wait, S(45));
        assert_eq!(found.source, "mcp.rate_limit_patterns");
        // No capture: a stated wait elsewhere in the text still counts.
        let found = detector
            .tool_result(&error_result("E_THROTTLE (retry after 3s)"))
            .unwrap();
        assert_eq!(found.wait, S(3));
        // A capture that is not a duration: a rate limit without a wait.
        let found = detector
            .tool_result(&error_result("Backend busy, come back in awhile"))
            .unwrap();
        assert_eq!(found.wait, None);
        assert!(detector.tool_result(&error_result("E_OTHER")).is_none());
    }

    #[test]
    fn jsonrpc_rate_limited_errors() {
        let found = jsonrpc_error(
            br#"{"code":-32023,"message":"Rate limited","data":{"retryAfterMs":2500}}"#,
        )
        .unwrap();
        assert_eq!(found.wait, Some(Duration::from_millis(2500)));
        let found = jsonrpc_error(br#"{"code":-32023,"message":"slow down"}"#).unwrap();
        assert_eq!(found.wait, None);
        let found =
            jsonrpc_error(br#"{"code":-32023,"message":"x","data":{"retryAfter":3}}"#).unwrap();
        assert_eq!(found.wait, S(3));
        assert!(jsonrpc_error(br#"{"code":-32603,"message":"rate limit exceeded"}"#).is_none());
        assert!(jsonrpc_error(b"[]").is_none());
    }

    #[test]
    fn durations() {
        assert_eq!(duration("30s"), S(30));
        assert_eq!(duration("1m30s"), S(90));
        assert_eq!(duration("1h 2m"), S(3720));
        assert_eq!(duration("12"), S(12));
        assert_eq!(duration("120ms"), Some(Duration::from_millis(120)));
        assert_eq!(duration("6.5 seconds"), Some(Duration::from_millis(6500)));
        assert_eq!(duration(""), None);
        assert_eq!(duration("soon"), None);
        assert_eq!(duration("3 fortnights"), None);
        assert_eq!(duration("99999999999h"), None);
        assert_eq!(duration("1.2.3s"), None);
    }

    #[test]
    fn huge_texts_are_read_only_in_part() {
        let long = format!("{} rate limit exceeded", "x".repeat(MAX_TEXT));
        assert_eq!(detect(&long), None);
        let multibyte = "é".repeat(MAX_TEXT);
        assert_eq!(detect(&multibyte), None);
    }

    proptest::proptest! {
        /// Outside input never panics the detector, and a wait it finds
        /// is never past the cap.
        #[test]
        fn any_answer_is_read_without_panic(text in ".{0,300}", bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..300)) {
            let detector = Detector::new(vec![Regex::new(r"(?i)slow (\S+)").unwrap()]);
            for found in [
                detector.tool_result(&error_result(&text)),
                detector.tool_result(&bytes),
                jsonrpc_error(&bytes),
                jsonrpc_error(json!({"code": -32023, "data": {"retryAfterMs": text.clone()}}).to_string().as_bytes()),
            ]
            .into_iter()
            .flatten()
            {
                proptest::prop_assert!(found.wait.is_none_or(|wait| wait <= MAX_WAIT));
            }
            let _ = duration(&text);
        }
    }
}
