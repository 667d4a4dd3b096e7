//! `sluice demo` as a user runs it: the incident shows with the naive
//! harness and not with sluice. Asserts on the counts the fake API recorded
//! (request counts, statuses), never on timing.

use std::process::Command;

fn demo(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("demo")
        .args(args)
        .output()
        .expect("the sluice binary runs")
}

#[test]
fn the_incident_shows_naive_and_not_with_sluice() {
    let chart = std::env::temp_dir().join(format!("sluice-demo-{}.svg", std::process::id()));
    let output = demo(&[
        "--seconds",
        "4",
        "--seed",
        "3",
        "--json",
        "--chart",
        chart.to_str().unwrap(),
    ]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["seconds"], 4);
    let run = |name: &str| {
        report["runs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|run| run["harness"] == name)
            .unwrap()
            .clone()
    };
    let (naive, sluice) = (run("naive"), run("sluice"));
    let number = |run: &serde_json::Value, field: &str| {
        run[field]
            .as_f64()
            .unwrap_or_else(|| panic!("{field} in {run}"))
    };

    // Both runs did real work against the same sync job.
    for run in [&naive, &sluice] {
        assert!(number(run, "agent_calls") >= 8.0, "{run}");
        assert!(number(run, "victim_requests") >= 12.0, "{run}");
    }
    // The naive harness shows the incident: the production job fails and
    // the agent sends more requests than the model made calls.
    assert!(number(&naive, "victim_failures") >= 1.0, "{naive}");
    assert!(number(&naive, "upstream_throttled") >= 1.0, "{naive}");
    assert!(number(&naive, "amplification") > 1.15, "{naive}");
    // sluice does not: no victim failures, at most a handful of 429s,
    // about one request per call.
    assert_eq!(number(&sluice, "victim_failures"), 0.0, "{sluice}");
    assert!(number(&sluice, "upstream_throttled") <= 3.0, "{sluice}");
    assert!(number(&sluice, "amplification") <= 1.1, "{sluice}");
    assert!(
        number(&sluice, "max_in_flight") <= 3.0,
        "Little's law cap: {sluice}"
    );

    // The second phase, "twelve calls, four now" (issue 50): one turn of
    // twelve calls, more than sluice takes at once. sluice defers the rest
    // with waits that grow with position, the model re-issues each after
    // its wait, and all twelve are answered, one request each; the naive
    // harness turns its 429s into "tool failed" and a rephrase storm.
    let twelve = |name: &str| {
        report["twelve_calls"]
            .as_array()
            .unwrap()
            .iter()
            .find(|run| run["harness"] == name)
            .unwrap()
            .clone()
    };
    let (naive, sluice) = (twelve("naive"), twelve("sluice"));
    assert!(number(&sluice, "agent_rate_limited") >= 4.0, "{sluice}");
    assert_eq!(number(&sluice, "agent_ok"), 12.0, "{sluice}");
    assert_eq!(number(&sluice, "upstream_requests"), 12.0, "{sluice}");
    assert_eq!(number(&sluice, "upstream_throttled"), 0.0, "{sluice}");
    let waits: Vec<u64> = sluice["deferral_waits_ms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_u64().unwrap())
        .collect();
    let distinct: std::collections::BTreeSet<u64> = waits.iter().copied().collect();
    assert!(
        distinct.len() * 2 >= waits.len(),
        "staggered waits: {waits:?}"
    );
    let (reissued, again) = (
        number(&sluice, "reissued"),
        number(&sluice, "reissued_deferred_again"),
    );
    assert!(reissued >= 4.0, "{sluice}");
    assert!(
        again * 6.0 <= reissued,
        "{again} of {reissued} deferred again"
    );
    assert!(number(&naive, "upstream_throttled") >= 1.0, "{naive}");
    assert!(
        number(&naive, "agent_calls") > 12.0,
        "the rephrase storm: {naive}"
    );

    let svg = std::fs::read_to_string(&chart).unwrap();
    let _ = std::fs::remove_file(&chart);
    assert!(svg.starts_with("<svg"), "an SVG document");
    for label in [
        "naive harness",
        "sluice harness",
        "twelve calls, four now",
        "the key&apos;s limit",
        "agent 429",
        "sync job ok",
    ] {
        assert!(
            svg.contains(label) || svg.contains(&label.replace("&apos;", "'")),
            "the chart shows {label:?}"
        );
    }
}

#[test]
fn the_table_is_the_default_output() {
    let output = demo(&["--seconds", "1", "--seed", "5"]);
    assert!(output.status.success());
    let table = String::from_utf8(output.stdout).unwrap();
    for row in [
        "upstream requests (agent)",
        "victim failures (sync job)",
        "amplification",
        "p95 call latency",
        "Verdict:",
        "Twelve calls, four now",
        "re-issued and deferred again",
    ] {
        assert!(table.contains(row), "{row:?} in\n{table}");
    }
}

#[test]
fn bad_flags_exit_2_naming_the_flag() {
    let output = demo(&["--seconds", "0"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("--seconds"));
}
