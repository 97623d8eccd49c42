//! Choice records: which of an object's k candidates holds it, kept at the object's home
//! (candidate 0's primary) and created there with an atomic create-if-absent, so two clients
//! racing to create an object never put it on two candidates.

use serde::{Deserialize, Serialize};

use crate::error::FormatError;
use crate::header::checksum;

const MAGIC: &[u8; 8] = b"OPTIOCHR";
/// Bytes of an encoded record.
pub const RECORD_BYTES: usize = 32;
const RECORD_FORMAT_VERSION: u16 = 1;

/// A choice record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChoiceRecord {
    /// The candidate chosen (0-based, below `choices`).
    pub candidate: u8,
    /// How many candidates the pool had when the choice was made.
    pub choices: u8,
    /// Who made it (a client's random id), for diagnostics and for the creator's own
    /// replacement of a choice it made (when the chosen candidate turned out full).
    pub writer: u64,
}

impl ChoiceRecord {
    /// The stored form: magic, format version, candidate, choices, writer, crc32c.
    pub fn encode(&self) -> [u8; RECORD_BYTES] {
        let mut out = [0u8; RECORD_BYTES];
        out[0..8].copy_from_slice(MAGIC);
        out[8..10].copy_from_slice(&RECORD_FORMAT_VERSION.to_le_bytes());
        out[10] = self.candidate;
        out[11] = self.choices;
        out[16..24].copy_from_slice(&self.writer.to_le_bytes());
        let crc = checksum(&out[0..28]);
        out[28..32].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// Decodes a stored record, verifying it.
    pub fn decode(bytes: &[u8]) -> Result<ChoiceRecord, FormatError> {
        if bytes.len() != RECORD_BYTES {
            return Err(FormatError::Truncated { bytes: bytes.len() });
        }
        if &bytes[0..8] != MAGIC {
            return Err(FormatError::BadMagic);
        }
        let version = u16::from_le_bytes([bytes[8], bytes[9]]);
        if version != RECORD_FORMAT_VERSION {
            return Err(FormatError::UnsupportedVersion {
                found: version,
                supported: RECORD_FORMAT_VERSION,
            });
        }
        let mut crc = [0u8; 4];
        crc.copy_from_slice(&bytes[28..32]);
        if checksum(&bytes[0..28]) != u32::from_le_bytes(crc) {
            return Err(FormatError::HeaderChecksum);
        }
        let mut writer = [0u8; 8];
        writer.copy_from_slice(&bytes[16..24]);
        Ok(ChoiceRecord {
            candidate: bytes[10],
            choices: bytes[11],
            writer: u64::from_le_bytes(writer),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_corruption() {
        let record = ChoiceRecord { candidate: 2, choices: 3, writer: 0xdead_beef };
        let bytes = record.encode();
        assert_eq!(ChoiceRecord::decode(&bytes), Ok(record));
        for i in 0..RECORD_BYTES {
            let mut bad = bytes;
            bad[i] ^= 0x10;
            assert!(ChoiceRecord::decode(&bad).is_err(), "flip at {i}");
        }
    }
}
