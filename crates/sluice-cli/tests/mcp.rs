//! `sluice mcp` as a process: its flags, its configuration errors, and the
//! server's exit status as its own.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

fn sluice() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
}

/// A configuration file, removed on drop.
struct ConfigFile(PathBuf);

impl Drop for ConfigFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn config(text: &str) -> ConfigFile {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let path = std::env::temp_dir().join(format!(
        "sluice-mcp-cli-{}-{}.toml",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::write(&path, text).unwrap();
    ConfigFile(path)
}

#[test]
#[cfg(unix)]
fn the_servers_exit_status_is_sluices() {
    let file = config("[credentials.api]\nrate = \"5/1s\"");
    let status = sluice()
        .args(["mcp", "--config"])
        .arg(&file.0)
        .args(["--", "sh", "-c", "exit 4"])
        .stdin(Stdio::piped())
        .env("RUST_LOG", "warn")
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(4));
}

#[test]
#[cfg(unix)]
fn messages_pass_through_and_closing_stdin_ends_the_server() {
    let file = config("[credentials.api]\nrate = \"5/1s\"");
    // `cat` as the server: what the client sends comes back; its stderr is ours.
    let mut child = sluice()
        .args(["mcp", "--config"])
        .arg(&file.0)
        .args(["--", "sh", "-c", "echo server-stderr >&2; cat"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env("RUST_LOG", "warn")
        .spawn()
        .unwrap();
    let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    let mut stdin = child.stdin.take().unwrap();
    writeln!(stdin, "{ping}").unwrap();
    writeln!(stdin, "not json").unwrap();
    drop(stdin);
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8(output.stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    // The ping echoed by the server, and sluice's own parse error for the garbage.
    assert!(lines.contains(&ping), "{stdout}");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("-32700") && l.contains(r#""id":null"#)),
        "{stdout}"
    );
    assert_eq!(lines.len(), 2, "{stdout}");
    assert!(String::from_utf8_lossy(&output.stderr).contains("server-stderr"));
}

#[test]
fn configuration_errors_name_the_field() {
    let two = config("[credentials.a]\n[credentials.b]\n");
    let output = sluice()
        .args(["mcp", "--config"])
        .arg(&two.0)
        .args(["--", "true"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("mcp.credential"), "{stderr}");
    assert!(stderr.contains("--credential"), "{stderr}");

    let output = sluice()
        .args(["mcp", "--config"])
        .arg(&two.0)
        .args(["--credential", "c", "--", "true"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--credential: names unknown credential \"c\""),
        "{stderr}"
    );

    let output = sluice()
        .args(["mcp", "--config"])
        .arg(&two.0)
        .args(["--credential", "a", "--", "/nonexistent/server"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("/nonexistent/server"), "{stderr}");
}
