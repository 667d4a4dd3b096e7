//! What a run showed: counts from the API's records and the model's log, as a table or JSON.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde::Serialize;
use sluice_fake::Record;

use super::model::View;
use super::replay::Run;
use super::scenario::is_agent;

/// One run's figures. Request counts come from the API's records (the
/// witness); call counts from what the model was told.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Summary {
    pub(crate) harness: &'static str,
    pub(crate) upstream_requests: usize,
    pub(crate) upstream_throttled: usize,
    pub(crate) victim_requests: usize,
    pub(crate) victim_failures: usize,
    pub(crate) agent_calls: usize,
    pub(crate) agent_ok: usize,
    pub(crate) agent_rate_limited: usize,
    pub(crate) agent_timed_out: usize,
    pub(crate) agent_failed: usize,
    pub(crate) agent_quota_exhausted: usize,
    /// Upstream agent requests per logical call.
    pub(crate) amplification: f64,
    pub(crate) p50_ms: u64,
    pub(crate) p95_ms: u64,
    /// The most agent requests the API was serving at once.
    pub(crate) max_in_flight: usize,
    /// Deferred calls the model re-issued after their wait.
    pub(crate) reissued: usize,
    /// Of those, the ones deferred again.
    pub(crate) reissued_deferred_again: usize,
    /// The wait of every `rate_limited` the model was told, in the order
    /// the answers came.
    pub(crate) deferral_waits_ms: Vec<u64>,
}

/// `--json`'s shape: the incident's runs, then the second phase's.
#[derive(Debug, Serialize)]
pub(crate) struct Json<'a> {
    pub(crate) seconds: u64,
    pub(crate) runs: &'a [Summary],
    pub(crate) twelve_calls: &'a [Summary],
}

pub(crate) fn summarize(run: &Run) -> Summary {
    let (agent, victim): (Vec<&Record>, Vec<&Record>) =
        run.records.iter().partition(|r| is_agent(r));
    let throttled = |records: &[&Record]| records.iter().filter(|r| r.status == 429).count();
    let views = |f: fn(&View) -> bool| run.calls.iter().filter(|c| f(&c.view)).count();
    let mut latencies: Vec<Duration> = run.calls.iter().map(|c| c.elapsed).collect();
    latencies.sort_unstable();
    let calls = run.calls.len();
    Summary {
        harness: run.harness.name(),
        upstream_requests: agent.len(),
        upstream_throttled: throttled(&agent),
        victim_requests: victim.len(),
        victim_failures: victim.iter().filter(|r| r.status != 200).count(),
        agent_calls: calls,
        agent_ok: views(|v| *v == View::Ok),
        agent_rate_limited: views(|v| matches!(v, View::RateLimited(_))),
        agent_timed_out: views(|v| *v == View::TimedOut),
        agent_failed: views(|v| *v == View::Failed),
        agent_quota_exhausted: views(|v| *v == View::QuotaExhausted),
        amplification: if calls == 0 {
            0.0
        } else {
            agent.len() as f64 / calls as f64
        },
        p50_ms: percentile_ms(&latencies, 50),
        p95_ms: percentile_ms(&latencies, 95),
        max_in_flight: peak_overlap(
            agent
                .iter()
                .filter(|r| r.status == 200)
                .map(|r| (r.t_ms, r.end_ms)),
        ),
        reissued: run.reissues.issued.load(Ordering::Relaxed),
        reissued_deferred_again: run.reissues.deferred_again.load(Ordering::Relaxed),
        deferral_waits_ms: run
            .calls
            .iter()
            .filter_map(|c| match c.view {
                View::RateLimited(wait) => {
                    Some(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX))
                }
                _ => None,
            })
            .collect(),
    }
}

/// Nearest-rank percentile of sorted durations, in whole milliseconds.
fn percentile_ms(sorted: &[Duration], p: usize) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (p * sorted.len()).div_ceil(100).clamp(1, sorted.len());
    u64::try_from(sorted[rank - 1].as_millis()).unwrap_or(u64::MAX)
}

/// The most intervals `[start, end)` open at once.
fn peak_overlap(intervals: impl Iterator<Item = (f64, f64)>) -> usize {
    let mut edges: Vec<(f64, i32)> = intervals
        .flat_map(|(start, end)| [(start, 1), (end, -1)])
        .collect();
    // Ends sort before starts at the same instant: back-to-back is not overlap.
    edges.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let (mut open, mut peak) = (0i32, 0i32);
    for (_, delta) in edges {
        open += delta;
        peak = peak.max(open);
    }
    usize::try_from(peak).unwrap_or(0)
}

/// The incident's side-by-side table and a verdict.
pub(crate) fn table(runs: &[Summary], seconds: u64) -> String {
    let heading = format!(
        "A key rated 10 requests per rolling second, shared with a sync job at 4/s; {seconds} s per harness."
    );
    let mut out = rows(runs, &heading);
    let _ = writeln!(out, "\n{}", verdict(runs));
    out
}

/// The second phase's table ([`super::replay::TWELVE_CALLS`]) and what it
/// showed.
pub(crate) fn twelve_table(runs: &[Summary]) -> String {
    let heading = "Twelve calls, four now: one turn of 12 distinct calls beside the sync job; sluice holds \
                   2 running and 2 queued, and the model re-issues each deferred call after its wait.";
    let mut out = rows(runs, heading);
    let _ = writeln!(out, "\n{}", twelve_verdict(runs));
    out
}

/// The rows of `runs` side by side under `heading`.
fn rows(runs: &[Summary], heading: &str) -> String {
    type Row = (&'static str, fn(&Summary) -> String);
    let rows: [Row; 16] = [
        ("upstream requests (agent)", |s| {
            s.upstream_requests.to_string()
        }),
        ("upstream 429s (agent)", |s| {
            s.upstream_throttled.to_string()
        }),
        ("victim requests (sync job)", |s| {
            s.victim_requests.to_string()
        }),
        ("victim failures (sync job)", |s| {
            s.victim_failures.to_string()
        }),
        ("logical agent calls", |s| s.agent_calls.to_string()),
        ("  answered ok", |s| s.agent_ok.to_string()),
        ("  rate_limited shown to model", |s| {
            s.agent_rate_limited.to_string()
        }),
        ("  re-issued and deferred again", |s| {
            format!("{} of {}", s.reissued_deferred_again, s.reissued)
        }),
        ("  timed out", |s| s.agent_timed_out.to_string()),
        ("  failed (\"tool failed\")", |s| s.agent_failed.to_string()),
        ("  quota exhausted", |s| s.agent_quota_exhausted.to_string()),
        ("amplification (requests/call)", |s| {
            format!("{:.2}", s.amplification)
        }),
        ("p50 call latency", |s| format!("{} ms", s.p50_ms)),
        ("p95 call latency", |s| format!("{} ms", s.p95_ms)),
        ("peak agent requests in flight", |s| {
            s.max_in_flight.to_string()
        }),
        ("", |_| String::new()),
    ];
    let mut out = String::new();
    let _ = writeln!(out, "\n{heading}\n");
    let _ = write!(out, "{:<32}", "");
    for run in runs {
        let _ = write!(out, "{:>12}", run.harness);
    }
    out.push('\n');
    for (label, value) in rows.iter().filter(|(label, _)| !label.is_empty()) {
        let _ = write!(out, "{label:<32}");
        for run in runs {
            let _ = write!(out, "{:>12}", value(run));
        }
        out.push('\n');
    }
    out
}

fn twelve_verdict(runs: &[Summary]) -> String {
    let [naive, sluice] = runs else {
        return String::new();
    };
    let waits = match (
        sluice.deferral_waits_ms.iter().min(),
        sluice.deferral_waits_ms.iter().max(),
    ) {
        (Some(least), Some(most)) => format!(", told waits from {least} ms to {most} ms"),
        _ => String::new(),
    };
    format!(
        "Verdict: sluice deferred calls {}{waits}; re-issued after their waits, {} of {} were \
         deferred again, and {} calls were answered ok with {} requests ({} throttled). The naive harness \
         turned {} throttled requests into \"tool failed\" {}, and the model rephrased them into {} calls in all.",
        times(sluice.agent_rate_limited),
        sluice.reissued_deferred_again,
        sluice.reissued,
        sluice.agent_ok,
        sluice.upstream_requests,
        sluice.upstream_throttled,
        naive.upstream_throttled,
        times(naive.agent_failed),
        naive.agent_calls,
    )
}

fn verdict(runs: &[Summary]) -> String {
    let [naive, sluice] = runs else {
        return String::new();
    };
    let mut verdict = format!(
        "Verdict: the naive harness cost the production sync job {} failed requests and sent {:.2} upstream requests \
         per call ({} throttled); sluice cost it {} and sent {:.2} per call ({} throttled).",
        naive.victim_failures,
        naive.amplification,
        naive.upstream_throttled,
        sluice.victim_failures,
        sluice.amplification,
        sluice.upstream_throttled,
    );
    if naive.agent_failed + sluice.agent_rate_limited > 0 {
        let _ = write!(
            verdict,
            " The model heard \"tool failed\" {} from the naive harness (and split each into more calls), \
             and \"not yet, retry in N ms\" {} from sluice.",
            times(naive.agent_failed),
            times(sluice.agent_rate_limited)
        );
    }
    verdict
}

fn times(n: usize) -> String {
    match n {
        1 => "once".to_owned(),
        n => format!("{n} times"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_nearest_rank() {
        let sorted: Vec<Duration> = (1..=20).map(Duration::from_millis).collect();
        assert_eq!(percentile_ms(&sorted, 50), 10);
        assert_eq!(percentile_ms(&sorted, 95), 19);
        assert_eq!(percentile_ms(&[], 95), 0);
    }

    #[test]
    fn back_to_back_is_not_overlap() {
        assert_eq!(peak_overlap([(0.0, 10.0), (10.0, 20.0)].into_iter()), 1);
        assert_eq!(
            peak_overlap([(0.0, 10.0), (5.0, 20.0), (6.0, 7.0)].into_iter()),
            3
        );
    }
}
