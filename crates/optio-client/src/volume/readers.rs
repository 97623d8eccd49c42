//! The readers of a snapshot (`optio nbd VOL@SNAP`, `optio volume export VOL@SNAP`), recorded
//! in the header with a lease so that `snap rm` refuses while one reads.

use super::header::{
    HolderProcess, LOCK_LEASE, Reader, VolumeError, find, holder_name, now_ms, update,
};
use crate::Client;

/// Records a reader of `volume@snap` holding `token` (its lease runs [`LOCK_LEASE`]; dead
/// readers are dropped on the way).
pub(crate) async fn pin(
    client: &Client,
    volume: &str,
    snap: &str,
    token: u64,
) -> Result<(), VolumeError> {
    update(client, volume, |header| {
        let Some(found) = header.snapshots.iter_mut().find(|s| s.name == snap) else {
            return Err(find(header, snap).expect_err("not there"));
        };
        found.readers.retain(|r| r.is_live() && r.token != token);
        found.readers.push(Reader {
            holder: holder_name(),
            token,
            expires_unix_ms: now_ms() + LOCK_LEASE.as_millis() as u64,
            process: HolderProcess::current(),
        });
        Ok(())
    })
    .await?;
    Ok(())
}

/// Forgets the reader of `volume@snap` holding `token`.
pub(crate) async fn unpin(
    client: &Client,
    volume: &str,
    snap: &str,
    token: u64,
) -> Result<(), VolumeError> {
    update(client, volume, |header| {
        if let Some(found) = header.snapshots.iter_mut().find(|s| s.name == snap) {
            found.readers.retain(|r| r.token != token);
        }
        Ok(())
    })
    .await?;
    Ok(())
}
