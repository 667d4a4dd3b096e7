//! The private Redis a benchmark runs against: one `redis-server`, or a
//! Cluster of a few masters with the slots split evenly between them, each
//! a child process on a free loopback port in a directory of its own,
//! killed when dropped. Reads the round trips clients sent
//! (`INFO commandstats`) and resets them between measurements.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};

use super::children::Server;

/// The number of hash slots a Cluster splits.
const SLOTS: u32 = 16_384;

/// One server or a Cluster's masters, running.
pub(crate) struct RedisNodes {
    /// `redis://127.0.0.1:PORT` of every node.
    urls: Vec<String>,
    cluster: bool,
    dir: PathBuf,
    _servers: Vec<Server>,
}

impl RedisNodes {
    /// One standalone `redis-server`.
    pub(crate) async fn single(name: &str) -> anyhow::Result<Self> {
        Self::start(name, 1, false).await
    }

    /// A Cluster of `masters` masters (no replicas), the 16,384 slots split
    /// evenly between them, ready (`cluster_state:ok` on every node).
    pub(crate) async fn cluster(name: &str, masters: usize) -> anyhow::Result<Self> {
        if masters == 0 {
            bail!("a Cluster needs at least one master");
        }
        let nodes = Self::start(name, masters, true).await?;
        let per = SLOTS / u32::try_from(masters).context("too many masters")?;
        for (i, url) in nodes.urls.iter().enumerate() {
            let i = u32::try_from(i).context("too many masters")?;
            let first = i * per;
            let last = if i + 1 == u32::try_from(masters)? {
                SLOTS - 1
            } else {
                first + per - 1
            };
            let mut conn = connect(url).await?;
            let _: () = redis::cmd("CLUSTER")
                .arg("ADDSLOTSRANGE")
                .arg(first)
                .arg(last)
                .query_async(&mut conn)
                .await
                .with_context(|| format!("CLUSTER ADDSLOTSRANGE on {url}"))?;
        }
        let first = nodes.urls.first().context("no node")?;
        let mut conn = connect(first).await?;
        for url in nodes.urls.iter().skip(1) {
            let port = url.rsplit(':').next().context("a node's URL has no port")?;
            let _: () = redis::cmd("CLUSTER")
                .arg("MEET")
                .arg("127.0.0.1")
                .arg(port)
                .query_async(&mut conn)
                .await
                .with_context(|| format!("CLUSTER MEET {url}"))?;
        }
        nodes.wait_cluster_ok(masters).await?;
        Ok(nodes)
    }

    async fn start(name: &str, count: usize, cluster: bool) -> anyhow::Result<Self> {
        let dir = std::env::temp_dir().join(format!("sluice-bench-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let dir_text = dir
            .to_str()
            .context("temporary path is not UTF-8")?
            .to_owned();
        let mut servers = Vec::new();
        let mut urls = Vec::new();
        for _ in 0..count {
            let port = free_port(cluster)?;
            let port_text = port.to_string();
            let config_file = format!("nodes-{port}.conf");
            let mut args = vec![
                "--port",
                &port_text,
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                &dir_text,
            ];
            if cluster {
                args.extend([
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    &config_file,
                ]);
            }
            servers.push(Server::tcp("redis-server", &args, port).await?);
            urls.push(format!("redis://127.0.0.1:{port}"));
        }
        Ok(RedisNodes {
            urls,
            cluster,
            dir,
            _servers: servers,
        })
    }

    async fn wait_cluster_ok(&self, masters: usize) -> anyhow::Result<()> {
        let known = format!("cluster_known_nodes:{masters}");
        for _ in 0..300 {
            let mut ok = true;
            for url in &self.urls {
                let mut conn = connect(url).await?;
                let info: String = redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query_async(&mut conn)
                    .await?;
                ok &= info.contains("cluster_state:ok") && info.contains(&known);
            }
            if ok {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        bail!("the {masters}-master Cluster never reached cluster_state:ok")
    }

    /// Every node's URL.
    pub(crate) fn urls(&self) -> &[String] {
        &self.urls
    }

    /// Whether the nodes form a Cluster.
    pub(crate) fn is_cluster(&self) -> bool {
        self.cluster
    }

    /// Round trips clients sent every node (scripts and their loading), not
    /// the commands scripts run inside.
    pub(crate) async fn round_trips(&self) -> anyhow::Result<u64> {
        let mut sum = 0;
        for url in &self.urls {
            let mut conn = connect(url).await?;
            let info: String = redis::cmd("INFO")
                .arg("commandstats")
                .query_async(&mut conn)
                .await?;
            sum += script_calls(&info);
        }
        Ok(sum)
    }

    /// Empties every node and zeroes its command counters.
    pub(crate) async fn reset(&self) -> anyhow::Result<()> {
        for url in &self.urls {
            let mut conn = connect(url).await?;
            let _: () = redis::cmd("FLUSHALL").query_async(&mut conn).await?;
            let _: String = redis::cmd("CONFIG")
                .arg("RESETSTAT")
                .query_async(&mut conn)
                .await?;
        }
        Ok(())
    }
}

impl Drop for RedisNodes {
    fn drop(&mut self) {
        // The servers are killed as `_servers` drops, after this.
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn connect(url: &str) -> anyhow::Result<redis::aio::MultiplexedConnection> {
    let client = redis::Client::open(url)?;
    client
        .get_multiplexed_async_connection()
        .await
        .with_context(|| format!("connecting to {url}"))
}

/// The `calls=` of the script commands in `INFO commandstats`.
fn script_calls(info: &str) -> u64 {
    info.lines()
        .filter_map(|line| {
            let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let counted = matches!(name, "evalsha" | "eval" | "script|load" | "script");
            let calls: u64 = rest
                .split(',')
                .find_map(|f| f.strip_prefix("calls="))?
                .parse()
                .ok()?;
            counted.then_some(calls)
        })
        .sum()
}

/// A free loopback port; for a Cluster node, one whose bus port (10,000
/// above it) exists and is free too.
fn free_port(cluster: bool) -> anyhow::Result<u16> {
    for _ in 0..200 {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        if !cluster {
            return Ok(port);
        }
        if let Some(bus) = port.checked_add(10_000)
            && std::net::TcpListener::bind(("127.0.0.1", bus)).is_ok()
        {
            return Ok(port);
        }
    }
    bail!("no free port with a free Cluster bus port")
}

#[cfg(test)]
mod tests {
    use super::script_calls;

    #[test]
    fn round_trips_count_scripts_and_their_loading_only() {
        let info = "# Commandstats\r\ncmdstat_evalsha:calls=10,usec=5\r\n\
                    cmdstat_script|load:calls=2,usec=1\r\ncmdstat_get:calls=99,usec=1\r\n";
        assert_eq!(script_calls(info), 12);
    }
}
