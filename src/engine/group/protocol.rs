//! A group-mode instance's epoch, as a protocol independent of Kafka.
//!
//! Every `checkpoint.interval` an instance ends its epoch: it snapshots and
//! uploads each task that changed, with a manifest naming the files, and
//! then commits one transaction holding the epoch's output, its repartition
//! writes and the offsets of every partition it owns, each task's offset
//! carrying the pointer to its manifest ([`CommitOffsets`]). That commit is
//! the checkpoint. The commit goes through [`CommitPoint`], as single
//! mode's does, and the group membership behind a small trait
//! ([`Membership`]), so that `tests/simulation_group.rs` drives this code
//! against an in-memory group with rebalances, zombies and crashes, as
//! `tests/simulation.rs` drives single mode's Coordinator.
//!
//! - [`run_epoch`]: prepare, commit, and what a refused commit means.
//! - [`commit_epoch`]: the checks before the commit, and the commit.
//! - [`commit_before_revocation`]: a revocation commits first, unless lost.
//! - [`restore_point`]: what a task restores from its committed offset.

use std::time::Instant;

use tracing::{error, info, warn};

use super::manifest;
use crate::error::{Result, WeirError};
use crate::runtime::commit::{CommitOffsets, CommitPoint, TransactionBudget};

/// What an instance knows of its membership in the group.
pub trait Membership {
    /// Whether the group took the whole assignment away (a session timeout,
    /// a fenced member) without the instance having let it go yet.
    fn lost(&self) -> bool;
    /// Those of `partitions` the group does not count as assigned to this
    /// member now, as `topic/partition`.
    fn foreign(&self, offsets: &CommitOffsets) -> Result<Vec<String>>;
}

/// What an instance does at the end of an epoch, driven by [`run_epoch`].
pub trait EpochWork {
    /// Ends the epoch: everything gathered is written into the open
    /// transaction, each changed task is snapshotted and its manifest is
    /// durable on storage. Returns every owned partition's next offset
    /// (input partitions) or next offset and manifest pointer (tasks);
    /// None when the snapshots' files were not on storage in time: the
    /// checkpoint is declined, and the epoch goes on (what it wrote stays
    /// in the open transaction, its positions and state are kept, and a
    /// later epoch's checkpoint covers it).
    fn prepare(&mut self) -> Result<Option<CommitOffsets>>;
    /// The epoch committed: what `prepare` returned is now the committed
    /// checkpoint of each partition.
    fn committed(&mut self, offsets: &CommitOffsets);
    /// The epoch was aborted: drop what was gathered since the last commit
    /// and take every partition back to its committed offset and state.
    fn rewind(&mut self);
}

/// What became of an epoch's transaction.
#[derive(Debug)]
pub enum Committed {
    /// Committed, and the next transaction begun.
    Yes,
    /// The checkpoint was not ready in time: nothing was committed and
    /// nothing is redone; the output waits in the open transaction,
    /// `renewed` (aborted and begun again with the same output) when it
    /// could not live through another checkpoint.
    Declined { renewed: bool },
    /// The group refused it in a rebalance (the work migrated; nothing is
    /// wrong): the epoch was aborted and the instance resumes from what the
    /// group committed.
    Refused(WeirError),
}

/// One epoch's end: prepare, commit, and on a refusal abort and rewind.
/// A declined checkpoint renews the transaction when `budget` says it
/// cannot wait for another one. Err for a zombie (a lost assignment, a
/// fenced member or producer) or any other failure: the attempt ends and
/// its transaction is aborted.
pub fn run_epoch(
    work: &mut impl EpochWork,
    membership: &impl Membership,
    commit: &dyn CommitPoint,
    instance: &str,
    budget: &TransactionBudget,
) -> Result<(Committed, CommitOffsets)> {
    let Some(offsets) = work.prepare()? else {
        let age = commit.transaction_age().unwrap_or_default();
        let renewed = !budget.allows_another_checkpoint(age);
        if renewed {
            commit.renew()?;
        }
        return Ok((Committed::Declined { renewed }, CommitOffsets::default()));
    };
    crate::crash_point!("group-before-commit");
    match commit_epoch(membership, commit, instance, &offsets)? {
        Committed::Yes => {
            work.committed(&offsets);
            Ok((Committed::Yes, offsets))
        }
        Committed::Refused(cause) => {
            warn!(
                error = %cause.report(),
                "the group refused the commit (its assignment changed meanwhile); aborting the \
                 epoch and resuming every partition from its committed checkpoint"
            );
            commit.abort()?;
            commit.begin()?;
            work.rewind();
            Ok((Committed::Refused(cause), offsets))
        }
        // `commit_epoch` commits or is refused; declining is `prepare`'s.
        declined @ Committed::Declined { .. } => Ok((declined, offsets)),
    }
}

/// Commits an instance's epoch: its writes and `offsets` (with their
/// checkpoint pointers) in one transaction, sent with the group's
/// metadata so that a member whose generation moved on is refused. Only
/// what the group still counts as assigned may be committed: a partition
/// it took away (a lost or fenced membership not yet reported to the loop)
/// belongs to another member now. Err for a zombie or any other failure.
pub fn commit_epoch(
    membership: &impl Membership,
    commit: &dyn CommitPoint,
    instance: &str,
    offsets: &CommitOffsets,
) -> Result<Committed> {
    if membership.lost() {
        return Err(WeirError::GroupFenced {
            instance: instance.to_string(),
            context: "assignment lost before the commit".into(),
        });
    }
    let foreign = membership.foreign(offsets)?;
    if !foreign.is_empty() {
        return Ok(Committed::Refused(WeirError::Task {
            task: "scale".into(),
            reason: format!("partitions no longer assigned: {}", foreign.join(", ")),
        }));
    }
    // Tests: the group refuses this commit, as in a raced rebalance.
    fail::fail_point!("group-commit-refused", |_| {
        Ok(Committed::Refused(WeirError::Task {
            task: "scale".into(),
            reason: "the commit was refused (failpoint group-commit-refused)".into(),
        }))
    });
    if let Err(e) = commit.prepare().and_then(|()| commit.commit(offsets)) {
        return match classify(instance, e) {
            CommitRefusal::Migrated(e) => Ok(Committed::Refused(e)),
            CommitRefusal::Fenced(e) | CommitRefusal::Other(e) => Err(e),
        };
    }
    commit.begin()?;
    Ok(Committed::Yes)
}

/// What a refused commit means.
pub enum CommitRefusal {
    /// The group moved on while the epoch was prepared: nothing is wrong.
    Migrated(WeirError),
    /// This member or its producer is a zombie.
    Fenced(WeirError),
    Other(WeirError),
}

/// The group coordinator checks the member's generation (its epoch under
/// KIP-848) against the group metadata sent with the offsets: a rebalance
/// that moved on while the epoch was prepared refuses it (the work
/// migrated; nothing is wrong), a member the group no longer knows is a
/// zombie, and so is a producer the broker fenced.
pub fn classify(instance: &str, e: WeirError) -> CommitRefusal {
    use rdkafka::types::RDKafkaErrorCode as C;
    let fenced = |e: &WeirError| WeirError::GroupFenced {
        instance: instance.to_string(),
        context: e.report().to_string(),
    };
    let code = match &e {
        WeirError::TransactionAborted { source, .. }
        | WeirError::ProducerFenced { source, .. }
        | WeirError::Kafka { source, .. } => source.rdkafka_error_code(),
        _ => None,
    };
    match code {
        Some(C::IllegalGeneration | C::StaleMemberEpoch | C::RebalanceInProgress) => {
            CommitRefusal::Migrated(e)
        }
        Some(C::UnknownMemberId | C::FencedInstanceId | C::FencedMemberEpoch) => {
            CommitRefusal::Fenced(fenced(&e))
        }
        _ if matches!(e, WeirError::ProducerFenced { .. }) => CommitRefusal::Fenced(fenced(&e)),
        _ => CommitRefusal::Other(e),
    }
}

/// Partitions are being taken away: unless the assignment was `lost` (a
/// lost one never commits: the attempt fails and its transaction is
/// aborted), `commit` what they hold first. Returns the failure that ends
/// the attempt, if any.
pub fn commit_before_revocation(
    lost: bool,
    instance: &str,
    partitions: usize,
    commit: impl FnOnce() -> Result<()>,
) -> Option<WeirError> {
    if lost {
        warn!("the group took this instance's partitions (assignment lost); not committing");
        return Some(WeirError::GroupFenced {
            instance: instance.to_string(),
            context: "assignment lost: the session timed out or the member was fenced".into(),
        });
    }
    let started = Instant::now();
    match commit() {
        Ok(()) => {
            info!(
                partitions,
                took_ms = started.elapsed().as_millis() as u64,
                "committed before revocation"
            );
            None
        }
        Err(e) => {
            error!(error = %e.report(), "commit before revocation failed; the attempt aborts");
            Some(e)
        }
    }
}

/// What a task assigned to an instance starts from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestorePoint {
    /// The group has no offset for it: nothing was committed, or the
    /// group's offsets were lost (the instance checks storage to tell).
    Empty,
    /// Empty state from this offset on, as `weir reset` committed it.
    Reset { offset: i64 },
    /// The manifest its committed offset points to, and that offset.
    Manifest { offset: i64, key: String },
}

/// A task's restore point from its committed offset and metadata. An
/// offset without a pointer (or `weir reset`'s marker) is refused: its
/// state cannot be found, and a task never starts empty in its place. `label` names the task and
/// `partition` its repartition partition in the message.
pub fn restore_point(
    label: &str,
    partition: &str,
    offset: Option<i64>,
    metadata: &str,
) -> Result<RestorePoint> {
    match (offset, manifest::parse_pointer(metadata)) {
        (None, _) => Ok(RestorePoint::Empty),
        (Some(offset), _) if metadata == manifest::EMPTY_START => {
            Ok(RestorePoint::Reset { offset })
        }
        (Some(o), None) => Err(WeirError::Recovery(format!(
            "{label}: the group committed offset {o} of {partition} without a checkpoint \
             pointer (metadata {metadata:?}); its state cannot be found, and weir does not \
             start a task from empty state in its place"
        ))),
        (Some(offset), Some(key)) => Ok(RestorePoint::Manifest {
            offset,
            key: key.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_offset_without_a_pointer_is_refused_naming_the_partition() {
        let e = restore_point("stage \"c\" task 1", "j.c.repartition/1", Some(7), "")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("j.c.repartition/1") && e.contains("offset 7"),
            "{e}"
        );
        assert_eq!(
            restore_point("t", "p", None, "").unwrap(),
            RestorePoint::Empty
        );
        assert_eq!(
            restore_point("t", "p", Some(5), manifest::EMPTY_START).unwrap(),
            RestorePoint::Reset { offset: 5 }
        );
        assert_eq!(
            restore_point("t", "p", Some(3), &manifest::pointer("m/1")).unwrap(),
            RestorePoint::Manifest {
                offset: 3,
                key: "m/1".into()
            }
        );
    }
}
