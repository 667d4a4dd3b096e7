//! `sluice mcp` between real MCP peers: a server and a client written with
//! the official Python SDK (pinned in tests/e2e/requirements.txt) drive the
//! built binary over stdio; the script asserts on what the server recorded.
//! A missing SDK fails the test with the command that installs it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;

const INSTALL: &str = "pip install -r tests/e2e/requirements.txt";

#[test]
fn mcp_proxy_between_python_sdk_peers() {
    run_script("tests/e2e/test_mcp.py");
}

/// Every combination over Streamable HTTP: stdio client with a remote
/// server, HTTP clients with a stdio server, HTTP clients with a remote one.
#[test]
fn mcp_proxy_over_streamable_http_between_python_sdk_peers() {
    run_script("tests/e2e/test_mcp_http.py");
}

fn run_script(script: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let probe = Command::new("python3")
        .args(["-c", "import mcp.server.mcpserver, mcp.client.client"])
        .output()
        .expect("python3 is on PATH (the test suite needs it)");
    assert!(
        probe.status.success(),
        "the MCP Python SDK is missing; run `{INSTALL}` from the repository root\n{}",
        String::from_utf8_lossy(&probe.stderr)
    );

    let output = Command::new("python3")
        .arg(root.join(script))
        .arg(env!("CARGO_BIN_EXE_sluice"))
        .current_dir(&root)
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{script} failed\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
    );
    assert!(
        stdout.contains(" passed, 0 failed"),
        "it reported nothing: {stdout}"
    );
}
