//! The emulation file: racks of hosts, their devices, the links between them and the host
//! conditions an experiment needs — TOML, read with the line of every mistake.
//!
//! ```toml
//! [links]
//! host = "200mbit"          # each host's link to its rack's switch, each direction
//! rack = "100mbit"          # each rack's link to the router, each direction
//! burst = "64KiB"           # the token bucket of every link (tc tbf's burst)
//!
//! [defaults]                # every host, unless it says otherwise
//! devices = 1
//! capacity = "16GiB"
//!
//! [[racks]]
//! hosts = 3                 # servers z1-h1, z1-h2, z1-h3
//! clients = 1               # client-only hosts z1-c1
//!
//! [racks.host.2]            # host 2 of this rack
//! memory_limit = "96MiB"    # emulation: a v1 memory cgroup limit on its server
//! ```

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Deserialize;

use super::error::EmulateError;

/// Most racks.
pub const RACKS_MAX: usize = 16;
/// Most servers per rack.
pub const HOSTS_PER_RACK_MAX: u32 = 32;
/// Most client-only hosts per rack.
pub const CLIENTS_PER_RACK_MAX: u32 = 16;
/// Most devices per host.
pub const DEVICES_PER_HOST_MAX: u32 = 16;
/// The slowest link, bits per second (below it TCP's timers, not the rate, decide).
pub const LINK_BITS_PER_SEC_MIN: u64 = 1_000_000;
/// The fastest link, bits per second.
pub const LINK_BITS_PER_SEC_MAX: u64 = 100_000_000_000;
/// The smallest token bucket: a full-size Ethernet frame and then some.
pub const BURST_BYTES_MIN: u64 = 2 << 10;
/// The largest token bucket.
pub const BURST_BYTES_MAX: u64 = 64 << 20;
/// The smallest memory limit of a host: its server's own memory must fit beside some cache.
pub const MEMORY_LIMIT_BYTES_MIN: u64 = 48 << 20;
/// The slowest emulated device, bytes per second.
pub const DEVICE_READ_BYTES_PER_SEC_MIN: u64 = 64 << 10;
/// Most cores a host's CPU quota may give.
pub const CPUS_MAX: f64 = 256.0;
/// The smallest CPU quota, in thousandths of a core.
pub const CPUS_MILLI_MIN: u32 = 10;

/// The default link rates and bucket.
const HOST_LINK_DEFAULT: &str = "200mbit";
const RACK_LINK_DEFAULT: &str = "100mbit";
const BURST_DEFAULT: &str = "64KiB";

/// A rate-limited link, each direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Link {
    /// Bits per second.
    pub bits_per_sec: u64,
    /// The token bucket, bytes.
    pub burst_bytes: u64,
}

impl Link {
    /// Bytes per second.
    pub fn bytes_per_sec(&self) -> u64 {
        self.bits_per_sec / 8
    }
}

/// What an experiment does to a host, each an emulation of a condition of the papers'
/// clusters (and said so in the output).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Conditions {
    /// A v1 memory cgroup limit on the host's processes: its server's page cache is held to
    /// what is left of it (memory pressure).
    pub memory_limit_bytes: Option<u64>,
    /// A v1 cpu cgroup quota, thousandths of a core (a host with that many cores; its server
    /// reports CPU utilisation against it).
    pub cpus_milli: Option<u32>,
    /// A busy process in the host's cpu cgroup (a CPU hog; needs `cpus`).
    pub cpu_hog: bool,
    /// A v1 blkio throttle on the host's reads from the device under the cluster directory,
    /// bytes per second (a slow device; only reads that miss the page cache reach it, so it
    /// goes with a memory limit).
    pub device_read_bytes_per_sec: Option<u64>,
    /// Emulation inside the server (`optio server --emulated-read-rate`): every device of the
    /// host serves reads at most this fast, bytes per second, page cache or not.
    pub server_read_bytes_per_sec: Option<u64>,
}

/// One server host.
#[derive(Clone, Debug, PartialEq)]
pub struct HostSpec {
    /// Devices (one server process serves them all).
    pub devices: u32,
    /// Capacity of each device.
    pub capacity_bytes: u64,
    /// The devices' class in the map (`hdd`, `ssd`).
    pub class: Option<String>,
    /// The devices' bandwidth attribute in the map, MB/s (attributed consistent hashing).
    pub bandwidth_mb_per_sec: Option<u64>,
    /// Its link to the rack's switch.
    pub link: Link,
    /// Emulated conditions.
    pub conditions: Conditions,
}

/// One rack: a switch (a bridge) with its hosts, and a link to the router.
#[derive(Clone, Debug, PartialEq)]
pub struct RackSpec {
    /// The rack's link to the router.
    pub uplink: Link,
    /// Its server hosts.
    pub hosts: Vec<HostSpec>,
    /// Its client-only hosts (namespaces with no server, for `optio nbd` and fio).
    pub clients: u32,
    /// The link of each client-only host.
    pub client_link: Link,
}

/// An emulated cluster.
#[derive(Clone, Debug, PartialEq)]
pub struct EmulationSpec {
    /// The racks.
    pub racks: Vec<RackSpec>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawLinks {
    host: Option<String>,
    rack: Option<String>,
    client: Option<String>,
    burst: Option<String>,
}

#[derive(Deserialize, Default, Clone)]
#[serde(deny_unknown_fields)]
struct RawHost {
    devices: Option<u32>,
    capacity: Option<String>,
    class: Option<String>,
    bandwidth: Option<String>,
    link: Option<String>,
    memory_limit: Option<String>,
    cpus: Option<f64>,
    cpu_hog: Option<bool>,
    device_read_rate: Option<String>,
    emulated_read_rate: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRack {
    hosts: u32,
    #[serde(default)]
    clients: Option<u32>,
    link: Option<String>,
    #[serde(default)]
    host: BTreeMap<String, toml::Spanned<RawHost>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    links: RawLinks,
    #[serde(default)]
    defaults: RawHost,
    racks: Vec<toml::Spanned<RawRack>>,
}

/// Why a text is not a rate.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RateError {
    /// The text does not start with a number.
    #[error("'{text}' is not a rate: write e.g. \"200mbit\" or \"25MB/s\"")]
    NotANumber {
        /// The text.
        text: String,
    },
    /// The unit is none of the known ones.
    #[error(
        "'{text}': unknown rate unit '{unit}'; use bit, kbit, mbit, gbit, B/s, KB/s, MB/s, GB/s, KiB/s, MiB/s or GiB/s"
    )]
    UnknownUnit {
        /// The text.
        text: String,
        /// The unit in it.
        unit: String,
    },
    /// Below 1 bit per second, or above what 64 bits hold.
    #[error("'{text}' is not a usable rate")]
    OutOfRange {
        /// The text.
        text: String,
    },
}

/// A rate: `200mbit`, `1gbit`, `800kbit`, `64000bit` (bits per second, powers of 1000), or
/// `25MB/s`, `10MiB/s`, `2GB/s` (bytes per second); returned in bits per second.
pub fn parse_rate_bits(text: &str) -> Result<u64, RateError> {
    let text = text.trim();
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 =
        number.parse().map_err(|_| RateError::NotANumber { text: text.to_string() })?;
    let multiplier: f64 = match unit.trim() {
        "bit" => 1.0,
        "kbit" => 1e3,
        "mbit" => 1e6,
        "gbit" => 1e9,
        "B/s" => 8.0,
        "KB/s" | "kB/s" => 8e3,
        "MB/s" => 8e6,
        "GB/s" => 8e9,
        "KiB/s" => 8.0 * 1024.0,
        "MiB/s" => 8.0 * 1024.0 * 1024.0,
        "GiB/s" => 8.0 * 1024.0 * 1024.0 * 1024.0,
        other => {
            return Err(RateError::UnknownUnit { text: text.to_string(), unit: other.to_string() });
        }
    };
    let bits = value * multiplier;
    if !bits.is_finite() || bits < 1.0 || bits > u64::MAX as f64 {
        return Err(RateError::OutOfRange { text: text.to_string() });
    }
    Ok(bits as u64)
}

/// `bits` per second as tc writes it (`200mbit`), exactly.
pub fn format_rate_bits(bits: u64) -> String {
    for (unit, size) in [("gbit", 1_000_000_000), ("mbit", 1_000_000), ("kbit", 1_000)] {
        if bits >= size && bits.is_multiple_of(size) {
            return format!("{}{unit}", bits / size);
        }
    }
    format!("{bits}bit")
}

/// A 1-based line number of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].bytes().filter(|b| *b == b'\n').count() + 1
}

impl EmulationSpec {
    /// Reads an emulation file's text; `file` names it in messages.
    pub fn parse(file: &str, text: &str) -> Result<EmulationSpec, EmulateError> {
        let raw: RawFile = toml::from_str(text).map_err(|error| EmulateError::Parse {
            file: file.to_string(),
            line: error.span().map(|span| line_of(text, span.start)),
            message: error.message().trim().to_string(),
        })?;
        let at = |line: Option<usize>, message: String| EmulateError::Parse {
            file: file.to_string(),
            line,
            message,
        };
        let rate = |value: &Option<String>, default: &str, key: &str, line: Option<usize>| {
            let text = value.as_deref().unwrap_or(default);
            let bits = parse_rate_bits(text).map_err(|e| at(line, format!("{key}: {e}")))?;
            if !(LINK_BITS_PER_SEC_MIN..=LINK_BITS_PER_SEC_MAX).contains(&bits) {
                return Err(at(
                    line,
                    format!(
                        "{key} = \"{text}\" is out of range: links run from {} to {}",
                        format_rate_bits(LINK_BITS_PER_SEC_MIN),
                        format_rate_bits(LINK_BITS_PER_SEC_MAX)
                    ),
                ));
            }
            Ok(bits)
        };
        let burst_text = raw.links.burst.as_deref().unwrap_or(BURST_DEFAULT);
        let burst_bytes = optio_mapfile::parse_size(burst_text)
            .map_err(|e| at(None, format!("links.burst: {e}")))?;
        if !(BURST_BYTES_MIN..=BURST_BYTES_MAX).contains(&burst_bytes) {
            return Err(at(
                None,
                format!(
                    "links.burst = \"{burst_text}\" is out of range: from {BURST_BYTES_MIN} to {BURST_BYTES_MAX} bytes"
                ),
            ));
        }
        let link = |bits_per_sec| Link { bits_per_sec, burst_bytes };
        let host_link = link(rate(&raw.links.host, HOST_LINK_DEFAULT, "links.host", None)?);
        let rack_link = link(rate(&raw.links.rack, RACK_LINK_DEFAULT, "links.rack", None)?);
        let client_default = raw.links.client.clone().or(raw.links.host.clone());
        let client_link = link(rate(&client_default, HOST_LINK_DEFAULT, "links.client", None)?);
        if raw.racks.is_empty() {
            return Err(at(
                None,
                "no [[racks]]: an emulated cluster needs at least one rack".into(),
            ));
        }
        if raw.racks.len() > RACKS_MAX {
            return Err(at(
                Some(line_of(text, raw.racks[RACKS_MAX].span().start)),
                format!("more than {RACKS_MAX} racks"),
            ));
        }
        let mut racks = Vec::new();
        for (r, spanned) in raw.racks.iter().enumerate() {
            let line = Some(line_of(text, spanned.span().start));
            let rack = spanned.get_ref();
            let key = |k: &str| format!("racks[{r}].{k}");
            if rack.hosts == 0 || rack.hosts > HOSTS_PER_RACK_MAX {
                return Err(at(
                    line,
                    format!(
                        "{}: {} is out of range 1 to {HOSTS_PER_RACK_MAX}",
                        key("hosts"),
                        rack.hosts
                    ),
                ));
            }
            let clients = rack.clients.unwrap_or(0);
            if clients > CLIENTS_PER_RACK_MAX {
                return Err(at(
                    line,
                    format!("{}: {clients} is more than {CLIENTS_PER_RACK_MAX}", key("clients")),
                ));
            }
            let uplink = match &rack.link {
                Some(_) => link(rate(&rack.link, RACK_LINK_DEFAULT, &key("link"), line)?),
                None => rack_link,
            };
            for (index, entry) in &rack.host {
                let valid = index.parse::<u32>().ok().filter(|i| (1..=rack.hosts).contains(i));
                if valid.is_none() {
                    return Err(at(
                        Some(line_of(text, entry.span().start)),
                        format!(
                            "[racks.host.{index}]: rack {} has hosts 1 to {}; name one of them",
                            r + 1,
                            rack.hosts
                        ),
                    ));
                }
            }
            let mut hosts = Vec::new();
            for h in 1..=rack.hosts {
                let entry = rack.host.get(&h.to_string());
                let line = entry.map(|e| line_of(text, e.span().start)).or(line);
                let over = entry.map(|e| e.get_ref().clone()).unwrap_or_default();
                let merged = merge(&raw.defaults, &over);
                let where_ = format!("racks[{r}].host.{h}");
                hosts.push(host(&merged, &where_, host_link, burst_bytes, |m| at(line, m))?);
            }
            racks.push(RackSpec { uplink, hosts, clients, client_link });
        }
        Ok(EmulationSpec { racks })
    }

    /// Every server host with its rack and index (both from 1), in rack order.
    pub fn servers(&self) -> impl Iterator<Item = (u32, u32, &HostSpec)> {
        self.racks.iter().enumerate().flat_map(|(r, rack)| {
            rack.hosts.iter().enumerate().map(move |(h, host)| (r as u32 + 1, h as u32 + 1, host))
        })
    }

    /// The spec as an emulation file (every host written out).
    pub fn to_toml(&self) -> String {
        let mut out = String::from("# An emulated cluster (docs/emulation.md).\n");
        let first = self.racks.first();
        if let Some(rack) = first {
            let host = rack.hosts.first().map_or(rack.client_link, |h| h.link);
            let _ = writeln!(
                out,
                "[links]\nhost = \"{}\"\nrack = \"{}\"\nclient = \"{}\"\nburst = \"{}\"",
                format_rate_bits(host.bits_per_sec),
                format_rate_bits(rack.uplink.bits_per_sec),
                format_rate_bits(rack.client_link.bits_per_sec),
                host.burst_bytes
            );
        }
        for rack in &self.racks {
            let _ = writeln!(
                out,
                "\n[[racks]]\nhosts = {}\nclients = {}\nlink = \"{}\"",
                rack.hosts.len(),
                rack.clients,
                format_rate_bits(rack.uplink.bits_per_sec)
            );
            for (h, host) in rack.hosts.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "[racks.host.{}]\ndevices = {}\ncapacity = \"{}\"\nlink = \"{}\"",
                    h + 1,
                    host.devices,
                    host.capacity_bytes,
                    format_rate_bits(host.link.bits_per_sec)
                );
                if let Some(class) = &host.class {
                    let _ = writeln!(out, "class = \"{class}\"");
                }
                if let Some(bandwidth) = host.bandwidth_mb_per_sec {
                    let _ = writeln!(out, "bandwidth = \"{bandwidth}MB/s\"");
                }
                let c = &host.conditions;
                if let Some(limit) = c.memory_limit_bytes {
                    let _ = writeln!(out, "memory_limit = \"{limit}\"");
                }
                if let Some(cpus) = c.cpus_milli {
                    let _ = writeln!(out, "cpus = {}", f64::from(cpus) / 1000.0);
                }
                if c.cpu_hog {
                    let _ = writeln!(out, "cpu_hog = true");
                }
                if let Some(rate) = c.device_read_bytes_per_sec {
                    let _ = writeln!(out, "device_read_rate = \"{rate}B/s\"");
                }
                if let Some(rate) = c.server_read_bytes_per_sec {
                    let _ = writeln!(out, "emulated_read_rate = \"{rate}B/s\"");
                }
            }
        }
        out
    }
}

/// `over`'s keys, else `defaults`'.
fn merge(defaults: &RawHost, over: &RawHost) -> RawHost {
    RawHost {
        devices: over.devices.or(defaults.devices),
        capacity: over.capacity.clone().or(defaults.capacity.clone()),
        class: over.class.clone().or(defaults.class.clone()),
        bandwidth: over.bandwidth.clone().or(defaults.bandwidth.clone()),
        link: over.link.clone().or(defaults.link.clone()),
        memory_limit: over.memory_limit.clone().or(defaults.memory_limit.clone()),
        cpus: over.cpus.or(defaults.cpus),
        cpu_hog: over.cpu_hog.or(defaults.cpu_hog),
        device_read_rate: over.device_read_rate.clone().or(defaults.device_read_rate.clone()),
        emulated_read_rate: over.emulated_read_rate.clone().or(defaults.emulated_read_rate.clone()),
    }
}

fn host(
    raw: &RawHost,
    where_: &str,
    host_link: Link,
    burst_bytes: u64,
    at: impl Fn(String) -> EmulateError,
) -> Result<HostSpec, EmulateError> {
    let devices = raw.devices.unwrap_or(1);
    if devices == 0 || devices > DEVICES_PER_HOST_MAX {
        return Err(at(format!(
            "{where_}.devices = {devices} is out of range 1 to {DEVICES_PER_HOST_MAX} (a client-only host is one of the rack's `clients`)"
        )));
    }
    let size = |value: &Option<String>, key: &str| -> Result<Option<u64>, EmulateError> {
        value
            .as_deref()
            .map(|text| {
                optio_mapfile::parse_size(text).map_err(|e| at(format!("{where_}.{key}: {e}")))
            })
            .transpose()
    };
    let capacity_bytes = size(&raw.capacity, "capacity")?.unwrap_or(16 << 30);
    if capacity_bytes == 0 {
        return Err(at(format!("{where_}.capacity must be positive")));
    }
    let link = match &raw.link {
        None => host_link,
        Some(text) => {
            let bits = parse_rate_bits(text).map_err(|e| at(format!("{where_}.link: {e}")))?;
            if !(LINK_BITS_PER_SEC_MIN..=LINK_BITS_PER_SEC_MAX).contains(&bits) {
                return Err(at(format!("{where_}.link = \"{text}\" is out of range")));
            }
            Link { bits_per_sec: bits, burst_bytes }
        }
    };
    let bandwidth_mb_per_sec = raw
        .bandwidth
        .as_deref()
        .map(|text| {
            parse_rate_bits(text)
                .map(|bits| (bits / 8_000_000).max(1))
                .map_err(|e| at(format!("{where_}.bandwidth: {e}")))
        })
        .transpose()?;
    let memory_limit_bytes = size(&raw.memory_limit, "memory_limit")?;
    if let Some(limit) = memory_limit_bytes
        && limit < MEMORY_LIMIT_BYTES_MIN
    {
        return Err(at(format!(
            "{where_}.memory_limit = {limit} bytes is below {} MiB: the server itself would not fit",
            MEMORY_LIMIT_BYTES_MIN >> 20
        )));
    }
    let cpus_milli = match raw.cpus {
        None => None,
        Some(cpus) if cpus.is_finite() && cpus > 0.0 && cpus <= CPUS_MAX => {
            Some(((cpus * 1000.0).round() as u32).max(CPUS_MILLI_MIN))
        }
        Some(cpus) => {
            return Err(at(format!(
                "{where_}.cpus = {cpus} is out of range: from 0.01 to {CPUS_MAX}"
            )));
        }
    };
    let cpu_hog = raw.cpu_hog.unwrap_or(false);
    if cpu_hog && cpus_milli.is_none() {
        return Err(at(format!(
            "{where_}.cpu_hog needs cpus (the host's CPU quota the hog and the server share, e.g. cpus = 0.5)"
        )));
    }
    let device_read_bytes_per_sec = raw
        .device_read_rate
        .as_deref()
        .map(|text| {
            parse_rate_bits(text)
                .map(|bits| bits / 8)
                .map_err(|e| at(format!("{where_}.device_read_rate: {e}")))
        })
        .transpose()?;
    if let Some(rate) = device_read_bytes_per_sec
        && rate < DEVICE_READ_BYTES_PER_SEC_MIN
    {
        return Err(at(format!(
            "{where_}.device_read_rate is below {} KiB/s",
            DEVICE_READ_BYTES_PER_SEC_MIN >> 10
        )));
    }
    if device_read_bytes_per_sec.is_some() && memory_limit_bytes.is_none() {
        return Err(at(format!(
            "{where_}.device_read_rate needs memory_limit: without one the page cache serves the reads and the device is never read"
        )));
    }
    let server_read_bytes_per_sec = raw
        .emulated_read_rate
        .as_deref()
        .map(|text| {
            parse_rate_bits(text)
                .map(|bits| bits / 8)
                .map_err(|e| at(format!("{where_}.emulated_read_rate: {e}")))
        })
        .transpose()?;
    if let Some(rate) = server_read_bytes_per_sec
        && rate < DEVICE_READ_BYTES_PER_SEC_MIN
    {
        return Err(at(format!(
            "{where_}.emulated_read_rate is below {} KiB/s",
            DEVICE_READ_BYTES_PER_SEC_MIN >> 10
        )));
    }
    Ok(HostSpec {
        devices,
        capacity_bytes,
        class: raw.class.clone(),
        bandwidth_mb_per_sec,
        link,
        conditions: Conditions {
            memory_limit_bytes,
            cpus_milli,
            cpu_hog,
            device_read_bytes_per_sec,
            server_read_bytes_per_sec,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_in_bits_and_bytes() {
        assert_eq!(parse_rate_bits("200mbit"), Ok(200_000_000));
        assert_eq!(parse_rate_bits("1.5gbit"), Ok(1_500_000_000));
        assert_eq!(parse_rate_bits("25MB/s"), Ok(200_000_000));
        assert_eq!(parse_rate_bits("1MiB/s"), Ok(8 * 1024 * 1024));
        assert_eq!(parse_rate_bits("fast"), Err(RateError::NotANumber { text: "fast".into() }));
        let unknown = parse_rate_bits("10 parsecs").unwrap_err();
        assert!(matches!(&unknown, RateError::UnknownUnit { unit, .. } if unit == "parsecs"));
        assert!(unknown.to_string().contains("unknown rate unit"), "{unknown}");
        assert!(matches!(parse_rate_bits("0.1bit"), Err(RateError::OutOfRange { .. })));
        assert_eq!(format_rate_bits(200_000_000), "200mbit");
        assert_eq!(format_rate_bits(1_500_000_000), "1500mbit");
        assert_eq!(format_rate_bits(12_345), "12345bit");
    }

    const GOOD: &str = r#"
[links]
host = "200mbit"
rack = "100mbit"

[defaults]
devices = 2

[[racks]]
hosts = 2
clients = 1

[racks.host.2]
memory_limit = "96MiB"
device_read_rate = "8MiB/s"
emulated_read_rate = "2MB/s"

[[racks]]
hosts = 1
link = "50mbit"
"#;

    #[test]
    fn a_file_reads_with_defaults_and_overrides() {
        let spec = EmulationSpec::parse("e.toml", GOOD).expect("valid");
        assert_eq!(spec.racks.len(), 2);
        assert_eq!(spec.racks[0].hosts.len(), 2);
        assert_eq!(spec.racks[0].clients, 1);
        assert_eq!(spec.racks[0].hosts[0].devices, 2);
        assert_eq!(spec.racks[0].hosts[1].conditions.memory_limit_bytes, Some(96 << 20));
        assert_eq!(spec.racks[0].hosts[1].conditions.device_read_bytes_per_sec, Some(8 << 20));
        assert_eq!(spec.racks[0].hosts[1].conditions.server_read_bytes_per_sec, Some(2_000_000));
        assert_eq!(spec.racks[0].uplink.bits_per_sec, 100_000_000);
        assert_eq!(spec.racks[1].uplink.bits_per_sec, 50_000_000);
        assert_eq!(spec.servers().count(), 3);
        let again = EmulationSpec::parse("again.toml", &spec.to_toml()).expect("round trip");
        assert_eq!(again, spec);
    }

    fn error(text: &str) -> String {
        EmulationSpec::parse("e.toml", text).expect_err("invalid").to_string()
    }

    #[test]
    fn mistakes_name_the_file_the_line_and_what_to_do() {
        let message = error("[[racks]]\nhosts = 2\nbogus = 1\n");
        assert!(message.starts_with("e.toml:3:"), "{message}");
        assert!(message.contains("bogus"), "{message}");
        let message = error("[[racks]]\nhosts = 2\n[racks.host.3]\ncpus = 1\n");
        assert!(message.starts_with("e.toml:3:"), "{message}");
        assert!(message.contains("hosts 1 to 2"), "{message}");
        let message = error("[[racks]]\nhosts = 1\n[racks.host.1]\ncpu_hog = true\n");
        assert!(message.contains("needs cpus"), "{message}");
        let message =
            error("[[racks]]\nhosts = 1\n[racks.host.1]\ndevice_read_rate = \"1MiB/s\"\n");
        assert!(message.contains("needs memory_limit"), "{message}");
        let message = error("[links]\nhost = \"12 furlongs\"\n[[racks]]\nhosts = 1\n");
        assert!(message.contains("unknown rate unit"), "{message}");
        let message = error("[links]\nhost = \"10kbit\"\n[[racks]]\nhosts = 1\n");
        assert!(message.contains("out of range"), "{message}");
        let message = error("[[racks]]\nhosts = 0\n");
        assert!(message.starts_with("e.toml:1:"), "{message}");
        assert!(error("").contains("racks"));
        let message = error("[[racks]]\nhosts = 1\n[racks.host.1]\nmemory_limit = \"1MiB\"\n");
        assert!(message.contains("would not fit"), "{message}");
        let message = error("[[racks]\n");
        assert!(message.starts_with("e.toml:1:"), "{message}");
    }
}
