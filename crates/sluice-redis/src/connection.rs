//! Connections to Redis: a `ConnectionManager` for one node, the async cluster client for a cluster.
//!
//! Neither ever sends a command twice: the manager reconnects in the
//! background but does not replay, and the cluster client is built with no
//! retries (a MOVED during resharding becomes one failed call, and the client
//! refreshes its slot map). A timeout leaves a command's fate unknown; the
//! caller treats it as a failure and never resends it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};
use tokio::time::Instant;

use crate::{Error, RedisConfig};

/// A connection of either kind; cheap to clone (both are multiplexed).
#[derive(Clone)]
pub(crate) enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(conn) => conn.req_packed_command(cmd),
            Conn::Cluster(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(conn) => conn.req_packed_commands(cmd, offset, count),
            Conn::Cluster(conn) => conn.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(conn) => conn.get_db(),
            Conn::Cluster(conn) => conn.get_db(),
        }
    }
}

/// Hands out the connection, opening the cluster one in the background.
pub(crate) struct Connector {
    kind: Kind,
    connect_timeout: Duration,
}

enum Kind {
    Single(ConnectionManager),
    Cluster(Arc<ClusterState>),
}

struct ClusterState {
    client: ClusterClient,
    conn: Mutex<Option<ClusterConnection>>,
    /// An attempt is under way, or none may start before this instant.
    attempt: Mutex<Attempt>,
    connect_timeout: Duration,
    secrets: Vec<String>,
}

struct Attempt {
    running: bool,
    not_before: Instant,
    backoff: Duration,
}

/// Reconnection backoff bounds: the manager's default first delay (100 ms)
/// and a one-second ceiling, so a restarted Redis is found within a second.
const MIN_RECONNECT: Duration = Duration::from_millis(100);
const MAX_RECONNECT: Duration = Duration::from_secs(1);

impl Connector {
    /// Builds the client; no I/O happens here (connections open on first use).
    pub(crate) fn new(config: &RedisConfig) -> Result<Self, Error> {
        let secrets = config.secrets();
        let scrub = |e: redis::RedisError| {
            Error::config("redis.urls", crate::redact::scrub(&e.to_string(), &secrets))
        };
        let kind = if config.cluster {
            let urls: Vec<&str> = config.urls.iter().map(|u| u.expose()).collect();
            let client = ClusterClientBuilder::new(urls)
                .retries(0)
                .connection_timeout(config.connect_timeout)
                .response_timeout(config.timeout)
                .build()
                .map_err(scrub)?;
            Kind::Cluster(Arc::new(ClusterState {
                client,
                conn: Mutex::new(None),
                attempt: Mutex::new(Attempt {
                    running: false,
                    not_before: Instant::now(),
                    backoff: MIN_RECONNECT,
                }),
                connect_timeout: config.connect_timeout,
                secrets: secrets.iter().map(|s| (*s).to_owned()).collect(),
            }))
        } else {
            let url = config
                .urls
                .first()
                .ok_or_else(|| Error::config("redis.urls", "at least one URL is needed"))?;
            let client = redis::Client::open(url.expose()).map_err(scrub)?;
            let manager_config = ConnectionManagerConfig::new()
                .set_response_timeout(Some(config.timeout))
                .set_connection_timeout(Some(config.connect_timeout))
                .set_min_delay(MIN_RECONNECT)
                .set_max_delay(MAX_RECONNECT);
            let manager =
                ConnectionManager::new_lazy_with_config(client, manager_config).map_err(scrub)?;
            Kind::Single(manager)
        };
        Ok(Connector {
            kind,
            connect_timeout: config.connect_timeout,
        })
    }

    /// The connection. A cluster connection that is not open yet is opened
    /// in the background (never on the caller's time) and this says so.
    pub(crate) fn get(&self) -> Result<Conn, Error> {
        match &self.kind {
            Kind::Single(manager) => Ok(Conn::Single(manager.clone())),
            Kind::Cluster(state) => {
                if let Some(conn) = lock(&state.conn).as_ref() {
                    return Ok(Conn::Cluster(conn.clone()));
                }
                ClusterState::start_attempt(state);
                Err(Error::Connection("not connected to the cluster yet".into()))
            }
        }
    }

    /// Opens the connection now if it can within the connect timeout;
    /// returns whether it is open (an unreachable Redis is not an error).
    pub(crate) async fn warm_up(&self) -> bool {
        match &self.kind {
            Kind::Single(manager) => {
                let mut conn = manager.clone();
                let ping = redis::cmd("PING");
                matches!(
                    tokio::time::timeout(
                        self.connect_timeout,
                        ping.query_async::<Value>(&mut conn)
                    )
                    .await,
                    Ok(Ok(_))
                )
            }
            Kind::Cluster(state) => {
                ClusterState::start_attempt(state);
                let until = Instant::now() + state.connect_timeout;
                while Instant::now() < until {
                    if lock(&state.conn).is_some() {
                        return true;
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                lock(&state.conn).is_some()
            }
        }
    }
}

impl ClusterState {
    fn start_attempt(state: &Arc<ClusterState>) {
        {
            let mut attempt = lock(&state.attempt);
            let now = Instant::now();
            if attempt.running || now < attempt.not_before {
                return;
            }
            attempt.running = true;
        }
        let state = state.clone();
        tokio::spawn(async move {
            let connected = match tokio::time::timeout(
                state.connect_timeout,
                state.client.get_async_connection(),
            )
            .await
            {
                Ok(Ok(conn)) => {
                    *lock(&state.conn) = Some(conn);
                    true
                }
                Ok(Err(error)) => {
                    let secrets: Vec<&str> = state.secrets.iter().map(String::as_str).collect();
                    tracing::warn!(
                        error = %crate::redact::scrub(&error.to_string(), &secrets),
                        "cannot reach the Redis cluster yet"
                    );
                    false
                }
                Err(_) => false,
            };
            let mut attempt = lock(&state.attempt);
            attempt.running = false;
            if connected {
                attempt.backoff = MIN_RECONNECT;
            } else {
                attempt.not_before = Instant::now() + attempt.backoff;
                attempt.backoff = (attempt.backoff * 2).min(MAX_RECONNECT);
            }
        });
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
