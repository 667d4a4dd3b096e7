//! What a response said about rate limits, merged from every header family.

use std::time::Duration;

use serde::Serialize;

/// The scope every credential has: the key itself. Signals that name no
/// scope describe this one.
pub const DEFAULT_SCOPE: &str = "api_key";

/// The longest delay a header may ask for; anything later is ignored as
/// absurd. Long enough for a monthly quota's reset.
pub const MAX_DELAY: Duration = Duration::from_secs(32 * 24 * 3600);

/// Longest scope name kept from a header; longer names fold into [`DEFAULT_SCOPE`].
const MAX_SCOPE_NAME: usize = 64;

/// One response's rate signals.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct Signal {
    /// The response's HTTP status.
    pub http_status: u16,
    /// The response itself was a rejection for rate or quota.
    pub throttled: bool,
    /// The server's explicit wait (the Retry-After family), if any.
    pub retry_after: Option<Wait>,
    /// Every scope the response described, highest-precedence report first.
    pub scopes: Vec<ScopeSignal>,
    /// A scope the server named as the reason for a rejection, if it did.
    pub reason_scope: Option<String>,
    /// The rejection was about requests in flight, not their rate ("too
    /// many concurrent requests"): fewer should run at once.
    pub concurrency: bool,
    /// The body named a spent quota (Google's `quotaExceeded`, OpenAI's
    /// `insufficient_quota`): waiting a little will not help.
    pub quota: bool,
    /// A wait stated as points of a cost budget (GraphQL query cost).
    pub cost: Option<CostWait>,
    /// The body profile that read something from the body, if one did.
    pub body: Option<&'static str>,
}

/// A wait a cost budget implies: `requested` points are needed, `available`
/// are left, and the budget refills at a stated rate (Shopify's GraphQL
/// `throttleStatus`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CostWait {
    /// The budget's unit, e.g. `points`: a credential's unit of that name
    /// is the budget it describes.
    pub unit: &'static str,
    /// What the rejected request would have cost.
    pub requested: u64,
    /// What the budget had left.
    pub available: u64,
    /// The time until it holds `requested`: (requested - available) / restore rate.
    pub delay: Duration,
}

/// A wait the server asked for, and which header said so.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Wait {
    /// How long from the response until the next call may start.
    pub delay: Duration,
    /// The header that decided it, e.g. `retry-after-ms`.
    pub source: &'static str,
    /// The scope it applies to, when known.
    pub scope: Option<String>,
}

/// What the server reported about one scope (one bucket on its side).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ScopeSignal {
    /// The scope's name ([`DEFAULT_SCOPE`] when the server names none).
    pub name: String,
    /// Requests allowed per window.
    pub limit: Option<u64>,
    /// Requests left in the current window.
    pub remaining: Option<u64>,
    /// Delay until the window resets (or one more request frees).
    pub reset: Option<Duration>,
    /// The window's length, when the server states its policy.
    pub window: Option<Duration>,
    /// The header family that reported it.
    pub source: &'static str,
}

impl ScopeSignal {
    /// An empty report for scope `name` from `source`. Names that are empty,
    /// too long or not plain visible text become [`DEFAULT_SCOPE`].
    pub fn new(name: &str, source: &'static str) -> Self {
        ScopeSignal {
            name: scope_name(name),
            limit: None,
            remaining: None,
            reset: None,
            window: None,
            source,
        }
    }

    /// True when it carries at least one number.
    pub fn is_informative(&self) -> bool {
        self.limit.is_some()
            || self.remaining.is_some()
            || self.reset.is_some()
            || self.window.is_some()
    }

    /// The delay before the next call on this scope: its reset when nothing
    /// remains, zero when something does, `None` when it does not say.
    pub fn wait(&self) -> Option<Duration> {
        match self.remaining? {
            0 => self.reset,
            _ => Some(Duration::ZERO),
        }
    }

    /// Zero left of a policy whose window is a day or longer: a quota that
    /// waiting a little will not refill.
    pub fn is_spent_long_window(&self) -> bool {
        self.remaining == Some(0)
            && self
                .window
                .is_some_and(|w| w >= Duration::from_secs(86_400))
    }

    /// A quota spent, by the pipeline's rule: a long window with nothing
    /// left, or nothing left until a reset later than `quota_after`.
    pub fn is_quota_spent(&self, quota_after: Duration) -> bool {
        self.is_spent_long_window()
            || (self.remaining == Some(0) && self.reset.is_some_and(|r| r > quota_after))
    }
}

fn scope_name(name: &str) -> String {
    let name = name.trim();
    let plain = name
        .chars()
        .all(|c| c.is_ascii_graphic() && c != '"' && c != '\\');
    if name.is_empty() || name.len() > MAX_SCOPE_NAME || !plain {
        DEFAULT_SCOPE.to_owned()
    } else {
        name.to_ascii_lowercase()
    }
}

impl Signal {
    /// An empty signal for a response with `http_status`.
    pub fn new(http_status: u16) -> Self {
        Signal {
            http_status,
            ..Signal::default()
        }
    }

    /// Adds a scope report unless a higher-precedence one already describes
    /// that scope, in which case only its missing numbers are filled in.
    pub fn add_scope(&mut self, report: ScopeSignal) {
        if !report.is_informative() {
            return;
        }
        match self.scopes.iter_mut().find(|s| s.name == report.name) {
            Some(existing) => {
                // The source names the header that decides the wait: the
                // one that supplied the reset.
                if existing.reset.is_none() && report.reset.is_some() {
                    existing.source = report.source;
                }
                existing.limit = existing.limit.or(report.limit);
                existing.remaining = existing.remaining.or(report.remaining);
                existing.reset = existing.reset.or(report.reset);
                existing.window = existing.window.or(report.window);
            }
            None => self.scopes.push(report),
        }
    }

    /// Sets the explicit wait unless a higher-precedence header already did.
    pub fn set_retry_after(&mut self, delay: Duration, source: &'static str) {
        if self.retry_after.is_none() {
            self.retry_after = Some(Wait {
                delay,
                source,
                scope: None,
            });
        }
    }

    /// Sets a wait read from the body, unless a header already said when the
    /// next call may start: headers take precedence over the body.
    pub fn set_body_wait(&mut self, delay: Duration, source: &'static str) {
        let header_said = self.retry_after.is_some()
            || self
                .scopes
                .iter()
                .any(|s| s.remaining == Some(0) && s.reset.is_some());
        if !header_said {
            self.set_retry_after(delay, source);
        }
    }

    /// Marks the response a rejection that `profile` read from the body.
    pub fn reject_by_body(&mut self, profile: &'static str) {
        self.throttled = true;
        self.body.get_or_insert(profile);
    }

    /// The scope a rejection or explicit wait applies to: the one the server
    /// named, else the exhausted scope with the longest reset, else the only
    /// scope described, else [`DEFAULT_SCOPE`].
    pub fn blamed_scope(&self) -> &str {
        if let Some(name) = &self.reason_scope {
            return name;
        }
        let exhausted = self
            .scopes
            .iter()
            .filter(|s| s.remaining == Some(0))
            .max_by_key(|s| s.reset.unwrap_or(Duration::ZERO));
        match (exhausted, self.scopes.as_slice()) {
            (Some(scope), _) => &scope.name,
            (None, [only]) => &only.name,
            _ => DEFAULT_SCOPE,
        }
    }

    /// The most restrictive scope: the exhausted one with the longest wait,
    /// else the one with the fewest remaining.
    pub fn most_restrictive(&self) -> Option<&ScopeSignal> {
        self.scopes.iter().max_by_key(|s| {
            (
                s.wait().unwrap_or(Duration::ZERO),
                u64::MAX - s.remaining.unwrap_or(u64::MAX),
            )
        })
    }

    /// How long before the next call may start: the explicit wait first (it
    /// takes precedence over any reset), else the longest wait among scopes
    /// with nothing remaining, else zero when some scope shows room; `None`
    /// when the response said nothing about rate.
    pub fn wait(&self) -> Option<Wait> {
        if let Some(wait) = &self.retry_after {
            return Some(Wait {
                scope: Some(
                    wait.scope
                        .clone()
                        .unwrap_or_else(|| self.blamed_scope().to_owned()),
                ),
                ..wait.clone()
            });
        }
        let scope = self.most_restrictive()?;
        Some(Wait {
            delay: scope.wait()?,
            source: scope.source,
            scope: Some(scope.name.clone()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(name: &str, remaining: u64, reset_s: u64) -> ScopeSignal {
        ScopeSignal {
            remaining: Some(remaining),
            reset: Some(Duration::from_secs(reset_s)),
            ..ScopeSignal::new(name, "test")
        }
    }

    #[test]
    fn the_longest_exhausted_scope_decides() {
        let mut signal = Signal::new(200);
        signal.add_scope(scope("requests", 3, 1));
        signal.add_scope(scope("tokens", 0, 30));
        signal.add_scope(scope("burst", 0, 5));
        let wait = signal.wait().unwrap();
        assert_eq!(wait.delay, Duration::from_secs(30));
        assert_eq!(wait.scope.as_deref(), Some("tokens"));
    }

    #[test]
    fn retry_after_wins_and_is_blamed_on_the_exhausted_scope() {
        let mut signal = Signal::new(429);
        signal.add_scope(scope("search", 0, 30));
        signal.set_retry_after(Duration::from_secs(2), "retry-after");
        signal.set_retry_after(Duration::from_secs(9), "later-profile");
        let wait = signal.wait().unwrap();
        assert_eq!(
            (wait.delay, wait.source),
            (Duration::from_secs(2), "retry-after")
        );
        assert_eq!(wait.scope.as_deref(), Some("search"));
    }

    #[test]
    fn room_left_means_go_now_and_silence_means_none() {
        let mut signal = Signal::new(200);
        assert_eq!(signal.wait(), None);
        signal.add_scope(scope("api_key", 5, 10));
        assert_eq!(signal.wait().unwrap().delay, Duration::ZERO);
    }

    #[test]
    fn hostile_scope_names_fold_into_the_key() {
        assert_eq!(ScopeSignal::new("", "t").name, DEFAULT_SCOPE);
        assert_eq!(ScopeSignal::new(&"x".repeat(65), "t").name, DEFAULT_SCOPE);
        assert_eq!(ScopeSignal::new("a b", "t").name, DEFAULT_SCOPE);
        assert_eq!(ScopeSignal::new("Search", "t").name, "search");
    }

    #[test]
    fn lower_precedence_reports_only_fill_gaps() {
        let mut signal = Signal::new(200);
        signal.add_scope(ScopeSignal {
            remaining: Some(1),
            ..ScopeSignal::new("api_key", "first")
        });
        signal.add_scope(scope("api_key", 7, 4));
        assert_eq!(signal.scopes.len(), 1);
        assert_eq!(signal.scopes[0].remaining, Some(1));
        assert_eq!(signal.scopes[0].reset, Some(Duration::from_secs(4)));
    }
}
