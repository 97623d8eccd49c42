//! The keyring on disk: reading and writing the files that hold secret keys (a cluster's
//! keyring, one entity's key file). `optio-proto` owns what a keyring *is* — parsing it,
//! formatting it, signing and verifying with it — and touches no file; this module owns the
//! files: a key file that group or others may read is refused, and one is written only with
//! mode 0600, atomically, never through a symbolic link.

use std::path::Path;

use optio_proto::auth::{AuthError, Credentials, Keyring, validate_name};

/// Reads a keyring or key file, refusing one that group or others may read.
pub fn load(path: &Path) -> Result<Keyring, AuthError> {
    check_private(path)?;
    let text = std::fs::read_to_string(path).map_err(|e| {
        AuthError::Keyring(format!("cannot read the keyring {}: {e}", path.display()))
    })?;
    Keyring::parse(&text, &path.display().to_string())
}

/// Writes `keyring` to `path` (mode 0600, atomically: see [`write_private`]).
pub fn save(keyring: &Keyring, path: &Path) -> Result<(), AuthError> {
    write_private(path, keyring.to_toml().as_bytes())
}

/// The credentials of `id` in the keyring (or key file) at `path`.
pub fn credentials(path: &Path, id: &str) -> Result<Credentials, AuthError> {
    validate_name(id)?;
    let keyring = load(path)?;
    let entity = keyring.get(id).ok_or_else(|| {
        AuthError::Keyring(format!(
            "{} has no key for {id} (create one with `optio auth add {id}`)",
            path.display()
        ))
    })?;
    Ok(Credentials { id: id.to_string(), key: entity.key.clone() })
}

/// Refuses a secret file that group or others may read or write.
pub fn check_private(path: &Path) -> Result<(), AuthError> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path)
        .map_err(|e| AuthError::Keyring(format!("cannot read {}: {e}", path.display())))?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(AuthError::Keyring(format!(
            "{} holds secret keys but group or others may access it (mode {mode:04o}): \
             run `chmod 600 {}`",
            path.display(),
            path.display()
        )));
    }
    Ok(())
}

/// Attempts at a temporary file name before [`write_private`] gives up (each name is random:
/// a collision means someone is planting files at the names it draws).
const TEMP_ATTEMPTS_MAX: u32 = 8;
/// Random bytes in a temporary file's name.
const TEMP_NAME_RANDOM_BYTES: usize = 16;

/// Writes `bytes` to `path` with mode 0600, atomically: a new temporary file in the same
/// directory (a random name, created with `O_CREAT | O_EXCL | O_NOFOLLOW`, so a file or a
/// symbolic link planted there is never written through), fsynced, renamed over `path`, the
/// directory fsynced. A `path` that is a symbolic link is refused (a key is never written
/// through a link; the rename would replace the link itself anyway).
pub fn write_private(path: &Path, bytes: &[u8]) -> Result<(), AuthError> {
    use std::io::Write;
    let error = |what: &str, e: std::io::Error| {
        AuthError::Keyring(format!("cannot {what} {}: {e}", path.display()))
    };
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => {
            return Err(AuthError::Keyring(format!(
                "{} is a symbolic link: a key is never written through one (remove the link, \
                 or give the real file's path)",
                path.display()
            )));
        }
        Ok(meta) if !meta.is_file() => {
            return Err(AuthError::Keyring(format!(
                "{} is not a regular file: a key is written only to one",
                path.display()
            )));
        }
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(error("inspect", e)),
    }
    let (temp, mut file) =
        create_temporary(path).map_err(|e| error("create a temporary file for", e))?;
    let written = file
        .write_all(bytes)
        .and_then(|()| file.sync_all())
        .and_then(|()| std::fs::rename(&temp, path));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&temp);
        return Err(error("write", e));
    }
    let parent = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    std::fs::File::open(parent)
        .and_then(|dir| dir.sync_all())
        .map_err(|e| error("sync the directory of", e))
}

/// A new file (mode 0600) at a random name beside `path`: `O_CREAT | O_EXCL | O_NOFOLLOW`,
/// a fresh name on a collision, at most [`TEMP_ATTEMPTS_MAX`] times.
fn create_temporary(path: &Path) -> std::io::Result<(std::path::PathBuf, std::fs::File)> {
    use std::os::unix::fs::OpenOptionsExt;
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut last = None;
    for _ in 0..TEMP_ATTEMPTS_MAX {
        let mut random = [0u8; TEMP_NAME_RANDOM_BYTES];
        getrandom::fill(&mut random).map_err(|e| std::io::Error::other(e.to_string()))?;
        let temp =
            path.with_file_name(format!(".{name}.{}.tmp", optio_proto::hex::hex_bytes(&random)));
        let opened = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .mode(0o600)
            .open(&temp);
        match opened {
            Ok(file) => return Ok((temp, file)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no temporary name was free")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use optio_proto::auth::{Cap, Entity, Key};

    fn keyring() -> (Keyring, Credentials) {
        let key = Key::generate().unwrap();
        let mut keyring = Keyring::new();
        keyring.insert(Entity {
            name: "client.a".into(),
            key: key.clone(),
            cap: Cap::Write,
            previous: None,
        });
        (keyring, Credentials { id: "client.a".into(), key })
    }

    #[test]
    fn credentials_are_read_from_a_key_file_and_a_missing_entity_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keyring");
        let (keyring, expected) = keyring();
        save(&keyring, &path).unwrap();
        let read = credentials(&path, "client.a").unwrap();
        assert_eq!((read.id.as_str(), &read.key), (expected.id.as_str(), &expected.key));
        let error = credentials(&path, "client.b").unwrap_err().to_string();
        assert!(error.contains("optio auth add client.b"), "{error}");
    }

    #[test]
    fn key_files_others_can_read_are_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile_dir();
        let path = dir.join("keyring");
        let (keyring, _) = keyring();
        save(&keyring, &path).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        assert!(load(&path).is_ok());
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(load(&path).unwrap_err().to_string().contains("chmod 600"));
        let _ = std::fs::remove_dir_all(dir);
    }

    /// Issue 36 item 15: a symbolic link planted where the temporary file used to go (a
    /// predictable name) or at the key file itself never receives the key.
    #[test]
    fn a_key_is_never_written_through_a_planted_link() {
        use std::os::unix::fs::PermissionsExt;
        // A directory of its own: tests run at once, and others remove theirs.
        let dir = std::env::temp_dir().join(format!("optio-auth-links-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let trap = dir.join("attacker-file");
        std::fs::write(&trap, "").unwrap();
        std::fs::set_permissions(&trap, std::fs::Permissions::from_mode(0o644)).unwrap();
        let path = dir.join("keyring");
        // Every name the old scheme could draw in this process, and a few obvious others.
        let pid = std::process::id();
        for planted in [
            format!(".keyring.tmp{pid}"),
            format!("keyring.tmp.{pid}.0"),
            ".keyring.tmp".to_string(),
            "keyring.tmp".to_string(),
        ] {
            std::os::unix::fs::symlink(&trap, dir.join(planted)).unwrap();
        }
        let (keyring, _) = keyring();
        save(&keyring, &path).expect("the key is written beside the links");
        assert_eq!(std::fs::read(&trap).unwrap(), b"", "the key went through a link");
        assert!(!std::fs::symlink_metadata(&path).unwrap().file_type().is_symlink());
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        assert!(load(&path).is_ok());
        // A link at the key file itself: refused, with the reason.
        let linked = dir.join("linked.keyring");
        std::os::unix::fs::symlink(&trap, &linked).unwrap();
        let error = save(&keyring, &linked).unwrap_err().to_string();
        assert!(error.contains("symbolic link"), "{error}");
        assert_eq!(std::fs::read(&trap).unwrap(), b"", "the key went through a link");
        // No temporary file is left behind.
        let names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".tmp") && n.len() > 40)
            .collect();
        assert!(names.is_empty(), "{names:?}");
        let _ = std::fs::remove_dir_all(dir);
    }

    fn tempfile_dir() -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("optio-auth-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
