//! Integration tests of optio-mapfile: maps read from Ceph's own tools, checked against them.

mod ceph;
mod textmap;

mod crushtool_build;
mod crushtool_text;
mod json_import;
mod osdmaptool;
