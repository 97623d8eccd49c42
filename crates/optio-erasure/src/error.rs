//! Why an object cannot be encoded, decoded, repaired or updated.

use crate::chunk::ChunkError;
use crate::layout::LayoutError;
use crate::profile::Profile;

/// Why a codec operation failed. Missing and corrupt chunks are not errors by themselves: a
/// read counts them and reports them for repair, and fails only when fewer than K are left.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Fewer than K chunks are present and intact.
    #[error(
        "only {have} intact chunks, {need} are needed to rebuild the object (missing: \
         {missing:?}, damaged: {damaged:?}); bring back the devices holding the others, or \
         the object is lost"
    )]
    TooFewChunks {
        /// Chunks present and intact.
        have: u8,
        /// Chunks needed: K.
        need: u8,
        /// Indices not given.
        missing: Vec<u8>,
        /// Indices given but failing their checksum.
        damaged: Vec<u8>,
    },
    /// The chunk slots given are not K + M (one per chunk index, `None` where absent).
    #[error("{given} chunk slots given, a {profile} profile has {chunks}: one per chunk index")]
    SlotCount {
        /// Slots given.
        given: usize,
        /// The profile.
        profile: Profile,
        /// K + M.
        chunks: u8,
    },
    /// A chunk's header names another profile than the one read with.
    #[error(
        "chunk {index} was coded {found} with a {found_unit}-byte stripe unit, the read \
         expects {expected} with a {expected_unit}-byte stripe unit: it belongs to another \
         pool or object"
    )]
    ProfileMismatch {
        /// The chunk's index.
        index: u8,
        /// The profile read with.
        expected: Profile,
        /// Its stripe unit.
        expected_unit: u32,
        /// The chunk's profile.
        found: Profile,
        /// The chunk's stripe unit.
        found_unit: u32,
    },
    /// A chunk was given in another chunk's slot.
    #[error("slot {slot} holds chunk {index}: give each chunk at the position of its index")]
    WrongSlot {
        /// The slot.
        slot: usize,
        /// The chunk's index.
        index: u8,
    },
    /// Two chunks disagree on the object's length: they come from different objects or
    /// different versions of one.
    #[error(
        "chunk {first} is of an object of {first_bytes} bytes, chunk {second} of one of \
         {second_bytes} bytes: chunks of different objects (or versions) cannot be mixed"
    )]
    ObjectMismatch {
        /// One chunk's index.
        first: u8,
        /// Its object length.
        first_bytes: u64,
        /// The other chunk's index.
        second: u8,
        /// Its object length.
        second_bytes: u64,
    },
    /// A chunk index asked for is not below K + M, or is asked for twice.
    #[error("chunk index {index} cannot be rebuilt: indices are 0..{chunks}, each named once")]
    BadIndex {
        /// The index.
        index: u8,
        /// K + M.
        chunks: u8,
    },
    /// A range read needs a data chunk that is absent or fails its checksum.
    #[error(
        "data chunk {index}, needed for this range, is {state}; decode the object from any K \
         chunks instead"
    )]
    ChunkUnavailable {
        /// The chunk's index.
        index: u8,
        /// `"missing"` or `"damaged"`.
        state: &'static str,
    },
    /// A parity update was asked for a chunk that is not a data chunk.
    #[error("chunk {index} is not a data chunk of a {profile} profile (data chunks are 0..{k})")]
    NotDataChunk {
        /// The index given.
        index: u8,
        /// The profile.
        profile: Profile,
        /// K.
        k: u8,
    },
    /// A parity update's old and new bytes differ in length, are empty or not a multiple of
    /// the stripe-unit alignment.
    #[error(
        "old and new bytes of a parity update are {old} and {new} bytes: they must be the \
         same positive multiple of {align} bytes"
    )]
    DeltaSize {
        /// Length of the old bytes.
        old: usize,
        /// Length of the new bytes.
        new: usize,
        /// [`crate::STRIPE_UNIT_ALIGN_BYTES`].
        align: u32,
    },
    /// Parity buffers handed to [`crate::apply_delta`] do not match the delta.
    #[error(
        "{given} parity buffers of {given_bytes:?} bytes given for a delta of {parity} units of \
         {bytes} bytes: pass each parity chunk's bytes at the updated offset"
    )]
    DeltaShape {
        /// Buffers given.
        given: usize,
        /// Their lengths.
        given_bytes: Vec<usize>,
        /// Parity units in the delta: M.
        parity: usize,
        /// Bytes of each.
        bytes: usize,
    },
    /// A byte range or object length the layout cannot place.
    #[error(transparent)]
    Layout(#[from] LayoutError),
    /// A chunk could not be made (an internal inconsistency, reported rather than panicking).
    #[error(transparent)]
    Chunk(#[from] ChunkError),
}
