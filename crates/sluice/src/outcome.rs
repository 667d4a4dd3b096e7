//! What the model is told: exactly one [`Outcome`] per call, serialized with `status` as the tag.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::body::Body;

/// The model-facing result of one tool call.
///
/// "Not yet, and when" ([`Outcome::RateLimited`]) is kept apart from
/// "not this turn" ([`Outcome::QuotaExhausted`]) and from real failures, so a
/// deferred call is never presented as a broken one.
///
/// ```
/// use sluice::{Outcome, Reason};
/// let outcome = Outcome::rate_limited("api_key", Reason::Throttled, std::time::Duration::from_millis(4200), None);
/// let json = serde_json::to_value(&outcome).unwrap();
/// assert_eq!(json["status"], "rate_limited");
/// assert_eq!(json["retry_after_ms"], 4200);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Outcome {
    /// The call was answered (any status the caller treats as success).
    Ok {
        /// The upstream HTTP status.
        http_status: u16,
        /// The upstream body: JSON as JSON, anything else as a string,
        /// parsed when first read, and shared by every call the same
        /// request answers (see [`Body`]).
        body: Body,
    },
    /// Deferred: nothing (more) was sent; the same call may be re-issued later.
    RateLimited {
        /// The scope that deferred it.
        scope: String,
        /// Why it was deferred.
        reason: Reason,
        /// How long to wait before re-issuing it.
        retry_after_ms: u64,
        /// The window that deferred it, as configured (`"30/1m"`, or
        /// `"900 points/1m"` for a unit), when one of sluice's own did.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        window: Option<String>,
        /// One sentence the model can act on.
        hint: String,
    },
    /// A quota is spent: calls on this scope will not succeed before its reset.
    QuotaExhausted {
        /// The exhausted scope.
        scope: String,
        /// Time until the quota resets.
        retry_after_ms: u64,
        /// One sentence the model can act on.
        hint: String,
    },
    /// The call's deadline ran out.
    TimedOut {
        /// The deadline it had.
        after_ms: u64,
        /// One sentence the model can act on.
        hint: String,
    },
    /// A real failure: the server refused or broke, or the call was invalid.
    Error {
        /// The upstream HTTP status, when there was a response.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        http_status: Option<u16>,
        /// What went wrong.
        message: String,
    },
}

/// Why a call was deferred.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Reason {
    /// The server, or our bucket on its behalf, said not yet.
    Throttled,
    /// Our queue for this scope is full.
    Shed,
    /// The credential's retry budget is spent.
    Budget,
    /// This turn has caused as many upstream requests as it may.
    TurnBudget,
    /// Low-priority calls have used their share of a window
    /// (`priorities.low`); higher-priority calls still go through.
    Priority,
}

impl Reason {
    /// The snake_case name used on the wire and in metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Throttled => "throttled",
            Reason::Shed => "shed",
            Reason::Budget => "budget",
            Reason::TurnBudget => "turn_budget",
            Reason::Priority => "priority",
        }
    }
}

/// The shed hint: one sentence, its count in agreement ("1 call is
/// running", "4 calls are running"), and no count when none is known.
fn shed_hint(running: Option<usize>) -> String {
    let running = match running {
        None => String::new(),
        Some(0) => " while none is running yet".to_owned(),
        Some(1) => " while 1 call is running".to_owned(),
        Some(n) => format!(" while {n} calls are running"),
    };
    format!(
        "Too many calls are waiting on this key{running}; re-issue this call after the wait, or batch."
    )
}

/// Rounds up, so a positive wait is never reported as 0 ms.
pub(crate) fn millis_ceil(duration: Duration) -> u64 {
    let micros = duration.as_micros();
    u64::try_from(micros.div_ceil(1_000)).unwrap_or(u64::MAX)
}

impl Outcome {
    /// A deferral. `running` (calls in flight on the scope) feeds the shed hint.
    pub fn rate_limited(
        scope: &str,
        reason: Reason,
        retry_after: Duration,
        running: Option<usize>,
    ) -> Self {
        let retry_after_ms = millis_ceil(retry_after).max(1);
        let hint = match reason {
            Reason::Shed => shed_hint(running),
            Reason::Budget => {
                "Retries on this key are paused to protect it; wait, then re-issue the same call.".to_owned()
            }
            Reason::TurnBudget => {
                "This turn has made as many requests as it may; stop fanning out, use the results you have, and continue in a later turn.".to_owned()
            }
            Reason::Throttled => {
                "Calls on this key are deferred; wait, then re-issue the same call.".to_owned()
            }
            Reason::Priority => {
                "Low-priority calls on this key have used their share for now; wait, then re-issue the same call.".to_owned()
            }
        };
        Outcome::RateLimited {
            scope: scope.to_owned(),
            reason,
            retry_after_ms,
            window: None,
            hint,
        }
    }

    /// Names the window that deferred a `rate_limited` outcome; any other
    /// outcome is returned as is.
    pub fn in_window(mut self, label: Option<String>) -> Self {
        if let Outcome::RateLimited { window, .. } = &mut self {
            *window = label;
        }
        self
    }

    /// A deferral of a call that calls of higher priority displaced (they
    /// took the slot or the queue place it waited for): reason `priority`,
    /// whichever window then deferred it. Any other outcome is returned as is.
    pub(crate) fn outranked(self) -> Self {
        match self {
            Outcome::RateLimited {
                scope,
                reason: Reason::Throttled,
                retry_after_ms,
                window,
                ..
            } => Outcome::RateLimited {
                scope,
                reason: Reason::Priority,
                retry_after_ms,
                window,
                hint: "Calls of higher priority on this key took this call's turn; wait, then re-issue the same call.".to_owned(),
            },
            other => other,
        }
    }

    /// A spent quota on `scope`, resetting in `retry_after`.
    pub fn quota_exhausted(scope: &str, retry_after: Duration) -> Self {
        let hint = if retry_after >= Duration::from_secs(6 * 3600) {
            format!("The {scope} quota for this key is spent; do not retry this turn.")
        } else {
            format!(
                "The {scope} quota for this key is spent until it resets; do not retry this turn."
            )
        };
        Outcome::QuotaExhausted {
            scope: scope.to_owned(),
            retry_after_ms: millis_ceil(retry_after).max(1),
            hint,
        }
    }

    /// The deadline `after` ran out; `maybe_sent` when a request may have
    /// reached the server (a write may then have happened).
    pub fn timed_out(after: Duration, maybe_sent: bool) -> Self {
        let hint = if maybe_sent {
            "The call did not finish within its deadline and may have reached the server; check before repeating a write."
        } else {
            "The call did not start within its deadline and nothing was sent; re-issue it later or with a longer deadline."
        };
        Outcome::TimedOut {
            after_ms: millis_ceil(after),
            hint: hint.to_owned(),
        }
    }

    /// A failure with an optional upstream status.
    pub fn error(http_status: Option<u16>, message: impl Into<String>) -> Self {
        Outcome::Error {
            http_status,
            message: message.into(),
        }
    }

    /// The tag: `ok`, `rate_limited`, `quota_exhausted`, `timed_out` or `error`.
    pub fn status(&self) -> &'static str {
        match self {
            Outcome::Ok { .. } => "ok",
            Outcome::RateLimited { .. } => "rate_limited",
            Outcome::QuotaExhausted { .. } => "quota_exhausted",
            Outcome::TimedOut { .. } => "timed_out",
            Outcome::Error { .. } => "error",
        }
    }

    /// True for [`Outcome::Ok`].
    pub fn is_ok(&self) -> bool {
        matches!(self, Outcome::Ok { .. })
    }

    /// The wait the model is asked to observe, for deferrals and quotas.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            Outcome::RateLimited { retry_after_ms, .. }
            | Outcome::QuotaExhausted { retry_after_ms, .. } => {
                Some(Duration::from_millis(*retry_after_ms))
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn every_variant_serializes_to_the_contract() {
        let ok = Outcome::Ok {
            http_status: 200,
            body: json!({}).into(),
        };
        assert_eq!(
            serde_json::to_value(&ok).unwrap(),
            json!({"status":"ok","http_status":200,"body":{}})
        );

        let throttled = Outcome::rate_limited(
            "api_key",
            Reason::Throttled,
            Duration::from_millis(4200),
            None,
        );
        assert_eq!(
            serde_json::to_value(&throttled).unwrap(),
            json!({"status":"rate_limited","scope":"api_key","reason":"throttled","retry_after_ms":4200,
                   "hint":"Calls on this key are deferred; wait, then re-issue the same call."})
        );

        let shed = Outcome::rate_limited(
            "api_key",
            Reason::Shed,
            Duration::from_millis(1800),
            Some(4),
        );
        assert_eq!(
            serde_json::to_value(&shed).unwrap(),
            json!({"status":"rate_limited","scope":"api_key","reason":"shed","retry_after_ms":1800,
                   "hint":"Too many calls are waiting on this key while 4 calls are running; re-issue this call after the wait, or batch."})
        );

        let quota = Outcome::quota_exhausted("daily", Duration::from_millis(43_200_000));
        assert_eq!(
            serde_json::to_value(&quota).unwrap(),
            json!({"status":"quota_exhausted","scope":"daily","retry_after_ms":43_200_000,
                   "hint":"The daily quota for this key is spent; do not retry this turn."})
        );

        let timed_out =
            serde_json::to_value(Outcome::timed_out(Duration::from_secs(30), false)).unwrap();
        assert_eq!(timed_out["status"], "timed_out");
        assert_eq!(timed_out["after_ms"], 30_000);
        assert!(
            timed_out["hint"]
                .as_str()
                .unwrap()
                .contains("nothing was sent")
        );

        let error = Outcome::error(Some(500), "upstream failed");
        assert_eq!(
            serde_json::to_value(&error).unwrap(),
            json!({"status":"error","http_status":500,"message":"upstream failed"})
        );
        let bare = serde_json::to_value(Outcome::error(None, "unknown tool \"x\"")).unwrap();
        assert_eq!(
            bare,
            json!({"status":"error","message":"unknown tool \"x\""})
        );

        let budget = serde_json::to_value(Outcome::rate_limited(
            "api_key",
            Reason::Budget,
            Duration::from_millis(10),
            None,
        ))
        .unwrap();
        assert_eq!(budget["reason"], "budget");
        let turn = serde_json::to_value(Outcome::rate_limited(
            "api_key",
            Reason::TurnBudget,
            Duration::from_millis(10),
            None,
        ))
        .unwrap();
        assert_eq!(turn["reason"], "turn_budget");
    }

    /// Issue 50: every hint a deferral can carry reads as one sentence in
    /// agreement with its count, for none, one and many calls running.
    #[test]
    fn every_hint_is_one_grammatical_sentence_for_0_1_and_many() {
        let reasons = [
            Reason::Throttled,
            Reason::Shed,
            Reason::Budget,
            Reason::TurnBudget,
            Reason::Priority,
        ];
        let wait = Duration::from_millis(1500);
        let mut hints: Vec<(String, Option<usize>)> = Vec::new();
        for reason in reasons {
            for running in [None, Some(0), Some(1), Some(4)] {
                let outcome = Outcome::rate_limited("api_key", reason, wait, running);
                let Outcome::RateLimited { hint, .. } = outcome else {
                    unreachable!()
                };
                hints.push((hint, running));
            }
        }
        let outranked = Outcome::rate_limited("api_key", Reason::Throttled, wait, None).outranked();
        let Outcome::RateLimited { hint, .. } = outranked else {
            unreachable!()
        };
        hints.push((hint, None));
        for wait in [Duration::from_secs(60), Duration::from_secs(86_400)] {
            let Outcome::QuotaExhausted { hint, .. } = Outcome::quota_exhausted("daily", wait)
            else {
                unreachable!()
            };
            hints.push((hint, None));
        }
        for maybe_sent in [false, true] {
            let Outcome::TimedOut { hint, .. } = Outcome::timed_out(wait, maybe_sent) else {
                unreachable!()
            };
            hints.push((hint, None));
        }
        for (hint, running) in &hints {
            // One sentence: a capital first, one full stop, at the end.
            assert!(hint.starts_with(char::is_uppercase), "{hint}");
            assert!(hint.ends_with('.'), "{hint}");
            assert_eq!(hint.matches(". ").count(), 0, "{hint}");
            for broken in ["1 are", "1 calls", "0 are", " 1 were", "  "] {
                assert!(!hint.contains(broken), "{hint}");
            }
            assert!(!hint.contains("(s)"), "{hint}");
            if hint.starts_with("Too many calls are waiting") {
                let expected = match running {
                    None => "Too many calls are waiting on this key; ",
                    Some(0) => " while none is running yet;",
                    Some(1) => " while 1 call is running;",
                    Some(_) => " while 4 calls are running;",
                };
                assert!(hint.contains(expected), "{hint}");
            }
        }
    }

    #[test]
    fn outcomes_round_trip() {
        let shed =
            Outcome::rate_limited("api_key", Reason::Shed, Duration::from_millis(5), Some(2));
        let back: Outcome = serde_json::from_str(&serde_json::to_string(&shed).unwrap()).unwrap();
        assert_eq!(back, shed);
    }

    #[test]
    fn waits_round_up_and_are_never_zero() {
        let o = Outcome::rate_limited("api_key", Reason::Throttled, Duration::from_micros(1), None);
        assert_eq!(o.retry_after(), Some(Duration::from_millis(1)));
        assert_eq!(millis_ceil(Duration::from_micros(1_001)), 2);
    }
}
