//! Fuzzes `optio_mapfile::ceph_text::parse`; whatever it accepts must also write and read back.
#![no_main]

use libfuzzer_sys::fuzz_target;

/// Words that start other declarations: a bucket type with one of these names cannot be
/// written as text that reads back (crushtool has the same ambiguity).
const KEYWORDS: [&str; 2] = ["rule", "choose_args"];

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(map) = optio_mapfile::ceph_text::parse(text) {
        if map.types().iter().any(|t| KEYWORDS.contains(&t.name.as_str())) {
            return;
        }
        let written = optio_mapfile::ceph_text::write(&map);
        if let Err(error) = optio_mapfile::ceph_text::parse(&written) {
            panic!("written map does not read back: {error}\n{written}");
        }
    }
});
