//! Running the binary and the oracle.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The repository root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// An example map under `examples/`.
pub fn example(name: &str) -> PathBuf {
    root().join("examples").join(name)
}

/// Runs `optio args…`.
pub fn optio(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_optio")).args(args).output().expect("optio runs")
}

/// Runs `optio args…` and returns its standard output; panics with its errors if it fails.
pub fn optio_ok(args: &[&str]) -> String {
    let output = optio(args);
    assert!(
        output.status.success(),
        "optio {args:?} failed ({:?}):\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("UTF-8 output")
}

/// Runs `optio args…`, which must fail cleanly (exit status 1, not a panic); returns stderr.
pub fn optio_err(args: &[&str]) -> String {
    let output = optio(args);
    let stderr = String::from_utf8_lossy(&output.stderr).to_string();
    assert_eq!(output.status.code(), Some(1), "optio {args:?} should fail with status 1: {stderr}");
    assert!(!stderr.contains("panicked"), "optio {args:?} panicked: {stderr}");
    assert!(stderr.starts_with("error: "), "errors start with 'error: ': {stderr}");
    stderr
}

/// `crushtool`, or `None` (with a message) outside CI; under `CI=true` its absence fails.
pub fn crushtool() -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths).map(|dir| dir.join("crushtool")).find(|p| p.is_file())
    });
    if found.is_none() {
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("crushtool is required when CI=true: install Debian's ceph-base");
        }
        eprintln!("skipping: crushtool not found (install Debian's ceph-base to run this test)");
    }
    found
}

/// Runs crushtool and returns its standard output.
pub fn crushtool_run(crushtool: &Path, args: &[&str]) -> String {
    let output = Command::new(crushtool).args(args).output().expect("crushtool runs");
    assert!(
        output.status.success(),
        "crushtool {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("UTF-8")
}
