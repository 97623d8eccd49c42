//! A minimal blocking NBD client, for tests: the fixed-newstyle handshake up to `NBD_OPT_GO`,
//! simple requests and their replies. It is not a client for real use (it asks for no
//! structured replies and pipelines nothing of its own); tests use it to send exactly the
//! bytes they mean, malformed ones included.

use std::io::{self, Read, Write};

use crate::proto;

/// The handshake up to `NBD_OPT_GO` on export `name`: the option replies' types, the last
/// one `NBD_REP_ACK` (the export is open) or an error.
pub fn go(stream: &mut (impl Read + Write), name: &str) -> io::Result<Vec<u32>> {
    let mut greeting = [0u8; 18];
    stream.read_exact(&mut greeting)?;
    if greeting[..8] != proto::INIT_MAGIC.to_be_bytes() {
        return Err(io::Error::other("not an NBD server (bad greeting)"));
    }
    stream.write_all(&(proto::CLIENT_FIXED_NEWSTYLE | proto::CLIENT_NO_ZEROES).to_be_bytes())?;
    let mut data = (name.len() as u32).to_be_bytes().to_vec();
    data.extend_from_slice(name.as_bytes());
    data.extend_from_slice(&1u16.to_be_bytes());
    data.extend_from_slice(&proto::INFO_BLOCK_SIZE.to_be_bytes());
    let mut option = proto::OPT_MAGIC.to_be_bytes().to_vec();
    option.extend_from_slice(&proto::OPT_GO.to_be_bytes());
    option.extend_from_slice(&(data.len() as u32).to_be_bytes());
    option.extend_from_slice(&data);
    stream.write_all(&option)?;
    let mut kinds = Vec::new();
    loop {
        let mut header = [0u8; 20];
        stream.read_exact(&mut header)?;
        let kind = u32::from_be_bytes([header[12], header[13], header[14], header[15]]);
        let length = u32::from_be_bytes([header[16], header[17], header[18], header[19]]);
        let mut payload = vec![0u8; length.min(1 << 20) as usize];
        stream.read_exact(&mut payload)?;
        kinds.push(kind);
        if kind == proto::REP_ACK || kind & (1 << 31) != 0 {
            return Ok(kinds);
        }
    }
}

/// The bytes of a request header.
pub fn request(command: u16, flags: u16, cookie: u64, offset: u64, length: u32) -> Vec<u8> {
    let mut out = proto::REQUEST_MAGIC.to_be_bytes().to_vec();
    out.extend_from_slice(&flags.to_be_bytes());
    out.extend_from_slice(&command.to_be_bytes());
    out.extend_from_slice(&cookie.to_be_bytes());
    out.extend_from_slice(&offset.to_be_bytes());
    out.extend_from_slice(&length.to_be_bytes());
    out
}

/// Reads one simple reply, and `data` bytes after it when it succeeded: (error, cookie,
/// data).
pub fn reply(stream: &mut impl Read, data: usize) -> io::Result<(u32, u64, Vec<u8>)> {
    let mut header = [0u8; 16];
    stream.read_exact(&mut header)?;
    if header[..4] != proto::SIMPLE_REPLY_MAGIC.to_be_bytes() {
        return Err(io::Error::other("not a simple reply"));
    }
    let error = u32::from_be_bytes([header[4], header[5], header[6], header[7]]);
    let cookie = u64::from_be_bytes(header[8..16].try_into().expect("8 bytes"));
    let mut payload = Vec::new();
    if error == 0 && data > 0 {
        payload = vec![0u8; data];
        stream.read_exact(&mut payload)?;
    }
    Ok((error, cookie, payload))
}
