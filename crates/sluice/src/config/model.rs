//! The gate's configuration as a harness writes it: defaults, credentials and tools.

use std::collections::BTreeMap;
use std::time::Duration;

use super::budgets::{GroupConfig, Spend, UnitConfig};
use crate::Rate;
use crate::signal::BodySignals;

/// Everything a [`Gate`](crate::Gate) needs to know about limits.
///
/// ```
/// use sluice::{CredentialConfig, GateConfig, ToolConfig};
/// let config = GateConfig::default()
///     .credential("support", CredentialConfig::with_rate("10/1s".parse().unwrap()).max_in_flight(4))
///     .tool("search_tickets", ToolConfig::read("support"))
///     .tool("create_ticket", ToolConfig::write("support"));
/// assert!(config.validate().is_ok());
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GateConfig {
    /// Values used where a credential or tool does not say.
    pub defaults: Defaults,
    /// Credentials by name: the unit a server throttles.
    pub credentials: BTreeMap<String, CredentialConfig>,
    /// Tools by name, each bound to one credential.
    pub tools: BTreeMap<String, ToolConfig>,
}

/// Gate-wide defaults and tuning.
#[derive(Debug, Clone, PartialEq)]
pub struct Defaults {
    /// A call's deadline when neither the call nor its tool sets one.
    pub deadline: Duration,
    /// Waits up to this long are absorbed below the model's view.
    pub inline_wait: Duration,
    /// How long a turn's read cache answers a repeated read.
    pub turn_cache_ttl: Duration,
    /// A server wait longer than this marks the scope's quota exhausted.
    pub quota_after: Duration,
    /// Attempts per call, the first included.
    pub max_attempts: u32,
    /// Full-jitter backoff: `U(0, min(cap, base * 2^attempt))`.
    pub backoff_base: Duration,
    /// The backoff's cap.
    pub backoff_cap: Duration,
    /// Retries per credential may be at most this share of recent requests...
    pub retry_ratio: f64,
    /// ...plus this many per retry window, so a quiet key can still retry.
    pub retry_floor: u32,
    /// The window the retry budget counts over.
    pub retry_window: Duration,
    /// The latency assumed before any is measured (Little's law, drain estimates).
    pub expected_latency: Duration,
    /// Extra spacing added to every rate window (at most a tenth of it), so
    /// that jitter in transit cannot make requests started a window apart
    /// arrive closer together than the server allows.
    pub window_margin: Duration,
    /// Scopes idle this long are forgotten (they are recreated fresh on use).
    pub scope_idle: Duration,
    /// At most this many upstream requests per turn (`None`: no budget).
    pub turn_budget: Option<u32>,
}

impl Default for Defaults {
    fn default() -> Self {
        Defaults {
            deadline: Duration::from_secs(30),
            inline_wait: Duration::from_secs(2),
            turn_cache_ttl: Duration::from_secs(3),
            quota_after: Duration::from_secs(300),
            max_attempts: 4,
            // The article's full-jitter defaults: base 0.5 s, cap 20 s.
            backoff_base: Duration::from_millis(500),
            backoff_cap: Duration::from_secs(20),
            // Finagle's RetryBudget defaults: 20% of requests, 10 per second floor over 10 s.
            retry_ratio: 0.2,
            retry_floor: 10,
            retry_window: Duration::from_secs(10),
            expected_latency: Duration::from_millis(500),
            // A request on a fresh connection reaches the server later than
            // one on a reused connection: ~2 ms on idle loopback, ~18 ms on a
            // loaded 2-core machine, more with TLS. 20 ms costs 2% of a
            // one-second window.
            window_margin: Duration::from_millis(20),
            scope_idle: Duration::from_secs(600),
            turn_budget: None,
        }
    }
}

/// One credential's limits.
#[derive(Debug, Clone, PartialEq)]
pub struct CredentialConfig {
    /// At most N starts in any window W; `None`: only the server's signals
    /// limit it (and `auto_rate`, if set). With `auto_rate` it is the ceiling.
    pub rate: Option<Rate>,
    /// Further windows that hold at the same time as `rate`
    /// (`rate = ["15/1s", "5000/1h"]`: `rate` is the first, these the rest).
    pub windows: Vec<Rate>,
    /// Limit groups inside the credential, by name.
    pub groups: BTreeMap<String, GroupConfig>,
    /// Units besides requests, by name.
    pub units: BTreeMap<String, UnitConfig>,
    /// `priorities.low`: the share of every window (0 to 1) that
    /// low-priority calls may start; `None`: no cap.
    pub low_share: Option<f64>,
    /// `rate = "auto"`: probe for the server's limit (see [`crate::adapt`]).
    pub auto_rate: bool,
    /// Adopt a lower rate the server states in a policy header (default on).
    pub learn: bool,
    /// The window of limits servers report without one (`X-RateLimit-Limit`:
    /// GitHub documents an hour), so that they can be learned.
    pub policy_window: Option<Duration>,
    /// Leave this much of each server window to the key's other users: stop
    /// spending when the server's reported remaining falls to it.
    pub reserve: Option<Reserve>,
    /// `max_in_flight = "auto"`: follow rate x smoothed latency, with
    /// `max_in_flight` (default 64) as the bound.
    pub auto_concurrency: bool,
    /// Set: GCRA token-bucket semantics with this burst instead of the exact window.
    pub burst: Option<u32>,
    /// Requests in flight at once; default from Little's law (rate x latency, at least 1).
    pub max_in_flight: Option<u32>,
    /// Calls that may wait for a permit; default the calls that can start
    /// within the inline wait, less those holding permits.
    pub queue: Option<u32>,
    /// Latency expected before any is measured; default [`Defaults::expected_latency`].
    pub expected_latency: Option<Duration>,
    /// Spend a budget shared with other processes (see [`crate::shared`]).
    pub shared: bool,
    /// `false`: shadow mode. Every decision is made and recorded (per
    /// scope, in [`crate::scope::ScopeStatus::shadow`], and as
    /// [`crate::Event::Shadow`]), but no call is delayed, shed or deferred
    /// by sluice: each is sent at once, in one attempt, and the server's
    /// answer comes back as is. Default `true`.
    pub enforce: bool,
    /// Which response bodies are read for signals: those of non-2xx
    /// responses (default), or JSON 2xx too (`graphql`).
    pub body_signals: BodySignals,
}

impl Default for CredentialConfig {
    fn default() -> Self {
        CredentialConfig {
            rate: None,
            windows: Vec::new(),
            groups: BTreeMap::new(),
            units: BTreeMap::new(),
            low_share: None,
            auto_rate: false,
            learn: true,
            policy_window: None,
            reserve: None,
            auto_concurrency: false,
            burst: None,
            max_in_flight: None,
            queue: None,
            expected_latency: None,
            shared: false,
            enforce: true,
            body_signals: BodySignals::Errors,
        }
    }
}

/// Headroom left on a shared key: a number of requests, or a share of the
/// server's stated limit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Reserve {
    /// Stop when this many remain.
    Requests(u64),
    /// Stop when this share of the limit remains (0 to 1).
    Fraction(f64),
}

impl Reserve {
    /// The requests to leave, for a window of `limit` requests.
    pub fn of(self, limit: Option<u64>) -> u64 {
        match self {
            Reserve::Requests(n) => n,
            // Rounded up: leaving a fraction of a request leaves one.
            Reserve::Fraction(share) => {
                limit.map_or(0, |limit| (limit as f64 * share).ceil() as u64)
            }
        }
    }
}

impl CredentialConfig {
    /// Probes for the server's limit (`rate = "auto"`); a set `rate` stays the ceiling.
    pub fn auto_rate(mut self) -> Self {
        self.auto_rate = true;
        self
    }

    /// Lets the concurrency cap follow rate x latency, up to `max_in_flight`.
    pub fn auto_concurrency(mut self) -> Self {
        self.auto_concurrency = true;
        self
    }

    /// Sets the headroom left to the key's other users.
    pub fn reserve(mut self, reserve: Reserve) -> Self {
        self.reserve = Some(reserve);
        self
    }

    /// Reads JSON 2xx bodies too, as GraphQL APIs need.
    pub fn body_signals(mut self, mode: BodySignals) -> Self {
        self.body_signals = mode;
        self
    }

    /// Turns learning stated policies on or off.
    pub fn learn(mut self, learn: bool) -> Self {
        self.learn = learn;
        self
    }

    /// Sets the window assumed for limits reported without one.
    pub fn policy_window(mut self, window: Duration) -> Self {
        self.policy_window = Some(window);
        self
    }

    /// A credential limited to `rate`.
    pub fn with_rate(rate: Rate) -> Self {
        CredentialConfig {
            rate: Some(rate),
            ..Self::default()
        }
    }

    /// Adds a window that holds at the same time as `rate`.
    pub fn window(mut self, rate: Rate) -> Self {
        if self.rate.is_none() {
            self.rate = Some(rate);
        } else {
            self.windows.push(rate);
        }
        self
    }

    /// Every configured window: `rate` first, then `windows`.
    pub fn rates(&self) -> Vec<Rate> {
        self.rate.iter().chain(&self.windows).copied().collect()
    }

    /// Adds or replaces a limit group.
    pub fn group(mut self, name: &str, group: GroupConfig) -> Self {
        self.groups.insert(name.to_owned(), group);
        self
    }

    /// Adds or replaces a unit.
    pub fn unit(mut self, name: &str, unit: UnitConfig) -> Self {
        self.units.insert(name.to_owned(), unit);
        self
    }

    /// Caps low-priority calls at `share` (0 to 1) of every window.
    pub fn low_share(mut self, share: f64) -> Self {
        self.low_share = Some(share);
        self
    }

    /// Sets the burst (selects GCRA semantics).
    pub fn burst(mut self, burst: u32) -> Self {
        self.burst = Some(burst);
        self
    }

    /// Sets the concurrency cap.
    pub fn max_in_flight(mut self, max: u32) -> Self {
        self.max_in_flight = Some(max);
        self
    }

    /// Sets the admission queue's bound.
    pub fn queue(mut self, queue: u32) -> Self {
        self.queue = Some(queue);
        self
    }

    /// Shares the credential's budget with other processes.
    pub fn shared(mut self, shared: bool) -> Self {
        self.shared = shared;
        self
    }

    /// Enforces the limits (`true`, the default) or only records what
    /// enforcing them would do (`false`: shadow mode).
    pub fn enforce(mut self, enforce: bool) -> Self {
        self.enforce = enforce;
        self
    }

    /// Sets the latency assumed until one is measured.
    pub fn expected_latency(mut self, latency: Duration) -> Self {
        self.expected_latency = Some(latency);
        self
    }
}

/// One tool: what the model calls, bound to one credential.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolConfig {
    /// The credential it spends.
    pub credential: String,
    /// A read: coalesced within a turn, cached, retried on 5xx.
    pub read: bool,
    /// A write that is safe to repeat (retried on 5xx and connection errors).
    pub idempotent: bool,
    /// Its default deadline; else [`Defaults::deadline`].
    pub deadline: Option<Duration>,
    /// Its group, costs, settles and default priority.
    pub spend: Spend,
}

impl ToolConfig {
    /// A read on `credential`.
    pub fn read(credential: &str) -> Self {
        ToolConfig {
            credential: credential.to_owned(),
            read: true,
            idempotent: true,
            deadline: None,
            spend: Spend::default(),
        }
    }

    /// A write on `credential` (not idempotent).
    pub fn write(credential: &str) -> Self {
        ToolConfig {
            credential: credential.to_owned(),
            read: false,
            idempotent: false,
            deadline: None,
            spend: Spend::default(),
        }
    }

    /// Marks a write safe to repeat.
    pub fn idempotent(mut self, idempotent: bool) -> Self {
        self.idempotent = idempotent;
        self
    }

    /// Sets the tool's default deadline.
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// Makes its calls spend the credential's group `group` too.
    pub fn group(mut self, group: &str) -> Self {
        self.spend.group = Some(group.to_owned());
        self
    }

    /// Makes each call cost `cost` in `unit`, besides its request.
    pub fn cost(mut self, unit: &str, cost: super::Cost) -> Self {
        self.spend.cost.insert(unit.to_owned(), cost);
        self
    }

    /// Reads the true cost in `unit` from the answer.
    pub fn settle(mut self, unit: &str, settle: super::Settle) -> Self {
        self.spend.settle.insert(unit.to_owned(), settle);
        self
    }

    /// Sets its calls' default priority.
    pub fn priority(mut self, priority: super::Priority) -> Self {
        self.spend.priority = priority;
        self
    }
}

impl GateConfig {
    /// Adds or replaces a credential.
    pub fn credential(mut self, name: &str, credential: CredentialConfig) -> Self {
        self.credentials.insert(name.to_owned(), credential);
        self
    }

    /// Adds or replaces a tool.
    pub fn tool(mut self, name: &str, tool: ToolConfig) -> Self {
        self.tools.insert(name.to_owned(), tool);
        self
    }

    /// Replaces the defaults.
    pub fn defaults(mut self, defaults: Defaults) -> Self {
        self.defaults = defaults;
        self
    }

    /// Puts every credential in shadow mode (`enforce = false`): a trial
    /// run that records what sluice would do and throttles nothing.
    pub fn shadow_all(mut self) -> Self {
        for credential in self.credentials.values_mut() {
            credential.enforce = false;
        }
        self
    }
}
