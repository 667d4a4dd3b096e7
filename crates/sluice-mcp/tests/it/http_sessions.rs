//! `sluice mcp --listen` sessions over real HTTP, with a stdio server per
//! session: idle expiry (the child stopped and reaped, the id then 404),
//! `max_sessions` (the least recently used idle session makes room, else
//! 503 + Retry-After), `session_queue` (a POST past it is refused at once
//! and nothing reaches the server), and progress for a waiting call sent
//! on the POST stream that carried its token.

use crate::support::raw_http::{INIT, post_mcp};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;
use sluice_mcp::{Command, McpConfig, Proxy, Server};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A stdio MCP server that notes in its log when it starts, each call, and
/// SIGTERM; it ignores the end of its input, so only a signal stops it.
const SERVER: &str = r#"
import json, os, signal, sys, threading, time
log = sys.argv[1]
def note(text):
    with open(log, "a") as f:
        f.write(text + "\n")
note("start %d" % os.getpid())
def term(*_):
    note("term %d" % os.getpid())
    os._exit(0)
signal.signal(signal.SIGTERM, term)
lock = threading.Lock()
def send(message):
    with lock:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()
def handle(message):
    method = message.get("method")
    if method == "tools/call":
        name = message["params"]["name"]
        note("call %d %s" % (os.getpid(), name))
        if name == "slow":
            time.sleep(float(message["params"]["arguments"]["s"]))
        if name == "exit":
            os._exit(3)
        if name == "notify":
            for n in range(1, 4):
                send({"jsonrpc": "2.0", "method": "notifications/message",
                      "params": {"level": "info", "data": {"n": n}}})
        send({"jsonrpc": "2.0", "id": message["id"],
              "result": {"content": [{"type": "text", "text": "done"}]}})
    elif method == "initialize":
        send({"jsonrpc": "2.0", "id": message["id"], "result": {"protocolVersion": "2025-06-18",
              "capabilities": {"tools": {}}, "serverInfo": {"name": "s", "version": "0"}}})
    elif method is not None and "id" in message:
        send({"jsonrpc": "2.0", "id": message["id"], "result": {}})
for line in sys.stdin:
    threading.Thread(target=handle, args=(json.loads(line),)).start()
while True:
    time.sleep(1)
"#;

struct Listener {
    addr: String,
    log: PathBuf,
    dir: PathBuf,
}

impl Drop for Listener {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A directory of this test's own.
fn scratch() -> PathBuf {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("sluice-http-sessions-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

async fn listen(toml: &str) -> Listener {
    let dir = scratch();
    let script = dir.join("server.py");
    std::fs::write(&script, SERVER).unwrap();
    let log = dir.join("log");
    let config = McpConfig::from_toml(toml, None).unwrap();
    let settings = config
        .listener("127.0.0.1:0".parse().ok(), &|_| None)
        .unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let command = Command {
        program: "python3".into(),
        args: vec![script.into_os_string(), log.clone().into_os_string()],
    };
    tokio::spawn(sluice_mcp::serve_http(
        Proxy::new(config),
        Server::Command(command),
        listener,
        settings,
        std::future::pending(),
    ));
    Listener { addr, log, dir }
}

fn lines(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Waits (at most 10 s) until the log holds a line starting with `prefix`.
async fn until_logged(log: &Path, prefix: &str) -> String {
    let began = Instant::now();
    loop {
        if let Some(line) = lines(log).into_iter().find(|l| l.starts_with(prefix)) {
            return line;
        }
        assert!(
            began.elapsed() < Duration::from_secs(10),
            "never logged {prefix:?}: {:?}",
            lines(log)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One POST to `/mcp` (connection closed after it): status, head, body.
async fn post(addr: &str, session: Option<&str>, body: &str) -> (u16, String, String) {
    let mut headers = vec![
        ("host", addr),
        ("accept", "application/json, text/event-stream"),
    ];
    headers.extend(session.map(|session| ("mcp-session-id", session)));
    let answer = post_mcp(addr, &headers, body, Duration::from_secs(15)).await;
    (answer.status, answer.head, answer.body)
}

/// A new session's id, and its child's pid.
async fn open(server: &Listener) -> (String, u32) {
    let before = lines(&server.log).len();
    let (status, head, body) = post(&server.addr, None, INIT).await;
    assert_eq!(status, 200, "{head}{body}");
    let id = head
        .lines()
        .find_map(|l| l.strip_prefix("mcp-session-id: "))
        .expect("a session id")
        .to_owned();
    let started = lines(&server.log)[before..]
        .iter()
        .find_map(|l| l.strip_prefix("start ").map(str::to_owned))
        .expect("the child started");
    (id, started.parse().unwrap())
}

fn call(id: u64, tool: &str, arguments: &str) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{tool}","arguments":{arguments}}}}}"#
    )
}

fn ping(id: u64) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#)
}

/// The JSON messages of an SSE body or a JSON body.
fn messages(body: &str) -> Vec<Value> {
    let data: Vec<Value> = body
        .lines()
        .filter_map(|l| l.strip_prefix("data: ").or_else(|| l.strip_prefix("data:")))
        .filter_map(|d| serde_json::from_str(d.trim()).ok())
        .collect();
    if data.is_empty() {
        // A JSON body, possibly after a chunk-size line.
        return body
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l.trim()).ok())
            .filter(|v| v.is_object() || v.is_array())
            .collect();
    }
    data
}

/// True while the process exists (a zombie counts: it was not reaped).
fn exists(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

#[tokio::test]
async fn an_idle_session_is_closed_its_child_stopped_and_its_id_then_404() {
    let server = listen(
        "[credentials.api]\nrate = \"100/1s\"\n[mcp]\nsession_idle = \"300ms\"\nshutdown_grace = \"200ms\"",
    )
    .await;
    let (session, pid) = open(&server).await;
    // A call longer than session_idle: the session is busy, not idle.
    let (status, _, body) = post(
        &server.addr,
        Some(&session),
        &call(2, "slow", r#"{"s":0.8}"#),
    )
    .await;
    assert_eq!(status, 200);
    assert!(body.contains("done"), "{body}");
    let answered = Instant::now();
    // Idle 300 ms, then the input is closed; the child ignores that, so
    // after its 200 ms grace it gets SIGTERM.
    let term = until_logged(&server.log, "term").await;
    let closed = answered.elapsed();
    assert_eq!(term, format!("term {pid}"));
    assert!(closed >= Duration::from_millis(450), "{closed:?}");
    assert!(closed < Duration::from_secs(5), "{closed:?}");
    let began = Instant::now();
    while exists(pid) {
        assert!(
            began.elapsed() < Duration::from_secs(5),
            "the child was not reaped"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (status, _, body) = post(&server.addr, Some(&session), &ping(3)).await;
    assert_eq!(status, 404, "{body}");
    // The client re-initializes and carries on.
    let (again, _) = open(&server).await;
    assert_ne!(again, session);
    let (status, _, body) = post(&server.addr, Some(&again), &call(4, "ok", "{}")).await;
    assert_eq!(status, 200);
    assert!(body.contains("done"), "{body}");
}

#[tokio::test]
async fn past_max_sessions_the_least_recently_used_idle_session_makes_room() {
    let server = listen(
        "[credentials.api]\nrate = \"100/1s\"\nmax_in_flight = 8\n[mcp]\nmax_sessions = 2\nshutdown_grace = \"200ms\"",
    )
    .await;
    let (a, _) = open(&server).await;
    let (b, pid_b) = open(&server).await;
    // a is used after b: b is the least recently used.
    assert_eq!(post(&server.addr, Some(&a), &ping(2)).await.0, 200);
    let (c, _) = open(&server).await;
    assert_eq!(
        until_logged(&server.log, "term").await,
        format!("term {pid_b}")
    );
    assert_eq!(post(&server.addr, Some(&b), &ping(3)).await.0, 404);
    assert_eq!(post(&server.addr, Some(&a), &ping(4)).await.0, 200);

    // Both open sessions busy: a third is refused, to come back in a second.
    let busy: Vec<_> = [a.clone(), c.clone()]
        .into_iter()
        .map(|session| {
            let addr = server.addr.clone();
            tokio::spawn(async move {
                post(&addr, Some(&session), &call(5, "slow", r#"{"s":1.5}"#)).await
            })
        })
        .collect();
    let began = Instant::now();
    while lines(&server.log)
        .iter()
        .filter(|l| l.ends_with(" slow"))
        .count()
        < 2
    {
        assert!(began.elapsed() < Duration::from_secs(10));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (status, head, _) = post(&server.addr, None, INIT).await;
    assert_eq!(status, 503, "{head}");
    assert!(head.contains("retry-after: 1"), "{head}");
    for answer in busy {
        let (status, _, body) = answer.await.unwrap();
        assert_eq!(status, 200);
        assert!(body.contains("done"), "{body}");
    }
    assert_eq!(post(&server.addr, None, INIT).await.0, 200);
}

#[tokio::test]
async fn a_post_past_session_queue_is_refused_at_once_and_sends_nothing() {
    let server =
        listen("[credentials.api]\nrate = \"100/1s\"\nmax_in_flight = 8\n[mcp]\nsession_queue = 2")
            .await;
    let (session, _) = open(&server).await;
    let slow: Vec<_> = (10..12)
        .map(|id| {
            let (addr, session) = (server.addr.clone(), session.clone());
            tokio::spawn(async move {
                post(&addr, Some(&session), &call(id, "slow", r#"{"s":1}"#)).await
            })
        })
        .collect();
    let began = Instant::now();
    while lines(&server.log)
        .iter()
        .filter(|l| l.ends_with(" slow"))
        .count()
        < 2
    {
        assert!(began.elapsed() < Duration::from_secs(10));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Two in progress: a third call is shed, and a ping gets -32023.
    let asked = Instant::now();
    let (status, _, body) = post(&server.addr, Some(&session), &call(12, "ok", "{}")).await;
    assert!(
        asked.elapsed() < Duration::from_millis(500),
        "{:?}",
        asked.elapsed()
    );
    assert_eq!(status, 200);
    let answer = &messages(&body)[0];
    assert_eq!(answer["id"], 12);
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    let outcome = &answer["result"]["structuredContent"];
    assert_eq!(outcome["status"], "rate_limited");
    assert_eq!(outcome["reason"], "shed");
    assert_eq!(outcome["scope"], "session");
    let (status, _, body) = post(&server.addr, Some(&session), &ping(13)).await;
    assert_eq!(status, 200);
    let answer = &messages(&body)[0];
    assert_eq!(answer["error"]["code"], -32023, "{answer}");
    assert_eq!(answer["error"]["data"]["reason"], "shed");
    for answer in slow {
        assert!(answer.await.unwrap().2.contains("done"));
    }
    // Nothing refused reached the server; with room again, calls go through.
    assert_eq!(
        lines(&server.log)
            .iter()
            .filter(|l| l.contains(" call ") || l.starts_with("call"))
            .count(),
        2
    );
    let (_, _, body) = post(&server.addr, Some(&session), &call(14, "ok", "{}")).await;
    assert!(body.contains("done"), "{body}");
}

#[tokio::test]
async fn progress_for_a_waiting_call_goes_on_its_own_post_stream() {
    let server =
        listen("[defaults]\ninline_wait = \"5s\"\n[credentials.api]\nrate = \"1/3s\"\nburst = 1")
            .await;
    let (session, _) = open(&server).await;
    // An open GET stream: progress about a POST's request is not sent there.
    let mut get = TcpStream::connect(&server.addr).await.unwrap();
    get.write_all(
        format!("GET /mcp HTTP/1.1\r\nhost: localhost\r\naccept: text/event-stream\r\nmcp-session-id: {session}\r\n\r\n")
            .as_bytes(),
    )
    .await
    .unwrap();
    let first = post(&server.addr, Some(&session), &call(2, "ok", "{}")).await;
    assert!(first.2.contains("done"));
    let with_token = r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"ok","arguments":{},"_meta":{"progressToken":"tok-3"}}}"#;
    let began = Instant::now();
    let (status, _, body) = post(&server.addr, Some(&session), with_token).await;
    let waited = began.elapsed();
    assert_eq!(status, 200);
    assert!(waited >= Duration::from_millis(1500), "{waited:?}");
    let got = messages(&body);
    let last = got.last().unwrap();
    assert_eq!(last["id"], 3, "{body}");
    let progress: Vec<&Value> = got
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .collect();
    assert!(!progress.is_empty(), "{body}");
    for p in &progress {
        assert_eq!(p["params"]["progressToken"], "tok-3");
        // A rate wait, reported as such: the call was never in a queue.
        let message = p["params"]["message"].as_str().unwrap();
        assert!(
            message.starts_with("waiting for a rate-limit slot"),
            "{message}"
        );
    }
    // Reminders about every second while it waits: never more than one a second.
    assert!(
        progress.len() as u128 <= waited.as_millis() / 1000 + 1,
        "{progress:?}"
    );
    let mut seen = vec![0; 16 << 10];
    let n = tokio::time::timeout(Duration::from_millis(300), get.read(&mut seen))
        .await
        .map_or(0, |n| n.unwrap());
    let get_text = String::from_utf8_lossy(&seen[..n]);
    assert!(!get_text.contains("notifications/progress"), "{get_text}");
}

/// With `toml`'s limits holding one call at a time, a call queued behind
/// a slow one hears "waiting in sluice's queue" progress, numbered from 1,
/// at most one a second, until it is sent.
async fn a_queued_call_hears_progress(toml: &str) {
    let server = listen(toml).await;
    let (session, _) = open(&server).await;
    let first = {
        let (addr, session) = (server.addr.clone(), session.clone());
        tokio::spawn(
            async move { post(&addr, Some(&session), &call(2, "slow", r#"{"s":2.5}"#)).await },
        )
    };
    until_logged(&server.log, "call").await;
    let queued = r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"ok","arguments":{},"_meta":{"progressToken":7}}}"#;
    let began = Instant::now();
    let (status, _, body) = post(&server.addr, Some(&session), queued).await;
    let waited = began.elapsed();
    assert_eq!(status, 200);
    assert!(waited >= Duration::from_millis(1500), "{waited:?}");
    let got = messages(&body);
    assert_eq!(got.last().unwrap()["id"], 3, "{body}");
    let progress: Vec<&Value> = got
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .collect();
    assert!(!progress.is_empty(), "{body}");
    for (n, p) in progress.iter().enumerate() {
        assert_eq!(p["params"]["progressToken"], 7);
        assert_eq!(p["params"]["progress"], n as u64 + 1);
        let message = p["params"]["message"].as_str().unwrap();
        assert!(
            message.starts_with("waiting in sluice's queue"),
            "{message}"
        );
        assert!(message.contains(" ms"), "an estimate: {message}");
    }
    assert!(
        progress.len() as u128 <= waited.as_millis() / 1000 + 1,
        "{progress:?}"
    );
    assert!(first.await.unwrap().2.contains("done"));
}

#[tokio::test]
async fn a_call_waiting_in_the_queue_hears_progress_until_it_is_sent() {
    a_queued_call_hears_progress(
        "[credentials.api]\nrate = \"100/1s\"\nmax_in_flight = 1\nqueue = 4\nexpected_latency = \"2s\"",
    )
    .await;
}

/// The same for a group's queue: the credential has room, the tools'
/// group holds one call at a time.
#[tokio::test]
async fn a_call_waiting_in_its_groups_queue_hears_progress() {
    a_queued_call_hears_progress(
        "[credentials.api]\nrate = \"100/1s\"\nexpected_latency = \"2s\"\n\
         [credentials.api.groups.one]\nrate = \"100/1s\"\nmax_in_flight = 1\n\
         [tools.slow]\ngroup = \"one\"\n[tools.ok]\ngroup = \"one\"",
    )
    .await;
}

#[tokio::test]
async fn a_server_that_exits_mid_call_gives_that_call_one_error_and_ends_the_session() {
    let server = listen("[credentials.api]\nrate = \"100/1s\"").await;
    let (session, _) = open(&server).await;
    let (status, _, body) = post(&server.addr, Some(&session), &call(2, "exit", "{}")).await;
    assert_eq!(status, 200);
    let got = messages(&body);
    assert_eq!(got.len(), 1, "{body}");
    assert_eq!(got[0]["id"], 2);
    assert_eq!(
        got[0]["result"]["structuredContent"]["status"], "error",
        "{body}"
    );
    let began = Instant::now();
    while post(&server.addr, Some(&session), &ping(3)).await.0 != 404 {
        assert!(
            began.elapsed() < Duration::from_secs(5),
            "the session outlived its server"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Reads SSE events from `stream` until `want` of them have come (10 s at most):
/// each event's id and message.
async fn read_events(stream: &mut TcpStream, want: usize) -> Vec<(String, Value)> {
    let mut text = String::new();
    let mut buf = vec![0; 16 << 10];
    let began = Instant::now();
    loop {
        let events: Vec<(String, Value)> = text
            .split("\n\n")
            .filter_map(|event| {
                let id = event.lines().find_map(|l| l.strip_prefix("id: "))?;
                let data = event.lines().find_map(|l| l.strip_prefix("data: "))?;
                Some((id.to_owned(), serde_json::from_str(data).ok()?))
            })
            .collect();
        if events.len() >= want {
            return events;
        }
        let left = Duration::from_secs(10).saturating_sub(began.elapsed());
        let n = tokio::time::timeout(left, stream.read(&mut buf))
            .await
            .expect("events in time")
            .unwrap();
        assert!(n > 0, "the stream ended: {text}");
        text.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
}

async fn open_get(addr: &str, session: &str, last: Option<&str>) -> TcpStream {
    let mut get = TcpStream::connect(addr).await.unwrap();
    let last = last.map_or(String::new(), |id| format!("last-event-id: {id}\r\n"));
    get.write_all(
        format!("GET /mcp HTTP/1.1\r\nhost: localhost\r\naccept: text/event-stream\r\nmcp-session-id: {session}\r\n{last}\r\n")
            .as_bytes(),
    )
    .await
    .unwrap();
    get
}

#[tokio::test]
async fn a_broken_get_stream_resumes_with_last_event_id_and_loses_nothing() {
    let server = listen("[credentials.api]\nrate = \"100/1s\"").await;
    let (session, _) = open(&server).await;
    let mut get = open_get(&server.addr, &session, None).await;
    // Give the GET time to be registered before the server speaks.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (_, _, body) = post(&server.addr, Some(&session), &call(2, "notify", "{}")).await;
    assert!(body.contains("done"), "{body}");
    let first = read_events(&mut get, 1).await;
    let (seen_id, seen) = first[0].clone();
    assert_eq!(seen["params"]["data"]["n"], 1, "{seen}");
    // The client read one event, then its connection broke.
    drop(get);
    let mut again = open_get(&server.addr, &session, Some(&seen_id)).await;
    let resumed = read_events(&mut again, 2).await;
    let ns: Vec<&Value> = resumed
        .iter()
        .map(|(_, m)| &m["params"]["data"]["n"])
        .collect();
    assert_eq!(ns, [2, 3], "{resumed:?}");
    let ids: Vec<u64> = std::iter::once(&seen_id)
        .chain(resumed.iter().map(|(id, _)| id))
        .map(|id| id.parse().unwrap())
        .collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    // Resumed once more from the last: nothing again, and the stream goes on.
    drop(again);
    let mut last = open_get(&server.addr, &session, Some(&resumed[1].0)).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    post(&server.addr, Some(&session), &call(3, "notify", "{}")).await;
    let next = read_events(&mut last, 3).await;
    let ns: Vec<&Value> = next
        .iter()
        .map(|(_, m)| &m["params"]["data"]["n"])
        .collect();
    assert_eq!(ns, [1, 2, 3], "{next:?}");
}

/// A stdio server that exits when its input ends, as MCP servers do.
const POLITE: &str = r#"
import json, os, sys
with open(sys.argv[1], "a") as f:
    f.write("start %d\n" % os.getpid())
for line in sys.stdin:
    m = json.loads(line)
    if "id" in m:
        r = {"protocolVersion": "2025-06-18", "capabilities": {}, "serverInfo": {"name": "s", "version": "0"}} if m.get("method") == "initialize" else {}
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": r}) + "\n")
        sys.stdout.flush()
"#;

/// The state letter of `/proc/PID/stat` (`Z` for a zombie), or `None` once
/// the process is gone (reaped).
fn proc_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.chars().next()
}

/// This process's resident set, in KiB.
fn own_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Issue 54: a client that opens sessions and walks away (no DELETE, as the
/// conformance suite does) never holds more than `max_sessions` children:
/// each new session past the cap closes the least recently used idle one,
/// whose child is stopped and reaped.
#[tokio::test]
async fn fifty_abandoned_sessions_leave_at_most_max_sessions_children() {
    const CAP: usize = 8;
    let dir = scratch();
    let script = dir.join("server.py");
    std::fs::write(&script, POLITE).unwrap();
    let log = dir.join("log");
    let config = McpConfig::from_toml(
        &format!("[credentials.api]\nrate = \"100/1s\"\n[mcp]\nmax_sessions = {CAP}\nshutdown_grace = \"200ms\""),
        None,
    )
    .unwrap();
    let settings = config
        .listener("127.0.0.1:0".parse().ok(), &|_| None)
        .unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let command = Command {
        program: "python3".into(),
        args: vec![script.into_os_string(), log.clone().into_os_string()],
    };
    tokio::spawn(sluice_mcp::serve_http(
        Proxy::new(config),
        Server::Command(command),
        listener,
        settings,
        std::future::pending(),
    ));
    let pids = || -> Vec<u32> {
        lines(&log)
            .iter()
            .filter_map(|l| l.strip_prefix("start ")?.parse().ok())
            .collect()
    };
    let live = || {
        pids()
            .into_iter()
            .filter(|pid| proc_state(*pid).is_some())
            .count()
    };
    let mut ids = Vec::new();
    let mut rss_at_ten = 0;
    let mut peak = 0;
    for n in 0..50 {
        let (status, head, body) = post(&addr, None, INIT).await;
        assert_eq!(status, 200, "session {n}: {head}{body}");
        ids.push(
            head.lines()
                .find_map(|l| l.strip_prefix("mcp-session-id: "))
                .unwrap()
                .to_owned(),
        );
        peak = peak.max(live());
        if n == 9 {
            rss_at_ten = own_rss_kib();
        }
    }
    // The evicted children are stopped; wait for the last of them.
    let began = Instant::now();
    while live() > CAP {
        assert!(
            began.elapsed() < Duration::from_secs(10),
            "{} children alive, cap {CAP}",
            live()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let started = pids();
    assert_eq!(started.len(), 50, "one child per session");
    // Every child past the cap was reaped, not left a zombie.
    let zombies: Vec<u32> = started
        .iter()
        .copied()
        .filter(|pid| proc_state(*pid) == Some('Z'))
        .collect();
    assert!(zombies.is_empty(), "zombies: {zombies:?}");
    assert_eq!(live(), CAP);
    // A child closing while the next one starts is all the slack there is.
    assert!(peak <= CAP + 2, "peak {peak} children, cap {CAP}");
    // The most recent sessions are the ones kept; the first are gone.
    assert_eq!(post(&addr, Some(&ids[0]), &ping(2)).await.0, 404);
    assert_eq!(post(&addr, Some(&ids[49]), &ping(2)).await.0, 200);
    // Forty sessions more, yet the proxy's memory has not grown with them.
    let grown = own_rss_kib().saturating_sub(rss_at_ten);
    assert!(grown < 16 * 1024, "grew {grown} KiB over 40 sessions");
    let _ = std::fs::remove_dir_all(&dir);
}
