//! [`MapSource::apply`]: one [`MapChange`] stored as the next epoch — load, apply, report,
//! compare-and-swap — with the lost race retried, for every editor of the map (the CLI's
//! `optio map …` and `optio resize`, the manager's monitor, `optio up`'s supervisor).
//!
//! A change is data ([`MapChange`]), so it can be applied again: when another editor stored
//! a map between this one's load and its compare-and-swap, the change is applied to the
//! newer map, its [`ChangeReport`] computed again, and the swap tried again — at most
//! [`APPLY_ATTEMPTS_MAX`] times. Nothing is ever overwritten: each attempt swaps only on the
//! epoch it was applied to. A change that no longer applies (its device was removed
//! meanwhile) is [`ClusterError::Refused`]; one that would now leave data with fewer copies
//! than its pool's `min_size` is [`ClusterError::BelowMinSize`] unless the editor allowed it.
//!
//! Editors that show the change before storing it (the CLI: what moves, `--dry-run`, checks
//! against the servers) make a [`MapEdit`] from the map they loaded, judge it, then hand it to
//! [`MapSource::store_edit`], which swaps it or, after a lost race, applies the change again.

use optio_placement::{ChangeReport, ClusterMap, MapChange, MapError, MovementSample};

use crate::{ClusterError, MapSource};

/// Most times [`MapSource::apply`] applies a change and tries its compare-and-swap before
/// giving up with the last [`ClusterError::Conflict`]: another editor winning this many races
/// in a row is an editor in a loop.
pub const APPLY_ATTEMPTS_MAX: u32 = 8;

/// How [`MapSource::apply`] judges a change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApplyOptions {
    /// Report what the change does (simulating `sample`'s objects: what moves, copies
    /// short), and refuse a change that leaves data with fewer copies than its pool's
    /// `min_size` ([`ChangeReport::below_min_size`]) unless `allow_below_min_size`.
    Judged {
        /// The objects simulated for the [`ChangeReport`].
        sample: MovementSample,
        /// Store a change below `min_size` instead of refusing it.
        allow_below_min_size: bool,
    },
    /// Store the change whatever it does, without a report: for a supervisor applying
    /// changes of its own in quick succession, where nobody reads one (compiling both maps'
    /// placements for it costs more than the change itself).
    Unjudged,
}

/// A change applied to a map: the map it was applied to, the next one, and the report.
#[derive(Clone, Debug)]
pub struct MapEdit {
    /// The map the change was applied to.
    pub old: ClusterMap,
    /// The next map (epoch + 1).
    pub new: ClusterMap,
    /// What the change does (`None` when [`ApplyOptions::Unjudged`]).
    pub report: Option<ChangeReport>,
    /// How many times the change was applied (1 unless a race was lost).
    pub attempts: u32,
}

impl MapEdit {
    /// `change` applied to `old`, judged as `options` say: pure, nothing stored.
    pub fn new(
        old: ClusterMap,
        change: &MapChange,
        options: ApplyOptions,
    ) -> Result<MapEdit, MapError> {
        let (new, report) = match options {
            ApplyOptions::Judged { sample, .. } => {
                let (new, report) = old.apply_with_report(change, old.epoch(), sample)?;
                (new, Some(report))
            }
            ApplyOptions::Unjudged => (old.apply(change, old.epoch())?, None),
        };
        Ok(MapEdit { old, new, report, attempts: 1 })
    }

    /// Whether `options` refuse this edit: judged, below `min_size`, and not allowed.
    fn refused_by(&self, options: ApplyOptions) -> bool {
        let allowed = match options {
            ApplyOptions::Judged { allow_below_min_size, .. } => allow_below_min_size,
            ApplyOptions::Unjudged => true,
        };
        !allowed && self.report.as_ref().is_some_and(ChangeReport::below_min_size)
    }
}

impl MapSource {
    /// Loads the map, applies `change`, and stores the next epoch with a compare-and-swap;
    /// a lost race applies the change again to the newer map (see the [module
    /// docs](crate::edit)). Returns the edit stored.
    pub async fn apply(
        &self,
        change: &MapChange,
        options: ApplyOptions,
    ) -> Result<MapEdit, ClusterError> {
        let old = self.load().await?;
        let edit = MapEdit::new(old, change, options).map_err(ClusterError::Refused)?;
        self.store_edit(edit, change, options).await
    }

    /// Stores `edit` (made of `change` by [`MapEdit::new`] with the same `options`), or after
    /// a lost race `change` applied again to the newer map and judged again; returns the edit
    /// stored.
    pub async fn store_edit(
        &self,
        mut edit: MapEdit,
        change: &MapChange,
        options: ApplyOptions,
    ) -> Result<MapEdit, ClusterError> {
        loop {
            if edit.refused_by(options) {
                return Err(below_min_size(&edit));
            }
            let lost = match self.compare_and_swap(edit.old.epoch(), &edit.new).await {
                Ok(()) => return Ok(edit),
                Err(lost @ ClusterError::Conflict { .. }) => lost,
                Err(error) => return Err(error),
            };
            if edit.attempts >= APPLY_ATTEMPTS_MAX {
                return Err(lost);
            }
            let attempts = edit.attempts + 1;
            let old = self.load().await?;
            edit = MapEdit::new(old, change, options).map_err(ClusterError::Refused)?;
            edit.attempts = attempts;
        }
    }
}

/// The refusal of `edit`, naming its pools newly below `min_size`.
fn below_min_size(edit: &MapEdit) -> ClusterError {
    let pools: Vec<String> = edit
        .report
        .iter()
        .flat_map(|report| &report.short_of_copies)
        .filter(|p| p.newly_below_min_size())
        .map(|p| format!("'{}'", p.name))
        .collect();
    ClusterError::BelowMinSize { epoch: edit.old.epoch(), pools: pools.join(", ") }
}
