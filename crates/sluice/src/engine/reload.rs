//! Reloading: an engine for a new configuration that takes over a running one's scopes, so what each window has spent is kept.
//!
//! The new engine shares the old one's table of scopes and its clock, so a
//! scope's cell, with every start it logged (past and reserved), its
//! permits in flight and its queue are the same object before and after.
//! Each live credential scope is then given its credential's new `rate` and
//! `burst` in place, its new `max_in_flight` as the cap on permits, and its
//! new `queue` (explicit, or the default the new `inline_wait` gives) as its
//! queue's bound: calls already waiting past a lowered bound keep their
//! places, and only arrivals are measured against it.
//! Calls that started before the reload finish on the old engine, against
//! the same scopes.
//!
//! Only what can change without losing spend may change: a credential's
//! `rate` and `burst` (not between a window and a bucket) and
//! `max_in_flight` (not to or from `"auto"`), credentials added or removed,
//! tools, and `[defaults]` but `scope_idle` and `window_margin`. Anything
//! else is refused, naming the field.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::Engine;
use crate::config::{ConfigError, GateConfig, Limits};
use crate::executor::Executor;
use crate::signal::DEFAULT_SCOPE;

impl<E: Executor + Clone> Engine<E> {
    /// An engine for `config` that takes over this one's scopes and clock;
    /// the live credential scopes are given their new limits. Refused,
    /// naming the field, when `config` is invalid or changes what a reload
    /// cannot ([module docs](self)). Must run inside a tokio runtime.
    pub(crate) fn reloaded(&self, config: GateConfig) -> Result<Engine<E>, ConfigError> {
        // The table of scopes is made with the idle threshold, and every
        // live scope's cells with the margin.
        if config.defaults.scope_idle != self.defaults.scope_idle {
            return Err(fixed("defaults.scope_idle"));
        }
        if config.defaults.window_margin != self.defaults.window_margin {
            return Err(fixed("defaults.window_margin"));
        }
        let mut engine = Engine::new(
            config,
            self.executor.clone(),
            None,
            self.observer.clone(),
            self.shared.clone(),
        )?;
        for (name, credential) in &engine.credentials {
            if let Some(old) = self.credentials.get(name) {
                reloadable(name, &old.limits, &credential.limits)?;
            }
        }
        engine.scopes = Arc::clone(&self.scopes);
        engine.origin = self.origin;
        engine.ticks = self.ticks;
        for (name, credential) in &engine.credentials {
            if let Some(old) = self.credentials.get(name) {
                // The scopes the server reported for each tool stay bound.
                let bindings = old.bindings.lock().clone();
                *credential.bindings.lock() = bindings;
                credential
                    .bound
                    .store(old.bound.load(Ordering::Acquire), Ordering::Release);
            }
        }
        engine.relimit();
        Ok(engine)
    }

    /// Gives every live credential scope its credential's configured rate,
    /// burst, cap and queue bound, keeping its log. Run once when the engine is made, and
    /// again once it is in use, for a scope a call of the old engine made
    /// meanwhile.
    pub(crate) fn relimit(&self) {
        for scope in self.scopes.all() {
            if *scope.name != *DEFAULT_SCOPE {
                continue;
            }
            if let Some(credential) = self.credentials.get(&*scope.credential) {
                let limits = &credential.limits;
                scope.relimit(
                    (limits.rate, limits.burst),
                    limits.max_in_flight,
                    limits.queue,
                );
            }
        }
    }
}

fn fixed(field: impl Into<String>) -> ConfigError {
    ConfigError::new(field, "cannot change on reload; restart to change it")
}

/// Whether a credential's limits may go from `old` to `new` by reload:
/// only `rate`, `burst`, `max_in_flight` and `queue` differ, neither
/// adding nor removing a burst
/// (a window and a bucket keep different logs), nor changes the rate of
/// `rate = "auto"` (its controller was made with the ceiling).
fn reloadable(name: &str, old: &Limits, new: &Limits) -> Result<(), ConfigError> {
    let field = |f: &str| format!("credentials.{name}.{f}");
    if old.burst.is_some() != new.burst.is_some() {
        return Err(ConfigError::new(
            field("burst"),
            "adding or removing a burst cannot be done on reload (a bucket and a window count \
             differently); restart to change it",
        ));
    }
    if (old.auto_rate || new.auto_rate) && (old.rate != new.rate || old.auto_rate != new.auto_rate)
    {
        return Err(fixed(field("rate")));
    }
    let checks: [(&str, bool); 13] = [
        (
            "max_in_flight",
            old.auto_concurrency == new.auto_concurrency,
        ),
        (
            "expected_latency",
            old.expected_latency == new.expected_latency,
        ),
        ("shared", old.shared == new.shared),
        ("learn", old.learn == new.learn),
        ("policy_window", old.policy_window == new.policy_window),
        ("reserve", old.reserve == new.reserve),
        ("enforce", old.enforce == new.enforce),
        ("body_signals", old.body_signals == new.body_signals),
        ("windows", old.windows == new.windows),
        ("groups", old.groups == new.groups),
        ("units", old.units == new.units),
        ("priorities.low", old.low_share == new.low_share),
        // Every field above, and nothing else but those that may change.
        (
            "",
            Limits {
                rate: old.rate,
                burst: old.burst,
                max_in_flight: old.max_in_flight,
                queue: old.queue,
                ..new.clone()
            } == *old,
        ),
    ];
    match checks.iter().find(|(_, same)| !same) {
        Some(("", _)) => Err(fixed(format!("credentials.{name}"))),
        Some((f, _)) => Err(fixed(field(f))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{CredentialConfig, Defaults};

    fn limits(config: CredentialConfig) -> Limits {
        config.resolve("paced", &Defaults::default()).unwrap()
    }

    #[test]
    fn only_rate_and_burst_change_on_reload() {
        let rate = |text: &str| CredentialConfig::with_rate(text.parse().unwrap());
        let old = limits(rate("3/1s"));
        assert_eq!(reloadable("paced", &old, &limits(rate("10/1s"))), Ok(()));
        let mut capped = rate("10/1s");
        capped.max_in_flight = Some(1);
        assert_eq!(reloadable("paced", &old, &limits(capped)), Ok(()));
        let mut auto = rate("10/1s");
        auto.auto_concurrency = true;
        assert_eq!(
            reloadable("paced", &old, &limits(auto)).unwrap_err().field,
            "credentials.paced.max_in_flight"
        );
        let mut bucket = rate("10/1s");
        bucket.burst = Some(5);
        assert_eq!(
            reloadable("paced", &old, &limits(bucket))
                .unwrap_err()
                .field,
            "credentials.paced.burst"
        );
        let mut shadow = rate("3/1s");
        shadow.enforce = false;
        assert_eq!(
            reloadable("paced", &old, &limits(shadow))
                .unwrap_err()
                .field,
            "credentials.paced.enforce"
        );
    }
}
