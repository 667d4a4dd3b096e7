//! `sluice inspect`: what sluice makes of one HTTP response (head and body), explained or as JSON.

use std::fmt::Write as _;
use std::fs::File;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use sluice::signal::{
    self, DEFAULT_SCOPE, Fields, Head, ResponseClock, ScopeSignal, Signal, Wait, parse_response,
};

mod json;

/// Flags of `sluice inspect`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// A raw response as `curl -si URL` prints it (status line, headers, a blank line, an
    /// optional body), or just its head as `curl -sD - -o /dev/null URL` prints it; `-` or
    /// absent reads standard input. The body is read whatever the status and content type.
    #[arg(value_name = "FILE")]
    file: Option<PathBuf>,

    /// When the response was received, RFC 3339 or epoch seconds [default: now]; used only
    /// when the response has no Date header.
    #[arg(long, value_name = "TIME", value_parser = parse_now)]
    now: Option<SystemTime>,

    /// Print one JSON object instead of an explanation.
    #[arg(long)]
    json: bool,
}

/// Input read at most. A response head is a few kilobytes and an error body not much
/// more; a 10 MB file or an endless pipe is not read to its end.
const MAX_INPUT: usize = 1 << 20;

/// Exit status when the input has no status line (usage errors are clap's 2 as well).
const EXIT_NO_STATUS_LINE: u8 = 2;

/// Runs `sluice inspect`.
pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let (input, truncated) = read_input(args.file.as_deref())?;
    let (head, body) = match parse_response(&input) {
        Ok(parsed) => parsed,
        Err(error) => {
            // Nothing useful to do if standard error is gone too.
            let _ = writeln!(io::stderr(), "sluice inspect: {error}");
            return Ok(ExitCode::from(EXIT_NO_STATUS_LINE));
        }
    };
    let received = args.now.unwrap_or_else(SystemTime::now);
    let reading = Reading::new(&head, body, received);
    let text = if args.json {
        let mut json = serde_json::to_string(&reading.report())?;
        json.push('\n');
        json
    } else {
        reading.explain(truncated)
    };
    let mut stdout = io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        // `sluice inspect | head -1` is not a failure.
        Err(error) if error.kind() != io::ErrorKind::BrokenPipe => {
            Err(error).context("writing to standard output")
        }
        _ => Ok(ExitCode::SUCCESS),
    }
}

/// Reads at most [`MAX_INPUT`] bytes from `file` (standard input for `-` or none);
/// true when there was more.
fn read_input(file: Option<&Path>) -> anyhow::Result<(Vec<u8>, bool)> {
    let limit = u64::try_from(MAX_INPUT)
        .unwrap_or(u64::MAX)
        .saturating_add(1);
    let mut bytes = Vec::new();
    match file {
        Some(path) if path != Path::new("-") => {
            let file =
                File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
            file.take(limit)
                .read_to_end(&mut bytes)
                .with_context(|| format!("cannot read {}", path.display()))?;
        }
        _ => {
            io::stdin()
                .lock()
                .take(limit)
                .read_to_end(&mut bytes)
                .context("cannot read standard input")?;
        }
    }
    let truncated = bytes.len() > MAX_INPUT;
    bytes.truncate(MAX_INPUT);
    Ok((bytes, truncated))
}

/// `--now`: epoch seconds (decimals allowed) or an RFC 3339 timestamp with an offset.
fn parse_now(text: &str) -> Result<SystemTime, String> {
    let text = text.trim();
    if let Some(time) = epoch_seconds(text) {
        return Ok(time);
    }
    let expected = "expected RFC 3339 (2024-03-05T14:00:00Z) or epoch seconds (1709647200)";
    let timestamp: jiff::Timestamp = text
        .parse()
        .map_err(|error| format!("{expected}: {error}"))?;
    SystemTime::try_from(timestamp).map_err(|error| format!("{expected}: {error}"))
}

fn epoch_seconds(text: &str) -> Option<SystemTime> {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    // Twelve digits reach the year 33658; more is not a time.
    if !digits(whole) || whole.len() > 12 || !(fraction.is_empty() || digits(fraction)) {
        return None;
    }
    let nanos = fraction
        .bytes()
        .chain(std::iter::repeat(b'0'))
        .take(9)
        .fold(0, |acc, b| acc * 10 + u32::from(b - b'0'));
    UNIX_EPOCH.checked_add(Duration::new(whole.parse().ok()?, nanos))
}

/// One response as sluice reads it, and what the pipeline does with it.
struct Reading<'a> {
    head: &'a Head,
    signal: Signal,
    /// The wait before the next call on the deciding scope.
    wait: Option<Wait>,
    /// The scope that decides: the one the wait applies to, else the most restrictive.
    scope: Option<String>,
    /// The scope whose quota is spent, if one is.
    quota_scope: Option<String>,
    quota_after: Duration,
    clock: ResponseClock,
    received: SystemTime,
}

impl<'a> Reading<'a> {
    /// Reads `body` as a credential with `body_signals = "graphql"` would, and
    /// whatever the status: everything sluice can read.
    fn new(head: &'a Head, body: &[u8], received: SystemTime) -> Self {
        let signal = signal::read_with_body(head.status, &head.headers, body, received);
        let clock = ResponseClock::new(&Fields::new(&head.headers), received);
        let wait = signal.wait();
        let scope = wait
            .as_ref()
            .and_then(|w| w.scope.clone())
            .or_else(|| signal.most_restrictive().map(|s| s.name.clone()));
        let quota_after = sluice::Defaults::default().quota_after;
        let quota_scope = quota_scope(&signal, wait.as_ref(), quota_after);
        Reading {
            head,
            signal,
            wait,
            scope,
            quota_scope,
            quota_after,
            clock,
            received,
        }
    }

    fn scope_signal(&self) -> Option<&ScopeSignal> {
        let name = self.scope.as_deref()?;
        self.signal.scopes.iter().find(|s| s.name == name)
    }

    /// The human explanation: what the server said, what sluice will do, and why.
    fn explain(&self, truncated: bool) -> String {
        let mut out = String::new();
        let status = self.head.status.as_u16();
        let reason = match self.head.reason.as_str() {
            "" => self.head.status.canonical_reason().unwrap_or(""),
            reason => reason,
        };
        let verdict = if self.signal.throttled {
            "the server refused this call for rate or quota"
        } else if status == 429 || status == 503 || status == 403 {
            "a refusal, but not one for rate (no wait and nothing spent)"
        } else {
            "not a rate-limit refusal"
        };
        let status_line = match reason {
            "" => format!("HTTP {status}"),
            reason => format!("HTTP {status} {reason}"),
        };
        let _ = writeln!(out, "{status_line}: {verdict}.");

        let _ = writeln!(out, "\nThe server said:");
        let mut said = false;
        if let Some(wait) = &self.signal.retry_after {
            said = true;
            let _ = writeln!(out, "  {}: wait {}", wait.source, human(wait.delay));
        }
        for scope in &self.signal.scopes {
            said = true;
            let _ = writeln!(out, "  {}", describe_scope(scope));
        }
        if let Some(reason) = &self.signal.reason_scope {
            said = true;
            let _ = writeln!(out, "  the refusal was for scope \"{reason}\"");
        }
        if let Some(profile) = self.signal.body {
            said = true;
            let what = if self.signal.concurrency {
                "too many requests in flight"
            } else if self.signal.quota {
                "a spent quota"
            } else {
                "a refusal for rate"
            };
            let _ = writeln!(out, "  the body ({profile}): {what}");
        }
        if let Some(cost) = &self.signal.cost {
            let _ = writeln!(
                out,
                "  the body's cost budget: {} {} needed, {} available, refilled in {}",
                cost.requested,
                cost.unit,
                cost.available,
                human(cost.delay)
            );
        }
        if !said {
            let _ = writeln!(out, "  nothing sluice reads about rate limits");
        }

        let _ = writeln!(out, "\nWhat sluice will do:");
        let _ = writeln!(out, "  {}", self.decision());
        if self.scope.as_deref().is_some_and(|s| s != DEFAULT_SCOPE) {
            let _ = writeln!(
                out,
                "  Each scope the server names is its own bucket under the credential, and the \
                 tool that got this response is bound to it: calls on other scopes are not held."
            );
        }
        let _ = writeln!(out, "  {}", self.quota_line());
        let _ = writeln!(out, "  {}", self.clock_line());
        if self.head.skipped > 0 {
            let lines = if self.head.skipped == 1 {
                "line"
            } else {
                "lines"
            };
            let _ = writeln!(
                out,
                "  Skipped {} malformed header {lines}.",
                self.head.skipped
            );
        }
        if truncated {
            let _ = writeln!(
                out,
                "  Read only the first {} KiB of the input.",
                MAX_INPUT / 1024
            );
        }
        out
    }

    fn decision(&self) -> String {
        let scope = self.scope.as_deref().unwrap_or(DEFAULT_SCOPE);
        if let Some(quota) = &self.quota_scope {
            let until = self
                .quota_reset()
                .map(|d| format!(" for {}", human(d)))
                .unwrap_or_else(|| " until it resets".to_owned());
            return format!(
                "Scope \"{quota}\" is out of quota: every call on it returns quota_exhausted \
                 without sending{until}, and the operator is told."
            );
        }
        if self.signal.concurrency {
            return "The server limits requests in flight, not their rate: sluice lowers the \
                    credential's max_in_flight below what was running (it climbs back by one \
                    as requests succeed) and retries the refused call under the lower cap."
                .to_owned();
        }
        match &self.wait {
            None if self.signal.throttled => "The server refused without saying how long to wait: \
                 sluice retries with full-jitter backoff, within the call's deadline and the \
                 credential's retry budget."
                .to_owned(),
            None => "The headers say nothing about rate: calls are paced by sluice's configured \
                 limits only."
                .to_owned(),
            Some(wait) if wait.delay.is_zero() => {
                let left = self
                    .scope_signal()
                    .and_then(|s| s.remaining)
                    .map(|n| format!(" ({n} left)"))
                    .unwrap_or_default();
                if self.signal.throttled {
                    format!(
                        "The server asked for no wait ({}): the refused call may be retried at \
                         once on scope \"{scope}\", paced by sluice's own limits.",
                        wait.source
                    )
                } else {
                    format!("The next call on scope \"{scope}\" may go now{left}.")
                }
            }
            Some(wait) => {
                let retry = if self.signal.throttled {
                    " The refused call is retried after it if its deadline allows; waits up to \
                     the inline threshold (2s) stay below the model's view, longer ones return \
                     rate_limited with retry_after_ms."
                } else {
                    ""
                };
                format!(
                    "No call on scope \"{scope}\" starts for {} (decided by {}).{retry}",
                    human(wait.delay),
                    wait.source
                )
            }
        }
    }

    /// How long the spent quota lasts: the wait if it decided, else the scope's reset.
    fn quota_reset(&self) -> Option<Duration> {
        let name = self.quota_scope.as_deref()?;
        match &self.wait {
            Some(wait) if wait.scope.as_deref() == Some(name) && wait.delay > self.quota_after => {
                Some(wait.delay)
            }
            _ => self
                .signal
                .scopes
                .iter()
                .find(|s| s.name == name)
                .and_then(|s| s.reset),
        }
    }

    fn quota_line(&self) -> String {
        let rule = format!(
            "a wait over {}, or a policy of a day or more with nothing left",
            human(self.quota_after)
        );
        match &self.quota_scope {
            Some(_) => format!("Quota exhausted ({rule})."),
            None => format!("Quota not exhausted ({rule} would be)."),
        }
    }

    fn clock_line(&self) -> String {
        if self.clock.uses_date_header() {
            let date = self.head.headers.get("date").and_then(|d| d.to_str().ok());
            format!(
                "Absolute times (HTTP-dates, epochs, RFC 3339) were measured against the \
                 response's Date header ({}), so the local clock's skew does not matter.",
                date.unwrap_or("?")
            )
        } else {
            format!(
                "Absolute times (HTTP-dates, epochs, RFC 3339) were measured against the local \
                 clock ({}), as the response has no valid Date header; set it with --now.",
                humantime::format_rfc3339_seconds(self.received)
            )
        }
    }
}

/// The scope whose quota the response shows spent, by the pipeline's rule with the
/// default `quota_after`: a wait longer than it, a scope with nothing left until a
/// reset later than it, or a policy of a day or more with nothing left.
fn quota_scope(signal: &Signal, wait: Option<&Wait>, quota_after: Duration) -> Option<String> {
    if signal.throttled && signal.quota {
        // The body named the quota spent (Google's `quotaExceeded`).
        return Some(
            wait.and_then(|w| w.scope.clone())
                .unwrap_or_else(|| signal.blamed_scope().to_owned()),
        );
    }
    if let Some(wait) = wait.filter(|w| w.delay > quota_after) {
        return Some(
            wait.scope
                .clone()
                .unwrap_or_else(|| signal.blamed_scope().to_owned()),
        );
    }
    signal
        .scopes
        .iter()
        .find(|s| s.is_quota_spent(quota_after))
        .map(|s| s.name.clone())
}

fn describe_scope(scope: &ScopeSignal) -> String {
    let mut text = format!("scope \"{}\":", scope.name);
    match (scope.remaining, scope.limit) {
        (Some(remaining), Some(limit)) => {
            let _ = write!(text, " {remaining} of {limit} left");
        }
        (Some(remaining), None) => {
            let _ = write!(text, " {remaining} left");
        }
        (None, Some(limit)) => {
            let _ = write!(text, " limit {limit}");
        }
        (None, None) => {}
    }
    if let Some(window) = scope.window {
        let _ = write!(text, " per {}", human(window));
    }
    if let Some(reset) = scope.reset {
        let _ = write!(text, ", resets in {}", human(reset));
    }
    let _ = write!(text, " [{}]", scope.source);
    text
}

/// Whole milliseconds, rounded up so that a wait shown is never shorter than the real one.
fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX)
}

/// A duration for people, to the millisecond (`4s 200ms`, `1h 30m`).
fn human(duration: Duration) -> String {
    let ms = Duration::from_millis(millis(duration));
    humantime::format_duration(ms).to_string()
}

#[cfg(test)]
mod tests;
