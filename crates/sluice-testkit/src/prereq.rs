//! What the test suite needs from outside Rust, found or failed with the
//! command that installs it: the project's Python (the venv `scripts/test`
//! makes under `target/`), and programs installed with apt.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The command that installs every prerequisite and runs the suite.
pub const SETUP: &str = "scripts/test";

/// The repository's root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The project's test venv, made by `scripts/test` with the pinned
/// `tests/e2e/requirements.txt` and `python/requirements-test.txt`.
pub fn test_venv() -> PathBuf {
    repo_root().join("target/test-venv")
}

/// The command that makes the project's test venv by hand.
pub fn venv_install_command() -> String {
    "python3 -m venv target/test-venv && target/test-venv/bin/python -m pip install \
     -r tests/e2e/requirements.txt -r python/requirements-test.txt"
        .to_string()
}

/// The Python the tests run: `$SLUICE_PYTHON` if set, else the project's
/// test venv (`target/test-venv/bin/python`), whatever venv the caller is
/// in. `modules` must import in it; if one does not, or there is no such
/// Python, the test fails with the command that installs it.
pub fn python(modules: &[&str]) -> PathBuf {
    let (python, from_env) = match std::env::var_os("SLUICE_PYTHON") {
        Some(python) => (PathBuf::from(python), true),
        None => (test_venv().join("bin/python"), false),
    };
    let install = if from_env {
        format!(
            "{} -m pip install -r tests/e2e/requirements.txt -r python/requirements-test.txt \
             (SLUICE_PYTHON is set), or unset SLUICE_PYTHON and run `{SETUP}`",
            python.display()
        )
    } else {
        format!("`{SETUP}` (or by hand: {})", venv_install_command())
    };
    if !python.exists() {
        panic!(
            "the tests' Python is missing: no {}. Install it with {install}",
            python.display()
        );
    }
    if !modules.is_empty() {
        let probe = Command::new(&python)
            .arg("-c")
            .arg(format!("import {}", modules.join(", ")))
            .output()
            .unwrap_or_else(|error| panic!("{} cannot run: {error}", python.display()));
        assert!(
            probe.status.success(),
            "the tests' Python ({}) lacks one of {modules:?}. Install it with {install}\n{}",
            python.display(),
            String::from_utf8_lossy(&probe.stderr)
        );
    }
    python
}

/// Fails the test, naming the command that installs `program` (a Debian
/// package) when it is not on `PATH`.
pub fn require_program(program: &str, package: &str) {
    let found = std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()));
    assert!(found, "{}", missing_program(program, package));
}

/// The message for a program that is not installed.
pub fn missing_program(program: &str, package: &str) -> String {
    format!(
        "`{program}` is not installed (not on PATH). Install it with `{SETUP}`, \
         or `apt-get install {package}`"
    )
}
