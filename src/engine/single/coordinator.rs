//! The Coordinator: triggers checkpoints, collects acks, prepares and
//! completes them, and with a transactional sink makes the Kafka commit the
//! commit point (docs/checkpoint-protocol.md). It also turns savepoint requests into
//! checkpoints copied where retention never deletes them.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};

use crate::runtime::commit::{CommitOffsets, Offsets, TransactionBudget};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::checkpoint::checksum::BackgroundVerification;
use crate::checkpoint::metadata::FORMAT_VERSION;
use crate::checkpoint::recovery::FolderContents;
use crate::checkpoint::retention::{to_prune, Retained};
use crate::checkpoint::store::{copy_checkpoint, count_savepoints};
use crate::checkpoint::{
    CheckpointMetadata, CheckpointStore, PartitionOffset, StateHandle, Topology,
};
use crate::config::Config;
use crate::element::Barrier;
use crate::error::{Result, WeirError};
use crate::observe::history::{CheckpointStats, Status};
use crate::runtime::gate::EpochGate;
use crate::runtime::transactions::Transactions;
use crate::runtime::{now_ms, Ack, JobShared, SavepointError, SourceCommand};

pub struct Coordinator {
    pub config: Arc<Config>,
    pub store: CheckpointStore,
    pub topology: Topology,
    pub sources: Vec<Sender<SourceCommand>>,
    /// Acks of tasks other than sources expected per checkpoint.
    pub task_acks: usize,
    pub acks: Receiver<Ack>,
    /// Where a prepared checkpoint becomes committed (a Kafka transaction
    /// with exactly-once delivery, two producers alternating per epoch),
    /// and which transaction each epoch's output goes into.
    pub transactions: Transactions,
    /// Keeps every transaction within `transaction.timeout.ms`.
    pub budget: TransactionBudget,
    /// Client of the consumer group: offset commits as a progress hint
    /// without transactions.
    pub group: BaseConsumer,
    pub gate: Arc<EpochGate>,
    pub next_id: u64,
    pub shared: JobShared,
    pub cancel: CancellationToken,
    /// Set once this attempt completed a checkpoint that moved some source
    /// past where the attempt started (resets the restart budget).
    pub progressed: Arc<AtomicBool>,
    /// The source offsets this attempt restored (empty without a checkpoint).
    /// A checkpoint that records the same offsets is not progress: a record
    /// that fails every attempt must not reset the budget just because an
    /// empty checkpoint completed before it arrived.
    pub start_offsets: Offsets,
    pub checksums: crate::checkpoint::checksum::ChecksumCache,
    /// The restored checkpoint's id and the CRC check of its SST files,
    /// still running: the first commit waits for it (`checksum` docs).
    pub restore_check: Option<(u64, Arc<BackgroundVerification>)>,
    /// When the attempt began. The first checkpoint is due
    /// `checkpoint.interval` after it, not after the restore: a restart's
    /// set-up (the fence, the restore) is part of the first epoch instead of
    /// delaying the first committed output by its length.
    pub attempt_started: Instant,
}

/// The acks of one checkpoint as they arrive: source offsets, state
/// handles, declines and timings. Acks of other (failed) checkpoints are
/// ignored.
#[derive(Debug)]
pub struct AckCollector {
    pub checkpoint_id: u64,
    pub expected: usize,
    pub acked: usize,
    pub offsets: Offsets,
    /// With event time: the max event time per partition at the barrier.
    pub max_timestamps: BTreeMap<(String, i32), i64>,
    pub state: Vec<StateHandle>,
    /// Subtasks that could not snapshot, with why.
    pub declined: Vec<String>,
    pub alignment_ms: u64,
    pub snapshot_ms: u64,
}

impl AckCollector {
    pub fn new(checkpoint_id: u64, expected: usize) -> Self {
        Self {
            checkpoint_id,
            expected,
            acked: 0,
            offsets: Offsets::new(),
            max_timestamps: BTreeMap::new(),
            state: Vec::new(),
            declined: Vec::new(),
            alignment_ms: 0,
            snapshot_ms: 0,
        }
    }

    pub fn on_ack(&mut self, ack: Ack) {
        if ack.checkpoint_id() != self.checkpoint_id {
            return; // a late ack of a failed checkpoint
        }
        match ack {
            Ack::Source { offsets, .. } => {
                self.offsets.extend(
                    offsets
                        .into_iter()
                        .map(|p| ((p.topic, p.partition), p.offset)),
                );
            }
            Ack::Task {
                task,
                handles,
                alignment_ms,
                sync_ms,
                ..
            } => {
                self.alignment_ms = self.alignment_ms.max(alignment_ms);
                self.snapshot_ms = self.snapshot_ms.max(sync_ms);
                match handles {
                    Ok(h) => self.state.extend(h),
                    Err(reason) => self.declined.push(format!("task {task}: {reason}")),
                }
            }
        }
        self.acked += 1;
    }

    pub fn is_complete(&self) -> bool {
        self.acked >= self.expected
    }
}

/// How a checkpoint ended, with its timings.
struct Outcome {
    status: Status,
    reason: Option<String>,
    alignment_ms: u64,
    snapshot_ms: u64,
    commit_ms: u64,
    state_size_bytes: u64,
}

impl Outcome {
    fn failed(reason: impl Into<String>) -> Self {
        Self {
            status: Status::Failed,
            reason: Some(reason.into()),
            alignment_ms: 0,
            snapshot_ms: 0,
            commit_ms: 0,
            state_size_bytes: 0,
        }
    }
}

impl Coordinator {
    /// Runs until a final checkpoint completes after a stop request.
    pub fn run(mut self) -> Result<()> {
        let interval = self.config.checkpoint.interval;
        let min_pause = self.config.checkpoint.min_pause;
        let mut last_trigger = self.attempt_started;
        let mut last_end = self.attempt_started;
        let mut consecutive_failures = 0u32;
        loop {
            let due = (last_trigger + interval).max(last_end + min_pause);
            let mut savepoint = None;
            let then_stop = loop {
                if self.cancel.is_cancelled() {
                    return Ok(());
                }
                if self.shared.stop.load(Ordering::Relaxed) {
                    break true;
                }
                if let Ok(request) = self.shared.savepoints.try_recv() {
                    // Over the bound no checkpoint is taken for it.
                    if let Some(refusal) = self.savepoint_refusal() {
                        let _ = request.reply.send(Err(refusal));
                        continue;
                    }
                    savepoint = Some(request);
                    break false;
                }
                let now = Instant::now();
                if now >= due {
                    break false;
                }
                std::thread::sleep((due - now).min(Duration::from_millis(20)));
            };
            last_trigger = Instant::now();
            let trigger_time_ms = now_ms();
            let (id, outcome) = match self.claim_next_id() {
                Ok(id) => (id, self.checkpoint(id, trigger_time_ms, then_stop)?),
                // The checkpoint directory cannot be written: processing
                // goes on, the checkpoint counts as failed.
                Err(e) => (self.next_id - 1, Outcome::failed(e.report().to_string())),
            };
            last_end = Instant::now();
            let mut stats = CheckpointStats {
                id,
                trigger_time_ms,
                status: outcome.status,
                reason: outcome.reason.clone(),
                end_to_end_ms: last_end.duration_since(last_trigger).as_millis() as u64,
                alignment_ms: outcome.alignment_ms,
                snapshot_ms: outcome.snapshot_ms,
                commit_ms: outcome.commit_ms,
                state_size_bytes: outcome.state_size_bytes,
                savepoint: None,
            };
            if outcome.status == Status::Completed {
                consecutive_failures = 0;
                if let Some(request) = savepoint {
                    let answer = self.write_savepoint(id);
                    if let Ok(path) = &answer {
                        stats.savepoint = Some(path.clone());
                    }
                    let _ = request.reply.send(answer);
                }
                self.shared.history.record(stats);
                if then_stop {
                    info!(checkpoint_id = id, "final checkpoint completed; stopping");
                    return Ok(());
                }
                continue;
            }
            let reason = outcome.reason.unwrap_or_default();
            self.shared.history.record(stats);
            self.shared.metrics.checkpoints_failed.inc();
            if let Some(request) = savepoint {
                let _ = request.reply.send(Err(SavepointError::Failed(format!(
                    "checkpoint {id} failed: {reason}"
                ))));
            }
            if outcome.status == Status::Aborted {
                return Ok(());
            }
            consecutive_failures += 1;
            warn!(
                checkpoint_id = id,
                reason = %reason,
                consecutive_failures,
                tolerable_failures = self.config.checkpoint.tolerable_failures,
                "checkpoint failed"
            );
            // The cancel notice first: subtasks still aligning N unblock their
            // inputs and never snapshot N, so nothing re-creates the folder.
            self.gate.cancel(id);
            if let Err(e) = self.store.delete(id) {
                warn!(checkpoint_id = id, error = %e.report(), "removing the failed checkpoint's folder failed");
            }
            // Sinks go on; with transactions, epoch N's output stays in the
            // open transaction for the next checkpoint, and epoch N+1's
            // joins it, if that one can still commit it before
            // transaction.timeout.ms.
            self.transactions.on_failed(id);
            if let Some(age) = self.transactions.age() {
                if !self.budget.allows_another_checkpoint(age) {
                    return Err(WeirError::Checkpoint {
                        checkpoint_id: id,
                        reason: format!(
                            "the open Kafka transaction is {} ms old; another checkpoint (interval {} ms + \
                             timeout {} ms) could not commit it within transaction.timeout.ms ({} ms), so \
                             the attempt restarts from the last checkpoint and aborts it (last failure: {reason})",
                            age.as_millis(),
                            self.budget.interval.as_millis(),
                            self.budget.checkpoint_timeout.as_millis(),
                            self.budget.transaction_timeout.as_millis(),
                        ),
                    });
                }
            }
            if then_stop || consecutive_failures > self.config.checkpoint.tolerable_failures {
                return Err(WeirError::Checkpoint {
                    checkpoint_id: id,
                    reason: if then_stop {
                        format!("final checkpoint before stopping: {reason}")
                    } else {
                        format!("{consecutive_failures} consecutive checkpoints failed, the last: {reason}")
                    },
                });
            }
        }
    }

    /// Before the restored job's first commit: waits for the CRC check of
    /// the restored SST files. A mismatch stops the job for good (nothing
    /// it computed has become visible). The files' checksums seed the
    /// cache, so this checkpoint does not read the linked files again.
    fn await_restore_check(&mut self) -> Result<()> {
        let Some((restored, check)) = self.restore_check.take() else {
            return Ok(());
        };
        let started = Instant::now();
        let files = check.wait().map_err(|reason| {
            WeirError::Recovery(format!(
                "checkpoint {restored} cannot be restored: {reason}. Nothing since the restore was \
                 committed. Restore an earlier checkpoint or a savepoint with --restore-from"
            ))
        })?;
        for (path, crc) in &files {
            self.checksums.remember(path, *crc);
        }
        debug!(
            checkpoint_id = restored,
            files = files.len(),
            waited_ms = started.elapsed().as_millis() as u64,
            "restored checkpoint verified before the first commit"
        );
        Ok(())
    }

    /// Takes the next checkpoint id whose folder this instance can claim.
    fn claim_next_id(&mut self) -> Result<u64> {
        loop {
            let id = self.next_id;
            self.next_id += 1;
            if self.store.claim(id)?.is_some() {
                return Ok(id);
            }
            warn!(
                checkpoint_id = id,
                "checkpoint folder already exists: another instance of this job wrote it; skipping the id"
            );
        }
    }

    fn checkpoint(&mut self, id: u64, trigger_time_ms: u64, then_stop: bool) -> Result<Outcome> {
        let started = Instant::now();
        let barrier = Barrier {
            checkpoint_id: id,
            timestamp_ms: trigger_time_ms,
            then_stop,
        };
        for (i, s) in self.sources.iter().enumerate() {
            s.send(SourceCommand::Trigger(barrier))
                .map_err(|_| WeirError::PeerGone {
                    task: "coordinator".into(),
                    reason: format!("source subtask {i} is gone"),
                })?;
        }
        let mut round = AckCollector::new(id, self.sources.len() + self.task_acks);
        let ack_window = match self.transactions.age() {
            Some(age) => self.budget.ack_deadline(age),
            None => self.config.checkpoint.timeout,
        };
        let deadline = started + ack_window;
        while !round.is_complete() {
            if self.cancel.is_cancelled() {
                return Ok(Outcome {
                    status: Status::Aborted,
                    ..Outcome::failed("the job attempt stopped")
                });
            }
            let wait = deadline
                .saturating_duration_since(Instant::now())
                .min(Duration::from_millis(100));
            match self.acks.recv_timeout(wait) {
                Ok(ack) => round.on_ack(ack),
                Err(RecvTimeoutError::Timeout) if Instant::now() >= deadline => {
                    return Ok(Outcome::failed(format!(
                        "timed out after {:?} with {} of {} acks",
                        ack_window, round.acked, round.expected
                    )));
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(WeirError::PeerGone {
                        task: "coordinator".into(),
                        reason: "every subtask is gone".into(),
                    })
                }
            }
        }
        let acks_done = Instant::now();
        let AckCollector {
            offsets,
            max_timestamps,
            mut state,
            declined,
            alignment_ms,
            snapshot_ms,
            ..
        } = round;
        let with_timings = |o: Outcome| Outcome {
            alignment_ms,
            snapshot_ms,
            ..o
        };
        if !declined.is_empty() {
            return Ok(with_timings(Outcome::failed(declined.join("; "))));
        }
        // Subtasks hold output of epoch N+1 until this (Output::after_snapshot),
        // so this flush waits only for epoch N's records. At-least-once: the
        // epoch's output must be in Kafka before the checkpoint that replays
        // from after it exists; then later output goes on. Exactly-once: once
        // transaction N's producer is flushed, epoch N+1 goes into the other
        // producer's transaction while this checkpoint completes.
        let flush_started = Instant::now();
        self.transactions.on_acked(id)?;
        if !self.transactions.is_transactional() {
            debug!(
                checkpoint_id = id,
                flush_ms = flush_started.elapsed().as_millis() as u64,
                "output flushed"
            );
        }
        self.await_restore_check()?;
        state.sort_by(|a, b| (&a.uid, a.subtask).cmp(&(&b.uid, b.subtask)));
        let mut meta = CheckpointMetadata {
            format_version: FORMAT_VERSION,
            job: self.config.job.name.clone(),
            checkpoint_id: id,
            trigger_time_ms,
            prepared_time_ms: now_ms(),
            topology: self.topology.clone(),
            source_offsets: offsets
                .iter()
                .map(|((topic, partition), offset)| PartitionOffset {
                    topic: topic.clone(),
                    partition: *partition,
                    offset: *offset,
                    max_timestamp: max_timestamps.get(&(topic.clone(), *partition)).copied(),
                })
                .collect(),
            state,
        };
        // Checksums of the snapshot files (each SST is read once: later
        // checkpoints share it by hard link), verified before a restore.
        let folder = self.store.folder(id);
        for h in meta.state.iter_mut() {
            if let Err(e) = self.checksums.fill(&folder, h) {
                return Ok(with_timings(Outcome::failed(format!(
                    "checksums of {} subtask {}: {e}",
                    h.uid, h.subtask
                ))));
            }
        }
        // Every snapshot file and folder is durable before `_metadata`
        // says the checkpoint exists.
        if let Err(e) = self
            .store
            .sync_checkpoint(id)
            .and_then(|()| self.store.write_metadata(&meta))
        {
            return Ok(with_timings(Outcome::failed(format!(
                "writing _metadata: {}",
                e.report()
            ))));
        }
        crate::crash_point!("after-metadata-before-commit");
        let commit_started = Instant::now();
        // Checksums, fsyncs and `_metadata`, after the last ack.
        let prepare_ms = commit_started.duration_since(acks_done).as_millis() as u64;
        if self.transactions.is_transactional() {
            // Output of epoch N and the offsets of checkpoint N become
            // visible together, or not at all.
            self.transactions
                .commit(&CommitOffsets::for_checkpoint(id, &offsets))?;
            self.shared.metrics.transactions_committed.inc();
            crate::crash_point!("after-commit-before-mark");
            self.store.mark_committed(id)?;
            self.transactions.after_commit(id, then_stop)?;
        } else {
            self.store.mark_committed(id)?;
            if !offsets.is_empty() {
                // A progress hint for lag monitoring; checkpoints own the truth.
                if let Err(e) = self.group.commit(
                    &CommitOffsets::for_checkpoint(id, &offsets).to_list()?,
                    CommitMode::Async,
                ) {
                    warn!(checkpoint_id = id, error = %crate::error::Report(&e), "committing offsets to the group (a progress hint) failed");
                }
            }
        }
        let commit_ms = commit_started.elapsed().as_millis() as u64;
        if moved_past(&self.start_offsets, &offsets) {
            self.progressed.store(true, Ordering::Relaxed);
        }
        let state_size_bytes = meta.state_size();
        self.shared.metrics.checkpoint_completed(
            id,
            started.elapsed().as_secs_f64(),
            state_size_bytes,
        );
        info!(
            checkpoint_id = id,
            duration_ms = started.elapsed().as_millis() as u64,
            alignment_ms,
            snapshot_ms,
            acks_ms = acks_done.duration_since(started).as_millis() as u64,
            prepare_ms,
            commit_ms,
            state_bytes = state_size_bytes,
            records_in = self
                .shared
                .metrics
                .records_in
                .with_label_values(&[crate::config::SOURCE_UID])
                .get(),
            bad_records_skipped = self
                .shared
                .metrics
                .bad_records
                .with_label_values(&["skip"])
                .get(),
            bad_records_dead_lettered = self
                .shared
                .metrics
                .bad_records
                .with_label_values(&["dead-letter"])
                .get(),
            "checkpoint completed"
        );
        self.prune();
        Ok(Outcome {
            status: Status::Completed,
            reason: None,
            alignment_ms,
            snapshot_ms,
            commit_ms,
            state_size_bytes,
        })
    }

    /// Copies completed checkpoint `id` into the savepoint directory (hard
    /// links where it can), where retention never looks.
    fn write_savepoint(&self, id: u64) -> std::result::Result<String, SavepointError> {
        let dir: PathBuf = self
            .config
            .savepoint_dir()
            .join(format!("savepoint-{id:010}-{}", now_ms()));
        copy_checkpoint(&self.store.folder(id), &dir)
            .map_err(|e| SavepointError::Failed(e.report().to_string()))?;
        info!(checkpoint_id = id, path = %dir.display(), "savepoint written");
        Ok(dir.display().to_string())
    }

    /// Why a savepoint may not be taken now: `checkpoint.max_savepoints`
    /// are already in the savepoint directory (weir never deletes one).
    fn savepoint_refusal(&self) -> Option<SavepointError> {
        let max = self.config.checkpoint.max_savepoints;
        if max == 0 {
            return Some(SavepointError::TooMany(
                "savepoints are off: checkpoint.max_savepoints = 0".into(),
            ));
        }
        let dir = self.config.savepoint_dir();
        let held = match count_savepoints(&dir) {
            Ok(n) => n,
            Err(e) => {
                return Some(SavepointError::Failed(format!(
                    "cannot count the savepoints in {}: {}",
                    dir.display(),
                    e.report()
                )))
            }
        };
        (held >= max as usize).then(|| {
            warn!(held, max, dir = %dir.display(), "savepoint refused: checkpoint.max_savepoints reached");
            SavepointError::TooMany(format!(
                "{held} savepoints in {} reach checkpoint.max_savepoints = {max}; delete one you \
                 no longer need (weir never deletes savepoints) or raise the limit",
                dir.display()
            ))
        })
    }

    /// Deletes checkpoints beyond `retained`; never one recovery may need.
    fn prune(&self) {
        let Ok(folders) = self.store.scan() else {
            return;
        };
        let retained: Vec<Retained> = folders
            .iter()
            .filter_map(|f| {
                Some(Retained {
                    id: f.id?,
                    complete: matches!(f.contents, FolderContents::Valid(_)) && f.committed_marker,
                })
            })
            .collect();
        for id in to_prune(&retained, self.config.checkpoint.retained) {
            if let Err(e) = self.store.delete(id) {
                warn!(checkpoint_id = id, error = %e.report(), "pruning an old checkpoint failed");
            }
        }
    }
}

/// Whether a completed checkpoint's offsets are past those an attempt
/// started from, for any source partition.
fn moved_past(start: &Offsets, completed: &Offsets) -> bool {
    completed
        .iter()
        .any(|(tp, offset)| start.get(tp).is_none_or(|s| offset > s))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offsets(list: &[(&str, i32, i64)]) -> Offsets {
        list.iter()
            .map(|(t, p, o)| ((t.to_string(), *p), *o))
            .collect()
    }

    #[test]
    fn progress_means_some_partition_moved_past_the_restored_offsets() {
        let start = offsets(&[("in", 0, 10), ("in", 1, 5)]);
        assert!(!moved_past(&start, &start));
        assert!(!moved_past(&start, &offsets(&[("in", 0, 10)])));
        assert!(moved_past(&start, &offsets(&[("in", 0, 10), ("in", 1, 6)])));
        assert!(!moved_past(&Offsets::new(), &Offsets::new()));
        assert!(moved_past(&Offsets::new(), &offsets(&[("in", 0, 0)])));
    }
}
