//! Fuzzes `optio_mapfile::optio_toml::parse`; whatever it accepts must also write and read back.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(map) = optio_mapfile::optio_toml::parse(text) {
        let written = optio_mapfile::optio_toml::write(&map);
        assert!(optio_mapfile::optio_toml::parse(&written).is_ok(), "written map does not read back");
    }
});
