//! The output of a keyed subtask: the chained sink. It produces results and
//! dead letters through the job's producers, into the transaction the
//! epoch gate routes each epoch to (docs/checkpoint-protocol.md): with
//! exactly-once delivery, two producers alternate per epoch, so output of
//! epoch N+1 goes out while transaction N commits, and is kept until it
//! did (`super::routing` says why); with at-least-once, output of epoch
//! N+1 is held until the Coordinator flushed the producer after N.
//! Operators write through it and never see the producers.

use std::sync::Arc;

use rdkafka::message::{Header, OwnedHeaders};
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::gate::EpochGate;
use super::routing::{EpochRouter, SlotSender};
use super::DeadLetter;
use crate::config::BadRecordPolicy;
use crate::error::{Result, WeirError};
use crate::kafka::producer::{ProduceBatch, SendError, SinkProducer};
use crate::observe::metrics::Metrics;

/// Output records held back, or kept as copies, while the previous
/// checkpoint completes; past it the sink waits for the gate.
const MAX_PENDING: usize = 100_000;

/// Results gathered before one `rd_kafka_produce_batch` call; the keyed
/// task also sends a partial batch after each input batch.
const PRODUCE_BATCH: usize = 1024;

/// Emptied batches kept for reuse.
const SPARE_BATCHES: usize = 8;

/// Output held back by the epoch gate, or kept as a copy, in order.
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

impl Held {
    fn records(&self) -> usize {
        match self {
            Self::Results(batch) => batch.len(),
            _ => 1,
        }
    }
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
    /// One per slot: two alternating transactional producers (single
    /// mode, exactly-once), or one.
    pub producers: Vec<Arc<SinkProducer>>,
    pub metrics: Arc<Metrics>,
    pub cancel: CancellationToken,
}

/// The sending half of an output: the producers and what a refused record
/// becomes. The router ([`EpochRouter`]) says which producer.
struct Writer {
    uid: String,
    subtask: u32,
    producers: Vec<Arc<SinkProducer>>,
    sink_topic: String,
    dead_letter_topic: Option<String>,
    on_bad_record: BadRecordPolicy,
    metrics: Arc<Metrics>,
    /// `weir_records_out_total` of this operator, looked up once.
    records_out: prometheus::IntCounter,
    /// Batches sent and no longer kept, for the next ones.
    spare: Vec<ProduceBatch>,
}

/// The sink chained into a keyed subtask.
pub struct Output {
    pub uid: String,
    pub subtask: u32,
    writer: Writer,
    /// Single mode's epoch gate ([`Output::after_snapshot`]). None in group
    /// mode, whose output goes into the open transaction between records
    /// and is never held.
    gate: Option<Arc<EpochGate>>,
    router: EpochRouter<Held>,
    cancel: CancellationToken,
    /// Reused buffer for a result's value: operators encode into it and
    /// call [`Output::send_buf`], so the common path allocates nothing.
    pub buf: Vec<u8>,
    /// Results without a record timestamp, sent together
    /// ([`Output::flush_batch`]); gathered only while the epoch has a route.
    batch: ProduceBatch,
}

impl Output {
    /// An output whose epochs go where `gate` routes them (single mode:
    /// `gate` is the Coordinator's).
    pub fn gated(target: OutputTarget, shared: &OutputShared, gate: Arc<EpochGate>) -> Self {
        let router = EpochRouter::new(gate.released());
        Self::new(target, shared, Some(gate), router)
    }

    /// An output that never holds records back (group mode: an epoch's
    /// output is written in its open transaction, and the next epoch's
    /// transaction begins after the commit).
    pub fn ungated(target: OutputTarget, shared: &OutputShared) -> Self {
        Self::new(target, shared, None, EpochRouter::ungated())
    }

    fn new(
        target: OutputTarget,
        shared: &OutputShared,
        gate: Option<Arc<EpochGate>>,
        router: EpochRouter<Held>,
    ) -> Self {
        let records_out = shared
            .metrics
            .records_out
            .with_label_values(&[target.uid.as_str()]);
        Self {
            uid: target.uid.clone(),
            subtask: target.subtask,
            writer: Writer {
                uid: target.uid,
                subtask: target.subtask,
                producers: shared.producers.clone(),
                sink_topic: target.sink_topic,
                dead_letter_topic: target.dead_letter_topic,
                on_bad_record: target.on_bad_record,
                metrics: shared.metrics.clone(),
                records_out,
                spare: Vec::new(),
            },
            gate,
            router,
            cancel: shared.cancel.clone(),
            buf: Vec::with_capacity(128),
            batch: ProduceBatch::default(),
        }
    }

    /// Sends the result in [`Output::buf`] under `key` (with a record
    /// timestamp, for windows), or holds it back while its epoch has no
    /// route.
    pub fn send_buf(&mut self, key: &[u8], timestamp: Option<i64>) -> Result<()> {
        if self.router.watching() {
            self.poll_gate()?;
        }
        if self.router.slot().is_none() {
            return self.hold_result(key, timestamp);
        }
        if timestamp.is_none() {
            // Per record, as it joins the epoch's output (the crash tests
            // count records, not batch calls).
            crate::crash_point!("mid-transaction-produce");
            self.batch.push(key, &self.buf);
            if self.batch.len() >= PRODUCE_BATCH {
                self.flush_batch()?;
            }
            return Ok(());
        }
        // librdkafka's batch call stamps every record with the current
        // time: records with their own timestamp (window results) go one
        // by one, after what was gathered before them.
        let slot = self.flush_batch()?;
        crate::crash_point!("mid-transaction-produce");
        if self.router.keeps_copies() {
            return self.send_kept(
                slot,
                Held::Result {
                    key: key.to_vec(),
                    value: Some(self.buf.clone()),
                    timestamp,
                },
            );
        }
        self.writer
            .send_one(slot, key, Some(&self.buf), timestamp, false)
    }

    /// Holds the result in [`Output::buf`]: consecutive results without a
    /// timestamp share one arena.
    fn hold_result(&mut self, key: &[u8], timestamp: Option<i64>) -> Result<()> {
        if timestamp.is_none() {
            if let Some(Held::Results(batch)) = self.router.last_held() {
                batch.push(key, &self.buf);
                self.router.held_more(1);
            } else {
                let mut batch = self.writer.spare.pop().unwrap_or_default();
                batch.push(key, &self.buf);
                self.router.hold(Held::Results(batch), 1);
            }
            return self.bound();
        }
        self.router.hold(
            Held::Result {
                key: key.to_vec(),
                value: Some(self.buf.clone()),
                timestamp,
            },
            1,
        );
        self.bound()
    }

    /// A tombstone for `key` (a record without a value: an upsert sink's
    /// delete), in order with the results around it.
    pub fn send_tombstone(&mut self, key: &[u8]) -> Result<()> {
        self.send_item(Held::Result {
            key: key.to_vec(),
            value: None,
            timestamp: None,
        })
    }

    /// A dead letter, written in the transaction of its epoch.
    pub fn dead_letter(&mut self, dl: Box<DeadLetter>) -> Result<()> {
        self.send_item(Held::DeadLetter(dl))
    }

    /// Sends one item after what was gathered, keeps it while the previous
    /// checkpoint is undecided, or holds it.
    fn send_item(&mut self, item: Held) -> Result<()> {
        if self.router.watching() {
            self.poll_gate()?;
        }
        if self.router.slot().is_none() {
            self.router.hold(item, 1);
            return self.bound();
        }
        let slot = self.flush_batch()?;
        crate::crash_point!("mid-transaction-produce");
        if self.router.keeps_copies() {
            return self.send_kept(slot, item);
        }
        self.writer.produce(slot, &item, false)
    }

    /// Sends `item` into `slot` and keeps it until the previous checkpoint
    /// is decided.
    fn send_kept(&mut self, slot: usize, item: Held) -> Result<()> {
        self.writer.produce(slot, &item, false)?;
        let records = item.records();
        self.router.copied(item, records);
        self.bound()
    }

    /// Sends the gathered results with one batch call. The keyed task
    /// calls it after each input batch; every path that produces otherwise
    /// calls it first, so output keeps its order. Returns the slot to send
    /// into next: a failed checkpoint may have moved the epoch while this
    /// waited for room ([`Output::bound`]). Only while the epoch has a
    /// route: results are gathered only then.
    pub fn flush_batch(&mut self) -> Result<usize> {
        if !self.batch.is_empty() {
            let slot = self
                .router
                .slot()
                .expect("output is gathered only while its epoch has a route");
            self.writer.send_results(slot, &self.batch, false)?;
            if self.router.keeps_copies() {
                // The sent batch itself is the copy; gathering goes on in
                // a spare one.
                let next = self.writer.spare.pop().unwrap_or_default();
                let sent = std::mem::replace(&mut self.batch, next);
                let records = sent.len();
                self.router.copied(Held::Results(sent), records);
                self.bound()?;
            } else {
                self.batch.clear();
            }
        }
        Ok(self.router.slot().unwrap_or(0))
    }

    /// Waits for the gate while too much is held or kept.
    fn bound(&mut self) -> Result<()> {
        if self.router.pending_records() < MAX_PENDING {
            return Ok(());
        }
        let gate = self
            .gate
            .clone()
            .expect("output is held or kept only with a gate");
        let cancel = &self.cancel;
        self.router
            .bound(MAX_PENDING, &gate, &mut self.writer, || {
                cancel.is_cancelled()
            })?;
        Ok(())
    }

    /// Catches up with the gate: sends what its epoch's route released,
    /// drops or sends again the copies once the previous checkpoint is
    /// decided. Tasks call it between input batches too.
    pub fn poll_gate(&mut self) -> Result<()> {
        if let Some(gate) = &self.gate {
            self.router.poll(gate, &mut self.writer)?;
        }
        Ok(())
    }

    /// Before a snapshot: waits for the previous checkpoint to be decided
    /// and this epoch's route (both a moment away: it completed or failed
    /// before this one was triggered), and sends what was held; that
    /// output belongs to this epoch. False if the attempt was cancelled
    /// meanwhile.
    pub fn drain_before_snapshot(&mut self) -> Result<bool> {
        let Some(gate) = self.gate.clone() else {
            return Ok(true);
        };
        let started = std::time::Instant::now();
        let cancel = &self.cancel;
        let settled = self
            .router
            .settle(&gate, &mut self.writer, || cancel.is_cancelled())?;
        tracing::debug!(
            epoch = self.router.epoch(),
            settle_us = started.elapsed().as_micros() as u64,
            "sink settled before a snapshot"
        );
        Ok(settled)
    }

    /// After the snapshot of checkpoint `id`, output of the next epoch goes
    /// where the gate routes it: with two producers, into the other one's
    /// transaction at once (kept until `id` is decided); with one, once
    /// checkpoint `id` completed.
    pub fn after_snapshot(&mut self, id: u64) -> Result<()> {
        // Everything of epoch N is enqueued before the ack.
        self.flush_batch()?;
        for p in &self.writer.producers {
            p.check()?;
        }
        let Some(gate) = self.gate.clone() else {
            return Err(WeirError::Task {
                task: format!("{}#{}", self.uid, self.subtask),
                reason: "a snapshot asked an output without an epoch gate (group mode's) to hold \
                         its later output"
                    .into(),
            });
        };
        self.router.next_epoch(id, &gate, &mut self.writer)
    }

    /// Applies `on_bad_record` to a record the producer refused for its
    /// size, `bytes` long, under `key` (shown in the warning, the error and
    /// the dead letter, which describes it). Group mode's repartition edges
    /// use it for a row too large for a repartition record, with their
    /// sources' policy (`exchange::RepartitionOut`).
    pub fn refused_for_size(&self, key: &[u8], bytes: usize) -> Result<()> {
        self.writer
            .sent(0, Err(SendError::TooLarge { bytes }), key, false)
    }
}

impl SlotSender<Held> for Writer {
    fn send(&mut self, slot: usize, item: &Held, again: bool) -> Result<()> {
        crate::crash_point!("mid-transaction-produce");
        self.produce(slot, item, again)
    }

    fn recycle(&mut self, item: Held) {
        if let Held::Results(mut batch) = item {
            if self.spare.len() < SPARE_BATCHES {
                batch.clear();
                self.spare.push(batch);
            }
        }
    }
}

impl Writer {
    /// One batch call for `batch` into `slot`, then the bad-record policy
    /// for any record refused for its size. `again`: the batch was sent
    /// before into a transaction that is being given up (its records were
    /// counted then).
    fn send_results(&self, slot: usize, batch: &ProduceBatch, again: bool) -> Result<()> {
        match self.producers[slot].send_batch(&self.sink_topic, batch) {
            Ok(sent) => {
                if !again {
                    self.records_out.inc_by(sent.sent);
                }
                for (key, bytes) in sent.too_large {
                    self.sent(slot, Err(SendError::TooLarge { bytes }), &key, again)?;
                }
                Ok(())
            }
            // Cancelled and failed calls as for a single record.
            Err(e) => self.sent(slot, Err(e), b"", again),
        }
    }

    /// One result (None: a tombstone) to the sink topic through `slot`'s
    /// producer, then counted or given to the bad-record policy.
    fn send_one(
        &self,
        slot: usize,
        key: &[u8],
        value: Option<&[u8]>,
        timestamp: Option<i64>,
        again: bool,
    ) -> Result<()> {
        let sent = self.producers[slot].send(&self.sink_topic, Some(key), value, None, timestamp);
        self.sent(slot, sent, key, again)
    }

    fn produce(&self, slot: usize, held: &Held, again: bool) -> Result<()> {
        match held {
            Held::Results(batch) => self.send_results(slot, batch, again),
            Held::Result {
                key,
                value,
                timestamp,
            } => self.send_one(slot, key, value.as_deref(), *timestamp, again),
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
                match self.producers[slot].send(
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

    /// Counts a sent result, or applies `on_bad_record` to one the producer
    /// refused for its size (a replay would make it again: restarting
    /// cannot help). A record sent `again` (into the transaction its epoch
    /// moved to) was counted and reported the first time; a refused one's
    /// dead letter is written again, into that transaction.
    fn sent(
        &self,
        slot: usize,
        sent: std::result::Result<(), SendError>,
        key: &[u8],
        again: bool,
    ) -> Result<()> {
        match sent {
            Ok(()) => {
                if !again {
                    self.records_out.inc();
                }
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
                        if !again {
                            self.metrics.bad_records.with_label_values(&["skip"]).inc();
                            warn!(uid = %self.uid, subtask = self.subtask, topic = %self.sink_topic, key = %shown, bytes, "skipped an output record over message.max.bytes");
                        }
                        Ok(())
                    }
                    BadRecordPolicy::DeadLetter => {
                        if !again {
                            self.metrics
                                .bad_records
                                .with_label_values(&["dead-letter"])
                                .inc();
                            warn!(uid = %self.uid, subtask = self.subtask, topic = %self.sink_topic, key = %shown, bytes, "output record over message.max.bytes described in the dead-letter topic");
                        }
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
                        match self.produce(slot, &Held::DeadLetter(Box::new(description)), again) {
                            Err(WeirError::OutputTooLarge { .. }) => Err(error),
                            other => other,
                        }
                    }
                }
            }
        }
    }
}
