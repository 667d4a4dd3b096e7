//! Connections to Redis: a `ConnectionManager` for one node, the async cluster client for a cluster.
//!
//! Neither ever sends a command twice: the manager reconnects in the
//! background but does not replay, and the cluster client is built with no
//! retries (a MOVED during resharding becomes one failed call, and the client
//! refreshes its slot map). A timeout leaves a command's fate unknown; the
//! caller treats it as a failure and never resends it.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, TlsCertificates, Value};
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
    /// Scrubbed from every error text.
    secrets: Vec<String>,
}

enum Kind {
    /// The manager, and its client for a first, direct probe (the manager
    /// retries in the background and never says why it cannot connect).
    Single(ConnectionManager, Box<redis::Client>),
    Cluster(Arc<ClusterState>),
}

struct ClusterState {
    client: ClusterClient,
    conn: Mutex<Option<ClusterConnection>>,
    /// An attempt is under way, or none may start before this instant.
    attempt: Mutex<Attempt>,
    connect_timeout: Duration,
    secrets: Vec<String>,
    /// Why the last attempt failed, when Redis refused it (see [`refusal`]).
    last_error: Mutex<Option<Error>>,
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
        let certificates = tls_certificates(config)?;
        let kind = if config.cluster {
            let urls: Vec<&str> = config.urls.iter().map(|u| u.expose()).collect();
            let mut builder = ClusterClientBuilder::new(urls)
                .retries(0)
                .connection_timeout(config.connect_timeout)
                .response_timeout(config.timeout);
            if let Some(certificates) = certificates {
                builder = builder.certs(certificates);
            }
            let client = builder.build().map_err(scrub)?;
            Kind::Cluster(Arc::new(ClusterState {
                client,
                conn: Mutex::new(None),
                last_error: Mutex::new(None),
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
            let client = match certificates {
                Some(certificates) => redis::Client::build_with_tls(url.expose(), certificates),
                None => redis::Client::open(url.expose()),
            }
            .map_err(scrub)?;
            let manager_config = ConnectionManagerConfig::new()
                .set_response_timeout(Some(config.timeout))
                .set_connection_timeout(Some(config.connect_timeout))
                .set_min_delay(MIN_RECONNECT)
                .set_max_delay(MAX_RECONNECT);
            let manager = ConnectionManager::new_lazy_with_config(client.clone(), manager_config)
                .map_err(scrub)?;
            Kind::Single(manager, Box::new(client))
        };
        Ok(Connector {
            kind,
            connect_timeout: config.connect_timeout,
            secrets: secrets.iter().map(|s| (*s).to_owned()).collect(),
        })
    }

    /// The connection. A cluster connection that is not open yet is opened
    /// in the background (never on the caller's time) and this says so.
    pub(crate) fn get(&self) -> Result<Conn, Error> {
        match &self.kind {
            Kind::Single(manager, _) => Ok(Conn::Single(manager.clone())),
            Kind::Cluster(state) => {
                if let Some(conn) = state.conn.lock().as_ref() {
                    return Ok(Conn::Cluster(conn.clone()));
                }
                ClusterState::start_attempt(state);
                Err(Error::Connection("not connected to the cluster yet".into()))
            }
        }
    }

    /// Opens the connection now if it can within the connect timeout.
    /// `Ok(false)`: not reachable yet (the budget starts in fallback);
    /// `Err`: Redis answered and refused us (a wrong password or ACL user,
    /// a certificate that does not check): no retry will fix that.
    pub(crate) async fn warm_up(&self) -> Result<bool, Error> {
        let secrets: Vec<&str> = self.secrets.iter().map(String::as_str).collect();
        match &self.kind {
            Kind::Single(manager, client) => {
                let probe = tokio::time::timeout(
                    self.connect_timeout,
                    client.get_multiplexed_async_connection(),
                )
                .await;
                let reply = match probe {
                    Ok(Ok(mut probe)) => {
                        // A connection may open and its first command be
                        // refused (NOAUTH when no user is given).
                        let ping = redis::cmd("PING");
                        tokio::time::timeout(
                            self.connect_timeout,
                            ping.query_async::<Value>(&mut probe),
                        )
                        .await
                    }
                    Ok(Err(error)) => Ok(Err(error)),
                    Err(elapsed) => Err(elapsed),
                };
                match reply {
                    Ok(Ok(_)) => {}
                    Ok(Err(error)) => {
                        return match refusal(&error, &secrets) {
                            Some(refused) => Err(refused),
                            None => Ok(false),
                        };
                    }
                    Err(_) => return Ok(false),
                }
                let mut conn = manager.clone();
                let ping = redis::cmd("PING");
                Ok(matches!(
                    tokio::time::timeout(
                        self.connect_timeout,
                        ping.query_async::<Value>(&mut conn)
                    )
                    .await,
                    Ok(Ok(_))
                ))
            }
            Kind::Cluster(state) => {
                ClusterState::start_attempt(state);
                let until = Instant::now() + state.connect_timeout;
                while Instant::now() < until {
                    if state.conn.lock().is_some() {
                        return Ok(true);
                    }
                    if let Some(refused) = state.last_error.lock().clone() {
                        return Err(refused);
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                Ok(state.conn.lock().is_some())
            }
        }
    }
}

/// The CA certificates of `tls_ca_file`, read once when the client is built.
fn tls_certificates(config: &RedisConfig) -> Result<Option<TlsCertificates>, Error> {
    let Some(path) = &config.tls_ca_file else {
        return Ok(None);
    };
    let pem = std::fs::read(path).map_err(|error| {
        Error::config(
            "redis.tls_ca_file",
            format!("cannot read {}: {error}", path.display()),
        )
    })?;
    if !pem
        .windows(CERTIFICATE_PEM.len())
        .any(|window| window == CERTIFICATE_PEM)
    {
        return Err(Error::config(
            "redis.tls_ca_file",
            format!("{} holds no PEM certificate", path.display()),
        ));
    }
    Ok(Some(TlsCertificates {
        client_tls: None,
        root_cert: Some(pem),
    }))
}

const CERTIFICATE_PEM: &[u8] = b"-----BEGIN CERTIFICATE-----";

/// The failures that mean Redis will never take us as configured: it
/// refused the password or user, or its certificate did not check. Other
/// failures (refused or dropped connections, timeouts) may pass.
pub(crate) fn refusal(error: &redis::RedisError, secrets: &[&str]) -> Option<Error> {
    let text = crate::redact::scrub(&error.to_string(), secrets);
    let lower = text.to_ascii_lowercase();
    let auth = matches!(error.kind(), redis::ErrorKind::AuthenticationFailed)
        || lower.contains("wrongpass")
        || lower.contains("noauth")
        || lower.contains("noperm")
        || lower.contains("authentication failed");
    let tls = lower.contains("certificate") || lower.contains("handshake");
    if auth {
        Some(Error::Refused(format!(
            "Redis refused the user or password (check the URL's user and password, and the ACL user's rights): {text}"
        )))
    } else if tls {
        Some(Error::Refused(format!(
            "the TLS handshake with Redis failed (check tls_ca_file and the server's certificate and name): {text}"
        )))
    } else {
        None
    }
}

impl ClusterState {
    fn start_attempt(state: &Arc<ClusterState>) {
        {
            let mut attempt = state.attempt.lock();
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
                    *state.conn.lock() = Some(conn);
                    *state.last_error.lock() = None;
                    true
                }
                Ok(Err(error)) => {
                    let secrets: Vec<&str> = state.secrets.iter().map(String::as_str).collect();
                    *state.last_error.lock() = refusal(&error, &secrets);
                    tracing::warn!(
                        error = %crate::redact::scrub(&error.to_string(), &secrets),
                        "cannot reach the Redis cluster yet"
                    );
                    false
                }
                Err(_) => false,
            };
            let mut attempt = state.attempt.lock();
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
