//! `promtool check metrics` on a process's `/metrics` text, for the tests: the exposition is
//! parsed by Prometheus' own parser and linted against its naming conventions.

use std::io::Write;
use std::process::{Command, Stdio};

/// What `promtool check metrics` says of `text`: `Ok(())` when it accepts it, `Err(its
/// complaints)` when not. When promtool is not installed: under `CI=true` this panics
/// ("install Debian's prometheus"), so a CI run cannot skip the check; otherwise it prints
/// that the check is skipped and returns `Ok(())`.
pub fn check_metrics(text: &str) -> Result<(), String> {
    let child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if std::env::var("CI").as_deref() == Ok("true") {
                panic!("promtool is required when CI=true: install Debian's prometheus");
            }
            eprintln!("skipping the promtool check: promtool not found (Debian's prometheus)");
            return Ok(());
        }
        Err(e) => return Err(format!("cannot run promtool: {e}")),
    };
    let mut stdin = child.stdin.take().expect("piped stdin");
    let written = stdin.write_all(text.as_bytes());
    drop(stdin);
    let output = child.wait_with_output().map_err(|e| format!("promtool: {e}"))?;
    written.map_err(|e| format!("cannot feed promtool: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}
