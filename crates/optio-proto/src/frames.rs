//! Frames: the data path's requests and answers, many in flight on one connection.
//!
//! A client that sends many small requests to the same server (a block volume's 4 KiB reads and
//! writes) pays, over HTTP/1.1, one connection per request in flight and the HTTP stacks'
//! parsing on both sides. Over frames it keeps one connection per server, sends each request as
//! one frame tagged with an id, and the server answers each as soon as it is done, in any
//! order. The connection starts as HTTP/1.1 and is upgraded (`GET /v1/frames`,
//! `Upgrade: optio-frames/1`), so frames go through the same port, the same TLS and the same
//! connection limits as everything else.
//!
//! A frame carries an HTTP request or answer, not a new set of operations: the method, the path
//! with its query, the headers and the body, so the server runs the request through the same
//! router — authentication (each request still carries its own signature), authorisation,
//! epochs, fencing — as one that came over HTTP/1.1.
//!
//! ```text
//! frame    := head_len u32 | body_len u32 | head (head_len bytes) | body (body_len bytes)
//! request  := id u64 | method_len u8 | method | path_len u16 | path | headers
//! answer   := id u64 | status u16 | headers
//! headers  := count u16 | (name_len u16 | name | value_len u16 | value) * count
//! ```
//!
//! Integers are big-endian. Limits ([`HEAD_BYTES_MAX`], [`BODY_BYTES_MAX`], [`HEADERS_MAX`])
//! are checked before anything is allocated; a frame that breaks one, or a head that does not
//! parse, ends the connection.

use thiserror::Error;

/// The path a connection asks to be upgraded on.
pub const UPGRADE_PATH: &str = "/v1/frames";
/// The `Upgrade` header's value.
pub const PROTOCOL: &str = "optio-frames/1";
/// Bytes before a frame's head: its head's and its body's lengths.
pub const PREFIX_BYTES: usize = 8;
/// The largest head (method, path and headers).
pub const HEAD_BYTES_MAX: usize = 64 << 10;
/// The largest body: requests whose body or answer may be larger go over HTTP/1.1.
pub const BODY_BYTES_MAX: usize = 16 << 20;
/// The most headers in one head.
pub const HEADERS_MAX: usize = 128;
/// The longest method name.
const METHOD_BYTES_MAX: usize = 16;

/// A frame that breaks the protocol.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum FrameError {
    /// The head is longer than [`HEAD_BYTES_MAX`].
    #[error("a frame's head of {0} bytes is over the limit of {HEAD_BYTES_MAX}")]
    HeadTooLarge(u64),
    /// The body is longer than [`BODY_BYTES_MAX`].
    #[error("a frame's body of {0} bytes is over the limit of {BODY_BYTES_MAX}")]
    BodyTooLarge(u64),
    /// The head ends in the middle of a field.
    #[error("a frame's head ends inside its {0}")]
    Truncated(&'static str),
    /// The head has bytes after its last header.
    #[error("a frame's head has {0} bytes after its last header")]
    Trailing(usize),
    /// More headers than [`HEADERS_MAX`].
    #[error("a frame has {0} headers, over the limit of {HEADERS_MAX}")]
    TooManyHeaders(usize),
    /// A method, path, header name or value that is not visible ASCII (values: not text).
    #[error("a frame's {0} is not valid text")]
    NotText(&'static str),
    /// A field too long for its length prefix.
    #[error("a frame's {0} is too long to encode")]
    FieldTooLong(&'static str),
}

/// A frame's head and body lengths, from its first [`PREFIX_BYTES`] bytes; checked against the
/// limits before anything is read or allocated.
pub fn decode_prefix(prefix: [u8; PREFIX_BYTES]) -> Result<(usize, usize), FrameError> {
    let head = u32::from_be_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]);
    let body = u32::from_be_bytes([prefix[4], prefix[5], prefix[6], prefix[7]]);
    if head as usize > HEAD_BYTES_MAX {
        return Err(FrameError::HeadTooLarge(u64::from(head)));
    }
    if body as usize > BODY_BYTES_MAX {
        return Err(FrameError::BodyTooLarge(u64::from(body)));
    }
    Ok((head as usize, body as usize))
}

/// A request's head.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestHead<'a> {
    /// Chosen by the client; the answer carries it.
    pub id: u64,
    /// `GET`, `PUT`, …
    pub method: &'a str,
    /// Path and query, as on an HTTP request line.
    pub path: &'a str,
    /// Names and values.
    pub headers: Vec<(&'a str, &'a str)>,
}

/// An answer's head.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnswerHead<'a> {
    /// The request's id.
    pub id: u64,
    /// HTTP status code.
    pub status: u16,
    /// Names and values.
    pub headers: Vec<(&'a str, &'a str)>,
}

/// Appends a request frame's prefix and head to `out` (the body, `body_len` bytes, follows).
pub fn encode_request<'h>(
    out: &mut Vec<u8>,
    id: u64,
    method: &str,
    path: &str,
    headers: impl IntoIterator<Item = (&'h str, &'h str)>,
    body_len: usize,
) -> Result<(), FrameError> {
    let method_len = u8::try_from(method.len())
        .ok()
        .filter(|_| method.len() <= METHOD_BYTES_MAX)
        .ok_or(FrameError::FieldTooLong("method"))?;
    let start = begin(out, id);
    out.push(method_len);
    out.extend_from_slice(method.as_bytes());
    put_field(out, path.as_bytes(), "path")?;
    put_headers(out, headers)?;
    finish(out, start, body_len)
}

/// Appends an answer frame's prefix and head to `out` (the body, `body_len` bytes, follows).
pub fn encode_answer<'h>(
    out: &mut Vec<u8>,
    id: u64,
    status: u16,
    headers: impl IntoIterator<Item = (&'h str, &'h str)>,
    body_len: usize,
) -> Result<(), FrameError> {
    let start = begin(out, id);
    out.extend_from_slice(&status.to_be_bytes());
    put_headers(out, headers)?;
    finish(out, start, body_len)
}

/// Decodes a request's head (the bytes after the prefix).
pub fn decode_request(head: &[u8]) -> Result<RequestHead<'_>, FrameError> {
    let mut reader = Reader { rest: head };
    let id = u64::from_be_bytes(reader.array("id")?);
    let [method_len] = reader.array::<1>("method")?;
    if usize::from(method_len) > METHOD_BYTES_MAX {
        return Err(FrameError::FieldTooLong("method"));
    }
    let method = token(reader.take(usize::from(method_len), "method")?, "method")?;
    let path = reader.field("path")?;
    let path = std::str::from_utf8(path)
        .ok()
        .filter(|p| p.starts_with('/') && p.bytes().all(|b| b.is_ascii_graphic()))
        .ok_or(FrameError::NotText("path"))?;
    let headers = reader.headers()?;
    reader.end()?;
    Ok(RequestHead { id, method, path, headers })
}

/// Decodes an answer's head (the bytes after the prefix).
pub fn decode_answer(head: &[u8]) -> Result<AnswerHead<'_>, FrameError> {
    let mut reader = Reader { rest: head };
    let id = u64::from_be_bytes(reader.array("id")?);
    let status = u16::from_be_bytes(reader.array("status")?);
    let headers = reader.headers()?;
    reader.end()?;
    Ok(AnswerHead { id, status, headers })
}

/// Starts a frame at the end of `out`: room for its prefix (written by [`finish`]), then the
/// id. Returns where the frame starts.
fn begin(out: &mut Vec<u8>, id: u64) -> usize {
    let start = out.len();
    out.extend_from_slice(&[0; PREFIX_BYTES]);
    out.extend_from_slice(&id.to_be_bytes());
    start
}

fn put_field(out: &mut Vec<u8>, bytes: &[u8], what: &'static str) -> Result<(), FrameError> {
    let len = u16::try_from(bytes.len()).map_err(|_| FrameError::FieldTooLong(what))?;
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(bytes);
    Ok(())
}

fn put_headers<'h>(
    out: &mut Vec<u8>,
    headers: impl IntoIterator<Item = (&'h str, &'h str)>,
) -> Result<(), FrameError> {
    let count_at = out.len();
    out.extend_from_slice(&[0, 0]);
    let mut count = 0usize;
    for (name, value) in headers {
        count += 1;
        if count > HEADERS_MAX {
            return Err(FrameError::TooManyHeaders(count));
        }
        put_field(out, name.as_bytes(), "header name")?;
        put_field(out, value.as_bytes(), "header value")?;
    }
    let count = u16::try_from(count).map_err(|_| FrameError::TooManyHeaders(count))?;
    out[count_at..count_at + 2].copy_from_slice(&count.to_be_bytes());
    Ok(())
}

/// Writes the prefix of the frame that starts at `start`.
fn finish(out: &mut [u8], start: usize, body_len: usize) -> Result<(), FrameError> {
    let head = out.len() - start - PREFIX_BYTES;
    let head_u32 = u32::try_from(head)
        .ok()
        .filter(|_| head <= HEAD_BYTES_MAX)
        .ok_or(FrameError::HeadTooLarge(head as u64))?;
    let body_u32 = u32::try_from(body_len)
        .ok()
        .filter(|_| body_len <= BODY_BYTES_MAX)
        .ok_or(FrameError::BodyTooLarge(body_len as u64))?;
    out[start..start + 4].copy_from_slice(&head_u32.to_be_bytes());
    out[start + 4..start + 8].copy_from_slice(&body_u32.to_be_bytes());
    Ok(())
}

/// A method or header name: visible ASCII, not empty.
fn token<'a>(bytes: &'a [u8], what: &'static str) -> Result<&'a str, FrameError> {
    if bytes.is_empty() || !bytes.iter().all(|b| b.is_ascii_graphic()) {
        return Err(FrameError::NotText(what));
    }
    std::str::from_utf8(bytes).map_err(|_| FrameError::NotText(what))
}

struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], FrameError> {
        if self.rest.len() < n {
            return Err(FrameError::Truncated(what));
        }
        let (taken, rest) = self.rest.split_at(n);
        self.rest = rest;
        Ok(taken)
    }

    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], FrameError> {
        let bytes = self.take(N, what)?;
        Ok(bytes.try_into().expect("take returned N bytes"))
    }

    fn field(&mut self, what: &'static str) -> Result<&'a [u8], FrameError> {
        let len = u16::from_be_bytes(self.array(what)?);
        self.take(usize::from(len), what)
    }

    fn headers(&mut self) -> Result<Vec<(&'a str, &'a str)>, FrameError> {
        let count = usize::from(u16::from_be_bytes(self.array("header count")?));
        if count > HEADERS_MAX {
            return Err(FrameError::TooManyHeaders(count));
        }
        let mut headers = Vec::with_capacity(count);
        for _ in 0..count {
            let name = token(self.field("header name")?, "header name")?;
            let value = self.field("header value")?;
            // HTTP field values: visible ASCII, spaces and tabs (what `http` accepts as text).
            let value = std::str::from_utf8(value)
                .ok()
                .filter(|v| v.bytes().all(|b| b == b'\t' || (b' '..=b'~').contains(&b)))
                .ok_or(FrameError::NotText("header value"))?;
            headers.push((name, value));
        }
        Ok(headers)
    }

    fn end(&self) -> Result<(), FrameError> {
        match self.rest.len() {
            0 => Ok(()),
            n => Err(FrameError::Trailing(n)),
        }
    }
}

#[cfg(test)]
#[allow(clippy::cast_possible_truncation, reason = "test data: small values, or truncation wanted")]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn split(frame: &[u8]) -> (&[u8], usize) {
        let (head, body) = decode_prefix(frame[..PREFIX_BYTES].try_into().unwrap()).unwrap();
        assert_eq!(frame.len(), PREFIX_BYTES + head, "the prefix counts the head");
        (&frame[PREFIX_BYTES..], body)
    }

    #[test]
    fn a_request_round_trips() {
        let mut out = Vec::new();
        let headers = [("range", "bytes=0-4095"), ("x-optio-epoch", "7")];
        encode_request(&mut out, 42, "GET", "/v1/dev/3/objects/1/a%2Fb?x=1", headers, 0).unwrap();
        let (head, body) = split(&out);
        assert_eq!(body, 0);
        let request = decode_request(head).unwrap();
        assert_eq!(request.id, 42);
        assert_eq!(request.method, "GET");
        assert_eq!(request.path, "/v1/dev/3/objects/1/a%2Fb?x=1");
        assert_eq!(request.headers, headers.to_vec());
    }

    #[test]
    fn an_answer_round_trips() {
        let mut out = Vec::new();
        encode_answer(&mut out, u64::MAX, 206, [("x-optio-version", "12")], 4096).unwrap();
        let (head, body) = split(&out);
        assert_eq!(body, 4096);
        let answer = decode_answer(head).unwrap();
        assert_eq!((answer.id, answer.status), (u64::MAX, 206));
        assert_eq!(answer.headers, vec![("x-optio-version", "12")]);
    }

    #[test]
    fn limits_are_checked_before_anything_is_read() {
        let mut prefix = [0u8; PREFIX_BYTES];
        prefix[..4].copy_from_slice(&(HEAD_BYTES_MAX as u32 + 1).to_be_bytes());
        assert!(matches!(decode_prefix(prefix), Err(FrameError::HeadTooLarge(_))));
        let mut prefix = [0u8; PREFIX_BYTES];
        prefix[4..].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(matches!(decode_prefix(prefix), Err(FrameError::BodyTooLarge(_))));
        let mut out = Vec::new();
        let many = (0..=HEADERS_MAX).map(|_| ("a", "b"));
        assert!(matches!(
            encode_request(&mut out, 1, "GET", "/", many, 0),
            Err(FrameError::TooManyHeaders(_))
        ));
        let mut out = Vec::new();
        assert!(encode_answer(&mut out, 1, 200, [], BODY_BYTES_MAX + 1).is_err());
    }

    #[test]
    fn bad_heads_are_refused() {
        let mut out = Vec::new();
        encode_request(&mut out, 1, "GET", "/x", [("a", "b")], 0).unwrap();
        let head = &out[PREFIX_BYTES..];
        for cut in 0..head.len() {
            assert!(decode_request(&head[..cut]).is_err(), "cut at {cut}");
        }
        let mut longer = head.to_vec();
        longer.push(0);
        assert_eq!(decode_request(&longer), Err(FrameError::Trailing(1)));
        let mut out = Vec::new();
        encode_request(&mut out, 1, "GET", "no-slash", [], 0).unwrap();
        assert_eq!(decode_request(&out[PREFIX_BYTES..]), Err(FrameError::NotText("path")));
        // A method longer than any (the encoder refuses it too).
        let mut long = 1u64.to_be_bytes().to_vec();
        long.push(17);
        long.extend_from_slice(b"ABCDEFGHIJKLMNOPQ");
        long.extend_from_slice(&[0, 1, b'/', 0, 0]);
        assert_eq!(decode_request(&long), Err(FrameError::FieldTooLong("method")));
        let mut out = Vec::new();
        encode_request(&mut out, 1, "GET", "/", [("a b", "c")], 0).unwrap();
        assert_eq!(decode_request(&out[PREFIX_BYTES..]), Err(FrameError::NotText("header name")));
        let mut out = Vec::new();
        encode_request(&mut out, 1, "GET", "/", [("a", "c\r\nd: e")], 0).unwrap();
        assert_eq!(decode_request(&out[PREFIX_BYTES..]), Err(FrameError::NotText("header value")));
    }

    proptest! {
        #[test]
        fn decoding_any_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = decode_request(&bytes);
            let _ = decode_answer(&bytes);
        }

        #[test]
        fn encoded_requests_decode_to_themselves(
            id in any::<u64>(),
            path in "/[!-~]{0,40}",
            headers in proptest::collection::vec(("[a-z-]{1,12}", "[ -~]{0,30}"), 0..8),
            body in 0usize..BODY_BYTES_MAX,
        ) {
            let mut out = Vec::new();
            let pairs: Vec<(&str, &str)> =
                headers.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
            encode_request(&mut out, id, "PUT", &path, pairs.iter().copied(), body).unwrap();
            let (head, body_len) = split(&out);
            prop_assert_eq!(body_len, body);
            let request = decode_request(head).unwrap();
            prop_assert_eq!(request, RequestHead { id, method: "PUT", path: &path, headers: pairs });
        }
    }
}
