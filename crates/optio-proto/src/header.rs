//! The on-disk object header.
//!
//! Layout (little-endian, 64 bytes), followed by the key (UTF-8) and the data:
//!
//! | bytes | field |
//! |---|---|
//! | 0..8 | magic `OPTIOOBJ` |
//! | 8..10 | format version ([`OBJECT_FORMAT_VERSION`]) |
//! | 10..12 | flags (bit 0: the PG seed is set; bit 1: a tombstone — the object was deleted at this version, no data; bit 2: a block object, format 2 — see [`crate::blocks`]) |
//! | 12..16 | pool id |
//! | 16..20 | PG seed |
//! | 20..22 | key length in bytes |
//! | 22..24 | reserved (0) |
//! | 24..32 | data size in bytes |
//! | 32..36 | crc32c of the data |
//! | 36..40 | reserved (0) |
//! | 40..48 | object version |
//! | 48..56 | epoch of the writer's map |
//! | 56..60 | reserved (0) |
//! | 60..64 | crc32c of bytes 0..60 and of the key |

use optio_placement::{Epoch, PoolId};

use crate::ObjectVersion;
use crate::blocks::{BLOCK_BYTES, BLOCK_OBJECT_BYTES_MAX, BlockLayout, decode_table};
use crate::error::FormatError;
use crate::key::KEY_BYTES_MAX;

/// Size of the fixed part of the header.
pub const HEADER_BYTES: usize = 64;
const _: () = assert!(HEADER_BYTES == crate::blocks::OBJECT_HEADER_BYTES);
/// The newest object format this code reads: 1 for objects written whole, 2 for block
/// objects ([`crate::blocks`]).
pub const OBJECT_FORMAT_VERSION: u16 = 2;
/// The format of objects written whole.
const PLAIN_FORMAT: u16 = 1;
const BLOCKS_FORMAT: u16 = 2;
const MAGIC: &[u8; 8] = b"OPTIOOBJ";
const FLAG_PG: u16 = 1;
const FLAG_DELETED: u16 = 2;
const FLAG_BLOCKS: u16 = 4;

/// The crc32c (Castagnoli) checksum Optio uses for data, headers and records.
pub fn checksum(data: &[u8]) -> u32 {
    crc32c::crc32c(data)
}

/// [`checksum`] of data that comes in pieces: fold the pieces in order from 0.
pub fn checksum_append(crc: u32, data: &[u8]) -> u32 {
    crc32c::crc32c_append(crc, data)
}

/// The header of a stored object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ObjectHeader {
    /// Pool.
    pub pool: PoolId,
    /// PG seed the writer placed the object in, for pools with PGs.
    pub pg_seed: Option<u32>,
    /// Data size in bytes.
    pub size_bytes: u64,
    /// crc32c of the data.
    pub checksum: u32,
    /// Object version.
    pub version: ObjectVersion,
    /// Epoch of the writer's map.
    pub epoch: Epoch,
    /// A tombstone: the object was deleted at `version` (no data). Kept so that an older
    /// copy arriving later — a migration, a re-integration — cannot bring it back.
    pub deleted: bool,
    /// A block object: per-block checksums follow the key, then the data
    /// ([`crate::blocks::BlockLayout`]).
    pub blocks: bool,
}

impl ObjectHeader {
    /// The header for `data` stored under `key`.
    pub fn new(
        pool: PoolId,
        pg_seed: Option<u32>,
        key: &str,
        data: &[u8],
        version: ObjectVersion,
        epoch: Epoch,
    ) -> ObjectHeader {
        debug_assert!(key.len() <= KEY_BYTES_MAX);
        ObjectHeader {
            pool,
            pg_seed,
            size_bytes: data.len() as u64,
            checksum: checksum(data),
            version,
            epoch,
            deleted: false,
            blocks: false,
        }
    }

    /// The header of a tombstone: `key` deleted at `version`.
    pub fn tombstone(
        pool: PoolId,
        pg_seed: Option<u32>,
        version: ObjectVersion,
        epoch: Epoch,
    ) -> ObjectHeader {
        ObjectHeader {
            pool,
            pg_seed,
            size_bytes: 0,
            checksum: checksum(&[]),
            version,
            epoch,
            deleted: true,
            blocks: false,
        }
    }

    /// The header and the key, as stored (the data follows them).
    pub fn encode(&self, key: &str) -> Vec<u8> {
        assert!(key.len() <= KEY_BYTES_MAX, "keys are validated before they are stored");
        let mut out = vec![0u8; HEADER_BYTES];
        out[0..8].copy_from_slice(MAGIC);
        let format = if self.blocks { BLOCKS_FORMAT } else { PLAIN_FORMAT };
        out[8..10].copy_from_slice(&format.to_le_bytes());
        let flags = if self.pg_seed.is_some() { FLAG_PG } else { 0 }
            | if self.deleted { FLAG_DELETED } else { 0 }
            | if self.blocks { FLAG_BLOCKS } else { 0 };
        out[10..12].copy_from_slice(&flags.to_le_bytes());
        out[12..16].copy_from_slice(&self.pool.0.to_le_bytes());
        out[16..20].copy_from_slice(&self.pg_seed.unwrap_or(0).to_le_bytes());
        let key_len = u16::try_from(key.len()).expect("KEY_BYTES_MAX (asserted above) fits a u16");
        out[20..22].copy_from_slice(&key_len.to_le_bytes());
        out[24..32].copy_from_slice(&self.size_bytes.to_le_bytes());
        out[32..36].copy_from_slice(&self.checksum.to_le_bytes());
        out[40..48].copy_from_slice(&self.version.0.to_le_bytes());
        out[48..56].copy_from_slice(&self.epoch.0.to_le_bytes());
        out.extend_from_slice(key.as_bytes());
        let crc = crc32c::crc32c_append(checksum(&out[0..60]), key.as_bytes());
        out[60..64].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// Decodes the header and key at the start of `bytes`, checking the header's checksum but
    /// not the data. Returns the header, the key and the offset of the data.
    pub fn decode_prefix(bytes: &[u8]) -> Result<(ObjectHeader, &str, usize), FormatError> {
        if bytes.len() < HEADER_BYTES {
            return Err(FormatError::Truncated { bytes: bytes.len() });
        }
        if &bytes[0..8] != MAGIC {
            return Err(FormatError::BadMagic);
        }
        let version = u16_at(bytes, 8);
        if version == 0 || version > OBJECT_FORMAT_VERSION {
            return Err(FormatError::UnsupportedVersion {
                found: version,
                supported: OBJECT_FORMAT_VERSION,
            });
        }
        let key_len = usize::from(u16_at(bytes, 20));
        if key_len > KEY_BYTES_MAX || bytes.len() < HEADER_BYTES + key_len {
            return Err(FormatError::Truncated { bytes: bytes.len() });
        }
        let key_bytes = &bytes[HEADER_BYTES..HEADER_BYTES + key_len];
        let crc = crc32c::crc32c_append(checksum(&bytes[0..60]), key_bytes);
        if crc != u32_at(bytes, 60) {
            return Err(FormatError::HeaderChecksum);
        }
        let key = std::str::from_utf8(key_bytes).map_err(|_| FormatError::KeyNotUtf8)?;
        let flags = u16_at(bytes, 10);
        let header = ObjectHeader {
            pool: PoolId(u32_at(bytes, 12)),
            pg_seed: (flags & FLAG_PG != 0).then(|| u32_at(bytes, 16)),
            size_bytes: u64_at(bytes, 24),
            checksum: u32_at(bytes, 32),
            version: ObjectVersion(u64_at(bytes, 40)),
            epoch: Epoch(u64_at(bytes, 48)),
            deleted: flags & FLAG_DELETED != 0,
            blocks: flags & FLAG_BLOCKS != 0,
        };
        if header.deleted && header.size_bytes != 0 {
            return Err(FormatError::SizeMismatch { expected: 0, found: header.size_bytes });
        }
        if header.blocks != (version == BLOCKS_FORMAT)
            || (header.blocks && (header.deleted || header.size_bytes > BLOCK_OBJECT_BYTES_MAX))
        {
            return Err(FormatError::HeaderChecksum);
        }
        Ok((header, key, HEADER_BYTES + key_len))
    }

    /// Decodes a whole stored object, verifying the header and the data (for a block object,
    /// every block against its checksum too).
    pub fn decode(bytes: &[u8]) -> Result<(ObjectHeader, &str, &[u8]), FormatError> {
        let (header, key, offset) = ObjectHeader::decode_prefix(bytes)?;
        if !header.blocks {
            let data = &bytes[offset..];
            header.verify(data)?;
            return Ok((header, key, data));
        }
        let layout = BlockLayout::new(key.len(), header.size_bytes);
        if bytes.len() as u64 != layout.file_bytes() {
            return Err(FormatError::SizeMismatch {
                expected: layout.file_bytes(),
                found: bytes.len() as u64,
            });
        }
        // Every offset below is within the file, whose length (a usize) was just checked.
        let within = |offset: u64| usize::try_from(offset).expect("an offset within the file");
        let table_at = within(layout.table_offset);
        let table = decode_table(&bytes[table_at..table_at + within(4 * layout.blocks)]);
        let data = &bytes[within(layout.data_offset)..];
        for (block, expected) in table.iter().enumerate() {
            let start = block * BLOCK_BYTES;
            let found = checksum(&data[start..start + layout.block_len(block as u64)]);
            if found != *expected {
                return Err(FormatError::DataChecksum { expected: *expected, found });
            }
        }
        header.verify(data)?;
        Ok((header, key, data))
    }

    /// Bytes of the stored file of an object with this header under a key of `key_bytes`
    /// bytes (a block object's holes included).
    pub fn file_bytes(&self, key_bytes: usize) -> u64 {
        if self.blocks {
            BlockLayout::new(key_bytes, self.size_bytes).file_bytes()
        } else {
            // Saturating: the size comes from a file, which may say anything.
            ((HEADER_BYTES + key_bytes) as u64).saturating_add(self.size_bytes)
        }
    }

    /// Checks that `data` is what this header describes.
    pub fn verify(&self, data: &[u8]) -> Result<(), FormatError> {
        if data.len() as u64 != self.size_bytes {
            return Err(FormatError::SizeMismatch {
                expected: self.size_bytes,
                found: data.len() as u64,
            });
        }
        let found = checksum(data);
        if found != self.checksum {
            return Err(FormatError::DataChecksum { expected: self.checksum, found });
        }
        Ok(())
    }
}

fn u16_at(bytes: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([bytes[at], bytes[at + 1]])
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(b)
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(b)
}

#[cfg(test)]
#[allow(clippy::cast_possible_truncation, reason = "test data: small values, or truncation wanted")]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn stored(key: &str, data: &[u8]) -> Vec<u8> {
        let header = ObjectHeader::new(PoolId(3), Some(17), key, data, ObjectVersion(99), Epoch(5));
        let mut file = header.encode(key);
        file.extend_from_slice(data);
        file
    }

    #[test]
    fn every_single_bit_flip_is_detected() {
        let file = stored("k/ey", b"some data here");
        for byte in 0..file.len() {
            for bit in 0..8 {
                let mut bad = file.clone();
                bad[byte] ^= 1 << bit;
                assert!(ObjectHeader::decode(&bad).is_err(), "flip at {byte}:{bit} undetected");
            }
        }
    }

    #[test]
    fn truncation_and_newer_formats_are_refused() {
        let file = stored("key", b"data");
        for len in 0..file.len() {
            assert!(ObjectHeader::decode(&file[..len]).is_err(), "truncated to {len}");
        }
        let mut newer = file.clone();
        newer[8..10].copy_from_slice(&(OBJECT_FORMAT_VERSION + 1).to_le_bytes());
        assert!(matches!(
            ObjectHeader::decode(&newer),
            Err(FormatError::UnsupportedVersion { .. })
        ));
    }

    proptest! {
        #[test]
        fn round_trips(key in "[^\u{0}]{1,64}", data in proptest::collection::vec(any::<u8>(), 0..512),
                       pg in proptest::option::of(any::<u32>())) {
            let header = ObjectHeader::new(PoolId(1), pg, &key, &data, ObjectVersion(1), Epoch(2));
            let mut file = header.encode(&key);
            file.extend_from_slice(&data);
            let (h, k, d) = ObjectHeader::decode(&file).expect("intact");
            prop_assert_eq!(h, header);
            prop_assert_eq!(k, key.as_str());
            prop_assert_eq!(d, &data[..]);
        }
    }

    /// A block object's file: header, key, checksum table, data.
    fn stored_blocks(key: &str, data: &[u8]) -> Vec<u8> {
        use crate::blocks::{BLOCK_BYTES, BlockLayout, encode_table};
        let layout = BlockLayout::new(key.len(), data.len() as u64);
        let header = ObjectHeader {
            blocks: true,
            ..ObjectHeader::new(PoolId(3), Some(17), key, data, ObjectVersion(99), Epoch(5))
        };
        let table: Vec<u32> = data.chunks(BLOCK_BYTES).map(checksum).collect();
        let mut file = vec![0u8; layout.file_bytes() as usize];
        let head = header.encode(key);
        file[..head.len()].copy_from_slice(&head);
        let table = encode_table(&table);
        let at = layout.table_offset as usize;
        file[at..at + table.len()].copy_from_slice(&table);
        file[layout.data_offset as usize..].copy_from_slice(data);
        file
    }

    #[test]
    fn block_objects_decode_and_every_flip_in_header_table_or_data_is_detected() {
        use crate::blocks::BlockLayout;
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
        let file = stored_blocks("vol/0", &data);
        let (header, key, body) = ObjectHeader::decode(&file).expect("intact");
        assert!(header.blocks);
        assert_eq!((key, body), ("vol/0", &data[..]));
        assert_eq!(header.file_bytes(key.len()), file.len() as u64);
        let layout = BlockLayout::new(5, data.len() as u64);
        let meaningful = (0..HEADER_BYTES + 5)
            .chain(layout.table_offset as usize..(layout.table_offset + 4 * layout.blocks) as usize)
            .chain(layout.data_offset as usize..file.len());
        for byte in meaningful {
            let mut bad = file.clone();
            bad[byte] ^= 0x10;
            assert!(ObjectHeader::decode(&bad).is_err(), "flip at {byte} undetected");
        }
        assert!(ObjectHeader::decode(&file[..file.len() - 1]).is_err(), "truncated");
        // A plain format number with the blocks flag (or the reverse) is refused.
        let mut mixed = file.clone();
        mixed[8..10].copy_from_slice(&1u16.to_le_bytes());
        assert!(ObjectHeader::decode(&mixed).is_err());
    }

    #[test]
    fn tombstones_round_trip_and_carry_no_data() {
        let header = ObjectHeader::tombstone(PoolId(2), Some(5), ObjectVersion(77), Epoch(3));
        let file = header.encode("gone");
        let (h, k, d) = ObjectHeader::decode(&file).expect("intact");
        assert!(h.deleted);
        assert_eq!((h, k, d), (header, "gone", &[][..]));
        let live = ObjectHeader::new(PoolId(2), Some(5), "gone", b"", ObjectVersion(77), Epoch(3));
        assert_ne!(live.encode("gone"), file, "the flag is stored");
    }
}
