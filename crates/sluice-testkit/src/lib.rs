//! Test support shared by sluice's crates (a dev-dependency only):
//! the Python and programs the suite needs (or the command that installs
//! them), private `redis-server` processes, `sluice` subcommands run as processes,
//! counting requests per window, a misbehaving upstream, `/proc` readings
//! and the sidecar soak. Panics freely: it only runs in tests.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod otlp;
mod prereq;
mod process;
mod procfs;
mod redis;
mod rng;
pub mod soak;
mod upstream;

use std::net::TcpListener;

pub use otlp::{Export, OtlpReceiver, ReceivedSpan};
pub use prereq::{
    SETUP, missing_program, python, repo_root, require_program, test_venv, venv_install_command,
};
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
    busiest_window(starts, window_ms).0
}

/// The most starts in any window of `window_ms`, and the first start of
/// the earliest window holding that many (0 when there are none).
pub fn busiest_window(starts: &[f64], window_ms: f64) -> (usize, f64) {
    let mut starts = starts.to_vec();
    starts.sort_by(f64::total_cmp);
    let mut best = (0, 0.0);
    let mut lo = 0;
    for hi in 0..starts.len() {
        // A tiny epsilon absorbs float rounding of microsecond times.
        while starts[hi] - starts[lo] >= window_ms - 1e-6 {
            lo += 1;
        }
        if hi - lo + 1 > best.0 {
            best = (hi - lo + 1, starts[lo]);
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_busiest_window_is_counted_from_its_first_start() {
        assert_eq!(busiest_window(&[], 1_000.0), (0, 0.0));
        // Unsorted; the window is half-open: 1,000 ms after 0 is outside it.
        let starts = [1_000.0, 0.0, 2_500.0, 2_600.0, 3_400.0, 500.0];
        assert_eq!(busiest_window(&starts, 1_000.0), (3, 2_500.0));
        assert_eq!(max_in_window(&starts, 1_000.0), 3);
        // Ties go to the earliest window.
        assert_eq!(
            busiest_window(&[0.0, 10.0, 5_000.0, 5_010.0], 100.0),
            (2, 0.0)
        );
    }
}
