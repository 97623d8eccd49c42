//! Fuzzes `optio_mapfile::ceph_json::parse`; whatever it accepts must also write and read back.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(map) = optio_mapfile::ceph_json::parse(text) {
        let written = optio_mapfile::ceph_json::write(&map);
        assert!(optio_mapfile::ceph_json::parse(&written).is_ok(), "written map does not read back");
    }
});
