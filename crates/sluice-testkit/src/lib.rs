//! Test support shared by sluice's crates (a dev-dependency only):
//! private `redis-server` processes, `sluice` subcommands run as processes,
//! counting requests per window, a misbehaving upstream, `/proc` readings
//! and the sidecar soak. Panics freely: it only runs in tests.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod process;
mod procfs;
mod redis;
mod rng;
pub mod soak;
mod upstream;

use std::net::TcpListener;

pub use process::{SluiceProcess, exited_within, serve_args};
pub use procfs::{ProcStats, proc_stats};
pub use redis::{RedisCluster, RedisServer, TLS_PASSWORD, TLS_USER, Tls};
pub use rng::SplitMix;
pub use upstream::{Fault, Seen, Upstream};

/// A free TCP port on 127.0.0.1 (free now; another process may take it).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The most starts in any half-open window `[t, t + window_ms)`.
pub fn max_in_window(starts: &[f64], window_ms: f64) -> usize {
    let mut starts = starts.to_vec();
    starts.sort_by(f64::total_cmp);
    let mut best = 0;
    let mut lo = 0;
    for hi in 0..starts.len() {
        // A tiny epsilon absorbs float rounding of microsecond times.
        while starts[hi] - starts[lo] >= window_ms - 1e-6 {
            lo += 1;
        }
        best = best.max(hi - lo + 1);
    }
    best
}
