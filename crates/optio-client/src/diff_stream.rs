//! The stream `optio volume export-diff` writes and `import-diff` reads: what changed in a
//! volume between two points (snapshots, or the head), as records of data and of zeros, each
//! checked by its own crc32c and the whole by a last one (`docs/volumes.md`, "The diff
//! stream").
//!
//! ```text
//! header   "OPTIODIF" (8 bytes)  version: u32 = 1
//!          from_len: u16  from: from_len bytes (UTF-8; 0: no from-snapshot, a full diff)
//!          to_len: u16    to: to_len bytes     (0: the head, no snapshot to make)
//!          size: u64      (the volume's size at the end point)
//!          crc: u32       (crc32c of the header's bytes before it)
//! records  'D' offset: u64 length: u64 data: length bytes  crc: u32
//!          'Z' offset: u64 length: u64                      crc: u32
//!          (each crc: crc32c of the record's bytes before it, its type byte included)
//! end      'E' records: u64 crc: u32 (crc32c of every byte of the stream before it)
//! ```
//!
//! Integers are little-endian. Records lie within `size`, in increasing offset order, never
//! overlapping, each 1 byte to [`RECORD_BYTES_MAX`] long. A reader refuses anything else — a
//! bad magic, version, name, record type or length, a record out of order or beyond the end,
//! a checksum that does not match, bytes after the end record, a stream cut short — with a
//! [`StreamError`] that says where, never a panic; and it allocates no more than a record's
//! bound, and that only as the record's bytes arrive.

use std::io::{self, Read, Write};

/// The first 8 bytes of every diff stream.
pub const MAGIC: [u8; 8] = *b"OPTIODIF";
/// The format version written and read.
pub const VERSION: u32 = 1;
/// The longest snapshot name a stream may carry (the volumes' name bound).
pub const NAME_BYTES_MAX: usize = crate::volume::NAME_BYTES_MAX;
/// The longest record: a volume's largest data object.
pub const RECORD_BYTES_MAX: u64 = optio_proto::blocks::BLOCK_OBJECT_BYTES_MAX;

const DATA: u8 = b'D';
const ZERO: u8 = b'Z';
const END: u8 = b'E';

/// What a diff stream starts with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiffHeader {
    /// The snapshot the diff starts from (none: a full diff, from an empty volume).
    pub from_snap: Option<String>,
    /// The snapshot it ends at (none: the volume's head).
    pub to_snap: Option<String>,
    /// The volume's size at the end point, in bytes.
    pub size_bytes: u64,
}

/// One change: bytes to write, or a range that reads as zeros.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    /// These bytes at `offset`.
    Data {
        /// Where, in the volume.
        offset: u64,
        /// What.
        data: Vec<u8>,
    },
    /// `length` bytes of zeros at `offset`.
    Zero {
        /// Where, in the volume.
        offset: u64,
        /// How many bytes.
        length: u64,
    },
}

/// A diff stream that cannot be read (each says where, by byte offset in the stream).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StreamError {
    /// Reading or writing the stream failed.
    #[error("cannot read or write the diff stream: {0}")]
    Io(#[from] io::Error),
    /// It does not start with [`MAGIC`].
    #[error(
        "not an optio diff stream (it does not start with \"OPTIODIF\"): give a file written by `optio volume export-diff`"
    )]
    BadMagic,
    /// A format version this build does not read.
    #[error(
        "diff stream format version {0} is not supported (this optio reads version {VERSION}): import it with the optio that exported it"
    )]
    UnsupportedVersion(u32),
    /// A snapshot name that is too long or not UTF-8.
    #[error(
        "bad snapshot name in the diff stream's header at byte {at}: {reason}; the stream is damaged, export it again"
    )]
    BadName {
        /// Byte offset of the name.
        at: u64,
        /// What is wrong with it.
        reason: String,
    },
    /// An unknown record type.
    #[error(
        "unknown record type 0x{kind:02x} at byte {at} of the diff stream; the stream is damaged, export it again"
    )]
    BadRecordType {
        /// Byte offset of the record.
        at: u64,
        /// The type byte read.
        kind: u8,
    },
    /// A record of no bytes or more than [`RECORD_BYTES_MAX`].
    #[error(
        "a record at byte {at} of the diff stream is {length} bytes long (1 to {RECORD_BYTES_MAX} allowed); the stream is damaged, export it again"
    )]
    BadLength {
        /// Byte offset of the record.
        at: u64,
        /// The length it claims.
        length: u64,
    },
    /// A record beyond the volume's size as the header gives it.
    #[error(
        "a record at byte {at} of the diff stream covers {length} bytes at offset {offset}, beyond the volume's {size_bytes} bytes; the stream is damaged, export it again"
    )]
    BeyondEnd {
        /// Byte offset of the record.
        at: u64,
        /// Its offset in the volume.
        offset: u64,
        /// Its length.
        length: u64,
        /// The size in the header.
        size_bytes: u64,
    },
    /// A record that starts before the previous one ended.
    #[error(
        "a record at byte {at} of the diff stream starts at offset {offset}, before the previous record's end ({previous_end}); the stream is damaged, export it again"
    )]
    OutOfOrder {
        /// Byte offset of the record.
        at: u64,
        /// Its offset in the volume.
        offset: u64,
        /// Where the previous record ended.
        previous_end: u64,
    },
    /// A checksum that does not match what precedes it.
    #[error(
        "checksum mismatch in the {what} at byte {at} of the diff stream (stored {stored:08x}, computed {computed:08x}): the stream is damaged, export it again"
    )]
    Checksum {
        /// Which part: the header, a record, the end.
        what: &'static str,
        /// Byte offset of that part.
        at: u64,
        /// The checksum in the stream.
        stored: u32,
        /// The checksum of the bytes read.
        computed: u32,
    },
    /// The end record counts a different number of records than were read.
    #[error(
        "the diff stream's end record counts {stored} records, but {read} were read: the stream is damaged, export it again"
    )]
    RecordCount {
        /// The count in the end record.
        stored: u64,
        /// Records read.
        read: u64,
    },
    /// The stream stops before its end record.
    #[error(
        "the diff stream stops at byte {at}, before its end record: it was cut short (a partial copy or an interrupted export); export it again"
    )]
    Truncated {
        /// Bytes read.
        at: u64,
    },
    /// Bytes after the end record.
    #[error(
        "the diff stream goes on after its end record (at byte {at}): it is damaged or two streams were joined; give one stream"
    )]
    TrailingBytes {
        /// Byte offset of the first extra byte.
        at: u64,
    },
    /// A writer's record that breaks the format's rules (a programming error of the caller).
    #[error(
        "cannot write a record of {length} bytes at offset {offset} into a diff of {size_bytes} bytes after offset {previous_end}"
    )]
    BadRecord {
        /// Its offset.
        offset: u64,
        /// Its length.
        length: u64,
        /// The header's size.
        size_bytes: u64,
        /// Where the previous record ended.
        previous_end: u64,
    },
}

/// Writes a diff stream: the header at [`DiffWriter::new`], records, then the end record at
/// [`DiffWriter::finish`].
pub struct DiffWriter<W: Write> {
    inner: W,
    crc: u32,
    size_bytes: u64,
    previous_end: u64,
    records: u64,
}

impl<W: Write> DiffWriter<W> {
    /// Starts a stream with `header` (names checked against [`NAME_BYTES_MAX`]).
    pub fn new(inner: W, header: &DiffHeader) -> Result<DiffWriter<W>, StreamError> {
        let mut bytes = Vec::with_capacity(32 + 2 * NAME_BYTES_MAX);
        bytes.extend_from_slice(&MAGIC);
        bytes.extend_from_slice(&VERSION.to_le_bytes());
        for (at, name) in [&header.from_snap, &header.to_snap].into_iter().enumerate() {
            let name = name.as_deref().unwrap_or("");
            if name.len() > NAME_BYTES_MAX {
                return Err(StreamError::BadName {
                    at: at as u64,
                    reason: format!("{} bytes, at most {NAME_BYTES_MAX}", name.len()),
                });
            }
            bytes.extend_from_slice(&(name.len() as u16).to_le_bytes());
            bytes.extend_from_slice(name.as_bytes());
        }
        bytes.extend_from_slice(&header.size_bytes.to_le_bytes());
        let mut writer = DiffWriter {
            inner,
            crc: 0,
            size_bytes: header.size_bytes,
            previous_end: 0,
            records: 0,
        };
        writer.put_checked(&bytes, &[])?;
        Ok(writer)
    }

    /// Writes `bytes` then `payload` then their crc32c, all counted in the stream's checksum.
    fn put_checked(&mut self, bytes: &[u8], payload: &[u8]) -> Result<(), StreamError> {
        let crc = crc32c::crc32c_append(crc32c::crc32c(bytes), payload);
        self.put(bytes)?;
        self.put(payload)?;
        self.put(&crc.to_le_bytes())
    }

    fn put(&mut self, bytes: &[u8]) -> Result<(), StreamError> {
        self.inner.write_all(bytes)?;
        self.crc = crc32c::crc32c_append(self.crc, bytes);
        Ok(())
    }

    fn check(&mut self, offset: u64, length: u64) -> Result<(), StreamError> {
        let bad = length == 0
            || length > RECORD_BYTES_MAX
            || offset < self.previous_end
            || offset.checked_add(length).is_none_or(|end| end > self.size_bytes);
        if bad {
            return Err(StreamError::BadRecord {
                offset,
                length,
                size_bytes: self.size_bytes,
                previous_end: self.previous_end,
            });
        }
        self.previous_end = offset + length;
        self.records += 1;
        Ok(())
    }

    /// A data record: `data` at `offset`.
    pub fn data(&mut self, offset: u64, data: &[u8]) -> Result<(), StreamError> {
        self.check(offset, data.len() as u64)?;
        let mut head = [0u8; 17];
        head[0] = DATA;
        head[1..9].copy_from_slice(&offset.to_le_bytes());
        head[9..17].copy_from_slice(&(data.len() as u64).to_le_bytes());
        self.put_checked(&head, data)
    }

    /// A zero record: `length` bytes of zeros at `offset`.
    pub fn zero(&mut self, offset: u64, length: u64) -> Result<(), StreamError> {
        self.check(offset, length)?;
        let mut head = [0u8; 17];
        head[0] = ZERO;
        head[1..9].copy_from_slice(&offset.to_le_bytes());
        head[9..17].copy_from_slice(&length.to_le_bytes());
        self.put_checked(&head, &[])
    }

    /// Records written so far.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Writes the end record and flushes; returns the inner writer.
    pub fn finish(mut self) -> Result<W, StreamError> {
        let mut end = [0u8; 13];
        end[0] = END;
        end[1..9].copy_from_slice(&self.records.to_le_bytes());
        let crc = crc32c::crc32c_append(self.crc, &end[..9]);
        end[9..13].copy_from_slice(&crc.to_le_bytes());
        self.inner.write_all(&end)?;
        self.inner.flush()?;
        Ok(self.inner)
    }
}

/// Reads a diff stream, checking everything as it goes (see the module).
pub struct DiffReader<R: Read> {
    inner: R,
    header: DiffHeader,
    /// Bytes read so far.
    at: u64,
    /// crc32c of every byte read so far.
    crc: u32,
    previous_end: u64,
    records: u64,
    done: bool,
}

impl<R: Read> DiffReader<R> {
    /// Reads and checks the header.
    pub fn open(inner: R) -> Result<DiffReader<R>, StreamError> {
        let mut reader = DiffReader {
            inner,
            header: DiffHeader { from_snap: None, to_snap: None, size_bytes: 0 },
            at: 0,
            crc: 0,
            previous_end: 0,
            records: 0,
            done: false,
        };
        let mut part = 0u32;
        let mut magic = [0u8; 8];
        reader.take(&mut magic, &mut part).map_err(|e| match e {
            StreamError::Truncated { .. } => StreamError::BadMagic,
            other => other,
        })?;
        if magic != MAGIC {
            return Err(StreamError::BadMagic);
        }
        let version = u32::from_le_bytes(reader.array(&mut part)?);
        if version != VERSION {
            return Err(StreamError::UnsupportedVersion(version));
        }
        let from = reader.name(&mut part)?;
        let to = reader.name(&mut part)?;
        let size_bytes = u64::from_le_bytes(reader.array(&mut part)?);
        reader.check_crc("header", 0, part)?;
        reader.header = DiffHeader { from_snap: from, to_snap: to, size_bytes };
        Ok(reader)
    }

    /// The header.
    pub fn header(&self) -> &DiffHeader {
        &self.header
    }

    /// Bytes read so far.
    pub fn position(&self) -> u64 {
        self.at
    }

    /// Reads exactly `buf.len()` bytes, counting them in `part`'s crc and the stream's.
    fn take(&mut self, buf: &mut [u8], part: &mut u32) -> Result<(), StreamError> {
        let mut got = 0;
        while got < buf.len() {
            match self.inner.read(&mut buf[got..]) {
                Ok(0) => return Err(StreamError::Truncated { at: self.at + got as u64 }),
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        self.at += buf.len() as u64;
        self.crc = crc32c::crc32c_append(self.crc, buf);
        *part = crc32c::crc32c_append(*part, buf);
        Ok(())
    }

    fn array<const N: usize>(&mut self, part: &mut u32) -> Result<[u8; N], StreamError> {
        let mut buf = [0u8; N];
        self.take(&mut buf, part)?;
        Ok(buf)
    }

    fn name(&mut self, part: &mut u32) -> Result<Option<String>, StreamError> {
        let at = self.at;
        let len = u16::from_le_bytes(self.array(part)?) as usize;
        if len > NAME_BYTES_MAX {
            return Err(StreamError::BadName {
                at,
                reason: format!("{len} bytes, at most {NAME_BYTES_MAX}"),
            });
        }
        let mut bytes = vec![0u8; len];
        self.take(&mut bytes, part)?;
        if len == 0 {
            return Ok(None);
        }
        let name = String::from_utf8(bytes)
            .map_err(|_| StreamError::BadName { at, reason: "not UTF-8".to_string() })?;
        if crate::volume::validate_name(&name).is_err() {
            return Err(StreamError::BadName {
                at,
                reason: format!("'{name}' is not a snapshot name"),
            });
        }
        Ok(Some(name))
    }

    /// Reads the crc that closes a part (not counted in the part) and compares.
    fn check_crc(&mut self, what: &'static str, at: u64, part: u32) -> Result<(), StreamError> {
        let mut ignored = 0;
        let stored = u32::from_le_bytes(self.array(&mut ignored)?);
        if stored != part {
            return Err(StreamError::Checksum { what, at, stored, computed: part });
        }
        Ok(())
    }

    /// The next record, or `None` after the end record (checked, and nothing after it).
    pub fn next_record(&mut self) -> Result<Option<Record>, StreamError> {
        if self.done {
            return Ok(None);
        }
        let at = self.at;
        let stream_crc = self.crc;
        let mut part = 0u32;
        let [kind] = self.array::<1>(&mut part)?;
        match kind {
            DATA | ZERO => {}
            END => {
                let stored_records = u64::from_le_bytes(self.array(&mut part)?);
                let computed = crc32c::crc32c_append(
                    stream_crc,
                    &[&[END][..], &stored_records.to_le_bytes()].concat(),
                );
                let mut ignored = 0;
                let stored = u32::from_le_bytes(self.array(&mut ignored)?);
                if stored != computed {
                    return Err(StreamError::Checksum { what: "end record", at, stored, computed });
                }
                if stored_records != self.records {
                    return Err(StreamError::RecordCount {
                        stored: stored_records,
                        read: self.records,
                    });
                }
                let mut extra = [0u8; 1];
                loop {
                    match self.inner.read(&mut extra) {
                        Ok(0) => break,
                        Ok(_) => return Err(StreamError::TrailingBytes { at: self.at }),
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                self.done = true;
                return Ok(None);
            }
            kind => return Err(StreamError::BadRecordType { at, kind }),
        }
        let offset = u64::from_le_bytes(self.array(&mut part)?);
        let length = u64::from_le_bytes(self.array(&mut part)?);
        if length == 0 || length > RECORD_BYTES_MAX {
            return Err(StreamError::BadLength { at, length });
        }
        if offset.checked_add(length).is_none_or(|end| end > self.header.size_bytes) {
            return Err(StreamError::BeyondEnd {
                at,
                offset,
                length,
                size_bytes: self.header.size_bytes,
            });
        }
        if offset < self.previous_end {
            return Err(StreamError::OutOfOrder { at, offset, previous_end: self.previous_end });
        }
        let record = if kind == DATA {
            // Grown as the bytes arrive: a stream cut short allocates no more than it holds.
            let mut data = Vec::new();
            let got = (&mut self.inner).take(length).read_to_end(&mut data)?;
            self.at += got as u64;
            self.crc = crc32c::crc32c_append(self.crc, &data);
            part = crc32c::crc32c_append(part, &data);
            if (got as u64) < length {
                return Err(StreamError::Truncated { at: self.at });
            }
            Record::Data { offset, data }
        } else {
            Record::Zero { offset, length }
        };
        self.check_crc("record", at, part)?;
        self.previous_end = offset + length;
        self.records += 1;
        Ok(Some(record))
    }

    /// Reads every record to the end, checking them, without keeping them: the whole stream
    /// is sound (what `import-diff` of a file does before it writes anything).
    pub fn verify(mut self) -> Result<(DiffHeader, u64), StreamError> {
        while self.next_record()?.is_some() {}
        Ok((self.header, self.records))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> (DiffHeader, Vec<Record>) {
        let header = DiffHeader {
            from_snap: Some("s1".into()),
            to_snap: Some("s2".into()),
            size_bytes: 1 << 20,
        };
        let records = vec![
            Record::Data { offset: 0, data: (0..4096u32).map(|i| (i * 7) as u8).collect() },
            Record::Zero { offset: 4096, length: 8192 },
            Record::Data { offset: 65536, data: vec![0xab; 100] },
            Record::Zero { offset: (1 << 20) - 512, length: 512 },
        ];
        (header, records)
    }

    fn encode(header: &DiffHeader, records: &[Record]) -> Vec<u8> {
        let mut writer = DiffWriter::new(Vec::new(), header).unwrap();
        for record in records {
            match record {
                Record::Data { offset, data } => writer.data(*offset, data).unwrap(),
                Record::Zero { offset, length } => writer.zero(*offset, *length).unwrap(),
            }
        }
        writer.finish().unwrap()
    }

    fn decode(bytes: &[u8]) -> Result<(DiffHeader, Vec<Record>), StreamError> {
        let mut reader = DiffReader::open(bytes)?;
        let mut out = Vec::new();
        while let Some(record) = reader.next_record()? {
            out.push(record);
        }
        Ok((reader.header().clone(), out))
    }

    #[test]
    fn streams_round_trip() {
        let (header, records) = sample();
        let bytes = encode(&header, &records);
        assert_eq!(&bytes[..8], b"OPTIODIF");
        assert_eq!(decode(&bytes).unwrap(), (header.clone(), records));
        let full = DiffHeader { from_snap: None, to_snap: None, size_bytes: 0 };
        assert_eq!(decode(&encode(&full, &[])).unwrap(), (full, vec![]));
        assert_eq!(DiffReader::open(&bytes[..]).unwrap().verify().unwrap(), (header, 4));
    }

    #[test]
    fn every_truncation_and_every_byte_changed_is_refused() {
        let (header, records) = sample();
        let bytes = encode(&header, &records);
        for len in 0..bytes.len() {
            assert!(decode(&bytes[..len]).is_err(), "cut to {len} bytes accepted");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(matches!(decode(&longer), Err(StreamError::TrailingBytes { .. })));
        for i in 0..bytes.len() {
            for flip in [0x01u8, 0x80, 0xff] {
                let mut bad = bytes.clone();
                bad[i] ^= flip;
                assert!(decode(&bad).is_err(), "byte {i} ^ {flip:#x} accepted");
            }
        }
    }

    #[test]
    fn the_errors_say_what_is_wrong() {
        let (header, records) = sample();
        let bytes = encode(&header, &records);
        assert!(matches!(decode(b"NOTADIFF........"), Err(StreamError::BadMagic)));
        assert!(matches!(decode(b"OPT"), Err(StreamError::BadMagic)));
        let mut version = bytes.clone();
        version[8] = 2;
        assert!(matches!(decode(&version), Err(StreamError::UnsupportedVersion(2))));
        // The first record's type byte follows the header (8 + 4 + 2+2 + 2+2 + 8 + 4 bytes).
        let first = 8 + 4 + 4 + 4 + 8 + 4;
        let mut kind = bytes.clone();
        kind[first] = b'X';
        assert!(matches!(decode(&kind), Err(StreamError::BadRecordType { kind: b'X', .. })));
        let mut length = bytes.clone();
        length[first + 9..first + 17].copy_from_slice(&(RECORD_BYTES_MAX + 1).to_le_bytes());
        assert!(matches!(decode(&length), Err(StreamError::BadLength { .. })));
        let mut beyond = bytes.clone();
        beyond[first + 1..first + 9].copy_from_slice(&(1u64 << 20).to_le_bytes());
        assert!(matches!(decode(&beyond), Err(StreamError::BeyondEnd { .. })));
        let mut data = bytes.clone();
        data[first + 20] ^= 1;
        assert!(matches!(decode(&data), Err(StreamError::Checksum { what: "record", .. })));
        assert!(matches!(decode(&bytes[..bytes.len() - 13]), Err(StreamError::Truncated { .. })));
        // The writer refuses records out of order, beyond the end or empty.
        let mut writer = DiffWriter::new(Vec::new(), &header).unwrap();
        writer.zero(4096, 4096).unwrap();
        assert!(writer.zero(0, 4096).is_err());
        assert!(writer.zero(1 << 20, 1).is_err());
        assert!(writer.data(1 << 19, &[]).is_err());
    }

    fn records_strategy() -> impl Strategy<Value = (DiffHeader, Vec<Record>)> {
        let size = 1u64 << 20;
        proptest::collection::vec((0u64..4096, 1u64..4096, any::<bool>(), any::<u8>()), 0..12)
            .prop_map(move |pieces| {
                let mut at = 0u64;
                let mut records = Vec::new();
                for (gap, length, data, byte) in pieces {
                    let offset = at + gap;
                    if offset + length > size {
                        break;
                    }
                    records.push(if data {
                        Record::Data { offset, data: vec![byte; length as usize] }
                    } else {
                        Record::Zero { offset, length }
                    });
                    at = offset + length;
                }
                let header =
                    DiffHeader { from_snap: None, to_snap: Some("t".into()), size_bytes: size };
                (header, records)
            })
    }

    proptest! {
        #[test]
        fn any_stream_round_trips((header, records) in records_strategy()) {
            let bytes = encode(&header, &records);
            prop_assert_eq!(decode(&bytes).unwrap(), (header, records));
        }

        #[test]
        fn mutated_streams_are_refused_and_never_panic(
            (header, records) in records_strategy(),
            edits in proptest::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 1..4),
            cut in any::<prop::sample::Index>(),
        ) {
            let bytes = encode(&header, &records);
            let mut bad = bytes.clone();
            for (at, flip) in &edits {
                let i = at.index(bad.len());
                bad[i] ^= flip;
            }
            // Edits that cancel out leave the stream as it was; anything else is refused.
            if bad != bytes {
                prop_assert!(decode(&bad).is_err());
            }
            let len = cut.index(bytes.len());
            prop_assert!(decode(&bytes[..len]).is_err());
        }

        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let mut prefixed = MAGIC.to_vec();
            prefixed.extend_from_slice(&VERSION.to_le_bytes());
            prefixed.extend_from_slice(&bytes);
            prop_assert!(decode(&prefixed).is_err());
            let _ = decode(&bytes);
        }
    }
}
