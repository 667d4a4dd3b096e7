//! Issue 13: a duration in `sluice.toml` longer than the longest allowed
//! (a week) stops `sluice serve` and `sluice mcp` at start, with a message
//! naming the field, instead of starting and panicking on every call.

use std::path::PathBuf;
use std::process::Command;

const CONFIG: &str = r#"
[credentials.support]
base_url = "http://127.0.0.1:9"
rate = "10/1s"

[tools.x]
credential = "support"
path = "/x"
deadline = "300000000000y"
"#;

const MESSAGE: &str =
    "tools.x.deadline: \"300000000000y\" is longer than the longest allowed duration (7d)";

fn config_file() -> PathBuf {
    let path = std::env::temp_dir().join(format!("sluice-bounds-{}.toml", std::process::id()));
    std::fs::write(&path, CONFIG).unwrap();
    path
}

#[test]
fn serve_and_mcp_refuse_a_deadline_longer_than_a_week_at_start() {
    let path = config_file();
    let config = path.to_str().unwrap();
    let serve = ["serve", "--config", config, "--listen", "127.0.0.1:0"];
    let mcp = ["mcp", "--config", config, "--", "true"];
    for args in [&serve[..], &mcp[..]] {
        let output = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(args)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {stdout}{stderr}");
        assert!(!stdout.contains("listening on"), "{args:?}: {stdout}");
        assert!(stderr.contains(MESSAGE), "{args:?}: {stderr}");
        assert!(
            stderr.starts_with(&format!("sluice: invalid configuration in {config}: ")),
            "{args:?}: {stderr}"
        );
    }
    let _ = std::fs::remove_file(path);
}
