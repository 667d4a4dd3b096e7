//! Reloading a running `sluice serve` (issue 53): SIGHUP and `POST
//! /v1/reload` read the configuration file again. New limits apply to the
//! calls that start after; what the window already spent is kept; a file
//! that cannot be applied is refused, naming the field, and the old limit
//! holds; SIGHUP never ends the process. Asserted on the fake API's
//! recorded start times, against a real `sluice serve` child.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use sluice_fake::FakeServer;
use sluice_testkit::{SluiceProcess, max_in_window};

use crate::support::{recording_fake, sluice, starts, status_of};

/// The fake allows far more than any limit here: it only records.
async fn fake() -> FakeServer {
    recording_fake(Some(Duration::from_millis(10))).await
}

/// A directory of the test's own.
fn dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sluice-reload-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Writes the configuration: credential `paced` at `rate`, tool `get`.
fn write_config(path: &Path, fake: &str, rate: &str) {
    let toml = format!(
        r#"[credentials.paced]
base_url = "{fake}"
rate = "{rate}"
max_in_flight = 32
queue = 64

[tools.get]
credential = "paced"
method = "GET"
path = "/item?n={{n}}"
"#
    );
    std::fs::write(path, toml).unwrap();
}

fn serve(config: &Path) -> SluiceProcess {
    SluiceProcess::serve(sluice(), config, &[], &[("RUST_LOG", "info")])
}

/// `POST /v1/reload`: its status and body.
async fn post_reload(url: &str) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(format!("{url}/v1/reload"))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let body = serde_json::from_slice(&response.bytes().await.unwrap()).unwrap();
    (status, body)
}

fn hangup(process: &SluiceProcess) {
    let status = Command::new("kill")
        .args(["-HUP", &process.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// Waits (at most 10 s) for `/v1/status` to show a configuration whose
/// hash is not `before`; returns it.
async fn reloaded_since(url: &str, before: &str) -> Value {
    for _ in 0..200 {
        let status = status_of(url).await;
        if status["config"]["sha256"] != before {
            return status;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no reload shown by /v1/status");
}

/// One turn of `n` distinct calls tagged `tag`; every outcome must be ok.
async fn burst(url: &str, tag: &str, n: usize) {
    let calls: Vec<Value> = (0..n)
        .map(|i| json!({"id": format!("c{i}"), "tool": "get", "args": {"n": format!("{tag}-{i}")}}))
        .collect();
    let body = reqwest::Client::new()
        .post(format!("{url}/v1/turns"))
        .header("content-type", "application/json")
        .body(json!({ "calls": calls }).to_string())
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let answer: Value = serde_json::from_slice(&body).unwrap();
    let results = answer["results"].as_array().unwrap();
    assert_eq!(results.len(), n, "{answer}");
    for result in results {
        assert_eq!(result["status"], "ok", "{answer}");
    }
}

fn sha256_of(status: &Value) -> String {
    status["config"]["sha256"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_limit_raised_then_lowered_by_reload_applies_to_later_calls() {
    let fake = fake().await;
    let config = dir("raise").join("sluice.toml");
    write_config(&config, &fake.url(), "2/1s");
    let sidecar = serve(&config);
    let first = status_of(&sidecar.url).await;
    let loaded_at = first["config"]["loaded_at"].as_str().unwrap().to_owned();
    assert!(
        loaded_at.len() == 24 && loaded_at.as_bytes()[10] == b'T' && loaded_at.ends_with('Z'),
        "RFC 3339: {loaded_at}"
    );
    assert_eq!(sha256_of(&first).len(), 64);

    burst(&sidecar.url, "before", 4).await;
    let before = starts(&fake, &["before"]);
    assert_eq!(max_in_window(&before, 1_000.0), 2, "2/1s: {before:?}");

    // Raised through the endpoint: ten at once.
    write_config(&config, &fake.url(), "20/1s");
    let (code, body) = post_reload(&sidecar.url).await;
    assert_eq!(code, 200, "{body}");
    assert_ne!(body["config"]["sha256"], first["config"]["sha256"]);
    let status = status_of(&sidecar.url).await;
    assert_eq!(status["credentials"][0]["rate"], "20/1s", "{status}");
    burst(&sidecar.url, "raised", 10).await;
    let raised = starts(&fake, &["raised"]);
    assert!(raised[9] - raised[0] < 500.0, "20/1s: at once: {raised:?}");

    // Lowered through SIGHUP: one a second.
    write_config(&config, &fake.url(), "1/1s");
    hangup(&sidecar);
    let status = reloaded_since(&sidecar.url, &sha256_of(&status)).await;
    assert_eq!(status["credentials"][0]["rate"], "1/1s", "{status}");
    // Past the raised burst's second, so that only the new limit counts.
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    burst(&sidecar.url, "lowered", 2).await;
    let lowered = starts(&fake, &["lowered"]);
    assert_eq!(max_in_window(&lowered, 1_000.0), 1, "1/1s: {lowered:?}");
}

/// 3/1s: three calls, a reload, three more: never more than three starts
/// in any rolling second on the fake's records, as the window remembers
/// the first three. A restart would have let the second three go at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_the_window_spent_survives_a_reload() {
    let fake = fake().await;
    let config = dir("spend").join("sluice.toml");
    write_config(&config, &fake.url(), "3/1s");
    let sidecar = serve(&config);
    burst(&sidecar.url, "first", 3).await;
    let (code, body) = post_reload(&sidecar.url).await;
    assert_eq!(code, 200, "{body}");
    burst(&sidecar.url, "second", 3).await;
    let all = starts(&fake, &["first", "second"]);
    assert_eq!(all.len(), 6);
    assert!(max_in_window(&all, 1_000.0) <= 3, "{all:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_that_fails_to_load_is_refused_and_the_old_limit_holds() {
    let fake = fake().await;
    let config = dir("bad").join("sluice.toml");
    write_config(&config, &fake.url(), "3/1s");
    let mut sidecar = serve(&config);
    let before = status_of(&sidecar.url).await;

    write_config(&config, &fake.url(), "three per second");
    let (code, body) = post_reload(&sidecar.url).await;
    assert_eq!(code, 400, "{body}");
    assert_eq!(body["field"], "credentials.paced.rate", "{body}");
    assert!(
        body["error"]
            .as_str()
            .unwrap()
            .starts_with("credentials.paced.rate:"),
        "{body}"
    );
    // A change a reload cannot apply is refused too, naming its field.
    std::fs::write(
        &config,
        std::fs::read_to_string(&config)
            .unwrap()
            .replace("three per second", "3/1s")
            .replace("/item?n={n}", "/other?n={n}"),
    )
    .unwrap();
    let (code, body) = post_reload(&sidecar.url).await;
    assert_eq!(code, 400, "{body}");
    assert_eq!(body["field"], "tools.get", "{body}");

    let after = status_of(&sidecar.url).await;
    assert_eq!(
        after["config"], before["config"],
        "the old file's still in force"
    );
    assert_eq!(after["credentials"][0]["rate"], "3/1s");
    burst(&sidecar.url, "held", 6).await;
    let held = starts(&fake, &["held"]);
    assert_eq!(max_in_window(&held, 1_000.0), 3, "still 3/1s: {held:?}");

    // By SIGHUP, the log names the field.
    write_config(&config, &fake.url(), "three per second");
    hangup(&sidecar);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(sidecar.exited_within(Duration::ZERO).is_none());
    let log = sidecar.stop();
    assert!(
        log.contains("reload refused") && log.contains("credentials.paced.rate"),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_never_ends_the_process() {
    let fake = fake().await;
    let config = dir("hup").join("sluice.toml");
    write_config(&config, &fake.url(), "5/1s");
    let mut sidecar = serve(&config);
    // The same file, a bad one, none at all, a good one again.
    for change in ["same", "bad", "gone", "good"] {
        match change {
            "bad" => std::fs::write(&config, "[credentials.paced\n").unwrap(),
            "gone" => std::fs::remove_file(&config).unwrap(),
            "good" => write_config(&config, &fake.url(), "6/1s"),
            _ => {}
        }
        hangup(&sidecar);
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            sidecar.exited_within(Duration::ZERO).is_none(),
            "SIGHUP ({change}) ended it: {}",
            sidecar.stop()
        );
        let health = reqwest::get(format!("{}/healthz", sidecar.url))
            .await
            .unwrap();
        assert_eq!(health.status(), 200, "after SIGHUP ({change})");
    }
    let status = status_of(&sidecar.url).await;
    assert_eq!(status["credentials"][0]["rate"], "6/1s", "{status}");
}

/// `sluice mcp` over stdio: SIGHUP, with the file good or bad, does not
/// end it (its default action would); the log says what it found.
#[test]
fn sighup_never_ends_sluice_mcp() {
    use std::process::Stdio;
    let config = dir("mcp").join("sluice.toml");
    std::fs::write(&config, "[credentials.api]\nrate = \"5/1s\"\n").unwrap();
    // A file, not a pipe: the server (a grandchild) holds it after the kill.
    let log_path = dir("mcp").join("stderr.log");
    let log_file = std::fs::File::create(&log_path).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["mcp", "--config"])
        .arg(&config)
        .args(["--", "python3", "-c", "import time; time.sleep(10)"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(log_file)
        .env("RUST_LOG", "info")
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let send_hup = |pid: u32| {
        let status = Command::new("kill")
            .args(["-HUP", &pid.to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    };
    send_hup(child.id());
    std::thread::sleep(Duration::from_millis(300));
    std::fs::write(&config, "[credentials.api]\nrate = \"five\"\n").unwrap();
    send_hup(child.id());
    std::thread::sleep(Duration::from_millis(300));
    let alive = sluice_testkit::exited_within(&mut child, Duration::ZERO).is_none();
    let _ = child.kill();
    let _ = child.wait();
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(alive, "SIGHUP ended sluice mcp: {log}");
    assert!(log.contains("limits are in force"), "{log}");
    assert!(log.contains("credentials.api.rate"), "{log}");
}
