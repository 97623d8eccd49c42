//! Durable file replacement, the one way Optio replaces a small file it must not lose or tear:
//! the new bytes go to a temporary file beside the old one, which is fsynced and renamed over
//! it, then the directory is fsynced. A reader sees the old file or the new one, never a mix,
//! and after a crash one of the two is there.

use std::fs;
use std::io::{self, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// Distinguishes the temporary files of concurrent writers within one process.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Replaces `path` with `bytes` atomically and durably. The temporary file
/// (`NAME.tmp.PID.N`, beside `path`) is removed if anything fails.
pub fn replace(path: &Path, bytes: &[u8]) -> io::Result<()> {
    replace_with_mode(path, bytes, 0o666)
}

/// [`replace`] for a file only its owner may read or write (0600): the temporary file is
/// created with that mode, so the bytes are never readable by others, not even for a moment.
pub fn replace_private(path: &Path, bytes: &[u8]) -> io::Result<()> {
    replace_with_mode(path, bytes, 0o600)
}

/// [`replace`] keeping the mode of the file replaced, or 0600 for a new file.
pub fn replace_keeping_mode(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mode = match fs::metadata(path) {
        Ok(meta) => meta.permissions().mode() & 0o777,
        Err(e) if e.kind() == io::ErrorKind::NotFound => crate::private::FILE_MODE,
        Err(e) => return Err(e),
    };
    replace_with_mode(path, bytes, mode)
}

/// [`replace`] with the temporary file, and so the new file, created with `mode` (narrowed
/// by the umask).
fn replace_with_mode(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    let unique = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    name.push(format!(".tmp.{}.{unique}", std::process::id()));
    let temp = path.with_file_name(name);
    let result = (|| {
        // O_EXCL: a file or a symbolic link planted at the name is never written through.
        let mut file =
            fs::OpenOptions::new().write(true).create_new(true).mode(mode).open(&temp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        fs::rename(&temp, path)
    })();
    if let Err(error) = &result
        && error.kind() != io::ErrorKind::AlreadyExists
    {
        let _ = fs::remove_file(&temp);
    }
    result?;
    sync_parent(path)
}

/// Renames the already durable file `temp` over `path` and fsyncs the directory: the second
/// half of [`replace`], for callers that write their temporary file themselves (streamed, or
/// under a fixed name that recovery looks for).
pub fn rename_over(temp: &Path, path: &Path) -> io::Result<()> {
    fs::rename(temp, path)?;
    sync_parent(path)
}

/// Fsyncs the directory holding `path` (the current directory for a bare file name), so that
/// a rename or a new file in it survives a crash.
pub fn sync_parent(path: &Path) -> io::Result<()> {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => sync_dir(dir),
        _ => sync_dir(Path::new(".")),
    }
}

/// Fsyncs a directory.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replace_leaves_the_new_bytes_and_no_temporary_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("map.toml");
        replace(&path, b"one").expect("first");
        replace(&path, b"two").expect("second");
        assert_eq!(fs::read(&path).expect("read"), b"two");
        let names: Vec<_> = fs::read_dir(dir.path()).expect("list").collect();
        assert_eq!(names.len(), 1, "only the file itself: {names:?}");
    }

    #[test]
    fn a_private_replace_leaves_a_file_only_its_owner_can_read() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("state");
        replace_private(&path, b"secret").expect("write");
        assert_eq!(fs::read(&path).expect("read"), b"secret");
        let mode = fs::metadata(&path).expect("stat").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{mode:o}");
    }

    #[test]
    fn a_failed_replace_keeps_the_old_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("map.toml");
        replace(&path, b"old").expect("write");
        // A directory where the file should be: the rename fails, the temporary file goes.
        let blocked = dir.path().join("sub");
        fs::create_dir_all(blocked.join("x")).expect("mkdir");
        assert!(replace(&blocked, b"new").is_err());
        assert_eq!(fs::read(&path).expect("read"), b"old");
        assert_eq!(fs::read_dir(dir.path()).expect("list").count(), 2, "map.toml and sub");
    }
}
