//! A process's memory and open file descriptors, read from `/proc` (Linux).

/// One reading of `/proc/<pid>/status` and `/proc/<pid>/fd`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProcStats {
    /// Resident memory now (`VmRSS`), KiB.
    pub rss_kib: u64,
    /// Peak resident memory so far (`VmHWM`), KiB.
    pub peak_rss_kib: u64,
    /// Open file descriptors (entries of `/proc/<pid>/fd`).
    pub fds: usize,
    /// Threads (`Threads`).
    pub threads: u64,
}

/// Reads `pid`'s figures; `None` when the process is gone (or not Linux).
pub fn proc_stats(pid: u32) -> Option<ProcStats> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|rest| rest.split_whitespace().next()?.parse::<u64>().ok())
    };
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count();
    Some(ProcStats {
        rss_kib: field("VmRSS")?,
        peak_rss_kib: field("VmHWM")?,
        fds,
        threads: field("Threads").unwrap_or(0),
    })
}
