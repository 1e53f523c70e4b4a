//! The output of a keyed subtask: the chained sink. It produces results and
//! dead letters through the shared producer and holds back output of epoch
//! N+1 until checkpoint N completed (the epoch gate,
//! docs/checkpoint-protocol.md): with exactly-once delivery, until
//! transaction N committed; with at-least-once, until the Coordinator
//! flushed the producer. Operators write through it and never see the
//! producer.

use std::sync::Arc;
use std::time::Duration;

use rdkafka::message::{Header, OwnedHeaders};
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::gate::EpochGate;
use super::DeadLetter;
use crate::config::BadRecordPolicy;
use crate::error::{Result, WeirError};
use crate::kafka::producer::{ProduceBatch, SendError, SinkProducer};
use crate::observe::metrics::Metrics;

/// Output records held back while the previous checkpoint completes.
const MAX_PENDING: usize = 100_000;

/// Results gathered before one `rd_kafka_produce_batch` call; the keyed
/// task also sends a partial batch after each input batch.
const PRODUCE_BATCH: usize = 1024;

/// Output held back by the epoch gate, in order.
enum Held {
    /// Consecutive results without a record timestamp, in one arena: held
    /// records cost no allocation each and go out with one batch call.
    Results(ProduceBatch),
    Result {
        key: Vec<u8>,
        /// None: a tombstone (an upsert sink's delete).
        value: Option<Vec<u8>>,
        timestamp: Option<i64>,
    },
    DeadLetter(Box<DeadLetter>),
}

/// Where an [`Output`] writes: its operator's results to the sink topic,
/// records that cannot be written to the dead-letter topic.
#[derive(Debug, Clone)]
pub struct OutputTarget {
    pub uid: String,
    pub subtask: u32,
    /// Empty for an output of dead letters alone (a source's, late records).
    pub sink_topic: String,
    pub dead_letter_topic: Option<String>,
    /// What happens to an output record the producer refuses for its size.
    pub on_bad_record: BadRecordPolicy,
}

/// What every output of a run shares.
#[derive(Clone)]
pub struct OutputShared {
    pub producer: Arc<SinkProducer>,
    pub metrics: Arc<Metrics>,
    pub cancel: CancellationToken,
}

/// The sink chained into a keyed subtask.
pub struct Output {
    pub uid: String,
    pub subtask: u32,
    pub producer: Arc<SinkProducer>,
    pub sink_topic: String,
    pub dead_letter_topic: Option<String>,
    /// What happens to an output record the producer refuses for its size.
    pub on_bad_record: BadRecordPolicy,
    /// Single mode's epoch gate: output after a barrier waits for that
    /// checkpoint ([`Output::after_snapshot`]). None in group mode, whose
    /// output goes into the open transaction between records and is never
    /// held.
    gate: Option<Arc<EpochGate>>,
    pub metrics: Arc<Metrics>,
    /// `weir_records_out_total` of this operator, looked up once.
    pub records_out: prometheus::IntCounter,
    pub cancel: CancellationToken,
    /// Reused buffer for a result's value: operators encode into it and
    /// call [`Output::send_buf`], so the common path allocates nothing.
    pub buf: Vec<u8>,
    /// Results without a record timestamp, sent together ([`Output::flush_batch`]).
    batch: ProduceBatch,
    /// The checkpoint that must complete before more output.
    awaiting: Option<u64>,
    held: Vec<Held>,
    /// Records in `held`.
    held_records: usize,
    /// A held batch's buffers once sent, for the next epoch's held output
    /// (grown to an epoch's size, they are not grown again each time).
    spare: ProduceBatch,
}

impl Output {
    /// An output whose records after a barrier wait for that checkpoint to
    /// complete (single mode: `gate` is the Coordinator's).
    pub fn gated(target: OutputTarget, shared: &OutputShared, gate: Arc<EpochGate>) -> Self {
        Self::new(target, shared, Some(gate))
    }

    /// An output that never holds records back (group mode: an epoch's
    /// output is written in its open transaction, and the next epoch's
    /// transaction begins after the commit).
    pub fn ungated(target: OutputTarget, shared: &OutputShared) -> Self {
        Self::new(target, shared, None)
    }

    fn new(target: OutputTarget, shared: &OutputShared, gate: Option<Arc<EpochGate>>) -> Self {
        let records_out = shared
            .metrics
            .records_out
            .with_label_values(&[target.uid.as_str()]);
        Self {
            uid: target.uid,
            subtask: target.subtask,
            producer: shared.producer.clone(),
            sink_topic: target.sink_topic,
            dead_letter_topic: target.dead_letter_topic,
            on_bad_record: target.on_bad_record,
            gate,
            metrics: shared.metrics.clone(),
            records_out,
            cancel: shared.cancel.clone(),
            buf: Vec::with_capacity(128),
            batch: ProduceBatch::default(),
            spare: ProduceBatch::default(),
            awaiting: None,
            held: Vec::new(),
            held_records: 0,
        }
    }

    /// Sends the result in [`Output::buf`] under `key` (with a record
    /// timestamp, for windows), or holds it back while the previous epoch
    /// is not committed.
    pub fn send_buf(&mut self, key: &[u8], timestamp: Option<i64>) -> Result<()> {
        if self.awaiting.is_some() {
            self.release_if_committed()?;
        }
        if self.awaiting.is_none() {
            if timestamp.is_none() {
                // Per record, as it joins the epoch's output (the crash
                // tests count records, not batch calls).
                crate::crash_point!("mid-transaction-produce");
                self.batch.push(key, &self.buf);
                if self.batch.len() >= PRODUCE_BATCH {
                    self.flush_batch()?;
                }
                return Ok(());
            }
            // librdkafka's batch call stamps every record with the current
            // time: records with their own timestamp (window results) go
            // one by one, after what was gathered before them.
            self.flush_batch()?;
            crate::crash_point!("mid-transaction-produce");
            let sent = self.producer.send(
                &self.sink_topic,
                Some(key),
                Some(&self.buf),
                None,
                timestamp,
            );
            return self.sent(sent, key);
        }
        if timestamp.is_none() {
            if let Some(Held::Results(batch)) = self.held.last_mut() {
                batch.push(key, &self.buf);
            } else {
                let mut batch = std::mem::take(&mut self.spare);
                batch.push(key, &self.buf);
                self.held.push(Held::Results(batch));
            }
            return self.held_one();
        }
        let held = Held::Result {
            key: key.to_vec(),
            value: Some(self.buf.clone()),
            timestamp,
        };
        self.hold(held)
    }

    /// A tombstone for `key` (a record without a value: an upsert sink's
    /// delete), in order with the results around it.
    pub fn send_tombstone(&mut self, key: &[u8]) -> Result<()> {
        if self.awaiting.is_some() {
            self.release_if_committed()?;
        }
        if self.awaiting.is_none() {
            self.flush_batch()?;
            crate::crash_point!("mid-transaction-produce");
            let sent = self
                .producer
                .send(&self.sink_topic, Some(key), None, None, None);
            return self.sent(sent, key);
        }
        self.hold(Held::Result {
            key: key.to_vec(),
            value: None,
            timestamp: None,
        })
    }

    /// Sends the gathered results with one batch call. The keyed task
    /// calls it after each input batch; every path that produces otherwise
    /// calls it first, so output keeps its order.
    pub fn flush_batch(&mut self) -> Result<()> {
        if self.batch.is_empty() {
            return Ok(());
        }
        // Taken and put back, so its buffers are reused.
        let mut batch = std::mem::take(&mut self.batch);
        let sent = self.send_results(&mut batch);
        self.batch = batch;
        sent
    }

    /// One batch call for `batch` (emptied), then the bad-record policy for
    /// any record refused for its size.
    fn send_results(&self, batch: &mut ProduceBatch) -> Result<()> {
        match self.producer.send_batch(&self.sink_topic, batch) {
            Ok(sent) => {
                self.records_out.inc_by(sent.sent);
                for (key, bytes) in sent.too_large {
                    self.sent(Err(SendError::TooLarge { bytes }), &key)?;
                }
                Ok(())
            }
            // Cancelled and failed calls as for a single record.
            Err(e) => self.sent(Err(e), b""),
        }
    }

    /// A dead letter, written in the transaction of its epoch.
    pub fn dead_letter(&mut self, dl: Box<DeadLetter>) -> Result<()> {
        if self.awaiting.is_some() {
            self.release_if_committed()?;
        }
        if self.awaiting.is_none() {
            self.flush_batch()?;
            return self.produce(Held::DeadLetter(dl));
        }
        self.hold(Held::DeadLetter(dl))
    }

    fn hold(&mut self, held: Held) -> Result<()> {
        self.held.push(held);
        self.held_one()
    }

    /// Counts a held record; at `MAX_PENDING` waits for the gate.
    fn held_one(&mut self) -> Result<()> {
        self.held_records += 1;
        if self.held_records >= MAX_PENDING {
            let waiting_for = self.awaiting.expect("holding only while awaiting");
            while !self.gate().wait(waiting_for, Duration::from_millis(100)) {
                if self.cancel.is_cancelled() {
                    return Ok(());
                }
            }
            self.release_if_committed()?;
        }
        Ok(())
    }

    /// Sends what was held back once the awaited epoch is committed (or
    /// its checkpoint failed, which releases it too).
    pub fn release_if_committed(&mut self) -> Result<()> {
        if let Some(n) = self.awaiting {
            if self.gate().released() >= n {
                self.awaiting = None;
                self.held_records = 0;
                for held in std::mem::take(&mut self.held) {
                    match held {
                        Held::Results(mut batch) => {
                            crate::crash_point!("mid-transaction-produce");
                            self.send_results(&mut batch)?;
                            batch.clear();
                            self.spare = batch;
                        }
                        other => self.produce(other)?,
                    }
                }
            }
        }
        Ok(())
    }

    /// Before a snapshot: waits for the previous checkpoint's release (it
    /// completed before this one was triggered, so it is a moment away)
    /// and sends what was held for it; that output belongs to this epoch.
    /// False if the attempt was cancelled meanwhile.
    pub fn drain_before_snapshot(&mut self) -> Result<bool> {
        if let Some(prev) = self.awaiting {
            let started = std::time::Instant::now();
            while !self.gate().wait(prev, Duration::from_millis(100)) {
                if self.cancel.is_cancelled() {
                    return Ok(false);
                }
            }
            let waited = started.elapsed();
            self.release_if_committed()?;
            tracing::debug!(
                checkpoint_id = prev,
                commit_wait_us = waited.as_micros() as u64,
                release_us = (started.elapsed() - waited).as_micros() as u64,
                "sink drained before a snapshot"
            );
        }
        Ok(true)
    }

    /// After the snapshot of checkpoint `id`, later output waits for the
    /// checkpoint to complete. With a transaction that is its commit;
    /// without one, the Coordinator flushes the shared producer once every
    /// subtask has acked, so the subtask never stalls on delivery at a
    /// barrier and the flush waits only for output of this epoch.
    pub fn after_snapshot(&mut self, id: u64) -> Result<()> {
        // Everything of epoch N is enqueued before the ack.
        self.flush_batch()?;
        self.producer.check()?;
        if self.gate.is_none() {
            return Err(WeirError::Task {
                task: format!("{}#{}", self.uid, self.subtask),
                reason: "a snapshot asked an output without an epoch gate (group mode's) to hold \
                         its later output"
                    .into(),
            });
        }
        self.awaiting = Some(id);
        Ok(())
    }

    /// The epoch gate, there whenever output is awaited: only a gated
    /// output awaits ([`Output::after_snapshot`]).
    fn gate(&self) -> &EpochGate {
        self.gate
            .as_deref()
            .expect("an output awaits a checkpoint only with a gate")
    }

    fn produce(&self, held: Held) -> Result<()> {
        crate::crash_point!("mid-transaction-produce");
        match held {
            Held::Results(mut batch) => self.send_results(&mut batch),
            Held::Result {
                key,
                value,
                timestamp,
            } => {
                let sent = self.producer.send(
                    &self.sink_topic,
                    Some(&key),
                    value.as_deref(),
                    None,
                    timestamp,
                );
                self.sent(sent, &key)
            }
            Held::DeadLetter(dl) => {
                let topic = self
                    .dead_letter_topic
                    .as_deref()
                    .expect("a dead-letter policy requires a topic (validated)");
                let mut headers = OwnedHeaders::new().insert(Header {
                    key: "weir.error",
                    value: Some(dl.error.as_str()),
                });
                if !dl.topic.is_empty() {
                    let partition = dl.partition.to_string();
                    let offset = dl.offset.to_string();
                    headers = headers
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
                }
                for (k, v) in &dl.headers {
                    headers = headers.insert(Header {
                        key: k.as_str(),
                        value: Some(v.as_str()),
                    });
                }
                match self.producer.send(
                    topic,
                    dl.key.as_deref(),
                    dl.value.as_deref(),
                    Some(headers),
                    None,
                ) {
                    Ok(()) | Err(SendError::Cancelled) => Ok(()),
                    Err(SendError::Failed(e)) => Err(e),
                    Err(SendError::TooLarge { bytes }) => Err(WeirError::OutputTooLarge {
                        topic: topic.to_string(),
                        key: format!("dead letter of {}/{}@{}", dl.topic, dl.partition, dl.offset),
                        bytes,
                    }),
                }
            }
        }
    }

    /// Applies `on_bad_record` to a record the producer refused for its
    /// size, `bytes` long, under `key` (shown in the warning, the error and
    /// the dead letter, which describes it). Group mode's repartition edges
    /// use it for a row too large for a repartition record, with their
    /// sources' policy (`exchange::RepartitionOut`).
    pub fn refused_for_size(&self, key: &[u8], bytes: usize) -> Result<()> {
        self.sent(Err(SendError::TooLarge { bytes }), key)
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
                let shown = String::from_utf8_lossy(&key[..key.len().min(64)]).into_owned();
                let error = WeirError::OutputTooLarge {
                    topic: self.sink_topic.clone(),
                    key: shown.clone(),
                    bytes,
                };
                match self.on_bad_record {
                    BadRecordPolicy::Fail => Err(error),
                    BadRecordPolicy::Skip => {
                        self.metrics.bad_records.with_label_values(&["skip"]).inc();
                        warn!(uid = %self.uid, subtask = self.subtask, topic = %self.sink_topic, key = %shown, bytes, "skipped an output record over message.max.bytes");
                        Ok(())
                    }
                    BadRecordPolicy::DeadLetter => {
                        self.metrics
                            .bad_records
                            .with_label_values(&["dead-letter"])
                            .inc();
                        warn!(uid = %self.uid, subtask = self.subtask, topic = %self.sink_topic, key = %shown, bytes, "output record over message.max.bytes described in the dead-letter topic");
                        // The description, not the record: it would not fit either.
                        let description = DeadLetter {
                            key: Some(shown.into_bytes()),
                            value: None,
                            error: error.to_string(),
                            topic: String::new(),
                            partition: 0,
                            offset: 0,
                            headers: vec![("weir.output.topic".into(), self.sink_topic.clone())],
                        };
                        match self.produce(Held::DeadLetter(Box::new(description))) {
                            Err(WeirError::OutputTooLarge { .. }) => Err(error),
                            other => other,
                        }
                    }
                }
            }
        }
    }
}
