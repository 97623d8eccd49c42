//! The one quorum rule: when a replication round — a write, a delete, a write in place, a
//! choice record — has succeeded, succeeded degraded, must go again, or has failed.
//!
//! A round sends one request to each of `replicas` devices and waits for every answer (or the
//! transport's verdict on it). Each answer is reduced to an [`Outcome`]; a [`Round`] collects
//! them and [`Round::decide`] applies the rule, in this order:
//!
//! 1. **A device refused this round's map** (stale or unknown epoch): the replica set itself
//!    may be wrong, so nothing else the round says is trusted — [`Decision::RefreshMap`].
//! 2. **A device holds a newer version** than this round's (a writer whose clock runs ahead,
//!    within the bound servers take): the round goes again above it, at most
//!    [`VERSION_BUMPS_MAX`] times — [`Decision::WriteAbove`]. After that a concurrent writer
//!    of the same key keeps winning, and its newer version stands.
//! 3. **Quorum**: every device whose server runs must have stored the round — a running
//!    replica serves reads, so it must never miss one — and at least `min_size` devices must
//!    (the pool's, or the client's write quorum), and at least one. Only devices whose server
//!    is known not to run ([`Outcome::NotRunning`]: connection refused, or fenced) are gone
//!    around: they applied nothing and catch up before serving again. A device holding a
//!    version that wins over this round's ([`Outcome::Superseded`]) counts as stored: last
//!    writer wins, and the winning version is durable there. Met: [`Decision::Durable`],
//!    degraded when a device was gone around; not met: [`Decision::Short`].
//!
//! This is Garage's `QuorumSetResultTracker` (`src/rpc/rpc_helper.rs`) cut to Optio's needs:
//! one replica set a round, answers awaited in full (a device not running lowers what is
//! needed, so the rule needs every answer), and the version and map refusals a
//! last-writer-wins store adds.
//!
//! **Why here.** The rule is pure — no I/O, no clock, no async — so it is tested
//! exhaustively (every combination of outcomes for 1–5 replicas and every `min_size`) against
//! a naive restatement. It lives in `optio-client` rather than `optio-proto` because it is
//! the client's decision over the transport's outcomes ([`Failure`], from `optio-net`, which
//! `optio-proto` does not know): the servers never decide a client's quorum, and the wire
//! format should not carry a policy. [`Outcome::of`] is the one place an answer is read for
//! the rule; the operations in `client/` only act on the [`Decision`].

use optio_proto::{ErrorKind, ObjectVersion};

use crate::transport::{Answer, Failure};

/// How many times a round is sent again above a newer version a device holds (step 2 of the
/// rule), for writes and deletes alike.
pub const VERSION_BUMPS_MAX: usize = 2;

/// The largest replica set a round may have: a pool's size is a `u8`, and a delete while
/// data moves also asks the devices of earlier maps.
pub const ROUND_REPLICAS_MAX: usize = 1024;

/// What one device's answer means for the round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The device stored the round's version (for a delete: its tombstone, written even where
    /// the object was absent).
    Stored,
    /// The device holds a version that wins over the round's; `Some` with that version when it
    /// is strictly newer (the round may go again above it), `None` when it wins only by the
    /// tie-break (same version: a tombstone, or the larger checksum).
    Superseded(Option<ObjectVersion>),
    /// The device's server is known not to run (connection refused) or lost its lease
    /// (fenced): it applied nothing and catches up before it serves again.
    NotRunning,
    /// The device refused the round's map epoch (stale or unknown).
    StaleMap,
    /// Anything else: no answer, a dropped connection, a malformed answer, another refusal.
    /// The device may or may not have applied the round.
    Failed,
}

/// What a round is, for reading its answers: an absent object means something else to a
/// delete than to a write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RoundKind {
    /// A whole write or a write in place.
    Write,
    /// A delete: `NotFound` means the tombstone was written where nothing was stored.
    Delete,
    /// A choice record at the object's home (a round of one).
    Record,
}

impl Outcome {
    /// What one device's `result` means for a round of `kind` at `version` (`None` for a
    /// record, which has none).
    pub fn of(
        kind: RoundKind,
        result: &Result<Answer, Failure>,
        version: Option<ObjectVersion>,
    ) -> Outcome {
        let failure = match result {
            Ok(_) => return Outcome::Stored,
            Err(failure) => failure,
        };
        if failure.is_not_running() {
            return Outcome::NotRunning;
        }
        match (kind, failure.kind()) {
            (_, Some(ErrorKind::StaleEpoch | ErrorKind::UnknownEpoch)) => Outcome::StaleMap,
            (RoundKind::Write | RoundKind::Delete, Some(ErrorKind::VersionConflict)) => {
                let newer = failure.stored_version().filter(|stored| Some(*stored) > version);
                Outcome::Superseded(newer)
            }
            (RoundKind::Delete, Some(ErrorKind::NotFound)) => Outcome::Stored,
            _ => Outcome::Failed,
        }
    }
}

/// The rule's parameters for one round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuorumRule {
    /// The devices the round is sent to.
    pub replicas: usize,
    /// The fewest devices that must store the round, whatever runs.
    pub min_size: usize,
}

impl QuorumRule {
    /// A choice record: the home alone, which must answer.
    pub const RECORD: QuorumRule = QuorumRule { replicas: 1, min_size: 1 };
}

/// What a round's answers decide.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// The round is durable: every running device and at least `min_size` stored it.
    Durable {
        /// Some device was gone around (not running): it catches up later.
        degraded: bool,
    },
    /// A device refused the round's map: refresh it (or wait for it) and go again.
    RefreshMap,
    /// A device holds this newer version: go again above it.
    WriteAbove(ObjectVersion),
    /// Too few devices stored the round.
    Short {
        /// Devices that stored it (or hold a version that wins).
        acked: usize,
        /// Devices it needed.
        needed: usize,
    },
}

/// One replication round's answers, collected as they come, decided once all are in.
#[derive(Clone, Debug)]
pub struct Round {
    rule: QuorumRule,
    outcomes: Vec<Outcome>,
}

impl Round {
    /// An empty round under `rule`.
    pub fn new(rule: QuorumRule) -> Round {
        assert!(
            (1..=ROUND_REPLICAS_MAX).contains(&rule.replicas),
            "a round is sent to 1 to {ROUND_REPLICAS_MAX} devices, not {}",
            rule.replicas
        );
        Round { rule, outcomes: Vec::with_capacity(rule.replicas) }
    }

    /// A round under `rule` whose answers are `outcomes`, in any order.
    pub fn of(rule: QuorumRule, outcomes: impl IntoIterator<Item = Outcome>) -> Round {
        let mut round = Round::new(rule);
        for outcome in outcomes {
            round.record(outcome);
        }
        round
    }

    /// Records one device's outcome.
    pub fn record(&mut self, outcome: Outcome) {
        assert!(
            self.outcomes.len() < self.rule.replicas,
            "more answers than the {} devices of the round",
            self.rule.replicas
        );
        self.outcomes.push(outcome);
    }

    /// Devices whose server does not run (gone around).
    pub fn not_running(&self) -> usize {
        self.count(|o| matches!(o, Outcome::NotRunning))
    }

    /// Devices that stored the round or hold a version that wins over it.
    pub fn acked(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Stored | Outcome::Superseded(_)))
    }

    /// Devices that must store the round: every running one, at least `min_size`, at least
    /// one.
    pub fn needed(&self) -> usize {
        (self.rule.replicas - self.not_running()).max(self.rule.min_size).max(1)
    }

    /// The rule applied to the round's answers (see the module docs), for a round that has
    /// already gone again above a newer version `version_bumps` times.
    pub fn decide(&self, version_bumps: usize) -> Decision {
        assert_eq!(
            self.outcomes.len(),
            self.rule.replicas,
            "a round is decided once every device answered"
        );
        if self.outcomes.contains(&Outcome::StaleMap) {
            return Decision::RefreshMap;
        }
        let newest = self
            .outcomes
            .iter()
            .filter_map(|o| match o {
                Outcome::Superseded(newer) => *newer,
                _ => None,
            })
            .max();
        if let Some(newest) = newest
            && version_bumps < VERSION_BUMPS_MAX
        {
            return Decision::WriteAbove(newest);
        }
        let (acked, needed) = (self.acked(), self.needed());
        debug_assert!(acked + self.not_running() <= self.rule.replicas);
        if acked >= needed {
            debug_assert!(acked >= self.rule.min_size.max(1));
            return Decision::Durable { degraded: self.not_running() > 0 };
        }
        Decision::Short { acked, needed }
    }

    fn count(&self, matching: impl Fn(&Outcome) -> bool) -> usize {
        self.outcomes.iter().filter(|o| matching(o)).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NEWER: ObjectVersion = ObjectVersion(7);
    const NEWEST: ObjectVersion = ObjectVersion(9);

    /// Every outcome a device can give, the newer versions two apart so that the newest
    /// is told from another.
    const OUTCOMES: [Outcome; 7] = [
        Outcome::Stored,
        Outcome::Superseded(None),
        Outcome::Superseded(Some(NEWER)),
        Outcome::Superseded(Some(NEWEST)),
        Outcome::NotRunning,
        Outcome::StaleMap,
        Outcome::Failed,
    ];

    /// Every sequence of `n` outcomes.
    fn combinations(n: usize) -> Vec<Vec<Outcome>> {
        let mut all = vec![Vec::new()];
        for _ in 0..n {
            all = all
                .into_iter()
                .flat_map(|prefix| {
                    OUTCOMES.iter().map(move |o| {
                        let mut next = prefix.clone();
                        next.push(*o);
                        next
                    })
                })
                .collect();
        }
        all
    }

    /// The rule restated naively, case by case, from the old per-operation code it replaces.
    fn reference(min_size: usize, outcomes: &[Outcome], version_bumps: usize) -> Decision {
        let mut stored = 0;
        let mut superseded = 0;
        let mut not_running = 0;
        let mut stale = false;
        let mut newest: Option<ObjectVersion> = None;
        for outcome in outcomes {
            match outcome {
                Outcome::Stored => stored += 1,
                Outcome::Superseded(newer) => {
                    superseded += 1;
                    if let Some(v) = newer
                        && newest.is_none_or(|n| *v > n)
                    {
                        newest = Some(*v);
                    }
                }
                Outcome::NotRunning => not_running += 1,
                Outcome::StaleMap => stale = true,
                Outcome::Failed => {}
            }
        }
        if stale {
            return Decision::RefreshMap;
        }
        if version_bumps < 2
            && let Some(v) = newest
        {
            return Decision::WriteAbove(v);
        }
        let running = outcomes.len() - not_running;
        let mut needed = running;
        if needed < min_size {
            needed = min_size;
        }
        if needed == 0 {
            needed = 1;
        }
        if stored + superseded >= needed {
            Decision::Durable { degraded: not_running > 0 }
        } else {
            Decision::Short { acked: stored + superseded, needed }
        }
    }

    #[test]
    fn every_combination_of_answers_matches_the_reference() {
        let mut decided = 0;
        for replicas in 1..=5 {
            for outcomes in combinations(replicas) {
                for min_size in 1..=replicas {
                    for bumps in 0..=VERSION_BUMPS_MAX {
                        let rule = QuorumRule { replicas, min_size };
                        let got = Round::of(rule, outcomes.iter().copied()).decide(bumps);
                        let want = reference(min_size, &outcomes, bumps);
                        assert_eq!(got, want, "{rule:?} {outcomes:?} after {bumps} bumps");
                        decided += 1;
                    }
                }
            }
        }
        // 7 outcomes, replica sets of 1 to 5, every min_size, 3 bump counts.
        let expected: usize = (1..=5u32).map(|n| 7usize.pow(n) * n as usize * 3).sum();
        assert_eq!(decided, expected);
    }

    #[test]
    fn every_combination_keeps_the_rules_invariants() {
        for replicas in 1..=5 {
            for outcomes in combinations(replicas) {
                for min_size in 1..=replicas {
                    let rule = QuorumRule { replicas, min_size };
                    let round = Round::of(rule, outcomes.iter().copied());
                    let decision = round.decide(VERSION_BUMPS_MAX);
                    let count = |o: Outcome| outcomes.iter().filter(|x| **x == o).count();
                    match decision {
                        Decision::Durable { degraded } => {
                            // Every running device stored it, and at least min_size did.
                            assert_eq!(count(Outcome::Failed), 0, "{outcomes:?}");
                            assert_eq!(count(Outcome::StaleMap), 0, "{outcomes:?}");
                            assert!(round.acked() >= min_size, "{outcomes:?}");
                            assert_eq!(degraded, count(Outcome::NotRunning) > 0);
                        }
                        Decision::RefreshMap => assert!(count(Outcome::StaleMap) > 0),
                        Decision::WriteAbove(_) => unreachable!("no bumps left"),
                        Decision::Short { acked, needed } => {
                            assert!(acked < needed);
                            assert!(
                                count(Outcome::Failed) > 0
                                    || replicas - count(Outcome::NotRunning) < min_size,
                                "{outcomes:?} short without a cause"
                            );
                        }
                    }
                    // The order answers come in does not matter.
                    let reversed = Round::of(rule, outcomes.iter().rev().copied());
                    assert_eq!(reversed.decide(VERSION_BUMPS_MAX), decision);
                }
            }
        }
    }

    #[test]
    fn a_better_answer_never_turns_success_into_failure() {
        for replicas in 1..=5 {
            for outcomes in combinations(replicas) {
                for min_size in 1..=replicas {
                    let rule = QuorumRule { replicas, min_size };
                    let before = Round::of(rule, outcomes.iter().copied()).decide(2);
                    for i in 0..replicas {
                        if outcomes[i] != Outcome::Failed {
                            continue;
                        }
                        let mut better = outcomes.clone();
                        better[i] = Outcome::Stored;
                        let after = Round::of(rule, better).decide(2);
                        if matches!(before, Decision::Durable { .. }) {
                            assert!(matches!(after, Decision::Durable { .. }), "{outcomes:?}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn the_newest_version_is_written_above_until_the_bumps_run_out() {
        let rule = QuorumRule { replicas: 3, min_size: 2 };
        let outcomes =
            [Outcome::Superseded(Some(NEWER)), Outcome::Stored, Outcome::Superseded(Some(NEWEST))];
        let round = Round::of(rule, outcomes);
        assert_eq!(round.decide(0), Decision::WriteAbove(NEWEST));
        assert_eq!(round.decide(1), Decision::WriteAbove(NEWEST));
        assert_eq!(round.decide(2), Decision::Durable { degraded: false });
    }

    #[test]
    fn devices_not_running_are_gone_around_down_to_min_size() {
        use Outcome::{NotRunning, Stored};
        let rule = QuorumRule { replicas: 3, min_size: 2 };
        let degraded = Round::of(rule, [Stored, Stored, NotRunning]).decide(0);
        assert_eq!(degraded, Decision::Durable { degraded: true });
        let short = Round::of(rule, [Stored, NotRunning, NotRunning]).decide(0);
        assert_eq!(short, Decision::Short { acked: 1, needed: 2 });
        // A running device that failed is never gone around, whatever min_size says.
        let failed = Round::of(rule, [Stored, Stored, Outcome::Failed]).decide(0);
        assert_eq!(failed, Decision::Short { acked: 2, needed: 3 });
    }

    #[test]
    fn a_stale_map_outranks_a_newer_version() {
        let rule = QuorumRule { replicas: 2, min_size: 1 };
        let round = Round::of(rule, [Outcome::Superseded(Some(NEWER)), Outcome::StaleMap]);
        assert_eq!(round.decide(0), Decision::RefreshMap);
    }

    #[test]
    fn a_record_needs_its_home() {
        for outcome in [Outcome::NotRunning, Outcome::Failed] {
            let round = Round::of(QuorumRule::RECORD, [outcome]);
            assert_eq!(round.decide(0), Decision::Short { acked: 0, needed: 1 });
        }
        assert_eq!(
            Round::of(QuorumRule::RECORD, [Outcome::Stored]).decide(0),
            Decision::Durable { degraded: false }
        );
    }

    fn refused(kind: ErrorKind, stored: Option<ObjectVersion>) -> Result<Answer, Failure> {
        Err(Failure::Refused { kind, reason: String::new(), epoch: None, stored })
    }

    #[test]
    fn answers_are_read_per_round_kind() {
        let ours = Some(ObjectVersion(5));
        let not_found = refused(ErrorKind::NotFound, None);
        assert_eq!(Outcome::of(RoundKind::Delete, &not_found, ours), Outcome::Stored);
        assert_eq!(Outcome::of(RoundKind::Write, &not_found, ours), Outcome::Failed);
        let newer = refused(ErrorKind::VersionConflict, Some(ObjectVersion(6)));
        for kind in [RoundKind::Write, RoundKind::Delete] {
            assert_eq!(
                Outcome::of(kind, &newer, ours),
                Outcome::Superseded(Some(ObjectVersion(6)))
            );
        }
        assert_eq!(Outcome::of(RoundKind::Record, &newer, None), Outcome::Failed);
        let tie = refused(ErrorKind::VersionConflict, Some(ObjectVersion(5)));
        assert_eq!(Outcome::of(RoundKind::Write, &tie, ours), Outcome::Superseded(None));
        for kind in [ErrorKind::StaleEpoch, ErrorKind::UnknownEpoch] {
            let stale = refused(kind, None);
            assert_eq!(Outcome::of(RoundKind::Record, &stale, None), Outcome::StaleMap);
        }
        let fenced = refused(ErrorKind::Fenced, None);
        assert_eq!(Outcome::of(RoundKind::Write, &fenced, ours), Outcome::NotRunning);
        let refused_conn = Err(Failure::NotRunning("refused".into()));
        assert_eq!(Outcome::of(RoundKind::Delete, &refused_conn, ours), Outcome::NotRunning);
        let lost = Err(Failure::Unreachable("timeout".into()));
        assert_eq!(Outcome::of(RoundKind::Write, &lost, ours), Outcome::Failed);
    }
}
