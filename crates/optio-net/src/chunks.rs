//! An answer's body as it came off the connection: the chunks the HTTP layer handed over, not
//! copied into one buffer. Most bodies are one chunk; an object's data is many, and a caller
//! that passes it on (the S3 gateway streaming a GET) sends them as they are, while one that
//! wants it whole gathers it once with [`Chunks::to_bytes`].

use bytes::{Bytes, BytesMut};

/// A body in chunks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Chunks {
    chunks: Vec<Bytes>,
    len: usize,
}

impl From<Bytes> for Chunks {
    fn from(bytes: Bytes) -> Chunks {
        let mut chunks = Chunks::default();
        chunks.push(bytes);
        chunks
    }
}

impl optio_proto::answer::AnswerBody for Chunks {
    fn bytes(&self) -> std::borrow::Cow<'_, [u8]> {
        match self.chunks.as_slice() {
            [] => std::borrow::Cow::Borrowed(&[]),
            [one] => std::borrow::Cow::Borrowed(one),
            _ => std::borrow::Cow::Owned(self.to_bytes().to_vec()),
        }
    }
}

impl Chunks {
    /// Appends a chunk (an empty one is dropped).
    pub fn push(&mut self, chunk: Bytes) {
        if !chunk.is_empty() {
            self.len += chunk.len();
            self.chunks.push(chunk);
        }
    }

    /// Bytes in all.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The chunks, in order.
    pub fn chunks(&self) -> &[Bytes] {
        &self.chunks
    }

    /// The chunks, in order, given away.
    pub fn into_chunks(self) -> Vec<Bytes> {
        self.chunks
    }

    /// The body in one buffer: the chunk itself when there is one, else a copy of them all.
    pub fn to_bytes(&self) -> Bytes {
        match self.chunks.as_slice() {
            [] => Bytes::new(),
            [one] => one.clone(),
            many => {
                let mut all = BytesMut::with_capacity(self.len);
                for chunk in many {
                    all.extend_from_slice(chunk);
                }
                all.freeze()
            }
        }
    }

    /// [`optio_proto::checksum`] of the whole body, over the chunks in turn.
    pub fn checksum(&self) -> u32 {
        self.chunks.iter().fold(0, |crc, chunk| optio_proto::checksum_append(crc, chunk))
    }

    /// Bytes `start..end` (clamped to the body), sharing the chunks' memory.
    pub fn slice(&self, start: usize, end: usize) -> Chunks {
        let end = end.min(self.len);
        let mut out = Chunks::default();
        let mut at = 0usize;
        for chunk in &self.chunks {
            let (from, to) = (at, at + chunk.len());
            at = to;
            if to <= start || from >= end {
                continue;
            }
            out.push(chunk.slice(start.max(from) - from..end.min(to) - from));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(data: &[u8], sizes: &[usize]) -> Chunks {
        let mut chunks = Chunks::default();
        let mut at = 0;
        for size in sizes {
            chunks.push(Bytes::copy_from_slice(&data[at..at + size]));
            at += size;
        }
        chunks.push(Bytes::copy_from_slice(&data[at..]));
        chunks
    }

    #[test]
    fn chunks_read_as_the_whole() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 % 251) as u8).collect();
        for sizes in [&[][..], &[1000], &[1, 999], &[300, 0, 300, 200], &[10; 99]] {
            let chunks = split(&data, sizes);
            assert_eq!(chunks.len(), 1000);
            assert_eq!(chunks.to_bytes(), data);
            assert_eq!(chunks.checksum(), optio_proto::checksum(&data));
            for (start, end) in [(0, 1000), (0, 0), (5, 17), (299, 301), (990, 2000), (1000, 1000)]
            {
                let end_clamped = end.min(1000);
                assert_eq!(
                    chunks.slice(start, end).to_bytes(),
                    data[start..end_clamped],
                    "{sizes:?} {start}..{end}"
                );
            }
        }
        assert!(Chunks::default().to_bytes().is_empty());
    }

    proptest::proptest! {
        /// However a body is split, and whatever range is cut from it, the chunks read as the
        /// same bytes and checksum as the whole.
        #[test]
        fn any_split_and_slice_reads_as_the_whole(
            data in proptest::collection::vec(proptest::num::u8::ANY, 0..3000),
            cuts in proptest::collection::vec(0usize..3000, 0..12),
            start in 0usize..3200,
            len in 0usize..3200,
        ) {
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(data.len())).collect();
            cuts.sort_unstable();
            let mut chunks = Chunks::default();
            let mut at = 0;
            for cut in cuts {
                chunks.push(Bytes::copy_from_slice(&data[at..cut]));
                at = cut;
            }
            chunks.push(Bytes::copy_from_slice(&data[at..]));
            proptest::prop_assert_eq!(chunks.len(), data.len());
            proptest::prop_assert_eq!(&chunks.to_bytes()[..], &data[..]);
            proptest::prop_assert_eq!(chunks.checksum(), optio_proto::checksum(&data));
            let (from, to) = (start.min(data.len()), start.saturating_add(len).min(data.len()));
            let expected = if start >= data.len() { &[][..] } else { &data[from..to] };
            proptest::prop_assert_eq!(&chunks.slice(start, start + len).to_bytes()[..], expected);
        }
    }
}
