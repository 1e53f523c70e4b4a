//! The task runner of a keyed subtask: it owns the inputs (one channel per
//! source subtask), barrier alignment and its cancellation, the watermark
//! valve, the chained output, and the snapshot protocol; the operator it
//! runs only sees updates, watermarks and checkpoints
//! (docs/architecture.md, docs/checkpoint-protocol.md).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Select, Sender};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::alignment::BarrierAligner;
use super::operator::Operator;
use super::output::Output;
use super::query::{QueryFailure, StateQuery};
use super::{Ack, Item};
use crate::checkpoint::{CheckpointStore, StateHandle};
use crate::config::CheckpointMode;
use crate::element::{Barrier, Element};
use crate::error::{Result, WeirError};
use crate::observe::metrics::Metrics;
use crate::time::valve::{ValveOutput, WatermarkValve};

pub struct KeyedTask<O> {
    pub subtask: u32,
    pub uid: String,
    pub key_groups: (u32, u32),
    pub mode: CheckpointMode,
    pub operator: O,
    pub output: Output,
    pub inputs: Vec<Receiver<Element<Item>>>,
    pub acks: Sender<Ack>,
    pub store: CheckpointStore,
    pub metrics: Arc<Metrics>,
    pub cancel: CancellationToken,
    /// Interactive queries for keys this subtask owns.
    pub queries: Receiver<StateQuery>,
}

struct Run {
    aligner: BarrierAligner,
    valve: WatermarkValve,
    /// When the first barrier of the checkpoint being aligned arrived.
    alignment_started: Option<Instant>,
}

impl<O: Operator> KeyedTask<O> {
    pub fn run(mut self) -> Result<()> {
        let mut run = Run {
            aligner: BarrierAligner::new(self.inputs.len(), self.mode),
            valve: WatermarkValve::new(self.inputs.len()),
            alignment_started: None,
        };
        let records_in = self
            .metrics
            .records_in
            .with_label_values(&[self.uid.as_str()]);
        // Created with the first watermark: a job without event time has
        // no watermark series (a 0 would read as 1970).
        let mut watermark_gauge = None;
        let inputs = std::mem::take(&mut self.inputs);
        // Answered between two batches (at the top of each turn), and an
        // idle subtask wakes up for one.
        let mut queries = std::mem::replace(&mut self.queries, crossbeam_channel::never());
        loop {
            if self.cancel.is_cancelled() {
                return Ok(());
            }
            self.output.release_if_committed()?;
            while let Ok(q) = queries.try_recv() {
                self.answer(q);
            }
            if let Some(pending) = run.aligner.pending() {
                let cancelled = self.output.gate.cancelled();
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
            // An idle subtask wakes up for a query too.
            let query_op = select.recv(&queries);
            let Ok(op) = select.select_timeout(Duration::from_millis(50)) else {
                continue;
            };
            if op.index() == query_op {
                match op.recv(&queries) {
                    Ok(q) => self.answer(q),
                    // The endpoint forgot this attempt's routes.
                    Err(_) => queries = crossbeam_channel::never(),
                }
                continue;
            }
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
                        // Failure injection for restart tests (`--features failpoints`).
                        fail::fail_point!("keyed-update");
                        match item {
                            Item::Update(u) => self
                                .operator
                                .on_update(u, &mut self.output)
                                .map_err(|e| self.operator.name_error(e))?,
                            Item::DeadLetter(dl) => self.output.dead_letter(dl)?,
                        }
                    }
                    self.output.flush_batch()?;
                }
                Element::Watermark(w) => {
                    if let Some(w) = run.valve.on_watermark(input, w) {
                        self.advance(w, &mut watermark_gauge)?;
                    }
                }
                Element::Idle(idle) => {
                    for out in run.valve.on_idle(input, idle) {
                        if let ValveOutput::Watermark(w) = out {
                            self.advance(w, &mut watermark_gauge)?;
                        }
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
                    // An input ends only when the job stops after its final
                    // checkpoint: nothing may fire after that snapshot (it
                    // would be output outside any checkpointed epoch).
                    let _ = run.valve.on_end(input);
                    if run.aligner.all_finished() {
                        return Ok(());
                    }
                }
            }
        }
    }

    fn answer(&mut self, q: StateQuery) {
        let answer = self
            .operator
            .query(q.key_group, &q.key)
            .map_err(|e| QueryFailure::Failed(self.operator.name_error(e).report().to_string()));
        // The asker may have timed out; nothing to do then.
        let _ = q.reply.send(answer);
    }

    /// The subtask's watermark advanced: the operator fires what is due.
    fn advance(&mut self, watermark: i64, gauge: &mut Option<prometheus::IntGauge>) -> Result<()> {
        gauge
            .get_or_insert_with(|| {
                self.metrics
                    .watermark
                    .with_label_values(&[self.uid.as_str(), &self.subtask.to_string()])
            })
            .set(watermark);
        self.operator
            .on_watermark(watermark, &mut self.output)
            .map_err(|e| self.operator.name_error(e))
    }

    fn failure(&self, reason: String) -> WeirError {
        WeirError::Task {
            task: format!("{} subtask {}", self.uid, self.subtask),
            reason,
        }
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
        if self.output.gate.cancelled() >= id {
            // The Coordinator gave up on this checkpoint while it aligned;
            // its folder is gone and must stay gone.
            debug!(uid = %self.uid, subtask = self.subtask, checkpoint_id = id, "cancelled checkpoint not snapshotted");
            return Ok(());
        }
        if !self.output.drain_before_snapshot()? {
            return Ok(()); // cancelled
        }
        self.operator
            .before_snapshot(&mut self.output)
            .map_err(|e| self.operator.name_error(e))?;
        let rel = CheckpointStore::state_path(&self.uid, self.subtask);
        // A snapshot that cannot be written (disk full, permissions) fails
        // this checkpoint, not the job: the Coordinator counts it against
        // `checkpoint.tolerable_failures`. The folder is never created here:
        // if the Coordinator removed it (a cancelled checkpoint), the
        // snapshot is declined instead.
        let handle = match self
            .store
            .snapshot_target(id, &self.uid, self.subtask)
            .and_then(|target| self.operator.snapshot(&target))
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
        self.output.after_snapshot(id)?;
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
