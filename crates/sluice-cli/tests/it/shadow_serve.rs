//! `sluice serve --shadow` on a shared key (issue 20): the shadow process
//! sends every call at once and spends none of the budget in Redis, so an
//! enforcing process on the same key still has all of it. Asserted on the
//! fake API's records and on the commands Redis served, against a real
//! redis-server on a free port.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use sluice_fake::{Config, FakeApi, FakeServer, Latency, Limits};
use sluice_testkit::{RedisServer, SluiceProcess};

use crate::support::{sluice, starts, status_of};

/// The key's limit, per second.
const R: usize = 10;

/// Two credentials alike: `api`, which the shadow process spends, and
/// `control`, which nobody touches before the enforcing process does.
fn config(dir: &Path, fake: &str, redis: &str) -> PathBuf {
    let mut toml = format!("[shared]\nredis_url = \"{redis}\"\n");
    for credential in ["api", "control"] {
        toml.push_str(&format!(
            r#"
[credentials.{credential}]
base_url = "{fake}"
rate = "{R}/1s"
max_in_flight = 64
queue = 64
shared = true

[tools.get_{credential}]
credential = "{credential}"
method = "GET"
path = "/{credential}/item?n={{n}}"
"#
        ));
    }
    let path = dir.join("sluice.toml");
    std::fs::write(&path, toml).unwrap();
    path
}

fn serve(config: &Path, shadow: bool) -> SluiceProcess {
    let extra: &[&str] = if shadow { &["--shadow"] } else { &[] };
    SluiceProcess::serve(sluice(), config, extra, &[("RUST_LOG", "warn")])
}

/// One turn of `n` distinct calls on `credential`; the outcomes' statuses.
async fn burst(url: &str, credential: &str, tag: &str, n: usize) -> Vec<String> {
    let tool = format!("get_{credential}");
    let calls: Vec<Value> = (0..n)
        .map(|i| json!({"id": format!("c{i}"), "tool": tool, "args": {"n": format!("{tag}-{i}")}}))
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
    answer["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shadow_process_spends_no_shared_budget() {
    let redis = RedisServer::start();
    let dir = std::env::temp_dir().join(format!("sluice-shadow-serve-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // The fake allows far more than R, so it records what the processes sent.
    let fake = FakeServer::spawn(
        FakeApi::new(
            Config::new(Limits::new(1_000, Duration::from_secs(1)))
                .with_latency(Latency::Fixed(Duration::from_millis(20))),
        )
        .unwrap(),
    )
    .await
    .unwrap();
    let config = config(&dir, &fake.url(), &redis.url());
    let shadow = serve(&config, true);
    let enforcing = serve(&config, false);

    // Three windows' worth from the shadow process: sent at once, all of it.
    redis.reset_stats();
    let answers = burst(&shadow.url, "api", "shadow", 3 * R).await;
    assert!(answers.iter().all(|s| s == "ok"), "{answers:?}");
    let sent = starts(&fake, &["shadow"]);
    assert_eq!(sent.len(), 3 * R);
    assert!(sent[3 * R - 1] - sent[0] < 500.0, "at once: {sent:?}");
    assert_eq!(redis.round_trips(), 0, "no reservation went to Redis");
    let keys: Vec<String> = redis.command(&["KEYS", "sluice:{api}:*"]);
    assert!(keys.is_empty(), "nothing recorded for the key: {keys:?}");

    // The enforcing process finds the key as untouched as one nobody
    // used: as many answers, and most of a window started at once. Had the
    // shadow process spent its 3R, the window would be full for a second
    // and the next one too.
    let mut seen = Vec::new();
    for (credential, tag) in [("api", "enforced"), ("control", "control")] {
        let answers = burst(&enforcing.url, credential, tag, R).await;
        let ok = answers.iter().filter(|s| *s == "ok").count();
        let sent = starts(&fake, &[tag]);
        let early = sent.iter().filter(|&&t| t - sent[0] < 500.0).count();
        seen.push((ok, early));
    }
    // The leases make the exact split vary a little from run to run.
    let ((ok, early), (control_ok, _)) = (seen[0], seen[1]);
    assert!(
        ok + 1 >= control_ok,
        "the shadow process spent nothing: {seen:?}"
    );
    assert!(early >= R / 2, "the window was free: {seen:?}");
    assert!(
        redis.round_trips() > 0,
        "the enforcing process spends in Redis"
    );

    let status = status_of(&shadow.url).await;
    let credential = &status["credentials"][0];
    assert_eq!(credential["mode"], "shadow");
    assert_eq!(credential["shared"], true);
    // Modelled locally on its own traffic: 10 at once, 10 a window later,
    // the last 10 past the inline wait.
    let shadow_counts = &credential["scopes"][0]["shadow"];
    assert_eq!(shadow_counts["would_wait"], R, "{shadow_counts}");
    assert_eq!(shadow_counts["would_defer"], R, "{shadow_counts}");
    let status = status_of(&enforcing.url).await;
    assert_eq!(status["credentials"][0]["mode"], "enforce");
    let _ = std::fs::remove_dir_all(&dir);
}
