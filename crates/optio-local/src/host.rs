//! Where and how a placed host's server runs (an emulated host, [`crate::emulate`]).

use std::path::PathBuf;

/// One device of a placed host.
#[derive(Clone, Debug, PartialEq)]
pub struct DeviceDef {
    /// Its id.
    pub id: u32,
    /// Its capacity.
    pub capacity_bytes: u64,
    /// Its class in the map.
    pub class: Option<String>,
    /// Its bandwidth attribute in the map, MB/s.
    pub bandwidth_mb_per_sec: Option<u64>,
}

/// Where and how one host's server runs when it is placed (an emulated host).
#[derive(Clone, Debug, PartialEq)]
pub struct HostPlacement {
    /// `z1-h1` (the zone is the part before `-`).
    pub name: String,
    /// The address it listens on.
    pub bind: String,
    /// The command line its server is started under (`nsenter --net=… --`).
    pub launcher: Vec<std::ffi::OsString>,
    /// Cgroup directories its server joins.
    pub cgroups: Vec<PathBuf>,
    /// Its devices.
    pub devices: Vec<DeviceDef>,
    /// More arguments for its server (`--emulated-read-rate N`).
    pub server_args: Vec<std::ffi::OsString>,
}
