//! `sluice bench mcp`: what `sluice mcp --listen --upstream` adds to a
//! `tools/call` over Streamable HTTP, next to the MCP server directly, in
//! one run, at one client session and at 32 sessions at once.
//!
//! The MCP server is a stub in this process on a thread of its own (one
//! current-thread runtime): it answers every POST at once with a JSON
//! result, so what is measured is the proxy's cost, not a server's. Each
//! session is one keep-alive connection carrying its own `Mcp-Session-Id`;
//! the fixed-rate load is split evenly over the sessions (latency from each
//! call's scheduled start), interleaved rounds, the median round shown;
//! calls/s is closed-loop (each session sends its share of 4,000 calls back
//! to back).

use std::io::Write as _;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::Serialize;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use super::children::Server;
use super::load;

/// Flags of `sluice bench mcp`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The fixed rate, tools/call per second (over all sessions).
    #[arg(long, default_value_t = 500)]
    rate: u32,
    /// Seconds per round.
    #[arg(long, default_value_t = 3)]
    seconds: u64,
    /// Rounds per target, interleaved; the median round's figures are shown.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Session counts measured: one client, and many at once.
const SESSIONS: [usize; 2] = [1, 32];
/// Calls of the closed-loop run, over all sessions.
const CLOSED_CALLS: u64 = 4_000;

/// One target's figures at one session count.
#[derive(Debug, Clone, Serialize)]
struct Figures {
    target: &'static str,
    sessions: usize,
    rate: u32,
    sent: usize,
    failed: usize,
    p50_us: u64,
    p99_us: u64,
    p99_rounds_us: Vec<u64>,
    /// Closed-loop: answered calls per second.
    calls_per_s: f64,
}

/// What the proxy adds at one session count.
#[derive(Debug, Serialize)]
struct Added {
    sessions: usize,
    p50_us: i64,
    p99_us: i64,
    /// The proxy's closed-loop calls/s over the server's.
    calls_ratio: f64,
}

#[derive(Debug, Serialize)]
struct Report {
    command: String,
    loadavg: String,
    rows: Vec<Figures>,
    added: Vec<Added>,
}

const CALL: &str = r#"{"jsonrpc":"2.0","id":{n},"method":"tools/call","params":{"name":"echo","arguments":{"n":{n}}}}"#;

/// A target's name, URL, and each session's headers beyond the JSON ones.
struct Target {
    name: &'static str,
    url: String,
    sessions: Vec<Vec<(String, String)>>,
}

pub(crate) async fn run(args: Args) -> anyhow::Result<ExitCode> {
    let stub = stub()?;
    let dir = std::env::temp_dir().join(format!("sluice-bench-mcp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).context("creating a temporary directory")?;
    let config = dir.join("sluice.toml");
    std::fs::write(
        &config,
        "[credentials.api]\nrate = \"1000000/1s\"\nmax_in_flight = 100000\nqueue = 100000\n",
    )?;
    let config = config
        .to_str()
        .context("temporary path is not UTF-8")?
        .to_owned();
    let upstream = format!("http://{stub}/mcp");
    let proxy = Server::sluice(&[
        "mcp",
        "--config",
        &config,
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        &upstream,
    ])?;
    let proxied = format!("{}/mcp", proxy.url);
    let most = SESSIONS.iter().copied().max().unwrap_or(1);
    let mut sessions = Vec::with_capacity(most);
    for _ in 0..most {
        let id = initialize(&proxied).await?;
        let mut extra = headers(&[("mcp-protocol-version", "2025-06-18".to_owned())]);
        extra.push(("mcp-session-id".to_owned(), id));
        sessions.push(extra);
    }
    let direct = Target {
        name: "MCP server directly",
        url: upstream.clone(),
        sessions: vec![headers(&[]); most],
    };
    let through = Target {
        name: "sluice mcp --listen --upstream",
        url: proxied.clone(),
        sessions,
    };
    let targets = [direct, through];
    let mut rows = Vec::new();
    let mut added = Vec::new();
    for count in SESSIONS {
        let rate_each = (args.rate / u32::try_from(count).unwrap_or(1)).max(1);
        let mut rounds: Vec<Vec<load::Measured>> = targets.iter().map(|_| Vec::new()).collect();
        for round in 0..args.rounds.max(1) {
            for (target, measured) in targets.iter().zip(&mut rounds) {
                eprintln!(
                    "{}: {count} session(s), round {}, {} calls/s for {} s",
                    target.name,
                    round + 1,
                    rate_each * u32::try_from(count).unwrap_or(1),
                    args.seconds
                );
                let seconds = Duration::from_secs(args.seconds);
                measured.push(
                    over_sessions(target, count, move |url, headers| {
                        load::fixed_rate_post(url, headers, CALL, rate_each, seconds, 1)
                    })
                    .await?,
                );
            }
        }
        let mut at_count = Vec::new();
        for (target, mut measured) in targets.iter().zip(rounds) {
            measured.sort_by_key(|m| m.percentile(99));
            let p99_rounds_us = measured.iter().map(|m| m.percentile(99)).collect();
            let median = measured.swap_remove(measured.len() / 2);
            // Closed loop, bounded in count: each session its share, back to back.
            let each = CLOSED_CALLS / count as u64;
            let started = Instant::now();
            let closed = over_sessions(target, count, move |url, headers| {
                load::fixed_rate_post(
                    url,
                    headers,
                    CALL,
                    1_000_000,
                    Duration::from_micros(each),
                    1,
                )
            })
            .await?;
            let elapsed = started.elapsed().as_secs_f64().max(1e-6);
            at_count.push(Figures {
                target: target.name,
                sessions: count,
                rate: rate_each * u32::try_from(count).unwrap_or(1),
                sent: median.sent,
                failed: median.failed,
                p50_us: median.percentile(50),
                p99_us: median.percentile(99),
                p99_rounds_us,
                calls_per_s: closed.latencies_us.len() as f64 / elapsed,
            });
        }
        if let [direct, through] = at_count.as_slice() {
            added.push(Added {
                sessions: count,
                p50_us: through.p50_us as i64 - direct.p50_us as i64,
                p99_us: through.p99_us as i64 - direct.p99_us as i64,
                calls_ratio: through.calls_per_s / direct.calls_per_s.max(1e-6),
            });
        }
        rows.extend(at_count);
    }
    let _ = std::fs::remove_dir_all(&dir);
    let report = Report {
        command: format!(
            "sluice bench mcp --rate {} --seconds {} --rounds {}",
            args.rate, args.seconds, args.rounds
        ),
        loadavg: std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
            .to_owned(),
        rows,
        added,
    };
    let mut out = std::io::stdout();
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?;
    } else {
        writeln!(out, "{} (load {})", report.command, report.loadavg)?;
        for row in &report.rows {
            writeln!(
                out,
                "{:34} {:>2} session(s)  p50 {:>6.3} ms  p99 {:>6.3} ms  failed {:>4}/{:<6} {:>7.0} calls/s",
                row.target,
                row.sessions,
                row.p50_us as f64 / 1000.0,
                row.p99_us as f64 / 1000.0,
                row.failed,
                row.sent,
                row.calls_per_s
            )?;
        }
        for add in &report.added {
            writeln!(
                out,
                "added at {:>2} session(s): p50 {:+} µs, p99 {:+} µs, calls/s x{:.2}",
                add.sessions, add.p50_us, add.p99_us, add.calls_ratio
            )?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs `load` for the first `count` sessions of `target` at once, one
/// thread (and connection) each, and merges what they measured.
async fn over_sessions<F>(target: &Target, count: usize, load: F) -> anyhow::Result<load::Measured>
where
    F: Fn(&str, &[(&str, &str)]) -> anyhow::Result<load::Measured> + Clone + Send + 'static,
{
    let runs: Vec<_> = target
        .sessions
        .iter()
        .take(count)
        .map(|headers| {
            let (url, headers, load) = (target.url.clone(), headers.clone(), load.clone());
            tokio::task::spawn_blocking(move || {
                let headers: Vec<(&str, &str)> = headers
                    .iter()
                    .map(|(n, v)| (n.as_str(), v.as_str()))
                    .collect();
                load(&url, &headers)
            })
        })
        .collect();
    let mut merged = load::Measured {
        sent: 0,
        failed: 0,
        latencies_us: Vec::new(),
    };
    for run in runs {
        let measured = run.await??;
        merged.sent += measured.sent;
        merged.failed += measured.failed;
        merged.latencies_us.extend(measured.latencies_us);
    }
    merged.latencies_us.sort_unstable();
    Ok(merged)
}

fn headers(extra: &[(&str, String)]) -> Vec<(String, String)> {
    let mut headers = vec![
        ("content-type".to_owned(), "application/json".to_owned()),
        ("accept".to_owned(), "application/json".to_owned()),
    ];
    headers.extend(extra.iter().map(|(n, v)| ((*n).to_owned(), v.clone())));
    headers
}

/// Opens a session on the proxy; its id.
async fn initialize(url: &str) -> anyhow::Result<String> {
    let client = reqwest::Client::new();
    let init = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bench","version":"0"}}}"#;
    let answer = client
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json")
        .body(init)
        .send()
        .await?;
    let session = answer
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .context("the proxy gave no session id")?
        .to_owned();
    client
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json")
        .header("mcp-session-id", &session)
        .body(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
        .send()
        .await?;
    Ok(session)
}

/// The stub MCP server: a thread with its own runtime; its address.
fn stub() -> anyhow::Result<std::net::SocketAddr> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    std::thread::Builder::new()
        .name("bench-mcp-stub".to_owned())
        .spawn(move || {
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            runtime.block_on(async move {
                let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                    return;
                };
                while let Ok((stream, _)) = listener.accept().await {
                    let _ = stream.set_nodelay(true);
                    tokio::spawn(serve_stub(stream));
                }
            });
        })?;
    Ok(addr)
}

/// Keep-alive HTTP/1.1: every POST answered with a JSON result under its id.
async fn serve_stub(stream: tokio::net::TcpStream) {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    loop {
        let mut length = 0usize;
        let mut first = true;
        loop {
            line.clear();
            match reader.read_line(&mut line).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            if line == "\r\n" {
                break;
            }
            if !first
                && let Some((name, value)) = line.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap_or(0);
            }
            first = false;
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).await.is_err() {
            return;
        }
        #[derive(serde::Deserialize)]
        struct Id {
            id: Option<serde_json::Value>,
        }
        let answer = match serde_json::from_slice::<Id>(&body).ok().and_then(|m| m.id) {
            Some(id) => {
                let body = format!(
                    r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[{{"type":"text","text":"ok"}}]}}}}"#
                );
                format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nmcp-session-id: stub\r\ncontent-length: {}\r\n\r\n{body}",
                    body.len()
                )
            }
            None => "HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n".to_owned(),
        };
        if reader.get_mut().write_all(answer.as_bytes()).await.is_err() {
            return;
        }
    }
}
