//! `sluice bench scale` as a user runs it, tiny: two process counts on one
//! key and a one-master Cluster, half a second per measurement. Asserts the
//! JSON's shape, that sluice's busiest second holds the limit (plus one:
//! the window's edge on a loaded machine), the chart, and that a bad list
//! names its flag. Bounded in time: about 10 s of measurements.

use std::process::Command;
use std::time::{Duration, Instant};

fn scale(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["bench", "scale"])
        .args(args)
        .output()
        .expect("the sluice binary runs")
}

#[test]
fn the_scale_curve_measures_every_limiter_on_every_row() {
    sluice_testkit::require_program("redis-server", "redis-server");
    let chart = std::env::temp_dir().join(format!("sluice-scale-{}.svg", std::process::id()));
    let began = Instant::now();
    let output = scale(&[
        "--processes",
        "1,2",
        "--masters",
        "1",
        "--credentials",
        "10",
        "--cluster-processes",
        "2",
        "--seconds",
        "0.5",
        "--callers",
        "4",
        "--limit",
        "100",
        "--credential-limit",
        "10",
        "--json",
        "--chart",
        chart.to_str().unwrap(),
    ]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        began.elapsed() < Duration::from_secs(30),
        "{:?}",
        began.elapsed()
    );
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["seconds"], 0.5);
    assert_eq!(report["max_lease"], 32);
    let rows = report["rows"].as_array().unwrap();
    let setups: Vec<(u64, u64, u64)> = rows
        .iter()
        .map(|r| {
            (
                r["masters"].as_u64().unwrap(),
                r["processes"].as_u64().unwrap(),
                r["keys"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(setups, [(0, 1, 1), (0, 2, 1), (1, 2, 10)]);
    for row in rows {
        let limiters = row["limiters"].as_array().unwrap();
        assert_eq!(limiters.len(), 3, "{row}");
        for m in limiters {
            for field in [
                "decisions_per_second",
                "decisions_per_second_per_process",
                "round_trips_per_decision",
                "admitted_per_second",
                "round_trips_per_admitted",
            ] {
                assert!(m[field].as_f64().unwrap() >= 0.0, "{field}: {m}");
            }
            assert!(m["decisions_per_second"].as_f64().unwrap() > 0.0, "{m}");
            assert_eq!(m["limit"], row["limit"]);
        }
        let sluice = limiters
            .iter()
            .find(|m| m["limiter"].as_str().unwrap().starts_with("sluice"))
            .unwrap();
        let (busiest, limit) = (
            sluice["busiest_window"].as_u64().unwrap(),
            sluice["limit"].as_u64().unwrap(),
        );
        assert!(
            busiest <= limit + 1,
            "sluice: {busiest} in a second, limit {limit}: {row}"
        );
        assert!(busiest > 0, "{row}");
    }
    let svg = std::fs::read_to_string(&chart).unwrap();
    let _ = std::fs::remove_file(&chart);
    assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(80)]);
    assert!(svg.contains("fixed window"));
}

#[test]
fn a_bad_list_names_its_flag() {
    let output = scale(&["--processes", "1,0"]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--processes") && stderr.contains("`0`"),
        "{stderr}"
    );
    let output = scale(&["--seconds", "0"]);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("--seconds"));
}
