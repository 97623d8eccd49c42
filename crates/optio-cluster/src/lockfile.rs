//! A data directory held by one process: an exclusive `flock` on a lock file in it, held as
//! long as the returned file is open, released by the kernel however the process ends (so a
//! SIGKILL leaves no stale lock). The holder writes its pid into the file, so the next one
//! can say who holds it.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};

/// Pause between two attempts while waiting for the lock.
const POLL_INTERVAL: Duration = Duration::from_millis(10);

/// Why the lock was not taken.
#[derive(Debug)]
pub enum LockError {
    /// Another open file holds it; `holder` is the pid it wrote, if readable.
    Held {
        /// The holder's pid.
        holder: Option<u32>,
    },
    /// The lock file could not be opened or locked.
    Io(io::Error),
}

/// Takes the exclusive lock on `path` (created 0600 if absent), waiting at most `wait` for a
/// holder to let go, and writes this process's pid into it.
pub fn hold(path: &Path, wait: Duration) -> Result<File, LockError> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .mode(0o600)
        .open(path)
        .map_err(LockError::Io)?;
    let deadline = Instant::now() + wait;
    loop {
        match file.try_lock() {
            Ok(()) => break,
            Err(fs::TryLockError::WouldBlock) if Instant::now() < deadline => {
                std::thread::sleep(POLL_INTERVAL);
            }
            Err(fs::TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                return Err(LockError::Held { holder: holder.trim().parse().ok() });
            }
            Err(fs::TryLockError::Error(e)) => return Err(LockError::Io(e)),
        }
    }
    // Who holds it, for the next one's error message (the lock, not this, is what counts).
    let _ = file.set_len(0).and_then(|()| writeln!(file, "{}", std::process::id()));
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_holder_is_refused_with_the_first_ones_pid_until_it_lets_go() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("x.lock");
        let first = hold(&path, Duration::ZERO).expect("free");
        let Err(LockError::Held { holder }) = hold(&path, Duration::from_millis(30)) else {
            panic!("a second holder got the lock");
        };
        assert_eq!(holder, Some(std::process::id()));
        drop(first);
        hold(&path, Duration::ZERO).expect("free again once the first is closed");
    }
}
