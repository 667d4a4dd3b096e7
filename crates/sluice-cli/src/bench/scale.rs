//! `sluice bench scale`: the shared limiter's scale curve in one run
//! (issue 49, "Exact at any scale").
//!
//! For 1, 2, 4, … processes on one key of a private `redis-server`, and
//! for a Cluster of 1 and 3 masters with 100 credentials spread over its
//! slots, each limiter in turn (sluice's, and the fixed-window `INCR` and
//! sliding-log Lua peers of [`super::peers`]):
//!
//! - decisions per second, all processes summed and per process, under a
//!   limit that never binds (callers back to back), with round trips per
//!   decision;
//! - then the same callers offering three times the limit (saturation):
//!   admitted starts per second, Redis round trips per admitted call and
//!   the busiest rolling second's starts of any one key against its limit
//!   (a sluice grant starts when it came back plus its wait).
//!
//! A "process" is one limiter with its own connection (for sluice its own
//! `RedisBudget`: connection, lease pool, breaker and heartbeat id), all
//! in this one OS process: they share its cores, as processes on one
//! machine would. sluice's round trips are read from the servers
//! (`INFO commandstats`, heartbeats and lease returns included); the
//! peers count their own.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use serde::Serialize;

use super::peers::{self, Kind, Limiter, Target};
use super::redis_nodes::RedisNodes;
use crate::demo::chart::{self, Line, Panel};

/// The limit that never binds, per second: decisions, not admissions.
const OPEN_LIMIT: u32 = 1_000_000;
/// sluice-redis's default `max_lease`.
const DEFAULT_MAX_LEASE: u32 = 32;

/// Flags of `sluice bench scale`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Process counts on one key, comma-separated.
    #[arg(long, value_name = "LIST", default_value = "1,2,4,8,16,32", value_parser = counts(1, 256))]
    processes: Counts,
    /// Cluster sizes (masters), comma-separated; `none` for no Cluster rows.
    #[arg(long, value_name = "LIST", default_value = "1,3", value_parser = counts(1, 16))]
    masters: Counts,
    /// Credentials spread over the Cluster's slots.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    credentials: u32,
    /// Processes on the Cluster.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256))]
    cluster_processes: u32,
    /// Seconds per measurement (each row measures twice per limiter).
    #[arg(long, default_value_t = 3.0, value_parser = seconds)]
    seconds: f64,
    /// Callers asking at once in each process.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=1_024))]
    callers: u32,
    /// The one key's limit, per second.
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    limit: u32,
    /// Each Cluster credential's limit, per second.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    credential_limit: u32,
    /// sluice's `max_lease`: the most slots one round trip leases (1: a
    /// round trip per decision).
    #[arg(long, default_value_t = DEFAULT_MAX_LEASE, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    max_lease: u32,
    /// Write a chart (SVG) of decisions per second and round trips per
    /// admitted call against processes here.
    #[arg(long, value_name = "PATH")]
    chart: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// A comma-separated list of counts.
#[derive(Debug, Clone)]
struct Counts(Vec<usize>);

/// Parses a comma-separated list of counts in `min..=max` (`none`: empty).
fn counts(min: usize, max: usize) -> impl Fn(&str) -> Result<Counts, String> + Clone {
    move |text: &str| {
        if text.trim() == "none" {
            return Ok(Counts(Vec::new()));
        }
        text.split(',')
            .map(|item| match item.trim().parse::<usize>() {
                Ok(n) if (min..=max).contains(&n) => Ok(n),
                _ => Err(format!(
                    "`{item}` is not a count from {min} to {max} (a comma-separated list, e.g. 1,2,4)"
                )),
            })
            .collect::<Result<_, _>>()
            .map(Counts)
    }
}

fn seconds(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(s) if s > 0.0 && s <= 600.0 => Ok(s),
        _ => Err(format!(
            "`{text}` is not a number of seconds above 0, at most 600"
        )),
    }
}

/// The whole run.
#[derive(Debug, Serialize)]
struct Scale {
    seconds: f64,
    callers_per_process: u32,
    max_lease: u32,
    rows: Vec<Row>,
}

/// One setup: a number of processes on some keys of one server or Cluster.
#[derive(Debug, Serialize)]
struct Row {
    /// 0 on the standalone server.
    masters: usize,
    processes: usize,
    keys: usize,
    /// Each key's limit, per second.
    limit: u32,
    limiters: Vec<Measured>,
}

/// One limiter's figures in a row.
#[derive(Debug, Serialize)]
struct Measured {
    limiter: &'static str,
    /// All processes together, under a limit that never binds.
    decisions_per_second: f64,
    decisions_per_second_per_process: f64,
    round_trips_per_decision: f64,
    /// At three times each key's limit.
    admitted_per_second: f64,
    round_trips_per_admitted: f64,
    /// The most starts of one key in any rolling second, against `limit`.
    busiest_window: usize,
    limit: u32,
}

const KINDS: [Kind; 3] = [Kind::Sluice, Kind::FixedWindow, Kind::SlidingLog];

pub(crate) async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut rows = Vec::new();
    if !args.processes.0.is_empty() {
        let redis = RedisNodes::single("scale").await?;
        let keys = ["bench".to_owned()];
        for &processes in &args.processes.0 {
            rows.push(row(&redis, processes, &keys, args.limit, &args).await?);
        }
    }
    let credentials: Vec<String> = (0..args.credentials).map(|i| format!("c{i}")).collect();
    for &masters in &args.masters.0 {
        let redis = RedisNodes::cluster("scale-cluster", masters).await?;
        let processes = usize::try_from(args.cluster_processes)?;
        rows.push(
            row(
                &redis,
                processes,
                &credentials,
                args.credential_limit,
                &args,
            )
            .await?,
        );
    }
    let scale = Scale {
        seconds: args.seconds,
        callers_per_process: args.callers,
        max_lease: args.max_lease,
        rows,
    };
    if let Some(path) = &args.chart {
        write_chart(path, &scale).with_context(|| format!("writing --chart {}", path.display()))?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&scale)?);
    } else {
        print!("{}", table(&scale));
    }
    Ok(ExitCode::SUCCESS)
}

/// Every limiter on `processes` processes and `keys` of `limit` per second.
async fn row(
    redis: &RedisNodes,
    processes: usize,
    keys: &[String],
    limit: u32,
    args: &Args,
) -> anyhow::Result<Row> {
    let mut limiters = Vec::new();
    for kind in KINDS {
        limiters.push(measure(redis, kind, processes, keys, limit, args).await?);
    }
    Ok(Row {
        masters: if redis.is_cluster() {
            redis.urls().len()
        } else {
            0
        },
        processes,
        keys: keys.len(),
        limit,
        limiters,
    })
}

async fn measure(
    redis: &RedisNodes,
    kind: Kind,
    processes: usize,
    keys: &[String],
    limit: u32,
    args: &Args,
) -> anyhow::Result<Measured> {
    let target = Target {
        urls: redis.urls(),
        cluster: redis.is_cluster(),
        max_lease: Some(args.max_lease),
    };
    let duration = Duration::from_secs_f64(args.seconds);
    let callers = usize::try_from(args.callers)?;
    redis.reset().await?;
    let open = connect(kind, &target, processes, OPEN_LIMIT).await?;
    let before = redis.round_trips().await?;
    let (decided, _) = peers::drive(&open, keys, callers, duration, None).await?;
    let open_trips = trips(redis, kind, &open, before).await?;
    drop(open);

    redis.reset().await?;
    let bound = connect(kind, &target, processes, limit).await?;
    let before = redis.round_trips().await?;
    let pace = peers::pace(processes * callers, limit, keys.len());
    let (_, starts) = peers::drive(&bound, keys, callers, duration, Some(pace)).await?;
    let bound_trips = trips(redis, kind, &bound, before).await?;
    drop(bound);

    let admitted: usize = starts.iter().map(Vec::len).sum();
    let per_second = decided as f64 / args.seconds;
    Ok(Measured {
        limiter: kind.name(),
        decisions_per_second: per_second,
        decisions_per_second_per_process: per_second / processes as f64,
        round_trips_per_decision: open_trips as f64 / decided.max(1) as f64,
        admitted_per_second: admitted as f64 / args.seconds,
        round_trips_per_admitted: bound_trips as f64 / admitted.max(1) as f64,
        busiest_window: peers::busiest_of(&starts),
        limit,
    })
}

/// Round trips since `before`: sluice's read from the servers, the peers'
/// counted by themselves.
async fn trips(
    redis: &RedisNodes,
    kind: Kind,
    limiters: &[Arc<Limiter>],
    before: u64,
) -> anyhow::Result<u64> {
    Ok(match kind {
        Kind::Sluice => redis.round_trips().await?.saturating_sub(before),
        _ => limiters.iter().map(|l| l.trips()).sum(),
    })
}

async fn connect(
    kind: Kind,
    target: &Target<'_>,
    processes: usize,
    limit: u32,
) -> anyhow::Result<Vec<Arc<Limiter>>> {
    let mut limiters = Vec::with_capacity(processes);
    for _ in 0..processes {
        limiters.push(Limiter::connect(kind, target, limit).await?);
    }
    Ok(limiters)
}

fn table(scale: &Scale) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n{} s per measurement, {} callers per process, sluice max_lease {}\n",
        scale.seconds, scale.callers_per_process, scale.max_lease
    );
    let _ = writeln!(
        out,
        "| Redis | processes | keys | limiter | decisions/s | per process | round trips per decision | at 3x: admitted/s | round trips per admitted | busiest second (limit) |"
    );
    let _ = writeln!(out, "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|");
    for row in &scale.rows {
        let redis = match row.masters {
            0 => "one server".to_owned(),
            1 => "Cluster, 1 master".to_owned(),
            n => format!("Cluster, {n} masters"),
        };
        for m in &row.limiters {
            let _ = writeln!(
                out,
                "| {redis} | {} | {} | {} | {:.0} | {:.0} | {:.3} | {:.1} | {:.3} | {} ({}) |",
                row.processes,
                row.keys,
                m.limiter,
                m.decisions_per_second,
                m.decisions_per_second_per_process,
                m.round_trips_per_decision,
                m.admitted_per_second,
                m.round_trips_per_admitted,
                m.busiest_window,
                m.limit
            );
        }
    }
    out
}

/// Decisions per second and round trips per admitted call against the
/// processes on one key, each limiter a line.
fn write_chart(path: &std::path::Path, scale: &Scale) -> anyhow::Result<()> {
    let one_key: Vec<&Row> = scale.rows.iter().filter(|r| r.masters == 0).collect();
    let line = |kind: Kind, figure: fn(&Measured) -> f64| Line {
        label: kind.name().to_owned(),
        points: one_key
            .iter()
            .filter_map(|row| {
                let m = row.limiters.iter().find(|m| m.limiter == kind.name())?;
                Some((row.processes as f64, figure(m)))
            })
            .collect(),
    };
    let panels = [
        Panel {
            caption: "Decisions per second, all processes, limit never binds".into(),
            x_desc: "processes on one key".into(),
            y_desc: "decisions/s".into(),
            lines: KINDS
                .iter()
                .map(|k| line(*k, |m| m.decisions_per_second))
                .collect(),
            marks: vec![("50,000/s (one process's target)".into(), 50_000.0)],
        },
        Panel {
            caption: "Redis round trips per admitted call, at 3x the limit".into(),
            x_desc: "processes on one key".into(),
            y_desc: "round trips per admitted call".into(),
            lines: KINDS
                .iter()
                .map(|k| line(*k, |m| m.round_trips_per_admitted))
                .collect(),
            marks: vec![("0.15 (target)".into(), 0.15)],
        },
    ];
    chart::lines(
        path,
        &format!(
            "The shared limiter's scale curve ({} s per point, {} callers per process)",
            scale.seconds, scale.callers_per_process
        ),
        &panels,
    )
}

#[cfg(test)]
mod tests {
    use super::{counts, seconds};

    #[test]
    fn lists_and_seconds_say_what_is_wrong() {
        let parse = counts(1, 16);
        assert_eq!(parse("1,3").unwrap().0, vec![1, 3]);
        assert!(parse("none").unwrap().0.is_empty());
        assert!(parse("0").unwrap_err().contains("`0`"));
        assert!(parse("1,x").unwrap_err().contains("`x`"));
        assert!(seconds("0").is_err());
        assert!(seconds("nan").is_err());
        assert_eq!(seconds("0.5"), Ok(0.5));
    }
}
