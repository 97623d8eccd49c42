//! Files and directories only their owner may use: what Optio creates for its own state in a
//! cluster directory (logs that name object keys, the map, the dirty table, intent logs). A
//! local user who is not the cluster's owner reads none of them.

use std::fs::{self, File};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// The mode of the files Optio creates (owner read and write).
pub const FILE_MODE: u32 = 0o600;
/// The mode of the directories it creates (owner only).
pub const DIR_MODE: u32 = 0o700;
/// The permission bits that let group or others in.
const GROUP_OR_OTHERS: u32 = 0o077;

/// Creates `dir` and its missing parents with mode 0700 (existing ones keep theirs).
pub fn create_dir_all(dir: &Path) -> io::Result<()> {
    fs::DirBuilder::new().recursive(true).mode(DIR_MODE).create(dir)
}

/// Creates `path` with mode 0600 for writing, or truncates it.
pub fn create(path: &Path) -> io::Result<File> {
    fs::OpenOptions::new().write(true).create(true).truncate(true).mode(FILE_MODE).open(path)
}

/// Opens `path` for appending, creating it with mode 0600; a file that exists is narrowed to
/// 0600 if group or others could use it (one from before files were private).
pub fn append(path: &Path) -> io::Result<File> {
    let file = fs::OpenOptions::new().append(true).create(true).mode(FILE_MODE).open(path)?;
    narrow(&file, FILE_MODE)?;
    Ok(file)
}

/// Takes group and others' permissions away from `path` (a file or a directory) if it has any;
/// whether it had.
pub fn tighten(path: &Path) -> io::Result<bool> {
    let mode = fs::metadata(path)?.permissions().mode() & 0o777;
    if mode & GROUP_OR_OTHERS == 0 {
        return Ok(false);
    }
    fs::set_permissions(path, fs::Permissions::from_mode(mode & !GROUP_OR_OTHERS))?;
    Ok(true)
}

fn narrow(file: &File, mode: u32) -> io::Result<()> {
    let current = file.metadata()?.permissions().mode() & 0o777;
    if current & GROUP_OR_OTHERS != 0 {
        file.set_permissions(fs::Permissions::from_mode(mode))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(path: &Path) -> u32 {
        fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn what_is_made_here_is_for_its_owner_only() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("a/b");
        create_dir_all(&dir).unwrap();
        assert_eq!((mode(&root.path().join("a")), mode(&dir)), (DIR_MODE, DIR_MODE));
        let file = dir.join("f");
        create(&file).unwrap();
        assert_eq!(mode(&file), FILE_MODE);
        let log = dir.join("log");
        fs::write(&log, "old").unwrap();
        fs::set_permissions(&log, fs::Permissions::from_mode(0o644)).unwrap();
        append(&log).unwrap();
        assert_eq!(mode(&log), FILE_MODE, "an old log is narrowed");
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
        assert!(tighten(&dir).unwrap());
        assert_eq!(mode(&dir), 0o700);
        assert!(!tighten(&dir).unwrap());
    }
}
