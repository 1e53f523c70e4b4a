//! A keyed subtask with its chained sink: aligns barriers from every
//! source, updates RocksDB-backed state, emits results to Kafka, and at
//! each aligned barrier snapshots its state and acks.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Select, Sender};
use rdkafka::message::{Header, OwnedHeaders};
use rustc_hash::FxHashSet;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::alignment::BarrierAligner;
use super::gate::EpochGate;
use super::{Ack, DeadLetter, Item};
use crate::admin::metrics::Metrics;
use crate::checkpoint::{CheckpointStore, StateHandle};
use crate::config::{BadRecordPolicy, CheckpointMode, EmitMode};
use crate::element::{Barrier, Element};
use crate::error::{Result, WeirError};
use crate::kafka::producer::{SendError, SinkProducer};
use crate::operators::Pipeline;
use crate::state::{state_key, KeyedState};

/// Output records held back while the previous transaction commits.
const MAX_PENDING: usize = 100_000;

enum Output {
    Result { key: String, value: Vec<u8> },
    DeadLetter(Box<DeadLetter>),
}

pub struct KeyedTask {
    pub subtask: u32,
    pub uid: String,
    pub key_groups: (u32, u32),
    pub mode: CheckpointMode,
    pub emit: EmitMode,
    pub pipeline: Pipeline,
    pub state: KeyedState,
    pub inputs: Vec<Receiver<Element<Item>>>,
    pub acks: Sender<Ack>,
    pub producer: Arc<SinkProducer>,
    pub sink_topic: String,
    pub dead_letter_topic: Option<String>,
    /// What happens to an output record the producer refuses for its size.
    pub on_bad_record: BadRecordPolicy,
    /// Past this many changed keys (emit = on-checkpoint), their results are
    /// emitted before the barrier, so the set stays bounded.
    pub max_changed_keys: usize,
    pub gate: Arc<EpochGate>,
    pub store: CheckpointStore,
    pub metrics: Arc<Metrics>,
    /// `weir_records_out_total` of this operator, looked up once.
    pub records_out: prometheus::IntCounter,
    /// Reused for every output value.
    pub out_buf: Vec<u8>,
    pub cancel: CancellationToken,
}

struct Run {
    aligner: BarrierAligner,
    /// Keys changed in this epoch (emit = on-checkpoint).
    changed: FxHashSet<(u32, String)>,
    /// Exactly-once: the checkpoint whose commit must come before more output.
    awaiting: Option<u64>,
    pending: Vec<Output>,
    /// When the first barrier of the checkpoint being aligned arrived.
    alignment_started: Option<Instant>,
}

impl KeyedTask {
    pub fn run(mut self) -> Result<()> {
        let mut run = Run {
            aligner: BarrierAligner::new(self.inputs.len(), self.mode),
            changed: FxHashSet::default(),
            awaiting: None,
            pending: Vec::new(),
            alignment_started: None,
        };
        let records_in = self
            .metrics
            .records_in
            .with_label_values(&[self.uid.as_str()]);
        let inputs = std::mem::take(&mut self.inputs);
        loop {
            if self.cancel.is_cancelled() {
                return Ok(());
            }
            self.release_if_committed(&mut run)?;
            if let Some(pending) = run.aligner.pending() {
                let cancelled = self.gate.cancelled();
                if cancelled >= pending && run.aligner.cancel(cancelled) {
                    debug!(uid = %self.uid, subtask = self.subtask, checkpoint_id = pending, "alignment cancelled");
                    run.alignment_started = None;
                }
            }
            let readable: Vec<usize> = (0..inputs.len())
                .filter(|i| run.aligner.is_live(*i) && !run.aligner.is_blocked(*i))
                .collect();
            if readable.is_empty() {
                if run.aligner.all_finished() {
                    return Ok(());
                }
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            let mut select = Select::new();
            for i in &readable {
                select.recv(&inputs[*i]);
            }
            let Ok(op) = select.select_timeout(Duration::from_millis(50)) else {
                continue;
            };
            let input = readable[op.index()];
            let Ok(element) = op.recv(&inputs[input]) else {
                if self.cancel.is_cancelled() {
                    return Ok(());
                }
                return Err(WeirError::PeerGone {
                    task: format!("{} subtask {}", self.uid, self.subtask),
                    reason: format!("source subtask {input} stopped without end of stream"),
                });
            };
            match element {
                Element::Records(items) => {
                    records_in.inc_by(items.len() as u64);
                    for item in items {
                        self.process(&mut run, item)?;
                    }
                }
                Element::Barrier(b) => {
                    run.alignment_started.get_or_insert_with(Instant::now);
                    let aligned = run
                        .aligner
                        .on_barrier(input, b)
                        .map_err(|e| self.failure(e.to_string()))?;
                    if let Some(b) = aligned {
                        self.checkpoint(&mut run, b)?;
                    }
                }
                Element::EndOfStream => {
                    if let Some(b) = run.aligner.on_end_of_stream(input) {
                        self.checkpoint(&mut run, b)?;
                    }
                    if run.aligner.all_finished() {
                        return Ok(());
                    }
                }
            }
        }
    }

    fn failure(&self, reason: String) -> WeirError {
        WeirError::Task {
            task: format!("{} subtask {}", self.uid, self.subtask),
            reason,
        }
    }

    fn process(&mut self, run: &mut Run, item: Item) -> Result<()> {
        // Failure injection for restart tests (`--features failpoints`).
        fail::fail_point!("keyed-update");
        match item {
            Item::Update {
                key_group,
                key,
                value,
            } => {
                let acc = self
                    .state
                    .update(key_group, key.as_bytes(), |a| a.add(value))
                    .map_err(|e| self.named(e))?;
                match self.emit {
                    EmitMode::EveryUpdate => {
                        if run.awaiting.is_some() {
                            self.release_if_committed(run)?;
                        }
                        if run.awaiting.is_none() {
                            // The common path: no allocation per output.
                            self.pipeline.write_output(&key, &acc, &mut self.out_buf);
                            return self.send_result(key.as_bytes());
                        }
                        let value = self.pipeline.output(&key, &acc);
                        self.emit(run, Output::Result { key, value })
                    }
                    EmitMode::OnCheckpoint => {
                        run.changed.insert((key_group, key));
                        if run.changed.len() >= self.max_changed_keys {
                            // Emitted now, in this epoch: the set stays
                            // bounded and the results are the same ones a
                            // barrier would have emitted, only earlier.
                            self.emit_changed(run)?;
                        }
                        Ok(())
                    }
                }
            }
            Item::DeadLetter(dl) => self.emit(run, Output::DeadLetter(dl)),
        }
    }

    /// Produces now, or holds the output back while the previous epoch's
    /// transaction is not yet committed.
    fn emit(&mut self, run: &mut Run, out: Output) -> Result<()> {
        if run.awaiting.is_some() {
            self.release_if_committed(run)?;
        }
        let Some(waiting_for) = run.awaiting else {
            return self.produce(out);
        };
        run.pending.push(out);
        if run.pending.len() >= MAX_PENDING {
            while !self.gate.wait(waiting_for, Duration::from_millis(100)) {
                if self.cancel.is_cancelled() {
                    return Ok(());
                }
            }
            self.release_if_committed(run)?;
        }
        Ok(())
    }

    fn release_if_committed(&mut self, run: &mut Run) -> Result<()> {
        if let Some(n) = run.awaiting {
            if self.gate.released() >= n {
                run.awaiting = None;
                for out in std::mem::take(&mut run.pending) {
                    self.produce(out)?;
                }
            }
        }
        Ok(())
    }

    /// Sends the result in `out_buf` with `key`.
    fn send_result(&self, key: &[u8]) -> Result<()> {
        crate::crash_point!("mid-transaction-produce");
        let sent = self
            .producer
            .send(&self.sink_topic, Some(key), Some(&self.out_buf), None);
        self.sent(sent, key)
    }

    /// Counts a sent result, or applies `on_bad_record` to one the producer
    /// refused for its size (a replay would make it again: restarting
    /// cannot help).
    fn sent(&self, sent: std::result::Result<(), SendError>, key: &[u8]) -> Result<()> {
        match sent {
            Ok(()) => {
                self.records_out.inc();
                Ok(())
            }
            Err(SendError::Cancelled) => Ok(()),
            Err(SendError::Failed(e)) => Err(e),
            Err(SendError::TooLarge { bytes }) => {
                let shown: String = String::from_utf8_lossy(&key[..key.len().min(64)]).into_owned();
                let error = WeirError::OutputTooLarge {
                    topic: self.sink_topic.clone(),
                    key: shown.clone(),
                    bytes,
                };
                match self.on_bad_record {
                    BadRecordPolicy::Fail => Err(error),
                    BadRecordPolicy::Skip => {
                        self.metrics.bad_records.with_label_values(&["skip"]).inc();
                        warn!(uid = %self.uid, subtask = self.subtask, key = %shown, bytes, "skipped an output record over message.max.bytes");
                        Ok(())
                    }
                    BadRecordPolicy::DeadLetter => {
                        self.metrics
                            .bad_records
                            .with_label_values(&["dead-letter"])
                            .inc();
                        warn!(uid = %self.uid, subtask = self.subtask, key = %shown, bytes, "output record over message.max.bytes described in the dead-letter topic");
                        let topic = self
                            .dead_letter_topic
                            .as_deref()
                            .expect("dead-letter policy requires a topic (validated)");
                        let reason = error.to_string();
                        let headers = OwnedHeaders::new()
                            .insert(Header {
                                key: "weir.error",
                                value: Some(reason.as_str()),
                            })
                            .insert(Header {
                                key: "weir.output.topic",
                                value: Some(self.sink_topic.as_str()),
                            });
                        // The description, not the record: it would not fit either.
                        match self
                            .producer
                            .send(topic, Some(shown.as_bytes()), None, Some(headers))
                        {
                            Ok(()) | Err(SendError::Cancelled) => Ok(()),
                            Err(SendError::Failed(e)) => Err(e),
                            Err(SendError::TooLarge { .. }) => Err(error),
                        }
                    }
                }
            }
        }
    }

    /// Fills in the operator of a corrupt-state error.
    fn named(&self, e: WeirError) -> WeirError {
        match e {
            WeirError::CorruptState {
                key_group,
                key,
                location,
                reason,
                ..
            } => WeirError::CorruptState {
                uid: self.uid.clone(),
                key_group,
                key,
                location,
                reason,
            },
            other => other,
        }
    }

    fn produce(&self, out: Output) -> Result<()> {
        crate::crash_point!("mid-transaction-produce");
        match out {
            Output::Result { key, value } => {
                let sent =
                    self.producer
                        .send(&self.sink_topic, Some(key.as_bytes()), Some(&value), None);
                self.sent(sent, key.as_bytes())?;
            }
            Output::DeadLetter(dl) => {
                let topic = self
                    .dead_letter_topic
                    .as_deref()
                    .expect("dead-letter policy requires a topic (validated)");
                let partition = dl.partition.to_string();
                let offset = dl.offset.to_string();
                let headers = OwnedHeaders::new()
                    .insert(Header {
                        key: "weir.error",
                        value: Some(dl.error.as_str()),
                    })
                    .insert(Header {
                        key: "weir.source.topic",
                        value: Some(dl.topic.as_str()),
                    })
                    .insert(Header {
                        key: "weir.source.partition",
                        value: Some(partition.as_str()),
                    })
                    .insert(Header {
                        key: "weir.source.offset",
                        value: Some(offset.as_str()),
                    });
                match self.producer.send(
                    topic,
                    dl.key.as_deref(),
                    dl.value.as_deref(),
                    Some(headers),
                ) {
                    Ok(()) | Err(SendError::Cancelled) => {}
                    Err(SendError::Failed(e)) => return Err(e),
                    Err(SendError::TooLarge { bytes }) => {
                        return Err(WeirError::OutputTooLarge {
                            topic: topic.to_string(),
                            key: format!(
                                "dead letter of {}/{}@{}",
                                dl.topic, dl.partition, dl.offset
                            ),
                            bytes,
                        })
                    }
                }
            }
        }
        Ok(())
    }

    /// Emits the current result of every key changed since the last
    /// emission (emit = on-checkpoint), in key order.
    fn emit_changed(&mut self, run: &mut Run) -> Result<()> {
        let mut changed: Vec<(u32, String)> = run.changed.drain().collect();
        changed.sort_unstable();
        for (kg, key) in changed {
            let acc = self
                .state
                .get(&state_key(kg, key.as_bytes()))
                .map_err(|e| self.named(e))?
                .ok_or_else(|| {
                    self.failure(format!(
                        "changed key {key:?} in key group {kg} has no state"
                    ))
                })?;
            let value = self.pipeline.output(&key, &acc);
            self.emit(run, Output::Result { key, value })?;
        }
        Ok(())
    }

    /// Barrier N has arrived on every input: everything of epoch N goes to
    /// the producer, state is snapshotted, the Coordinator gets the ack.
    fn checkpoint(&mut self, run: &mut Run, barrier: Barrier) -> Result<()> {
        let alignment = run
            .alignment_started
            .take()
            .map_or(Duration::ZERO, |t| t.elapsed());
        self.metrics
            .checkpoint_alignment
            .observe(alignment.as_secs_f64());
        let started = Instant::now();
        let id = barrier.checkpoint_id;
        if self.gate.cancelled() >= id {
            // The Coordinator gave up on this checkpoint while it aligned;
            // its folder is gone and must stay gone.
            debug!(uid = %self.uid, subtask = self.subtask, checkpoint_id = id, "cancelled checkpoint not snapshotted");
            return Ok(());
        }
        // The previous checkpoint completed before this one was triggered,
        // so its release is at most a moment away; output held back for it
        // belongs to epoch N and must be in the producer before the ack.
        if let Some(prev) = run.awaiting {
            while !self.gate.wait(prev, Duration::from_millis(100)) {
                if self.cancel.is_cancelled() {
                    return Ok(());
                }
            }
            self.release_if_committed(run)?;
        }
        if self.emit == EmitMode::OnCheckpoint {
            self.emit_changed(run)?;
        }
        let rel = CheckpointStore::state_path(&self.uid, self.subtask);
        // A snapshot that cannot be written (disk full, permissions) fails
        // this checkpoint, not the job: the Coordinator counts it against
        // `checkpoint.tolerable_failures`. The folder is never created here:
        // if the Coordinator removed it (a cancelled checkpoint), the
        // snapshot is declined instead.
        let handle = match self
            .store
            .snapshot_target(id, &self.uid, self.subtask)
            .and_then(|target| self.state.snapshot(&target))
        {
            Ok(snapshot) => Ok(StateHandle {
                uid: self.uid.clone(),
                subtask: self.subtask,
                key_groups: self.key_groups,
                path: rel,
                size_bytes: snapshot.size_bytes,
                files: snapshot.files,
            }),
            Err(e) => {
                warn!(uid = %self.uid, subtask = self.subtask, checkpoint_id = id, error = %e.report(), "snapshot failed");
                Err(e.report().to_string())
            }
        };
        crate::crash_point!("after-keyed-snapshot-before-ack");
        if !self.producer.is_transactional() {
            // At-least-once: everything before the checkpoint is in Kafka.
            self.producer.flush()?;
        } else {
            self.producer.check()?;
            run.awaiting = Some(id);
        }
        let sync = started.elapsed();
        self.metrics.checkpoint_sync.observe(sync.as_secs_f64());
        debug!(
            uid = %self.uid,
            subtask = self.subtask,
            checkpoint_id = id,
            alignment_ms = alignment.as_millis() as u64,
            sync_ms = sync.as_millis() as u64,
            "keyed snapshot"
        );
        let _ = self.acks.send(Ack::Keyed {
            subtask: self.subtask,
            checkpoint_id: id,
            handle,
            alignment_ms: alignment.as_millis() as u64,
            sync_ms: sync.as_millis() as u64,
        });
        Ok(())
    }
}
