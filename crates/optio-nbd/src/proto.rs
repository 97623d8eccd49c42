//! The NBD wire format: constants and the parsers of what a client sends.
//!
//! Every number is big-endian. The parsers take bytes that came off the network and never
//! panic on any input (`proptest` below and the `nbd` fuzz target check it).

/// `NBDMAGIC`, the first 8 bytes a server sends.
pub const INIT_MAGIC: u64 = 0x4e42_444d_4147_4943;
/// `IHAVEOPT`: after the init magic, and before each option a client sends.
pub const OPT_MAGIC: u64 = 0x4948_4156_454f_5054;
/// Before each option reply.
pub const REPLY_OPT_MAGIC: u64 = 0x0003_e889_0455_65a9;
/// Before each request in the transmission phase.
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
/// Before each simple reply.
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
/// Before each structured reply chunk.
pub const STRUCTURED_REPLY_MAGIC: u32 = 0x668e_33ef;

/// Handshake flag: the server speaks the fixed newstyle protocol.
pub const FLAG_FIXED_NEWSTYLE: u16 = 1 << 0;
/// Handshake flag: no 124 zero bytes after `NBD_OPT_EXPORT_NAME`'s reply, if the client agrees.
pub const FLAG_NO_ZEROES: u16 = 1 << 1;
/// Client flag: the client speaks the fixed newstyle protocol.
pub const CLIENT_FIXED_NEWSTYLE: u32 = 1 << 0;
/// Client flag: the client takes no zero padding.
pub const CLIENT_NO_ZEROES: u32 = 1 << 1;

/// Options.
pub const OPT_EXPORT_NAME: u32 = 1;
/// Ends the handshake without an export.
pub const OPT_ABORT: u32 = 2;
/// Lists the exports.
pub const OPT_LIST: u32 = 3;
/// Asks for TLS: answered `NBD_REP_ACK`, then the TLS handshake, then option haggling goes on
/// inside TLS.
pub const OPT_STARTTLS: u32 = 5;
/// Describes an export.
pub const OPT_INFO: u32 = 6;
/// Describes an export and starts transmission with it.
pub const OPT_GO: u32 = 7;
/// Asks for structured replies in transmission.
pub const OPT_STRUCTURED_REPLY: u32 = 8;
/// Lists the metadata contexts of an export that match queries.
pub const OPT_LIST_META_CONTEXT: u32 = 9;
/// Selects the metadata contexts `NBD_CMD_BLOCK_STATUS` reports (structured replies first).
pub const OPT_SET_META_CONTEXT: u32 = 10;

/// Option replies.
pub const REP_ACK: u32 = 1;
/// One export of a list.
pub const REP_SERVER: u32 = 2;
/// One item of information about an export.
pub const REP_INFO: u32 = 3;
/// One metadata context: its id and name.
pub const REP_META_CONTEXT: u32 = 4;
/// Unknown option.
pub const REP_ERR_UNSUP: u32 = (1 << 31) + 1;
/// The server refuses the option (policy).
pub const REP_ERR_POLICY: u32 = (1 << 31) + 2;
/// The option's data is malformed.
pub const REP_ERR_INVALID: u32 = (1 << 31) + 3;
/// The option needs TLS first (`NBD_OPT_STARTTLS`).
pub const REP_ERR_TLS_REQD: u32 = (1 << 31) + 5;
/// No export of that name.
pub const REP_ERR_UNKNOWN: u32 = (1 << 31) + 6;

/// Information items of `NBD_REP_INFO`.
pub const INFO_EXPORT: u16 = 0;
/// The export's name.
pub const INFO_NAME: u16 = 1;
/// The export's description.
pub const INFO_DESCRIPTION: u16 = 2;
/// Block-size constraints.
pub const INFO_BLOCK_SIZE: u16 = 3;

/// Transmission flags.
pub const TFLAG_HAS_FLAGS: u16 = 1 << 0;
/// The export is read-only.
pub const TFLAG_READ_ONLY: u16 = 1 << 1;
/// The server takes `NBD_CMD_FLUSH`.
pub const TFLAG_SEND_FLUSH: u16 = 1 << 2;
/// The server takes `NBD_CMD_FLAG_FUA`.
pub const TFLAG_SEND_FUA: u16 = 1 << 3;
/// The server takes `NBD_CMD_TRIM`.
pub const TFLAG_SEND_TRIM: u16 = 1 << 5;
/// The server takes `NBD_CMD_WRITE_ZEROES`.
pub const TFLAG_SEND_WRITE_ZEROES: u16 = 1 << 6;
/// Several connections to the export see each other's writes (and flushes).
pub const TFLAG_CAN_MULTI_CONN: u16 = 1 << 8;

/// Command flag: force unit access (durable before the reply).
pub const CMD_FLAG_FUA: u16 = 1 << 0;
/// Command flag (write-zeroes): do not punch a hole.
pub const CMD_FLAG_NO_HOLE: u16 = 1 << 1;
/// Command flag (block status): one extent per context, within the request.
pub const CMD_FLAG_REQ_ONE: u16 = 1 << 3;
/// The command flags this server understands (`NBD_CMD_FLAG_REQ_ONE` on block status only).
pub const CMD_FLAGS_KNOWN: u16 = CMD_FLAG_FUA | CMD_FLAG_NO_HOLE;

/// Structured reply flag: the last chunk of a reply.
pub const REPLY_FLAG_DONE: u16 = 1 << 0;
/// Structured reply chunk: nothing (the reply is done).
pub const REPLY_TYPE_NONE: u16 = 0;
/// Structured reply chunk: data at an offset.
pub const REPLY_TYPE_OFFSET_DATA: u16 = 1;
/// Structured reply chunk: a range that reads as zeros.
pub const REPLY_TYPE_OFFSET_HOLE: u16 = 2;
/// Structured reply chunk: the extents of one metadata context.
pub const REPLY_TYPE_BLOCK_STATUS: u16 = 5;
/// Structured reply chunk: an error.
pub const REPLY_TYPE_ERROR: u16 = (1 << 15) + 1;
/// Structured reply chunk: an error at an offset.
pub const REPLY_TYPE_ERROR_OFFSET: u16 = (1 << 15) + 2;
/// Bytes of a structured reply chunk's header.
pub const CHUNK_HEADER_BYTES: usize = 20;

/// The `base:allocation` metadata context: whether extents are allocated.
pub const CONTEXT_BASE_ALLOCATION: &str = "base:allocation";
/// The `qemu:allocation-depth` metadata context: which layer of a chain extents come from.
pub const CONTEXT_ALLOCATION_DEPTH: &str = "qemu:allocation-depth";
/// `base:allocation`: the extent is not allocated.
pub const STATE_HOLE: u32 = 1 << 0;
/// `base:allocation`: the extent reads as zeros.
pub const STATE_ZERO: u32 = 1 << 1;

/// Errors of simple replies (errno values, as the protocol defines them).
pub const EPERM: u32 = 1;
/// I/O error.
pub const EIO: u32 = 5;
/// Out of memory.
pub const ENOMEM: u32 = 12;
/// Invalid request.
pub const EINVAL: u32 = 22;
/// No space (a write beyond the end).
pub const ENOSPC: u32 = 28;
/// Value too large.
pub const EOVERFLOW: u32 = 75;
/// Not supported.
pub const ENOTSUP: u32 = 95;
/// The server is shutting down.
pub const ESHUTDOWN: u32 = 108;

/// Bytes of a request header.
pub const REQUEST_BYTES: usize = 28;
/// Bytes of an option header (magic, option, length).
pub const OPTION_HEADER_BYTES: usize = 16;
/// Longest export name taken (the protocol's limit for strings).
pub const NAME_BYTES_MAX: usize = 4096;

/// A command of the transmission phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    /// `NBD_CMD_READ`.
    Read,
    /// `NBD_CMD_WRITE` (the data follows the header).
    Write,
    /// `NBD_CMD_DISC`: the client is done.
    Disconnect,
    /// `NBD_CMD_FLUSH`.
    Flush,
    /// `NBD_CMD_TRIM`.
    Trim,
    /// `NBD_CMD_WRITE_ZEROES`.
    WriteZeroes,
    /// `NBD_CMD_BLOCK_STATUS` (answered only after metadata contexts were selected).
    BlockStatus,
    /// Anything else (cache, resize…): answered `EINVAL`.
    Other(u16),
}

impl Command {
    fn from_wire(kind: u16) -> Command {
        match kind {
            0 => Command::Read,
            1 => Command::Write,
            2 => Command::Disconnect,
            3 => Command::Flush,
            4 => Command::Trim,
            6 => Command::WriteZeroes,
            7 => Command::BlockStatus,
            other => Command::Other(other),
        }
    }
}

/// A request header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    /// The command flags.
    pub flags: u16,
    /// The command.
    pub command: Command,
    /// The client's cookie, echoed in the reply.
    pub cookie: u64,
    /// Byte offset in the export.
    pub offset: u64,
    /// Byte count (of the data that follows, for a write).
    pub length: u32,
}

/// What is wrong with the bytes a client sent: a header out of step with the stream, or an
/// option's data that does not hold its fields. The connection's error, or the option's
/// `NBD_REP_ERR_INVALID` reply, says it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtoError {
    /// A request header without [`REQUEST_MAGIC`]: the stream is out of step.
    #[error("a request starts with magic {magic:#010x}, not {expected:#010x}", expected = REQUEST_MAGIC)]
    RequestMagic {
        /// The magic read.
        magic: u32,
    },
    /// An option header without [`OPT_MAGIC`].
    #[error("an option starts with magic {magic:#018x}, not IHAVEOPT")]
    OptionMagic {
        /// The magic read.
        magic: u64,
    },
    /// The option's data ends before its fields do.
    #[error("the option's data is too short")]
    OptionDataShort,
    /// The option's data goes on after its fields.
    #[error("the option's data is longer than its fields")]
    OptionDataLong,
    /// An export name longer than [`NAME_BYTES_MAX`].
    #[error("an export name of {bytes} bytes (at most {limit})", limit = NAME_BYTES_MAX)]
    NameTooLong {
        /// Its length.
        bytes: usize,
    },
    /// An export name that is not UTF-8.
    #[error("the export name is not UTF-8")]
    NameNotUtf8,
}

impl Request {
    /// Parses a request header; `Err` (with what is wrong) when its magic is not
    /// [`REQUEST_MAGIC`] — the stream is then out of step and the connection must end.
    pub fn parse(bytes: &[u8; REQUEST_BYTES]) -> Result<Request, ProtoError> {
        let magic = u32::from_be_bytes(bytes[0..4].try_into().expect("4 bytes"));
        if magic != REQUEST_MAGIC {
            return Err(ProtoError::RequestMagic { magic });
        }
        Ok(Request {
            flags: u16::from_be_bytes(bytes[4..6].try_into().expect("2 bytes")),
            command: Command::from_wire(u16::from_be_bytes(
                bytes[6..8].try_into().expect("2 bytes"),
            )),
            cookie: u64::from_be_bytes(bytes[8..16].try_into().expect("8 bytes")),
            offset: u64::from_be_bytes(bytes[16..24].try_into().expect("8 bytes")),
            length: u32::from_be_bytes(bytes[24..28].try_into().expect("4 bytes")),
        })
    }
}

/// An option header: the option and the length of its data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OptionHeader {
    /// The option.
    pub option: u32,
    /// Bytes of data that follow.
    pub length: u32,
}

impl OptionHeader {
    /// Parses an option header; `Err` when its magic is not [`OPT_MAGIC`].
    pub fn parse(bytes: &[u8; OPTION_HEADER_BYTES]) -> Result<OptionHeader, ProtoError> {
        let magic = u64::from_be_bytes(bytes[0..8].try_into().expect("8 bytes"));
        if magic != OPT_MAGIC {
            return Err(ProtoError::OptionMagic { magic });
        }
        Ok(OptionHeader {
            option: u32::from_be_bytes(bytes[8..12].try_into().expect("4 bytes")),
            length: u32::from_be_bytes(bytes[12..16].try_into().expect("4 bytes")),
        })
    }
}

/// The data of `NBD_OPT_INFO` / `NBD_OPT_GO`: the export's name and the information items
/// asked for.
pub fn parse_info_request(data: &[u8]) -> Result<(String, Vec<u16>), ProtoError> {
    let take = |at: usize, n: usize| data.get(at..at + n).ok_or(ProtoError::OptionDataShort);
    let name_length = u32::from_be_bytes(take(0, 4)?.try_into().expect("4 bytes")) as usize;
    if name_length > NAME_BYTES_MAX {
        return Err(ProtoError::NameTooLong { bytes: name_length });
    }
    let name = std::str::from_utf8(take(4, name_length)?)
        .map_err(|_| ProtoError::NameNotUtf8)?
        .to_string();
    let count = u16::from_be_bytes(take(4 + name_length, 2)?.try_into().expect("2 bytes")) as usize;
    let items = take(6 + name_length, count * 2)?
        .chunks_exact(2)
        .map(|c| u16::from_be_bytes([c[0], c[1]]))
        .collect();
    if data.len() != 6 + name_length + count * 2 {
        return Err(ProtoError::OptionDataLong);
    }
    Ok((name, items))
}

/// The data of `NBD_OPT_LIST_META_CONTEXT` / `NBD_OPT_SET_META_CONTEXT`: the export's name
/// and the queries. Each query is at most [`NAME_BYTES_MAX`] bytes of UTF-8; their number is
/// bounded by the data's length (each takes 4 bytes at least).
pub fn parse_meta_context_request(data: &[u8]) -> Result<(String, Vec<String>), ProtoError> {
    let take = |at: usize, n: usize| {
        data.get(at..at.checked_add(n).ok_or(ProtoError::OptionDataShort)?)
            .ok_or(ProtoError::OptionDataShort)
    };
    let string = |at: usize| -> Result<(String, usize), ProtoError> {
        let length = u32::from_be_bytes(take(at, 4)?.try_into().expect("4 bytes")) as usize;
        if length > NAME_BYTES_MAX {
            return Err(ProtoError::NameTooLong { bytes: length });
        }
        let text = std::str::from_utf8(take(at + 4, length)?)
            .map_err(|_| ProtoError::NameNotUtf8)?
            .to_string();
        Ok((text, at + 4 + length))
    };
    let (name, mut at) = string(0)?;
    let count = u32::from_be_bytes(take(at, 4)?.try_into().expect("4 bytes"));
    at += 4;
    let mut queries = Vec::new();
    for _ in 0..count {
        let (query, next) = string(at)?;
        queries.push(query);
        at = next;
    }
    if at != data.len() {
        return Err(ProtoError::OptionDataLong);
    }
    Ok((name, queries))
}

/// A structured reply chunk's header, for a payload of `length` bytes.
pub fn chunk_header(flags: u16, kind: u16, cookie: u64, length: u32) -> [u8; CHUNK_HEADER_BYTES] {
    let mut out = [0u8; CHUNK_HEADER_BYTES];
    out[0..4].copy_from_slice(&STRUCTURED_REPLY_MAGIC.to_be_bytes());
    out[4..6].copy_from_slice(&flags.to_be_bytes());
    out[6..8].copy_from_slice(&kind.to_be_bytes());
    out[8..16].copy_from_slice(&cookie.to_be_bytes());
    out[16..20].copy_from_slice(&length.to_be_bytes());
    out
}

/// A whole structured error chunk (`NBD_REPLY_TYPE_ERROR`, the reply's last), with a message
/// for people (cut at [`NAME_BYTES_MAX`] bytes).
pub fn error_chunk(error: u32, cookie: u64, message: &str) -> Vec<u8> {
    let mut cut = message.len().min(NAME_BYTES_MAX);
    while !message.is_char_boundary(cut) {
        cut -= 1;
    }
    let message = &message.as_bytes()[..cut];
    let length = 6 + message.len() as u32;
    let mut out = chunk_header(REPLY_FLAG_DONE, REPLY_TYPE_ERROR, cookie, length).to_vec();
    out.extend_from_slice(&error.to_be_bytes());
    out.extend_from_slice(&(message.len() as u16).to_be_bytes());
    out.extend_from_slice(message);
    out
}

/// An option reply: its header and data.
pub fn option_reply(option: u32, reply: u32, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(20 + data.len());
    out.extend_from_slice(&REPLY_OPT_MAGIC.to_be_bytes());
    out.extend_from_slice(&option.to_be_bytes());
    out.extend_from_slice(&reply.to_be_bytes());
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(data);
    out
}

/// A simple reply's header.
pub fn simple_reply(error: u32, cookie: u64) -> [u8; 16] {
    let mut out = [0u8; 16];
    out[0..4].copy_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
    out[4..8].copy_from_slice(&error.to_be_bytes());
    out[8..16].copy_from_slice(&cookie.to_be_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn requests_parse_and_bad_magic_is_refused() {
        let mut bytes = [0u8; REQUEST_BYTES];
        bytes[0..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
        bytes[4..6].copy_from_slice(&CMD_FLAG_FUA.to_be_bytes());
        bytes[6..8].copy_from_slice(&1u16.to_be_bytes());
        bytes[8..16].copy_from_slice(&7u64.to_be_bytes());
        bytes[16..24].copy_from_slice(&4096u64.to_be_bytes());
        bytes[24..28].copy_from_slice(&512u32.to_be_bytes());
        let request = Request::parse(&bytes).expect("a request");
        assert_eq!(
            request,
            Request {
                flags: CMD_FLAG_FUA,
                command: Command::Write,
                cookie: 7,
                offset: 4096,
                length: 512
            }
        );
        bytes[0] ^= 1;
        assert!(Request::parse(&bytes).unwrap_err().to_string().contains("magic"));
    }

    #[test]
    fn info_requests_parse_exactly() {
        let mut data = Vec::new();
        data.extend_from_slice(&4u32.to_be_bytes());
        data.extend_from_slice(b"vol0");
        data.extend_from_slice(&2u16.to_be_bytes());
        data.extend_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
        data.extend_from_slice(&INFO_NAME.to_be_bytes());
        assert_eq!(
            parse_info_request(&data).unwrap(),
            ("vol0".to_string(), vec![INFO_BLOCK_SIZE, INFO_NAME])
        );
        assert!(parse_info_request(&data[..data.len() - 1]).is_err());
        let mut longer = data.clone();
        longer.push(0);
        assert!(parse_info_request(&longer).is_err());
        let mut huge = data.clone();
        huge[0..4].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(parse_info_request(&huge).is_err());
    }

    fn meta_request(name: &str, queries: &[&str]) -> Vec<u8> {
        let mut data = (name.len() as u32).to_be_bytes().to_vec();
        data.extend_from_slice(name.as_bytes());
        data.extend_from_slice(&(queries.len() as u32).to_be_bytes());
        for query in queries {
            data.extend_from_slice(&(query.len() as u32).to_be_bytes());
            data.extend_from_slice(query.as_bytes());
        }
        data
    }

    #[test]
    fn meta_context_requests_parse_exactly() {
        let data = meta_request("vol0", &["base:allocation", "qemu:"]);
        assert_eq!(
            parse_meta_context_request(&data).unwrap(),
            ("vol0".to_string(), vec!["base:allocation".to_string(), "qemu:".to_string()])
        );
        assert_eq!(
            parse_meta_context_request(&meta_request("", &[])).unwrap(),
            (String::new(), vec![])
        );
        for cut in 0..data.len() {
            assert!(parse_meta_context_request(&data[..cut]).is_err(), "cut at {cut}");
        }
        let mut longer = data.clone();
        longer.push(0);
        assert_eq!(parse_meta_context_request(&longer), Err(ProtoError::OptionDataLong));
        // A count of queries far beyond the data: refused without allocating for it.
        let mut many = meta_request("vol0", &[]);
        let at = many.len() - 4;
        many[at..].copy_from_slice(&u32::MAX.to_be_bytes());
        assert_eq!(parse_meta_context_request(&many), Err(ProtoError::OptionDataShort));
        // A query longer than a string may be.
        let mut huge = meta_request("vol0", &["x"]);
        let at = 4 + 4 + 4;
        huge[at..at + 4].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(matches!(parse_meta_context_request(&huge), Err(ProtoError::NameTooLong { .. })));
        let bad = meta_request("vol0", &["\u{0}"]);
        let mut bad = bad.clone();
        let last = bad.len() - 1;
        bad[last] = 0xff;
        assert_eq!(parse_meta_context_request(&bad), Err(ProtoError::NameNotUtf8));
    }

    #[test]
    fn error_chunks_carry_the_error_and_a_bounded_message() {
        let chunk = error_chunk(EINVAL, 9, "bad");
        assert_eq!(chunk[0..4], STRUCTURED_REPLY_MAGIC.to_be_bytes());
        assert_eq!(chunk[4..6], REPLY_FLAG_DONE.to_be_bytes());
        assert_eq!(chunk[6..8], REPLY_TYPE_ERROR.to_be_bytes());
        assert_eq!(chunk[8..16], 9u64.to_be_bytes());
        assert_eq!(chunk[16..20], 9u32.to_be_bytes());
        assert_eq!(chunk[20..24], EINVAL.to_be_bytes());
        assert_eq!(chunk[24..26], 3u16.to_be_bytes());
        assert_eq!(&chunk[26..], b"bad");
        let long = error_chunk(EIO, 1, &"é".repeat(5000));
        assert_eq!(long.len(), 26 + NAME_BYTES_MAX);
    }

    proptest! {
        #[test]
        fn the_parsers_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = parse_info_request(&bytes);
            let _ = parse_meta_context_request(&bytes);
            if let Ok(header) = <[u8; REQUEST_BYTES]>::try_from(&bytes[..bytes.len().min(REQUEST_BYTES)]) {
                let _ = Request::parse(&header);
            }
            if let Ok(header) = <[u8; OPTION_HEADER_BYTES]>::try_from(&bytes[..bytes.len().min(OPTION_HEADER_BYTES)]) {
                let _ = OptionHeader::parse(&header);
            }
        }
    }
}
