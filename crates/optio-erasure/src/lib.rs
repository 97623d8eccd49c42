//! # optio-erasure
//!
//! Erasure coding for Optio's erasure-coded pools, with no I/O: a [`Profile`] (`K+M` and a
//! stripe unit), the [`Layout`] of an object over its chunks, [`encode`] into K + M chunks,
//! [`decode`] from any K of them, [`reconstruct`] of lost chunks for repair, reads of a byte
//! range from the data chunks alone ([`read_range`]), parity updates for a rewritten stripe
//! unit ([`parity_delta`], [`apply_delta`]), and the chunk format ([`Chunk`]) that disks and
//! the network carry.
//!
//! Design decisions:
//!
//! * **Reed–Solomon by `reed-solomon-simd`** (GF(2^16), Leopard-RS's O(n log n) FFT, SIMD on
//!   x86-64 and AArch64). Any K intact chunks rebuild the object; K + M is capped at
//!   [`CHUNKS_MAX`] (32), each chunk going to its own failure domain.
//! * **Striped layout.** An object is cut into stripes of K stripe units (64 KiB by
//!   default); data chunk `i` holds unit `i` of every stripe, so a small range of the object
//!   lives in one data chunk and reads without decoding, and a small rewrite touches one data
//!   unit and the parity units of its stripe. Stripe units are whole 64-byte blocks, which
//!   makes coding an object, a stripe or one unit give the same bytes at the same offsets.
//! * **Every chunk is checked.** A chunk carries a 32-byte header (magic, format version, K,
//!   M, index, stripe unit, object length, crc32c of the data, crc32c of the header); parsing
//!   checks every field and the data's size before anything is indexed, and allocates
//!   nothing. Reads verify the data's checksum: a corrupt chunk counts as missing and is
//!   reported for repair; fewer than K intact chunks is [`Error::TooFewChunks`], never wrong
//!   bytes. Chunks of different profiles or objects are refused, not mixed.
//! * **Errors are values.** Bad profiles, bytes and arguments give errors that say what and
//!   what to do; nothing here panics on input.
//!
//! ```
//! use optio_erasure::{Chunk, Profile, decode, decode_stored, encode, reconstruct};
//!
//! let profile: Profile = "4+2".parse().expect("a valid profile");
//! let object: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
//! let chunks = encode(profile, &object).expect("encodes");
//! assert_eq!(chunks.len(), 6);
//!
//! // Lose two chunks: any four give the object back, and say what to repair.
//! let mut slots: Vec<_> = chunks.iter().map(|chunk| Some(chunk.view())).collect();
//! slots[1] = None;
//! slots[4] = None;
//! let decoded = decode(profile, &slots).expect("four chunks are enough");
//! assert_eq!(decoded.object, object);
//! assert_eq!(decoded.to_repair(), vec![1, 4]);
//! let rebuilt = reconstruct(profile, &slots, &decoded.to_repair()).expect("rebuilds");
//! assert_eq!(rebuilt[0], chunks[1]);
//!
//! // On disk: a flipped bit makes a chunk damaged, not a wrong answer.
//! let mut stored: Vec<Vec<u8>> = chunks.iter().map(Chunk::to_bytes).collect();
//! stored[0][100] ^= 1;
//! let slots: Vec<Option<&[u8]>> = stored.iter().map(|bytes| Some(&bytes[..])).collect();
//! let decoded = decode_stored(profile, &slots).expect("five intact chunks");
//! assert_eq!((decoded.object == object, decoded.damaged), (true, vec![0]));
//! ```

#![forbid(unsafe_code)]
#![warn(clippy::cast_possible_truncation)]
#![deny(missing_docs)]

mod chunk;
mod codec;
mod delta;
mod error;
mod layout;
mod profile;

pub use chunk::{
    CHUNK_FORMAT_VERSION, CHUNK_HEADER_BYTES, CHUNK_MAGIC, Chunk, ChunkError, ChunkHeader, ChunkRef,
};
pub use codec::{
    DECODE_SEGMENT_BYTES, Decoded, ENCODE_SEGMENT_BYTES, decode, decode_stored, encode, read_range,
    reconstruct,
};
pub use delta::{ParityDelta, apply_delta, parity_delta};
pub use error::Error;
pub use layout::{Extent, Layout, LayoutError, OBJECT_BYTES_MAX};
pub use profile::{
    CHUNKS_MAX, DEFAULT_STRIPE_UNIT, Profile, ProfileError, STRIPE_UNIT_ALIGN_BYTES,
    STRIPE_UNIT_MAX_BYTES,
};
