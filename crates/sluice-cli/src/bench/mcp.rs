//! `sluice bench mcp`: what `sluice mcp --listen --upstream` adds to a
//! `tools/call` over Streamable HTTP, next to the MCP server directly, in
//! one run: the same fixed-rate load on both, interleaved rounds.
//!
//! The MCP server is a stub in this process on a thread of its own (one
//! current-thread runtime): it answers every POST at once with a JSON
//! result, so what is measured is the proxy's cost, not a server's.

use std::io::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use serde::Serialize;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use super::children::Server;
use super::load;

/// Flags of `sluice bench mcp`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The fixed rate, tools/call per second.
    #[arg(long, default_value_t = 500)]
    rate: u32,
    /// Seconds per round.
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// Rounds per target, interleaved; the median round's figures are shown.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Connections of the fixed-rate load.
    #[arg(long, default_value_t = 8)]
    connections: usize,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// One target's figures.
#[derive(Debug, Clone, Serialize)]
struct Figures {
    target: &'static str,
    rate: u32,
    sent: usize,
    failed: usize,
    p50_us: u64,
    p99_us: u64,
    p99_rounds_us: Vec<u64>,
    /// Closed-loop: answered calls per second, 4,000 calls on 16 connections.
    max_rate: f64,
}

#[derive(Debug, Serialize)]
struct Report {
    command: String,
    loadavg: String,
    rows: Vec<Figures>,
}

/// A target's name, URL, and headers beyond the JSON ones.
type Target = (&'static str, String, Vec<(&'static str, String)>);

const CALL: &str = r#"{"jsonrpc":"2.0","id":{n},"method":"tools/call","params":{"name":"echo","arguments":{"n":{n}}}}"#;

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
    let session = initialize(&proxied).await?;
    let targets: [Target; 2] = [
        ("MCP server directly", upstream.clone(), vec![]),
        (
            "sluice mcp --listen --upstream",
            proxied.clone(),
            vec![
                ("mcp-session-id", session),
                ("mcp-protocol-version", "2025-06-18".to_owned()),
            ],
        ),
    ];
    let mut rounds: Vec<Vec<load::Measured>> = targets.iter().map(|_| Vec::new()).collect();
    for round in 0..args.rounds.max(1) {
        for ((name, url, extra), measured) in targets.iter().zip(&mut rounds) {
            eprintln!(
                "{name}: round {}, {} calls/s for {} s",
                round + 1,
                args.rate,
                args.seconds
            );
            let headers = headers(extra);
            let (url, rate, seconds, connections) =
                (url.clone(), args.rate, args.seconds, args.connections);
            let result = tokio::task::spawn_blocking(move || {
                let headers: Vec<(&str, &str)> = headers
                    .iter()
                    .map(|(n, v)| (n.as_str(), v.as_str()))
                    .collect();
                load::fixed_rate_post(
                    &url,
                    &headers,
                    CALL,
                    rate,
                    Duration::from_secs(seconds),
                    connections,
                )
            })
            .await??;
            measured.push(result);
        }
    }
    let mut rows = Vec::new();
    for ((name, url, extra), mut measured) in targets.iter().zip(rounds) {
        measured.sort_by_key(|m| m.percentile(99));
        let p99_rounds_us = measured.iter().map(|m| m.percentile(99)).collect();
        let median = measured.swap_remove(measured.len() / 2);
        let headers = headers(extra);
        let url = url.clone();
        // Closed loop, bounded in count: 4,000 calls as fast as 16
        // connections take them; the rate is what was answered per second.
        let started = std::time::Instant::now();
        let closed = tokio::task::spawn_blocking(move || {
            let headers: Vec<(&str, &str)> = headers
                .iter()
                .map(|(n, v)| (n.as_str(), v.as_str()))
                .collect();
            load::fixed_rate_post(
                &url,
                &headers,
                CALL,
                1_000_000,
                Duration::from_millis(4),
                16,
            )
        })
        .await??;
        let elapsed = started.elapsed().as_secs_f64().max(1e-6);
        rows.push(Figures {
            target: name,
            rate: args.rate,
            sent: median.sent,
            failed: median.failed,
            p50_us: median.percentile(50),
            p99_us: median.percentile(99),
            p99_rounds_us,
            max_rate: closed.latencies_us.len() as f64 / elapsed,
        });
    }
    let _ = std::fs::remove_dir_all(&dir);
    let report = Report {
        command: format!(
            "sluice bench mcp --rate {} --seconds {} --rounds {} --connections {}",
            args.rate, args.seconds, args.rounds, args.connections
        ),
        loadavg: std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
            .to_owned(),
        rows,
    };
    let mut out = std::io::stdout();
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?;
    } else {
        writeln!(out, "{} (load {})", report.command, report.loadavg)?;
        for row in &report.rows {
            writeln!(
                out,
                "{:34} p50 {:>6.2} ms  p99 {:>6.2} ms  failed {:>4}/{:<6} highest {:>7.0}/s",
                row.target,
                row.p50_us as f64 / 1000.0,
                row.p99_us as f64 / 1000.0,
                row.failed,
                row.sent,
                row.max_rate
            )?;
        }
    }
    Ok(ExitCode::SUCCESS)
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
