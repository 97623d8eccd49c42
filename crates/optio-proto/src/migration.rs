//! What a server reports about its rebalancing: `optio status` shows it, and clients use it
//! to know when every server has finished moving data for an epoch (until then they read
//! carefully, comparing versions across the old and new placements).

use serde::{Deserialize, Serialize};

/// Where a server stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MigrationPhase {
    /// No map yet.
    #[default]
    Starting,
    /// Working out what to move.
    Planning,
    /// Moving.
    Moving,
    /// Some transfers failed (a target unreachable or full); retrying.
    Retrying,
    /// Everything this server holds is where the map of `epoch` places it.
    Done,
}

impl MigrationPhase {
    /// Every phase, in the order a round goes through them.
    pub const ALL: [MigrationPhase; 5] = [
        MigrationPhase::Starting,
        MigrationPhase::Planning,
        MigrationPhase::Moving,
        MigrationPhase::Retrying,
        MigrationPhase::Done,
    ];

    /// Its name (as in JSON): `starting`, `planning`, `moving`, `retrying`, `done`.
    pub fn name(self) -> &'static str {
        match self {
            MigrationPhase::Starting => "starting",
            MigrationPhase::Planning => "planning",
            MigrationPhase::Moving => "moving",
            MigrationPhase::Retrying => "retrying",
            MigrationPhase::Done => "done",
        }
    }
}

/// A server's migration progress, for `optio status` (and `/v1/status`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MigrationStatus {
    /// The epoch being rebalanced to (or done).
    pub epoch: u64,
    /// Where the server stands.
    pub phase: MigrationPhase,
    /// Copies (objects and tombstones) this round must send or check, and their bytes.
    pub copies_planned: u64,
    /// Bytes this round may send at most.
    pub bytes_planned: u64,
    /// Copies of this epoch handled (sent, or found already there).
    pub copies_done: u64,
    /// Bytes of this epoch sent.
    pub bytes_moved: u64,
    /// Copies this server dropped (no longer placed here) for this epoch.
    pub copies_removed: u64,
    /// Choice records moved to their new home for this epoch.
    pub records_moved: u64,
    /// Copies still to handle.
    pub remaining_copies: u64,
    /// Bytes still to send, at most.
    pub remaining_bytes: u64,
    /// Transfers that failed this round (retried).
    pub failures: u64,
    /// Send rate over the last seconds, bytes per second.
    pub rate_bytes_per_sec: u64,
    /// Seconds until done at that rate.
    pub eta_seconds: Option<u64>,
    /// The last failure.
    pub last_error: Option<String>,
    /// Bytes sent since the server started, all epochs.
    pub total_bytes_moved: u64,
    /// Copies sent since the server started, all epochs.
    pub total_copies_moved: u64,
    /// Milliseconds since the Unix epoch of this report.
    pub updated_unix_ms: u64,
}

impl MigrationStatus {
    /// Whether this server is done with epoch `epoch` (or a later one).
    pub fn settled_at(&self, epoch: u64) -> bool {
        self.epoch >= epoch && self.phase == MigrationPhase::Done
    }
}
