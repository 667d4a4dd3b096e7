//! Reloading the sidecar's configuration file (SIGHUP, `POST /v1/reload`): new limits for later calls, the spend kept, a bad file refused.
//!
//! The gate in force lives here, behind a lock a handler holds only long
//! enough to clone it. A reload re-reads the file, refuses it (naming the
//! field, the old configuration staying in force) when it does not load or
//! changes what cannot change while serving, and otherwise swaps in a gate
//! made by [`Gate::reload`], which keeps every scope's spend, permits and
//! queue. What may change: credentials' `rate`, `burst`,
//! `max_in_flight` and `queue`, and tools' `read`, `idempotent` and `deadline`.
//! Upstreams, secrets, tools' requests, `[server]`, `[shared]` and
//! `[defaults]` need a restart.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::SystemTime;

use parking_lot::{Mutex, RwLock};
use serde::Serialize;
use sluice::{Gate, GateConfig};
use sluice_config::{ConfigError, SidecarConfig};

use sluice_http::HttpExecutor;

/// What is applied to every configuration read from the file before it is
/// used: the command line's overrides (`--listen`, `--shadow`).
pub type Adjust = Box<dyn Fn(&mut SidecarConfig) -> Result<(), ConfigError> + Send + Sync>;

/// The configuration in force: where it came from and when it was loaded.
#[derive(Debug, Clone, Serialize)]
pub struct Loaded {
    /// When it was loaded, RFC 3339 (UTC).
    pub loaded_at: String,
    /// The SHA-256 of the file it was read from, in hex; `None` for a
    /// configuration that came from no file.
    pub sha256: Option<String>,
}

/// The gate in force and what a reload needs.
pub(crate) struct Live {
    current: RwLock<Current>,
    source: OnceLock<Source>,
    /// One reload at a time.
    reloading: Mutex<()>,
}

struct Current {
    gate: Gate<HttpExecutor>,
    /// The configuration file's view in force (`config.gate` is the start's).
    gate_config: Arc<GateConfig>,
    /// The whole configuration last loaded, to compare the next one with.
    config: Arc<SidecarConfig>,
    loaded: Loaded,
}

struct Source {
    path: PathBuf,
    adjust: Adjust,
}

impl Live {
    pub(crate) fn new(gate: Gate<HttpExecutor>, config: &SidecarConfig) -> Self {
        Live {
            current: RwLock::new(Current {
                gate,
                gate_config: Arc::new(config.gate.clone()),
                config: Arc::new(config.clone()),
                loaded: Loaded {
                    loaded_at: rfc3339(SystemTime::now()),
                    sha256: None,
                },
            }),
            source: OnceLock::new(),
            reloading: Mutex::new(()),
        }
    }

    /// The gate new calls go through.
    pub(crate) fn gate(&self) -> Gate<HttpExecutor> {
        self.current.read().gate.clone()
    }

    /// The engine's configuration in force.
    pub(crate) fn gate_config(&self) -> Arc<GateConfig> {
        self.current.read().gate_config.clone()
    }

    /// When and from what the configuration in force was loaded.
    pub(crate) fn loaded(&self) -> Loaded {
        self.current.read().loaded.clone()
    }

    /// Remembers the file the configuration in force was read from, and
    /// what to apply to it again on each reload. Its hash is the file's
    /// now. Only the first call counts.
    pub(crate) fn set_source(&self, path: &Path, adjust: Adjust) {
        if let Ok(bytes) = std::fs::read(path) {
            self.current.write().loaded.sha256 = Some(sha256_hex(&bytes));
        }
        let _ = self.source.set(Source {
            path: path.to_path_buf(),
            adjust,
        });
    }

    /// Re-reads the file and applies it; see the module docs. The error
    /// names the field; the configuration in force is then unchanged.
    pub(crate) fn reload(&self) -> Result<Loaded, ReloadError> {
        let _one = self.reloading.lock();
        let source = self.source.get().ok_or(ReloadError::NoFile)?;
        let bytes = std::fs::read(&source.path).map_err(|error| {
            ReloadError::Config(ConfigError::Read {
                path: source.path.clone(),
                source: error,
            })
        })?;
        let text = String::from_utf8(bytes.clone()).map_err(|_| {
            ReloadError::Config(ConfigError::Syntax {
                message: "the file is not UTF-8".into(),
            })
        })?;
        let mut config = SidecarConfig::from_toml(&text, |name| std::env::var(name).ok())?;
        (source.adjust)(&mut config)?;
        let (gate, old) = {
            let current = self.current.read();
            (current.gate.clone(), current.config.clone())
        };
        unchanged(&old, &config)?;
        let loaded = Loaded {
            loaded_at: rfc3339(SystemTime::now()),
            sha256: Some(sha256_hex(&bytes)),
        };
        let gate_config = Arc::new(config.gate.clone());
        let config = Arc::new(config);
        gate.reload((*gate_config).clone(), |gate| {
            *self.current.write() = Current {
                gate,
                gate_config,
                config,
                loaded: loaded.clone(),
            };
        })
        .map_err(ConfigError::from)?;
        Ok(loaded)
    }
}

/// Why a reload was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReloadError {
    /// The sidecar was not started from a file.
    #[error("no configuration file to reload: the sidecar was not started from one")]
    NoFile,
    /// The file does not load, or changes what a reload cannot.
    #[error(transparent)]
    Config(#[from] ConfigError),
}

impl ReloadError {
    /// The field at fault, when there is one.
    pub fn field(&self) -> Option<&str> {
        match self {
            ReloadError::Config(error) => error.field(),
            ReloadError::NoFile => None,
        }
    }
}

fn restart(field: impl Into<String>) -> ConfigError {
    ConfigError::invalid(field, "cannot change on reload; restart to change it")
}

/// Refuses a configuration that changes what the running sidecar was
/// built with outside the engine: the listener, the upstreams and their
/// secrets, how tools become requests, the shared backend, the defaults
/// (the deadline cap). Compared through `Debug`, which shows every such
/// field but a secret's value; secrets are compared by value.
fn unchanged(old: &SidecarConfig, new: &SidecarConfig) -> Result<(), ConfigError> {
    let same =
        |a: &dyn std::fmt::Debug, b: &dyn std::fmt::Debug| format!("{a:?}") == format!("{b:?}");
    if !same(&old.server, &new.server) {
        return Err(restart("server"));
    }
    if !same(&old.shared, &new.shared) {
        return Err(restart("shared"));
    }
    if old.gate.defaults != new.gate.defaults {
        return Err(restart("defaults"));
    }
    for name in old.credentials.keys().chain(new.credentials.keys()) {
        let field = format!("credentials.{name}");
        let (Some(a), Some(b)) = (old.credentials.get(name), new.credentials.get(name)) else {
            return Err(ConfigError::invalid(
                field,
                "adding or removing a credential cannot be done on reload; restart to do it",
            ));
        };
        let secret = |upstream: &sluice_config::Upstream| {
            upstream
                .secret
                .as_ref()
                .map(|secret| secret.expose().to_owned())
        };
        if !same(a, b) || secret(a) != secret(b) {
            return Err(restart(field));
        }
    }
    for name in old.tools.keys().chain(new.tools.keys()) {
        match (old.tools.get(name), new.tools.get(name)) {
            (Some(a), Some(b)) if same(a, b) => {}
            _ => return Err(restart(format!("tools.{name}"))),
        }
    }
    Ok(())
}

/// SHA-256, hex, from the crypto library the sidecar already links for TLS.
fn sha256_hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, bytes);
    digest.as_ref().iter().fold(String::new(), |mut hex, byte| {
        let _ = write!(hex, "{byte:02x}");
        hex
    })
}

/// `at` as RFC 3339 in UTC, to the millisecond.
fn rfc3339(at: SystemTime) -> String {
    humantime::format_rfc3339_millis(at).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_of_abc() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn a_time_reads_as_rfc3339() {
        let at = SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(1_500);
        assert_eq!(rfc3339(at), "1970-01-01T00:00:01.500Z");
    }
}
