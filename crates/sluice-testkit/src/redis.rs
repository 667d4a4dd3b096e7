//! Private `redis-server` processes on free loopback ports, killed on drop
//! (even on panic), with fault injection: kill, restart, `DEBUG SLEEP`,
//! `SCRIPT FLUSH`; a three-master cluster, with a replica per master if
//! asked; and TLS with an ACL user, certificates made at test time.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::free_port;

static NEXT_DIR: AtomicU64 = AtomicU64::new(0);

/// One `redis-server` of our own. Killed when dropped.
pub struct RedisServer {
    /// The port it listens on (127.0.0.1): plain text, for the test's own
    /// commands (with the ACL user's password when TLS is on).
    pub port: u16,
    /// The TLS port, when TLS is on.
    pub tls_port: Option<u16>,
    dir: PathBuf,
    cluster: bool,
    /// `cluster-node-timeout` (ms): how soon a dead master is failed over.
    node_timeout_ms: u32,
    tls: Option<Arc<Tls>>,
    child: Option<Child>,
}

/// The ACL user a TLS server requires (the default user is off).
pub const TLS_USER: &str = "sluice";
/// Its password.
pub const TLS_PASSWORD: &str = "pw-9f1c2e7a";

/// Certificates made with the `openssl` command for one test: a CA, and a
/// server certificate it signs for `127.0.0.1` and `localhost`; and a
/// second CA that signed nothing (to be refused with).
pub struct Tls {
    dir: PathBuf,
}

impl Tls {
    /// Makes the certificates in a directory of their own.
    pub fn generate() -> Arc<Tls> {
        let dir = std::env::temp_dir().join(format!(
            "sluice-tls-test-{}-{}",
            std::process::id(),
            NEXT_DIR.fetch_add(1, Ordering::SeqCst)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let tls = Tls { dir };
        for ca in ["ca", "other-ca"] {
            tls.openssl(&[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-days",
                "2",
                "-subj",
                &format!("/CN=sluice test {ca}"),
                "-keyout",
                &format!("{ca}.key"),
                "-out",
                &format!("{ca}.pem"),
            ]);
        }
        tls.openssl(&[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-subj",
            "/CN=localhost",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
        ]);
        std::fs::write(
            tls.dir.join("server.ext"),
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth,clientAuth\n",
        )
        .unwrap();
        tls.openssl(&[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            "server.ext",
            "-out",
            "server.pem",
        ]);
        Arc::new(tls)
    }

    fn openssl(&self, args: &[&str]) {
        let output = Command::new("openssl")
            .args(args)
            .current_dir(&self.dir)
            .output()
            .unwrap_or_else(|error| {
                panic!(
                    "could not run openssl ({error}): {}",
                    crate::missing_program("openssl", "openssl")
                )
            });
        assert!(
            output.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// The CA that signed the servers' certificate (PEM).
    pub fn ca_file(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    /// A CA that signed nothing here.
    pub fn other_ca_file(&self) -> PathBuf {
        self.dir.join("other-ca.pem")
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// A TLS acceptor presenting the server certificate (for `127.0.0.1`
    /// and `localhost`), for a test server of any protocol.
    pub fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let certs: Vec<CertificateDer<'static>> =
            CertificateDer::pem_file_iter(self.file("server.pem"))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
        let key = PrivateKeyDer::from_pem_file(self.file("server.key")).unwrap();
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .unwrap();
        tokio_rustls::TlsAcceptor::from(Arc::new(config))
    }
}

impl Drop for Tls {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl RedisServer {
    /// A standalone server on a free port.
    pub fn start() -> Self {
        Self::start_with(false, 5_000, None)
    }

    /// A standalone server with a TLS port (the certificates of `tls`) that
    /// takes only the ACL user [`TLS_USER`] with [`TLS_PASSWORD`].
    pub fn start_tls(tls: Arc<Tls>) -> Self {
        Self::start_with(false, 5_000, Some(tls))
    }

    fn start_with(cluster: bool, node_timeout_ms: u32, tls: Option<Arc<Tls>>) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "sluice-redis-test-{}-{}",
            std::process::id(),
            NEXT_DIR.fetch_add(1, Ordering::SeqCst)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        for _ in 0..5 {
            let mut server = RedisServer {
                port: if cluster {
                    free_cluster_port()
                } else {
                    free_port()
                },
                // With `--tls-cluster yes` the bus listens 10,000 above the
                // TLS port, so that port needs the same room as `port`.
                tls_port: tls.as_ref().map(|_| {
                    if cluster {
                        free_cluster_port()
                    } else {
                        free_port()
                    }
                }),
                dir: dir.clone(),
                cluster,
                node_timeout_ms,
                tls: tls.clone(),
                child: None,
            };
            server.spawn();
            if server.wait_ready(Duration::from_secs(5)) {
                return server;
            }
            server.kill();
        }
        let log = std::fs::read_to_string(dir.join("redis.log")).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(12).collect();
        panic!(
            "could not start redis-server; the end of its log:\n{}",
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }

    fn spawn(&mut self) {
        let mut command = Command::new("redis-server");
        command
            .arg("--port")
            .arg(self.port.to_string())
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--enable-debug-command", "local"])
            .arg("--dir")
            .arg(&self.dir)
            .args(["--logfile", "redis.log"])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if self.cluster {
            command
                .args(["--cluster-enabled", "yes"])
                .arg("--cluster-node-timeout")
                .arg(self.node_timeout_ms.to_string())
                .arg("--cluster-config-file")
                .arg(format!("nodes-{}.conf", self.port));
        }
        if let (Some(tls), Some(tls_port)) = (&self.tls, self.tls_port) {
            let path = |name: &str| tls.file(name).display().to_string();
            command
                .arg("--tls-port")
                .arg(tls_port.to_string())
                .args(["--tls-cert-file", &path("server.pem")])
                .args(["--tls-key-file", &path("server.key")])
                .args(["--tls-ca-cert-file", &path("ca.pem")])
                .args(["--tls-auth-clients", "no"])
                .args(["--user", "default", "off"])
                .args(["--user", TLS_USER, "on", &format!(">{TLS_PASSWORD}")])
                .args(["~*", "&*", "+@all"])
                .args(["--masteruser", TLS_USER, "--masterauth", TLS_PASSWORD]);
            if self.cluster {
                command.args(["--tls-cluster", "yes", "--tls-replication", "yes"]);
            }
        }
        let child = command.spawn().unwrap_or_else(|error| {
            panic!(
                "could not start redis-server ({error}): {}",
                crate::missing_program("redis-server", "redis-server")
            )
        });
        self.child = Some(child);
    }

    fn wait_ready(&self, within: Duration) -> bool {
        let until = Instant::now() + within;
        while Instant::now() < until {
            if let Ok(mut conn) = self.client().get_connection()
                && redis::cmd("PING").query::<String>(&mut conn).is_ok()
            {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// `redis://127.0.0.1:PORT` (with the ACL user when TLS is on).
    pub fn url(&self) -> String {
        match self.tls {
            Some(_) => format!("redis://{TLS_USER}:{TLS_PASSWORD}@127.0.0.1:{}", self.port),
            None => format!("redis://127.0.0.1:{}", self.port),
        }
    }

    /// `rediss://USER:PASSWORD@127.0.0.1:TLS_PORT`, with `password`.
    pub fn tls_url_with(&self, password: &str) -> String {
        let port = self.tls_port.expect("a TLS server");
        format!("rediss://{TLS_USER}:{password}@127.0.0.1:{port}")
    }

    /// `rediss://USER:PASSWORD@127.0.0.1:TLS_PORT`.
    pub fn tls_url(&self) -> String {
        self.tls_url_with(TLS_PASSWORD)
    }

    /// The pid of the running server.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// A client for it.
    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url()).unwrap()
    }

    fn conn(&self) -> redis::Connection {
        self.client()
            .get_connection_with_timeout(Duration::from_secs(2))
            .unwrap()
    }

    /// Runs one command; `None` if the server cannot be reached or fails.
    pub fn try_command<T: redis::FromRedisValue>(&self, args: &[&str]) -> Option<T> {
        let mut conn = self
            .client()
            .get_connection_with_timeout(Duration::from_millis(500))
            .ok()?;
        let mut cmd = redis::cmd(args[0]);
        for arg in &args[1..] {
            cmd.arg(*arg);
        }
        cmd.query(&mut conn).ok()
    }

    /// Runs one command and returns its reply.
    pub fn command<T: redis::FromRedisValue>(&self, args: &[&str]) -> T {
        let mut cmd = redis::cmd(args[0]);
        for arg in &args[1..] {
            cmd.arg(*arg);
        }
        cmd.query(&mut self.conn()).unwrap()
    }

    /// Kills the server (SIGKILL) and waits for it to exit.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port (empty: no persistence).
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
        assert!(
            self.wait_ready(Duration::from_secs(5)),
            "redis-server restart"
        );
    }

    /// `DEBUG SLEEP secs` on a thread of its own (the command blocks the
    /// server, and the connection that sent it, for that long).
    pub fn pause(&self, secs: f64) -> std::thread::JoinHandle<()> {
        let mut conn = self.conn();
        std::thread::spawn(move || {
            let _: redis::Value = redis::cmd("DEBUG")
                .arg("SLEEP")
                .arg(secs)
                .query(&mut conn)
                .unwrap();
        })
    }

    /// `SCRIPT FLUSH`: the next EVALSHA gets NOSCRIPT.
    pub fn script_flush(&self) {
        let _: String = self.command(&["SCRIPT", "FLUSH"]);
    }

    /// `INFO commandstats` as command -> calls.
    pub fn command_calls(&self) -> HashMap<String, u64> {
        let info: String = self.command(&["INFO", "commandstats"]);
        info.lines()
            .filter_map(|line| {
                let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(':')?;
                let calls = rest.split(',').find_map(|f| f.strip_prefix("calls="))?;
                Some((name.to_owned(), calls.parse().ok()?))
            })
            .collect()
    }

    /// Round trips: the commands a client sends itself (scripts and their
    /// loading), not the ones scripts run inside.
    pub fn round_trips(&self) -> u64 {
        let calls = self.command_calls();
        ["evalsha", "eval", "script|load", "script"]
            .iter()
            .map(|name| calls.get(*name).copied().unwrap_or(0))
            .sum()
    }

    /// `CONFIG RESETSTAT`.
    pub fn reset_stats(&self) {
        let _: String = self.command(&["CONFIG", "RESETSTAT"]);
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Three masters (and a replica for each if asked), slots spread by
/// `redis-cli --cluster create`.
pub struct RedisCluster {
    /// Its nodes: the three first masters, then the replicas.
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts three masters and joins them.
    pub fn start() -> Self {
        Self::start_with(0, None)
    }

    /// Starts three masters and `replicas` replicas of each, on TLS with
    /// the ACL user when `tls` is given. With replicas, a master that stops
    /// answering for 1 s is failed over (`cluster-node-timeout 1000`).
    pub fn start_with(replicas: usize, tls: Option<Arc<Tls>>) -> Self {
        let node_timeout_ms = if replicas > 0 { 1_000 } else { 5_000 };
        let nodes: Vec<RedisServer> = (0..3 * (1 + replicas))
            .map(|_| RedisServer::start_with(true, node_timeout_ms, tls.clone()))
            .collect();
        let addresses: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.tls_port.unwrap_or(n.port)))
            .collect();
        let mut command = Command::new("redis-cli");
        if let Some(tls) = &tls {
            command
                .arg("--tls")
                .arg("--cacert")
                .arg(tls.ca_file())
                .args([
                    "--user",
                    TLS_USER,
                    "--pass",
                    TLS_PASSWORD,
                    "--no-auth-warning",
                ]);
        }
        let output = command
            .arg("--cluster")
            .arg("create")
            .args(&addresses)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .output()
            .unwrap_or_else(|error| {
                panic!(
                    "could not run redis-cli ({error}): {}",
                    crate::missing_program("redis-cli", "redis-tools")
                )
            });
        assert!(
            output.status.success(),
            "cluster create: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let cluster = RedisCluster { nodes };
        cluster.wait_ok(Duration::from_secs(20));
        cluster
    }

    /// Waits until every running node says `cluster_state:ok` (and, with
    /// replicas, every replica has synced).
    pub fn wait_ok(&self, within: Duration) {
        let until = Instant::now() + within;
        loop {
            let ok = self.nodes.iter().filter(|n| n.child.is_some()).all(|node| {
                let info: Option<String> = node.try_command(&["CLUSTER", "INFO"]);
                let replication: Option<String> = node.try_command(&["INFO", "replication"]);
                info.is_some_and(|info| info.contains("cluster_state:ok"))
                    && replication.is_some_and(|r| {
                        r.contains("role:master") || r.contains("master_link_status:up")
                    })
            });
            if ok {
                return;
            }
            assert!(Instant::now() < until, "the cluster never became ok");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Every node's URL (the plain ports; the TLS ones: [`Self::tls_urls`]).
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// Every node's `rediss://` URL with the ACL user.
    pub fn tls_urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::tls_url).collect()
    }

    /// The node serving `key`'s slot as master now (an index into `nodes`).
    pub fn master_of(&self, key: &str) -> usize {
        self.try_master_of(key)
            .unwrap_or_else(|| panic!("no master owns the slot of {key}"))
    }

    /// As [`Self::master_of`], `None` while no running master claims it.
    pub fn try_master_of(&self, key: &str) -> Option<usize> {
        let slot: i64 = self
            .nodes
            .iter()
            .find_map(|n| n.try_command(&["CLUSTER", "KEYSLOT", key]))?;
        self.nodes.iter().position(|node| {
            node.child.is_some()
                && node
                    .try_command::<String>(&["INFO", "replication"])
                    .is_some_and(|r| r.contains("role:master"))
                && node
                    .try_command::<String>(&["CLUSTER", "NODES"])
                    .is_some_and(|nodes| owns(&nodes, slot))
        })
    }

    /// Kills node `index` (SIGKILL).
    pub fn kill(&mut self, index: usize) {
        self.nodes[index].kill();
    }

    /// Round trips on all nodes.
    pub fn round_trips(&self) -> u64 {
        self.nodes
            .iter()
            .filter(|n| n.child.is_some())
            .map(RedisServer::round_trips)
            .sum()
    }
}

/// Whether the `myself` line of `CLUSTER NODES` lists `slot` among its ranges.
fn owns(nodes: &str, slot: i64) -> bool {
    nodes
        .lines()
        .find(|line| line.split(' ').nth(2).is_some_and(|f| f.contains("myself")))
        .is_some_and(|line| {
            line.split(' ').skip(8).any(|range| {
                let (low, high) = range.split_once('-').unwrap_or((range, range));
                matches!((low.parse::<i64>(), high.parse::<i64>()), (Ok(l), Ok(h)) if l <= slot && slot <= h)
            })
        })
}

/// A free port for a Cluster node: its bus listens 10,000 ports higher, so
/// the port must be at most 55,535 (redis-server refuses to start otherwise)
/// and that one free too.
fn free_cluster_port() -> u16 {
    const BUS_OFFSET: u16 = 10_000;
    for _ in 0..200 {
        let port = free_port();
        if let Some(bus) = port.checked_add(BUS_OFFSET)
            && std::net::TcpListener::bind(("127.0.0.1", bus)).is_ok()
        {
            return port;
        }
    }
    panic!("no free port with a free cluster bus port");
}
