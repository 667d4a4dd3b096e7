//! The official MCP conformance suite (`@modelcontextprotocol/conformance`,
//! pinned in tests/mcp-conformance/package-lock.json) against an
//! everything-style server (tests/mcp-conformance/server.py, the official
//! Python SDK) directly and through `sluice mcp --listen` in both modes: a
//! scenario that passes directly and fails through sluice fails the test.
//!
//! It needs `npm ci --prefix tests/mcp-conformance` and the SDK of
//! tests/e2e/requirements.txt; `scripts/test` installs both. Without them
//! the test fails, naming the command that installs them.

use std::path::Path;
use std::process::Command;

#[test]
fn the_conformance_suite_loses_nothing_through_sluice() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let suite = root.join("tests/mcp-conformance/node_modules/@modelcontextprotocol/conformance");
    if !suite.exists() {
        panic!(
            "the MCP conformance suite is not installed: run `scripts/test` (or `npm ci --prefix tests/mcp-conformance`)"
        );
    }
    let python = sluice_testkit::python(&["mcp.server"]);
    let output = Command::new(python)
        .arg(root.join("tests/mcp-conformance/run.py"))
        .arg(env!("CARGO_BIN_EXE_sluice"))
        .current_dir(&root)
        .output()
        .expect("python3 is on PATH (the test suite needs it)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    eprintln!("{stdout}");
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("dns-rebinding-protection"), "{stdout}");
    assert!(
        stdout.contains("32 of 32 scenarios pass directly"),
        "{stdout}"
    );
}
