//! Connection floods against `sluice serve` as a user runs it (issue 19,
//! item 6): 2,000 idle connections and 500 slowloris connections sending a
//! byte a second while ordinary calls keep being answered within their
//! deadlines, with resident memory flat across the flood; and the process at
//! its file-descriptor limit, where accepting backs off instead of spinning
//! and service resumes when descriptors free up.
//!
//! The figures these print are the ones in docs/RELIABILITY.md:
//! `cargo test -p sluice-cli --test it flood:: -- --nocapture`.

use crate::support::sluice;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sluice_fake::{Config as FakeConfig, FakeApi, FakeServer, Limits};
use sluice_testkit::proc_stats;

const IDLE: usize = 2_000;
const SLOWLORIS: usize = 500;
/// How long the flood lasts: past the default header-read timeout (10 s),
/// so that every slowloris connection is cut off while it lasts.
const FLOOD: Duration = Duration::from_secs(13);

fn tempdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sluice-flood-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The soft limit on open files of this process.
fn open_files_limit() -> u64 {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    limits
        .lines()
        .find(|line| line.starts_with("Max open files"))
        .and_then(|line| line.split_whitespace().nth(3))
        .and_then(|soft| soft.parse().ok())
        .unwrap_or(u64::MAX)
}

/// User plus system CPU time of `pid`, seconds.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let mut fields = stat[stat.rfind(')').unwrap() + 1..].split_whitespace();
    let utime: u64 = fields.nth(11).unwrap().parse().unwrap();
    let stime: u64 = fields.next().unwrap().parse().unwrap();
    (utime + stime) as f64 / 100.0
}

/// `sluice serve` started through `sh` (so that `ulimit` can apply), its
/// address read from its first line and its stderr kept.
struct Sidecar {
    child: Child,
    addr: String,
    stderr: Arc<Mutex<String>>,
}

impl Sidecar {
    fn start(config: &str, open_files: Option<u32>) -> Sidecar {
        let dir = tempdir(&format!("{}", open_files.unwrap_or(0)));
        let path = dir.join("sluice.toml");
        std::fs::write(&path, config).unwrap();
        let limit = open_files.map_or(String::new(), |n| format!("ulimit -n {n} && "));
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "{limit}exec \"$0\" serve --config \"$1\" --listen 127.0.0.1:0"
            ))
            .arg(sluice())
            .arg(&path)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first = lines.next().unwrap().unwrap();
        let addr = first
            .strip_prefix("listening on http://")
            .unwrap_or_else(|| panic!("unexpected first line {first:?}"))
            .to_owned();
        std::thread::spawn(move || for _ in lines {});
        let stderr: Arc<Mutex<String>> = Arc::default();
        let sink = stderr.clone();
        let mut pipe = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            let mut chunk = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut chunk) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&chunk[..n]));
            }
        });
        Sidecar {
            child,
            addr,
            stderr,
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn rss_kib(&self) -> u64 {
        proc_stats(self.pid()).unwrap().rss_kib
    }

    fn warnings(&self, needle: &str) -> usize {
        self.stderr.lock().unwrap().matches(needle).count()
    }
}

impl Drop for Sidecar {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One ordinary request on a fresh connection: `(status, elapsed)`.
fn call(addr: &str, request: &str, timeout: Duration) -> std::io::Result<(u16, Duration)> {
    let started = Instant::now();
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.write_all(request.as_bytes())?;
    let mut answer = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = stream.read(&mut chunk)?;
        answer.extend_from_slice(&chunk[..n]);
        // `connection: close` below: the answer ends with the connection.
        if n == 0 {
            break;
        }
    }
    let text = String::from_utf8_lossy(&answer);
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|status| status.parse().ok())
        .unwrap_or(0);
    Ok((status, started.elapsed()))
}

fn turn_request(n: usize) -> String {
    let body = format!(
        "{{\"calls\":[{{\"id\":\"c{n}\",\"tool\":\"get_item\",\"args\":{{\"id\":\"{n}\"}},\"deadline_ms\":2000}}]}}"
    );
    format!(
        "POST /v1/turns HTTP/1.1\r\nhost: sidecar\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}

fn proxy_request() -> String {
    "GET /proxy/api/api/item HTTP/1.1\r\nhost: sidecar\r\nconnection: close\r\nx-sluice-deadline-ms: 2000\r\n\r\n"
        .to_owned()
}

fn config(fake: &str, server: &str) -> String {
    format!(
        "[server]\n{server}\n[credentials.api]\nbase_url = \"{fake}\"\nrate = \"10000/1s\"\nmax_in_flight = 1000\nqueue = 1000\n\n[tools.get_item]\ncredential = \"api\"\npath = \"/api/item/{{id}}\"\n"
    )
}

async fn open_fake() -> FakeServer {
    let config = FakeConfig::new(Limits::new(1_000_000, Duration::from_secs(1)));
    FakeServer::spawn(FakeApi::new(config).unwrap())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_slowloris_floods_leave_ordinary_calls_served_and_memory_flat() {
    let limit = open_files_limit();
    assert!(
        limit >= 4 * (IDLE + SLOWLORIS) as u64,
        "this test opens {} connections: raise the open-files limit (ulimit -n, now {limit})",
        IDLE + SLOWLORIS
    );
    let fake = open_fake().await;
    // The defaults: 10 s for a head, 60 s of idleness, 4,096 connections.
    let sidecar = Sidecar::start(&config(&fake.url(), ""), None);
    let addr = sidecar.addr.clone();
    for n in 0..20 {
        let (status, _) = call(&addr, &turn_request(n), Duration::from_secs(5)).unwrap();
        assert_eq!(status, 200);
    }
    let before = sidecar.rss_kib();

    let flood = tokio::task::spawn_blocking({
        let addr = addr.clone();
        move || {
            let idle: Vec<TcpStream> = (0..IDLE)
                .map(|_| TcpStream::connect(&addr).unwrap())
                .collect();
            idle
        }
    });
    // Slowloris: a head begun, then one byte a second, never finished.
    let cut_off = Arc::new(AtomicUsize::new(0));
    let mut loris = Vec::new();
    for _ in 0..SLOWLORIS {
        let (addr, cut_off) = (addr.clone(), cut_off.clone());
        loris.push(tokio::spawn(async move {
            let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
            let started = Instant::now();
            use tokio::io::AsyncWriteExt;
            let _ = stream.write_all(b"GET /healthz HTTP/1.1\r\nx-slow: ").await;
            while started.elapsed() < FLOOD + Duration::from_secs(5) {
                tokio::time::sleep(Duration::from_secs(1)).await;
                if stream.write_all(b"a").await.is_err() {
                    cut_off.fetch_add(1, Ordering::SeqCst);
                    return Some(started.elapsed());
                }
            }
            None
        }));
    }
    let idle = flood.await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let open = sidecar.rss_kib();

    // Ordinary calls all through the flood, each within its 2 s deadline.
    let started = Instant::now();
    let (mut calls, mut slowest) = (0, Duration::ZERO);
    while started.elapsed() < FLOOD {
        let addr = addr.clone();
        let n = calls;
        let answers = tokio::task::spawn_blocking(move || {
            [
                call(&addr, &turn_request(n), Duration::from_secs(5)),
                call(&addr, &proxy_request(), Duration::from_secs(5)),
            ]
        })
        .await
        .unwrap();
        for answer in answers {
            let (status, elapsed) = answer.expect("an ordinary call is answered during the flood");
            assert_eq!(status, 200);
            assert!(
                elapsed <= Duration::from_millis(2_500),
                "an ordinary call took {elapsed:?} during the flood"
            );
            slowest = slowest.max(elapsed);
            calls += 1;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let end = sidecar.rss_kib();
    let peak = proc_stats(sidecar.pid()).unwrap().peak_rss_kib;

    let mut cut_after = Vec::new();
    for task in loris {
        if let Some(after) = task.await.unwrap() {
            cut_after.push(after);
        }
    }
    cut_after.sort();
    drop(idle);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = sidecar.rss_kib();
    println!(
        "flood: {IDLE} idle + {SLOWLORIS} slowloris; {calls} ordinary calls, slowest {slowest:?}; \
         slowloris cut off after {:?} to {:?}; RSS KiB before {before}, flood open {open}, \
         flood end {end}, after {after}, peak {peak}",
        cut_after.first(),
        cut_after.last()
    );
    assert_eq!(
        cut_off.load(Ordering::SeqCst),
        SLOWLORIS,
        "every slowloris connection is cut off by the header-read timeout"
    );
    assert!(cut_after.last().unwrap() < &Duration::from_secs(16));
    // Flat across the flood: what 2,500 open connections cost, no more, and
    // nothing that grows with the slowloris bytes or the calls made meanwhile.
    assert!(
        open.saturating_sub(before) < ((IDLE + SLOWLORIS) * 48) as u64,
        "{} KiB for {} connections",
        open.saturating_sub(before),
        IDLE + SLOWLORIS
    );
    assert!(
        end.saturating_sub(open) < 16 * 1024,
        "RSS grew {} KiB during the flood",
        end.saturating_sub(open)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_descriptor_limit_accepts_back_off_and_service_resumes() {
    let fake = open_fake().await;
    let sidecar = Sidecar::start(&config(&fake.url(), ""), Some(64));
    let addr = sidecar.addr.clone();
    let (status, _) = call(&addr, &proxy_request(), Duration::from_secs(5)).unwrap();
    assert_eq!(status, 200);
    // More connections than the process has descriptors for: the kernel
    // queues them; the sidecar cannot accept them all.
    let held: Vec<TcpStream> = (0..120)
        .map(|_| TcpStream::connect(&addr).unwrap())
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (cpu_before, warned_before) = (
        cpu_seconds(sidecar.pid()),
        sidecar.warnings("cannot accept a connection"),
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    let cpu = cpu_seconds(sidecar.pid()) - cpu_before;
    let retries = sidecar.warnings("cannot accept a connection") - warned_before;
    println!("descriptor limit: {retries} accept retries and {cpu:.2} s of CPU in 3 s");
    assert!(
        sidecar.warnings("Too many open files") > 0,
        "the flood reached the descriptor limit: {}",
        sidecar.stderr.lock().unwrap()
    );
    // Backing off 5 ms, 10 ms, ... up to 1 s between tries, per worker: a
    // few dozen tries in 3 s, not a spin.
    assert!(retries <= 40, "{retries} accept retries in 3 s");
    assert!(cpu < 0.5, "{cpu:.2} s of CPU in 3 s at the limit");

    drop(held);
    let started = Instant::now();
    let resumed = tokio::task::spawn_blocking(move || {
        loop {
            match call(&addr, &proxy_request(), Duration::from_secs(3)) {
                Ok((200, _)) => return Some(started.elapsed()),
                _ if started.elapsed() > Duration::from_secs(10) => return None,
                _ => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    })
    .await
    .unwrap();
    println!("descriptor limit: served again {resumed:?} after the connections closed");
    assert!(
        resumed.is_some(),
        "service resumed once descriptors were free"
    );
}
