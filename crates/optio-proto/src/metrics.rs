//! The metrics a server measures per device and piggybacks on every answer (CHOICE's
//! "simple server": a probe answers "exists?" and carries the metrics).

use serde::{Deserialize, Serialize};

use crate::wire::{percent_decode, percent_encode};

/// One device's metrics, as a server measured them. Utilisations are per mille (0..=1000).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceMetrics {
    /// The device.
    pub device: u32,
    /// CPU utilisation of the server's machine (or its cgroup's quota), per mille.
    pub cpu_permille: u16,
    /// Memory utilisation of the machine (or its cgroup's limit), per mille.
    pub memory_permille: u16,
    /// Space used against the device's configured capacity, per mille.
    pub space_permille: u16,
    /// Bytes stored.
    pub used_bytes: u64,
    /// Configured capacity.
    pub capacity_bytes: u64,
    /// Recent service time (exponentially weighted moving average), microseconds.
    pub latency_us: u64,
    /// Bytes received for writes and not yet durable.
    pub unflushed_bytes: u64,
    /// The device's location path in the map, root first (`zone=z1/host=z1-h1`).
    pub location: String,
}

impl DeviceMetrics {
    /// Whether the device cannot take `bytes` more.
    pub fn is_full_for(&self, bytes: u64) -> bool {
        self.used_bytes.saturating_add(bytes) > self.capacity_bytes
    }

    /// The compact form carried in the `x-optio-metrics` header.
    pub fn to_header(&self) -> String {
        format!(
            "d={};cpu={};mem={};space={};used={};cap={};lat={};unfl={};loc={}",
            self.device,
            self.cpu_permille,
            self.memory_permille,
            self.space_permille,
            self.used_bytes,
            self.capacity_bytes,
            self.latency_us,
            self.unflushed_bytes,
            percent_encode(&self.location),
        )
    }

    /// Parses [`to_header`](Self::to_header)'s form; unknown fields are ignored (newer
    /// servers may add some), missing ones are 0.
    pub fn from_header(text: &str) -> Option<DeviceMetrics> {
        let mut m = DeviceMetrics::default();
        let mut device = None;
        for field in text.split(';') {
            let (name, value) = field.split_once('=')?;
            match name {
                "d" => device = Some(value.parse().ok()?),
                "cpu" => m.cpu_permille = value.parse().ok()?,
                "mem" => m.memory_permille = value.parse().ok()?,
                "space" => m.space_permille = value.parse().ok()?,
                "used" => m.used_bytes = value.parse().ok()?,
                "cap" => m.capacity_bytes = value.parse().ok()?,
                "lat" => m.latency_us = value.parse().ok()?,
                "unfl" => m.unflushed_bytes = value.parse().ok()?,
                "loc" => m.location = String::from_utf8(percent_decode(value)?).ok()?,
                _ => {}
            }
        }
        m.device = device?;
        Some(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip() {
        let m = DeviceMetrics {
            device: 7,
            cpu_permille: 123,
            memory_permille: 456,
            space_permille: 789,
            used_bytes: 1 << 40,
            capacity_bytes: 2 << 40,
            latency_us: 95,
            unflushed_bytes: 4096,
            location: "zone=z 1/host=h;é".into(),
        };
        let text = m.to_header();
        assert!(text.bytes().all(|b| b.is_ascii_graphic()), "{text}");
        assert_eq!(DeviceMetrics::from_header(&text), Some(m));
        assert_eq!(DeviceMetrics::from_header("cpu=1"), None, "the device is required");
    }
}
