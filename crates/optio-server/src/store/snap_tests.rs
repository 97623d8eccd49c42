//! What the tests of snapshots' copies share ([`super::cow`], [`super::redirect`]): a device
//! keeping them one way, a 4 MiB block object written in place under a snapshot context.

use std::path::Path;
use std::sync::Arc;

use optio_placement::{Epoch, PoolId};
use optio_proto::ObjectVersion;
use optio_proto::blocks::BLOCK_BYTES;
use optio_proto::checksum;
use optio_proto::snap::SnapContext;

use super::{DeviceConfig, DeviceStore, PutOutcome, SnapshotCopy, WriteAt};
use crate::disk::Disk;
use crate::error::StoreError;

pub(super) const MIB: u64 = 1 << 20;
pub(super) const KEY: &str = "volume_data.cd.0000000000000001";
pub(super) const POOL: PoolId = PoolId(1);
pub(super) const SIZE: u64 = 4 * MIB;

/// The device in `dir` on `disk`, keeping what snapshots see by `copy`.
pub(super) fn open(dir: &Path, disk: Arc<dyn Disk>, copy: SnapshotCopy) -> DeviceStore {
    let config = DeviceConfig { id: 0, dir: dir.to_path_buf(), capacity_bytes: 256 * MIB };
    let store = DeviceStore::open(&config, disk).unwrap();
    store.set_snapshot_copy(copy);
    store
}

/// The context of a snapshot whose mark is `mark`.
pub(super) fn snap(mark: u64) -> Option<SnapContext> {
    Some(SnapContext { seq: 1, mark: ObjectVersion(mark) })
}

/// The original content: block `b` filled with byte `b % 251 + 1` (block 9 left zeros).
pub(super) fn original() -> Vec<u8> {
    let mut data = vec![0u8; SIZE as usize];
    for (b, block) in data.chunks_mut(BLOCK_BYTES).enumerate() {
        if b != 9 {
            block.fill((b % 251 + 1) as u8);
        }
    }
    data
}

/// Writes `data` (or `zeroes` zero bytes) at `offset` of [`KEY`], version `version` over
/// `base`, under `context`.
pub(super) fn write(
    store: &DeviceStore,
    offset: u64,
    (data, zeroes): (&[u8], u64),
    (base, version): (Option<u64>, u64),
    context: Option<SnapContext>,
) -> Result<PutOutcome, StoreError> {
    store.write_at_in(
        &WriteAt {
            pool: POOL,
            key: KEY,
            offset,
            data,
            zeroes,
            size: SIZE,
            base: base.map(ObjectVersion),
            version: ObjectVersion(version),
            checksum: Some(checksum(data)),
            pg_seed: Some(3),
            epoch: Epoch(1),
            sync: false,
        },
        context,
    )
}

/// The whole object as of snapshot mark `mark`.
pub(super) fn as_of(store: &DeviceStore, mark: u64) -> Vec<u8> {
    let key = store.key_as_of(POOL, KEY, ObjectVersion(mark)).unwrap();
    store.read_range(POOL, &key, 0, SIZE - 1).unwrap().1
}
