//! The command runner: every script call goes through it, under the timeout, sent at most once, counted, and told to the circuit breaker.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use serde::Serialize;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::breaker::{Breaker, BreakerState, Permit};
use crate::connection::{Conn, Connector};
use crate::store::Store;
use crate::{Error, RedisConfig};

/// Failed Redis commands, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ErrorCounts {
    /// No answer within the timeout.
    pub timeout: u64,
    /// The connection failed or dropped.
    pub connection: u64,
    /// Redis answered with an error.
    pub server: u64,
    /// A reply this crate did not understand.
    pub reply: u64,
}

impl ErrorCounts {
    /// All of them.
    pub fn total(&self) -> u64 {
        self.timeout + self.connection + self.server + self.reply
    }
}

/// The breaker as the status shows it.
pub(crate) struct BreakerView {
    pub(crate) state: BreakerState,
    pub(crate) failures: u32,
    pub(crate) probe_in: Duration,
}

/// The scripts, the connection and the breaker: the part of the budget
/// that talks to Redis (no credential state, so background tasks can hold
/// it without a cycle).
pub(crate) struct Runner {
    store: Store,
    connector: Connector,
    timeout: Duration,
    breaker: Mutex<Breaker>,
    commands: AtomicU64,
    /// Commands Redis answered so far.
    answered: AtomicU64,
    errors: Mutex<(ErrorCounts, Option<String>)>,
    /// Told when the breaker closes again after failures (work kept for
    /// Redis goes out then, not at its next turn).
    back: Notify,
    /// Tells the calls waiting for a probe that its answer came.
    probed: Notify,
}

impl Runner {
    /// Builds the client for `config` (already validated); no I/O yet.
    pub(crate) fn new(config: &RedisConfig) -> Result<Self, Error> {
        let connector = Connector::new(config)?;
        let store = Store::new(&config.key_prefix).with_secrets(&config.secrets(), config.timeout);
        let breaker = Breaker::new(
            config.breaker_failures,
            config.breaker_open_for,
            config.breaker_max_open_for,
        );
        Ok(Runner {
            store,
            connector,
            timeout: config.timeout,
            breaker: Mutex::new(breaker),
            commands: AtomicU64::new(0),
            answered: AtomicU64::new(0),
            errors: Mutex::new((ErrorCounts::default(), None)),
            back: Notify::new(),
            probed: Notify::new(),
        })
    }

    /// The scripts and key names.
    pub(crate) fn store(&self) -> &Store {
        &self.store
    }

    /// Opens the connection if it can within the connect timeout; an
    /// error means Redis refused us (see `Connector::warm_up`).
    pub(crate) async fn warm_up(&self) -> Result<bool, Error> {
        self.connector.warm_up().await
    }

    /// Runs one script call under the timeout, counting it and telling the
    /// breaker. Never resends: a timeout is a failure whose fate is unknown.
    pub(crate) async fn run<'s, T, F, Fut>(&'s self, call: F) -> Result<T, Error>
    where
        F: FnOnce(&'s Store, Conn) -> Fut,
        Fut: std::future::Future<Output = Result<T, Error>> + 's,
    {
        let result = match self.connector.get() {
            Err(error) => Err(error),
            Ok(conn) => {
                self.commands.fetch_add(1, Ordering::Relaxed);
                match tokio::time::timeout(self.timeout, call(&self.store, conn)).await {
                    Ok(result) => result,
                    Err(_) => Err(Error::Timeout(self.timeout)),
                }
            }
        };
        // The breaker's state before this answer, and the answer told to it.
        let was = {
            let mut breaker = self.breaker.lock();
            let was = breaker.state();
            match &result {
                Ok(_) => breaker.success(),
                Err(_) => breaker.failure(Instant::now()),
            }
            was
        };
        if result.is_ok() {
            self.answered.fetch_add(1, Ordering::Relaxed);
        }
        match &result {
            Ok(_) if was != BreakerState::Closed => self.back.notify_one(),
            Ok(_) => {}
            Err(error) => {
                let mut errors = self.errors.lock();
                match error {
                    Error::Timeout(_) => errors.0.timeout += 1,
                    Error::Connection(_) => errors.0.connection += 1,
                    Error::Server(_) => errors.0.server += 1,
                    _ => errors.0.reply += 1,
                }
                errors.1 = Some(error.to_string());
                tracing::debug!(%error, "a Redis command failed");
            }
        }
        if was == BreakerState::HalfOpen {
            self.probed.notify_waiters();
        }
        result
    }

    /// While a probe is out, waits for its answer: at most until `latest`,
    /// or until the probe would be replaced (`stale_probe` after it went).
    pub(crate) async fn await_probe(&self, latest: Instant, stale_probe: Duration) {
        // Registered before looking: an answer after the look wakes us.
        let probed = self.probed.notified();
        tokio::pin!(probed);
        probed.as_mut().enable();
        let out = self.breaker.lock().probe_out(stale_probe);
        if let Some(until) = out {
            let _ = tokio::time::timeout_at(until.min(latest), probed).await;
        }
    }

    /// May a call ask Redis at `now`? (See `Breaker::permit`.)
    pub(crate) fn permit(&self, now: Instant, stale_probe: Duration) -> Permit {
        self.breaker.lock().permit(now, stale_probe)
    }

    /// Resolves once the breaker has closed again after failures (at
    /// once if it did since the last call).
    pub(crate) async fn back(&self) {
        self.back.notified().await;
    }

    /// Whether the breaker is closed (Redis answers).
    pub(crate) fn closed(&self) -> bool {
        self.breaker.lock().state() == BreakerState::Closed
    }

    /// The breaker at `now`.
    pub(crate) fn breaker(&self, now: Instant) -> BreakerView {
        let breaker = self.breaker.lock();
        BreakerView {
            state: breaker.state(),
            failures: breaker.consecutive_failures(),
            probe_in: breaker.retry_in(now),
        }
    }

    /// Failed commands by kind, and the last error (scrubbed of secrets).
    pub(crate) fn errors(&self) -> (ErrorCounts, Option<String>) {
        self.errors.lock().clone()
    }

    /// Commands Redis answered so far: work kept for Redis waits for this
    /// to move (an answer after the failure that kept it).
    pub(crate) fn answered(&self) -> u64 {
        self.answered.load(Ordering::Relaxed)
    }

    /// Script calls sent so far.
    pub(crate) fn commands(&self) -> u64 {
        self.commands.load(Ordering::Relaxed)
    }
}
