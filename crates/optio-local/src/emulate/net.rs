//! The emulated network, built with iproute2 (`ip`, `tc`): a router namespace, one namespace
//! per rack holding the rack's switch (a bridge), one per host. Every link is a veth pair with
//! a `tc tbf` qdisc on each end's egress, so it is rate-limited in both directions:
//!
//! ```text
//! host ns: eth0 ──veth── rack ns: hN ─┐
//!                                      br0 ── uplink ──veth── router ns: rackR (10.O.R.1)
//! host ns: eth0 ──veth── rack ns: hM ─┘
//! ```
//!
//! Every interface lives inside a namespace the emulation created; the machine's own
//! namespace gets none, and nothing outside the machine is ever addressed (10.O.R.H, with the
//! second octet O unique among live emulations).

use std::net::Ipv4Addr;
use std::process::Command;

use super::error::EmulateError;
use super::spec::Link;

/// The tbf queue's bound, as the time a packet may wait (tc's `latency`).
const TBF_LATENCY: &str = "100ms";

/// Runs `program args`, failing with its standard error.
pub fn run(program: &str, args: &[&str]) -> Result<String, EmulateError> {
    let output = Command::new(program).args(args).output().map_err(|source| EmulateError::Io {
        what: format!("cannot run {program} (is iproute2 installed?)"),
        source,
    })?;
    if !output.status.success() {
        return Err(EmulateError::Command {
            command: format!("{program} {}", args.join(" ")),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// `ip -n NS args…`.
fn ip_in(ns: &str, args: &[&str]) -> Result<(), EmulateError> {
    let mut all = vec!["-n", ns];
    all.extend_from_slice(args);
    run("ip", &all).map(|_| ())
}

/// Puts (or changes) the tbf qdisc of `dev` in `ns` to `link`'s rate.
pub fn shape(ns: &str, dev: &str, link: Link) -> Result<(), EmulateError> {
    let rate = format!("{}bit", link.bits_per_sec);
    let burst = link.burst_bytes.to_string();
    run(
        "tc",
        &[
            "-n",
            ns,
            "qdisc",
            "replace",
            "dev",
            dev,
            "root",
            "tbf",
            "rate",
            &rate,
            "burst",
            &burst,
            "latency",
            TBF_LATENCY,
        ],
    )
    .map(|_| ())
}

/// Bytes the tbf qdisc of `dev` in `ns` sent (its counter).
pub fn sent_bytes(ns: &str, dev: &str) -> Result<u64, EmulateError> {
    let text = run("tc", &["-n", ns, "-s", "-j", "qdisc", "show", "dev", dev])?;
    let qdiscs: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| EmulateError::Command {
            command: format!("tc -s -j qdisc show dev {dev}"),
            stderr: e.to_string(),
        })?;
    qdiscs
        .as_array()
        .into_iter()
        .flatten()
        .find(|q| q["kind"] == "tbf")
        .and_then(|q| q["bytes"].as_u64())
        .ok_or_else(|| EmulateError::Command {
            command: format!("tc -n {ns} -s qdisc show dev {dev}"),
            stderr: format!("no tbf qdisc on {dev}: {text}"),
        })
}

/// Creates network namespace `name` with its loopback up.
pub fn add_namespace(name: &str) -> Result<(), EmulateError> {
    run("ip", &["netns", "add", name])?;
    ip_in(name, &["link", "set", "lo", "up"])
}

/// The router: forwarding on.
pub fn make_router(ns: &str) -> Result<(), EmulateError> {
    let path = format!("--net=/run/netns/{ns}");
    run("nsenter", &[&path, "sysctl", "-qw", "net.ipv4.ip_forward=1"]).map(|_| ())
}

/// A rack: its switch, and its uplink to the router with the router's address on the rack's
/// subnet.
pub fn make_rack(
    rack_ns: &str,
    router_ns: &str,
    router_dev: &str,
    gateway: Ipv4Addr,
    uplink: Link,
) -> Result<(), EmulateError> {
    ip_in(rack_ns, &["link", "add", "br0", "type", "bridge"])?;
    ip_in(rack_ns, &["link", "set", "br0", "up"])?;
    run(
        "ip",
        &[
            "link", "add", "uplink", "netns", rack_ns, "type", "veth", "peer", "name", router_dev,
            "netns", router_ns,
        ],
    )?;
    ip_in(rack_ns, &["link", "set", "uplink", "master", "br0", "up"])?;
    ip_in(router_ns, &["addr", "add", &format!("{gateway}/24"), "dev", router_dev])?;
    ip_in(router_ns, &["link", "set", router_dev, "up"])?;
    shape(rack_ns, "uplink", uplink)?;
    shape(router_ns, router_dev, uplink)
}

/// A host: `eth0` in its namespace at `addr`, its port `port` on the rack's switch, the
/// router as its default gateway.
pub fn make_host(
    host_ns: &str,
    rack_ns: &str,
    port: &str,
    addr: Ipv4Addr,
    gateway: Ipv4Addr,
    link: Link,
) -> Result<(), EmulateError> {
    run(
        "ip",
        &[
            "link", "add", "eth0", "netns", host_ns, "type", "veth", "peer", "name", port, "netns",
            rack_ns,
        ],
    )?;
    ip_in(rack_ns, &["link", "set", port, "master", "br0", "up"])?;
    ip_in(host_ns, &["addr", "add", &format!("{addr}/24"), "dev", "eth0"])?;
    ip_in(host_ns, &["link", "set", "eth0", "up"])?;
    ip_in(host_ns, &["route", "add", "default", "via", &gateway.to_string()])?;
    shape(host_ns, "eth0", link)?;
    shape(rack_ns, port, link)
}
