//! The client's errors.

use optio_proto::{ErrorKind, KeyError};

/// Why a client operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The cluster map could not be loaded.
    #[error("cannot load the cluster map {path}: {reason}")]
    Map {
        /// The map file.
        path: String,
        /// Why.
        reason: String,
    },
    /// No such pool in the map.
    #[error("no pool '{pool}' in the map; pools are: {known}")]
    NoPool {
        /// The pool asked for.
        pool: String,
        /// The pools there are.
        known: String,
    },
    /// The pool is erasure-coded, and the operation serves replicated pools only.
    #[error(
        "pool '{pool}' is erasure-coded ({profile}); this operation serves replicated pools only \
         (erasure-coded pools take whole-object put, get and rm: docs/erasure.md)"
    )]
    ErasureNotServed {
        /// The pool.
        pool: String,
        /// Its profile, `K+M`.
        profile: String,
    },
    /// A key an erasure-coded pool cannot take.
    #[error("bad key '{key}' for an erasure-coded pool: it {reason}")]
    ErasureKey {
        /// The key.
        key: String,
        /// Why.
        reason: String,
    },
    /// Fewer than `min_size` chunks of an erasure-coded object were durable.
    #[error(
        "'{key}': only {acked} of {chunks} chunks were written, and the pool needs {needed} \
         (min_size); the previous version stays readable: {failures}"
    )]
    NotEnoughChunks {
        /// Key.
        key: String,
        /// Chunks durable.
        acked: usize,
        /// The pool's min_size.
        needed: usize,
        /// K + M.
        chunks: usize,
        /// What the others answered.
        failures: String,
    },
    /// No version of an erasure-coded object could be decoded.
    #[error("cannot read '{key}': {reason}")]
    Undecodable {
        /// Key.
        key: String,
        /// What each chunk's device had.
        reason: String,
    },
    /// A byte range outside the object.
    #[error("bad range for '{key}': {reason}")]
    BadRange {
        /// Key.
        key: String,
        /// The range and the object's size.
        reason: String,
    },
    /// The key is not valid.
    #[error("bad key: {0}")]
    BadKey(#[from] KeyError),
    /// No such object.
    #[error("no object '{key}' in pool '{pool}'")]
    NotFound {
        /// Pool.
        pool: String,
        /// Key.
        key: String,
    },
    /// No candidate of a new object has room.
    #[error("no candidate of '{key}' has room for {size_bytes} bytes: {details}")]
    NoRoom {
        /// Key.
        key: String,
        /// Object size.
        size_bytes: u64,
        /// What each candidate answered.
        details: String,
    },
    /// The object is larger than the servers take.
    #[error("'{key}' is too large: {reason}")]
    TooLarge {
        /// Key.
        key: String,
        /// The server's reason.
        reason: String,
    },
    /// A device has no address in the map.
    #[error("device {device} has no address in the map (is the cluster running? `optio up`)")]
    NoAddress {
        /// The device.
        device: u32,
    },
    /// The pool's placement gave no devices (all down or out).
    #[error("no device is available for '{key}' (all of its devices are down or out)")]
    NoDevices {
        /// Key.
        key: String,
    },
    /// The home of an object could not be reached to record a choice.
    #[error(
        "cannot record the choice for '{key}': its home device {device} at {addr} is unreachable: {reason}"
    )]
    HomeUnreachable {
        /// Key.
        key: String,
        /// Home device.
        device: u32,
        /// Its address.
        addr: String,
        /// Why.
        reason: String,
    },
    /// A server refused the request's signature or capability (401/403).
    #[error("'{key}': device {device} refused the request: {reason} (check --id and --keyring)")]
    Denied {
        /// Key.
        key: String,
        /// The device.
        device: u32,
        /// The server's reason.
        reason: String,
    },
    /// No replica of a candidate answered, so a new object cannot be placed safely (that
    /// candidate may hold it).
    #[error(
        "cannot create '{key}': no replica of its candidate {candidate} (devices {devices:?}) answers, and it may already hold the object"
    )]
    CandidateUnreachable {
        /// Key.
        key: String,
        /// The candidate.
        candidate: u8,
        /// Its devices.
        devices: Vec<u32>,
    },
    /// Fewer replicas than needed acknowledged a write.
    #[error("'{key}': only {acked} of {needed} replicas acknowledged the write: {failures}")]
    NotEnoughReplicas {
        /// Key.
        key: String,
        /// Replicas that acknowledged.
        acked: usize,
        /// Replicas needed (w).
        needed: usize,
        /// What the others answered.
        failures: String,
    },
    /// A write in place meant to create an object found it there already.
    #[error("'{key}' exists already; it is written whole instead")]
    Exists {
        /// Key.
        key: String,
    },
    /// A compare-and-swap found another version than the one it was based on.
    #[error("'{key}' changed meanwhile (another writer)")]
    Changed {
        /// Key.
        key: String,
    },
    /// No replica could be read.
    #[error("cannot read '{key}' from any replica: {failures}")]
    Unreadable {
        /// Key.
        key: String,
        /// What each replica answered.
        failures: String,
    },
    /// A server refused the request.
    #[error("device {device} refused: {kind:?}: {reason}")]
    Refused {
        /// Device.
        device: u32,
        /// Error kind.
        kind: ErrorKind,
        /// The server's reason.
        reason: String,
    },
    /// The map kept changing under the operation.
    #[error("{}", epoch_retries_reason(*attempts))]
    EpochRetries {
        /// Attempts made (0: one attempt found the map changed, and the operation is to be
        /// started again by its caller).
        attempts: usize,
    },
    /// The intent log could not be written.
    #[error("cannot write the intent log: {0}")]
    IntentLog(#[source] std::io::Error),
    /// The configuration is invalid.
    #[error("invalid client configuration: {0}")]
    Config(String),
    /// The transport could not be built from the configuration (its TLS files, say).
    #[error("invalid client configuration: {0}")]
    Transport(#[from] optio_net::TransportError),
    /// A write to an elastic pool that is not at full power could not be recorded in the
    /// dirty table, so it was not sent (its offloaded replicas would never be re-integrated).
    #[error(
        "'{key}' was not written: pool '{pool}' is not at full power (membership version {version}), and its write could not be recorded in the dirty table: {reason}"
    )]
    Dirty {
        /// Key.
        key: String,
        /// Pool.
        pool: String,
        /// The membership version in force.
        version: u64,
        /// Why.
        reason: String,
    },
    /// No candidate can take a new object, and not (only) for lack of room: some of their
    /// devices do not answer.
    #[error("cannot place '{key}': {details}")]
    NoCandidate {
        /// Key.
        key: String,
        /// Each candidate and why it was passed over.
        details: String,
    },
    /// The key's home holds a choice record that names no candidate of the pool.
    #[error(
        "the home (device {device}) of '{key}' holds a choice record for candidate {candidate}, but the pool has {choices} candidate(s): remove the record (it was not written by this map's clients) and retry"
    )]
    BadRecord {
        /// Key.
        key: String,
        /// The home device.
        device: u32,
        /// The candidate the record names.
        candidate: u8,
        /// The pool's candidates.
        choices: usize,
    },
}

impl ClientError {
    /// The error for a new object no candidate could take: [`ClientError::NoRoom`] when every
    /// candidate is full, [`ClientError::NoCandidate`] when some do not answer (a server down
    /// is not a lack of room).
    pub(crate) fn no_choice(
        key: &str,
        size_bytes: u64,
        error: optio_placement::choice::ChoiceError,
    ) -> ClientError {
        let all_full = matches!(
            &error,
            optio_placement::choice::ChoiceError::NoCandidate { excluded, .. }
                if !excluded.is_empty() && excluded.iter().all(|(_, why)| why.is_full())
        );
        if all_full {
            ClientError::NoRoom { key: key.to_string(), size_bytes, details: error.to_string() }
        } else {
            ClientError::NoCandidate { key: key.to_string(), details: error.to_string() }
        }
    }
}

/// [`ClientError::EpochRetries`]'s message: an attempt that saw the map change once is not
/// said to have been tried "0 times".
fn epoch_retries_reason(attempts: usize) -> String {
    match attempts {
        0 | 1 => "the map epoch changed during the operation; try again".to_string(),
        n => format!("the map epoch kept changing ({n} attempts); try again"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epoch_retries_count_attempts_only_when_there_were_several() {
        let once = ClientError::EpochRetries { attempts: 0 }.to_string();
        assert_eq!(once, "the map epoch changed during the operation; try again");
        assert!(!once.contains('0'));
        let many = ClientError::EpochRetries { attempts: 8 }.to_string();
        assert_eq!(many, "the map epoch kept changing (8 attempts); try again");
    }
}
