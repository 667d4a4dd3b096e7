//! Checking a configuration once, where it is built: every field in range, every error naming its field.

use std::time::Duration;

use super::{ConfigError, Cost, Defaults, GateConfig};
use crate::deadline;

impl GateConfig {
    /// Checks every field; the error names the first bad one.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.defaults.validate()?;
        for (name, credential) in &self.credentials {
            credential.resolve(name, &self.defaults)?;
        }
        for (name, tool) in &self.tools {
            let field = |f: &str| format!("tools.{name}.{f}");
            if !self.credentials.contains_key(&tool.credential) {
                return Err(ConfigError::new(
                    field("credential"),
                    format!("names unknown credential {:?}", tool.credential),
                ));
            }
            self.validate_spend(name, tool)?;
            if let Some(deadline) = tool.deadline {
                if deadline.is_zero() {
                    return Err(ConfigError::new(
                        field("deadline"),
                        "must be longer than zero",
                    ));
                }
                bounded(field("deadline"), deadline)?;
            }
        }
        Ok(())
    }
}

impl GateConfig {
    /// A tool's group, costs and settles name what its credential configures,
    /// and a fixed cost fits the unit's smallest window.
    fn validate_spend(&self, name: &str, tool: &super::ToolConfig) -> Result<(), ConfigError> {
        let field = |f: &str| format!("tools.{name}.{f}");
        let Some(credential) = self.credentials.get(&tool.credential) else {
            return Ok(());
        };
        let spend = &tool.spend;
        if let Some(group) = &spend.group
            && !credential.groups.contains_key(group)
        {
            return Err(ConfigError::new(
                field("group"),
                format!(
                    "names unknown group {group:?} of credential {:?}",
                    tool.credential
                ),
            ));
        }
        for (unit, cost) in &spend.cost {
            let Some(config) = credential.units.get(unit) else {
                return Err(ConfigError::new(
                    field(&format!("cost.{unit}")),
                    format!(
                        "names unknown unit {unit:?} of credential {:?}",
                        tool.credential
                    ),
                ));
            };
            let smallest = config
                .rates
                .iter()
                .map(|rate| u64::from(rate.count().get()))
                .chain(config.burst.map(u64::from))
                .min();
            if let (Cost::Fixed(amount), Some(smallest)) = (cost, smallest)
                && *amount > smallest
            {
                return Err(ConfigError::new(
                    field(&format!("cost.{unit}")),
                    format!("{amount} can never fit: the unit allows at most {smallest} at once"),
                ));
            }
        }
        for unit in spend.settle.keys() {
            if !credential.units.contains_key(unit) {
                return Err(ConfigError::new(
                    field(&format!("settle.{unit}")),
                    format!(
                        "names unknown unit {unit:?} of credential {:?}",
                        tool.credential
                    ),
                ));
            }
        }
        Ok(())
    }
}

impl Defaults {
    fn validate(&self) -> Result<(), ConfigError> {
        let field = |f: &str| format!("defaults.{f}");
        let positive = [
            ("deadline", self.deadline),
            ("turn_cache_ttl", self.turn_cache_ttl),
            ("quota_after", self.quota_after),
            ("backoff_base", self.backoff_base),
            ("retry_window", self.retry_window),
            ("expected_latency", self.expected_latency),
            ("scope_idle", self.scope_idle),
        ];
        for (name, value) in positive {
            if value.is_zero() {
                return Err(ConfigError::new(field(name), "must be longer than zero"));
            }
        }
        let durations = [
            ("deadline", self.deadline),
            ("inline_wait", self.inline_wait),
            ("turn_cache_ttl", self.turn_cache_ttl),
            ("quota_after", self.quota_after),
            ("backoff_base", self.backoff_base),
            ("backoff_cap", self.backoff_cap),
            ("retry_window", self.retry_window),
            ("expected_latency", self.expected_latency),
            ("window_margin", self.window_margin),
            ("scope_idle", self.scope_idle),
        ];
        for (name, value) in durations {
            bounded(field(name), value)?;
        }
        if self.backoff_cap < self.backoff_base {
            return Err(ConfigError::new(
                field("backoff_cap"),
                "must be at least backoff_base",
            ));
        }
        if self.max_attempts == 0 {
            return Err(ConfigError::new(
                field("max_attempts"),
                "must be at least 1",
            ));
        }
        if !(0.0..=1.0).contains(&self.retry_ratio) {
            return Err(ConfigError::new(
                field("retry_ratio"),
                "must be between 0 and 1",
            ));
        }
        if self.turn_budget == Some(0) {
            return Err(ConfigError::new(field("turn_budget"), "must be at least 1"));
        }
        Ok(())
    }
}

/// Every duration the library takes is at most
/// [`Deadline::MAX_LEN`](crate::Deadline::MAX_LEN), so that no instant
/// built from one can overflow.
pub(super) fn bounded(field: String, value: Duration) -> Result<(), ConfigError> {
    deadline::check(value).map_err(|error| ConfigError::new(field, error.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{CredentialConfig, ToolConfig};

    fn base() -> GateConfig {
        GateConfig::default()
            .credential(
                "support",
                CredentialConfig::with_rate("10/1s".parse().unwrap()),
            )
            .tool("search", ToolConfig::read("support"))
    }

    #[test]
    fn bad_values_name_their_field() {
        let cases: Vec<(GateConfig, &str)> = vec![
            (
                base().credential(
                    "support",
                    CredentialConfig::with_rate("1/1s".parse().unwrap()).burst(0),
                ),
                "credentials.support.burst",
            ),
            (
                base().credential("support", CredentialConfig::default().burst(3)),
                "credentials.support.burst",
            ),
            (
                base().credential("support", CredentialConfig::default().max_in_flight(0)),
                "credentials.support.max_in_flight",
            ),
            (
                base().tool("search", ToolConfig::read("billing")),
                "tools.search.credential",
            ),
            (
                base().tool(
                    "search",
                    ToolConfig::read("support").deadline(Duration::ZERO),
                ),
                "tools.search.deadline",
            ),
            (
                base().defaults(Defaults {
                    max_attempts: 0,
                    ..Defaults::default()
                }),
                "defaults.max_attempts",
            ),
            (
                base().defaults(Defaults {
                    retry_ratio: f64::NAN,
                    ..Defaults::default()
                }),
                "defaults.retry_ratio",
            ),
            (
                base().defaults(Defaults {
                    deadline: Duration::ZERO,
                    ..Defaults::default()
                }),
                "defaults.deadline",
            ),
        ];
        for (config, field) in cases {
            let error = config.validate().unwrap_err();
            assert_eq!(error.field, field, "{error}");
            assert!(error.to_string().starts_with(field));
        }
        assert!(base().validate().is_ok());
    }

    /// Issue 13: a duration past a week is refused where it is built, naming its field.
    #[test]
    fn durations_over_a_week_name_their_field() {
        let week = crate::Deadline::MAX_LEN;
        let over = week + Duration::from_secs(1);
        let cases: Vec<(GateConfig, &str)> = vec![
            (
                base().tool(
                    "search",
                    ToolConfig::read("support").deadline(Duration::MAX),
                ),
                "tools.search.deadline",
            ),
            (
                base().defaults(Defaults {
                    deadline: over,
                    ..Defaults::default()
                }),
                "defaults.deadline",
            ),
            (
                base().defaults(Defaults {
                    backoff_cap: Duration::MAX,
                    ..Defaults::default()
                }),
                "defaults.backoff_cap",
            ),
            (
                base().defaults(Defaults {
                    window_margin: over,
                    ..Defaults::default()
                }),
                "defaults.window_margin",
            ),
            (
                base().credential(
                    "support",
                    CredentialConfig::default().expected_latency(Duration::MAX),
                ),
                "credentials.support.expected_latency",
            ),
            (
                base().credential("support", CredentialConfig::default().policy_window(over)),
                "credentials.support.policy_window",
            ),
        ];
        for (config, field) in cases {
            let error = config.validate().unwrap_err();
            assert_eq!(error.field, field, "{error}");
            assert!(
                error
                    .message
                    .ends_with("exceeds the longest allowed, 7 days"),
                "{error}"
            );
        }
        let at_the_bound = base().defaults(Defaults {
            deadline: week,
            scope_idle: week,
            ..Defaults::default()
        });
        assert!(at_the_bound.validate().is_ok());
    }
}
