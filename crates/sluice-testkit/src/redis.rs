//! Private `redis-server` processes on free loopback ports, killed on drop
//! (even on panic), with fault injection: kill, restart, `DEBUG SLEEP`,
//! `SCRIPT FLUSH`; and a three-master cluster.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::free_port;

static NEXT_DIR: AtomicU64 = AtomicU64::new(0);

/// One `redis-server` of our own. Killed when dropped.
pub struct RedisServer {
    /// The port it listens on (127.0.0.1).
    pub port: u16,
    dir: PathBuf,
    cluster: bool,
    child: Option<Child>,
}

impl RedisServer {
    /// A standalone server on a free port.
    pub fn start() -> Self {
        Self::start_with(false)
    }

    fn start_with(cluster: bool) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "sluice-redis-test-{}-{}",
            std::process::id(),
            NEXT_DIR.fetch_add(1, Ordering::SeqCst)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        for _ in 0..5 {
            let mut server = RedisServer {
                port: free_port(),
                dir: dir.clone(),
                cluster,
                child: None,
            };
            server.spawn();
            if server.wait_ready(Duration::from_secs(5)) {
                return server;
            }
            server.kill();
        }
        panic!("could not start redis-server");
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
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if self.cluster {
            command
                .args(["--cluster-enabled", "yes"])
                .args(["--cluster-node-timeout", "5000"])
                .arg("--cluster-config-file")
                .arg(format!("nodes-{}.conf", self.port));
        }
        self.child = Some(command.spawn().expect("redis-server is installed"));
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

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
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

/// Three masters, no replicas, slots spread by `redis-cli --cluster create`.
pub struct RedisCluster {
    /// Its three masters.
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts three nodes and joins them.
    pub fn start() -> Self {
        let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start_with(true)).collect();
        let addresses: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let output = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addresses)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .expect("redis-cli is installed");
        assert!(
            output.status.success(),
            "cluster create: {}",
            String::from_utf8_lossy(&output.stdout)
        );
        let cluster = RedisCluster { nodes };
        let until = Instant::now() + Duration::from_secs(20);
        while !cluster.nodes.iter().all(|node| {
            node.command::<String>(&["CLUSTER", "INFO"])
                .contains("cluster_state:ok")
        }) {
            assert!(Instant::now() < until, "the cluster never became ok");
            std::thread::sleep(Duration::from_millis(100));
        }
        cluster
    }

    /// Every node's URL.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// Round trips on all nodes.
    pub fn round_trips(&self) -> u64 {
        self.nodes.iter().map(RedisServer::round_trips).sum()
    }
}
