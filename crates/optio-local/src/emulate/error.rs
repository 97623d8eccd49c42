//! Why an emulation failed.

/// Why an emulation could not be read, built or removed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EmulateError {
    /// The emulation file is malformed or out of range.
    #[error("{file}:{}: {message} (docs/emulation.md describes the file)", line.map_or("?".to_string(), |l| l.to_string()))]
    Parse {
        /// The file.
        file: String,
        /// The line, when known.
        line: Option<usize>,
        /// What is wrong and what to do.
        message: String,
    },
    /// This machine or user cannot run it (not root, a tool or cgroup controller missing).
    #[error("{0}")]
    Unsupported(String),
    /// An `ip`, `tc` or `nsenter` command failed.
    #[error("`{command}` failed: {stderr}")]
    Command {
        /// The command line.
        command: String,
        /// What it said.
        stderr: String,
    },
    /// A file or process could not be made or read.
    #[error("{what}")]
    Io {
        /// What was being done.
        what: String,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
}
