//! Records in: a source partition's records through its source chain, a
//! repartition topic's rows and watermarks into their task, batched. Runs
//! on the instance's thread, one polled record at a time.

use std::time::Instant;

use rdkafka::message::BorrowedMessage;
use rdkafka::Message;
use tracing::warn;

use super::plan::partition_writer;
use crate::dataflow::graph::RecordError;
use crate::dataflow::{Record, RecordKey};
use crate::engine::core::InputEvent;
use crate::error::{Refusal, Result, WeirError};
use crate::runtime::source::bad_record;
use crate::runtime::{DeadLetter, BATCH};

use super::{source_spec, wire, GraphInstance};

impl GraphInstance {
    /// One record from the consumer.
    ///
    /// Runs on the instance's thread: the loop, for each polled record.
    pub(super) fn on_message(&mut self, m: &BorrowedMessage<'_>) -> Result<()> {
        match self.stage_of_topic.get(m.topic()).copied() {
            Some(stage) => self.on_repartition(stage, m),
            None => self.on_input(m),
        }
    }

    /// Runs on the instance's thread: the loop, from `on_message`.
    pub(super) fn on_repartition(&mut self, stage: usize, m: &BorrowedMessage<'_>) -> Result<()> {
        let (topic, partition, offset) = (m.topic(), m.partition(), m.offset());
        let max_p = self.config.job.max_parallelism;
        let Some(task) = self.tasks.get_mut(&(stage, partition as u32)) else {
            // Read before its restore (it is sought back) or after revocation.
            return Ok(());
        };
        if task.next.is_some_and(|next| offset < next) {
            warn!(stage, task = task.id, offset, next = ?task.next, "skipped a repartition record already applied");
            return Ok(());
        }
        let bad = |reason: String| WeirError::BadRecord {
            topic: topic.to_string(),
            partition,
            offset,
            reason,
        };
        let plan = &self.plan.stages[stage];
        let inputs = plan.inputs;
        let check_port = |port: usize| {
            if port >= inputs {
                return Err(bad(format!(
                    "a row for input {port} of {:?}, which has {inputs}",
                    self.graph.nodes[plan.entry.head].uid
                )));
            }
            Ok(())
        };
        let at = (topic, partition, offset);
        let settings = (max_p, self.config.scale.tasks);
        match wire::decode(m.payload().unwrap_or_default()).map_err(bad)? {
            wire::Wire::Rows { port, rows } => {
                check_port(port)?;
                for next in rows {
                    let (key, timestamp, row) = next.map_err(bad)?;
                    task.apply(port, key, timestamp, row, at, settings)?;
                }
            }
            wire::Wire::Row {
                port,
                timestamp,
                row,
            } => {
                check_port(port)?;
                let key = m.key().unwrap_or_default();
                task.apply(port, key, timestamp, row, at, settings)?;
            }
            wire::Wire::Shape { instance, shape } => {
                let ours = (max_p, self.config.scale.tasks);
                if (shape.max_parallelism, shape.tasks) != ours {
                    // Its rows' partitions stand for other key groups than
                    // this task's: none of them may become state.
                    return Err(Refusal::SettingsDiffer {
                        topic: topic.to_string(),
                        partition,
                        offset,
                        instance,
                        their_max_parallelism: shape.max_parallelism,
                        their_tasks: shape.tasks,
                        max_parallelism: max_p,
                        tasks: self.config.scale.tasks,
                    }
                    .into());
                }
            }
            wire::Wire::Watermark {
                writer,
                watermark,
                idle,
            } => {
                task.core
                    .on_input(&writer, InputEvent::Mark { watermark, idle })?;
            }
        }
        task.next = Some(offset + 1);
        task.changed = true;
        self.epoch.dirty = true;
        Ok(())
    }

    /// Runs on the instance's thread: the loop, from `on_message`.
    pub(super) fn on_input(&mut self, m: &BorrowedMessage<'_>) -> Result<()> {
        let (topic, partition, offset) = (m.topic(), m.partition(), m.offset());
        let tp = (topic.to_string(), partition);
        let Some(input) = self.sources.partitions.get_mut(&tp) else {
            return Ok(());
        };
        if input.next.is_some_and(|n| offset < n) {
            warn!(topic, partition, offset, next = ?input.next, "skipped an input record already processed");
            return Ok(());
        }
        input.next = Some(offset + 1);
        self.epoch.dirty = true;
        let source = input.source;
        let head = self.plan.sources[source].head;
        let node = &self.graph.nodes[head];
        let spec = source_spec(&self.graph, head);
        self.sources.records_in[source].inc();
        match crate::engine::decode::decode(
            spec,
            &node.schema,
            &crate::engine::decode::record_of(m),
        ) {
            Ok(None) => Ok(()),
            Ok(Some((row, timestamp))) => {
                if let Some(w) = &mut input.marks {
                    w.on_record(topic, partition, timestamp, self.sources.now_ms);
                }
                let batch = &mut self.sources.batches[source];
                batch.push(Record {
                    row,
                    timestamp,
                    key_group: 0,
                    key: RecordKey::new(),
                });
                if batch.len() >= BATCH {
                    self.push_source(source)?;
                }
                Ok(())
            }
            // Not skipped: the instance fails its epoch and restarts from
            // the last committed one, which reads the record again.
            Err(RecordError::Unavailable(reason)) => Err(WeirError::Operator {
                uid: node.uid.clone(),
                subtask: 0,
                reason: format!("{topic}/{partition}@{offset}: {reason}"),
            }),
            Err(RecordError::Bad(reason)) => {
                match bad_record(
                    spec.on_bad_record,
                    &self.metrics,
                    topic,
                    partition,
                    offset,
                    reason,
                )? {
                    None => Ok(()),
                    Some(error) => self.dead_letters[source].dead_letter(Box::new(DeadLetter {
                        key: m.key().map(<[u8]>::to_vec),
                        value: m.payload().map(<[u8]>::to_vec),
                        error,
                        topic: topic.to_string(),
                        partition,
                        offset,
                        headers: Vec::new(),
                    })),
                }
            }
        }
    }

    /// Polls the input partitions' watermarks; a change makes the epoch
    /// worth committing (an idle partition's news must reach the stages
    /// even when nothing is read).
    ///
    /// Runs on the instance's thread: the loop, every `WATERMARK_INTERVAL`.
    pub(super) fn poll_source_marks(&mut self) {
        let now = crate::runtime::now_ms();
        self.sources.now_ms = now;
        if self.epoch.drain {
            // Paused sources have no news; their marks would keep the
            // drain from ever going quiet (see `send_source_marks`).
            self.sources.last_marks = Instant::now();
            return;
        }
        for input in self.sources.partitions.values_mut() {
            if let Some(w) = &mut input.marks {
                w.poll(now);
                if input.sent != Some((w.current(), w.is_idle())) {
                    self.epoch.dirty = true;
                }
            }
        }
        self.sources.last_marks = Instant::now();
    }

    /// Every input partition's watermark to the stages its source feeds.
    ///
    /// Runs on the instance's thread: the epoch's end (`prepare`).
    pub(super) fn send_source_marks(&mut self) -> Result<()> {
        if self.epoch.drain {
            // Every epoch sends every input's mark, news or not: in a drain
            // (sources paused) each would be read, committed and sent
            // again, forever.
            return Ok(());
        }
        let now = crate::runtime::now_ms();
        for ((topic, partition), input) in self.sources.partitions.iter_mut() {
            let Some(w) = &mut input.marks else {
                continue;
            };
            w.poll(now);
            let state = (w.current(), w.is_idle());
            if state.0 > crate::time::MIN_WATERMARK {
                self.metrics
                    .source_watermark
                    .with_label_values(&[topic.as_str(), &partition.to_string()])
                    .set(state.0);
            }
            self.sources.chains[input.source].send_mark(
                &partition_writer(topic, *partition),
                state.0,
                state.1,
            )?;
            input.sent = Some(state);
        }
        Ok(())
    }

    /// The rows read for `source` into its chain.
    ///
    /// Runs on the instance's thread: the loop, when a source's batch is full
    /// or flushed.
    pub(super) fn push_source(&mut self, source: usize) -> Result<()> {
        let batch = std::mem::replace(&mut self.sources.batches[source], Vec::with_capacity(BATCH));
        if batch.is_empty() {
            return Ok(());
        }
        self.sources.chains[source].push(0, 0, batch)
    }

    /// Every row read into its chain.
    ///
    /// Runs on the instance's thread: the epoch's end, and the loop when it
    /// flushes.
    pub(super) fn push_batches(&mut self) -> Result<()> {
        for source in 0..self.sources.chains.len() {
            self.push_source(source)?;
        }
        for t in self.tasks.values_mut() {
            t.core.push_batch()?;
        }
        Ok(())
    }

    /// Runs on the instance's thread: the loop, when a poll returns nothing.
    pub(super) fn flush(&mut self) -> Result<()> {
        self.push_batches()?;
        for c in &mut self.sources.chains {
            c.flush()?;
        }
        for d in &mut self.dead_letters {
            d.flush_batch()?;
        }
        for t in self.tasks.values_mut() {
            t.core.chain.flush()?;
        }
        Ok(())
    }
}
