//! Issue 18's goal for keyed scopes is a ratio: a call on one of 1,000,000
//! idle credentials against a call on the only credential. On a shared VM
//! the cold call (bound by memory) moves with the host by more than the
//! goal's margin between two criterion runs seconds apart: 2.45× to 4.72×
//! across five runs of the gate bench. Here the two are measured in
//! alternating batches, so each pair's ratio is taken at one moment, and
//! the median pair's is printed (`scripts/bench.sh` keeps it beside the
//! gate bench's two figures).
//!
//! `cargo bench -p sluice-bench --bench keyed_ratio`
#![allow(clippy::unwrap_used, missing_docs)]

use std::hint::black_box;
use std::time::{Duration, Instant};

mod common;

use common::{idle_credentials, routed, runtime, scopes};

/// Pairs of batches, one on the idle credentials and one on the only
/// credential.
const PAIRS: usize = 41;
/// Calls per batch: long enough that a batch on the only credential runs
/// warm after its first few calls, short enough that a slow moment of the
/// machine falls on both batches of a pair.
const BATCH: usize = 20_000;

fn main() {
    // `cargo bench` passes `--bench`; a filter or `--list` (as `cargo
    // bench -- NAME` passes to every bench) has nothing to select here.
    if std::env::args().skip(1).any(|arg| arg != "--bench") {
        return;
    }
    let rt = runtime();
    let scopes = scopes();
    let (many, one) = idle_credentials(&rt, scopes);
    let mut i = 0usize;
    let mut pairs: Vec<(Duration, Duration)> = Vec::with_capacity(PAIRS);
    rt.block_on(async {
        for _ in 0..PAIRS {
            let start = Instant::now();
            for _ in 0..BATCH {
                i = (i + 7_919) % scopes;
                black_box(many.call(routed(i)).await);
            }
            let cold = start.elapsed();
            let start = Instant::now();
            for _ in 0..BATCH {
                black_box(one.call(routed(0)).await);
            }
            pairs.push((cold, start.elapsed()));
        }
    });
    let ratio = median(
        pairs
            .iter()
            .map(|(cold, warm)| cold.as_secs_f64() / warm.as_secs_f64()),
    );
    let cold = median(pairs.iter().map(|(cold, _)| per_call(*cold)));
    let warm = median(pairs.iter().map(|(_, warm)| per_call(*warm)));
    println!(
        "keyed scopes, interleaved: ratio {ratio:.2} (median of {PAIRS} pairs of {BATCH} calls; {cold:.2} µs against {warm:.2} µs a call; {scopes} credentials)"
    );
}

fn per_call(batch: Duration) -> f64 {
    batch.as_secs_f64() * 1e6 / BATCH as f64
}

fn median(values: impl Iterator<Item = f64>) -> f64 {
    let mut values: Vec<f64> = values.collect();
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}
