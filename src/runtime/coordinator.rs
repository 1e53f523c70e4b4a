//! The Coordinator: triggers checkpoints, collects acks, prepares and
//! completes them, and with a transactional sink makes the Kafka commit the
//! commit point (DESIGN.md §3, §4).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::gate::EpochGate;
use super::{now_ms, Ack, Counters, SourceCommand};
use crate::checkpoint::metadata::FORMAT_VERSION;
use crate::checkpoint::recovery::FolderContents;
use crate::checkpoint::retention::{to_prune, Retained};
use crate::checkpoint::{
    CheckpointMetadata, CheckpointStore, PartitionOffset, StateHandle, Topology,
};
use crate::config::Config;
use crate::element::Barrier;
use crate::error::{Result, WeirError};
use crate::kafka::offsets_list;
use crate::kafka::producer::SinkProducer;

pub struct Coordinator {
    pub config: Arc<Config>,
    pub store: CheckpointStore,
    pub topology: Topology,
    pub sources: Vec<Sender<SourceCommand>>,
    pub keyed_parallelism: u32,
    pub acks: Receiver<Ack>,
    pub producer: Arc<SinkProducer>,
    /// Client of the consumer group: group metadata for transactions,
    /// offset commits as a progress hint otherwise.
    pub group: BaseConsumer,
    pub gate: Arc<EpochGate>,
    pub next_id: u64,
    pub stop: Arc<AtomicBool>,
    pub cancel: CancellationToken,
    pub counters: Arc<Counters>,
    /// Set once this attempt completed a checkpoint (resets the restart budget).
    pub progressed: Arc<AtomicBool>,
}

enum Outcome {
    Completed,
    Aborted(String),
}

impl Coordinator {
    /// Runs until a final checkpoint completes after a stop request.
    pub fn run(mut self) -> Result<()> {
        let interval = self.config.checkpoint.interval;
        let min_pause = self.config.checkpoint.min_pause;
        let mut last_trigger = Instant::now();
        let mut last_end = Instant::now();
        loop {
            let due = (last_trigger + interval).max(last_end + min_pause);
            let then_stop = loop {
                if self.cancel.is_cancelled() {
                    return Ok(());
                }
                if self.stop.load(Ordering::Relaxed) {
                    break true;
                }
                let now = Instant::now();
                if now >= due {
                    break false;
                }
                std::thread::sleep((due - now).min(Duration::from_millis(20)));
            };
            let id = match self.claim_next_id() {
                Ok(id) => id,
                Err(e) => {
                    // Checkpoints cannot be written; processing goes on and
                    // the next trigger tries again.
                    warn!(error = %e, "cannot create a checkpoint folder");
                    last_trigger = Instant::now();
                    last_end = last_trigger;
                    if then_stop {
                        return Err(e);
                    }
                    continue;
                }
            };
            last_trigger = Instant::now();
            let outcome = self.checkpoint(id, then_stop)?;
            last_end = Instant::now();
            match outcome {
                Outcome::Completed if then_stop => {
                    info!(checkpoint_id = id, "final checkpoint completed; stopping");
                    return Ok(());
                }
                Outcome::Completed => {}
                Outcome::Aborted(reason) => {
                    warn!(checkpoint_id = id, reason = %reason, "checkpoint aborted");
                    self.store.delete(id)?;
                    // Sinks go on; with transactions, epoch N's output stays
                    // in the open transaction for the next checkpoint.
                    self.gate.release(id);
                    if then_stop {
                        return Err(WeirError::Checkpoint {
                            checkpoint_id: id,
                            reason: format!("final checkpoint before stopping: {reason}"),
                        });
                    }
                }
            }
        }
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

    fn checkpoint(&mut self, id: u64, then_stop: bool) -> Result<Outcome> {
        let started = Instant::now();
        let trigger_time_ms = now_ms();
        let barrier = Barrier {
            checkpoint_id: id,
            timestamp_ms: trigger_time_ms,
            then_stop,
        };
        for (i, s) in self.sources.iter().enumerate() {
            s.send(SourceCommand::Trigger(barrier))
                .map_err(|_| WeirError::Task {
                    task: "coordinator".into(),
                    reason: format!("source subtask {i} is gone"),
                })?;
        }
        let expected = self.sources.len() + self.keyed_parallelism as usize;
        let deadline = started + self.config.checkpoint.timeout;
        let mut offsets: BTreeMap<(String, i32), i64> = BTreeMap::new();
        let mut state: Vec<StateHandle> = Vec::new();
        let mut acked = 0;
        let mut alignment_done = None;
        while acked < expected {
            if self.cancel.is_cancelled() {
                return Ok(Outcome::Aborted("job cancelled".into()));
            }
            let wait = deadline
                .saturating_duration_since(Instant::now())
                .min(Duration::from_millis(100));
            match self.acks.recv_timeout(wait) {
                Ok(ack) if ack.checkpoint_id() != id => {} // late ack of an aborted checkpoint
                Ok(Ack::Source { offsets: o, .. }) => {
                    offsets.extend(o.into_iter().map(|p| ((p.topic, p.partition), p.offset)));
                    acked += 1;
                    if acked == self.sources.len() {
                        alignment_done = Some(started.elapsed());
                    }
                }
                Ok(Ack::Keyed { handle, .. }) => {
                    state.push(handle);
                    acked += 1;
                }
                Err(RecvTimeoutError::Timeout) if Instant::now() >= deadline => {
                    return Ok(Outcome::Aborted(format!(
                        "timed out after {:?} with {acked} of {expected} acks",
                        self.config.checkpoint.timeout
                    )));
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(WeirError::Task {
                        task: "coordinator".into(),
                        reason: "every subtask is gone".into(),
                    })
                }
            }
        }
        state.sort_by_key(|h| h.subtask);
        let meta = CheckpointMetadata {
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
                })
                .collect(),
            state,
        };
        if let Err(e) = self.store.write_metadata(&meta) {
            return Ok(Outcome::Aborted(format!("writing _metadata: {e}")));
        }
        let prepared = started.elapsed();
        crate::crash_point!("after-metadata-before-commit");
        let commit_started = Instant::now();
        if self.producer.is_transactional() {
            let group = self.group.group_metadata().ok_or_else(|| WeirError::Task {
                task: "coordinator".into(),
                reason: "consumer group metadata unavailable".into(),
            })?;
            // Output of epoch N and the offsets of checkpoint N become
            // visible together, or not at all.
            self.producer
                .commit_transaction(&offsets_list(&offsets, id)?, &group)?;
            crate::crash_point!("after-commit-before-mark");
            self.store.mark_committed(id)?;
            if !then_stop {
                self.producer.begin_transaction()?;
            }
            self.gate.release(id);
        } else {
            self.store.mark_committed(id)?;
            if !offsets.is_empty() {
                // A progress hint for lag monitoring; checkpoints own the truth.
                if let Err(e) = self
                    .group
                    .commit(&offsets_list(&offsets, id)?, CommitMode::Async)
                {
                    warn!(checkpoint_id = id, error = %e, "committing offsets to the group (a progress hint) failed");
                }
            }
        }
        self.progressed.store(true, Ordering::Relaxed);
        info!(
            checkpoint_id = id,
            duration_ms = started.elapsed().as_millis() as u64,
            alignment_ms = alignment_done.unwrap_or_default().as_millis() as u64,
            prepare_ms = prepared.as_millis() as u64,
            commit_ms = commit_started.elapsed().as_millis() as u64,
            state_bytes = meta.state_size(),
            records_in = Counters::get(&self.counters.records_in),
            records_out = Counters::get(&self.counters.records_out),
            bad_records_skipped = Counters::get(&self.counters.bad_records_skipped),
            bad_records_dead_lettered = Counters::get(&self.counters.bad_records_dead_lettered),
            "checkpoint completed"
        );
        self.prune();
        Ok(Outcome::Completed)
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
                warn!(checkpoint_id = id, error = %e, "pruning an old checkpoint failed");
            }
        }
    }
}
