//! Restarting `sluice serve` on its port, as an operator does: the old
//! process, told to stop, closes its port at once and finishes its calls
//! in flight while the new one binds the same port and serves; a new one
//! started while the old one still listens is refused the port, instead
//! of sharing it (`SO_REUSEPORT`) and spending the credentials' limits a
//! second time.

use crate::support::sluice;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sluice_testkit::{Fault, SluiceProcess, Upstream, exited_within, free_port, serve_args};

/// Two workers: each has its own socket on the port.
fn config(dir: &Path, upstream: &Upstream) -> PathBuf {
    let path = dir.join("sluice.toml");
    std::fs::write(
        &path,
        format!(
            "[server]\nworkers = 2\n\n[credentials.api]\nbase_url = \"{}\"\nrate = \"100/1s\"\n",
            upstream.url()
        ),
    )
    .unwrap();
    path
}

/// True once nothing listens on `listen`: a plain bind takes it (and
/// gives it back at once).
fn port_free(listen: &str) -> bool {
    std::net::TcpListener::bind(listen).is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_takes_the_port_while_the_old_process_finishes_its_calls() {
    // Every answer is written a byte each 30 ms: about 3 s in flight.
    let upstream = Upstream::spawn(Fault::Trickle {
        per_byte: Duration::from_millis(30),
    })
    .await;
    let dir = std::env::temp_dir().join(format!("sluice-restart-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = config(&dir, &upstream);
    let listen = format!("127.0.0.1:{}", free_port());
    let args = serve_args(&config, &listen, &[]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut old = SluiceProcess::start(sluice(), &args, &[("RUST_LOG", "warn")]);

    // Started while the old one listens: refused, naming the address.
    let mut second = Command::new(sluice())
        .args(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let Some(status) = exited_within(&mut second, Duration::from_secs(20)) else {
        let _ = second.kill();
        panic!("a second sidecar started on the port the first one serves");
    };
    assert!(!status.success());
    let stderr = std::io::read_to_string(second.stderr.take().unwrap()).unwrap();
    assert!(
        stderr.contains(&format!("cannot listen on {listen}")) && stderr.contains("in use"),
        "{stderr}"
    );

    // A call in flight on the old process.
    let in_flight = tokio::spawn({
        let url = format!("{}/proxy/api/slow", old.url);
        async move {
            let response = reqwest::get(url).await.unwrap();
            let status = response.status();
            let outcome = response.headers()["x-sluice-outcome"].clone();
            let body: serde_json::Value =
                serde_json::from_slice(&response.bytes().await.unwrap()).unwrap();
            (status, outcome, body)
        }
    });
    let until = Instant::now() + Duration::from_secs(10);
    while upstream.requests() == 0 {
        assert!(
            Instant::now() < until,
            "the call never reached the upstream"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // Told to stop, the old one gives the port up at once...
    old.terminate();
    let until = Instant::now() + Duration::from_secs(10);
    while !port_free(&listen) {
        assert!(Instant::now() < until, "the old process kept its port");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // ...and the new one takes it and serves while the old one finishes.
    let new = SluiceProcess::start(sluice(), &args, &[("RUST_LOG", "warn")]);
    assert!(
        old.exited_within(Duration::ZERO).is_none(),
        "the old process is still finishing its call"
    );
    let response = reqwest::Client::new()
        .get(format!("{}/proxy/api/fresh", new.url))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-sluice-outcome"], "ok");
    response.bytes().await.unwrap();

    let (status, outcome, body) = in_flight.await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(outcome, "ok");
    assert_eq!(body["path"], "/slow");
    let exit = old
        .exited_within(Duration::from_secs(10))
        .expect("the old process exits once its call is answered");
    assert!(exit.success(), "{exit}");
    drop(new);
    let _ = std::fs::remove_dir_all(dir);
}
