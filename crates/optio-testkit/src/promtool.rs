//! `promtool check metrics` on a process's `/metrics` text, for the tests: the exposition is
//! parsed by Prometheus' own parser and linted against its naming conventions.

use std::io::Write;
use std::process::{Command, Stdio};

/// Why `promtool check metrics` did not accept an exposition.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PromtoolError {
    /// promtool could not be started.
    #[error("cannot run promtool: {0}")]
    Run(#[source] std::io::Error),
    /// Waiting for promtool failed.
    #[error("promtool: {0}")]
    Wait(#[source] std::io::Error),
    /// The exposition could not be written to promtool.
    #[error("cannot feed promtool: {0}")]
    Feed(#[source] std::io::Error),
    /// promtool refused the exposition: its complaints.
    #[error("{complaints}")]
    Refused {
        /// What promtool printed.
        complaints: String,
    },
}

/// What `promtool check metrics` says of `text`: `Ok(())` when it accepts it, `Err` with its
/// complaints ([`PromtoolError::Refused`]) when not. When promtool is not installed: under `CI=true` this panics
/// ("install Debian's prometheus"), so a CI run cannot skip the check; otherwise it prints
/// that the check is skipped and returns `Ok(())`.
pub fn check_metrics(text: &str) -> Result<(), PromtoolError> {
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
        Err(e) => return Err(PromtoolError::Run(e)),
    };
    let mut stdin = child.stdin.take().expect("piped stdin");
    let written = stdin.write_all(text.as_bytes());
    drop(stdin);
    let output = child.wait_with_output().map_err(PromtoolError::Wait)?;
    written.map_err(PromtoolError::Feed)?;
    if output.status.success() {
        Ok(())
    } else {
        Err(PromtoolError::Refused {
            complaints: format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_exposition_is_refused_with_promtools_complaints() {
        if Command::new("promtool").arg("--version").output().is_err() {
            eprintln!("skipping: promtool not found");
            return;
        }
        let refused = check_metrics("# TYPE x counter\nx{ 1\n");
        assert!(
            matches!(&refused, Err(PromtoolError::Refused { complaints }) if !complaints.is_empty()),
            "{refused:?}"
        );
        assert!(
            check_metrics("# HELP up_total Ups.\n# TYPE up_total counter\nup_total 1\n").is_ok()
        );
    }
}
