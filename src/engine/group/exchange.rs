//! A hash edge in group mode: rows go to the repartition topic partition
//! of their key group's task, in the instance's open transaction, with
//! the writer's watermarks among them.
//!
//! Rows go in runs (`wire::RowsWriter`) closed before they would pass
//! `wire::ROWS_BYTES`. A row over that on its own is a record alone, sent
//! by itself: if the producer refuses it for its size (over
//! `message.max.bytes`: a record carries the key and the whole row, so a
//! 600 KB word makes a record over 1 MB), the edge applies the
//! `on_bad_record` policy of the sources upstream of it, through the same
//! path as a sink's oversized result (`Output::refused_for_size`): skipped
//! with a warning naming its key, described in the dead-letter topic, or
//! the job stops. A replay would make the same row again, so failing over
//! to another instance cannot help.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::wire;
use crate::dataflow::Record;
use crate::element::Element;
use crate::error::{Result, WeirError};
use crate::kafka::producer::{ProduceBatch, SinkProducer};
use crate::runtime::output::Output;

pub struct RepartitionOut {
    pub producer: Arc<SinkProducer>,
    pub topic: String,
    /// The reading stage's input this edge feeds.
    pub port: usize,
    /// Partitions (the reading stage's tasks).
    pub tasks: usize,
    /// Who the watermarks the chain broadcasts are from (a stage's task;
    /// a source chain sends its partitions' marks with `mark`).
    pub writer: String,
    /// The instance and its settings, written to each partition before
    /// anything else in each epoch (`wire::Shape`).
    instance: String,
    shape: wire::Shape,
    /// The instance's epoch (counted by its commits), and per partition
    /// the epoch its shape was last written in, plus one (0: never).
    epoch: Arc<AtomicU64>,
    shaped: Vec<u64>,
    /// The last watermark and idleness sent, for an idleness change.
    last: (i64, bool),
    batch: ProduceBatch,
    buf: Vec<u8>,
    /// The sources' `on_bad_record` for a row too large for a record.
    too_large: Output,
}

impl RepartitionOut {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        producer: Arc<SinkProducer>,
        topic: String,
        port: usize,
        writer: String,
        instance: String,
        shape: wire::Shape,
        epoch: Arc<AtomicU64>,
        too_large: Output,
    ) -> Self {
        let tasks = shape.tasks as usize;
        Self {
            producer,
            topic,
            port,
            tasks,
            writer,
            instance,
            shape,
            epoch,
            shaped: vec![0; tasks],
            last: (crate::time::MIN_WATERMARK, false),
            batch: ProduceBatch::default(),
            buf: Vec::with_capacity(4096),
            too_large,
        }
    }

    /// What the chain sends to partition `target`. Barriers and the end of
    /// the stream have no meaning here: the transaction is the epoch.
    pub fn send(&mut self, target: usize, element: Element<Record>) -> Result<()> {
        match element {
            Element::Records(records) => {
                // One Kafka record per run of rows (wire.rs says why),
                // closed before it would pass `wire::ROWS_BYTES`.
                let mut run = wire::RowsWriter::default();
                run.begin(self.port, &mut self.buf);
                for r in &records {
                    let before = self.buf.len();
                    run.push(&r.key, r.timestamp, &r.row, &mut self.buf);
                    if self.buf.len() <= wire::ROWS_BYTES {
                        continue;
                    }
                    if run.count() > 1 {
                        // The rows before this one are a run of their own.
                        let row = self.buf.split_off(before);
                        run.pop();
                        run.finish(&mut self.buf);
                        self.batch.push(&[], &self.buf);
                        run.begin(self.port, &mut self.buf);
                        run.push_encoded(&row, &mut self.buf);
                        if self.buf.len() <= wire::ROWS_BYTES {
                            continue;
                        }
                    }
                    // Over a run's size on its own: a record alone.
                    run.finish(&mut self.buf);
                    let record = std::mem::take(&mut self.buf);
                    let sent = self
                        .produce(target)
                        .and_then(|()| self.produce_alone(target, &record, &r.key));
                    self.buf = record;
                    sent?;
                    run.begin(self.port, &mut self.buf);
                }
                if run.count() > 0 {
                    run.finish(&mut self.buf);
                    self.batch.push(&[], &self.buf);
                }
                self.produce(target)
            }
            Element::Watermark(wm) => {
                self.last.0 = self.last.0.max(wm);
                self.own_mark(target)
            }
            Element::Idle(idle) => {
                self.last.1 = idle;
                self.own_mark(target)
            }
            Element::Barrier(_) | Element::EndOfStream => Ok(()),
        }
    }

    /// `writer`'s watermark to every partition.
    pub fn mark(&mut self, writer: &str, watermark: i64, idle: bool) -> Result<()> {
        for t in 0..self.tasks {
            self.mark_one(t, writer, watermark, idle)?;
        }
        Ok(())
    }

    fn mark_one(&mut self, target: usize, writer: &str, wm: i64, idle: bool) -> Result<()> {
        wire::encode_watermark(writer, wm, idle, &mut self.buf);
        self.batch.push(&[], &self.buf);
        self.produce(target)
    }

    /// This chain's own watermark and idleness (`writer`) to `target`.
    fn own_mark(&mut self, target: usize) -> Result<()> {
        let (wm, idle) = self.last;
        wire::encode_watermark(&self.writer, wm, idle, &mut self.buf);
        self.batch.push(&[], &self.buf);
        self.produce(target)
    }

    fn produce(&mut self, target: usize) -> Result<()> {
        if self.batch.is_empty() {
            return Ok(());
        }
        self.shape_first(target)?;
        let sent = self.send_batch(target, &self.batch);
        self.batch.clear();
        sent
    }

    /// The writer's shape, when nothing was sent to `target` yet in this
    /// epoch's transaction: it goes before the rows.
    fn shape_first(&mut self, target: usize) -> Result<()> {
        let epoch = self.epoch.load(Ordering::Relaxed) + 1;
        if self.shaped[target] != epoch {
            let mut first = ProduceBatch::default();
            wire::encode_shape(&self.instance, self.shape, &mut self.buf);
            first.push(&[], &self.buf);
            self.send_batch(target, &first)?;
            self.shaped[target] = epoch;
        }
        Ok(())
    }

    /// A run of one row (`record`) over `wire::ROWS_BYTES`, by itself, so
    /// that a refusal for its size is that row's: the sources' policy
    /// applies to it (`key` is the row's).
    fn produce_alone(&mut self, target: usize, record: &[u8], key: &[u8]) -> Result<()> {
        self.shape_first(target)?;
        let mut one = ProduceBatch::default();
        one.push(&[], record);
        let sent = self
            .producer
            .send_batch_to(&self.topic, target as i32, &one)
            .map_err(|e| e.into_error(&self.topic))?;
        match sent.too_large.first() {
            Some((_, bytes)) => self.too_large.refused_for_size(key, *bytes),
            None => Ok(()),
        }
    }

    /// Sends shapes, watermarks and runs of rows within `wire::ROWS_BYTES`:
    /// a refusal for size is the configuration's fault (a
    /// `message.max.bytes` below a run), not a row's, and stops the job.
    fn send_batch(&self, target: usize, batch: &ProduceBatch) -> Result<()> {
        let sent = self
            .producer
            .send_batch_to(&self.topic, target as i32, batch)
            .map_err(|e| e.into_error(&self.topic))?;
        if let Some((key, bytes)) = sent.too_large.first() {
            return Err(WeirError::OutputTooLarge {
                topic: self.topic.clone(),
                key: String::from_utf8_lossy(key).into_owned(),
                bytes: *bytes,
            });
        }
        Ok(())
    }
}
