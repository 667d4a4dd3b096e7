//! The engine's part of `[credentials.NAME]`: rate, concurrency, queue and
//! what to learn, read the same way by every command.

use std::collections::BTreeMap;

use sluice::signal::BodySignals;
use sluice::{Cost, CredentialConfig, GroupConfig, Rate, Reserve, Settle, Spend, UnitConfig};

use crate::error::ConfigError;
use crate::file::{CostText, CredentialFile, NumberOrText, RateText, ToolFile};
use crate::value;

/// A credential's limits; the engine checks their combination (`burst`
/// needs a rate, ...) when the gate is validated.
pub(crate) fn limits(name: &str, file: &CredentialFile) -> Result<CredentialConfig, ConfigError> {
    let field = |f: &str| format!("credentials.{name}.{f}");
    let (listed, auto_rate) = match &file.rate {
        Some(RateText::One(text)) if text.trim() == "auto" => (Vec::new(), true),
        Some(text) => (rates(text, &field("rate"))?, false),
        None => (Vec::new(), false),
    };
    let (rate, windows) = match listed.split_first() {
        Some((first, rest)) => (Some(*first), rest.to_vec()),
        None => (None, Vec::new()),
    };
    let mut groups = BTreeMap::new();
    for (group, section) in &file.groups {
        let field = |f: &str| format!("credentials.{name}.groups.{group}.{f}");
        let rates = match &section.rate {
            Some(text) => rates(text, &field("rate"))?,
            None => return Err(ConfigError::invalid(field("rate"), "a group needs a rate")),
        };
        groups.insert(
            group.clone(),
            GroupConfig {
                rates,
                burst: section.burst,
                max_in_flight: section.max_in_flight,
                queue: section.queue,
            },
        );
    }
    let mut units = BTreeMap::new();
    for (unit, section) in &file.units {
        let field = |f: &str| format!("credentials.{name}.units.{unit}.{f}");
        let rates = match &section.rate {
            Some(text) => rates(text, &field("rate"))?,
            None => return Err(ConfigError::invalid(field("rate"), "a unit needs a rate")),
        };
        units.insert(
            unit.clone(),
            UnitConfig {
                rates,
                burst: section.burst,
            },
        );
    }
    let low_share = file
        .priorities
        .as_ref()
        .and_then(|priorities| priorities.low.as_deref())
        .map(|text| share(text, &field("priorities.low")))
        .transpose()?;
    let (max_in_flight, auto_concurrency) = match &file.max_in_flight {
        None => (None, false),
        Some(NumberOrText::Text(text)) if text.trim() == "auto" => (None, true),
        Some(NumberOrText::Number(n)) => {
            let n = u32::try_from(*n).map_err(|_| {
                ConfigError::invalid(field("max_in_flight"), format!("{n} is out of range"))
            })?;
            (Some(n), false)
        }
        Some(NumberOrText::Text(text)) => {
            return Err(ConfigError::invalid(
                field("max_in_flight"),
                format!("{text:?} is neither a whole number nor \"auto\""),
            ));
        }
    };
    let reserve = file
        .reserve
        .as_ref()
        .map(|value| reserve(value, &field("reserve")))
        .transpose()?;
    let expected_latency = file
        .expected_latency
        .as_deref()
        .map(|text| value::duration_field(text, &field("expected_latency")))
        .transpose()?;
    let policy_window = file
        .policy_window
        .as_deref()
        .map(|text| value::duration_field(text, &field("policy_window")))
        .transpose()?;
    let body_signals = body_signals(file, &field("body_signals"))?;
    Ok(CredentialConfig {
        body_signals,
        rate,
        windows,
        groups,
        units,
        low_share,
        auto_rate,
        learn: file.learn.unwrap_or(true),
        policy_window,
        reserve,
        auto_concurrency,
        burst: file.burst,
        max_in_flight,
        queue: file.queue,
        expected_latency,
        shared: file.shared,
        enforce: file.enforce.unwrap_or(true),
    })
}

/// `body_signals = "errors"` (the default) or `"graphql"`.
pub(crate) fn body_signals(file: &CredentialFile, field: &str) -> Result<BodySignals, ConfigError> {
    match file.body_signals.as_deref().map(str::trim) {
        None | Some("errors") => Ok(BodySignals::Errors),
        Some("graphql") => Ok(BodySignals::Graphql),
        Some(other) => Err(ConfigError::invalid(
            field,
            format!("{other:?} is neither \"errors\" nor \"graphql\""),
        )),
    }
}

/// `reserve = 3` (requests) or `reserve = "10%"` (of the server's stated limit).
fn reserve(value: &NumberOrText, field: &str) -> Result<Reserve, ConfigError> {
    match value {
        NumberOrText::Number(n) => u64::try_from(*n)
            .map(Reserve::Requests)
            .map_err(|_| ConfigError::invalid(field, format!("{n} must not be negative"))),
        NumberOrText::Text(text) => text
            .trim()
            .strip_suffix('%')
            .and_then(|percent| percent.trim().parse::<f64>().ok())
            .filter(|percent| percent.is_finite())
            .map(|percent| Reserve::Fraction(percent / 100.0))
            .ok_or_else(|| {
                ConfigError::invalid(
                    field,
                    format!("{text:?} is neither a number of requests nor a share such as \"10%\""),
                )
            }),
    }
}

/// `"10/1s"` or a list of them; an entry's error names its index (`rate[1]`).
fn rates(text: &RateText, field: &str) -> Result<Vec<Rate>, ConfigError> {
    let parse = |text: &str, field: String| {
        text.parse::<Rate>()
            .map_err(|error| ConfigError::invalid(field, error.to_string()))
    };
    match text {
        RateText::One(text) => Ok(vec![parse(text, field.to_owned())?]),
        RateText::Many(list) if list.is_empty() => Err(ConfigError::invalid(
            field,
            "a list of rates needs at least one",
        )),
        RateText::Many(list) => list
            .iter()
            .enumerate()
            .map(|(index, text)| parse(text, format!("{field}[{index}]")))
            .collect(),
    }
}

/// `"50%"`: a share above 0 and at most 1.
fn share(text: &str, field: &str) -> Result<f64, ConfigError> {
    text.trim()
        .strip_suffix('%')
        .and_then(|percent| percent.trim().parse::<f64>().ok())
        .filter(|percent| percent.is_finite() && *percent > 0.0 && *percent <= 100.0)
        .map(|percent| percent / 100.0)
        .ok_or_else(|| {
            ConfigError::invalid(
                field,
                format!("{text:?} is not a share above 0% and at most 100%, such as \"50%\""),
            )
        })
}

/// `[tools.NAME]`'s `group`, `cost`, `settle` and `priority`.
pub(crate) fn spend(name: &str, file: &ToolFile) -> Result<Spend, ConfigError> {
    let field = |f: &str| format!("tools.{name}.{f}");
    let mut cost = BTreeMap::new();
    for (unit, text) in &file.cost {
        let field = field(&format!("cost.{unit}"));
        let value = match text {
            CostText::Number(n) => u64::try_from(*n)
                .map(Cost::Fixed)
                .map_err(|_| ConfigError::invalid(&field, format!("{n} must not be negative")))?,
            CostText::Text(text) => Cost::argument(text).ok_or_else(|| {
                ConfigError::invalid(
                    &field,
                    format!("{text:?} is neither a whole number nor an argument such as \"{{max_tokens}}\""),
                )
            })?,
        };
        cost.insert(unit.clone(), value);
    }
    let mut settle = BTreeMap::new();
    for (unit, text) in &file.settle {
        let value = Settle::parse(text).ok_or_else(|| {
            ConfigError::invalid(
                field(&format!("settle.{unit}")),
                format!("{text:?} is neither a JSON pointer such as \"/usage/total_tokens\" nor \"header:NAME\""),
            )
        })?;
        settle.insert(unit.clone(), value);
    }
    let priority = file
        .priority
        .as_deref()
        .map(|text| {
            text.parse().map_err(|error: sluice::PriorityError| {
                ConfigError::invalid(field("priority"), error.to_string())
            })
        })
        .transpose()?
        .unwrap_or_default();
    Ok(Spend {
        group: file.group.clone(),
        cost,
        settle,
        priority,
    })
}
