//! `[defaults]`: the engine's defaults for every credential and call, each
//! duration bounded.

use sluice::Defaults;

use crate::error::ConfigError;
use crate::file::DefaultsFile;
use crate::value;

/// `[defaults]` over the engine's own; the engine checks the combination
/// (`backoff_cap` at least `backoff_base`, ...) when the gate is validated.
pub(crate) fn defaults(file: &DefaultsFile) -> Result<Defaults, ConfigError> {
    let mut defaults = Defaults::default();
    let durations = [
        ("deadline", &file.deadline, &mut defaults.deadline),
        ("inline_wait", &file.inline_wait, &mut defaults.inline_wait),
        (
            "turn_cache_ttl",
            &file.turn_cache_ttl,
            &mut defaults.turn_cache_ttl,
        ),
        ("quota_after", &file.quota_after, &mut defaults.quota_after),
        (
            "backoff_base",
            &file.backoff_base,
            &mut defaults.backoff_base,
        ),
        ("backoff_cap", &file.backoff_cap, &mut defaults.backoff_cap),
        (
            "retry_window",
            &file.retry_window,
            &mut defaults.retry_window,
        ),
        (
            "expected_latency",
            &file.expected_latency,
            &mut defaults.expected_latency,
        ),
        ("scope_idle", &file.scope_idle, &mut defaults.scope_idle),
    ];
    for (name, text, slot) in durations {
        if let Some(text) = text {
            *slot = value::duration_field(text, &format!("defaults.{name}"))?;
        }
    }
    if let Some(margin) = &file.window_margin {
        defaults.window_margin = value::duration_or_zero(margin)
            .map_err(|m| ConfigError::invalid("defaults.window_margin", m))?;
    }
    if let Some(budget) = file.turn_budget {
        defaults.turn_budget = Some(budget);
    }
    if let Some(attempts) = file.max_attempts {
        defaults.max_attempts = attempts;
    }
    if let Some(ratio) = file.retry_ratio {
        defaults.retry_ratio = ratio;
    }
    if let Some(floor) = file.retry_floor {
        defaults.retry_floor = floor;
    }
    Ok(defaults)
}
