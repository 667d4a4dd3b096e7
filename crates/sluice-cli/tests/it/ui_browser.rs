//! The live page in a real headless Chromium (issue 20):
//! `tests/ui/test_ui.mjs` (Node, playwright-core pinned in
//! `tests/ui/package-lock.json`) starts `sluice fake-api` and `sluice serve`,
//! drives the demo's load, opens `/ui` and checks what it renders. Run here
//! so that the README's one test command runs it too.
//!
//! It needs Chromium (`/usr/bin/chromium`, or `SLUICE_CHROMIUM`), Node and
//! `npm ci --prefix tests/ui`; `scripts/test` installs them. Without them
//! the test fails, naming the command that installs what is missing: a
//! test that could not run its browser never reads `ok`.
//! `SLUICE_UI_SCREENSHOT=docs/ui.png` also writes the screenshot the
//! README shows.

use std::path::PathBuf;
use std::process::Command;

fn chromium() -> Option<PathBuf> {
    let path = std::env::var_os("SLUICE_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"));
    path.exists().then_some(path)
}

/// Fails the test: what is missing, and the command that installs it.
fn unavailable(what: &str, install: &str) -> ! {
    panic!(
        "the live-page browser test cannot run: {what}. Install it with `{}`, or `{install}`",
        sluice_testkit::SETUP
    )
}

#[test]
fn live_page_in_headless_chromium() {
    let root = sluice_testkit::repo_root();
    let Some(chromium) = chromium() else {
        unavailable(
            "no Chromium at /usr/bin/chromium or $SLUICE_CHROMIUM",
            "apt-get install chromium",
        );
    };
    if !root.join("tests/ui/node_modules/playwright-core").exists() {
        unavailable(
            "playwright-core is not installed",
            "npm ci --prefix tests/ui",
        );
    }
    let mut command = Command::new("node");
    command
        .arg(root.join("tests/ui/test_ui.mjs"))
        .arg(env!("CARGO_BIN_EXE_sluice"))
        .arg(&chromium)
        .current_dir(&root);
    if let Some(screenshot) = std::env::var_os("SLUICE_UI_SCREENSHOT") {
        command.arg(screenshot);
    }
    let output = match command.output() {
        Ok(output) => output,
        Err(error) => unavailable(
            &format!("node cannot be run: {error}"),
            "apt-get install nodejs npm",
        ),
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "tests/ui/test_ui.mjs failed\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
    );
    assert!(stdout.contains("passed"), "it reported nothing: {stdout}");
}
