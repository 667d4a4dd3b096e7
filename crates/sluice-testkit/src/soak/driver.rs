//! Running a soak: Redis, the misbehaving upstream and the sidecar started, the load and the monitor driven, Redis killed and restarted, the report gathered.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::mix::{Mix, fault, parse_target};
use super::options::{FALLBACK_OVERSHOOT, SECRET, SoakOptions};
use super::redis::SoakRedis;
use super::report::{Sample, SoakReport};
use super::requests::{proxy_request, turns_request};
use super::sidecar::{config, final_modes, shared_modes, stuck_scopes};
use super::tally::Tally;
use crate::procfs::proc_stats;
use crate::upstream::{Fault, Upstream};
use crate::{SluiceProcess, max_in_window};

/// Runs a soak: starts Redis, the misbehaving upstream and the sidecar
/// (`launch(config, env)` must start `sluice serve --config CONFIG` or an
/// equivalent with `env` added), drives it, and reports.
pub async fn run(
    options: &SoakOptions,
    launch: impl FnOnce(&Path, &[(&str, &str)]) -> SluiceProcess,
) -> SoakReport {
    let attempts: Arc<Mutex<HashMap<u64, u32>>> = Arc::default();
    let counted = attempts.clone();
    // When each request reached the upstream (ms), for the spend bound.
    let request_starts: Arc<Mutex<Vec<f64>>> = Arc::default();
    let noted = request_starts.clone();
    let upstream = Upstream::with_records(
        move |seen| {
            noted.lock().push(seen.at.as_secs_f64() * 1_000.0);
            let Some((kind, n)) = parse_target(&seen.target) else {
                return Fault::status(404, &[]);
            };
            *counted.lock().entry(n).or_default() += 1;
            fault(kind)
        },
        0,
    )
    .await;
    let redis = SoakRedis::start(options);
    let redis_kind = redis.describe();
    let redis_secrets = redis.secrets();
    let dir = std::env::temp_dir().join(format!(
        "sluice-soak-{}-{}",
        std::process::id(),
        options.seed
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let config = config(
        &dir,
        &upstream.url(),
        &redis.shared_section(),
        options.rate,
        options.shared,
    );
    let mut sidecar = launch(&config, &[("SOAK_API_KEY", SECRET), ("RUST_LOG", "warn")]);
    let pid = sidecar.pid();
    let base = sidecar.url.clone();
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(options.workers * 2)
        .build()
        .unwrap();

    let tally = Arc::new(Tally {
        report: Mutex::new(SoakReport::default()),
        calls: AtomicU64::new(0),
        next_n: AtomicU64::new(0),
        stop: AtomicBool::new(false),
    });
    let idle = proc_stats(pid).unwrap_or_default();
    tally.report.lock().samples.push(Sample {
        label: "idle",
        at: Duration::ZERO,
        calls: 0,
        stats: idle,
    });
    let started = Instant::now();

    // Redis: at half time, killed and restarted after the outage, or its
    // Cluster's master for the credential killed and a replica promoted.
    let outage = options.redis_outage;
    let half = options.duration / 2;
    let redis_thread = std::thread::spawn(move || {
        let mut redis = redis;
        let fault = redis.disrupt(started, half, outage);
        (redis, fault)
    });

    // Samples and the shared backend's modes, while the load runs.
    let monitor = {
        let (tally, client, base) = (tally.clone(), client.clone(), base.clone());
        let duration = options.duration;
        tokio::spawn(async move {
            let mut marks = vec![(duration / 10, "start"), (duration / 2, "middle")];
            marks.reverse();
            while !tally.stop.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(500)).await;
                let Some(stats) = proc_stats(pid) else { break };
                let at = started.elapsed();
                let calls = tally.calls.load(Ordering::SeqCst);
                {
                    let mut report = tally.report.lock();
                    report.peak_rss_kib = report.peak_rss_kib.max(stats.rss_kib);
                    report.peak_fds = report.peak_fds.max(stats.fds);
                    report.series.push(Sample {
                        label: "",
                        at,
                        calls,
                        stats,
                    });
                    if let Some(&(when, label)) = marks.last()
                        && at >= when
                    {
                        marks.pop();
                        report.samples.push(Sample {
                            label,
                            at,
                            calls,
                            stats,
                        });
                    }
                }
                if let Some(modes) = shared_modes(&client, &base).await {
                    let joined = modes.join(",");
                    let mut report = tally.report.lock();
                    if report.mode_changes.last().map(|(_, m)| m) != Some(&joined) {
                        report.mode_changes.push((started.elapsed(), joined));
                    }
                    report.modes.extend(modes);
                }
            }
        })
    };

    let mut workers = tokio::task::JoinSet::new();
    for w in 0..options.workers {
        let (tally, client, base) = (tally.clone(), client.clone(), base.clone());
        let options = options.clone();
        let mut mix = Mix(crate::SplitMix(
            options.seed.wrapping_mul(1_000_003).wrapping_add(w as u64),
        ));
        workers.spawn(async move {
            let until = started + options.duration;
            while Instant::now() < until
                && tally.calls.load(Ordering::SeqCst) < options.max_calls
                && !tally.stop.load(Ordering::SeqCst)
            {
                let pause = if mix.below(10) == 0 {
                    proxy_request(&tally, &client, &base, &mut mix, &options).await
                } else {
                    turns_request(&tally, &client, &base, &mut mix, &options, w).await
                };
                if let Some(pause) = pause {
                    // Told "not yet", a model waits before asking again.
                    tokio::time::sleep(pause.min(Duration::from_millis(200))).await;
                }
            }
        });
    }
    while workers.join_next().await.is_some() {}
    let load_ended = started.elapsed();
    let end_stats = proc_stats(pid).unwrap_or_default();
    {
        let mut report = tally.report.lock();
        report.elapsed = load_ended;
        report.samples.push(Sample {
            label: "end",
            at: load_ended,
            calls: tally.calls.load(Ordering::SeqCst),
            stats: end_stats,
        });
    }
    tally.stop.store(true, Ordering::SeqCst);
    let _ = monitor.await;
    let (redis, redis_fault) = redis_thread.join().unwrap();

    // Every permit and queue slot must come back once nothing is running.
    let mut stuck = Vec::new();
    for _ in 0..50 {
        stuck = stuck_scopes(&client, &base).await;
        if stuck.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The shared backend's mode changes only on a decision: one whose last
    // call came while the breaker was still open after Redis restarted
    // reads `fallback` until its next call. Wait, bounded, for recovery:
    // one ordinary request at a time until every credential is shared.
    let mut mix = Mix(crate::SplitMix(options.seed ^ 0x5eed));
    let recovery_until = Instant::now() + Duration::from_secs(10);
    while Instant::now() < recovery_until {
        let modes = final_modes(&client, &base).await;
        if !modes.is_empty() && modes.iter().all(|mode| mode == "shared") {
            break;
        }
        let _ = turns_request(&tally, &client, &base, &mut mix, options, options.workers).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = proc_stats(pid).unwrap_or_default();
    let final_modes = final_modes(&client, &base).await;
    let calls = tally.calls.load(Ordering::SeqCst);
    let stderr = sidecar.stop();
    drop(redis);
    let _ = std::fs::remove_dir_all(&dir);

    let mut report = tally.report.lock().clone();
    report.samples.push(Sample {
        label: "after",
        at: started.elapsed(),
        calls,
        stats: after,
    });
    report.peak_rss_kib = report.peak_rss_kib.max(after.peak_rss_kib);
    report.calls = calls;
    report.redis = redis_kind;
    report.redis_fault = Some(redis_fault);
    report.expect_shared = options.shared;
    report.busiest_second = max_in_window(&request_starts.lock(), 1_000.0);
    let burst = (options.rate / 10).max(1);
    report.spend_bound = (f64::from(options.rate + burst) * (1.0 + FALLBACK_OVERSHOOT)) as usize;
    report.stuck = stuck;
    report.final_modes = final_modes;
    report.secret_leaked = stderr.contains(SECRET)
        || stderr.contains("sk-soak")
        || redis_secrets.iter().any(|secret| stderr.contains(secret));
    report.upstream_requests = upstream.requests();
    report.upstream_connections = upstream.connections();
    report.max_requests_per_call = attempts.lock().values().copied().max().unwrap_or(0);
    report
}
