//! `sluice inspect` as a process: sample response heads in, JSON and explanations out.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

fn sample(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/samples")
        .join(name)
}

/// Runs `sluice inspect ARGS`, feeding `stdin` when given.
fn inspect(args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("inspect")
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().unwrap();
        // The command may stop reading early (it reads a head, not a body).
        let _ = pipe.write_all(input);
    }
    child.wait_with_output().unwrap()
}

/// `sluice inspect --json FILE [ARGS]`, which must exit 0 with one JSON object.
fn json_of(file: &str, args: &[&str]) -> Value {
    let path = sample(file);
    let mut all = vec!["--json", path.to_str().unwrap()];
    all.extend_from_slice(args);
    let output = inspect(&all, None);
    assert!(
        output.status.success(),
        "{file}: {:?} {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).unwrap()
}

/// Asserts the fields of `expected` and nothing else.
fn assert_fields(file: &str, actual: &Value, expected: &Value) {
    for (key, value) in expected.as_object().unwrap() {
        assert_eq!(&actual[key], value, "{file}: field {key} in {actual}");
    }
}

#[test]
fn github_secondary_limit_403_waits_on_retry_after() {
    let file = "github_secondary_403.txt";
    let got = json_of(file, &[]);
    assert_fields(
        file,
        &got,
        &json!({
            "http_status": 403, "throttled": true, "wait_ms": 60_000, "source": "retry-after",
            "scope": "core", "remaining": 4987, "limit": 5000, "reset_ms": 3_600_000,
            "quota_exhausted": false, "clock": "date_header", "skipped_lines": 0,
            "scopes": [{"name": "core", "remaining": 4987, "limit": 5000, "reset_ms": 3_600_000,
                        "window_ms": null, "source": "x-ratelimit"}],
        }),
    );
}

#[test]
fn github_primary_limit_403_is_a_quota() {
    let file = "github_primary_403.txt";
    let got = json_of(file, &[]);
    assert_fields(
        file,
        &got,
        &json!({
            "http_status": 403, "throttled": true, "wait_ms": 3_600_000, "source": "x-ratelimit",
            "scope": "core", "remaining": 0, "limit": 60, "reset_ms": 3_600_000,
            "quota_exhausted": true, "quota_scope": "core",
        }),
    );
}

#[test]
fn openai_429_matches_the_issue_example() {
    let file = "openai_429.txt";
    let got = json_of(file, &[]);
    assert_fields(
        file,
        &got,
        &json!({
            "http_status": 429, "throttled": true, "wait_ms": 4200, "source": "retry-after-ms",
            "scope": "requests", "remaining": 0, "limit": 60, "reset_ms": 1000,
            "quota_exhausted": false,
        }),
    );
    let scopes: Vec<&str> = got["scopes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(scopes, ["requests", "tokens"]);
    assert_eq!(got["scopes"][1]["reset_ms"], 400);
}

#[test]
fn anthropic_200_may_go_now_on_its_tightest_scope() {
    let file = "anthropic_200.txt";
    let got = json_of(file, &[]);
    assert_fields(
        file,
        &got,
        &json!({
            "http_status": 200, "throttled": false, "wait_ms": 0,
            "source": "anthropic-ratelimit-requests-reset",
            "scope": "requests", "remaining": 49, "limit": 50, "reset_ms": 1000,
            "quota_exhausted": false,
        }),
    );
    assert_eq!(got["scopes"].as_array().unwrap().len(), 4);
    assert_eq!(got["scopes"][3]["name"], "output-tokens");
    assert_eq!(got["scopes"][3]["reset_ms"], 6000);
}

#[test]
fn ietf_policies_name_scopes_windows_and_quotas() {
    let got = json_of("ietf_policies.txt", &[]);
    assert_fields(
        "ietf_policies.txt",
        &got,
        &json!({
            "http_status": 200, "throttled": false, "wait_ms": 30_000, "scope": "burst",
            "remaining": 0, "limit": 100, "reset_ms": 30_000, "quota_exhausted": false,
        }),
    );
    assert_eq!(got["scopes"][0]["window_ms"], 60_000);
    assert_eq!(got["scopes"][1]["name"], "daily");
    assert_eq!(got["scopes"][1]["window_ms"], 86_400_000);

    let got = json_of("ietf_daily_spent.txt", &[]);
    assert_fields(
        "ietf_daily_spent.txt",
        &got,
        &json!({
            "http_status": 429, "throttled": true, "wait_ms": 43_200_000, "scope": "daily",
            "remaining": 0, "limit": 1000, "quota_exhausted": true, "quota_scope": "daily",
        }),
    );
}

#[test]
fn retry_after_http_date_is_measured_against_the_date_header() {
    // --now is far from the Date header, in both directions: it must not matter.
    for now in [
        "2030-01-01T00:00:00Z",
        "1000000000",
        "2024-03-05T17:00:00+03:00",
    ] {
        let got = json_of("retry_after_date.txt", &["--now", now]);
        assert_fields(
            "retry_after_date.txt",
            &got,
            &json!({
                "http_status": 503, "throttled": true, "wait_ms": 30_000,
                "source": "retry-after", "scope": "api_key", "clock": "date_header",
            }),
        );
    }
    // Without a Date header, --now is the clock.
    for (now, wait) in [
        ("2024-03-05T14:00:00Z", 30_000),
        ("1709647210", 20_000),
        ("2024-03-05T15:00:00Z", 0),
    ] {
        let got = json_of("retry_after_date_no_date.txt", &["--now", now]);
        assert_eq!(got["wait_ms"], wait, "--now {now}");
        assert_eq!(got["clock"], "local");
    }
}

#[test]
fn vendor_samples_jira_shopify_zendesk() {
    let got = json_of("jira_429.txt", &[]);
    assert_fields(
        "jira_429.txt",
        &got,
        &json!({"throttled": true, "wait_ms": 120_000, "source": "retry-after",
                "scope": "jira-burst-based", "remaining": 0, "reset_ms": 120_000}),
    );
    let got = json_of("shopify_200.txt", &[]);
    assert_fields(
        "shopify_200.txt",
        &got,
        &json!({"throttled": false, "wait_ms": 500, "scope": "api_key", "remaining": 0,
                "limit": 40, "source": "x-shopify-shop-api-call-limit"}),
    );
    let got = json_of("zendesk_200.txt", &[]);
    assert_fields(
        "zendesk_200.txt",
        &got,
        &json!({"wait_ms": 41_000, "scope": "tickets-index", "remaining": 0, "limit": 100}),
    );
    assert_eq!(got["scopes"][0]["window_ms"], 60_000);
}

#[test]
fn crlf_and_lf_files_read_the_same() {
    // The same head both ways, through standard input.
    let lf = b"HTTP/1.1 429 Too Many Requests\nretry-after: 3\nx-ratelimit-remaining: 0\n\n";
    let crlf =
        b"HTTP/1.1 429 Too Many Requests\r\nretry-after: 3\r\nx-ratelimit-remaining: 0\r\n\r\n";
    let a = inspect(&["--json"], Some(lf));
    let b = inspect(&["--json", "-"], Some(crlf));
    assert!(a.status.success() && b.status.success());
    let a: Value = serde_json::from_slice(&a.stdout).unwrap();
    let b: Value = serde_json::from_slice(&b.stdout).unwrap();
    assert_eq!(a, b);
    assert_eq!(a["wait_ms"], 3000);
    // The sample files: one of each kind, on disk.
    let crlf_file = std::fs::read(sample("openai_429.txt")).unwrap();
    let lf_file = std::fs::read(sample("anthropic_200.txt")).unwrap();
    assert!(crlf_file.windows(2).any(|w| w == b"\r\n"));
    assert!(!lf_file.contains(&b'\r'));
}

#[test]
fn nothing_understood_still_exits_zero_with_nulls() {
    let got = json_of("plain_200.txt", &[]);
    assert_fields(
        "plain_200.txt",
        &got,
        &json!({"http_status": 200, "throttled": false, "wait_ms": null, "source": null,
                "scope": null, "remaining": null, "limit": null, "reset_ms": null,
                "quota_exhausted": false, "scopes": []}),
    );
    // The body (with a retry-after look-alike) is ignored.
    let output = inspect(&[sample("plain_200.txt").to_str().unwrap()], None);
    assert!(output.status.success());
    assert!(stdout(&output).contains("say nothing about rate"));
}

#[test]
fn malformed_lines_are_skipped_and_counted() {
    let got = json_of("malformed_lines.txt", &[]);
    assert_fields(
        "malformed_lines.txt",
        &got,
        &json!({"http_status": 429, "wait_ms": 7000, "skipped_lines": 3, "scopes": []}),
    );
    let output = inspect(&[sample("malformed_lines.txt").to_str().unwrap()], None);
    assert!(stdout(&output).contains("Skipped 3 malformed header lines."));
}

#[test]
fn the_explanation_says_what_sluice_will_do_and_why() {
    let output = inspect(
        &[sample("github_secondary_403.txt").to_str().unwrap()],
        None,
    );
    assert!(output.status.success());
    let text = stdout(&output);
    for needle in [
        "HTTP 403 Forbidden: the server refused this call for rate or quota.",
        "retry-after: wait 1m",
        "scope \"core\": 4987 of 5000 left, resets in 1h",
        "No call on scope \"core\" starts for 1m (decided by retry-after).",
        "Quota not exhausted",
        "measured against the response's Date header (Tue, 05 Mar 2024 14:00:00 GMT)",
    ] {
        assert!(text.contains(needle), "{needle:?} not in:\n{text}");
    }
    let output = inspect(&[sample("github_primary_403.txt").to_str().unwrap()], None);
    let text = stdout(&output);
    assert!(text.contains("Scope \"core\" is out of quota"), "{text}");
    let output = inspect(
        &[
            sample("retry_after_date_no_date.txt").to_str().unwrap(),
            "--now",
            "1709647200",
        ],
        None,
    );
    let text = stdout(&output);
    assert!(
        text.contains("measured against the local clock (2024-03-05T14:00:00Z)"),
        "{text}"
    );
}

#[test]
fn no_status_line_exits_2_with_a_clear_message() {
    for input in [
        std::fs::read(sample("garbage.txt")).unwrap(),
        Vec::new(),
        b"retry-after: 5\n\n".to_vec(),
        b"\xff\xfe\x00\x01binary".to_vec(),
    ] {
        let output = inspect(&[], Some(&input));
        assert_eq!(output.status.code(), Some(2), "{input:?}");
        let message = String::from_utf8(output.stderr).unwrap();
        assert!(
            message.contains("status line") && message.contains("HTTP/1.1 429"),
            "{message}"
        );
        assert!(output.stdout.is_empty());
    }
    let output = inspect(&[sample("garbage.txt").to_str().unwrap(), "--json"], None);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("<!DOCTYPE html>"));
}

#[test]
fn bad_invocations_fail_with_a_message() {
    let output = inspect(&["/nonexistent/sluice-inspect-sample"], None);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("/nonexistent/sluice-inspect-sample"));
    let output = inspect(&["--now", "yesterday", "-"], Some(b"HTTP/1.1 200 OK\n\n"));
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("RFC 3339"));
}

/// Deterministic noise (a 64-bit LCG), so the test needs no RNG crate.
fn noise(len: usize, mut seed: u64) -> Vec<u8> {
    (0..len)
        .map(|_| {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (seed >> 56) as u8
        })
        .collect()
}

#[test]
fn hostile_inputs_never_crash_it() {
    let dir = std::env::temp_dir().join(format!("sluice-inspect-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // A 10 MB binary file: no status line.
    let binary = dir.join("binary.bin");
    std::fs::write(&binary, noise(10 << 20, 7)).unwrap();
    let output = inspect(&["--json", binary.to_str().unwrap()], None);
    assert_eq!(output.status.code(), Some(2));
    // A status line, then 10 MB of binary: a head with skipped lines, exit 0.
    let mut tail = b"HTTP/1.1 429 Too Many Requests\r\nretry-after: 1\r\n".to_vec();
    tail.extend(noise(10 << 20, 11));
    let tailed = dir.join("tailed.bin");
    std::fs::write(&tailed, &tail).unwrap();
    for args in [vec!["--json"], vec![]] {
        let mut args = args;
        args.push(tailed.to_str().unwrap());
        let output = inspect(&args, None);
        assert_eq!(output.status.code(), Some(0), "{args:?}");
    }
    // Invalid UTF-8 in the reason phrase and in values; a huge header.
    let mut odd = b"HTTP/1.1 429 Tr\xffop Many\nx-weird: caf\xe9\nretry-after: ".to_vec();
    odd.extend(std::iter::repeat_n(b'9', 3 << 20));
    odd.extend_from_slice(b"\nx-ratelimit-remaining: 0\n\n");
    let output = inspect(&["--json"], Some(&odd));
    assert_eq!(output.status.code(), Some(0));
    let got: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(got["throttled"], true);
    let output = inspect(&[], Some(&odd));
    assert_eq!(output.status.code(), Some(0));
    assert!(stdout(&output).contains("Read only the first 1024 KiB"));
    std::fs::remove_dir_all(&dir).unwrap();
}
