//! The Python package's own test suite (`python/tests`), run from here so
//! that the README's one test command covers it: the package is built
//! (maturin, dev profile, reusing this workspace's target directory) and
//! installed into the project's Python (`sluice_testkit::python`: the venv
//! `scripts/test` makes under `target/`, holding the pinned
//! `python/requirements-test.txt`), whatever venv the caller is in, and
//! pytest runs there. No venv is built on top of another: one made with
//! `--system-site-packages` from inside a venv sees the base interpreter's
//! packages, not the venv's.

use std::process::{Command, Output};

fn run(what: &str, command: &mut Command) -> Output {
    let output = command
        .current_dir(sluice_testkit::repo_root())
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
    let python = sluice_testkit::python(&["maturin", "pytest", "httpx"]);
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
