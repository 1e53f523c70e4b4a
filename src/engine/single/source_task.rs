//! A source task: reads its Kafka partitions, decodes each record into a
//! row of the source's schema, keeps per-partition watermarks, and pushes
//! rows through its chain (the stateless steps, exchanges, sinks). On a
//! trigger it records its next offsets as its state, runs the chain's
//! snapshot sequence (which sends the barrier on) and acks.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use rdkafka::consumer::BaseConsumer;
use rdkafka::Message;
use tracing::{debug, info};

use crate::checkpoint::CheckpointStore;
use crate::dataflow::graph::{RecordError, SourceSpec};
use crate::dataflow::row::Schema;
use crate::dataflow::{Record, RecordKey};
use crate::element::{Barrier, Element};
use crate::engine::chain::Chain;
use crate::engine::decode::{decode, record_of};
use crate::error::Result;
use crate::kafka::SourceContext;
use crate::runtime::output::Output;
use crate::runtime::source::{
    bad_record, consumer_error, offsets_at_trigger, Position, MAX_BATCH_DELAY, WATERMARK_INTERVAL,
};
use crate::runtime::{Ack, DeadLetter, SourceCommand, BATCH};
use crate::time::watermark::{SourceWatermarks, WatermarkUpdate};

pub struct GraphSource {
    pub uid: String,
    pub subtask: u32,
    pub spec: SourceSpec,
    pub schema: Schema,
    pub consumer: BaseConsumer<SourceContext>,
    pub positions: Vec<Position>,
    pub watermarks: Option<SourceWatermarks>,
    pub chain: Chain,
    /// Dead letters, written in the transaction of their epoch.
    pub dead_letters: Output,
    pub commands: Receiver<SourceCommand>,
    pub acks: Sender<Ack>,
    pub store: CheckpointStore,
}

impl GraphSource {
    pub fn run(mut self) -> Result<()> {
        let records_in = self
            .chain
            .metrics
            .records_in
            .with_label_values(&[self.uid.as_str()]);
        let mut taken = 0u64;
        let mut batch: Vec<Record> = Vec::with_capacity(BATCH);
        let mut last_flush = Instant::now();
        let mut last_watermark = Instant::now();
        let mut now = crate::runtime::now_ms();
        let mut first_read = false;
        loop {
            if self.chain.cancel.is_cancelled() {
                return Ok(());
            }
            self.chain.release_sinks()?;
            self.dead_letters.poll_gate()?;
            while let Ok(SourceCommand::Trigger(barrier)) = self.commands.try_recv() {
                self.push(&mut batch)?;
                if !self.on_trigger(barrier)? {
                    return Ok(());
                }
            }
            let msg = match self.consumer.poll(Duration::from_millis(10)) {
                None => {
                    records_in.inc_by(std::mem::take(&mut taken));
                    self.push(&mut batch)?;
                    self.chain.flush()?;
                    last_flush = Instant::now();
                    if last_watermark.elapsed() >= WATERMARK_INTERVAL {
                        now = crate::runtime::now_ms();
                        self.emit_watermarks(now, &mut batch)?;
                        last_watermark = Instant::now();
                    }
                    continue;
                }
                Some(Err(e)) => {
                    consumer_error(
                        &self.consumer,
                        || format!("source {} subtask {}", self.uid, self.subtask),
                        &e,
                    )?;
                    continue;
                }
                Some(Ok(m)) => m,
            };
            taken += 1;
            let (topic, partition, offset) = (msg.topic(), msg.partition(), msg.offset());
            if !first_read {
                first_read = true;
                info!(uid = %self.uid, subtask = self.subtask, topic, partition, offset,
                    since_start_ms = crate::observe::since_process_start().as_millis() as u64, "first record read");
            }
            match decode(&self.spec, &self.schema, &record_of(&msg)) {
                Ok(None) => {}
                Ok(Some((row, ts))) => {
                    if let Some(w) = &mut self.watermarks {
                        w.on_record(topic, partition, ts, now);
                    }
                    batch.push(Record {
                        row,
                        timestamp: ts,
                        key_group: 0,
                        key: RecordKey::new(),
                    });
                    if batch.len() >= BATCH {
                        push(&mut self.chain, &mut batch)?;
                    }
                }
                Err(RecordError::Unavailable(reason)) => {
                    // The record is not skipped: the task fails and the
                    // job restarts from its last checkpoint.
                    return Err(crate::error::WeirError::Operator {
                        uid: self.uid.clone(),
                        subtask: self.subtask,
                        reason: format!("{topic}/{partition}@{offset}: {reason}"),
                    });
                }
                Err(RecordError::Bad(reason)) => {
                    let metrics = self.chain.metrics.clone();
                    if let Some(reason) = bad_record(
                        self.spec.on_bad_record,
                        &metrics,
                        topic,
                        partition,
                        offset,
                        reason,
                    )? {
                        push(&mut self.chain, &mut batch)?;
                        self.dead_letters.dead_letter(Box::new(DeadLetter {
                            key: msg.key().map(<[u8]>::to_vec),
                            value: msg.payload().map(<[u8]>::to_vec),
                            error: reason,
                            topic: topic.to_string(),
                            partition,
                            offset,
                            headers: Vec::new(),
                        }))?;
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
            if taken >= 256 {
                records_in.inc_by(std::mem::take(&mut taken));
                if last_flush.elapsed() >= MAX_BATCH_DELAY {
                    self.push(&mut batch)?;
                    self.chain.flush()?;
                    last_flush = Instant::now();
                }
                if self.watermarks.is_some() && last_watermark.elapsed() >= WATERMARK_INTERVAL {
                    now = crate::runtime::now_ms();
                    self.emit_watermarks(now, &mut batch)?;
                    last_watermark = Instant::now();
                }
            }
        }
    }

    fn push(&mut self, batch: &mut Vec<Record>) -> Result<()> {
        push(&mut self.chain, batch)
    }

    fn emit_watermarks(&mut self, now: u64, batch: &mut Vec<Record>) -> Result<()> {
        let Some(w) = &mut self.watermarks else {
            return Ok(());
        };
        let updates = w.poll(now);
        if updates.is_empty() {
            return Ok(());
        }
        self.push(batch)?;
        for u in updates {
            match u {
                WatermarkUpdate::Watermark(wm) => self.chain.on_watermark(wm)?,
                WatermarkUpdate::Idle => self.chain.broadcast(Element::Idle(true))?,
                WatermarkUpdate::Active => self.chain.broadcast(Element::Idle(false))?,
            }
        }
        let Some(w) = &self.watermarks else {
            return Ok(());
        };
        for p in &self.positions {
            // No sample before a partition's first record: i64::MIN would
            // read as a date to dashboards.
            let wm = w.partition_watermark(&p.topic, p.partition);
            if wm > crate::time::MIN_WATERMARK {
                self.chain
                    .metrics
                    .source_watermark
                    .with_label_values(&[p.topic.as_str(), &p.partition.to_string()])
                    .set(wm);
            }
        }
        Ok(())
    }

    /// Records the offsets, runs the snapshot sequence, acks. False when
    /// the barrier ends the job.
    fn on_trigger(&mut self, barrier: Barrier) -> Result<bool> {
        fail::fail_point!("source-before-barrier");
        let offsets = offsets_at_trigger(&self.positions, self.watermarks.as_ref());
        if !self.dead_letters.drain_before_snapshot()? {
            return Ok(false);
        }
        // Sources hold no tables: the chain's sequence only moves output
        // and the barrier along.
        if self
            .chain
            .checkpoint(barrier, &self.store, (0, 0))?
            .is_none()
        {
            return Ok(false);
        }
        self.dead_letters.after_snapshot(barrier.checkpoint_id)?;
        debug!(uid = %self.uid, subtask = self.subtask, checkpoint_id = barrier.checkpoint_id, "source snapshot");
        let _ = self.acks.send(Ack::Source {
            subtask: self.subtask,
            checkpoint_id: barrier.checkpoint_id,
            offsets,
        });
        crate::crash_point!("after-source-snapshot");
        self.chain.write_back_after_ack()?;
        if barrier.then_stop {
            self.chain.broadcast(Element::EndOfStream)?;
            return Ok(false);
        }
        Ok(true)
    }
}

/// Sends the rows read so far into the chain's head.
fn push(chain: &mut Chain, batch: &mut Vec<Record>) -> Result<()> {
    if batch.is_empty() {
        return Ok(());
    }
    let records = std::mem::replace(batch, Vec::with_capacity(BATCH));
    chain.push(0, 0, records)
}

/// The source's watermarks, with each partition registered before its
/// first record so a silent one holds the watermark back (until idle).
pub fn watermarks(
    spec: &SourceSpec,
    positions: &[Position],
    restored_max_ts: &BTreeMap<(String, i32), i64>,
) -> Option<SourceWatermarks> {
    let et = spec.event_time.as_ref()?;
    let mut w = SourceWatermarks::new(et.max_out_of_orderness_ms, et.idle_timeout_ms);
    for p in positions {
        w.register(
            &p.topic,
            p.partition,
            restored_max_ts
                .get(&(p.topic.clone(), p.partition))
                .copied(),
            crate::runtime::now_ms(),
        );
    }
    Some(w)
}
