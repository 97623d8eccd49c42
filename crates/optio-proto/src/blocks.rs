//! Block objects: objects written in place, a range at a time (block volumes' data objects).
//!
//! A whole-object write replaces a file; a 4 KiB write into a 4 MiB object must not. A
//! *block object* is stored with a crc32c per [`BLOCK_BYTES`] block, so that a partial write
//! rewrites only the blocks it touches and their checksums, and a ranged read verifies only
//! the blocks it reads. Layout of the file (format version 2, header flag "blocks"):
//!
//! | offset | what |
//! |---|---|
//! | 0 | the 64-byte [`crate::ObjectHeader`], then the key |
//! | [`BlockLayout::table_offset`] | one little-endian crc32c per block |
//! | [`BlockLayout::data_offset`] | the data, `size` bytes (holes read as zeros) |
//!
//! Both offsets are multiples of [`BLOCK_BYTES`], so data blocks are aligned in the file and
//! a discarded block can be punched out. The header's data checksum stays the crc32c of the
//! whole data — what a whole-object read, a migration or a probe compare — and is kept
//! current without reading the data: CRC-32C is linear, so replacing one block changes the
//! whole checksum by that block's change shifted by the bytes after it ([`whole_after`]).

/// The fixed part of an object's header, in bytes: `crate::HEADER_BYTES` (the header module
/// checks that they agree; this module does not name it, so that the two do not depend on
/// each other).
pub(crate) const OBJECT_HEADER_BYTES: usize = 64;

/// The checksum granularity of block objects.
pub const BLOCK_BYTES: usize = 4096;
/// The largest block object (a volume's object size is at most this).
pub const BLOCK_OBJECT_BYTES_MAX: u64 = 64 << 20;

/// Where a *redirected head*'s mark lies in its file (a block object the server redirected
/// after a volume snapshot: the blocks its file has no data for are those of the clone the
/// mark names; `optio-server`'s `store::redirect`): in the header's block, after the header
/// and its key.
pub const REDIRECT_MARK_AT: u64 = 1536;
/// The first bytes of a redirect mark; the clone's version (u64, little endian) follows.
pub const REDIRECT_MAGIC: &[u8; 8] = b"OPTIOROW";
/// A redirect mark's bytes.
pub const REDIRECT_MARK_BYTES: usize = 16;

/// The version of the clone a redirected head's file is redirected to, if `page` (the file's
/// first bytes) holds a redirect mark.
pub fn redirect_mark(page: &[u8]) -> Option<u64> {
    let at = usize::try_from(REDIRECT_MARK_AT).ok()?;
    let mark = page.get(at..at + REDIRECT_MARK_BYTES)?;
    (&mark[..8] == REDIRECT_MAGIC)
        .then(|| u64::from_le_bytes(mark[8..].try_into().expect("eight bytes")))
}

/// Where a block object's parts lie in its file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockLayout {
    /// Data bytes.
    pub size: u64,
    /// Blocks (the last may be short).
    pub blocks: u64,
    /// File offset of the checksum table.
    pub table_offset: u64,
    /// File offset of the data.
    pub data_offset: u64,
}

fn align(n: u64) -> u64 {
    n.div_ceil(BLOCK_BYTES as u64) * BLOCK_BYTES as u64
}

impl BlockLayout {
    /// The layout of a block object of `size` bytes under a key of `key_bytes` bytes.
    pub fn new(key_bytes: usize, size: u64) -> BlockLayout {
        let blocks = size.div_ceil(BLOCK_BYTES as u64);
        let table_offset = align((OBJECT_HEADER_BYTES + key_bytes) as u64);
        let data_offset = align(table_offset + 4 * blocks);
        BlockLayout { size, blocks, table_offset, data_offset }
    }

    /// Bytes of the file (holes included).
    pub fn file_bytes(&self) -> u64 {
        self.data_offset + self.size
    }

    /// Bytes in block `block`.
    pub fn block_len(&self, block: u64) -> usize {
        let start = block * BLOCK_BYTES as u64;
        let len = (self.size - start).min(BLOCK_BYTES as u64);
        usize::try_from(len).expect("at most BLOCK_BYTES, which is a usize")
    }

    /// The blocks `[first, last]` a byte range `[offset, offset + len)` touches (`len > 0`).
    pub fn blocks_of(&self, offset: u64, len: u64) -> (u64, u64) {
        (offset / BLOCK_BYTES as u64, (offset + len - 1) / BLOCK_BYTES as u64)
    }
}

/// The crc32c of `len` zero bytes (no buffer of that size is made): the initial register
/// shifted through them, complemented.
pub fn zeros_checksum(len: u64) -> u32 {
    shift(u32::MAX, len) ^ u32::MAX
}

/// The whole data's checksum after one block changed from a block with checksum `old` to one
/// of the same length with checksum `new`, `after` bytes of data following it.
pub fn whole_after(whole: u32, old: u32, new: u32, after: u64) -> u32 {
    if old == new {
        return whole;
    }
    // crc(P‖B‖S) = shift_{|B|+|S|}(crc P) ⊕ shift_{|S|}(crc B) ⊕ crc S: only the middle term
    // changes, by shift_{|S|}(old ⊕ new).
    whole ^ shift(old ^ new, after)
}

/// CRC-32C's polynomial, bit-reflected.
const POLY: u32 = 0x82f6_3b78;

/// `a · b` modulo the polynomial, both bit-reflected (bit 31 is x⁰).
fn mult_mod(a: u32, mut b: u32) -> u32 {
    let mut product = 0;
    let mut bit = 1u32 << 31;
    while bit != 0 {
        if a & bit != 0 {
            product ^= b;
        }
        bit >>= 1;
        b = if b & 1 != 0 { (b >> 1) ^ POLY } else { b >> 1 };
    }
    product
}

/// x^(2^k) modulo the polynomial for k = 0..64, bit-reflected.
fn powers() -> &'static [u32; 64] {
    static POWERS: std::sync::OnceLock<[u32; 64]> = std::sync::OnceLock::new();
    POWERS.get_or_init(|| {
        let mut table = [0u32; 64];
        let mut p = 1u32 << 30; // x¹
        for entry in &mut table {
            *entry = p;
            p = mult_mod(p, p);
        }
        table
    })
}

/// `value` multiplied by x^(8·bytes) modulo the polynomial: what a CRC register holding
/// `value` becomes after `bytes` zero bytes, without its initial value and final complement
/// (so that `shift(a ⊕ b) = shift(a) ⊕ shift(b)`). O(log bytes) multiplications, with powers
/// of x computed once — a fraction of a microsecond for a 64 MiB object.
pub fn shift(value: u32, bytes: u64) -> u32 {
    let powers = powers();
    let mut result = value;
    let mut n = bytes;
    let mut k = 3; // x^(8n) = x^(n·2³)
    while n != 0 {
        if n & 1 != 0 {
            result = mult_mod(powers[k & 63], result);
        }
        n >>= 1;
        k += 1;
    }
    result
}

/// The whole data's checksum from its block checksums (in order).
pub fn whole_of_blocks(layout: &BlockLayout, table: &[u32]) -> u32 {
    // crc(A‖B) = shift_{|B|}(crc A) ⊕ crc B.
    let mut whole = crc32c::crc32c(&[]);
    for (block, crc) in table.iter().enumerate() {
        whole = shift(whole, layout.block_len(block as u64) as u64) ^ crc;
    }
    whole
}

/// The first of the blocks `first, first + 1, …` held in `bytes` (whole blocks from `first`'s
/// start, the object's last one possibly short) whose crc32c is not its entry of `table` (the
/// entries from `first`'s on; an entry past the blocks held is not looked at): the block, the
/// checksum expected and the one found. `None`: every block held is intact.
pub fn first_bad_block(
    layout: &BlockLayout,
    first: u64,
    table: &[u32],
    bytes: &[u8],
) -> Option<(u64, u32, u32)> {
    let mut at = 0;
    for (i, expected) in table.iter().enumerate() {
        let block = first + i as u64;
        let len = layout.block_len(block);
        let Some(data) = bytes.get(at..at + len) else { break };
        let found = crc32c::crc32c(data);
        if found != *expected {
            return Some((block, *expected, found));
        }
        at += len;
    }
    None
}

/// Decodes a checksum table.
pub fn decode_table(bytes: &[u8]) -> Vec<u32> {
    bytes.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

/// Encodes a checksum table.
pub fn encode_table(table: &[u32]) -> Vec<u8> {
    table.iter().flat_map(|crc| crc.to_le_bytes()).collect()
}

#[cfg(test)]
#[allow(clippy::cast_possible_truncation, reason = "test data: small values, or truncation wanted")]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn layouts_are_aligned() {
        let l = BlockLayout::new(10, 4 << 20);
        assert_eq!((l.blocks, l.table_offset, l.data_offset), (1024, 4096, 8192));
        let l = BlockLayout::new(1000, 5000);
        assert_eq!((l.blocks, l.block_len(0), l.block_len(1)), (2, 4096, 904));
        assert_eq!(l.blocks_of(4095, 2), (0, 1));
        assert_eq!(l.file_bytes(), l.data_offset + 5000);
    }

    #[test]
    fn shift_is_the_crates_combine_with_nothing_appended() {
        for (value, bytes) in [(1u32, 1u64), (0xdead_beef, 4096), (7, 4 << 20), (u32::MAX, 12345)] {
            assert_eq!(shift(value, bytes), crc32c::crc32c_combine(value, 0, bytes as usize));
        }
        assert_eq!(shift(0x1234_5678, 0), 0x1234_5678);
    }

    #[test]
    fn the_first_damaged_block_is_found_and_blocks_not_held_are_not_looked_at() {
        let layout = BlockLayout::new(5, 3 * BLOCK_BYTES as u64 + 10);
        let data: Vec<u8> = (0..layout.size).map(|i| (i * 31 % 251) as u8).collect();
        let crc = |b: u64| {
            let start = (b as usize) * BLOCK_BYTES;
            crc32c::crc32c(&data[start..start + layout.block_len(b)])
        };
        let table: Vec<u32> = (0..layout.blocks).map(crc).collect();
        assert_eq!(first_bad_block(&layout, 0, &table, &data), None);
        // Blocks 1 and 2 only, the table from block 1's entry on.
        let held = &data[BLOCK_BYTES..3 * BLOCK_BYTES];
        assert_eq!(first_bad_block(&layout, 1, &table[1..], held), None);
        // The short last block alone.
        assert_eq!(first_bad_block(&layout, 3, &table[3..], &data[3 * BLOCK_BYTES..]), None);
        let mut damaged = data.clone();
        damaged[2 * BLOCK_BYTES + 7] ^= 1;
        let found = crc32c::crc32c(&damaged[2 * BLOCK_BYTES..3 * BLOCK_BYTES]);
        assert_eq!(first_bad_block(&layout, 0, &table, &damaged), Some((2, table[2], found)));
        assert_eq!(
            first_bad_block(&layout, 1, &table[1..], &damaged[BLOCK_BYTES..]).map(|b| b.0),
            Some(2)
        );
    }

    #[test]
    fn zero_checksums_match_real_zeros() {
        for len in [0u64, 1, 2, 3, 4095, 4096, 4097, 65536, 1 << 20] {
            assert_eq!(zeros_checksum(len), crc32c::crc32c(&vec![0u8; len as usize]), "{len}");
        }
    }

    proptest! {
        #[test]
        fn whole_checksum_follows_block_changes(
            blocks in 1usize..6, tail in 1usize..=BLOCK_BYTES, seed in any::<u64>(), which in any::<usize>(),
        ) {
            let size = (blocks - 1) * BLOCK_BYTES + tail;
            let layout = BlockLayout::new(3, size as u64);
            let mut data: Vec<u8> = (0..size).map(|i| (seed.wrapping_mul(i as u64 + 7) >> 13) as u8).collect();
            let crc_of = |d: &[u8], b: usize| crc32c::crc32c(&d[b * BLOCK_BYTES..b * BLOCK_BYTES + layout.block_len(b as u64)]);
            let mut table: Vec<u32> = (0..blocks).map(|b| crc_of(&data, b)).collect();
            let whole = crc32c::crc32c(&data);
            prop_assert_eq!(whole_of_blocks(&layout, &table), whole);
            let b = which % blocks;
            let start = b * BLOCK_BYTES;
            for byte in &mut data[start..start + layout.block_len(b as u64)] {
                *byte = byte.wrapping_add(1);
            }
            let new = crc_of(&data, b);
            let after = (size - start - layout.block_len(b as u64)) as u64;
            let updated = whole_after(whole, table[b], new, after);
            table[b] = new;
            prop_assert_eq!(updated, crc32c::crc32c(&data));
            prop_assert_eq!(whole_of_blocks(&layout, &table), updated);
        }
    }
}
