//! Security checks on the `sluice` processes as a user runs them: a secret
//! from the environment appears in no output of `serve`, `inspect`, `demo`
//! or `mcp` at `RUST_LOG=trace`; a huge body is refused with 413 without
//! being read whole; a non-loopback listener needs a token; and a wrong
//! token gets the same answer on every path, existing or not.

use crate::support::sluice;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sluice_fake::FakeServer;
use sluice_testkit::proc_stats;

/// The credential's key: it must reach the upstream and nothing else.
const SECRET: &str = "sk-live-9f3b27c1e8-never-print";
/// The sidecar's bearer token.
const TOKEN: &str = "tok-proc-4e1a9c7b55";

fn tempdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sluice-security-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Asserts `text` carries no piece of the secret or the token.
fn assert_clean(what: &str, text: &str) {
    for needle in [SECRET, "sk-live-9f3b", TOKEN, "tok-proc-4e1a"] {
        assert!(!text.contains(needle), "{what} printed {needle:?}:\n{text}");
    }
}

/// A child process with stdout and stderr captured whole.
struct Captured {
    child: Child,
    stdout: Arc<Mutex<Vec<u8>>>,
    stderr: Arc<Mutex<Vec<u8>>>,
    readers: Vec<std::thread::JoinHandle<()>>,
}

impl Captured {
    fn spawn(command: &mut Command) -> Captured {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the process starts");
        let stdout: Arc<Mutex<Vec<u8>>> = Arc::default();
        let stderr: Arc<Mutex<Vec<u8>>> = Arc::default();
        let mut readers = Vec::new();
        for (pipe, sink) in [
            (
                Box::new(child.stdout.take().unwrap()) as Box<dyn Read + Send>,
                stdout.clone(),
            ),
            (Box::new(child.stderr.take().unwrap()), stderr.clone()),
        ] {
            readers.push(std::thread::spawn(move || {
                let mut pipe = pipe;
                let mut chunk = [0u8; 8192];
                while let Ok(n) = pipe.read(&mut chunk) {
                    if n == 0 {
                        break;
                    }
                    sink.lock().unwrap().extend_from_slice(&chunk[..n]);
                }
            }));
        }
        Captured {
            child,
            stdout,
            stderr,
            readers,
        }
    }

    fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.stdout.lock().unwrap()).into_owned()
    }

    /// Waits (up to 30 s) for `listening on http://ADDR` and returns the URL.
    fn url(&self) -> String {
        let until = Instant::now() + Duration::from_secs(30);
        loop {
            let out = self.stdout();
            if let Some(line) = out.lines().next()
                && out.contains('\n')
            {
                return line.strip_prefix("listening on ").expect(line).to_owned();
            }
            assert!(Instant::now() < until, "no address: {out}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM, then waits for the exit; returns stdout and stderr.
    fn terminate(self) -> (String, String) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        self.finish()
    }

    /// Closes stdin, waits (at most 60 s) for the exit; returns stdout and stderr.
    fn finish(mut self) -> (String, String) {
        drop(self.child.stdin.take());
        let until = Instant::now() + Duration::from_secs(60);
        while self.child.try_wait().unwrap().is_none() {
            if Instant::now() > until {
                let _ = self.child.kill();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        for reader in self.readers.drain(..) {
            reader.join().unwrap();
        }
        let stderr = String::from_utf8_lossy(&self.stderr.lock().unwrap()).into_owned();
        (self.stdout(), stderr)
    }
}

impl Drop for Captured {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve_config(dir: &Path, upstream: &str, extra: &str) -> PathBuf {
    let toml = format!(
        r#"
[server]
max_body = "1MiB"
auth_token_env = "SLUICE_TOKEN"
{extra}

[credentials.support]
base_url = "{upstream}"
secret_env = "SUPPORT_API_KEY"
rate = "50/1s"

[credentials.down]
base_url = "http://127.0.0.1:1"
secret_env = "SUPPORT_API_KEY"

[tools.get_ticket]
credential = "support"
path = "/api/v2/tickets/{{id}}"

[tools.down]
credential = "down"
path = "/x"
"#
    );
    let path = dir.join("sluice.toml");
    std::fs::write(&path, toml).unwrap();
    path
}

fn serve(config: &Path, rust_log: &str) -> Captured {
    Captured::spawn(
        Command::new(sluice())
            .args(["serve", "--config", config.to_str().unwrap()])
            .args(["--listen", "127.0.0.1:0"])
            .env("SUPPORT_API_KEY", SECRET)
            .env("SLUICE_TOKEN", TOKEN)
            .env("RUST_LOG", rust_log),
    )
}

async fn fake() -> FakeServer {
    crate::support::recording_fake(None).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_prints_the_secret_nowhere_even_at_trace() {
    let upstream = fake().await;
    let dir = tempdir("serve-trace");
    let sidecar = serve(&serve_config(&dir, &upstream.url(), ""), "trace");
    let url = sidecar.url();
    let client = reqwest::Client::new();
    let turn = serde_json::json!({"turn_id": "t", "calls": [
        {"id": "ok", "tool": "get_ticket", "args": {"id": 1}},
        {"id": "missing", "tool": "get_ticket"},
        {"id": "down", "tool": "down", "deadline_ms": 1500},
        {"id": "unknown", "tool": "nope"},
    ]});
    let mut answers = Vec::new();
    for token in [Some(TOKEN), Some("wrong"), None] {
        let auth = |request: reqwest::RequestBuilder| match token {
            Some(token) => request.bearer_auth(token),
            None => request,
        };
        let requests = [
            auth(
                client
                    .post(format!("{url}/v1/turns"))
                    .header("content-type", "application/json")
                    .body(turn.to_string()),
            ),
            auth(client.get(format!("{url}/proxy/support/api/v2/tickets/7"))),
            auth(client.get(format!("{url}/proxy/down/x"))),
            auth(client.get(format!("{url}/proxy/support/%2e%2e/x"))),
            auth(client.get(format!("{url}/v1/status"))),
            auth(client.get(format!("{url}/metrics"))),
            auth(client.get(format!("{url}/healthz"))),
        ];
        for request in requests {
            let response = request.send().await.unwrap();
            let head = format!("{} {:?}", response.status(), response.headers());
            answers.push(format!("{head} {}", response.text().await.unwrap()));
        }
    }
    let (stdout, stderr) = sidecar.terminate();
    // The secret was used: the upstream was sent it.
    assert!(
        upstream
            .api()
            .requests()
            .iter()
            .any(|r| r.key == format!("Bearer {SECRET}")),
        "the secret reached the upstream"
    );
    assert!(
        stderr.contains("TRACE"),
        "logging ran at trace: {stderr:.2000}"
    );
    assert!(stderr.contains("sidecar ready"), "{stderr:.2000}");
    assert_clean("sluice serve's stdout", &stdout);
    assert_clean("sluice serve's stderr", &stderr);
    assert_clean("sluice serve's answers", &answers.join("\n"));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn inspect_and_demo_print_the_secret_nowhere() {
    let samples = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/samples");
    for sample in ["openai_429.txt", "github_primary_403.txt", "garbage.txt"] {
        for json in [true, false] {
            let mut command = Command::new(sluice());
            command.arg("inspect").arg(samples.join(sample));
            if json {
                command.arg("--json");
            }
            let output = command
                .env("SUPPORT_API_KEY", SECRET)
                .env("OPENAI_API_KEY", SECRET)
                .env("RUST_LOG", "trace")
                .output()
                .unwrap();
            assert_clean("sluice inspect", &String::from_utf8_lossy(&output.stdout));
            assert_clean("sluice inspect", &String::from_utf8_lossy(&output.stderr));
        }
    }
    let output = Command::new(sluice())
        .args(["demo", "--seconds", "1", "--seed", "2"])
        .env("SUPPORT_API_KEY", SECRET)
        .env("RUST_LOG", "trace")
        .output()
        .unwrap();
    assert!(output.status.success());
    assert_clean("sluice demo", &String::from_utf8_lossy(&output.stdout));
    assert_clean("sluice demo", &String::from_utf8_lossy(&output.stderr));
}

/// A minimal MCP server (Python 3, standard library): answers `initialize`,
/// `tools/list` and `tools/call`.
const MCP_SERVER: &str = r#"
import json, sys
for line in sys.stdin:
    message = json.loads(line)
    if "id" not in message:
        continue
    method = message.get("method")
    if method == "initialize":
        result = {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}}, "serverInfo": {"name": "t", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": [{"name": "lookup", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": True}}]}
    else:
        result = {"content": [{"type": "text", "text": "found " + json.dumps(message.get("params", {}).get("arguments"))}]}
    print(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}), flush=True)
"#;

#[test]
fn mcp_prints_the_secret_nowhere_even_at_trace() {
    let dir = tempdir("mcp");
    let server = dir.join("server.py");
    std::fs::write(&server, MCP_SERVER).unwrap();
    let config = dir.join("sluice.toml");
    std::fs::write(
        &config,
        "[credentials.api]\nsecret_env = \"SUPPORT_API_KEY\"\nrate = \"20/1s\"\n",
    )
    .unwrap();
    let mut proxy = Captured::spawn(
        Command::new(sluice())
            .args(["mcp", "--config", config.to_str().unwrap(), "--", "python3"])
            .arg(&server)
            .env("SUPPORT_API_KEY", SECRET)
            .env("RUST_LOG", "trace"),
    );
    let mut stdin = proxy.child.stdin.take().unwrap();
    let mut lines = vec![
        r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#.to_owned(),
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.to_owned(),
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#.to_owned(),
    ];
    for id in 2..8 {
        lines.push(format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"lookup","arguments":{{"q":"x{}"}}}}}}"#,
            id % 3
        ));
    }
    for line in lines {
        writeln!(stdin, "{line}").unwrap();
    }
    // Every answer, then end the session.
    let until = Instant::now() + Duration::from_secs(30);
    while proxy.stdout().lines().count() < 8 {
        assert!(Instant::now() < until, "answers: {}", proxy.stdout());
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(stdin);
    let (stdout, stderr) = proxy.finish();
    assert!(stdout.contains("found"), "{stdout}");
    assert!(
        stderr.contains("TRACE") || stderr.contains("DEBUG"),
        "{stderr:.2000}"
    );
    assert_clean("sluice mcp's stdout", &stdout);
    assert_clean("sluice mcp's stderr", &stderr);
    let _ = std::fs::remove_dir_all(dir);
}

/// Streams a chunked body at the sidecar until it answers; returns the
/// status line, the bytes written before the answer came, and the peak RSS
/// growth of the sidecar meanwhile (KiB).
fn stream_huge_body(addr: &str, path: &str, pid: u32) -> (String, u64, u64) {
    let baseline = proc_stats(pid).unwrap().rss_kib;
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_write_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {TOKEN}\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
    )
    .unwrap();
    let answered = Arc::new(AtomicBool::new(false));
    let status = Arc::new(Mutex::new(String::new()));
    let reader = {
        let (answered, status) = (answered.clone(), status.clone());
        let stream = stream.try_clone().unwrap();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stream).read_line(&mut line);
            *status.lock().unwrap() = line.trim().to_owned();
            answered.store(true, Ordering::SeqCst);
        })
    };
    let peak = Arc::new(AtomicU64::new(baseline));
    let sampler = {
        let (answered, peak) = (answered.clone(), peak.clone());
        std::thread::spawn(move || {
            while !answered.load(Ordering::SeqCst) {
                if let Some(stats) = proc_stats(pid) {
                    peak.fetch_max(stats.rss_kib, Ordering::SeqCst);
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    let chunk = {
        let mut chunk = format!("{:x}\r\n", 64 << 10).into_bytes();
        chunk.extend(std::iter::repeat_n(b'x', 64 << 10));
        chunk.extend_from_slice(b"\r\n");
        chunk
    };
    // At most 256 MiB, or 20 s: a sidecar that buffered it all would show.
    let mut written = 0u64;
    let until = Instant::now() + Duration::from_secs(20);
    while !answered.load(Ordering::SeqCst) && written < 256 << 20 && Instant::now() < until {
        if stream.write_all(&chunk).is_err() {
            break;
        }
        written += 64 << 10;
    }
    let wait = Instant::now() + Duration::from_secs(10);
    while !answered.load(Ordering::SeqCst) && Instant::now() < wait {
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = stream.shutdown(std::net::Shutdown::Both);
    reader.join().unwrap();
    sampler.join().unwrap();
    let status = status.lock().unwrap().clone();
    (
        status,
        written,
        peak.load(Ordering::SeqCst).saturating_sub(baseline),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_body_is_refused_without_being_read_whole() {
    let upstream = fake().await;
    let dir = tempdir("huge-body");
    let sidecar = serve(&serve_config(&dir, &upstream.url(), ""), "warn");
    let url = sidecar.url();
    let addr = url.strip_prefix("http://").unwrap().to_owned();
    let pid = sidecar.child.id();
    for path in ["/v1/turns", "/proxy/support/api/v2/tickets"] {
        let (addr, target) = (addr.clone(), path.to_owned());
        let (status, written, grew_kib) =
            tokio::task::spawn_blocking(move || stream_huge_body(&addr, &target, pid))
                .await
                .unwrap();
        eprintln!(
            "{path}: {status}; {} KiB written before it; RSS +{grew_kib} KiB",
            written >> 10
        );
        assert!(status.starts_with("HTTP/1.1 413"), "{path}: {status:?}");
        // Socket buffers hold a few MiB; the limit is 1 MiB.
        assert!(written < 32 << 20, "{path}: {written} bytes were read");
        assert!(
            grew_kib < 24 << 10,
            "{path}: the sidecar grew by {grew_kib} KiB"
        );
    }
    // A declared length over the limit is refused before a byte of it.
    let mut stream = TcpStream::connect(&addr).unwrap();
    write!(
        stream,
        "POST /v1/turns HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {TOKEN}\r\ncontent-length: 10737418240\r\n\r\n"
    )
    .unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line).unwrap();
    assert!(line.starts_with("HTTP/1.1 413"), "{line:?}");
    assert!(upstream.api().requests().is_empty());
    let (_, stderr) = sidecar.terminate();
    assert_clean("sluice serve", &stderr);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_non_loopback_listener_without_a_token_is_refused() {
    let dir = tempdir("exposed");
    let config = dir.join("sluice.toml");
    let body = "[credentials.support]\nbase_url = \"http://127.0.0.1:9\"\n\n[tools.t]\ncredential = \"support\"\npath = \"/t\"\n";
    std::fs::write(&config, body).unwrap();
    let in_file = dir.join("exposed.toml");
    std::fs::write(
        &in_file,
        format!("[server]\nlisten = \"0.0.0.0:0\"\n\n{body}"),
    )
    .unwrap();
    for args in [
        vec![
            "serve",
            "--config",
            config.to_str().unwrap(),
            "--listen",
            "0.0.0.0:0",
        ],
        vec![
            "serve",
            "--config",
            config.to_str().unwrap(),
            "--listen",
            "[::]:0",
        ],
        vec!["serve", "--config", in_file.to_str().unwrap()],
    ] {
        let output = Command::new(sluice())
            .args(&args)
            .env_remove("SLUICE_TOKEN")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{args:?}: {stdout}");
        assert!(!stdout.contains("listening on"), "{args:?}: {stdout}");
        assert!(
            stderr.contains("server.auth_token_env"),
            "{args:?}: {stderr}"
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// Sends a raw request and returns the answer with the `date` header removed.
fn raw(addr: &str, request: &str) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer
        .lines()
        .filter(|line| !line.to_ascii_lowercase().starts_with("date:"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_token_gets_the_same_answer_on_every_path() {
    let upstream = fake().await;
    let dir = tempdir("token");
    let sidecar = serve(&serve_config(&dir, &upstream.url(), ""), "warn");
    let url = sidecar.url();
    let addr = url.strip_prefix("http://").unwrap().to_owned();
    let targets = [
        ("GET", "/v1/status"),
        ("GET", "/metrics"),
        ("POST", "/v1/turns"),
        ("DELETE", "/v1/turns"),
        ("GET", "/proxy/support/api/v2/tickets/1"),
        ("GET", "/proxy/no-such-credential/x"),
        ("GET", "/proxy/support/../../etc/passwd"),
        ("GET", "/no/such/endpoint"),
        ("GET", "/v1/statuses"),
    ];
    let tokens = [
        None,
        Some("wrong".to_owned()),
        Some(TOKEN[..TOKEN.len() - 1].to_owned()),
        Some(format!("{TOKEN}x")),
        Some(String::new()),
    ];
    let answers = tokio::task::spawn_blocking(move || {
        let mut answers = Vec::new();
        for (method, target) in targets {
            for token in &tokens {
                let auth = token
                    .as_ref()
                    .map(|t| format!("authorization: Bearer {t}\r\n"))
                    .unwrap_or_default();
                let request = format!(
                    "{method} {target} HTTP/1.1\r\nhost: x\r\n{auth}content-length: 2\r\nconnection: close\r\n\r\n{{}}"
                );
                answers.push((format!("{method} {target} {token:?}"), raw(&addr, &request)));
            }
        }
        answers
    })
    .await
    .unwrap();
    let (_, first) = &answers[0];
    assert!(first.starts_with("HTTP/1.1 401"), "{first}");
    for (what, answer) in &answers {
        assert_eq!(answer, first, "{what}: the refusal differs");
    }
    assert!(
        upstream.api().requests().is_empty(),
        "nothing went upstream"
    );
    let (_, stderr) = sidecar.terminate();
    assert_clean("sluice serve", &stderr);
    let _ = std::fs::remove_dir_all(dir);
}
