//! `sluice serve` in front of an `https://` upstream, as every real API is:
//! the certificate verified against the roots the platform verifier reads
//! (here `SSL_CERT_FILE`, set for the sidecar's process only), one
//! connection kept across calls, and nothing sent to a server whose
//! certificate no trusted root signed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use sluice_testkit::{SluiceProcess, Tls};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A TLS server answering every request `200` with a small JSON body,
/// keeping each connection alive; counts what it accepted.
struct HttpsUpstream {
    port: u16,
    /// TCP connections accepted (a refused handshake included).
    connections: Arc<AtomicU64>,
    /// Requests read over TLS.
    requests: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for HttpsUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn https_upstream(tls: &Tls) -> HttpsUpstream {
    let acceptor = tls.acceptor();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let connections = Arc::new(AtomicU64::new(0));
    let requests = Arc::new(AtomicU64::new(0));
    let task = tokio::spawn({
        let (connections, requests) = (connections.clone(), requests.clone());
        async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                connections.fetch_add(1, Ordering::SeqCst);
                let (acceptor, requests) = (acceptor.clone(), requests.clone());
                tokio::spawn(async move {
                    let Ok(mut stream) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let mut buffer = Vec::new();
                    let mut chunk = [0u8; 4096];
                    loop {
                        while !buffer.windows(4).any(|w| w == b"\r\n\r\n") {
                            match stream.read(&mut chunk).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => buffer.extend_from_slice(&chunk[..n]),
                            }
                        }
                        let end = buffer.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
                        buffer.drain(..end + 4);
                        let n = requests.fetch_add(1, Ordering::SeqCst);
                        let body = format!("{{\"tls\":true,\"n\":{n}}}");
                        let answer = format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        if stream.write_all(answer.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        }
    });
    HttpsUpstream {
        port,
        connections,
        requests,
        task,
    }
}

/// A sidecar whose one credential is the upstream, trusting only `roots`.
fn sidecar(dir: &Path, port: u16, roots: &Path) -> SluiceProcess {
    let config = dir.join("sluice.toml");
    std::fs::write(
        &config,
        // One worker: a client's requests may come on more than one
        // connection, and each worker keeps its own upstream connections.
        format!(
            "[server]\nworkers = 1\n\n[credentials.api]\nbase_url = \"https://localhost:{port}\"\nrate = \"100/1s\"\n"
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
    let upstream = https_upstream(&tls).await;
    let dir = temp_dir("tls-trusted");
    let mut sidecar = sidecar(&dir, upstream.port, &tls.ca_file());
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
        assert_eq!(body, serde_json::json!({"tls": true, "n": i}));
    }
    assert_eq!(upstream.requests.load(Ordering::SeqCst), 5);
    assert_eq!(
        upstream.connections.load(Ordering::SeqCst),
        1,
        "five calls one after another, one TLS connection"
    );
    sidecar.stop();
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_certificate_no_trusted_root_signed_gets_nothing() {
    let tls = Tls::generate();
    let upstream = https_upstream(&tls).await;
    let dir = temp_dir("tls-untrusted");
    let mut sidecar = sidecar(&dir, upstream.port, &tls.other_ca_file());
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
    assert!(
        upstream.connections.load(Ordering::SeqCst) >= 1,
        "it was tried"
    );
    assert_eq!(upstream.requests.load(Ordering::SeqCst), 0, "nothing sent");
    sidecar.stop();
    let _ = std::fs::remove_dir_all(dir);
}
