//! One dirty object.

/// One dirty object: written in `version` while the pool was not at full power.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DirtyEntry {
    /// The object's pool.
    pub pool: u32,
    /// The object's key: non-empty UTF-8 of at most [`KEY_BYTES_MAX`](super::KEY_BYTES_MAX) bytes, without NUL.
    pub key: String,
    /// The membership version the object was written in.
    pub version: u64,
}
