//! The task core both runners drive, as Kafka Streams' `StreamTask` is
//! the one task its threads drive: a task's chain (its operators, their
//! stores and timers, its sinks), the watermark over its named inputs
//! ([`marks`]), the rows read and not yet pushed, and its key groups. It
//! takes what each input delivers as one [`InputEvent`], whichever
//! exchange carried it, and offers what a task does whatever schedules
//! it: [`TaskCore::process`],
//! [`TaskCore::advance_watermark`] (and idleness, and an input's end),
//! [`TaskCore::snapshot`] into a [`TaskSnapshot`], and restore
//! ([`TaskCore::new`] over restored stores and marks, [`restore_store`]).
//!
//! The runners differ only in what is theirs:
//! - **scheduling**: a thread per task in single mode
//!   (`engine::single::stage_task`), tasks on the instance's poll thread
//!   in group mode (`engine::group`);
//! - **the exchange**: channels of elements, or repartition topics whose
//!   records the instance decodes (`engine::group::wire`);
//! - **the trigger** and what points at a snapshot: a barrier and
//!   `_metadata` (`TaskSnapshot::handles`), or an epoch and a task manifest
//!   (`TaskSnapshot::files`).

pub mod marks;

use std::path::{Path, PathBuf};

use self::marks::WriterMarks;
use super::chain::Chain;
pub use super::chain::TaskSnapshot;
use crate::checkpoint::StateHandle;
use crate::dataflow::tables::{KeyedStore, TableSpec};
use crate::dataflow::Record;
use crate::error::Result;
use crate::runtime::BATCH;
use crate::time::MIN_WATERMARK;

/// What a task reads from one of its inputs, whichever exchange carried
/// it: single mode's channel elements (a local input: `Element`, less the
/// barriers, which are the runner's trigger) and group mode's repartition
/// records (a remote input: rows and marks decoded by
/// `engine::group::wire`) both reach the core as these, by
/// [`TaskCore::on_input`].
#[derive(Debug)]
pub enum InputEvent {
    /// Rows for the head's input `port`, read together.
    Rows { port: usize, records: Vec<Record> },
    /// One row for input `port`, batched with the next.
    Row { port: usize, record: Record },
    /// The input's watermark.
    Watermark(i64),
    /// The input went idle, or came back.
    Idle(bool),
    /// The input's watermark and idleness together (a writer's mark).
    Mark { watermark: i64, idle: bool },
    /// The input ended (after the final snapshot): nothing fires for it.
    End,
}

/// One task, whichever runner schedules it.
pub struct TaskCore {
    pub chain: Chain,
    /// The watermark over the task's inputs.
    pub marks: WriterMarks,
    /// The key groups `[start, end)` the task owns.
    pub key_groups: (u32, u32),
    /// Rows read for input `port` and not yet pushed into the chain: they
    /// go in batches, and before anything else (a watermark, a query, a
    /// snapshot) reaches the chain.
    batch: Vec<Record>,
    port: usize,
}

impl TaskCore {
    /// A task over `chain`, whose stores are restored (or empty), with its
    /// inputs' `marks` (restored in group mode, new in single mode). Each
    /// keyed operator takes up the watermark its key groups had reached
    /// (`Context::load_watermarks`), and a restored watermark reaches the
    /// operators before any row: they judge lateness by it (downstream
    /// already has it).
    pub fn new(mut chain: Chain, marks: WriterMarks, key_groups: (u32, u32)) -> Result<Self> {
        chain.load_watermarks(key_groups)?;
        if marks.current() > MIN_WATERMARK {
            chain.advance_watermark(marks.current())?;
        }
        Ok(Self {
            chain,
            marks,
            key_groups,
            batch: Vec::with_capacity(BATCH),
            port: 0,
        })
    }

    /// What input `input` delivered: rows into the chain, marks through
    /// the valve (which may advance the watermark and fire timers).
    pub fn on_input(&mut self, input: &str, event: InputEvent) -> Result<()> {
        match event {
            InputEvent::Rows { port, records } => self.process_batch(port, records),
            InputEvent::Row { port, record } => self.process(port, record),
            InputEvent::Watermark(w) => self.advance_watermark(input, w),
            InputEvent::Idle(idle) => self.set_idle(input, idle),
            InputEvent::Mark { watermark, idle } => self.on_mark(input, watermark, idle),
            InputEvent::End => {
                self.end_input(input);
                Ok(())
            }
        }
    }

    /// One row read for input `port` of the chain's head, pushed with the
    /// others of its batch.
    pub fn process(&mut self, port: usize, record: Record) -> Result<()> {
        if self.port != port {
            self.push_batch()?;
            self.port = port;
        }
        self.batch.push(record);
        if self.batch.len() >= BATCH {
            self.push_batch()?;
        }
        Ok(())
    }

    /// Rows read together for input `port` (a channel's batch), pushed at
    /// once, after any rows still waiting.
    pub fn process_batch(&mut self, port: usize, records: Vec<Record>) -> Result<()> {
        self.push_batch()?;
        self.chain.push(0, port, records)
    }

    /// The rows waiting, into the chain.
    pub fn push_batch(&mut self) -> Result<()> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let batch = std::mem::replace(&mut self.batch, Vec::with_capacity(BATCH));
        self.chain.push(0, self.port, batch)
    }

    /// Input `input` reached `watermark`: through the valve, the task's
    /// watermark may advance, firing timers.
    pub fn advance_watermark(&mut self, input: &str, watermark: i64) -> Result<()> {
        self.push_batch()?;
        let out = self.marks.on_watermark(input, watermark);
        self.chain.apply_valve(out)
    }

    /// Input `input` went idle or came back.
    pub fn set_idle(&mut self, input: &str, idle: bool) -> Result<()> {
        self.push_batch()?;
        let out = self.marks.on_idle(input, idle);
        self.chain.apply_valve(out)
    }

    /// Input `input`'s watermark and idleness together (a writer's mark on
    /// a repartition topic).
    pub fn on_mark(&mut self, input: &str, watermark: i64, idle: bool) -> Result<()> {
        self.push_batch()?;
        let out = self.marks.on_mark(input, watermark, idle);
        self.chain.apply_valve(out)
    }

    /// Input `input` ended (after the final snapshot): it holds nothing
    /// back any more, and nothing fires for it.
    pub fn end_input(&mut self, input: &str) {
        let _ = self.marks.on_end(input);
    }

    /// The task's state as one snapshot, each keyed node's into
    /// `folder(uid)` (after the rows still waiting).
    pub fn snapshot(&mut self, folder: impl Fn(&str) -> Result<PathBuf>) -> Result<TaskSnapshot> {
        self.push_batch()?;
        self.chain.snapshot_state(self.key_groups, folder)
    }
}

/// One keyed node's store at `path`, for key groups `range`: restored
/// from its snapshots in checkpoint folder `from` (any parallelism: the
/// snapshots' key groups are re-split), or empty. The restore both
/// runners do, from `_metadata`'s handles or a manifest's.
pub fn restore_store(
    uid: &str,
    tables: Vec<TableSpec>,
    path: &Path,
    from: Option<(&Path, &[&StateHandle])>,
    range: (u32, u32),
    cache: usize,
) -> Result<KeyedStore> {
    match from {
        Some((folder, handles)) => {
            KeyedStore::restore(uid, tables, path, folder, handles, range, cache)
        }
        None => KeyedStore::open_empty(uid, tables, path, cache),
    }
}
