//! Proves that no input makes a parser panic: the committed fuzz corpus and thousands of
//! deterministic mutations of every example (byte flips, insertions, deletions, truncations,
//! swapped lines) go through every parser. This is what CI runs; `fuzz/` explores further.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

use optio_mapfile::{Format, parse, parse_as};

use crate::support::{Rng, examples};

/// Bytes that matter to the grammars, for insertions.
const INTERESTING: &[u8] = b"{}[]#=\"'\n \t-.0123456789eE~,:";
/// Words that matter to the grammars, for insertions.
const WORDS: &[&str] = &[
    "item",
    "id",
    "weight",
    "pos",
    "class",
    "step",
    "take",
    "emit",
    "choose",
    "chooseleaf",
    "firstn",
    "indep",
    "type",
    "rule",
    "device",
    "tunable",
    "choose_args",
    "bucket_id",
    "weight_set",
    "ids",
    "-1",
    "18446744073709551615",
    "99999999999999999999",
    "1e999",
    "nan",
    "[[devices]]",
    "location",
    "= { host = \"h\" }",
    "[tunables]",
    "\"",
    "}",
    "{",
    "[",
    "]",
    "osd.0",
    "default",
    "-2147483648",
];

fn feed(input: &str) {
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let _ = parse(input);
        for format in [Format::CephText, Format::CephJson, Format::OptioToml] {
            let _ = parse_as(input, format);
        }
    }));
    if outcome.is_err() {
        panic!("a parser panicked on this input:\n{input:?}");
    }
}

fn mutate(rng: &mut Rng, original: &[u8]) -> Vec<u8> {
    let mut bytes = original.to_vec();
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(bytes.len() as u64 + 1) as usize;
        match rng.below(7) {
            0 if at < bytes.len() => bytes[at] ^= 1 << rng.below(8),
            1 => bytes.insert(at, INTERESTING[rng.below(INTERESTING.len() as u64) as usize]),
            2 if at < bytes.len() => {
                let end = (at + 1 + rng.below(16) as usize).min(bytes.len());
                bytes.drain(at..end);
            }
            3 => bytes.truncate(at),
            4 => {
                let word = WORDS[rng.below(WORDS.len() as u64) as usize];
                bytes.splice(at..at, word.bytes().chain(std::iter::once(b' ')));
            }
            5 => {
                // Duplicate a line somewhere else.
                let text = String::from_utf8_lossy(&bytes).into_owned();
                let lines: Vec<&str> = text.lines().collect();
                if !lines.is_empty() {
                    let line = lines[rng.below(lines.len() as u64) as usize].to_string();
                    bytes.splice(at..at, line.bytes().chain(std::iter::once(b'\n')));
                }
            }
            _ => {
                // Swap two lines.
                let text = String::from_utf8_lossy(&bytes).into_owned();
                let mut lines: Vec<&str> = text.lines().collect();
                if lines.len() > 1 {
                    let a = rng.below(lines.len() as u64) as usize;
                    let b = rng.below(lines.len() as u64) as usize;
                    lines.swap(a, b);
                    bytes = lines.join("\n").into_bytes();
                }
            }
        }
    }
    bytes
}

#[test]
fn committed_fuzz_corpus_never_panics() {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus");
    let Ok(targets) = std::fs::read_dir(&corpus) else {
        panic!("the fuzz corpus is missing at {}", corpus.display());
    };
    let mut count = 0;
    for target in targets {
        for entry in std::fs::read_dir(target.expect("entry").path()).expect("a corpus directory") {
            let bytes = std::fs::read(entry.expect("entry").path()).expect("readable");
            feed(&String::from_utf8_lossy(&bytes));
            count += 1;
        }
    }
    assert!(count > 0, "the fuzz corpus is empty");
}

#[test]
fn mutated_examples_never_panic() {
    for (name, text) in examples() {
        // Large maps get fewer mutations, to keep the test fast.
        let rounds = if text.len() > 20_000 { 150 } else { 2500 };
        let mut rng = Rng::new(text.len() as u64);
        for _ in 0..rounds {
            let mutated = mutate(&mut rng, text.as_bytes());
            feed(&String::from_utf8_lossy(&mutated));
        }
        eprintln!("{name}: {rounds} mutations");
    }
}

#[test]
fn hostile_inputs_never_panic() {
    let deep_toml = format!("a = {}{}", "[".repeat(5000), "]".repeat(5000));
    let deep_json = format!("{}{}", "[".repeat(5000), "]".repeat(5000));
    let cases = [
        String::new(),
        "\u{feff}".to_string(),
        "{".to_string(),
        "device 4294967295 x\n".to_string(),
        "device 16777216 osd.16777216\n".to_string(),
        "type 65535 t\ntype 0 osd\nt b {\n id -2147483648\n}\n".to_string(),
        "type 1 host\ntype 0 osd\nhost b {\n id -1048577\n}\n".to_string(),
        "choose_args 18446744073709551616 {\n}\n".to_string(),
        "rule {\n id 0\n type 255\n step emit\n}\n".to_string(),
        deep_toml,
        deep_json,
        "host h { item h }\n".repeat(3),
        "[[devices]]\nid = 16777215\nweight = 65535.99998\ncapacity = \"16EiB\"\n".to_string(),
    ];
    for case in cases {
        feed(&case);
    }
}

#[test]
fn deep_hierarchies_are_errors_not_crashes() {
    // A chain of buckets, each holding the next: recursion over the hierarchy must not
    // overflow the stack (a crash no catch_unwind can catch).
    let depth = 50_000;
    let mut text = String::from("device 0 osd.0 class hdd\ntype 0 osd\ntype 1 host\n");
    text.push_str("host b0 {\n id -1\n item osd.0\n}\n");
    for level in 1..depth {
        text.push_str(&format!("host b{level} {{\n id -{}\n item b{}\n}}\n", level + 1, level - 1));
    }
    text.push_str("rule r {\n id 0\n type replicated\n step take b0 class hdd\n step emit\n}\n");
    let handle = std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || optio_mapfile::parse(&text).map(|_| ()).map_err(|e| e.to_string()))
        .expect("a thread");
    let outcome = handle.join().expect("parsing a deep map does not panic");
    if let Err(message) = outcome {
        assert!(message.contains("deep") || message.contains("levels"), "{message}");
    }
}
