//! `docs/grafana/sluice.json` cannot drift from the code (issue 20): every
//! metric its queries name is in the sidecar's `/metrics` output, after a
//! run that gives every family a sample: outcomes, waits, sheds, retries,
//! coalesced reads, a spent quota, shadow decisions and a shared budget.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use http::{HeaderValue, StatusCode, header::RETRY_AFTER};
use serde_json::{Value, json};
use sluice_fake::{Config, FakeApi, FakeServer, HeaderStyle, Latency, Limits, Reply, Rule};
use sluice_server::{AppState, SidecarConfig};
use sluice_testkit::RedisServer;

const DASHBOARD: &str = "../../docs/grafana/sluice.json";

/// Every string under an `expr`, `query` or `definition` key.
fn queries(value: &Value, found: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, value) in map {
                match (key.as_str(), value) {
                    ("expr" | "query" | "definition", Value::String(text)) => {
                        found.push(text.clone())
                    }
                    _ => queries(value, found),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|item| queries(item, found)),
        _ => {}
    }
}

/// The `sluice_*` names in a PromQL expression.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let bytes = expr.as_bytes();
    let mut i = 0;
    while let Some(offset) = expr[i..].find("sluice_") {
        let start = i + offset;
        let boundary =
            start == 0 || !(bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_');
        let end = expr[start..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map_or(expr.len(), |n| start + n);
        if boundary {
            names.insert(expr[start..end].to_owned());
        }
        i = end;
    }
    names
}

/// The sample names in a Prometheus text exposition.
fn exposed(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .filter_map(|line| line.split(['{', ' ']).next())
        .map(str::to_owned)
        .collect()
}

fn toml(fake: &str, redis: &str) -> String {
    let mut toml = format!("[shared]\nredis_url = \"{redis}\"\n");
    for (name, limits) in [
        // Two per second, one at a time, a queue of one: waits and sheds.
        ("support", "rate = \"2/1s\"\nmax_in_flight = 1\nqueue = 1"),
        // Its first answer is a 429 with a wait: a retry.
        ("flaky", "rate = \"50/1s\""),
        // Its first answer asks for an hour: a spent quota.
        ("daily", "rate = \"50/1s\""),
        ("trial", "rate = \"1/1s\"\nenforce = false"),
        ("team", "rate = \"50/1s\"\nshared = true"),
    ] {
        toml.push_str(&format!(
            "[credentials.{name}]\nbase_url = \"{fake}\"\n{limits}\n\
             [tools.{name}_read]\ncredential = \"{name}\"\npath = \"/{name}/items?q={{q}}\"\n"
        ));
    }
    toml
}

async fn turn(url: &str, tool: &str, queries: &[&str]) -> Vec<Value> {
    let calls: Vec<Value> = queries
        .iter()
        .enumerate()
        .map(|(i, q)| json!({"id": format!("c{i}"), "tool": tool, "args": {"q": q}}))
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
    answer["results"].as_array().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_dashboard_queries_is_exposed() {
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(DASHBOARD)).unwrap(),
    )
    .unwrap();
    let mut found = Vec::new();
    queries(&dashboard, &mut found);
    let named: BTreeSet<String> = found.iter().flat_map(|q| metric_names(q)).collect();
    assert!(
        named.len() >= 15,
        "the dashboard covers the metrics: {named:?}"
    );

    let redis = RedisServer::start();
    let fake = FakeServer::spawn(
        FakeApi::new(
            Config::new(Limits::new(1_000, Duration::from_secs(1)))
                .with_latency(Latency::Fixed(Duration::from_millis(30)))
                .with_headers(HeaderStyle::Ietf),
        )
        .unwrap(),
    )
    .await
    .unwrap();
    let throttled = |seconds: &'static str| {
        Reply::new(StatusCode::TOO_MANY_REQUESTS)
            .header(RETRY_AFTER, HeaderValue::from_static(seconds))
    };
    fake.api()
        .script(Rule::path_prefix("/flaky/", throttled("0.1")));
    fake.api()
        .script(Rule::path_prefix("/daily/", throttled("3600")));
    let config = SidecarConfig::from_toml(&toml(&fake.url(), &redis.url()), |_| None).unwrap();
    let state = AppState::connect(config, Some(3)).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(sluice_server::serve(
        listener,
        state,
        std::future::pending(),
    ));

    turn(&url, "support_read", &["a", "b", "c", "a"]).await;
    turn(&url, "flaky_read", &["a"]).await;
    turn(&url, "daily_read", &["a"]).await;
    turn(&url, "trial_read", &["a", "b", "c"]).await;
    turn(&url, "team_read", &["a"]).await;

    let text = reqwest::get(format!("{url}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let exposed = exposed(&text);
    let missing: Vec<&String> = named
        .iter()
        .filter(|name| !exposed.contains(*name))
        .collect();
    assert!(
        missing.is_empty(),
        "queried but not exposed: {missing:?}\n{text}"
    );
}

#[test]
fn names_are_read_from_promql() {
    assert_eq!(
        metric_names(
            r#"histogram_quantile(0.95, sum by (le) (rate(sluice_wait_seconds_bucket{kind="rate"}[5m]))) / x_sluice_no"#
        ),
        BTreeSet::from(["sluice_wait_seconds_bucket".to_owned()])
    );
}
