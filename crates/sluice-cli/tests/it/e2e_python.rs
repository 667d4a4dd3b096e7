//! The cross-language end-to-end tests: Python (standard library only)
//! drives `sluice fake-api` and `sluice serve` as processes over HTTP and
//! asserts on the fake's recorded request times and counts. Run here so
//! that the README's one test command runs them too, with the project's
//! Python (`sluice_testkit::python`), whatever venv the caller is in.

use std::process::Command;

fn python(script: &str) {
    let root = sluice_testkit::repo_root();
    let python = sluice_testkit::python(&[]);
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
        stdout.contains("passed"),
        "{script} reported nothing: {stdout}"
    );
}

#[test]
fn sidecar_from_python() {
    python("tests/e2e/test_sidecar.py");
}
