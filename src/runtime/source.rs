//! A source subtask: reads its assigned Kafka partitions, decodes and keys
//! each record (the chained stateless steps), routes updates to keyed
//! subtasks by key group, and on a trigger records its next offsets and
//! broadcasts the barrier.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use rdkafka::consumer::BaseConsumer;
use rdkafka::Message;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::{Ack, DeadLetter, Item, SourceCommand, Update, BATCH};
use crate::checkpoint::PartitionOffset;
use crate::config::{BadRecordPolicy, SOURCE_UID};
use crate::element::{Barrier, Element};
use crate::error::{Result, WeirError};
use crate::kafka::SourceContext;
use crate::observe::metrics::Metrics;
use crate::operators::Pipeline;
use crate::state::key_groups::{key_group, subtask_for_key_group};
use crate::time::timestamp::TimestampExtractor;
use crate::time::watermark::{SourceWatermarks, WatermarkUpdate};

/// Event time at a source subtask: how to read a record's timestamp and
/// the watermarks of its partitions.
pub struct EventTime {
    pub extractor: TimestampExtractor,
    pub watermarks: SourceWatermarks,
    /// Keep the input record with each update, for late records that go
    /// to the dead-letter topic.
    pub keep_origin: bool,
}

/// Applies `source.on_bad_record` to an input record that did not decode:
/// an error (`fail`), or counted and logged, returning the reason when the
/// record goes to the dead-letter topic. Shared by single and group mode.
pub fn bad_record(
    policy: BadRecordPolicy,
    metrics: &Metrics,
    topic: &str,
    partition: i32,
    offset: i64,
    reason: String,
) -> Result<Option<String>> {
    match policy {
        BadRecordPolicy::Fail => Err(WeirError::BadRecord {
            topic: topic.to_string(),
            partition,
            offset,
            reason,
        }),
        BadRecordPolicy::Skip => {
            metrics.bad_records.with_label_values(&["skip"]).inc();
            warn!(topic, partition, offset, reason = %reason, "skipped bad record");
            Ok(None)
        }
        BadRecordPolicy::DeadLetter => {
            metrics
                .bad_records
                .with_label_values(&["dead-letter"])
                .inc();
            warn!(topic, partition, offset, reason = %reason, "bad record sent to the dead-letter topic");
            Ok(Some(reason))
        }
    }
}

/// A source's part of a checkpoint: the next offset of every partition
/// it has a position for, with event time the highest event time read
/// from it. Shared by the built-in pipelines' and job graphs' sources.
pub fn offsets_at_trigger(
    positions: &[Position],
    watermarks: Option<&SourceWatermarks>,
) -> Vec<PartitionOffset> {
    let max_ts: std::collections::BTreeMap<(String, i32), Option<i64>> = watermarks
        .map(|w| w.snapshot().into_iter().collect())
        .unwrap_or_default();
    positions
        .iter()
        .filter_map(|p| {
            p.next.map(|offset| PartitionOffset {
                topic: p.topic.clone(),
                partition: p.partition,
                offset,
                max_timestamp: max_ts
                    .get(&(p.topic.clone(), p.partition))
                    .copied()
                    .flatten(),
            })
        })
        .collect()
}

/// A consumer's poll error: librdkafka reports transient broker trouble
/// there and retries by itself, so it is logged and reading goes on; only
/// a fatal error stops the source task (`task` names it).
pub fn consumer_error(
    consumer: &BaseConsumer<SourceContext>,
    task: impl FnOnce() -> String,
    e: &rdkafka::error::KafkaError,
) -> Result<()> {
    use rdkafka::consumer::Consumer;
    let task = task();
    if let Some((code, reason)) = consumer.client().fatal_error() {
        return Err(WeirError::Task {
            task,
            reason: format!("consumer fatal error {code:?}: {reason}"),
        });
    }
    warn!(task = %task, error = %e, "consumer error");
    Ok(())
}

/// How often idleness and watermarks are looked at without records.
pub(crate) const WATERMARK_INTERVAL: Duration = Duration::from_millis(100);

/// A partition this subtask owns and the next offset to read, once known.
#[derive(Debug, Clone)]
pub struct Position {
    pub topic: String,
    pub partition: i32,
    pub next: Option<i64>,
}

pub struct SourceTask {
    pub subtask: u32,
    pub consumer: BaseConsumer<SourceContext>,
    pub positions: Vec<Position>,
    pub outputs: Vec<Sender<Element<Item>>>,
    pub commands: Receiver<SourceCommand>,
    pub acks: Sender<Ack>,
    pub pipeline: Pipeline,
    pub policy: BadRecordPolicy,
    pub max_parallelism: u32,
    pub metrics: Arc<Metrics>,
    pub cancel: CancellationToken,
    pub event_time: Option<EventTime>,
}

/// Partial batches are sent at least this often when input trickles in.
pub(crate) const MAX_BATCH_DELAY: Duration = Duration::from_millis(20);

impl SourceTask {
    pub fn run(mut self) -> Result<()> {
        let records_in = self.metrics.records_in.with_label_values(&[SOURCE_UID]);
        let records_out = self.metrics.records_out.with_label_values(&[SOURCE_UID]);
        let (mut taken, mut routed) = (0u64, 0u64);
        let mut buffers: Vec<Vec<Item>> = (0..self.outputs.len())
            .map(|_| Vec::with_capacity(BATCH))
            .collect();
        let mut scratch: Vec<(String, f64, i64)> = Vec::new();
        let mut last_flush = Instant::now();
        let mut last_watermark = Instant::now();
        let parallelism = self.outputs.len() as u32;
        let mut now = super::now_ms();
        let mut first_read = false;
        loop {
            if self.cancel.is_cancelled() {
                return Ok(());
            }
            while let Ok(SourceCommand::Trigger(barrier)) = self.commands.try_recv() {
                self.flush_all(&mut buffers)?;
                if !self.on_trigger(barrier)? {
                    return Ok(());
                }
            }
            let msg = match self.consumer.poll(Duration::from_millis(10)) {
                None => {
                    records_in.inc_by(std::mem::take(&mut taken));
                    records_out.inc_by(std::mem::take(&mut routed));
                    self.flush_all(&mut buffers)?;
                    last_flush = Instant::now();
                    if last_watermark.elapsed() >= WATERMARK_INTERVAL {
                        now = super::now_ms();
                        self.emit_watermarks(now, &mut buffers)?;
                        last_watermark = Instant::now();
                    }
                    continue;
                }
                Some(Err(e)) => {
                    consumer_error(&self.consumer, || format!("source {}", self.subtask), &e)?;
                    continue;
                }
                Some(Ok(m)) => m,
            };
            taken += 1;
            let (topic, partition, offset) = (msg.topic(), msg.partition(), msg.offset());
            if !first_read {
                // Recovery time as users feel it (weir-bench recovery reads it).
                first_read = true;
                info!(
                    subtask = self.subtask,
                    topic,
                    partition,
                    offset,
                    since_start_ms = crate::observe::since_process_start().as_millis() as u64,
                    "first record read"
                );
            }
            scratch.clear();
            let extracted = self.pipeline.extract(
                msg.payload(),
                msg.timestamp().to_millis(),
                self.event_time.as_ref().map(|e| &e.extractor),
                |k, v, ts| scratch.push((k, v, ts)),
            );
            match extracted {
                Ok(()) => {
                    routed += scratch.len() as u64;
                    let keep_origin = self.event_time.as_ref().is_some_and(|e| e.keep_origin);
                    if let Some(et) = &mut self.event_time {
                        if let Some(ts) = scratch.iter().map(|s| s.2).max() {
                            et.watermarks.on_record(topic, partition, ts, now);
                        }
                    }
                    for (key, value, timestamp) in scratch.drain(..) {
                        let kg = key_group(key.as_bytes(), self.max_parallelism);
                        let target =
                            subtask_for_key_group(kg, parallelism, self.max_parallelism) as usize;
                        let origin = keep_origin.then(|| {
                            Box::new(DeadLetter {
                                key: msg.key().map(<[u8]>::to_vec),
                                value: msg.payload().map(<[u8]>::to_vec),
                                error: String::new(),
                                topic: topic.to_string(),
                                partition,
                                offset,
                                headers: Vec::new(),
                            })
                        });
                        buffers[target].push(Item::Update(Update {
                            key_group: kg,
                            key,
                            value,
                            timestamp,
                            origin,
                        }));
                        if buffers[target].len() >= BATCH {
                            let batch =
                                std::mem::replace(&mut buffers[target], Vec::with_capacity(BATCH));
                            self.send(target, Element::Records(batch))?;
                        }
                    }
                }
                Err(reason) => {
                    if let Some(reason) =
                        bad_record(self.policy, &self.metrics, topic, partition, offset, reason)?
                    {
                        let target = partition.unsigned_abs() as usize % self.outputs.len();
                        buffers[target].push(Item::DeadLetter(Box::new(DeadLetter {
                            key: msg.key().map(<[u8]>::to_vec),
                            value: msg.payload().map(<[u8]>::to_vec),
                            error: reason,
                            topic: topic.to_string(),
                            partition,
                            offset,
                            headers: Vec::new(),
                        })));
                    }
                }
            }
            if let Some(p) = self
                .positions
                .iter_mut()
                .find(|p| p.partition == partition && p.topic == topic)
            {
                p.next = Some(offset + 1);
            }
            // Metrics and the clock, every 256 records: an atomic or a
            // clock read per record would cost more than the record.
            if taken >= 256 {
                records_in.inc_by(std::mem::take(&mut taken));
                records_out.inc_by(std::mem::take(&mut routed));
                if last_flush.elapsed() >= MAX_BATCH_DELAY {
                    self.flush_all(&mut buffers)?;
                    last_flush = Instant::now();
                }
                if self.event_time.is_some() && last_watermark.elapsed() >= WATERMARK_INTERVAL {
                    now = super::now_ms();
                    self.emit_watermarks(now, &mut buffers)?;
                    last_watermark = Instant::now();
                }
            }
        }
    }

    /// Sends what the partitions' watermarks call for, after the records
    /// read so far (a watermark never overtakes a record on a channel).
    fn emit_watermarks(&mut self, now: u64, buffers: &mut [Vec<Item>]) -> Result<()> {
        let Some(et) = &mut self.event_time else {
            return Ok(());
        };
        let updates = et.watermarks.poll(now);
        if updates.is_empty() {
            return Ok(());
        }
        let snapshot = et.watermarks.snapshot();
        self.flush_all(buffers)?;
        for u in updates {
            let element = match u {
                WatermarkUpdate::Watermark(w) => Element::Watermark(w),
                WatermarkUpdate::Idle => Element::Idle(true),
                WatermarkUpdate::Active => Element::Idle(false),
            };
            for i in 0..self.outputs.len() {
                self.send(i, element.clone())?;
            }
        }
        if let Some(et) = &self.event_time {
            for ((topic, partition), _) in snapshot {
                // No sample before a partition's first record: i64::MIN
                // would read as a date to dashboards.
                let w = et.watermarks.partition_watermark(&topic, partition);
                if w > crate::time::MIN_WATERMARK {
                    self.metrics
                        .source_watermark
                        .with_label_values(&[topic.as_str(), &partition.to_string()])
                        .set(w);
                }
            }
        }
        Ok(())
    }

    /// Records the offsets, broadcasts the barrier, acks. Returns false when
    /// the barrier ends the job.
    fn on_trigger(&mut self, barrier: Barrier) -> Result<bool> {
        // Failure injection for alignment tests (`--features failpoints`):
        // a source that is slow to forward its barrier.
        fail::fail_point!("source-before-barrier");
        let offsets = offsets_at_trigger(
            &self.positions,
            self.event_time.as_ref().map(|et| &et.watermarks),
        );
        for i in 0..self.outputs.len() {
            self.send(i, Element::Barrier(barrier))?;
        }
        debug!(
            subtask = self.subtask,
            checkpoint_id = barrier.checkpoint_id,
            "source snapshot"
        );
        let _ = self.acks.send(Ack::Source {
            subtask: self.subtask,
            checkpoint_id: barrier.checkpoint_id,
            offsets,
        });
        crate::crash_point!("after-source-snapshot");
        if barrier.then_stop {
            for i in 0..self.outputs.len() {
                self.send(i, Element::EndOfStream)?;
            }
            return Ok(false);
        }
        Ok(true)
    }

    fn flush_all(&mut self, buffers: &mut [Vec<Item>]) -> Result<()> {
        for (i, buf) in buffers.iter_mut().enumerate() {
            if !buf.is_empty() {
                let batch = std::mem::replace(buf, Vec::with_capacity(BATCH));
                self.send(i, Element::Records(batch))?;
            }
        }
        Ok(())
    }

    /// Sends on a bounded channel, blocking (backpressure) but watching
    /// for cancellation.
    fn send(&self, target: usize, element: Element<Item>) -> Result<()> {
        super::send_bounded(&self.outputs[target], element, &self.cancel).map_err(|_| {
            WeirError::PeerGone {
                task: format!("source {}", self.subtask),
                reason: format!("keyed subtask {target} stopped reading"),
            }
        })
    }
}
