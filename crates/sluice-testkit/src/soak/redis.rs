//! The soak's Redis: one node (plain, or TLS with an ACL user) or a
//! three-master, three-replica Cluster; and the fault it suffers at half
//! time: the node killed and restarted, or the master owning the
//! credential's slot killed and a replica promoted by the cluster itself.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::options::SoakOptions;
use crate::{RedisCluster, RedisServer, TLS_PASSWORD, Tls};

/// The hash tag of every key of the soak's credential (`api`): its slot.
const CREDENTIAL_TAG: &str = "{api}";
/// How long a replica may take to be promoted (node timeout 1 s, plus the election).
const PROMOTION_WITHIN: Duration = Duration::from_secs(20);

/// The Redis a soak runs against.
pub(super) struct SoakRedis {
    nodes: Nodes,
    /// The certificates, while the servers use them.
    tls: Option<Arc<Tls>>,
}

enum Nodes {
    Single(RedisServer),
    Cluster(RedisCluster),
}

/// What the Redis went through, since the load started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisFault {
    /// What was killed: `redis` or `master N of the credential's slot`.
    pub killed: String,
    /// When it was killed.
    pub at: Duration,
    /// When Redis served the credential again: restarted, or a replica
    /// (named) promoted.
    pub back: Duration,
    /// What came back: `restarted` or `replica N promoted`.
    pub how: String,
}

impl SoakRedis {
    /// Starts what `options` asks for.
    pub(super) fn start(options: &SoakOptions) -> SoakRedis {
        let tls = options.redis_tls.then(Tls::generate);
        let nodes = if options.cluster_failover {
            Nodes::Cluster(RedisCluster::start_with(1, tls.clone()))
        } else {
            match &tls {
                Some(tls) => Nodes::Single(RedisServer::start_tls(tls.clone())),
                None => Nodes::Single(RedisServer::start()),
            }
        };
        SoakRedis { nodes, tls }
    }

    /// The `[shared]` section's fields for the sidecar.
    pub(super) fn shared_section(&self) -> String {
        let url = |node: &RedisServer| match self.tls {
            Some(_) => node.tls_url(),
            None => node.url(),
        };
        let mut section = match &self.nodes {
            Nodes::Single(node) => format!("redis_url = \"{}\"\n", url(node)),
            Nodes::Cluster(cluster) => {
                let urls: Vec<String> = cluster
                    .nodes
                    .iter()
                    .map(|node| format!("\"{}\"", url(node)))
                    .collect();
                format!("redis_urls = [{}]\n", urls.join(", "))
            }
        };
        if let Some(tls) = &self.tls {
            section.push_str(&format!("tls_ca_file = \"{}\"\n", tls.ca_file().display()));
        }
        section
    }

    /// Texts that must not appear in the sidecar's output: the ACL
    /// user's password when there is one.
    pub(super) fn secrets(&self) -> Vec<&'static str> {
        self.tls.iter().map(|_| TLS_PASSWORD).collect()
    }

    /// What the soak's table calls it.
    pub(super) fn describe(&self) -> &'static str {
        match (&self.nodes, &self.tls) {
            (Nodes::Single(_), None) => "one node",
            (Nodes::Single(_), Some(_)) => "one node, TLS with an ACL user",
            (Nodes::Cluster(_), None) => "Cluster, 3 masters and 3 replicas",
            (Nodes::Cluster(_), Some(_)) => {
                "Cluster, 3 masters and 3 replicas, TLS with an ACL user"
            }
        }
    }

    /// Waits until `at` (since `started`), then breaks Redis: a node is
    /// killed and, `outage` later, restarted; a Cluster loses the master of
    /// the credential's slot and promotes its replica. Blocks the thread.
    pub(super) fn disrupt(
        &mut self,
        started: Instant,
        at: Duration,
        outage: Duration,
    ) -> RedisFault {
        std::thread::sleep(at.saturating_sub(started.elapsed()));
        match &mut self.nodes {
            Nodes::Single(node) => {
                let at = started.elapsed();
                node.kill();
                std::thread::sleep(outage);
                node.restart();
                RedisFault {
                    killed: "redis".to_owned(),
                    at,
                    back: started.elapsed(),
                    how: "restarted".to_owned(),
                }
            }
            Nodes::Cluster(cluster) => {
                let owner = cluster.master_of(CREDENTIAL_TAG);
                let at = started.elapsed();
                cluster.kill(owner);
                let until = Instant::now() + PROMOTION_WITHIN;
                let promoted = loop {
                    std::thread::sleep(Duration::from_millis(100));
                    match cluster.try_master_of(CREDENTIAL_TAG) {
                        Some(index) if index != owner => break Some(index),
                        _ if Instant::now() > until => break None,
                        _ => {}
                    }
                };
                RedisFault {
                    killed: format!("master {owner} of the credential's slot"),
                    at,
                    back: started.elapsed(),
                    how: match promoted {
                        Some(index) => format!("replica {index} promoted"),
                        None => format!(
                            "no replica promoted within {} s",
                            PROMOTION_WITHIN.as_secs()
                        ),
                    },
                }
            }
        }
    }
}
