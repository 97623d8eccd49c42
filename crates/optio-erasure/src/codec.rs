//! Encoding an object into K + M chunks, and getting it (or lost chunks) back from any K.
//!
//! Reed–Solomon over GF(2^16) by `reed-solomon-simd` (Leopard-RS's FFT algorithm,
//! O(n log n) in the number of shards). Because every stripe unit is a whole number of the
//! codec's 64-byte blocks and the code acts on each symbol position independently, coding
//! the K data chunks as K shards of `stripes × unit` bytes gives exactly the parity of coding
//! each stripe on its own: the chunks are coded in segments of whatever size runs fastest
//! ([`ENCODE_SEGMENT_BYTES`], [`DECODE_SEGMENT_BYTES`]), and a stripe (or a unit, see
//! [`crate::parity_delta`]) can still be coded alone.

use std::borrow::Cow;

use reed_solomon_simd::{ReedSolomonDecoder, ReedSolomonEncoder};

use crate::chunk::{Chunk, ChunkRef};
use crate::error::Error;
use crate::layout::Layout;
use crate::profile::Profile;

/// Bytes of each chunk encoded in one call of the codec. The codec's passes run over whole
/// shards, so encoding a 4 MiB object's 1 MiB chunks in one call streams K + M megabytes
/// through every pass; cutting the chunks into segments (the code acts on each 64-byte
/// block position independently, so the bytes are the same) keeps a call's working set in
/// the core's cache. Measured against whole chunks in docs/benchmarks.md ("Erasure coding
/// codec").
pub const ENCODE_SEGMENT_BYTES: usize = 32 << 10;

/// Bytes of each chunk decoded in one call. Decoding has a fixed cost per call (the erasure
/// locator, a transform over all 2^16 field elements), which 32 KiB segments paid 32 times
/// per megabyte (decoding 2.1× slower than one call per chunk, measured); 1 MiB amortises
/// it and bounds the decoder's work memory for large objects.
pub const DECODE_SEGMENT_BYTES: usize = 1 << 20;

/// An object read back, and what the read found wrong with its chunks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decoded {
    /// The object's bytes.
    pub object: Vec<u8>,
    /// Chunk indices that were not given.
    pub missing: Vec<u8>,
    /// Chunk indices given whose data failed its checksum (or, for [`decode_stored`], whose
    /// bytes did not parse): to be rewritten by [`reconstruct`].
    pub damaged: Vec<u8>,
}

impl Decoded {
    /// The chunks to rebuild to make the object whole again: missing and damaged, sorted.
    pub fn to_repair(&self) -> Vec<u8> {
        let mut indices: Vec<u8> = self.missing.iter().chain(&self.damaged).copied().collect();
        indices.sort_unstable();
        indices
    }
}

/// Encodes `object` into its K + M chunks, in index order: K data chunks, then M parity.
pub fn encode(profile: Profile, object: &[u8]) -> Result<Vec<Chunk>, Error> {
    let layout = Layout::new(profile, object.len() as u64)?;
    let data = split_into_data_chunks(&layout, object);
    let parity = encode_parity(profile, &data);
    let object_bytes = layout.object_bytes();
    let mut chunks = Vec::with_capacity(usize::from(profile.chunks()));
    for (index, bytes) in (0u8..).zip(data.into_iter().chain(parity)) {
        chunks.push(Chunk::new(profile, index, object_bytes, bytes)?);
    }
    Ok(chunks)
}

/// Decodes an object from its chunks: `chunks[i]` is chunk `i` or `None` when absent (K + M
/// slots). Any K intact chunks do; a chunk failing its checksum counts as missing and is
/// reported in [`Decoded::damaged`]. Chunks of another profile, or disagreeing on the object's
/// length, are refused rather than mixed.
pub fn decode(profile: Profile, chunks: &[Option<ChunkRef<'_>>]) -> Result<Decoded, Error> {
    decode_checked(check(profile, chunks, &[], &[])?)
}

/// [`decode`] from stored bytes: `stored[i]` is what was read for chunk `i` (header and data)
/// or `None`. Bytes that do not parse as a chunk count as damaged, like a failed checksum.
pub fn decode_stored(profile: Profile, stored: &[Option<&[u8]>]) -> Result<Decoded, Error> {
    if stored.len() != usize::from(profile.chunks()) {
        return Err(Error::SlotCount { given: stored.len(), profile, chunks: profile.chunks() });
    }
    let mut unparsable = Vec::new();
    let mut chunks = Vec::with_capacity(stored.len());
    for (index, bytes) in (0u8..).zip(stored) {
        chunks.push(match bytes.map(ChunkRef::parse_unverified) {
            None => None,
            Some(Ok(chunk)) => Some(chunk),
            Some(Err(_)) => {
                unparsable.push(index);
                None
            }
        });
    }
    decode_checked(check(profile, &chunks, &[], &unparsable)?)
}

fn decode_checked(checked: Checked<'_>) -> Result<Decoded, Error> {
    let object = match checked.layout {
        None => Vec::new(), // unreachable with K >= 1 intact chunks; kept total
        Some(layout) => {
            let data = data_chunks(&layout, &checked.intact)?;
            join_data_chunks(&layout, &data)
        }
    };
    Ok(Decoded { object, missing: checked.missing, damaged: checked.damaged })
}

/// Rebuilds the chunks at `wanted` indices (for repair) from the others: any K intact chunks
/// not among `wanted` do. Returns them in the order asked.
pub fn reconstruct(
    profile: Profile,
    chunks: &[Option<ChunkRef<'_>>],
    wanted: &[u8],
) -> Result<Vec<Chunk>, Error> {
    let total = profile.chunks();
    for (at, index) in wanted.iter().enumerate() {
        if *index >= total || wanted[..at].contains(index) {
            return Err(Error::BadIndex { index: *index, chunks: total });
        }
    }
    let checked = check(profile, chunks, wanted, &[])?;
    let Some(layout) = checked.layout else {
        return Ok(Vec::new()); // unreachable with K ≥ 1 intact chunks; kept total
    };
    let data = data_chunks(&layout, &checked.intact)?;
    let k = usize::from(profile.k());
    let parity = if wanted.iter().any(|index| usize::from(*index) >= k) {
        encode_parity(profile, &data)
    } else {
        Vec::new()
    };
    let mut rebuilt = Vec::with_capacity(wanted.len());
    for index in wanted {
        let at = usize::from(*index);
        let bytes = if at < k { data[at].to_vec() } else { parity[at - k].clone() };
        rebuilt.push(Chunk::new(profile, *index, layout.object_bytes(), bytes)?);
    }
    Ok(rebuilt)
}

/// Reads object bytes `offset..offset + len` from the data chunks that hold them, without
/// decoding: each data chunk the range touches must be given and intact (its checksum is
/// verified), else [`Error::ChunkUnavailable`] says which one, and the caller decodes
/// instead. Parity chunks are not needed (their slots may be `None`).
pub fn read_range(
    profile: Profile,
    chunks: &[Option<ChunkRef<'_>>],
    offset: u64,
    len: u64,
) -> Result<Vec<u8>, Error> {
    let checked = check_slots(profile, chunks)?;
    let Some(object_bytes) = checked else {
        // No chunk at all: the first data chunk is the one that is missing.
        return Err(Error::ChunkUnavailable { index: 0, state: "missing" });
    };
    let layout = Layout::new(profile, object_bytes)?;
    let extents = layout.extents(offset, len)?;
    let mut verified = vec![false; usize::from(profile.k())];
    let mut out = Vec::with_capacity(usize::try_from(len).expect("within an object in memory"));
    for extent in extents {
        let at = usize::from(extent.chunk);
        let chunk =
            chunks[at].ok_or(Error::ChunkUnavailable { index: extent.chunk, state: "missing" })?;
        if !verified[at] {
            chunk
                .verify()
                .map_err(|_| Error::ChunkUnavailable { index: extent.chunk, state: "damaged" })?;
            verified[at] = true;
        }
        let start = usize::try_from(extent.chunk_offset).expect("inside a chunk in memory");
        let end = start + usize::try_from(extent.len).expect("at most a stripe unit");
        out.extend_from_slice(&chunk.data()[start..end]);
    }
    Ok(out)
}

/// The chunks a read can use, after checking the slots agree.
struct Checked<'a> {
    layout: Option<Layout>,
    /// Per slot: the data of an intact chunk, usable as a source.
    intact: Vec<Option<&'a [u8]>>,
    missing: Vec<u8>,
    damaged: Vec<u8>,
}

/// Checks the slots' headers against the profile and each other; returns the object length
/// they agree on (`None` if no chunk is given).
fn check_slots(profile: Profile, chunks: &[Option<ChunkRef<'_>>]) -> Result<Option<u64>, Error> {
    if chunks.len() != usize::from(profile.chunks()) {
        return Err(Error::SlotCount { given: chunks.len(), profile, chunks: profile.chunks() });
    }
    let mut first: Option<(u8, u64)> = None;
    for (slot, chunk) in chunks.iter().enumerate() {
        let Some(chunk) = chunk else { continue };
        let header = chunk.header();
        if header.profile() != profile {
            return Err(Error::ProfileMismatch {
                index: header.index(),
                expected: profile,
                expected_unit: profile.stripe_unit_bytes(),
                found: header.profile(),
                found_unit: header.profile().stripe_unit_bytes(),
            });
        }
        if usize::from(header.index()) != slot {
            return Err(Error::WrongSlot { slot, index: header.index() });
        }
        match first {
            None => first = Some((header.index(), header.object_bytes())),
            Some((first_index, first_bytes)) if first_bytes != header.object_bytes() => {
                return Err(Error::ObjectMismatch {
                    first: first_index,
                    first_bytes,
                    second: header.index(),
                    second_bytes: header.object_bytes(),
                });
            }
            Some(_) => {}
        }
    }
    Ok(first.map(|(_, bytes)| bytes))
}

/// Checks the slots and verifies every chunk's checksum; `excluded` indices are not used as
/// sources (they are being rebuilt), absent `unparsable` ones count as damaged.
fn check<'a>(
    profile: Profile,
    chunks: &[Option<ChunkRef<'a>>],
    excluded: &[u8],
    unparsable: &[u8],
) -> Result<Checked<'a>, Error> {
    let object_bytes = check_slots(profile, chunks)?;
    let mut checked = Checked {
        layout: None,
        intact: vec![None; chunks.len()],
        missing: Vec::new(),
        damaged: Vec::new(),
    };
    let mut have = 0u8;
    for (index, chunk) in (0u8..).zip(chunks) {
        match chunk {
            None if unparsable.contains(&index) => checked.damaged.push(index),
            None => checked.missing.push(index),
            Some(chunk) if chunk.verify().is_err() => checked.damaged.push(index),
            Some(_) if excluded.contains(&index) => {}
            Some(chunk) => {
                checked.intact[usize::from(index)] = Some(chunk.data());
                have += 1;
            }
        }
    }
    if have < profile.k() {
        return Err(Error::TooFewChunks {
            have,
            need: profile.k(),
            missing: checked.missing,
            damaged: checked.damaged,
        });
    }
    let object_bytes = object_bytes.expect("K >= 1 chunks are intact, so one was given");
    checked.layout = Some(Layout::new(profile, object_bytes)?);
    Ok(checked)
}

/// Cuts an object into its K data chunks, zero-padding the last stripe.
fn split_into_data_chunks(layout: &Layout, object: &[u8]) -> Vec<Vec<u8>> {
    let profile = layout.profile();
    let chunk_bytes = usize::try_from(layout.chunk_bytes()).expect("the object is in memory");
    let unit = usize::try_from(profile.stripe_unit_bytes()).expect("at most 16 MiB");
    let k = usize::from(profile.k());
    let mut data = vec![vec![0u8; chunk_bytes]; k];
    // Object units in order: unit u is data chunk u mod K, stripe u / K.
    for (unit_index, bytes) in object.chunks(unit).enumerate() {
        let at = (unit_index / k) * unit;
        data[unit_index % k][at..at + bytes.len()].copy_from_slice(bytes);
    }
    data
}

/// Joins the K data chunks back into the object, dropping the padding.
fn join_data_chunks(layout: &Layout, data: &[Cow<'_, [u8]>]) -> Vec<u8> {
    let profile = layout.profile();
    let object_bytes = usize::try_from(layout.object_bytes()).expect("the chunks are in memory");
    let unit = usize::try_from(profile.stripe_unit_bytes()).expect("at most 16 MiB");
    let k = usize::from(profile.k());
    let mut object = Vec::with_capacity(object_bytes);
    let mut unit_index = 0;
    while object.len() < object_bytes {
        let at = (unit_index / k) * unit;
        let take = unit.min(object_bytes - object.len());
        object.extend_from_slice(&data[unit_index % k][at..at + take]);
        unit_index += 1;
    }
    object
}

/// The M parity chunks of K data chunks of equal length, encoded [`ENCODE_SEGMENT_BYTES`] of each
/// chunk at a time.
fn encode_parity<D: AsRef<[u8]>>(profile: Profile, data: &[D]) -> Vec<Vec<u8>> {
    let shard_bytes = data.first().map_or(0, |shard| shard.as_ref().len());
    let (k, m) = (usize::from(profile.k()), usize::from(profile.m()));
    let mut parity = vec![vec![0u8; shard_bytes]; m];
    if shard_bytes == 0 {
        return parity;
    }
    let mut encoder = ReedSolomonEncoder::new(k, m, ENCODE_SEGMENT_BYTES.min(shard_bytes))
        .expect("profiles are within the codec's limits and shards are whole 64-byte blocks");
    for start in (0..shard_bytes).step_by(ENCODE_SEGMENT_BYTES) {
        let end = shard_bytes.min(start + ENCODE_SEGMENT_BYTES);
        encoder.reset(k, m, end - start).expect("segments are whole 64-byte blocks");
        for shard in data {
            encoder
                .add_original_shard(&shard.as_ref()[start..end])
                .expect("K shards of one length");
        }
        let result = encoder.encode().expect("all K shards were added");
        for (out, recovery) in parity.iter_mut().zip(result.recovery_iter()) {
            out[start..end].copy_from_slice(recovery);
        }
    }
    parity
}

/// All K data chunks: the intact ones borrowed, the others restored from any K intact
/// chunks.
fn data_chunks<'a>(
    layout: &Layout,
    intact: &[Option<&'a [u8]>],
) -> Result<Vec<Cow<'a, [u8]>>, Error> {
    let profile = layout.profile();
    let k = usize::from(profile.k());
    let shard_bytes = usize::try_from(layout.chunk_bytes()).expect("the chunks are in memory");
    if intact[..k].iter().all(Option::is_some) || shard_bytes == 0 {
        let empty: &[u8] = &[];
        return Ok(intact[..k].iter().map(|data| Cow::Borrowed(data.unwrap_or(empty))).collect());
    }
    let m = usize::from(profile.m());
    // Exactly K sources, data chunks first (more would only cost copying).
    let sources: Vec<(usize, &[u8])> = intact
        .iter()
        .enumerate()
        .filter_map(|(index, data)| data.map(|data| (index, data)))
        .take(k)
        .collect();
    let mut restored: Vec<(usize, Vec<u8>)> = (0..k)
        .filter(|index| intact[*index].is_none())
        .map(|index| (index, vec![0u8; shard_bytes]))
        .collect();
    let mut decoder = ReedSolomonDecoder::new(k, m, DECODE_SEGMENT_BYTES.min(shard_bytes))
        .expect("profiles are within the codec's limits and shards are whole 64-byte blocks");
    for start in (0..shard_bytes).step_by(DECODE_SEGMENT_BYTES) {
        let end = shard_bytes.min(start + DECODE_SEGMENT_BYTES);
        decoder.reset(k, m, end - start).expect("segments are whole 64-byte blocks");
        for (index, data) in &sources {
            let segment = &data[start..end];
            if *index < k {
                decoder.add_original_shard(*index, segment).expect("a data chunk, added once");
            } else {
                decoder
                    .add_recovery_shard(*index - k, segment)
                    .expect("a parity chunk, added once");
            }
        }
        let result = decoder.decode().expect("K intact chunks of one length");
        for (index, out) in &mut restored {
            let segment = result
                .restored_original(*index)
                .expect("the decoder restores every data chunk not given");
            out[start..end].copy_from_slice(segment);
        }
    }
    let mut restored = restored.into_iter().peekable();
    let mut data = Vec::with_capacity(k);
    for (index, chunk) in intact[..k].iter().enumerate() {
        data.push(match chunk {
            Some(bytes) => Cow::Borrowed(*bytes),
            None => {
                let (at, bytes) = restored.next().expect("one restored chunk per missing one");
                debug_assert_eq!(at, index);
                Cow::Owned(bytes)
            }
        });
    }
    Ok(data)
}
