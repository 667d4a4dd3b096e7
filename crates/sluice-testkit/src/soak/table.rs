//! A soak's report as a text table: totals, samples, memory over time, outcomes by fault.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::report::SoakReport;

impl SoakReport {
    /// The summary as a text table.
    pub fn table(&self) -> String {
        let mut out = String::new();
        let secs = self.elapsed.as_secs_f64().max(1e-9);
        let _ = writeln!(
            out,
            "soak: {:.0} s, {} calls ({:.0}/s) in {} requests ({} proxied)",
            secs,
            self.calls,
            self.calls as f64 / secs,
            self.requests,
            self.proxied
        );
        let _ = writeln!(
            out,
            "answered exactly once: {}   lost: {}   wrong ids: {}   late (> deadline + slack): {} (worst {} ms)",
            self.answered,
            self.lost,
            self.wrong_ids,
            self.late,
            self.worst_late.as_millis()
        );
        let _ = writeln!(
            out,
            "upstream: {} requests on {} connections; most requests for one call: {}",
            self.upstream_requests, self.upstream_connections, self.max_requests_per_call
        );
        if let Some(fault) = &self.redis_fault {
            let _ = writeln!(
                out,
                "redis ({}): {} killed at {:.1} s, {} at {:.1} s; shared-backend modes seen: {:?}; at the end: {:?}",
                self.redis,
                fault.killed,
                fault.at.as_secs_f64(),
                fault.how,
                fault.back.as_secs_f64(),
                self.modes,
                self.final_modes
            );
        }
        let changes: Vec<String> = self
            .mode_changes
            .iter()
            .map(|(at, modes)| format!("{:.1}s:{modes}", at.as_secs_f64()))
            .collect();
        let _ = writeln!(out, "mode changes: {}", changes.join(" "));
        let _ = writeln!(
            out,
            "busiest second at the upstream: {} requests (bound (rate + burst) x 1.02 = {})",
            self.busiest_second, self.spend_bound
        );
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "{:<8} {:>8} {:>10} {:>10} {:>10} {:>6} {:>8}",
            "sample", "at (s)", "calls", "RSS MiB", "peak MiB", "fds", "threads"
        );
        for s in &self.samples {
            let _ = writeln!(
                out,
                "{:<8} {:>8.1} {:>10} {:>10.1} {:>10.1} {:>6} {:>8}",
                s.label,
                s.at.as_secs_f64(),
                s.calls,
                s.stats.rss_kib as f64 / 1024.0,
                s.stats.peak_rss_kib as f64 / 1024.0,
                s.stats.fds,
                s.stats.threads
            );
        }
        let _ = writeln!(
            out,
            "peak RSS sampled: {:.1} MiB; most fds sampled: {}",
            self.peak_rss_kib as f64 / 1024.0,
            self.peak_fds
        );
        let step = (self.series.len() / 12).max(1);
        let trace: Vec<String> = self
            .series
            .iter()
            .step_by(step)
            .map(|s| {
                format!(
                    "{:.0}s:{:.1}MiB/{}fd",
                    s.at.as_secs_f64(),
                    s.stats.rss_kib as f64 / 1024.0,
                    s.stats.fds
                )
            })
            .collect();
        let _ = writeln!(out, "RSS over time: {}", trace.join(" "));
        if let Some(trend) = self.memory_trend() {
            let _ = writeln!(
                out,
                "RSS growth over the last third: {:.0} bytes per call; end {:.1} MiB vs {:.1} MiB at most before the last third",
                trend.tail_bytes_per_call,
                trend.end_rss_kib as f64 / 1024.0,
                trend.before_tail_peak_kib as f64 / 1024.0
            );
        }
        let _ = writeln!(out);
        let statuses = [
            "ok",
            "rate_limited",
            "quota_exhausted",
            "timed_out",
            "error",
        ];
        let _ = write!(out, "{:<16} {:>9}", "fault", "calls");
        for status in statuses {
            let _ = write!(out, " {status:>15}");
        }
        let _ = writeln!(out);
        let mut rows: Vec<(&String, &BTreeMap<String, u64>)> = self.by_fault.iter().collect();
        rows.sort_by_key(|(_, counts)| std::cmp::Reverse(counts.values().sum::<u64>()));
        for (fault, counts) in rows {
            let _ = write!(out, "{fault:<16} {:>9}", counts.values().sum::<u64>());
            for status in statuses {
                let _ = write!(out, " {:>15}", counts.get(status).copied().unwrap_or(0));
            }
            let _ = writeln!(out);
        }
        let _ = write!(out, "{:<16} {:>9}", "all", self.calls);
        for status in statuses {
            let _ = write!(
                out,
                " {:>15}",
                self.statuses.get(status).copied().unwrap_or(0)
            );
        }
        let _ = writeln!(out);
        let _ = writeln!(out, "rate_limited by reason: {:?}", self.reasons);
        let others: Vec<_> = self
            .statuses
            .keys()
            .filter(|s| !statuses.contains(&s.as_str()))
            .collect();
        if !others.is_empty() {
            let _ = writeln!(out, "other statuses: {others:?}");
        }
        out
    }
}
