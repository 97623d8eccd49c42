//! Fuzzes format detection and `optio_mapfile::parse`; any accepted map must survive Optio
//! TOML unchanged.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(map) = optio_mapfile::parse(text) {
        let toml = optio_mapfile::optio_toml::write(&map);
        let back = optio_mapfile::optio_toml::parse(&toml).expect("written TOML reads back");
        assert_eq!(back, map, "TOML round trip changed the map");
    }
});
