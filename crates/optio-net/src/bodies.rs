//! Frame bodies on a stream, without copies the data does not need: a body is read into
//! memory the kernel writes first (never zeroed before), and a head and a large body are
//! written together from where each lies (never joined into one buffer).

use std::io::{self, IoSlice};

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Reads a body of exactly `len` bytes (a length the frame's prefix gave, already bounded by
/// the protocol's maximum) into a buffer of the process's pool ([`crate::buffers`]) or a
/// fresh one, not zeroed first: the reads write every byte of it. A stream that ends before
/// is [`io::ErrorKind::UnexpectedEof`].
pub async fn read_body<R: AsyncRead + Unpin + ?Sized>(
    reader: &mut R,
    len: usize,
) -> io::Result<Bytes> {
    let pool = crate::buffers::shared();
    let mut body = pool.take(len);
    body.reserve_exact(crate::buffers::capacity_for(len));
    while body.len() < len {
        // (Never past `len`: the next frame follows in the stream.)
        let left = (len - body.len()) as u64;
        let n = (&mut *reader).take(left).read_buf(&mut body).await?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("the stream ended {} bytes into a body of {len}", body.len()),
            ));
        }
    }
    Ok(crate::buffers::BufferPool::bytes(pool, body))
}

/// Writes `head` then `body`, with one vectored write where the stream takes them (a TCP
/// socket), else one after the other.
pub async fn write_all_pair<W: AsyncWrite + Unpin + ?Sized>(
    writer: &mut W,
    head: &[u8],
    body: &[u8],
) -> io::Result<()> {
    if body.is_empty() {
        return writer.write_all(head).await;
    }
    let (mut head, mut body) = (head, body);
    while !head.is_empty() {
        let n = writer.write_vectored(&[IoSlice::new(head), IoSlice::new(body)]).await?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::WriteZero, "the stream took no more bytes"));
        }
        if n >= head.len() {
            body = &body[n - head.len()..];
            head = &[];
        } else {
            head = &head[n..];
        }
    }
    writer.write_all(body).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_body_is_read_to_its_length_and_no_further() {
        let stream: &[u8] = b"0123456789next frame";
        let mut reader = tokio::io::BufReader::with_capacity(4, stream);
        let body = read_body(&mut reader, 10).await.unwrap();
        assert_eq!(&body[..], b"0123456789");
        let mut rest = Vec::new();
        reader.read_to_end(&mut rest).await.unwrap();
        assert_eq!(rest, b"next frame");
        assert!(read_body(&mut &b""[..], 0).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_stream_that_ends_inside_a_body_is_an_unexpected_end() {
        let error = read_body(&mut &b"short"[..], 9).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::UnexpectedEof);
        assert!(error.to_string().contains("5 bytes into a body of 9"), "{error}");
    }

    #[tokio::test]
    async fn a_head_and_body_arrive_whole_and_in_order() {
        let (mut client, mut server) = tokio::io::duplex(7);
        let body: Vec<u8> = (0..100_000u32).map(|i| i as u8).collect();
        let expected = [b"head:".as_slice(), &body].concat();
        let reading = tokio::spawn(async move {
            let mut got = Vec::new();
            server.read_to_end(&mut got).await.unwrap();
            got
        });
        write_all_pair(&mut client, b"head:", &body).await.unwrap();
        write_all_pair(&mut client, b"", b"").await.unwrap();
        drop(client);
        assert_eq!(reading.await.unwrap(), expected);
    }
}
