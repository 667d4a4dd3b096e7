//! Reloading a running `sluice mcp` (issue 53): SIGHUP reads the file
//! again; a raised limit applies to the calls that start after it, with
//! what the window already spent kept; a file that does not load is
//! refused, naming the field, and the old limit holds; SIGHUP never ends
//! the process. Against the real binary over stdio, in front of a server
//! that answers every call: each call is either the server's answer or
//! sluice's deferral, and the window (a minute) outlasts the test, so the
//! count of answers is what the limit in force allowed.
#![cfg(unix)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Answers every request with a text result, one line each.
const SERVER: &str = r#"
import json, sys
for line in sys.stdin:
    message = json.loads(line)
    if "id" in message and "method" in message:
        answer = {"jsonrpc": "2.0", "id": message["id"],
                  "result": {"content": [{"type": "text", "text": "done"}]}}
        print(json.dumps(answer), flush=True)
"#;

struct Proxy {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    log: PathBuf,
    next_id: u64,
}

impl Proxy {
    fn start(dir: &Path, config: &Path) -> Proxy {
        let log = dir.join("stderr.log");
        let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(["mcp", "--config"])
            .arg(config)
            .args(["--", "python3", "-c", SERVER])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .env("RUST_LOG", "info")
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        Proxy {
            child,
            stdin,
            stdout,
            log,
            next_id: 0,
        }
    }

    /// One `tools/call`: true when the server answered it, false when
    /// sluice deferred it (`rate_limited`).
    fn call(&mut self) -> bool {
        self.next_id += 1;
        let call = format!(
            r#"{{"jsonrpc":"2.0","id":{},"method":"tools/call","params":{{"name":"send","arguments":{{"n":{}}}}}}}"#,
            self.next_id, self.next_id
        );
        writeln!(self.stdin, "{call}").unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        let answer: Value = serde_json::from_str(&line).expect(&line);
        assert_eq!(answer["id"], self.next_id, "{line}");
        if answer["result"]["isError"] == true {
            assert_eq!(
                answer["result"]["structuredContent"]["status"], "rate_limited",
                "{line}"
            );
            return false;
        }
        assert_eq!(answer["result"]["content"][0]["text"], "done", "{line}");
        true
    }

    fn calls(&mut self, n: usize) -> usize {
        (0..n).filter(|_| self.call()).count()
    }

    /// Sends SIGHUP and waits until the log has `count` lines saying `what`.
    fn hangup_until(&mut self, what: &str, count: usize) -> String {
        let status = Command::new("kill")
            .args(["-HUP", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let began = Instant::now();
        loop {
            let log = std::fs::read_to_string(&self.log).unwrap();
            if log.matches(what).count() >= count {
                return log;
            }
            assert!(
                began.elapsed() < Duration::from_secs(10),
                "no {what:?} in the log after SIGHUP: {log}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn write_config(path: &Path, rate: &str) {
    let toml = format!("[credentials.api]\nrate = \"{rate}\"\nmax_in_flight = 4\nqueue = 0\n");
    std::fs::write(path, toml).unwrap();
}

#[test]
fn sighup_raises_the_limit_keeps_the_spend_and_refuses_a_bad_file() {
    let dir = std::env::temp_dir().join(format!("sluice-mcp-reload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("sluice.toml");
    write_config(&config, "2/60s");
    let mut proxy = Proxy::start(&dir, &config);

    // 2 a minute: the third is deferred.
    assert_eq!(proxy.calls(3), 2);

    // Raised to 5 a minute: the 2 spent still count, so 3 more, not 5.
    write_config(&config, "5/60s");
    proxy.hangup_until("limits are in force", 1);
    assert_eq!(proxy.calls(4), 3);

    // A file that does not load: refused, naming the field; 5 a minute
    // (all spent) holds, not the file's nor the first one's.
    write_config(&config, "five");
    let log = proxy.hangup_until("does not load", 1);
    assert!(log.contains("credentials.api.rate"), "{log}");
    assert_eq!(proxy.calls(2), 0);

    // A change that needs a restart: refused, naming it.
    std::fs::write(
        &config,
        "[credentials.api]\nrate = \"9/60s\"\nmax_in_flight = 4\nqueue = 0\n\n[mcp]\ndeferral = \"error\"\n",
    )
    .unwrap();
    let log = proxy.hangup_until("was refused", 1);
    assert!(log.contains("mcp: cannot change on reload"), "{log}");
    assert_eq!(proxy.calls(1), 0);

    // Raised again, from the limits in force: 9 a minute, 5 spent, 4 more.
    write_config(&config, "9/60s");
    proxy.hangup_until("limits are in force", 2);
    assert_eq!(proxy.calls(5), 4);
    assert!(proxy.alive(), "SIGHUP ended sluice mcp");
}
