//! The operators of one task, chained: rows an operator emits go straight
//! to the next operator of its stage, to a sink, or into an exchange to
//! another stage's tasks. Both task kinds (sources and stage tasks) run
//! their nodes through a chain, so watermarks, timers and the snapshot
//! sequence are written once.

use std::path::PathBuf;
use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender};
use tokio_util::sync::CancellationToken;

use super::group::exchange::RepartitionOut;
use super::sink::SinkWriter;
use crate::checkpoint::{CheckpointStore, SnapshotFile, StateHandle};
use crate::dataflow::codec::encode_key;
use crate::dataflow::operator::Queried;
use crate::dataflow::{Collector, Context, Operator, Record, RecordKey};
use crate::element::{Barrier, Element};
use crate::error::{Result, WeirError};
use crate::observe::metrics::Metrics;
use crate::runtime::output::Output;
use crate::runtime::query::{KeyState, QueryFailure, StateQuery, WindowState};
use crate::runtime::{DeadLetter, BATCH};
use crate::state::key_groups::{key_group, subtask_for_key_group};
use crate::state::Snapshot;
use crate::time::valve::ValveOutput;

/// One task's state as a snapshot, whichever runner took it
/// ([`Chain::snapshot_state`]): each keyed node's RocksDB files, for the
/// task's key groups. Both checkpoint formats point at this one layout:
/// single mode's `_metadata` as a [`StateHandle`] per node, group mode's
/// task manifest as the files named `<uid>/<file>` (and
/// `engine::group::committed` turns a manifest back into handles).
#[derive(Debug)]
pub struct TaskSnapshot {
    pub key_groups: (u32, u32),
    /// Each keyed node's uid and its snapshot's files.
    pub nodes: Vec<(String, Snapshot)>,
}

/// A task's snapshots while their asynchronous parts run
/// (`crate::state::snapshot_job`): a receiver per keyed node.
pub struct PendingSnapshot {
    key_groups: (u32, u32),
    nodes: Vec<(String, Receiver<Result<Snapshot>>)>,
}

impl PendingSnapshot {
    /// No keyed node: nothing to wait for.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Waits for every node's snapshot; the first that could not be taken
    /// is the error.
    pub fn wait(self) -> Result<TaskSnapshot> {
        let mut nodes = Vec::with_capacity(self.nodes.len());
        for (uid, snapshot) in self.nodes {
            let snapshot = snapshot.recv().map_err(|_| WeirError::Snapshot {
                target: PathBuf::from(&uid),
                message: "the snapshot's thread stopped before it was taken".into(),
            })??;
            nodes.push((uid, snapshot));
        }
        Ok(TaskSnapshot {
            key_groups: self.key_groups,
            nodes,
        })
    }
}

/// A task's snapshots of one checkpoint once its barrier went on (or why
/// they could not be taken), their asynchronous parts maybe still running.
pub struct TakenCheckpoint {
    pub checkpoint_id: u64,
    task: String,
    subtask: u32,
    snapshots: std::result::Result<PendingSnapshot, String>,
}

impl TakenCheckpoint {
    /// Nothing left to write: [`Self::handles`] does not wait.
    pub fn is_ready(&self) -> bool {
        self.snapshots
            .as_ref()
            .map_or(true, PendingSnapshot::is_empty)
    }

    /// What the task's ack carries: the handles of its snapshots, once
    /// written, or why one could not be (logged here).
    pub fn handles(self) -> std::result::Result<Vec<StateHandle>, String> {
        let subtask = self.subtask;
        match self.snapshots?.wait() {
            Ok(snapshot) => {
                Ok(snapshot.handles(subtask, |uid| CheckpointStore::state_path(uid, subtask)))
            }
            Err(e) => {
                tracing::warn!(task = %self.task, checkpoint_id = self.checkpoint_id, error = %e.report(), "snapshot failed");
                Err(format!("subtask {subtask}: {}", e.report()))
            }
        }
    }
}

impl TaskSnapshot {
    /// As single mode's `_metadata` records it: a handle per node, its
    /// folder `path(uid)` relative to the checkpoint folder.
    pub fn handles(self, subtask: u32, path: impl Fn(&str) -> String) -> Vec<StateHandle> {
        self.nodes
            .into_iter()
            .map(|(uid, s)| StateHandle {
                path: path(&uid),
                uid,
                subtask,
                key_groups: self.key_groups,
                size_bytes: s.size_bytes,
                files: s.files,
            })
            .collect()
    }

    /// As group mode's manifest lists them: every file, named
    /// `<uid>/<file>` below the task's snapshot folder.
    pub fn files(self) -> Vec<SnapshotFile> {
        self.nodes
            .into_iter()
            .flat_map(|(uid, s)| {
                s.files.into_iter().map(move |f| SnapshotFile {
                    name: format!("{uid}/{}", f.name),
                    ..f
                })
            })
            .collect()
    }
}

/// Rows an operator's output holds past a full batch: what one more input
/// record may emit (a line's words) before the batch goes on.
const OVERFLOW: usize = 64;

/// A window operator's answer as queries show it.
fn windows(list: Vec<(i64, i64, serde_json::Value)>) -> Vec<WindowState> {
    list.into_iter()
        .map(|(start, end, value)| WindowState {
            start_ms: start,
            end_ms: end,
            start: crate::dataflow::json::format_timestamp(start),
            end: crate::dataflow::json::format_timestamp(end),
            value,
        })
        .collect()
}

/// Where a node's output goes.
#[derive(Debug, Clone, Copy)]
pub enum Target {
    /// Another node of this task, on its input `port`.
    Slot { slot: usize, port: usize },
    /// An exchange to the tasks of another stage.
    Exchange(usize),
}

pub enum SlotBody {
    Operator {
        op: Box<dyn Operator>,
        ctx: Box<Context>,
        keyed: bool,
        /// The dead-letter output for late records, if the node has one.
        late: Option<Box<Output>>,
    },
    Sink(Box<SinkWriter>),
    /// A source node: the rows its task read go on as they are.
    Forward,
}

impl SlotBody {
    /// The Kafka output of this slot, if it writes any: a sink's, or an
    /// operator's late records.
    fn output(&mut self) -> Option<&mut Output> {
        match self {
            SlotBody::Sink(sink) => Some(&mut sink.output),
            SlotBody::Operator { late, .. } => late.as_deref_mut(),
            SlotBody::Forward => None,
        }
    }
}

pub struct Slot {
    pub uid: String,
    pub body: SlotBody,
    pub targets: Vec<Target>,
}

/// One outgoing edge of a task: a channel per downstream subtask (hash),
/// or the one to its peer subtask (forward) in single mode; a repartition
/// topic in group mode.
pub struct ExchangeOut {
    pub route: Route,
    /// Key columns of a hash edge.
    pub key: Option<Vec<usize>>,
    pub buffers: Vec<Vec<Record>>,
}

pub enum Route {
    Channels(Vec<Sender<Element<Record>>>),
    Repartition(Box<RepartitionOut>),
}

impl ExchangeOut {
    pub fn new(senders: Vec<Sender<Element<Record>>>, key: Option<Vec<usize>>) -> Self {
        Self::with_route(senders.len(), Route::Channels(senders), key)
    }

    pub fn repartition(out: RepartitionOut, key: Vec<usize>) -> Self {
        Self::with_route(out.tasks, Route::Repartition(Box::new(out)), Some(key))
    }

    fn with_route(targets: usize, route: Route, key: Option<Vec<usize>>) -> Self {
        let buffers = (0..targets).map(|_| Vec::with_capacity(BATCH)).collect();
        Self {
            route,
            key,
            buffers,
        }
    }

    fn targets(&self) -> usize {
        self.buffers.len()
    }
}

pub struct Chain {
    /// E.g. "counts-1": names the task in errors.
    pub task: String,
    pub subtask: u32,
    pub slots: Vec<Slot>,
    pub exchanges: Vec<ExchangeOut>,
    pub max_parallelism: u32,
    pub cancel: CancellationToken,
    pub metrics: Arc<Metrics>,
    /// Reused for routing keys.
    scratch: Vec<u8>,
    /// Per slot, how many records its last input batch emitted: the
    /// capacity its next output starts with, so that a flat-map's output
    /// (ten words per line) is allocated once at its size instead of
    /// growing, and copied, from its input's.
    out_hints: Vec<usize>,
}

impl Chain {
    pub fn new(
        task: String,
        subtask: u32,
        slots: Vec<Slot>,
        exchanges: Vec<ExchangeOut>,
        max_parallelism: u32,
        cancel: CancellationToken,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            out_hints: vec![0; slots.len()],
            task,
            subtask,
            slots,
            exchanges,
            max_parallelism,
            cancel,
            metrics,
            scratch: Vec::with_capacity(64),
        }
    }

    /// Records into node `slot` on input `port`, and everything they cause
    /// downstream within this task.
    pub fn push(&mut self, slot: usize, port: usize, records: Vec<Record>) -> Result<()> {
        match &mut self.slots[slot].body {
            // A source's rows, read by its task: on as they are.
            SlotBody::Forward => return self.route(slot, records),
            SlotBody::Sink(sink) => {
                for r in &records {
                    sink.write(r)?;
                }
                return Ok(());
            }
            SlotBody::Operator { .. } => {}
        }
        // What the operator emits goes on in batches of at most `BATCH`
        // rows: a flat-map's output of a whole input batch (ten words per
        // line, say) would otherwise be one buffer far larger than a batch,
        // allocated and freed as a whole each time.
        let mut records = records.into_iter();
        loop {
            let (out, more) = {
                let SlotBody::Operator { op, ctx, keyed, .. } = &mut self.slots[slot].body else {
                    unreachable!("matched above");
                };
                // Room for a full batch and the last record's rows past it
                // (a line's words), so that the batch is not copied whole
                // into a doubled buffer for its last few rows.
                let hint = self.out_hints[slot];
                let cap = records.len().max(hint);
                let cap = if cap >= BATCH { BATCH + OVERFLOW } else { cap };
                let mut out = Collector::with_capacity(cap);
                crate::dataflow::operator::set_task_watermark(ctx.live_watermark());
                for r in records.by_ref() {
                    if *keyed {
                        // Failure injection for restart tests, once per
                        // keyed record (`--features failpoints`).
                        fail::fail_point!("keyed-update");
                        if r.key.is_empty() {
                            ctx.set_key_from_row(port, &r.row, r.key_group);
                        } else {
                            ctx.set_key(r.key_group, &r.key);
                        }
                    }
                    op.on_record(port, r, ctx, &mut out)?;
                    if out.out.len() >= BATCH {
                        break;
                    }
                }
                self.out_hints[slot] = out.out.len();
                (out.take_records(), records.len() > 0)
            };
            self.late_records(slot)?;
            self.count_windows_and_expired(slot);
            self.route(slot, out)?;
            if !more {
                return Ok(());
            }
        }
    }

    /// Sends the late records node `slot` set aside to its dead-letter
    /// topic (or counts them as dropped without one).
    fn late_records(&mut self, slot: usize) -> Result<()> {
        let SlotBody::Operator { ctx, late, .. } = &mut self.slots[slot].body else {
            return Ok(());
        };
        let mut dropped = ctx.take_late();
        let records = ctx.take_late_records();
        match late {
            Some(output) if !records.is_empty() => {
                let late = records.iter().filter(|r| !r.failed).count();
                self.metrics
                    .late_records
                    .with_label_values(&["dead-letter"])
                    .inc_by(late as u64);
                for r in records {
                    // With its origin, the dead letter names its Kafka
                    // record as a bad record's does.
                    let (key, topic, partition, offset) = match r.origin {
                        Some(o) => (o.key, o.topic, o.partition, o.offset),
                        None => (None, String::new(), 0, 0),
                    };
                    output.dead_letter(Box::new(DeadLetter {
                        key,
                        value: Some(r.value),
                        error: r.error,
                        topic,
                        partition,
                        offset,
                        headers: r.headers,
                    }))?;
                }
            }
            _ => dropped += records.iter().filter(|r| !r.failed).count() as u64,
        }
        if dropped > 0 {
            self.metrics
                .late_records
                .with_label_values(&["drop"])
                .inc_by(dropped);
        }
        Ok(())
    }

    fn route(&mut self, slot: usize, emitted: Vec<Record>) -> Result<()> {
        if emitted.is_empty() {
            return Ok(());
        }
        let n = self.slots[slot].targets.len();
        let mut emitted = Some(emitted);
        for i in 0..n {
            let target = self.slots[slot].targets[i];
            let records = if i + 1 == n {
                emitted.take().expect("taken once, at the last target")
            } else {
                emitted.clone().expect("present until the last target")
            };
            match target {
                Target::Slot { slot, port } => self.push(slot, port, records)?,
                Target::Exchange(x) => self.exchange(x, records)?,
            }
        }
        Ok(())
    }

    fn exchange(&mut self, x: usize, records: Vec<Record>) -> Result<()> {
        let parallelism = self.exchanges[x].targets() as u32;
        for mut r in records {
            let target = match &self.exchanges[x].key {
                None => 0,
                Some(columns) => {
                    self.scratch.clear();
                    encode_key(&r.row, columns, &mut self.scratch);
                    r.key_group = key_group(&self.scratch, self.max_parallelism);
                    // The keyed task reads its key from the record instead
                    // of encoding it from the row again (a short key is
                    // inline: a copy, no allocation); a repartition record
                    // carries it as its Kafka key.
                    r.key = RecordKey::from_slice(&self.scratch);
                    subtask_for_key_group(r.key_group, parallelism, self.max_parallelism) as usize
                }
            };
            let ex = &mut self.exchanges[x];
            ex.buffers[target].push(r);
            if ex.buffers[target].len() >= BATCH {
                let batch = std::mem::replace(&mut ex.buffers[target], Vec::with_capacity(BATCH));
                self.send(x, target, Element::Records(batch))?;
            }
        }
        Ok(())
    }

    /// Sends what the exchanges gathered, and the sinks' batches.
    pub fn flush(&mut self) -> Result<()> {
        for x in 0..self.exchanges.len() {
            for t in 0..self.exchanges[x].buffers.len() {
                if !self.exchanges[x].buffers[t].is_empty() {
                    let batch = std::mem::replace(
                        &mut self.exchanges[x].buffers[t],
                        Vec::with_capacity(BATCH),
                    );
                    self.send(x, t, Element::Records(batch))?;
                }
            }
        }
        for s in &mut self.slots {
            if let Some(output) = s.body.output() {
                output.flush_batch()?;
            }
        }
        Ok(())
    }

    /// Sends `element` to every downstream channel, after what was gathered.
    pub fn broadcast(&mut self, element: Element<Record>) -> Result<()> {
        self.flush()?;
        for x in 0..self.exchanges.len() {
            for t in 0..self.exchanges[x].targets() {
                self.send(x, t, element.clone())?;
            }
        }
        Ok(())
    }

    /// Sends on a bounded channel, blocking (backpressure) but watching
    /// for cancellation; or writes to the repartition topic.
    fn send(&mut self, x: usize, target: usize, element: Element<Record>) -> Result<()> {
        match &mut self.exchanges[x].route {
            Route::Channels(senders) => {
                crate::runtime::send_bounded(&senders[target], element, &self.cancel).map_err(
                    |_| WeirError::PeerGone {
                        task: self.task.clone(),
                        reason: format!(
                            "a downstream task (exchange {x}, subtask {target}) stopped reading"
                        ),
                    },
                )
            }
            Route::Repartition(out) => out.send(target, element),
        }
    }

    /// Answers an interactive query for node `slot` (a keyed operator of
    /// this task) from its state as it is now; `task` names a group-mode
    /// task in the answer.
    pub fn answer(&mut self, slot: usize, q: StateQuery, task: Option<u32>) {
        let answer = match &mut self.slots[slot].body {
            SlotBody::Operator { op, ctx, .. } => {
                ctx.set_key(q.key_group, &q.encoded);
                let answer = op.query(ctx).and_then(|shown| match shown {
                    Queried::Value(value) => Ok((value, None)),
                    Queried::Windows(list) => Ok((None, Some(windows(list)))),
                    Queried::Tables => match ctx.key_and_store() {
                        Some((kg, key, store)) => {
                            crate::dataflow::inspect::key_tables(store, kg, key).map(|v| (v, None))
                        }
                        None => Ok((None, None)),
                    },
                });
                answer
                    .map(|(value, windows)| KeyState {
                        value,
                        windows,
                        task,
                    })
                    .map_err(|e| QueryFailure::Failed(e.report().to_string()))
            }
            SlotBody::Sink(_) | SlotBody::Forward => Err(QueryFailure::Failed(format!(
                "{} is a source or a sink; it holds no state",
                self.slots[slot].uid
            ))),
        };
        let _ = q.reply.send(answer);
    }

    /// Group mode: `writer`'s watermark to every partition of every
    /// repartition topic this chain writes.
    pub fn send_mark(&mut self, writer: &str, watermark: i64, idle: bool) -> Result<()> {
        self.flush()?;
        for ex in &mut self.exchanges {
            if let Route::Repartition(out) = &mut ex.route {
                out.mark(writer, watermark, idle)?;
            }
        }
        Ok(())
    }

    /// After a restore: each keyed operator reads the watermarks its key
    /// groups in `range` had reached ([`Context::load_watermarks`]).
    pub fn load_watermarks(&mut self, range: (u32, u32)) -> Result<()> {
        for slot in 0..self.slots.len() {
            let s = &mut self.slots[slot];
            if let SlotBody::Operator {
                op,
                ctx,
                keyed: true,
                ..
            } = &mut s.body
            {
                ctx.load_watermarks(range)?;
                // Counted again from what this attempt restored.
                self.metrics
                    .open_windows
                    .with_label_values(&[s.uid.as_str(), &self.subtask.to_string()])
                    .set(0);
                op.on_restore(ctx)?;
            }
            self.count_windows_and_expired(slot);
        }
        Ok(())
    }

    /// The task's watermark advanced to `watermark`: `weir_watermark_ms`
    /// (labelled with the chain's head, in group mode with the task as
    /// subtask) and then every operator of the chain.
    pub fn advance_watermark(&mut self, watermark: i64) -> Result<()> {
        self.metrics
            .watermark
            .with_label_values(&[self.slots[0].uid.as_str(), &self.subtask.to_string()])
            .set(watermark);
        self.on_watermark(watermark)
    }

    /// What the task's watermark valve output, applied in order: a new
    /// watermark advances the chain, a change of idleness goes downstream.
    /// Both runners' tasks take their valve's output here.
    pub fn apply_valve(&mut self, outputs: Vec<ValveOutput>) -> Result<()> {
        for out in outputs {
            match out {
                ValveOutput::Watermark(w) => self.advance_watermark(w)?,
                ValveOutput::Idle => self.broadcast(Element::Idle(true))?,
                ValveOutput::Active => self.broadcast(Element::Idle(false))?,
            }
        }
        Ok(())
    }

    /// The task moved to another instance, which reports it from now on:
    /// its watermark and open-window gauges go from this one's metrics.
    pub fn forget_gauges(&self) {
        let subtask = self.subtask.to_string();
        let _ = self
            .metrics
            .watermark
            .remove_label_values(&[self.slots[0].uid.as_str(), &subtask]);
        for s in &self.slots {
            if matches!(s.body, SlotBody::Operator { keyed: true, .. }) {
                let _ = self
                    .metrics
                    .open_windows
                    .remove_label_values(&[s.uid.as_str(), &subtask]);
            }
        }
    }

    /// Moves `weir_open_windows` by what node `slot` opened and closed,
    /// and counts the rows its state expired (`weir_state_expired_total`).
    fn count_windows_and_expired(&mut self, slot: usize) {
        let s = &mut self.slots[slot];
        if let SlotBody::Operator { ctx, .. } = &mut s.body {
            let n = ctx.take_open_windows();
            if n != 0 {
                self.metrics
                    .open_windows
                    .with_label_values(&[s.uid.as_str(), &self.subtask.to_string()])
                    .add(n);
            }
            let expired = ctx.take_expired();
            if expired != 0 {
                self.metrics
                    .state_expired
                    .with_label_values(&[s.uid.as_str()])
                    .inc_by(expired);
            }
        }
    }

    /// The task's state as one snapshot, the one way both runners take
    /// it: each keyed operator saves the watermark its key groups reached
    /// ([`Context::save_watermarks`]), then its store snapshots into
    /// `folder(uid)`, on this thread. The caller chooses the folders and
    /// points at the result its own way ([`TaskSnapshot`]).
    pub fn snapshot_state(
        &mut self,
        key_groups: (u32, u32),
        folder: impl Fn(&str) -> Result<PathBuf>,
    ) -> Result<TaskSnapshot> {
        let nodes =
            self.each_store_at_barrier(key_groups, folder, |store, target| store.snapshot(target))?;
        Ok(TaskSnapshot { key_groups, nodes })
    }

    /// [`Self::snapshot_state`] with each store's asynchronous part on a
    /// thread of its own (`KeyedStore::begin_snapshot`): this returns once
    /// what changed is copied.
    fn begin_snapshot_state(
        &mut self,
        key_groups: (u32, u32),
        folder: impl Fn(&str) -> Result<PathBuf>,
    ) -> Result<PendingSnapshot> {
        let nodes = self.each_store_at_barrier(key_groups, folder, |store, target| {
            store.begin_snapshot(target)
        })?;
        Ok(PendingSnapshot { key_groups, nodes })
    }

    /// Each keyed operator saves its key groups' watermarks, then `f`
    /// snapshots its store into `folder(uid)`: the results by uid.
    fn each_store_at_barrier<T>(
        &mut self,
        key_groups: (u32, u32),
        folder: impl Fn(&str) -> Result<PathBuf>,
        mut f: impl FnMut(&mut crate::dataflow::tables::KeyedStore, &std::path::Path) -> Result<T>,
    ) -> Result<Vec<(String, T)>> {
        let mut nodes = Vec::new();
        for slot in &mut self.slots {
            let SlotBody::Operator { ctx, keyed, .. } = &mut slot.body else {
                continue;
            };
            if *keyed {
                ctx.save_watermarks(key_groups)?;
            }
            let Some(store) = ctx.store_mut() else {
                continue;
            };
            let target = folder(&slot.uid)?;
            nodes.push((slot.uid.clone(), f(store, &target)?));
        }
        Ok(nodes)
    }

    /// Group mode, at the end of an epoch: operators emit what belongs to
    /// it (`before_snapshot`), and everything gathered is sent.
    pub fn end_epoch(&mut self) -> Result<()> {
        self.before_snapshot()?;
        // Group mode snapshots later, or not at all for an unchanged
        // task: what the operators staged for it goes into the stores now.
        self.stores().try_for_each(|store| store.apply_staged())?;
        self.flush()?;
        self.report_memory();
        Ok(())
    }

    /// Each operator, in order, emits what belongs to the ending epoch.
    fn before_snapshot(&mut self) -> Result<()> {
        for slot in 0..self.slots.len() {
            let mut out = Collector::new();
            match &mut self.slots[slot].body {
                SlotBody::Operator { op, ctx, .. } => op.before_snapshot(ctx, &mut out)?,
                SlotBody::Sink(sink) => sink.end_epoch()?,
                _ => {}
            }
            self.route(slot, out.take_records())?;
        }
        Ok(())
    }

    /// The watermark advanced: each node in order fires its due timers and
    /// sees the watermark (what they emit flows on first), then it goes on
    /// downstream.
    pub fn on_watermark(&mut self, watermark: i64) -> Result<()> {
        for slot in 0..self.slots.len() {
            let mut out = Collector::new();
            if let SlotBody::Operator { op, ctx, .. } = &mut self.slots[slot].body {
                ctx.set_watermark(watermark);
                for (time, payload) in ctx.pop_due_timers(watermark) {
                    let Some(tag) = ctx.enter_timer(&payload) else {
                        return Err(ctx.failure(format!(
                            "a timer's payload of {} bytes does not decode",
                            payload.len()
                        )));
                    };
                    op.on_timer(time, &tag, ctx, &mut out)?;
                }
                op.on_watermark(watermark, ctx, &mut out)?;
            }
            self.count_windows_and_expired(slot);
            self.route(slot, out.take_records())?;
        }
        self.broadcast(Element::Watermark(watermark))
    }

    /// Output held for the previous epoch goes out before this epoch's
    /// snapshot (it belongs to this epoch). False if cancelled meanwhile.
    pub fn drain_sinks(&mut self) -> Result<bool> {
        for s in &mut self.slots {
            if let Some(output) = s.body.output() {
                if !output.drain_before_snapshot()? {
                    return Ok(false);
                }
            }
        }
        Ok(true)
    }

    /// Gives every sink a turn to catch up with its gate.
    pub fn release_sinks(&mut self) -> Result<()> {
        for s in &mut self.slots {
            if let Some(output) = s.body.output() {
                output.poll_gate()?;
            }
        }
        Ok(())
    }

    /// What the operators staged for the snapshot goes into their stores
    /// (`KeyedStore::apply_staged`), and the write-backs held during the
    /// snapshot start if due (`KeyedStore::hold_write_back`), once the
    /// task has handed its ack over (it follows the snapshots' jobs). The
    /// task calls this before it handles its next element.
    pub fn write_back_after_ack(&mut self) -> Result<()> {
        self.stores().try_for_each(|store| {
            store.apply_staged()?;
            store.write_back_if_due()
        })?;
        self.report_memory();
        Ok(())
    }

    /// `weir_memory_bytes` of this task's keyed stores, once per
    /// checkpoint (after the write-back) or group-mode epoch: a few of
    /// RocksDB's property reads; a chain without stores reports nothing.
    fn report_memory(&mut self) {
        let mut total = crate::observe::memory::StoreMemory::default();
        let mut any = false;
        for store in self.stores() {
            total += store.memory();
            any = true;
        }
        if any {
            crate::observe::memory::report_stores(&self.metrics.memory, &self.task, total);
        }
    }

    /// Holds or allows again every keyed store's write-back
    /// (`KeyedStore::hold_write_back`).
    fn hold_write_backs(&mut self, hold: bool) {
        self.stores().for_each(|store| store.hold_write_back(hold));
    }

    /// The keyed stores of this chain's operators.
    fn stores(&mut self) -> impl Iterator<Item = &mut crate::dataflow::tables::KeyedStore> {
        self.slots
            .iter_mut()
            .filter_map(|slot| match &mut slot.body {
                SlotBody::Operator { ctx, .. } => ctx.store_mut(),
                _ => None,
            })
    }

    /// Barrier `b` is aligned (or, at a source, triggered): operators emit
    /// what belongs to the epoch, the barrier goes downstream after it,
    /// each keyed operator copies what changed into its snapshot and
    /// writes the rest on a thread of its own, and the sinks hold later
    /// output until the checkpoint completes. Returns the snapshots, still
    /// being written (one that cannot be taken fails the checkpoint, not
    /// the job), or None if the attempt was cancelled.
    pub fn checkpoint(
        &mut self,
        b: Barrier,
        store: &CheckpointStore,
        key_groups: (u32, u32),
    ) -> Result<Option<TakenCheckpoint>> {
        let started = std::time::Instant::now();
        if !self.drain_sinks()? {
            return Ok(None);
        }
        let drained = started.elapsed();
        self.hold_write_backs(true);
        self.before_snapshot()?;
        self.broadcast(Element::Barrier(b))?;
        let forwarded = started.elapsed();
        let id = b.checkpoint_id;
        let subtask = self.subtask;
        // A snapshot that cannot be written fails this checkpoint: the
        // Coordinator counts it against `checkpoint.tolerable_failures`.
        let taken = self
            .begin_snapshot_state(key_groups, |uid| store.snapshot_target(id, uid, subtask))
            .map_err(|e| {
                tracing::warn!(task = %self.task, checkpoint_id = id, error = %e.report(), "snapshot failed");
                format!("subtask {subtask}: {}", e.report())
            });
        self.hold_write_backs(false);
        let snapshotted = started.elapsed();
        for s in &mut self.slots {
            if let Some(output) = s.body.output() {
                output.after_snapshot(id)?;
            }
        }
        // Where a task's pause goes, for `weir-bench checkpoint-cost`: the
        // wait for the previous checkpoint's release and this epoch's route
        // and the output they let go, the epoch's last output and the
        // barrier sent on, the snapshots, and the sinks' last batch handed
        // to the producer.
        tracing::debug!(
            task = %self.task,
            checkpoint_id = id,
            drain_us = drained.as_micros() as u64,
            forward_us = (forwarded - drained).as_micros() as u64,
            stores_us = (snapshotted - forwarded).as_micros() as u64,
            flush_us = (started.elapsed() - snapshotted).as_micros() as u64,
            "chain checkpoint"
        );
        Ok(Some(TakenCheckpoint {
            checkpoint_id: id,
            task: self.task.clone(),
            subtask,
            snapshots: taken,
        }))
    }
}
