//! Local reads: a block object read from its file by the client itself, when one of its
//! replicas is on a server on this machine (see [`optio_net::local`]).
//!
//! A server with a local socket says where it is in its `/v1/status`, with the machine's boot
//! id; a client whose boot id is the same asks it, over that socket, to open the object's file
//! — an ordinary signed request through the server's router, so a device that is catching up
//! or fenced refuses as it would a read — and gets an open, read-only descriptor and the
//! object's version. From then on a read is two `pread`s in the client's own process: the
//! header with the block checksums, then the blocks, verified. No server process is woken.
//!
//! Whether the file is current is checked on every read: the reader names the version it
//! expects (a volume's single writer knows the version its last write left), and the read
//! fails as [`LocalMiss::Stale`] unless the file's header holds exactly that version. A
//! replica that missed a write, a file replaced by a whole write, repaired or moved away —
//! all leave a header with another version behind the descriptor. A block that fails its
//! checksum (damage, or a write in place racing the read) is [`LocalMiss::Checksum`]. Either
//! way the caller reads through the servers instead, which also repair what is damaged; a
//! local read never reports or repairs damage itself.

use std::collections::HashMap;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use optio_placement::DeviceId;
use optio_proto::blocks::{BLOCK_BYTES, BlockLayout, decode_table, first_bad_block};
use optio_proto::{ObjectHeader, ObjectVersion};

use crate::transport::{Endpoint, Op};

use super::{Client, View};

/// How long a server found to have no usable local socket is not asked again.
const NOT_LOCAL_RECHECK: Duration = Duration::from_secs(60);

/// What the client knows of a server's local socket, by server address.
#[derive(Clone, Debug)]
pub(super) enum LocalServer {
    /// Its socket, on this machine.
    Local(PathBuf),
    /// None usable (another machine, no socket, or its status failed) as of then.
    NotLocal(Instant),
}

/// A block object's file, open for local reads.
#[derive(Debug)]
pub struct LocalFile {
    file: std::fs::File,
    /// The object's version when the server opened it.
    pub version: ObjectVersion,
    /// Its data bytes.
    pub size: u64,
    /// The device whose file it is.
    pub device: u32,
    /// The client's map epoch when it was opened.
    pub epoch: u64,
    /// When the file was a redirected head as it was opened (`optio server --snapshot-copy
    /// redirect`): the clone it is redirected to, open on the same device, and its version.
    /// The blocks the head's file has no data for are read from it.
    pub clone: Option<(std::fs::File, ObjectVersion)>,
}

/// Why a local read gave nothing (read through the servers instead).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LocalMiss {
    /// The file does not hold the version expected (or is not the object's any more).
    #[error("the file holds {found}, not version {expected}")]
    Stale {
        /// The version expected.
        expected: u64,
        /// What the file holds.
        found: String,
    },
    /// A block failed its checksum (damaged, or being written at the same moment).
    #[error("block {block} failed its checksum")]
    Checksum {
        /// The block.
        block: u64,
    },
    /// The range is not within the object.
    #[error("{len} bytes at {offset} are not within the object's {size} bytes")]
    OutOfRange {
        /// Offset.
        offset: u64,
        /// Length.
        len: u64,
        /// The object's size.
        size: u64,
    },
    /// The file is a redirected head whose clone is not open here.
    #[error("the file is redirected to clone version {clone}, which is not open here")]
    Redirected {
        /// The clone's version.
        clone: u64,
    },
    /// Reading the file failed.
    #[error("reading the file failed: {0}")]
    Io(#[from] std::io::Error),
}

impl LocalFile {
    /// `len` bytes at `offset` of the object `key`, if the file holds version `expected`;
    /// every block read is verified. Blocking (page-cache reads, most often).
    pub fn read(
        &self,
        key: &str,
        expected: ObjectVersion,
        offset: u64,
        len: u64,
    ) -> Result<Vec<u8>, LocalMiss> {
        let size = self.size;
        let end = offset.checked_add(len).filter(|end| *end <= size && len > 0);
        if end.is_none() {
            return Err(LocalMiss::OutOfRange { offset, len, size });
        }
        let layout = BlockLayout::new(key.len(), size);
        let (first, last) = layout.blocks_of(offset, len);
        // The header, the key and the checksums up to the last block read: one read.
        let mut head = vec![0u8; (layout.table_offset + 4 * (last + 1)) as usize];
        self.file.read_exact_at(&mut head, 0)?;
        let stale = |found: String| LocalMiss::Stale { expected: expected.0, found };
        let (header, stored_key, _) =
            ObjectHeader::decode_prefix(&head).map_err(|e| stale(format!("a bad header ({e})")))?;
        if stored_key != key || !header.blocks || header.size_bytes != size {
            return Err(stale(format!("another object ({stored_key:?})")));
        }
        if header.version != expected {
            return Err(stale(format!("version {}", header.version.0)));
        }
        let block_start = first * BLOCK_BYTES as u64;
        let block_end = ((last + 1) * BLOCK_BYTES as u64).min(size);
        let mut blocks = vec![0u8; (block_end - block_start) as usize];
        let from_clone = match optio_proto::blocks::redirect_mark(&head) {
            None => None,
            Some(version) => match &self.clone {
                // Where the head's file has no data, the clone's blocks: found before the
                // head's blocks are read (a block written meanwhile is then read from the
                // clone as it was before the write, which the table read above expects).
                Some((clone, at)) if at.0 == version => {
                    let from = layout.data_offset + block_start;
                    Some((clone, holes(&self.file, from, from + blocks.len() as u64)?))
                }
                _ => return Err(LocalMiss::Redirected { clone: version }),
            },
        };
        let base = layout.data_offset + block_start;
        match from_clone {
            None => self.file.read_exact_at(&mut blocks, base)?,
            Some((clone, holes)) => {
                // Each run from the file that has it: the head's data between the holes.
                let mut at = base;
                for (start, end) in holes.into_iter().chain([(base + blocks.len() as u64, 0)]) {
                    if start > at {
                        let span = &mut blocks[(at - base) as usize..(start - base) as usize];
                        self.file.read_exact_at(span, at)?;
                    }
                    if end > start {
                        let span = &mut blocks[(start - base) as usize..(end - base) as usize];
                        clone.read_exact_at(span, start)?;
                        at = end;
                    }
                }
            }
        }
        let table = decode_table(&head[layout.table_offset as usize + 4 * first as usize..]);
        if let Some((block, _, _)) = first_bad_block(&layout, first, &table, &blocks) {
            return Err(LocalMiss::Checksum { block });
        }
        let from = (offset - block_start) as usize;
        blocks.truncate(from + len as usize);
        blocks.drain(..from);
        Ok(blocks)
    }
}

/// The ranges of `file` between `from` and `to` that hold no data (`SEEK_DATA`/`SEEK_HOLE`).
fn holes(file: &std::fs::File, from: u64, to: u64) -> std::io::Result<Vec<(u64, u64)>> {
    use rustix::fs::{SeekFrom, seek};
    let mut holes = Vec::new();
    let mut at = from;
    while at < to {
        let data = match seek(file, SeekFrom::Data(at)) {
            Ok(data) => data.min(to),
            Err(rustix::io::Errno::NXIO) => to,
            Err(error) => return Err(error.into()),
        };
        if data > at {
            holes.push((at, data));
        }
        // Data from a block's start to the end: the file system allocates whole blocks.
        if data >= to || (data == at && to - at <= BLOCK_BYTES as u64) {
            break;
        }
        at = seek(file, SeekFrom::Hole(data)).map_err(std::io::Error::from)?.min(to);
    }
    Ok(holes)
}

impl Client {
    /// Opens the block object `key` of pool `pool_name` for local reads, from the first of
    /// `devices` whose server has a local socket on this machine. `devices`: the replicas a
    /// caller that knows the version it expects (and checks it on every read) accepts, primary
    /// first; `None`, for a caller that knows no version: only the replica a read through the
    /// servers reads first (the located primary), so that what the file holds is never older
    /// than what that read would return. `None` when none can: no replica here, the map is
    /// moving data (reads then compare replicas), or the server refused (the object is not a
    /// block object, its device is catching up, …).
    pub async fn open_local(
        &self,
        pool_name: &str,
        key: &str,
        devices: Option<&[u32]>,
    ) -> Option<LocalFile> {
        let view = self.view();
        let pool = view.pool(pool_name).ok()?;
        if self.in_transition(&view, pool) {
            return None;
        }
        let devices: Vec<u32> = match devices {
            Some(devices) => devices.to_vec(),
            None => {
                let mut attempts = 0;
                let located = self.retry_located(pool_name, key, &mut attempts).await.ok()?;
                located.candidate().devices.first().map(|d| d.0).into_iter().collect()
            }
        };
        for device in devices {
            if !self.local_reads_allowed(&view.map, DeviceId(device)) {
                continue;
            }
            let Ok(endpoint) = view.endpoint(DeviceId(device)) else { continue };
            let Some(socket) = self.local_socket(&endpoint).await else { continue };
            let call = self.object_call(&view, &endpoint, pool, Op::Open { key });
            match self.inner.transport.open_local(call, &socket).await {
                Ok((answer, file)) => {
                    let info = answer.info?;
                    // A redirected head: its clone, on the same device, is opened too.
                    let clone = self.open_clone(&view, &endpoint, pool, key, &socket, &file).await;
                    return Some(LocalFile {
                        file,
                        version: info.version,
                        size: info.size_bytes,
                        device,
                        epoch: view.epoch(),
                        clone,
                    });
                }
                Err(failure) => {
                    tracing::debug!(device, key, %failure, "no local read of this replica");
                    if failure.is_not_running() {
                        // Nothing at the socket (the server stopped, or moved it): ask its
                        // status again next time.
                        let mut servers = self.inner.local_servers.lock().expect("local lock");
                        servers.remove(&endpoint.addr);
                    }
                }
            }
        }
        None
    }

    /// The clone a block object's file just opened (`head`, of `key` on `endpoint`) is
    /// redirected to, opened over the same local socket, and its version; `None` when the
    /// file has no redirect mark, or the clone cannot be opened (the head's reads of blocks
    /// it does not hold then go through the server).
    async fn open_clone(
        &self,
        view: &View,
        endpoint: &Endpoint,
        pool: optio_placement::PoolId,
        key: &str,
        socket: &std::path::Path,
        head: &std::fs::File,
    ) -> Option<(std::fs::File, ObjectVersion)> {
        use optio_proto::blocks::{REDIRECT_MARK_AT, REDIRECT_MARK_BYTES, redirect_mark};
        let mut page = vec![0u8; REDIRECT_MARK_AT as usize + REDIRECT_MARK_BYTES];
        head.read_exact_at(&mut page, 0).ok()?;
        let version = ObjectVersion(redirect_mark(&page)?);
        let clone_key = optio_proto::snap::clone_key(key, version);
        let call = self.object_call(view, endpoint, pool, Op::Open { key: &clone_key });
        match self.inner.transport.open_local(call, socket).await {
            Ok((_, clone)) => Some((clone, version)),
            Err(failure) => {
                tracing::debug!(device = endpoint.device, clone_key, %failure, "no local read of a redirected head's clone");
                None
            }
        }
    }

    /// Whether `device`'s server may serve local reads: any on this machine, or only those of
    /// the hosts [`ClientConfig::local_read_hosts`](super::ClientConfig::local_read_hosts)
    /// names.
    fn local_reads_allowed(&self, map: &optio_placement::ClusterMap, device: DeviceId) -> bool {
        let Some(hosts) = &self.inner.config.local_read_hosts else { return true };
        map.location(device)
            .iter()
            .any(|(kind, name)| *kind == "host" && hosts.iter().any(|h| h == name))
    }

    /// The local socket of `endpoint`'s server, if it is on this machine (asked once, from
    /// its status; a server without one is asked again after [`NOT_LOCAL_RECHECK`]).
    async fn local_socket(&self, endpoint: &Endpoint) -> Option<PathBuf> {
        let known =
            self.inner.local_servers.lock().expect("local lock").get(&endpoint.addr).cloned();
        match known {
            Some(LocalServer::Local(path)) => return Some(path),
            Some(LocalServer::NotLocal(since)) if since.elapsed() < NOT_LOCAL_RECHECK => {
                return None;
            }
            _ => {}
        }
        let status = self.inner.transport.server_status(&endpoint.addr).await;
        let ours = optio_net::local::boot_id();
        let found = match status {
            Ok(status) => status
                .local
                .filter(|local| ours.as_deref() == Some(local.boot_id.as_str()))
                .map(|local| PathBuf::from(local.path))
                .filter(|path| path.exists()),
            Err(_) => None,
        };
        let entry = match &found {
            Some(path) => LocalServer::Local(path.clone()),
            None => LocalServer::NotLocal(Instant::now()),
        };
        let mut servers = self.inner.local_servers.lock().expect("local lock");
        if servers.len() >= LOCAL_SERVERS_KEPT {
            servers.clear();
        }
        servers.insert(endpoint.addr.clone(), entry);
        found
    }
}

/// Server addresses whose local sockets a client remembers (past it, it starts again).
const LOCAL_SERVERS_KEPT: usize = 4096;

/// A server's local socket, by address.
pub(super) type LocalServers = std::sync::Mutex<HashMap<String, LocalServer>>;

#[cfg(test)]
mod tests {
    use super::*;
    use optio_placement::{Epoch, PoolId};
    use optio_proto::blocks::encode_table;
    use optio_proto::checksum;
    use std::io::Write;

    /// A block object's file as a server writes it: header, key, checksums, data.
    fn block_file(key: &str, data: &[u8], version: u64) -> std::fs::File {
        let layout = BlockLayout::new(key.len(), data.len() as u64);
        let table: Vec<u32> = (0..layout.blocks)
            .map(|b| {
                let start = (b as usize) * BLOCK_BYTES;
                checksum(&data[start..start + layout.block_len(b)])
            })
            .collect();
        let mut header =
            ObjectHeader::new(PoolId(1), None, key, data, ObjectVersion(version), Epoch(1));
        header.blocks = true;
        let mut bytes = header.encode(key);
        bytes.resize(layout.table_offset as usize, 0);
        bytes.extend_from_slice(&encode_table(&table));
        bytes.resize(layout.data_offset as usize, 0);
        bytes.extend_from_slice(data);
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(&bytes).unwrap();
        file
    }

    /// A redirected head whose file holds blocks 1 and 3 of `after` (holes elsewhere) and a
    /// redirect mark naming clone version 4, and its clone holding `before` at version 4: a
    /// local read takes each block from where it is, and without the clone open it is a miss.
    #[test]
    fn a_redirected_head_reads_the_blocks_it_has_not_from_its_clone() {
        use std::os::unix::fs::FileExt;
        let before: Vec<u8> = (0..5 * BLOCK_BYTES).map(|i| (i * 3 % 251) as u8 + 1).collect();
        let mut after = before.clone();
        after[BLOCK_BYTES..2 * BLOCK_BYTES].fill(7);
        after[3 * BLOCK_BYTES + 5..3 * BLOCK_BYTES + 9].copy_from_slice(b"four");
        let key = "volume_data.abc.0000000000000004";
        let clone_key = optio_proto::snap::clone_key(key, ObjectVersion(4));
        let head = block_file(key, &after, 9);
        let layout = BlockLayout::new(key.len(), after.len() as u64);
        for b in [0u64, 2, 4] {
            let at = layout.data_offset + b * BLOCK_BYTES as u64;
            let flags =
                rustix::fs::FallocateFlags::PUNCH_HOLE | rustix::fs::FallocateFlags::KEEP_SIZE;
            rustix::fs::fallocate(&head, flags, at, BLOCK_BYTES as u64).unwrap();
        }
        let mut mark = optio_proto::blocks::REDIRECT_MAGIC.to_vec();
        mark.extend_from_slice(&4u64.to_le_bytes());
        head.write_all_at(&mark, optio_proto::blocks::REDIRECT_MARK_AT).unwrap();
        let clone = block_file(&clone_key, &before, 4);
        let without = local(head.try_clone().unwrap(), after.len() as u64, 9);
        let miss = without.read(key, ObjectVersion(9), 0, 10).unwrap_err();
        assert!(matches!(miss, LocalMiss::Redirected { clone: 4 }), "{miss}");
        let mut file = local(head, after.len() as u64, 9);
        file.clone = Some((clone, ObjectVersion(4)));
        for (offset, len) in
            [(0, after.len()), (4000, 200), (BLOCK_BYTES, 10), (2 * BLOCK_BYTES + 7, 6000)]
        {
            let read = file.read(key, ObjectVersion(9), offset as u64, len as u64).unwrap();
            assert!(read == after[offset..offset + len], "{offset}+{len}");
        }
        file.clone.as_mut().unwrap().1 = ObjectVersion(3);
        let miss = file.read(key, ObjectVersion(9), 0, 10).unwrap_err();
        assert!(matches!(miss, LocalMiss::Redirected { clone: 4 }), "another clone: {miss}");
    }

    fn local(file: std::fs::File, size: u64, version: u64) -> LocalFile {
        LocalFile { file, version: ObjectVersion(version), size, device: 0, epoch: 1, clone: None }
    }

    #[test]
    fn reads_the_range_asked_across_blocks_when_the_version_is_the_one_expected() {
        let data: Vec<u8> = (0..3 * BLOCK_BYTES + 100).map(|i| (i * 7 % 251) as u8).collect();
        let key = "volume_data.abc.0000000000000001";
        let file = local(block_file(key, &data, 5), data.len() as u64, 5);
        for (offset, len) in [(0, 1), (4095, 2), (100, 9000), (3 * 4096, 100), (0, data.len())] {
            let read = file.read(key, ObjectVersion(5), offset as u64, len as u64).unwrap();
            assert_eq!(read, &data[offset..offset + len], "{offset}+{len}");
        }
    }

    #[test]
    fn another_version_another_key_a_damaged_block_or_a_bad_range_is_a_miss() {
        let data = vec![9u8; 2 * BLOCK_BYTES];
        let key = "volume_data.abc.0000000000000002";
        let file = local(block_file(key, &data, 5), data.len() as u64, 5);
        let miss = file.read(key, ObjectVersion(6), 0, 10).unwrap_err();
        assert!(matches!(miss, LocalMiss::Stale { expected: 6, .. }), "{miss}");
        let miss = file.read("volume_data.abc.0000000000000003", ObjectVersion(5), 0, 10);
        assert!(matches!(miss, Err(LocalMiss::Stale { .. })), "{miss:?}");
        for (offset, len) in [(0, 0), (8000, 500), (u64::MAX, 2)] {
            let miss = file.read(key, ObjectVersion(5), offset, len).unwrap_err();
            assert!(matches!(miss, LocalMiss::OutOfRange { .. }), "{offset}+{len}: {miss}");
        }
        // A flipped byte in the second block: reads of it miss, reads of the first do not.
        let layout = BlockLayout::new(key.len(), data.len() as u64);
        file.file.write_all_at(&[8], layout.data_offset + BLOCK_BYTES as u64 + 17).unwrap();
        let miss = file.read(key, ObjectVersion(5), 4000, 200).unwrap_err();
        assert!(matches!(miss, LocalMiss::Checksum { block: 1 }), "{miss}");
        assert_eq!(file.read(key, ObjectVersion(5), 0, 4096).unwrap(), vec![9u8; 4096]);
    }
}
