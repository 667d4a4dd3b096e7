//! Servers the benchmarks run as child processes: started, their address
//! read from their first line (or a known port), killed when dropped.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};

/// A child process serving HTTP at `url`.
pub(crate) struct Server {
    child: Child,
    pub(crate) url: String,
}

impl Server {
    /// The child's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The fake API with a limit no benchmark reaches and no rate-limit
    /// headers: the upstream whose own cost is measured, not its limit.
    pub(crate) fn unlimited_fake() -> anyhow::Result<Self> {
        Server::unlimited_fake_with(sluice_fake::HeaderStyle::None)
    }

    /// [`Server::unlimited_fake`], answering with `headers`' rate-limit fields.
    pub(crate) fn unlimited_fake_with(headers: sluice_fake::HeaderStyle) -> anyhow::Result<Self> {
        Server::sluice(&[
            "fake-api",
            "--listen",
            "127.0.0.1:0",
            "--limit",
            "1000000/1s",
            "--headers",
            headers.as_str(),
        ])
    }

    /// Runs this very binary with `args`; it prints `listening on http://ADDR` first.
    pub(crate) fn sluice(args: &[&str]) -> anyhow::Result<Self> {
        Server::sluice_with_env(args, &[])
    }

    /// [`Server::sluice`] with these environment variables set too.
    pub(crate) fn sluice_with_env(args: &[&str], env: &[(&str, &str)]) -> anyhow::Result<Self> {
        let binary = std::env::current_exe().context("finding the sluice binary")?;
        let mut child = Command::new(binary)
            .args(args)
            .envs(env.iter().copied())
            .env("RUST_LOG", "error")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting sluice {}", args.join(" ")))?;
        let stdout = child.stdout.take().context("no stdout")?;
        let (sender, receiver) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let _ = sender.send(lines.next().and_then(Result::ok));
            // Keep draining so the child never blocks on a full pipe.
            for _ in lines {}
        });
        let line = receiver
            .recv_timeout(Duration::from_secs(30))
            .ok()
            .flatten();
        match line
            .as_deref()
            .and_then(|line| line.strip_prefix("listening on "))
        {
            Some(url) => Ok(Server {
                url: url.to_owned(),
                child,
            }),
            None => {
                let _ = child.kill();
                bail!("sluice {} did not start: {line:?}", args.join(" "))
            }
        }
    }

    /// Runs `program args` and waits until `url` answers HTTP.
    pub(crate) async fn other(program: &str, args: &[&str], url: String) -> anyhow::Result<Self> {
        let child = quiet(program, args)?;
        let server = Server { child, url };
        let client = reqwest::Client::new();
        for _ in 0..100 {
            if client.get(&server.url).send().await.is_ok() {
                return Ok(server);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        bail!("{program} never answered at {}", server.url)
    }

    /// Runs `program args` and waits until it accepts TCP connections on `port`.
    pub(crate) async fn tcp(program: &str, args: &[&str], port: u16) -> anyhow::Result<Self> {
        let child = quiet(program, args)?;
        let server = Server {
            child,
            url: format!("127.0.0.1:{port}"),
        };
        for _ in 0..100 {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                return Ok(server);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        bail!("{program} never listened on port {port}")
    }
}

/// `program args` with no input and its output discarded.
fn quiet(program: &str, args: &[&str]) -> anyhow::Result<Child> {
    Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {program} (is it installed?)"))
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
