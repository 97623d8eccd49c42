//! Choice records: read, create-if-absent (or replace this writer's own) and remove; a record
//! request also answers as a probe of the device.

use std::sync::Arc;

use optio_proto::answer::{Answer, Refusal};
use optio_proto::{ChoiceRecord, ErrorKind};

use crate::store::RecordOutcome;

use super::state::AppState;
use super::target::{Handled, Target, fail};

pub(super) fn get_record(target: &Target, key: &str) -> Handled {
    let record = target
        .store
        .record(target.pool, key)
        .ok_or_else(|| fail(ErrorKind::NotFound, "no choice record"))?;
    Ok(Answer::Record { record, created: false, info: None })
}

/// A record's creation ([`optio_proto::request::Op::PutRecord`]).
pub(super) struct PutRecord {
    pub(super) key: String,
    pub(super) record: ChoiceRecord,
    pub(super) replace_if_writer: Option<u64>,
    pub(super) unless_contended: bool,
    pub(super) defer_sync: bool,
}

pub(super) async fn put_record(state: &Arc<AppState>, target: &Target, put: PutRecord) -> Handled {
    let PutRecord { key, record, replace_if_writer: replace, unless_contended, defer_sync } = put;
    // A record must name a candidate the pool has (when this server's map knows the pool):
    // clients index their candidates with it.
    let pool_choices = state
        .map
        .current()
        .and_then(|current| current.map.pool(target.pool).map(|pool| pool.choice.choices));
    if let Some(choices) = pool_choices
        && u32::from(record.candidate) >= choices
    {
        return Err(fail(
            ErrorKind::BadRequest,
            format!(
                "candidate {} is not a candidate of pool {}, which has {choices}",
                record.candidate, target.pool
            ),
        ));
    }
    if target.store.record_log().in_grace() && target.store.record(target.pool, &key).is_none() {
        return Err(fail(
            ErrorKind::Unavailable,
            "this server restarted after a crash and creates no choice record for a moment; retry",
        ));
    }
    let (outcome, _) =
        target.store.create_record(target.pool, &key, record, replace, unless_contended);
    let (created, record) = match outcome {
        RecordOutcome::Created(r) => (true, r),
        RecordOutcome::Exists(r) => (false, r),
    };
    if created && !defer_sync {
        wait_durable(target, &key).await?;
    }
    // A record request is also a probe of this device.
    let info = target.store.info(target.pool, &key);
    Ok(Answer::Record { record, created, info })
}

/// Waits until the latest change to `key`'s record is committed, committing now if needed.
pub(super) async fn wait_durable(target: &Target, key: &str) -> Result<(), Refusal> {
    let log = target.store.record_log();
    let seq = log.seq_of(target.pool, key);
    if seq == 0 || log.durable_seq() >= seq {
        return Ok(());
    }
    let mut durable = log.watch();
    let store = target.store.clone();
    tokio::task::spawn_blocking(move || store.commit_records())
        .await
        .map_err(|e| fail(ErrorKind::Io, format!("commit task failed: {e}")))?
        .map_err(|e| fail(ErrorKind::Io, format!("the choice record is not durable: {e}")))?;
    durable
        .wait_for(|d| *d >= seq)
        .await
        .map_err(|_| fail(ErrorKind::Io, "the record log closed"))?;
    Ok(())
}

pub(super) async fn delete_record(target: &Target, key: String) -> Handled {
    target.store.delete_record(target.pool, &key)?;
    Ok(Answer::Done)
}
