//! The upstream fault matrix through the sidecar, over real sockets: an
//! upstream that hangs, resets, cuts bodies short, trickles, sends garbage
//! or huge rate-limit headers, storms 429 and 503, lies about its length,
//! or runs out of daily quota mid-run. For each: every call gets exactly
//! one outcome, none later than its deadline plus [`SLACK`], with the right
//! status; nothing panics; and no permit or queue slot stays taken.

use crate::support;

use std::time::{Duration, Instant};

use futures_util::future::join_all;
use serde_json::{Value, json};
use sluice_fake::{Config as FakeConfig, FakeApi, FakeServer, HeaderStyle, Latency, Limits};
use sluice_server::SidecarConfig;
use sluice_testkit::{Fault, Upstream};
use support::{SECRET, Sidecar, env, state};

/// How late past its deadline an answer may come (scheduling, loopback).
const SLACK: Duration = Duration::from_millis(250);
/// `defaults.max_attempts` below.
const MAX_ATTEMPTS: usize = 3;

/// A credential `api` on `base_url` with a read tool (`GET /r/{n}`) and a
/// write tool (`POST /w/{n}`), quick backoff, room for every call.
fn config(base_url: &str) -> SidecarConfig {
    config_at(base_url, "1000/1s")
}

fn config_at(base_url: &str, rate: &str) -> SidecarConfig {
    let toml = format!(
        r#"
[defaults]
backoff_base = "20ms"
backoff_cap = "100ms"
max_attempts = {MAX_ATTEMPTS}

[credentials.api]
base_url = "{base_url}"
secret_env = "SUPPORT_API_KEY"
rate = "{rate}"
max_in_flight = 64
queue = 256

[tools.read]
credential = "api"
path = "/r/{{n}}"
read = true

[tools.write]
credential = "api"
method = "POST"
path = "/w/{{n}}"
read = false
"#
    );
    SidecarConfig::from_toml(&toml, env).unwrap()
}

/// One call's answer, as the client saw it.
#[derive(Debug)]
struct Answer {
    outcome: Value,
    elapsed: Duration,
    deadline: Duration,
}

impl Answer {
    fn status(&self) -> &str {
        self.outcome["status"].as_str().unwrap_or("missing")
    }
}

struct Harness {
    sidecar: Sidecar,
    client: reqwest::Client,
}

impl Harness {
    async fn new(base_url: &str) -> Harness {
        Harness::with(config(base_url)).await
    }

    async fn with(config: SidecarConfig) -> Harness {
        Harness {
            sidecar: Sidecar::spawn(state(config)).await,
            client: reqwest::Client::new(),
        }
    }

    /// One call in a `/v1/turns` request of its own: its only result, checked
    /// to carry its id and to have come within the deadline.
    async fn call(&self, tool: &str, n: &str, deadline_ms: u64) -> Answer {
        let id = format!("{tool}-{n}");
        let body = json!({"calls": [{"id": id, "tool": tool, "args": {"n": n}, "deadline_ms": deadline_ms}]});
        let sent = Instant::now();
        let response = self
            .client
            .post(format!("{}/v1/turns", self.sidecar.url))
            .json(&body)
            .send()
            .await
            .expect("the sidecar answers");
        assert_eq!(response.status(), 200);
        let answer: Value = response.json().await.expect("a JSON answer");
        let elapsed = sent.elapsed();
        let results = answer["results"].as_array().expect("results");
        assert_eq!(results.len(), 1, "exactly one outcome: {answer}");
        assert_eq!(results[0]["id"], id.as_str(), "{answer}");
        let deadline = Duration::from_millis(deadline_ms);
        assert!(
            elapsed <= deadline + SLACK,
            "{id}: answered after {elapsed:?}, deadline {deadline:?}: {answer}"
        );
        Answer {
            outcome: results[0].clone(),
            elapsed,
            deadline,
        }
    }

    /// `count` calls of `tool` at once, `n` = `{prefix}{i}`.
    async fn calls(&self, tool: &str, prefix: &str, count: usize, deadline_ms: u64) -> Vec<Answer> {
        let names: Vec<String> = (0..count).map(|i| format!("{prefix}{i}")).collect();
        join_all(names.iter().map(|n| self.call(tool, n, deadline_ms))).await
    }

    /// A proxied GET: the HTTP status, `x-sluice-outcome` and the body.
    async fn proxy(&self, path: &str, deadline_ms: u64) -> (u16, String, Value) {
        let sent = Instant::now();
        let response = self
            .client
            .get(format!("{}/proxy/api{path}", self.sidecar.url))
            .header("x-sluice-deadline-ms", deadline_ms.to_string())
            .send()
            .await
            .expect("the sidecar answers");
        let status = response.status().as_u16();
        let outcome = response.headers()["x-sluice-outcome"]
            .to_str()
            .unwrap()
            .to_owned();
        let body = response.bytes().await.expect("a whole body");
        assert!(sent.elapsed() <= Duration::from_millis(deadline_ms) + SLACK);
        let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
        (status, outcome, body)
    }

    async fn status(&self) -> Value {
        let response = self
            .client
            .get(format!("{}/v1/status", self.sidecar.url))
            .send()
            .await
            .unwrap();
        response.json().await.unwrap()
    }

    /// No permit held, no call queued, on any scope: at once, since every
    /// call has been answered.
    async fn assert_idle(&self) {
        let status = self.status().await;
        for credential in status["credentials"].as_array().unwrap() {
            assert_eq!(credential["in_flight"], 0, "{status}");
            for scope in credential["scopes"].as_array().unwrap() {
                assert_eq!(scope["in_flight"], 0, "a stuck permit: {status}");
                assert_eq!(scope["queued"], 0, "a stuck queue slot: {status}");
            }
        }
        assert!(!status.to_string().contains(SECRET));
    }

    /// The `api_key` scope's entry in `/v1/status`.
    async fn scope(&self) -> Value {
        let status = self.status().await;
        status["credentials"][0]["scopes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["scope"] == "api_key")
            .cloned()
            .unwrap_or(Value::Null)
    }
}

/// Requests the upstream saw per call (`n` is the last path segment).
fn requests_per_call(upstream: &Upstream) -> std::collections::BTreeMap<String, usize> {
    let mut counts = std::collections::BTreeMap::new();
    for seen in upstream.seen() {
        let n = seen.target.rsplit('/').next().unwrap().to_owned();
        *counts.entry(n).or_default() += 1;
    }
    counts
}

fn statuses(answers: &[Answer]) -> Vec<&str> {
    answers.iter().map(Answer::status).collect()
}

async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let until = Instant::now() + Duration::from_secs(3);
    while !check() {
        assert!(Instant::now() < until, "{what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_hangs_times_out_each_call_at_its_deadline() {
    let upstream = Upstream::spawn(Fault::Hang).await;
    let h = Harness::new(&upstream.url()).await;
    let (reads, writes, proxied) = tokio::join!(
        h.calls("read", "r", 8, 400),
        h.calls("write", "w", 4, 600),
        h.proxy("/p/1", 300),
    );
    for answer in reads.iter().chain(&writes) {
        assert_eq!(answer.status(), "timed_out", "{answer:?}");
        assert_eq!(
            answer.outcome["after_ms"],
            answer.deadline.as_millis() as u64
        );
        // Not earlier either: the deadline is what ended it.
        assert!(answer.elapsed >= answer.deadline, "{answer:?}");
    }
    assert_eq!(proxied.0, 504, "{proxied:?}");
    assert_eq!(proxied.1, "timed_out");
    // A call that timed out is not retried: one request each.
    let counts = requests_per_call(&upstream);
    assert_eq!(counts.len(), 13, "{counts:?}");
    assert!(counts.values().all(|&n| n == 1), "{counts:?}");
    h.assert_idle().await;
    // And the sidecar hung up on every request it gave up on.
    eventually("the sidecar closes connections it gave up on", || {
        upstream.open_connections() == 0
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resets_are_errors_and_only_reads_are_retried() {
    let upstream = Upstream::spawn(Fault::Reset).await;
    let h = Harness::new(&upstream.url()).await;
    let (reads, writes, proxied) = tokio::join!(
        h.calls("read", "r", 6, 3_000),
        h.calls("write", "w", 6, 3_000),
        h.proxy("/p/1", 3_000),
    );
    for answer in reads.iter().chain(&writes) {
        assert_eq!(answer.status(), "error", "{answer:?}");
        assert!(answer.outcome.get("http_status").is_none(), "{answer:?}");
    }
    assert_eq!(proxied.0, 502, "{proxied:?}");
    assert_eq!(proxied.1, "error");
    let counts = requests_per_call(&upstream);
    for (n, count) in &counts {
        if n.starts_with('w') {
            // The write may have been acted on: never sent twice.
            assert_eq!(*count, 1, "write {n}: {counts:?}");
        } else {
            assert!((1..=MAX_ATTEMPTS).contains(count), "read {n}: {counts:?}");
        }
    }
    assert!(
        counts.iter().any(|(n, &c)| n.starts_with('r') && c > 1),
        "reads are retried: {counts:?}"
    );
    h.assert_idle().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_cut_short_or_mislabelled_are_errors_not_hangs() {
    let upstream = Upstream::scripted(|seen| {
        if seen.target.contains("cut") {
            Fault::CloseMidBody
        } else if seen.target.contains("long") {
            Fault::LongContentLength
        } else if seen.target.contains("nothttp") {
            Fault::NotHttp
        } else {
            Fault::Ok
        }
    })
    .await;
    let h = Harness::new(&upstream.url()).await;
    let (cut, long, not_http, writes) = tokio::join!(
        h.calls("read", "cut", 4, 5_000),
        h.calls("read", "long", 4, 5_000),
        h.calls("read", "nothttp", 4, 5_000),
        h.calls("write", "wlong", 2, 5_000),
    );
    for answer in cut.iter().chain(&long).chain(&not_http).chain(&writes) {
        assert_eq!(answer.status(), "error", "{answer:?}");
        // Found out when the connection closed, not at the deadline.
        assert!(answer.elapsed < Duration::from_secs(2), "{answer:?}");
    }
    let (status, outcome, _) = h.proxy("/cut", 5_000).await;
    assert_eq!((status, outcome.as_str()), (502, "error"));
    let counts = requests_per_call(&upstream);
    assert!(counts.values().all(|&c| c <= MAX_ATTEMPTS), "{counts:?}");
    assert_eq!(counts["wlong0"], 1, "a write is not retried: {counts:?}");
    assert_eq!(counts["wlong1"], 1, "a write is not retried: {counts:?}");
    // The upstream was fine all along for other paths.
    assert_eq!(h.call("read", "fine", 2_000).await.status(), "ok");
    h.assert_idle().await;
}

/// A `Content-Length` shorter than the body: the client takes the declared
/// bytes, and the rest must not be read as the next response on that
/// connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_content_length_shorter_than_the_body_does_not_poison_the_next_answer() {
    let upstream = Upstream::scripted(|seen| {
        if seen.target.contains("/short") {
            Fault::ShortContentLength
        } else {
            Fault::Ok
        }
    })
    .await;
    let h = Harness::new(&upstream.url()).await;
    for i in 0..5 {
        let short = h.call("read", &format!("short{i}"), 2_000).await;
        // The declared length is what the response is: half a JSON body,
        // which comes back as a string.
        assert_eq!(short.status(), "ok", "{short:?}");
        assert!(short.outcome["body"].is_string(), "{short:?}");
        let next = h.call("read", &format!("next{i}"), 2_000).await;
        assert_eq!(next.status(), "ok", "{next:?}");
        assert_eq!(
            next.outcome["body"]["path"],
            format!("/r/next{i}"),
            "{next:?}"
        );
    }
    h.assert_idle().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trickling_upstream_is_cut_off_at_the_deadline_or_read_whole() {
    let slow = Upstream::spawn(Fault::Trickle {
        per_byte: Duration::from_millis(20),
    })
    .await;
    let h = Harness::new(&slow.url()).await;
    let answers = h.calls("read", "slow", 4, 800).await;
    assert_eq!(statuses(&answers), ["timed_out"; 4]);
    let (status, outcome, _) = h.proxy("/slow", 500).await;
    assert_eq!((status, outcome.as_str()), (504, "timed_out"));
    h.assert_idle().await;

    let steady = Upstream::spawn(Fault::Trickle {
        per_byte: Duration::from_millis(1),
    })
    .await;
    let h = Harness::new(&steady.url()).await;
    let answers = h.calls("read", "steady", 4, 5_000).await;
    for answer in &answers {
        assert_eq!(answer.status(), "ok", "{answer:?}");
        assert_eq!(answer.outcome["body"]["method"], "GET", "{answer:?}");
    }
    h.assert_idle().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_and_huge_rate_limit_headers_are_ignored() {
    let upstream = Upstream::scripted(|seen| {
        let path = seen.target.as_str();
        if path.contains("/garbage429") {
            Fault::garbage_headers(429)
        } else if path.contains("/garbage") {
            Fault::garbage_headers(200)
        } else if path.contains("/forty503") {
            Fault::status(
                503,
                &["retry-after: 1234567890123456789012345678901234567890"],
            )
        } else if path.contains("/control") {
            // A control byte in a value: not HTTP a client may accept.
            Fault::Raw {
                status: 200,
                headers: vec![b"retry-after: 1\x01\x02".to_vec()],
                body: b"{}".to_vec(),
            }
        } else if path.contains("/headhuge") {
            // A 1 MiB head: past any client's limit.
            let mut line = b"x-filler: ".to_vec();
            line.extend(std::iter::repeat_n(b'a', 1 << 20));
            Fault::Raw {
                status: 200,
                headers: vec![line],
                body: b"{}".to_vec(),
            }
        } else {
            Fault::Ok
        }
    })
    .await;
    let h = Harness::new(&upstream.url()).await;

    // On a 200 they are noise: the call is ok and the scope not blocked.
    let answers = h.calls("read", "garbage", 4, 3_000).await;
    assert_eq!(statuses(&answers), ["ok"; 4]);
    let (status, outcome, _) = h.proxy("/garbage", 3_000).await;
    assert_eq!((status, outcome.as_str()), (200, "ok"));
    let scope = h.scope().await;
    assert_eq!(scope["blocked_for_ms"], Value::Null, "{scope}");
    assert_eq!(scope["quota_exhausted"], false, "{scope}");
    assert_eq!(scope["server_remaining"], Value::Null, "{scope}");
    let after = h.call("read", "plain", 1_000).await;
    assert_eq!(after.status(), "ok");
    assert!(after.elapsed < Duration::from_millis(500), "{after:?}");

    // On a 429 they name no usable wait: retried with backoff, then
    // `rate_limited` with a wait of sluice's own; never a quota.
    let answers = h.calls("read", "garbage429-", 3, 3_000).await;
    for answer in &answers {
        assert_eq!(answer.status(), "rate_limited", "{answer:?}");
        let wait = answer.outcome["retry_after_ms"].as_u64().unwrap();
        assert!(wait < 60_000, "{answer:?}");
    }
    // A 40-digit Retry-After on a 503 is no wait either: an error, not a block.
    let answers = h.calls("read", "forty503-", 2, 3_000).await;
    for answer in &answers {
        assert_eq!(answer.status(), "error", "{answer:?}");
        assert_eq!(answer.outcome["http_status"], 503, "{answer:?}");
    }
    let scope = h.scope().await;
    assert_eq!(scope["quota_exhausted"], false, "{scope}");

    // Heads a client must refuse are errors, found at once.
    for prefix in ["control", "headhuge"] {
        let answers = h.calls("write", prefix, 2, 3_000).await;
        for answer in &answers {
            assert_eq!(answer.status(), "error", "{answer:?}");
            assert!(answer.elapsed < Duration::from_secs(2), "{answer:?}");
        }
    }
    let counts = requests_per_call(&upstream);
    assert!(counts.values().all(|&c| c <= MAX_ATTEMPTS), "{counts:?}");
    h.assert_idle().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storm_of_429s_is_waited_out_not_retried_into() {
    let upstream = Upstream::spawn(Fault::status(429, &["retry-after: 1"])).await;
    // Paced 20 ms apart, so that the first 429 of a wave is back before the
    // next call of the wave starts, however busy the machine.
    let h = Harness::with(config_at(&upstream.url(), "50/1s")).await;
    // Ten calls a second for three seconds, each willing to wait 800 ms.
    let started = Instant::now();
    let calls = (0..30).map(|i| {
        let h = &h;
        async move {
            tokio::time::sleep(Duration::from_millis(100 * i)).await;
            h.call("read", &format!("s{i}"), 800).await
        }
    });
    let answers = join_all(calls).await;
    for answer in &answers {
        if answer.status() == "timed_out" {
            // It fit its wait for the end of a block inline, and a fresh 429
            // blocked the scope again as its deadline came: nothing was sent.
            assert!(
                answer.elapsed + Duration::from_millis(20) >= answer.deadline,
                "{answer:?}"
            );
            continue;
        }
        assert_eq!(answer.status(), "rate_limited", "{answer:?}");
        assert_eq!(answer.outcome["reason"], "throttled", "{answer:?}");
        let wait = answer.outcome["retry_after_ms"].as_u64().unwrap();
        assert!((1..=1_100).contains(&wait), "{answer:?}");
    }
    let deferred = statuses(&answers)
        .iter()
        .filter(|s| **s == "rate_limited")
        .count();
    assert!(deferred >= 25, "{:?}", statuses(&answers));
    // The server asked for a second between tries; it got it. Calls that
    // waited inline for the end of a block start together when it ends
    // (paced by the bucket, 20 ms apart at 50/s) until its first 429 is back
    // and blocks the rest: one small wave per second.
    let starts: Vec<f64> = upstream
        .seen()
        .iter()
        .map(|s| s.at.as_secs_f64() * 1_000.0)
        .collect();
    let mut waves: Vec<f64> = Vec::new();
    for &start in &starts {
        match waves.last() {
            Some(&wave) if start - wave < 50.0 => {}
            Some(&wave) => {
                assert!(
                    start - wave >= 950.0,
                    "a request during the server's wait: {starts:?}"
                );
                waves.push(start);
            }
            None => waves.push(start),
        }
    }
    let window = started.elapsed().as_secs_f64();
    assert!(
        waves.len() as f64 <= window + 1.0,
        "{window:.1} s: {starts:?}"
    );
    assert!(starts.len() <= 2 * waves.len(), "small waves: {starts:?}");
    h.assert_idle().await;

    // Through the proxy, the client gets sluice's 429 with the wait.
    let (status, outcome, body) = h.proxy("/p", 300).await;
    assert_eq!((status, outcome.as_str()), (429, "rate_limited"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storm_of_503s_is_bounded_by_attempts_and_the_retry_budget() {
    let upstream = Upstream::spawn(Fault::status(503, &[])).await;
    let h = Harness::new(&upstream.url()).await;
    let (reads, writes) = tokio::join!(
        h.calls("read", "r", 40, 3_000),
        h.calls("write", "w", 10, 3_000),
    );
    for answer in reads.iter().chain(&writes) {
        assert_eq!(answer.status(), "error", "{answer:?}");
        assert_eq!(answer.outcome["http_status"], 503, "{answer:?}");
    }
    let counts = requests_per_call(&upstream);
    assert!(counts.values().all(|&c| c <= MAX_ATTEMPTS), "{counts:?}");
    // 50 first attempts; retries at most the floor (10) plus 20% of requests.
    let total = upstream.requests() as usize;
    assert!(
        total <= 50 + 10 + total / 5 + 1,
        "{total} requests: {counts:?}"
    );
    let (status, outcome, _) = h.proxy("/p", 2_000).await;
    assert_eq!((status, outcome.as_str()), (503, "error"));
    h.assert_idle().await;
}

async fn quota_fake(quota: u32, headers: HeaderStyle) -> FakeServer {
    let limits = Limits::new(1_000, Duration::from_secs(1)).with_daily_quota(quota);
    let config = FakeConfig::new(limits)
        .with_headers(headers)
        .with_latency(Latency::Fixed(Duration::from_millis(5)));
    FakeServer::spawn(FakeApi::new(config).unwrap())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daily_quota_that_runs_out_mid_run_stops_the_sending() {
    for headers in [HeaderStyle::Ietf, HeaderStyle::RetryAfter] {
        let fake = quota_fake(12, headers).await;
        let h = Harness::new(&fake.url()).await;
        let mut answers = Vec::new();
        // Batches of four at once, until well past the quota.
        for batch in 0..8 {
            let batch = h.calls("read", &format!("b{batch}-"), 4, 2_000).await;
            answers.extend(batch);
        }
        let statuses = statuses(&answers);
        let ok = statuses.iter().filter(|s| **s == "ok").count();
        assert_eq!(ok, 12, "{headers:?}: {statuses:?}");
        let last = answers.last().unwrap();
        assert_eq!(last.status(), "quota_exhausted", "{headers:?}: {last:?}");
        let resets = last.outcome["retry_after_ms"].as_u64().unwrap();
        assert!(
            resets > 3_600_000,
            "the day's reset is hours away: {last:?}"
        );
        assert!(
            statuses
                .iter()
                .all(|s| ["ok", "quota_exhausted", "rate_limited"].contains(s)),
            "{headers:?}: {statuses:?}"
        );
        // Once known, the quota is not asked again: at most the rejection
        // that revealed it (without IETF headers, a 429 is the first sign).
        let sent = fake.api().requests().len();
        assert!((12..=16).contains(&sent), "{headers:?}: {sent} requests");
        let before = fake.api().requests().len();
        assert_eq!(
            h.call("read", "again", 1_000).await.status(),
            "quota_exhausted"
        );
        assert_eq!(fake.api().requests().len(), before, "nothing more was sent");
        // A proxied route is a tool of its own: with IETF headers the spent
        // `daily` scope is learned per tool, so its first call may send one
        // request (answered 429) to learn it; none after that.
        for _ in 0..3 {
            let (status, outcome, _) = h.proxy("/r/again", 1_000).await;
            assert_eq!((status, outcome.as_str()), (429, "quota_exhausted"));
        }
        let sent = fake.api().requests().len() - before;
        assert!(
            sent <= 1,
            "{headers:?}: {sent} proxied requests after the quota"
        );
        let scope = h.scope().await;
        assert!(
            h.status().await["credentials"][0]["scopes"]
                .as_array()
                .unwrap()
                .iter()
                .any(|s| s["quota_exhausted"] == true),
            "{headers:?}: {scope}"
        );
        h.assert_idle().await;
    }
}

/// The sidecar keeps its connections to the upstream: calls one after
/// another share one; a connection the upstream closed while it sat idle
/// (a keep-alive timeout) is not written to, so a write after it is sent
/// once, on a new connection; and an answer that says `connection: close`
/// ends its connection. On one thread, so that one idle pool serves every
/// call.
#[tokio::test]
async fn upstream_connections_are_kept_and_a_closed_one_is_not_written_to() {
    let upstream = Upstream::scripted(|seen| {
        if seen.target.ends_with("/bye") {
            Fault::OkThenClose
        } else if seen.target.contains("/close") {
            Fault::status(200, &["connection: close"])
        } else {
            Fault::Ok
        }
    })
    .await;
    let h = Harness::new(&upstream.url()).await;
    for i in 0..10 {
        assert_eq!(h.call("read", &format!("a{i}"), 2_000).await.status(), "ok");
    }
    assert_eq!(upstream.connections(), 1, "ten calls, one connection");

    assert_eq!(h.call("read", "bye", 2_000).await.status(), "ok");
    eventually("the upstream closes its side", || {
        upstream.open_connections() == 0
    })
    .await;
    // Give the sidecar's connection task a turn to read the close.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(h.call("write", "after", 2_000).await.status(), "ok");
    assert_eq!(requests_per_call(&upstream)["after"], 1, "sent once");
    assert_eq!(upstream.connections(), 2, "on a new connection");

    for i in 0..3 {
        assert_eq!(
            h.call("read", &format!("close{i}"), 2_000).await.status(),
            "ok"
        );
    }
    assert_eq!(h.call("read", "last", 2_000).await.status(), "ok");
    let seen = upstream.seen();
    let on = |n: &str| {
        seen.iter()
            .find(|s| s.target.ends_with(n))
            .unwrap()
            .connection
    };
    assert_eq!(
        on("/after"),
        on("/close0"),
        "kept until an answer closes it"
    );
    let after_close = [on("/close0"), on("/close1"), on("/close2"), on("/last")];
    for pair in after_close.windows(2) {
        assert!(
            pair[0] < pair[1],
            "a closing answer ends its connection: {after_close:?}"
        );
    }
    h.assert_idle().await;
}
