//! The budgets a credential states besides its own rate: limit groups,
//! units (a second currency), priorities, and what each tool spends.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::Rate;

/// A limit inside a credential (`[credentials.X.groups.G]`): a scope of its
/// own, with its own windows, semaphore and queue, spent only by the tools
/// that name it (and by them on the credential's budget too).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GroupConfig {
    /// Every window holds at once; at least one.
    pub rates: Vec<Rate>,
    /// Set: GCRA token-bucket semantics (the first window) with this burst.
    pub burst: Option<u32>,
    /// Requests of the group in flight at once; default from Little's law.
    pub max_in_flight: Option<u32>,
    /// Calls that may wait for one of the group's permits; default the calls
    /// that can start within the inline wait, less those holding permits.
    pub queue: Option<u32>,
}

impl GroupConfig {
    /// A group limited to `rate`.
    pub fn with_rate(rate: Rate) -> Self {
        GroupConfig {
            rates: vec![rate],
            ..Self::default()
        }
    }

    /// Adds a window that holds at the same time.
    pub fn window(mut self, rate: Rate) -> Self {
        self.rates.push(rate);
        self
    }

    /// Sets the group's concurrency cap.
    pub fn max_in_flight(mut self, max: u32) -> Self {
        self.max_in_flight = Some(max);
        self
    }

    /// Sets the burst (selects GCRA semantics).
    pub fn burst(mut self, burst: u32) -> Self {
        self.burst = Some(burst);
        self
    }
}

/// A currency besides requests (`[credentials.X.units.U]`): tokens, points.
/// `rate = "900/1m"` reads "at most 900 units spent in any minute".
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UnitConfig {
    /// Every window holds at once; at least one.
    pub rates: Vec<Rate>,
    /// Set: GCRA token-bucket semantics (the first window) with this burst, in units.
    pub burst: Option<u32>,
}

impl UnitConfig {
    /// A unit limited to `rate`.
    pub fn with_rate(rate: Rate) -> Self {
        UnitConfig {
            rates: vec![rate],
            burst: None,
        }
    }

    /// Adds a window that holds at the same time.
    pub fn window(mut self, rate: Rate) -> Self {
        self.rates.push(rate);
        self
    }
}

/// How urgent a call is. Waiting callers are served highest first; a
/// credential's `priorities.low` caps what low calls may start.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Priority {
    /// Served after everything else, and capped by `priorities.low`.
    Low,
    /// The default.
    #[default]
    Normal,
    /// Served first.
    High,
}

impl Priority {
    /// The name used in configuration and on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Priority::Low => "low",
            Priority::Normal => "normal",
            Priority::High => "high",
        }
    }
}

impl fmt::Display for Priority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A priority that is not `high`, `normal` or `low`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not one of \"high\", \"normal\", \"low\"")]
pub struct PriorityError(pub String);

impl FromStr for Priority {
    type Err = PriorityError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.trim().to_ascii_lowercase().as_str() {
            "low" => Ok(Priority::Low),
            "normal" => Ok(Priority::Normal),
            "high" => Ok(Priority::High),
            _ => Err(PriorityError(text.to_owned())),
        }
    }
}

/// What one call of a tool spends in a unit, besides its one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cost {
    /// A fixed amount.
    Fixed(u64),
    /// The value of the call's argument of that name (`"{max_tokens}"`):
    /// a non-negative integer, or the call fails with an `error` naming it.
    Argument(String),
}

impl Cost {
    /// Parses `"{arg}"`; anything else is not an argument reference.
    pub fn argument(text: &str) -> Option<Self> {
        let name = text.trim().strip_prefix('{')?.strip_suffix('}')?.trim();
        let valid = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.');
        valid.then(|| Cost::Argument(name.to_owned()))
    }
}

/// Where a call's true cost in a unit is read after the answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settle {
    /// A JSON pointer into the response body (`/usage/total_tokens`).
    Pointer(String),
    /// A response header's value (`header:x-usage-tokens`).
    Header(String),
}

impl Settle {
    /// Parses `"/json/pointer"` or `"header:NAME"`; `None` for anything else.
    pub fn parse(text: &str) -> Option<Self> {
        let text = text.trim();
        if let Some(name) = text.strip_prefix("header:") {
            let name = name.trim();
            return http::HeaderName::from_bytes(name.as_bytes())
                .ok()
                .map(|_| Settle::Header(name.to_ascii_lowercase()));
        }
        text.starts_with('/')
            .then(|| Settle::Pointer(text.to_owned()))
    }
}

/// What a tool spends beyond the credential: its group, its costs, how they
/// settle, and its default priority.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Spend {
    /// The credential's group its calls also spend.
    pub group: Option<String>,
    /// Per call, by unit.
    pub cost: BTreeMap<String, Cost>,
    /// Where the true cost is read, by unit.
    pub settle: BTreeMap<String, Settle>,
    /// The priority of its calls unless a call says otherwise.
    pub priority: Priority,
}

impl Spend {
    /// A call's request and nothing else, at normal priority (the default).
    pub(crate) const fn none() -> Self {
        Spend {
            group: None,
            cost: BTreeMap::new(),
            settle: BTreeMap::new(),
            priority: Priority::Normal,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_costs_settles_and_priorities() {
        assert_eq!(
            Cost::argument("{max_tokens}"),
            Some(Cost::Argument("max_tokens".into()))
        );
        assert_eq!(Cost::argument("max_tokens"), None);
        assert_eq!(Cost::argument("{}"), None);
        assert_eq!(
            Settle::parse("/usage/total_tokens"),
            Some(Settle::Pointer("/usage/total_tokens".into()))
        );
        assert_eq!(
            Settle::parse("header:X-Usage"),
            Some(Settle::Header("x-usage".into()))
        );
        assert_eq!(Settle::parse("header:bad name"), None);
        assert_eq!(Settle::parse("usage"), None);
        assert_eq!("HIGH".parse::<Priority>(), Ok(Priority::High));
        assert!("urgent".parse::<Priority>().is_err());
        assert!(Priority::High > Priority::Normal && Priority::Normal > Priority::Low);
    }
}
