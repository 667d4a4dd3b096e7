//! The Python package's own test suite (`python/tests`), run from here so
//! that the README's one test command covers it: the package is built once
//! (maturin, dev profile, reusing this workspace's target directory) into a
//! virtual environment under the target directory, which sees the pinned
//! test requirements installed system-wide (`python/requirements-test.txt`),
//! and pytest runs against it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn run(what: &str, command: &mut Command) -> Output {
    let output = command
        .current_dir(root())
        .output()
        .unwrap_or_else(|error| panic!("{what}: could not start: {error}"));
    assert!(
        output.status.success(),
        "{what} failed\n--- stdout\n{}\n--- stderr\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

#[test]
fn python_package_tests_pass() {
    let prerequisites = Command::new("python3")
        .args(["-c", "import maturin, pytest, httpx"])
        .output()
        .expect("python3 is on PATH (the test suite needs it)");
    assert!(
        prerequisites.status.success(),
        "the Python test requirements are missing; run \
         `pip install -r python/requirements-test.txt` from the repository root"
    );

    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("python-venv");
    let python = venv.join("bin/python");
    if !python.exists() {
        run(
            "python3 -m venv",
            Command::new("python3")
                .args(["-m", "venv", "--system-site-packages"])
                .arg(&venv),
        );
    }
    run(
        "pip install ./python",
        Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--no-build-isolation",
                "--no-deps",
                "--force-reinstall",
                "./python",
            ])
            .env("MATURIN_PEP517_ARGS", "--profile dev"),
    );
    let output = run(
        "pytest python/tests",
        Command::new(&python).args([
            "-m",
            "pytest",
            "python/tests",
            "-q",
            "-p",
            "no:cacheprovider",
        ]),
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains(" passed"),
        "pytest reported nothing: {stdout}"
    );
}
