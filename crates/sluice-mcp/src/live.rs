//! Reloading `sluice mcp`'s limits (SIGHUP): the gate in force is swapped
//! for one made by [`Gate::reload`], which keeps every scope's spend, its
//! calls in flight and its waiting calls; sessions read the gate in force
//! at each call, so changed limits apply to calls that start after it.
//!
//! Only the engine's view (`[defaults]`, credentials' limits) may change;
//! the engine refuses, naming the field, what it cannot change without
//! losing spend. The rest of the file (`[mcp]`, `[tools.NAME]`, the
//! credential the tools spend, `[shared]`) shaped sessions and the
//! listener when they were made: a change there is refused, naming it, and
//! needs a restart. A refused file changes nothing.

use std::sync::{Arc, OnceLock};

use parking_lot::{Mutex, RwLock};
use sluice::{Executor, Gate, GateConfig};
use sluice_config::{ConfigError, McpConfig};

use crate::executor::ServerExecutor;

/// The gate in force, and what new turns and the live page read.
#[derive(Debug)]
pub(crate) struct LiveGate<E> {
    current: RwLock<Current<E>>,
}

#[derive(Debug)]
struct Current<E> {
    gate: Gate<E>,
    config: Arc<GateConfig>,
    /// Counts the reloads, so a session knows its turn is of an older gate.
    generation: u64,
}

impl<E: Executor + Clone> LiveGate<E> {
    pub(crate) fn new(gate: Gate<E>, config: GateConfig) -> Arc<Self> {
        Arc::new(LiveGate {
            current: RwLock::new(Current {
                gate,
                config: Arc::new(config),
                generation: 0,
            }),
        })
    }

    /// The gate new calls go through, and its generation.
    pub(crate) fn gate(&self) -> (Gate<E>, u64) {
        let current = self.current.read();
        (current.gate.clone(), current.generation)
    }

    /// The engine's configuration in force.
    pub(crate) fn config(&self) -> Arc<GateConfig> {
        self.current.read().config.clone()
    }

    /// Puts a gate for `config` in force, taking over the current one's
    /// scopes; refused, naming the field, with nothing changed.
    fn reload(&self, config: GateConfig) -> Result<(), sluice::ConfigError> {
        let (gate, _) = self.gate();
        let shared = Arc::new(config.clone());
        gate.reload(config, |gate| {
            let mut current = self.current.write();
            current.gate = gate;
            current.config = shared;
            current.generation += 1;
        })
    }
}

/// Reloads a [`crate::Proxy`]'s limits while it serves (what `sluice mcp`
/// does on SIGHUP). Got from [`crate::Proxy::reloader`] before the proxy is
/// handed to a serve function; it acts once that has built its gate.
#[derive(Debug, Clone, Default)]
pub struct Reloader {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    live: OnceLock<Arc<LiveGate<ServerExecutor>>>,
    /// The configuration in force, to compare the next one with.
    config: Mutex<Option<McpConfig>>,
}

impl Reloader {
    /// Called by the proxy once its gate is built.
    pub(crate) fn serving(&self, live: &Arc<LiveGate<ServerExecutor>>, config: &McpConfig) {
        if self.inner.live.set(live.clone()).is_ok() {
            *self.inner.config.lock() = Some(config.clone());
        }
    }

    /// Applies `config`'s limits to calls that start from now on, keeping
    /// what each window has spent and the calls in flight and waiting
    /// (docs/operating.md, "Reload"). The error names the field at fault;
    /// the limits in force are then unchanged.
    pub fn reload(&self, config: McpConfig) -> Result<(), ConfigError> {
        let mut in_force = self.inner.config.lock();
        let (Some(live), Some(old)) = (self.inner.live.get(), in_force.as_ref()) else {
            return Err(ConfigError::invalid(
                "mcp",
                "the proxy is not serving yet: nothing to reload",
            ));
        };
        unchanged(old, &config)?;
        live.reload(config.gate.clone())?;
        *in_force = Some(config);
        Ok(())
    }
}

/// Refuses a change outside the engine's view (see the module docs).
fn unchanged(old: &McpConfig, new: &McpConfig) -> Result<(), ConfigError> {
    let restart = |field: &str| {
        Err(ConfigError::invalid(
            field,
            "cannot change on reload; restart sluice mcp to change it",
        ))
    };
    if old.credential != new.credential {
        return restart("mcp.credential");
    }
    for name in old.tools.keys().chain(new.tools.keys()) {
        if old.tools.get(name) != new.tools.get(name) {
            return restart(&format!("tools.{name}"));
        }
    }
    // The rest through `Debug`, which shows every field (a secret masked;
    // `[shared]`'s address and the patterns as written).
    let rest = |config: &McpConfig| {
        format!(
            "{:?}",
            (
                &config.deferral,
                config
                    .rate_limit_patterns
                    .iter()
                    .map(regex::Regex::as_str)
                    .collect::<Vec<_>>(),
                config.trust_annotations,
                config.max_message_size,
                config.shutdown_grace,
                &config.http,
                &config.sessions,
                &config.exposure,
            )
        )
    };
    if rest(old) != rest(new) {
        return restart("mcp");
    }
    if format!("{:?}", old.shared) != format!("{:?}", new.shared) {
        return restart("shared");
    }
    Ok(())
}
