//! A `sluice` subcommand run as a process: started, its address read from
//! its first line, killed on drop.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

/// A running `sluice` process that announced `listening on http://ADDR`.
pub struct SluiceProcess {
    child: Child,
    /// `http://ADDR`, from its first line.
    pub url: String,
    stderr: Option<std::thread::JoinHandle<String>>,
}

impl SluiceProcess {
    /// Runs `binary args...` with `env` added, and waits for its first line.
    pub fn start(binary: &Path, args: &[&str], env: &[(&str, &str)]) -> Self {
        let mut command = Command::new(binary);
        command
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (name, value) in env {
            command.env(name, value);
        }
        let mut child = command.spawn().expect("the sluice binary runs");
        let stdout = child.stdout.take().expect("piped stdout");
        let stderr = child.stderr.take().expect("piped stderr");
        let stderr =
            std::thread::spawn(move || std::io::read_to_string(stderr).unwrap_or_default());
        let (sender, receiver) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let first = lines.next().and_then(Result::ok);
            let _ = sender.send(first);
            // Keep draining so the process never blocks on a full pipe.
            for _ in lines {}
        });
        let first = receiver
            .recv_timeout(Duration::from_secs(30))
            .ok()
            .flatten();
        let Some(url) = first
            .as_deref()
            .and_then(|line| line.strip_prefix("listening on "))
        else {
            let _ = child.kill();
            let _ = child.wait();
            let err = stderr.join().unwrap_or_default();
            panic!(
                "{} {args:?} did not announce its address: {first:?}\n{err}",
                binary.display()
            );
        };
        SluiceProcess {
            url: url.to_owned(),
            child,
            stderr: Some(stderr),
        }
    }

    /// `binary serve --config CONFIG --listen 127.0.0.1:0`, then `extra`,
    /// with `env` added.
    pub fn serve(binary: &Path, config: &Path, extra: &[&str], env: &[(&str, &str)]) -> Self {
        let args = serve_args(config, "127.0.0.1:0", extra);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Self::start(binary, &args, env)
    }

    /// Its process id (for `/proc/<pid>/...`).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends it SIGTERM (through `kill(1)`), without waiting.
    pub fn terminate(&self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
    }

    /// Its exit status, once it exits within `within`; `None` if it is
    /// still running then.
    pub fn exited_within(&mut self, within: Duration) -> Option<ExitStatus> {
        exited_within(&mut self.child, within)
    }

    /// Stops it with SIGKILL and returns what it wrote to stderr.
    pub fn stop(&mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.stderr
            .take()
            .and_then(|handle| handle.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for SluiceProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The arguments of `sluice serve --config CONFIG --listen LISTEN`, then `extra`.
pub fn serve_args(config: &Path, listen: &str, extra: &[&str]) -> Vec<String> {
    let config = config.to_string_lossy().into_owned();
    let mut args: Vec<String> = ["serve", "--config", &config, "--listen", listen]
        .map(str::to_owned)
        .to_vec();
    args.extend(extra.iter().map(|arg| (*arg).to_owned()));
    args
}

/// `child`'s exit status, once it exits within `within`; `None` if it is
/// still running then.
pub fn exited_within(child: &mut Child, within: Duration) -> Option<ExitStatus> {
    let until = std::time::Instant::now() + within;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        if std::time::Instant::now() >= until {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
