//! `sluice mcp` between real MCP peers: a server and a client written with
//! the official Python SDK (pinned in tests/e2e/requirements.txt) drive the
//! built binary over stdio; the script asserts on what the server recorded.
//! They run in the project's Python (`sluice_testkit::python`, the venv
//! `scripts/test` makes), whatever venv the caller is in; a missing SDK
//! fails the test with the command that installs it.

use std::process::Command;

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
    let root = sluice_testkit::repo_root();
    let python = sluice_testkit::python(&["mcp.server.mcpserver", "mcp.client.client"]);
    let output = Command::new(&python)
        .arg(root.join(script))
        .arg(env!("CARGO_BIN_EXE_sluice"))
        .current_dir(&root)
        .output()
        .unwrap_or_else(|error| panic!("{} cannot run: {error}", python.display()));
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
