//! Helpers: running crushtool, finding the examples, deterministic pseudo-random numbers.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The `crushtool` binary, or `None` (with a message) when it is missing outside CI.
pub fn crushtool() -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths).map(|dir| dir.join("crushtool")).find(|path| path.is_file())
    });
    if found.is_none() {
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("crushtool is required when CI=true: install Debian's ceph-base");
        }
        eprintln!("skipping: crushtool not found (install Debian's ceph-base to run this test)");
    }
    found
}

/// Runs crushtool with `args`, returning its standard output; panics with its errors.
pub fn run(crushtool: &Path, args: &[&str]) -> String {
    let output = Command::new(crushtool).args(args).output().expect("crushtool runs");
    assert!(
        output.status.success(),
        "crushtool {args:?} failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("crushtool prints UTF-8")
}

/// Compiles `text` with `crushtool -c` into a binary map in `dir`, or returns crushtool's
/// error message.
pub fn compile(crushtool: &Path, dir: &Path, text: &str) -> Result<PathBuf, String> {
    let source = dir.join("map.txt");
    let binary = dir.join("map.bin");
    std::fs::write(&source, text).expect("write the text map");
    let _ = std::fs::remove_file(&binary);
    let output = Command::new(crushtool)
        .arg("-c")
        .arg(&source)
        .arg("-o")
        .arg(&binary)
        .output()
        .expect("crushtool runs");
    if output.status.success() {
        Ok(binary)
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

/// `crushtool -i BINARY --dump`.
pub fn dump(crushtool: &Path, binary: &Path) -> String {
    run(crushtool, &["-i", binary.to_str().expect("UTF-8 path"), "--dump"])
}

/// `crushtool -d BINARY`.
pub fn decompile(crushtool: &Path, binary: &Path) -> String {
    run(crushtool, &["-d", binary.to_str().expect("UTF-8 path")])
}

/// The repository's `examples/` directory.
pub fn examples_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

/// Every example map, with its file name.
pub fn examples() -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> = std::fs::read_dir(examples_dir())
        .expect("examples/ exists")
        .map(|entry| entry.expect("readable entry").path())
        .filter(|path| {
            matches!(path.extension().and_then(|e| e.to_str()), Some("toml" | "txt" | "json"))
        })
        .map(|path| {
            let name = path.file_name().expect("a file name").to_string_lossy().into_owned();
            (name, std::fs::read_to_string(&path).expect("readable example"))
        })
        .collect();
    files.sort();
    files
}

/// A small deterministic generator (xorshift64*), so that failures reproduce.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }
}
