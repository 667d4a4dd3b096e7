//! `sluice serve` in front of an `https://` upstream, as every real API is:
//! the certificate verified against the roots the platform verifier reads
//! (here `SSL_CERT_FILE`, set for the sidecar's process only), one
//! connection kept across calls, and nothing sent to a server whose
//! certificate no trusted root signed.

use std::path::Path;

use sluice_testkit::{Fault, SluiceProcess, Tls, Upstream};

/// A sidecar whose one credential is the upstream, trusting only `roots`.
fn sidecar(dir: &Path, upstream: &Upstream, roots: &Path) -> SluiceProcess {
    let config = dir.join("sluice.toml");
    std::fs::write(
        &config,
        // One worker: a client's requests may come on more than one
        // connection, and each worker keeps its own upstream connections.
        format!(
            "[server]\nworkers = 1\n\n[credentials.api]\nbase_url = \"{}\"\nrate = \"100/1s\"\n",
            upstream.url()
        ),
    )
    .unwrap();
    let binary = Path::new(env!("CARGO_BIN_EXE_sluice"));
    let roots = roots.to_string_lossy();
    let env = [("RUST_LOG", "warn"), ("SSL_CERT_FILE", &*roots)];
    SluiceProcess::serve(binary, &config, &[], &env)
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("sluice-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_reach_an_https_upstream_on_one_kept_connection() {
    let tls = Tls::generate();
    let upstream = Upstream::spawn_tls(Fault::Ok, &tls).await;
    let dir = temp_dir("tls-trusted");
    let mut sidecar = sidecar(&dir, &upstream, &tls.ca_file());
    let client = reqwest::Client::new();
    for i in 0..5u64 {
        let response = client
            .get(format!("{}/proxy/api/items/{i}", sidecar.url))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()["x-sluice-outcome"], "ok");
        let body: serde_json::Value =
            serde_json::from_slice(&response.bytes().await.unwrap()).unwrap();
        assert_eq!(body["path"], format!("/items/{i}"));
    }
    assert_eq!(upstream.requests(), 5);
    assert_eq!(
        upstream.connections(),
        1,
        "five calls one after another, one TLS connection"
    );
    sidecar.stop();
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_certificate_no_trusted_root_signed_gets_nothing() {
    let tls = Tls::generate();
    let upstream = Upstream::spawn_tls(Fault::Ok, &tls).await;
    let dir = temp_dir("tls-untrusted");
    let mut sidecar = sidecar(&dir, &upstream, &tls.other_ca_file());
    let response = reqwest::get(format!("{}/proxy/api/secret", sidecar.url))
        .await
        .unwrap();
    assert_eq!(response.status(), 502);
    assert_eq!(response.headers()["x-sluice-outcome"], "error");
    let outcome: serde_json::Value =
        serde_json::from_slice(&response.bytes().await.unwrap()).unwrap();
    let message = outcome["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("cannot connect to the upstream") && message.contains("certificate"),
        "{outcome}"
    );
    assert!(upstream.connections() >= 1, "it was tried");
    assert_eq!(upstream.requests(), 0, "nothing sent");
    sidecar.stop();
    let _ = std::fs::remove_dir_all(dir);
}
