//! A chunk as stored and sent: a fixed 32-byte header, then the chunk's data.
//!
//! ```text
//! offset  bytes  field
//!      0      4  magic "OPEC"
//!      4      2  format version (1), little-endian like every integer here
//!      6      1  K
//!      7      1  M
//!      8      1  chunk index (0..K data, K..K+M parity)
//!      9      3  reserved, zero
//!     12      4  stripe unit, bytes
//!     16      8  object length, bytes
//!     24      4  crc32c of the data
//!     28      4  crc32c of bytes 0..28
//!     32         data: stripes × stripe unit bytes
//! ```
//!
//! The header says everything needed to check the data's size without trusting it: the data
//! must be exactly [`Layout::chunk_bytes`] long for the header's profile and object length,
//! and the header's own checksum covers the data's checksum, so a flipped bit anywhere is
//! caught. Parsing borrows; it allocates nothing.

use crate::layout::{Layout, LayoutError};
use crate::profile::{Profile, ProfileError};

/// The first bytes of every chunk.
pub const CHUNK_MAGIC: [u8; 4] = *b"OPEC";
/// The chunk format this build writes and reads.
pub const CHUNK_FORMAT_VERSION: u16 = 1;
/// Bytes of a chunk's header.
pub const CHUNK_HEADER_BYTES: usize = 32;

const HEADER_CHECKED_BYTES: usize = 28;

/// Why stored or received chunk bytes cannot be trusted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ChunkError {
    /// Shorter than a header.
    #[error("chunk truncated: {bytes} bytes, a header alone is {CHUNK_HEADER_BYTES}")]
    Truncated {
        /// Bytes present.
        bytes: usize,
    },
    /// Does not start with [`CHUNK_MAGIC`].
    #[error("not an erasure-coded chunk (bad magic number)")]
    BadMagic,
    /// Written by another format version.
    #[error(
        "chunk format version {found}, this build reads version {supported}; upgrade Optio to \
         read it"
    )]
    UnsupportedVersion {
        /// Version found.
        found: u16,
        /// The version this build reads.
        supported: u16,
    },
    /// The header's checksum does not match its bytes.
    #[error("chunk header checksum mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    HeaderChecksum {
        /// Checksum stored in the header.
        stored: u32,
        /// Checksum of the header's bytes.
        computed: u32,
    },
    /// Reserved header bytes are not zero.
    #[error("chunk header has non-zero reserved bytes")]
    Reserved,
    /// The header's K, M or stripe unit is not a valid profile.
    #[error("chunk header holds an invalid profile: {0}")]
    Profile(#[from] ProfileError),
    /// The chunk index is not below K + M.
    #[error("chunk index {index} is out of range for a {k}+{m} profile (0..{})", k + m)]
    Index {
        /// Index found.
        index: u8,
        /// K of the header.
        k: u8,
        /// M of the header.
        m: u8,
    },
    /// The object length is beyond what a layout describes.
    #[error("chunk header: {0}")]
    Layout(#[from] LayoutError),
    /// The data is not as long as the header's profile and object length make it.
    #[error(
        "chunk {index}: data is {found} bytes, the header (profile {profile}, stripe unit \
         {stripe_unit_bytes}, object of {object_bytes} bytes) makes it {expected}"
    )]
    DataSize {
        /// The chunk's index.
        index: u8,
        /// The header's profile.
        profile: Profile,
        /// The header's stripe unit.
        stripe_unit_bytes: u32,
        /// The header's object length.
        object_bytes: u64,
        /// Bytes the data should have.
        expected: u64,
        /// Bytes it has.
        found: u64,
    },
    /// The data's checksum does not match the header's.
    #[error("chunk {index}: data checksum mismatch (header {stored:#010x}, data {computed:#010x})")]
    DataChecksum {
        /// The chunk's index.
        index: u8,
        /// Checksum in the header.
        stored: u32,
        /// Checksum of the data.
        computed: u32,
    },
}

/// A chunk's header: which object geometry it belongs to, which chunk it is, and its data's
/// checksum. Only built from a valid profile and index, or parsed and checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkHeader {
    profile: Profile,
    index: u8,
    object_bytes: u64,
    data_crc32c: u32,
}

impl ChunkHeader {
    /// The profile the chunk was coded with.
    pub fn profile(&self) -> Profile {
        self.profile
    }

    /// The chunk's index: below K a data chunk, from K a parity chunk.
    pub fn index(&self) -> u8 {
        self.index
    }

    /// The whole object's length, bytes.
    pub fn object_bytes(&self) -> u64 {
        self.object_bytes
    }

    /// The crc32c of the chunk's data.
    pub fn data_crc32c(&self) -> u32 {
        self.data_crc32c
    }

    /// The object's layout.
    pub fn layout(&self) -> Layout {
        Layout::new(self.profile, self.object_bytes).expect("checked when the header was made")
    }

    /// Bytes of the data that follows the header.
    pub fn data_bytes(&self) -> u64 {
        self.layout().chunk_bytes()
    }

    /// The header's bytes.
    pub fn to_bytes(&self) -> [u8; CHUNK_HEADER_BYTES] {
        let mut bytes = [0u8; CHUNK_HEADER_BYTES];
        bytes[0..4].copy_from_slice(&CHUNK_MAGIC);
        bytes[4..6].copy_from_slice(&CHUNK_FORMAT_VERSION.to_le_bytes());
        bytes[6] = self.profile.k();
        bytes[7] = self.profile.m();
        bytes[8] = self.index;
        bytes[12..16].copy_from_slice(&self.profile.stripe_unit_bytes().to_le_bytes());
        bytes[16..24].copy_from_slice(&self.object_bytes.to_le_bytes());
        bytes[24..28].copy_from_slice(&self.data_crc32c.to_le_bytes());
        let checksum = crc32c::crc32c(&bytes[..HEADER_CHECKED_BYTES]);
        bytes[28..32].copy_from_slice(&checksum.to_le_bytes());
        bytes
    }

    /// Parses and checks the header at the start of `bytes` (what follows is not looked at):
    /// magic, version, checksum, reserved bytes, profile, index and object length.
    pub fn parse(bytes: &[u8]) -> Result<ChunkHeader, ChunkError> {
        let header: &[u8; CHUNK_HEADER_BYTES] = bytes
            .get(..CHUNK_HEADER_BYTES)
            .and_then(|prefix| prefix.try_into().ok())
            .ok_or(ChunkError::Truncated { bytes: bytes.len() })?;
        if header[0..4] != CHUNK_MAGIC {
            return Err(ChunkError::BadMagic);
        }
        let version = u16::from_le_bytes([header[4], header[5]]);
        if version != CHUNK_FORMAT_VERSION {
            return Err(ChunkError::UnsupportedVersion {
                found: version,
                supported: CHUNK_FORMAT_VERSION,
            });
        }
        let stored = u32::from_le_bytes([header[28], header[29], header[30], header[31]]);
        let computed = crc32c::crc32c(&header[..HEADER_CHECKED_BYTES]);
        if stored != computed {
            return Err(ChunkError::HeaderChecksum { stored, computed });
        }
        if header[9..12] != [0, 0, 0] {
            return Err(ChunkError::Reserved);
        }
        let (k, m, index) = (header[6], header[7], header[8]);
        let stripe_unit = u32::from_le_bytes([header[12], header[13], header[14], header[15]]);
        let profile = Profile::new(u32::from(k), u32::from(m), u64::from(stripe_unit))?;
        if index >= profile.chunks() {
            return Err(ChunkError::Index { index, k, m });
        }
        let mut object = [0u8; 8];
        object.copy_from_slice(&header[16..24]);
        let object_bytes = u64::from_le_bytes(object);
        Layout::new(profile, object_bytes)?;
        let data_crc32c = u32::from_le_bytes([header[24], header[25], header[26], header[27]]);
        Ok(ChunkHeader { profile, index, object_bytes, data_crc32c })
    }

    fn check_data_size(&self, data: &[u8]) -> Result<(), ChunkError> {
        let expected = self.data_bytes();
        let found = data.len() as u64;
        if found != expected {
            return Err(ChunkError::DataSize {
                index: self.index,
                profile: self.profile,
                stripe_unit_bytes: self.profile.stripe_unit_bytes(),
                object_bytes: self.object_bytes,
                expected,
                found,
            });
        }
        Ok(())
    }
}

/// A chunk that owns its data, as [`crate::encode`] and [`crate::reconstruct`] make it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chunk {
    header: ChunkHeader,
    data: Vec<u8>,
}

/// A chunk borrowed from bytes read or received: a checked header and data of the size it
/// says. Whether the data matches its checksum is checked by [`ChunkRef::verify`], by
/// [`Chunk::parse`] and by every read ([`crate::decode`], [`crate::read_range`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkRef<'a> {
    header: ChunkHeader,
    data: &'a [u8],
}

impl Chunk {
    /// Chunk `index` of an object of `object_bytes` bytes with this data; its checksum is
    /// computed here. For a chunk whose data was changed in place (a data unit rewritten, a
    /// parity delta applied).
    pub fn new(
        profile: Profile,
        index: u8,
        object_bytes: u64,
        data: Vec<u8>,
    ) -> Result<Chunk, ChunkError> {
        if index >= profile.chunks() {
            return Err(ChunkError::Index { index, k: profile.k(), m: profile.m() });
        }
        Layout::new(profile, object_bytes)?;
        let header =
            ChunkHeader { profile, index, object_bytes, data_crc32c: crc32c::crc32c(&data) };
        header.check_data_size(&data)?;
        Ok(Chunk { header, data })
    }

    /// Parses a whole chunk (header and data, nothing after) and checks all of it, the data's
    /// checksum included.
    pub fn parse(bytes: &[u8]) -> Result<ChunkRef<'_>, ChunkError> {
        let chunk = ChunkRef::parse_unverified(bytes)?;
        chunk.verify()?;
        Ok(chunk)
    }

    /// The header.
    pub fn header(&self) -> &ChunkHeader {
        &self.header
    }

    /// The chunk's index.
    pub fn index(&self) -> u8 {
        self.header.index
    }

    /// The data (without the header).
    pub fn data(&self) -> &[u8] {
        &self.data
    }

    /// The data, giving up the chunk.
    pub fn into_data(self) -> Vec<u8> {
        self.data
    }

    /// A borrowed view, for [`crate::decode`] and the other reads.
    pub fn view(&self) -> ChunkRef<'_> {
        ChunkRef { header: self.header, data: &self.data }
    }

    /// Header then data, as stored and sent.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut bytes = Vec::with_capacity(CHUNK_HEADER_BYTES + self.data.len());
        bytes.extend_from_slice(&self.header.to_bytes());
        bytes.extend_from_slice(&self.data);
        bytes
    }
}

impl<'a> ChunkRef<'a> {
    /// A chunk from a header and its data, checking the data's size (not its checksum).
    pub fn new(header: ChunkHeader, data: &'a [u8]) -> Result<ChunkRef<'a>, ChunkError> {
        header.check_data_size(data)?;
        Ok(ChunkRef { header, data })
    }

    /// Parses a whole chunk, checking the header and the data's size but not the data's
    /// checksum: for a read that should count a corrupt chunk as one to repair rather than
    /// fail ([`crate::decode`] verifies it).
    pub fn parse_unverified(bytes: &'a [u8]) -> Result<ChunkRef<'a>, ChunkError> {
        let header = ChunkHeader::parse(bytes)?;
        ChunkRef::new(header, &bytes[CHUNK_HEADER_BYTES..])
    }

    /// The header.
    pub fn header(&self) -> &ChunkHeader {
        &self.header
    }

    /// The chunk's index.
    pub fn index(&self) -> u8 {
        self.header.index
    }

    /// The data, not verified against its checksum unless [`ChunkRef::verify`] said so.
    pub fn data(&self) -> &'a [u8] {
        self.data
    }

    /// Checks the data against the header's checksum.
    pub fn verify(&self) -> Result<(), ChunkError> {
        let computed = crc32c::crc32c(self.data);
        if computed != self.header.data_crc32c {
            return Err(ChunkError::DataChecksum {
                index: self.header.index,
                stored: self.header.data_crc32c,
                computed,
            });
        }
        Ok(())
    }

    /// An owned copy.
    pub fn to_owned_chunk(&self) -> Chunk {
        Chunk { header: self.header, data: self.data.to_vec() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Chunk {
        let profile = Profile::new(2, 1, 64).expect("valid");
        Chunk::new(profile, 2, 100, vec![7u8; 64]).expect("consistent")
    }

    #[test]
    fn round_trips_and_reports_each_fault() {
        let chunk = sample();
        let bytes = chunk.to_bytes();
        assert_eq!(bytes.len(), CHUNK_HEADER_BYTES + 64);
        assert_eq!(Chunk::parse(&bytes).expect("intact").to_owned_chunk(), chunk);

        assert!(matches!(Chunk::parse(&bytes[..10]), Err(ChunkError::Truncated { bytes: 10 })));
        assert!(matches!(Chunk::parse(&bytes[..40]), Err(ChunkError::DataSize { .. })));
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(matches!(Chunk::parse(&longer), Err(ChunkError::DataSize { .. })));

        let mut bad = bytes.clone();
        bad[0] = b'X';
        assert_eq!(Chunk::parse(&bad), Err(ChunkError::BadMagic));
        let mut bad = bytes.clone();
        bad[4] = 9;
        assert!(matches!(Chunk::parse(&bad), Err(ChunkError::UnsupportedVersion { found: 9, .. })));
        for at in 6..CHUNK_HEADER_BYTES {
            let mut bad = bytes.clone();
            bad[at] ^= 1;
            assert!(
                matches!(Chunk::parse(&bad), Err(ChunkError::HeaderChecksum { .. })),
                "byte {at}"
            );
        }
        let mut bad = bytes.clone();
        bad[CHUNK_HEADER_BYTES + 5] ^= 0x40;
        let error = Chunk::parse(&bad).expect_err("corrupt data");
        assert!(matches!(error, ChunkError::DataChecksum { index: 2, .. }), "{error}");
        assert!(ChunkRef::parse_unverified(&bad).is_ok());
    }

    /// A header with a valid checksum but fields the parser must still refuse.
    fn resealed(mut header: [u8; CHUNK_HEADER_BYTES]) -> [u8; CHUNK_HEADER_BYTES] {
        let checksum = crc32c::crc32c(&header[..HEADER_CHECKED_BYTES]);
        header[28..32].copy_from_slice(&checksum.to_le_bytes());
        header
    }

    #[test]
    fn refuses_checksummed_headers_with_bad_fields() {
        let good = sample().header().to_bytes();
        let cases: [(usize, u8, &str); 7] = [
            (6, 0, "no data chunks"),
            (7, 0, "no parity chunks"),
            (6, 40, "too many chunks"),
            (8, 3, "index past k+m"),
            (10, 1, "reserved"),
            (12, 1, "unaligned stripe unit"),
            (23, 0xff, "object too large"),
        ];
        for (at, value, what) in cases {
            let mut header = good;
            header[at] = value;
            let header = resealed(header);
            assert!(ChunkHeader::parse(&header).is_err(), "{what}");
        }
    }

    #[test]
    fn new_refuses_inconsistent_chunks() {
        let profile = Profile::new(2, 1, 64).expect("valid");
        assert!(matches!(Chunk::new(profile, 3, 0, vec![]), Err(ChunkError::Index { .. })));
        assert!(matches!(Chunk::new(profile, 0, 1, vec![]), Err(ChunkError::DataSize { .. })));
        assert!(Chunk::new(profile, 0, 0, vec![]).is_ok());
    }
}
