//! Redis over TLS with an ACL user: a real `redis-server --tls-port` with
//! certificates made at test time (the default user off), single node and
//! Cluster. sluice shares a budget through it, and a wrong CA or a wrong
//! password is refused at connect with an error that names the cause and
//! never the password.

use crate::support;

use std::time::Duration;

use sluice_redis::{Error, Mode, RedisBudget, RedisConfig};
use sluice_testkit::{TLS_PASSWORD, Tls};
use support::*;
use tokio::time::Instant;

const R: usize = 40;

/// The command timeout here: long enough that no command times out on a
/// loaded two-core machine (TLS through an unoptimised test build of the
/// crypto), so that the test measures sharing over TLS, not the fallback.
const TIMEOUT: Duration = Duration::from_millis(500);

/// Two budgets (two processes' views) drive one 40/1s credential for 2 s
/// through `config`; every start fits the shared window.
async fn shares_one_budget(config: impl Fn() -> RedisConfig) {
    let a = budget(config()).await;
    let b = budget(config()).await;
    let server = fake(10_000).await;
    let until = Instant::now() + Duration::from_secs(2);
    let runs: Vec<_> = [&a, &b]
        .into_iter()
        .enumerate()
        .map(|(i, budget)| {
            let gate = gate_with_margin(&server, "40/1s", Some(budget.clone()), 16, i as u64);
            tokio::spawn(drive(
                gate,
                ["a", "b"][i],
                8,
                until,
                Duration::from_millis(200),
            ))
        })
        .collect();
    for run in runs {
        run.await.unwrap();
    }
    let starts = starts(&server);
    let busiest = max_in_window(&starts, 1_000.0);
    let statuses = [a.status(), b.status()];
    assert!(
        busiest <= R,
        "busiest window {busiest} > {R}: {:?}",
        statuses
            .iter()
            .map(|s| (s.credentials[0].decisions, s.errors, s.last_error.clone()))
            .collect::<Vec<_>>()
    );
    assert!(starts.len() >= R, "{} starts", starts.len());
    for status in [a.status(), b.status()] {
        let credential = &status.credentials[0];
        assert_eq!(credential.mode, Mode::Shared, "{status:?}");
        assert!(credential.decisions.shared > 0, "{status:?}");
        assert_eq!(credential.processes_seen, 2, "{status:?}");
    }
}

/// What `connect` says for a config Redis must refuse.
async fn refused(config: RedisConfig) -> String {
    let started = Instant::now();
    let error = RedisBudget::connect(config).await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "refused within the connect timeout"
    );
    assert!(matches!(error, Error::Refused(_)), "{error:?}");
    let text = format!("{error} {error:?}");
    assert!(!text.contains(TLS_PASSWORD), "{text}");
    assert!(!text.contains("wrong-pw-4417"), "{text}");
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_is_shared_over_tls_with_an_acl_user() {
    let _turn = crate::support::module_turn(module_path!());
    let tls = Tls::generate();
    let redis = RedisServer::start_tls(tls.clone());
    let ca = tls.ca_file();
    shares_one_budget(|| {
        RedisConfig::single(redis.tls_url())
            .tls_ca_file(&ca)
            .timeout(TIMEOUT)
    })
    .await;
    // The scripts ran on the TLS port as the ACL user.
    assert!(redis.round_trips() > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_ca_or_password_is_refused_without_printing_the_secret() {
    let _turn = crate::support::module_turn(module_path!());
    let tls = Tls::generate();
    let redis = RedisServer::start_tls(tls.clone());

    let text = refused(RedisConfig::single(redis.tls_url()).tls_ca_file(tls.other_ca_file())).await;
    assert!(text.contains("TLS"), "{text}");
    assert!(text.contains("certificate"), "{text}");

    // Certificate checks are on by default: the platform's roots do not
    // know the test CA.
    let text = refused(RedisConfig::single(redis.tls_url())).await;
    assert!(text.contains("TLS"), "{text}");

    let text = refused(
        RedisConfig::single(redis.tls_url_with("wrong-pw-4417")).tls_ca_file(tls.ca_file()),
    )
    .await;
    assert!(text.contains("password"), "{text}");

    // The default user is off: no password at all is refused too.
    let port = redis.tls_port.unwrap();
    let text = refused(
        RedisConfig::single(format!("rediss://127.0.0.1:{port}")).tls_ca_file(tls.ca_file()),
    )
    .await;
    assert!(text.contains("refused"), "{text}");

    // A CA file that cannot be read is a config error naming the field.
    let error = RedisBudget::connect(
        RedisConfig::single(redis.tls_url()).tls_ca_file("/nonexistent/ca.pem"),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&error, Error::Config { field, .. } if field == "redis.tls_ca_file"),
        "{error:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_is_shared_over_a_tls_cluster() {
    let _turn = crate::support::module_turn(module_path!());
    let tls = Tls::generate();
    let cluster = RedisCluster::start_with(0, Some(tls.clone()));
    let ca = tls.ca_file();
    shares_one_budget(|| {
        RedisConfig::cluster(cluster.tls_urls())
            .tls_ca_file(&ca)
            .timeout(TIMEOUT)
    })
    .await;
    assert!(cluster.round_trips() > 0);

    let seeds: Vec<String> = cluster
        .nodes
        .iter()
        .map(|n| n.tls_url_with("wrong-pw-4417"))
        .collect();
    let text = refused(RedisConfig::cluster(seeds).tls_ca_file(tls.ca_file())).await;
    assert!(text.contains("password"), "{text}");
    let text =
        refused(RedisConfig::cluster(cluster.tls_urls()).tls_ca_file(tls.other_ca_file())).await;
    assert!(text.contains("TLS"), "{text}");
}
