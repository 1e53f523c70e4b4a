//! The sink's producer: one per weir process, shared by every sink subtask.
//!
//! With `delivery = "at-least-once"` it is idempotent and flushed at every
//! barrier. With `"exactly-once"` it is transactional: transaction N holds
//! exactly the output of epoch N, and the Coordinator commits it together
//! with the source offsets of checkpoint N (`send_offsets_to_transaction`),
//! which makes the Kafka commit the commit point of the checkpoint
//! (docs/checkpoint-protocol.md). [`SinkProducer`] is the Kafka
//! implementation of [`crate::runtime::commit::CommitPoint`].

use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::client::ClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::ConsumerGroupMetadata;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{DeliveryResult, Message, OwnedHeaders};
use rdkafka::producer::{BaseRecord, Producer, ProducerContext, ThreadedProducer};
use rdkafka::TopicPartitionList;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::config::{Config, Delivery, DEFAULT_TRANSACTION_TIMEOUT_MS};
use crate::error::{Result, WeirError};

/// How long transactional calls may take before the attempt fails.
const TXN_TIMEOUT: Duration = Duration::from_secs(60);

/// Remembers the first failed delivery; librdkafka reports it on its own
/// thread, the sink checks it at the next barrier.
#[derive(Default)]
pub struct SinkContext {
    first_error: Mutex<Option<(String, KafkaError)>>,
}

impl ClientContext for SinkContext {}

impl ProducerContext for SinkContext {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((e, m)) = result {
            // Records purged by `abort_transaction` belong to the aborted
            // transaction, which nobody will read: not a failed delivery
            // (group mode goes on after aborting an epoch).
            if matches!(
                e.rdkafka_error_code(),
                Some(RDKafkaErrorCode::PurgeQueue | RDKafkaErrorCode::PurgeInflight)
            ) {
                return;
            }
            let mut slot = self.first_error.lock().expect("delivery error lock");
            if slot.is_none() {
                *slot = Some((
                    format!("delivery to {}/{}", m.topic(), m.partition()),
                    e.clone(),
                ));
            }
        }
    }
}

/// Why a record was not enqueued.
#[derive(Debug)]
pub enum SendError {
    /// Larger than `message.max.bytes`: the record's own fault, handled by
    /// the bad-record policy.
    TooLarge {
        bytes: usize,
    },
    /// The attempt was cancelled while librdkafka's queue was full.
    Cancelled,
    Failed(WeirError),
}

impl SendError {
    /// As an error of a write to `topic` that has no bad-record policy
    /// (internal topics): a cancelled send is a consequence of another
    /// failure, a refused size is the record's.
    pub fn into_error(self, topic: &str) -> WeirError {
        match self {
            Self::Failed(e) => e,
            Self::Cancelled => WeirError::PeerGone {
                task: format!("producer to {topic:?}"),
                reason: "cancelled while librdkafka's queue was full".into(),
            },
            Self::TooLarge { bytes } => WeirError::OutputTooLarge {
                topic: topic.to_string(),
                key: String::new(),
                bytes,
            },
        }
    }
}

impl From<WeirError> for SendError {
    fn from(e: WeirError) -> Self {
        Self::Failed(e)
    }
}

/// The producer's configuration: weir's defaults, then the user's
/// `[kafka.properties]` (which win), then what weir must own.
pub fn producer_config(c: &Config) -> ClientConfig {
    // Compression is left to [kafka.properties] ("compression.type"):
    // it costs CPU per record that not every deployment wants to pay.
    // Delivery reports only for failures: the sink only looks at those,
    // and a report per record costs a core's share at high rates.
    let mut cc = super::client_config(
        c,
        &[("linger.ms", "5"), ("delivery.report.only.error", "true")],
    );
    cc.set("enable.idempotence", "true");
    if c.output.delivery == Delivery::ExactlyOnce {
        let timeout = c
            .kafka
            .properties
            .get("transaction.timeout.ms")
            .cloned()
            .unwrap_or_else(|| DEFAULT_TRANSACTION_TIMEOUT_MS.to_string());
        cc.set("transactional.id", c.transactional_id())
            .set("transaction.timeout.ms", timeout);
    }
    cc
}

/// Records for one topic, gathered for one `rd_kafka_produce_batch` call:
/// keys and values back to back in one buffer, so that gathering allocates
/// nothing once the buffers have grown.
#[derive(Default)]
pub struct ProduceBatch {
    data: Vec<u8>,
    /// Key start, key length, value start, value length, per record.
    records: Vec<(usize, usize, usize, usize)>,
}

impl ProduceBatch {
    pub fn push(&mut self, key: &[u8], value: &[u8]) {
        let k = self.data.len();
        self.data.extend_from_slice(key);
        let v = self.data.len();
        self.data.extend_from_slice(value);
        self.records.push((k, key.len(), v, value.len()));
    }

    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    pub fn clear(&mut self) {
        self.data.clear();
        self.records.clear();
    }

    fn key(&self, i: usize) -> &[u8] {
        let (k, kl, _, _) = self.records[i];
        &self.data[k..k + kl]
    }

    fn value(&self, i: usize) -> &[u8] {
        let (_, _, v, vl) = self.records[i];
        &self.data[v..v + vl]
    }

    /// Bytes of keys and values held.
    pub fn bytes(&self) -> usize {
        self.data.len()
    }
}

/// What a transactional producer enqueued in its open transaction, kept
/// (with [`SinkProducer::with_journal`]) so that the transaction can be
/// renewed: aborted and begun again holding the same records, in the same
/// order per partition ([`SinkProducer::renew_transaction`]). A group-mode
/// instance whose checkpoint is not on storage in time (a slow upload)
/// cannot commit its epoch's output yet, and must not hold the transaction
/// past `transaction.timeout.ms` either: it renews it and goes on.
#[derive(Default)]
struct Journal {
    entries: Vec<Entry>,
    bytes: usize,
}

enum Entry {
    Batch {
        topic: String,
        partition: i32,
        batch: ProduceBatch,
    },
    One {
        topic: String,
        key: Option<Vec<u8>>,
        value: Option<Vec<u8>>,
        headers: Option<OwnedHeaders>,
        timestamp: Option<i64>,
    },
}

impl Journal {
    /// The records of `batch` less those at `refused` (sorted), appended to
    /// the last entry when it is for the same topic and partition.
    fn push_batch(&mut self, topic: &str, partition: i32, batch: &ProduceBatch, refused: &[usize]) {
        let same = matches!(self.entries.last(),
            Some(Entry::Batch { topic: t, partition: p, .. }) if t == topic && *p == partition);
        if !same {
            self.entries.push(Entry::Batch {
                topic: topic.to_string(),
                partition,
                batch: ProduceBatch::default(),
            });
        }
        let Some(Entry::Batch { batch: to, .. }) = self.entries.last_mut() else {
            unreachable!("a batch entry was just pushed")
        };
        let before = to.bytes();
        for i in (0..batch.len()).filter(|i| refused.binary_search(i).is_err()) {
            to.push(batch.key(i), batch.value(i));
        }
        self.bytes += to.bytes() - before;
    }

    fn push_one(
        &mut self,
        topic: &str,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: Option<OwnedHeaders>,
        timestamp: Option<i64>,
    ) {
        self.bytes += key.map_or(0, <[u8]>::len) + value.map_or(0, <[u8]>::len);
        self.entries.push(Entry::One {
            topic: topic.to_string(),
            key: key.map(<[u8]>::to_vec),
            value: value.map(<[u8]>::to_vec),
            headers,
            timestamp,
        });
    }

    fn clear(&mut self) {
        self.entries.clear();
        self.bytes = 0;
    }
}

/// What became of a batch: how many records were enqueued, and the keys
/// and sizes of those refused for their size (for the bad-record policy).
#[derive(Debug, Default)]
pub struct BatchSent {
    pub sent: u64,
    pub too_large: Vec<(Vec<u8>, usize)>,
}

/// librdkafka's RD_KAFKA_PARTITION_UA (a macro, not in the bindings): the
/// configured partitioner picks the partition.
const PARTITION_UA: i32 = -1;

/// A librdkafka topic handle, kept for the producer's life so that a batch
/// costs no topic lookup by name (rust-rdkafka's per-record `send` makes a
/// C string and looks the topic up under the client's lock every time).
struct TopicHandle(*mut rdkafka::bindings::rd_kafka_topic_t);

// SAFETY: librdkafka topic handles may be used from any thread.
unsafe impl Send for TopicHandle {}
unsafe impl Sync for TopicHandle {}

/// How long one `init_transactions` call waits before the fence looks at
/// why it has no producer id yet.
const FENCE_POLL: Duration = Duration::from_millis(20);

/// Fresh clients the fence tries while the broker is still aborting an
/// older process's transaction, before it leaves the retries to
/// librdkafka's own (every 500 ms).
const FENCE_CLIENTS: u32 = 10;

fn new_client(c: &ClientConfig) -> Result<ThreadedProducer<SinkContext>> {
    c.create_with_context(SinkContext::default())
        .map_err(|e| WeirError::kafka("create producer", e))
}

/// Fences `transactional_id`, another instance's (group mode): whatever
/// process holds it can no longer commit, and the transaction it left open
/// is aborted now rather than after `transaction.timeout.ms`. The client
/// that fenced it is closed; the id stays free for its instance's next
/// process, whose own `init_transactions` takes it over.
pub fn fence(c: &Config, transactional_id: &str) -> Result<()> {
    let mut cc = producer_config(c);
    cc.set("transactional.id", transactional_id);
    fenced_client(&cc, transactional_id).map(drop)
}

/// A transactional client that holds the newest epoch of `transactional_id`:
/// every older process with the id is fenced and its open transaction
/// aborted.
///
/// When a killed process left a transaction open, the broker answers the
/// first `InitProducerId` with CONCURRENT_TRANSACTIONS and starts aborting
/// it, which takes milliseconds; librdkafka asks again only after a fixed
/// 500 ms (`rd_kafka_idemp_pid_timer_restart`), which made the fence the
/// largest part of a restart (BENCHMARKS.md, #21). A new client asks at
/// once, so on that answer this one is dropped (it can no longer ask: its
/// retry timer dies with it) and a new one asks, up to [`FENCE_CLIENTS`]
/// times; then the last waits as librdkafka does.
fn fenced_client(
    c: &ClientConfig,
    transactional_id: &str,
) -> Result<ThreadedProducer<SinkContext>> {
    let started = Instant::now();
    let deadline = started + TXN_TIMEOUT;
    let mut client = new_client(c)?;
    let mut clients = 1;
    loop {
        let wait = if clients < FENCE_CLIENTS {
            FENCE_POLL
        } else {
            deadline.saturating_duration_since(Instant::now())
        };
        let e = match client.init_transactions(wait) {
            Ok(()) => {
                debug!(
                    transactional_id,
                    clients,
                    took_ms = started.elapsed().as_millis() as u64,
                    "producer fenced older instances"
                );
                return Ok(client);
            }
            Err(e) => e,
        };
        let code = e.rdkafka_error_code();
        let retriable = matches!(&e, KafkaError::Transaction(t) if t.is_retriable());
        if !retriable || Instant::now() >= deadline {
            return Err(txn_error(transactional_id, "init_transactions", e));
        }
        if code == Some(RDKafkaErrorCode::ConcurrentTransactions) && clients < FENCE_CLIENTS {
            debug!(
                transactional_id,
                clients, "the broker is aborting an older process's transaction; asking again with a new client"
            );
            drop(client);
            client = new_client(c)?;
            clients += 1;
        }
    }
}

/// The sink producer.
pub struct SinkProducer {
    inner: ThreadedProducer<SinkContext>,
    /// Topic handles for [`SinkProducer::send_batch`], destroyed before the
    /// client (see `Drop`).
    topics: Mutex<Vec<(String, TopicHandle)>>,
    transactional_id: Option<String>,
    /// When the open transaction began (exactly-once).
    txn_started: Mutex<Option<Instant>>,
    cancel: CancellationToken,
    /// Kept only by producers made [`SinkProducer::with_journal`].
    journal: Option<Mutex<Journal>>,
}

impl SinkProducer {
    /// Creates the producer. A transactional one runs `init_transactions`,
    /// which fences any older instance with the same transactional id and
    /// aborts the transaction it left open. Sends blocked on a full queue
    /// give up once `cancel` fires.
    pub fn create(c: &Config, cancel: CancellationToken) -> Result<Self> {
        Self::create_slot(c, 0, cancel)
    }

    /// [`SinkProducer::create`] for producer `slot` of the job: a
    /// transactional one has that slot's transactional id
    /// ([`Config::transactional_id_of_slot`]).
    pub fn create_slot(c: &Config, slot: usize, cancel: CancellationToken) -> Result<Self> {
        let transactional_id =
            (c.output.delivery == Delivery::ExactlyOnce).then(|| c.transactional_id_of_slot(slot));
        let mut config = producer_config(c);
        if let Some(id) = &transactional_id {
            config.set("transactional.id", id);
        }
        let inner = match &transactional_id {
            Some(id) => fenced_client(&config, id)?,
            None => new_client(&config)?,
        };
        let p = Self {
            inner,
            topics: Mutex::new(Vec::new()),
            transactional_id,
            txn_started: Mutex::new(None),
            cancel,
            journal: None,
        };
        Ok(p)
    }

    pub fn is_transactional(&self) -> bool {
        self.transactional_id.is_some()
    }

    /// Keeps a copy of what each transaction holds, so that it can be
    /// renewed ([`SinkProducer::renew_transaction`]); a transactional
    /// producer only. Costs a copy of every record's key and value.
    pub fn with_journal(mut self) -> Self {
        if self.is_transactional() {
            self.journal = Some(Mutex::new(Journal::default()));
        }
        self
    }

    /// Bytes of keys and values the open transaction holds (0 without a
    /// journal).
    pub fn journal_bytes(&self) -> usize {
        self.journal
            .as_ref()
            .map_or(0, |j| j.lock().expect("journal lock").bytes)
    }

    /// The journal, which `what` needs.
    fn journal(&self, what: &str) -> Result<&Mutex<Journal>> {
        self.journal.as_ref().ok_or_else(|| WeirError::Task {
            task: "sink".into(),
            reason: format!("{what} needs the producer's journal"),
        })
    }

    /// Aborts the open transaction and begins a new one holding the same
    /// records, so that what it holds can wait for its commit longer than
    /// `transaction.timeout.ms` allows one transaction to stay open.
    /// Nothing of the aborted one is ever visible to a read_committed
    /// reader. Requires the journal.
    pub fn renew_transaction(&self) -> Result<()> {
        self.suspend_transaction()?;
        self.resume_transaction()
    }

    /// Aborts the open transaction but keeps its journal, for
    /// [`SinkProducer::resume_transaction`]: work that may outlast the
    /// transaction's timeout (a restore) runs with none open. Nothing may
    /// be sent in between. Requires the journal.
    pub fn suspend_transaction(&self) -> Result<()> {
        self.journal("suspending a transaction")?;
        let aborted = self
            .inner
            .abort_transaction(Duration::from_secs(10))
            .map_err(|e| self.txn_error("abort_transaction (suspend)", e));
        *self.txn_started.lock().expect("txn lock") = None;
        aborted
    }

    /// Begins a transaction and sends into it what the journal holds.
    pub fn resume_transaction(&self) -> Result<()> {
        let journal = self.journal("resuming a transaction")?;
        let entries = {
            let mut j = journal.lock().expect("journal lock");
            j.bytes = 0;
            std::mem::take(&mut j.entries)
        };
        self.begin_transaction()?;
        for entry in entries {
            match entry {
                Entry::Batch {
                    topic,
                    partition,
                    batch,
                } => {
                    let sent = self
                        .send_batch_to(&topic, partition, &batch)
                        .map_err(|e| e.into_error(&topic))?;
                    if !sent.too_large.is_empty() {
                        return Err(WeirError::Task {
                            task: "sink".into(),
                            reason: format!(
                                "{} records to {topic:?} accepted before were refused as too \
                                 large when the transaction was renewed",
                                sent.too_large.len()
                            ),
                        });
                    }
                }
                Entry::One {
                    topic,
                    key,
                    value,
                    headers,
                    timestamp,
                } => self
                    .send(&topic, key.as_deref(), value.as_deref(), headers, timestamp)
                    .map_err(|e| e.into_error(&topic))?,
            }
        }
        Ok(())
    }

    /// How long the open transaction has been open.
    pub fn transaction_age(&self) -> Option<Duration> {
        self.txn_started
            .lock()
            .expect("txn lock")
            .map(|t| t.elapsed())
    }

    /// Enqueues one record; waits while librdkafka's queue is full, until
    /// the attempt is cancelled.
    pub fn send(
        &self,
        topic: &str,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: Option<OwnedHeaders>,
        timestamp: Option<i64>,
    ) -> std::result::Result<(), SendError> {
        let kept = self.journal.as_ref().map(|_| headers.clone());
        let mut record: BaseRecord<'_, [u8], [u8], ()> = BaseRecord::to(topic);
        record.key = key;
        record.payload = value;
        record.headers = headers;
        record.timestamp = timestamp;
        loop {
            match self.inner.send(record) {
                Ok(()) => {
                    if let (Some(journal), Some(headers)) = (&self.journal, kept) {
                        journal
                            .lock()
                            .expect("journal lock")
                            .push_one(topic, key, value, headers, timestamp);
                    }
                    return Ok(());
                }
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    if self.cancel.is_cancelled() {
                        return Err(SendError::Cancelled);
                    }
                    record = r;
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge), _)) => {
                    return Err(SendError::TooLarge {
                        bytes: key.map_or(0, <[u8]>::len) + value.map_or(0, <[u8]>::len),
                    })
                }
                Err((e, _)) => {
                    self.check()?;
                    return Err(self.txn_error(&format!("produce to {topic:?}"), e).into());
                }
            }
        }
    }

    /// The cached librdkafka handle of `topic`.
    fn topic_handle(&self, topic: &str) -> Result<*mut rdkafka::bindings::rd_kafka_topic_t> {
        let mut topics = self.topics.lock().expect("topic handles lock");
        if let Some((_, h)) = topics.iter().find(|(name, _)| name == topic) {
            return Ok(h.0);
        }
        let name = std::ffi::CString::new(topic).map_err(|_| WeirError::Task {
            task: "sink".into(),
            reason: format!("topic name {topic:?} holds a NUL byte"),
        })?;
        // SAFETY: the client is alive; a NULL configuration means the
        // producer's defaults. The handle is destroyed in `Drop`.
        let rkt = unsafe {
            rdkafka::bindings::rd_kafka_topic_new(
                self.inner.client().native_ptr(),
                name.as_ptr(),
                std::ptr::null_mut(),
            )
        };
        if rkt.is_null() {
            return Err(WeirError::Task {
                task: "sink".into(),
                reason: format!("librdkafka refused a handle for topic {topic:?}"),
            });
        }
        topics.push((topic.to_string(), TopicHandle(rkt)));
        Ok(rkt)
    }

    /// Enqueues a batch of records to `topic` with one
    /// `rd_kafka_produce_batch` call (per retry), partitioned by key as
    /// [`SinkProducer::send`] does; the batch is left as it was (a caller
    /// may keep it as a copy, or clear it for reuse). While librdkafka's
    /// queue is full it waits and retries from the first refused record:
    /// librdkafka refuses every record after that one too, so the order of
    /// records, and of one key's updates, is kept. Records refused for
    /// their size are returned for the bad-record policy.
    pub fn send_batch(
        &self,
        topic: &str,
        batch: &ProduceBatch,
    ) -> std::result::Result<BatchSent, SendError> {
        self.send_batch_to(topic, PARTITION_UA, batch)
    }

    /// [`SinkProducer::send_batch`] into one partition (the repartition
    /// topic's partition of a task), or by key with `PARTITION_UA`.
    pub fn send_batch_to(
        &self,
        topic: &str,
        partition: i32,
        batch: &ProduceBatch,
    ) -> std::result::Result<BatchSent, SendError> {
        use rdkafka::bindings as rd;
        use rdkafka::types::RDKafkaRespErr;
        let rkt = self.topic_handle(topic)?;
        let n = batch.len();
        let mut messages: Vec<rd::rd_kafka_message_t> = batch
            .records
            .iter()
            .map(|&(k, kl, v, vl)| rd::rd_kafka_message_t {
                err: RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR,
                rkt: std::ptr::null_mut(),
                partition,
                payload: batch.data[v..].as_ptr() as *mut std::ffi::c_void,
                len: vl,
                key: batch.data[k..].as_ptr() as *mut std::ffi::c_void,
                key_len: kl,
                offset: 0,
                _private: std::ptr::null_mut(),
            })
            .collect();
        let mut out = BatchSent::default();
        // Indices refused for their size: not in the transaction.
        let mut refused = Vec::new();
        let mut from = 0;
        while from < n {
            // SAFETY: `messages[from..]` points into `batch.data`, which
            // outlives the call; RD_KAFKA_MSG_F_COPY makes librdkafka copy
            // keys and values before it returns.
            unsafe {
                rd::rd_kafka_produce_batch(
                    rkt,
                    partition,
                    rd::RD_KAFKA_MSG_F_COPY as std::ffi::c_int,
                    messages[from..].as_mut_ptr(),
                    (n - from) as std::ffi::c_int,
                );
            }
            let mut retry_from = None;
            for (i, m) in messages.iter().enumerate().skip(from) {
                match m.err {
                    RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR => out.sent += 1,
                    RDKafkaRespErr::RD_KAFKA_RESP_ERR__QUEUE_FULL => {
                        retry_from = Some(i);
                        break;
                    }
                    RDKafkaRespErr::RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE => {
                        out.too_large
                            .push((batch.key(i).to_vec(), m.key_len + m.len));
                        refused.push(i);
                    }
                    code => {
                        self.check()?;
                        let e = KafkaError::MessageProduction(code.into());
                        return Err(self.txn_error(&format!("produce to {topic:?}"), e).into());
                    }
                }
            }
            let Some(i) = retry_from else { break };
            if self.cancel.is_cancelled() {
                return Err(SendError::Cancelled);
            }
            std::thread::sleep(Duration::from_millis(1));
            for m in &mut messages[i..] {
                m.err = RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR;
            }
            from = i;
        }
        if let Some(journal) = &self.journal {
            journal
                .lock()
                .expect("journal lock")
                .push_batch(topic, partition, batch, &refused);
        }
        Ok(out)
    }

    /// Fails if any delivery failed or the producer hit a fatal error.
    pub fn check(&self) -> Result<()> {
        if let Some((code, reason)) = self.inner.client().fatal_error() {
            // librdkafka raises fatal errors for idempotent and transactional
            // producers only; this producer is unusable, the code says why.
            let context = format!("producer fatal error: {reason}");
            let source = KafkaError::MessageProduction(code);
            return Err(
                if matches!(
                    code,
                    RDKafkaErrorCode::Fenced | RDKafkaErrorCode::ProducerFenced
                ) {
                    WeirError::ProducerFenced {
                        transactional_id: self.transactional_id.clone().unwrap_or_default(),
                        context,
                        source: Box::new(source),
                    }
                } else {
                    WeirError::kafka(context, source)
                },
            );
        }
        if let Some((context, e)) = self
            .inner
            .context()
            .first_error
            .lock()
            .expect("lock")
            .clone()
        {
            return Err(self.txn_error(&context, e));
        }
        Ok(())
    }

    /// Waits until everything enqueued so far is acknowledged: at-least-once
    /// output before its checkpoint exists, or a transaction's records in
    /// the log before the other producer sends the next epoch's.
    ///
    /// librdkafka's own flush, called directly: it sends at once (linger.ms
    /// counts as zero while it waits) and wakes as soon as the last record
    /// is acknowledged. rust-rdkafka's `flush` checks once, then polls for
    /// a fixed 100 ms before checking again, so that every flush with a
    /// record in flight took 100 ms or more.
    pub fn flush(&self) -> Result<()> {
        let timeout_ms = TXN_TIMEOUT.as_millis() as std::ffi::c_int;
        // SAFETY: the client is alive for the call.
        let code = unsafe {
            rdkafka::bindings::rd_kafka_flush(self.inner.client().native_ptr(), timeout_ms)
        };
        if code != rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR {
            self.check()?;
            return Err(WeirError::kafka(
                "flush producer",
                KafkaError::Flush(code.into()),
            ));
        }
        self.check()
    }

    /// Records enqueued but not yet acknowledged by the broker.
    pub fn in_flight(&self) -> i32 {
        self.inner.in_flight_count()
    }

    pub fn begin_transaction(&self) -> Result<()> {
        self.inner
            .begin_transaction()
            .map_err(|e| self.txn_error("begin_transaction", e))?;
        *self.txn_started.lock().expect("txn lock") = Some(Instant::now());
        Ok(())
    }

    pub fn abort_transaction(&self) -> Result<()> {
        if let Some(journal) = &self.journal {
            journal.lock().expect("journal lock").clear();
        }
        let result = self
            .inner
            .abort_transaction(Duration::from_secs(10))
            .map_err(|e| self.txn_error("abort_transaction", e));
        *self.txn_started.lock().expect("txn lock") = None;
        result
    }

    /// Adds the offsets to the open transaction and commits it. Calls that
    /// librdkafka reports as retriable are retried until [`TXN_TIMEOUT`].
    pub fn commit_transaction(
        &self,
        offsets: &TopicPartitionList,
        group: &ConsumerGroupMetadata,
    ) -> Result<()> {
        self.check()?;
        let deadline = Instant::now() + TXN_TIMEOUT;
        if offsets.count() > 0 {
            self.retrying("send_offsets_to_transaction", deadline, |p| {
                p.inner
                    .send_offsets_to_transaction(offsets, group, TXN_TIMEOUT)
            })?;
        }
        self.retrying("commit_transaction", deadline, |p| {
            p.inner.commit_transaction(TXN_TIMEOUT)
        })?;
        *self.txn_started.lock().expect("txn lock") = None;
        if let Some(journal) = &self.journal {
            journal.lock().expect("journal lock").clear();
        }
        Ok(())
    }

    fn retrying(
        &self,
        what: &str,
        deadline: Instant,
        mut call: impl FnMut(&Self) -> rdkafka::error::KafkaResult<()>,
    ) -> Result<()> {
        loop {
            match call(self) {
                Ok(()) => return Ok(()),
                Err(KafkaError::Transaction(e))
                    if e.is_retriable() && !e.is_fatal() && Instant::now() < deadline =>
                {
                    tracing::warn!(call = what, error = %e, "retriable transaction error; retrying");
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => return Err(self.txn_error(what, e)),
            }
        }
    }

    /// Classifies a producer error with librdkafka's own flags: a fatal
    /// error that says the producer was fenced (a newer instance took over,
    /// or the broker aborted the transaction after `transaction.timeout.ms`:
    /// Kafka 4 reports both alike), an error that requires aborting the
    /// transaction, and any other error. All restart the attempt, which
    /// creates a new producer; the restart first checks whether another
    /// instance owns the job now (`runtime::ownership`).
    fn txn_error(&self, what: &str, e: KafkaError) -> WeirError {
        txn_error(
            self.transactional_id.as_deref().unwrap_or_default(),
            what,
            e,
        )
    }
}

/// A failed transactional call as weir tells it apart: fenced, requiring an
/// abort, or any other Kafka error.
fn txn_error(transactional_id: &str, what: &str, e: KafkaError) -> WeirError {
    let transactional_id = transactional_id.to_string();
    let fenced_code = matches!(
        e.rdkafka_error_code(),
        Some(RDKafkaErrorCode::Fenced | RDKafkaErrorCode::ProducerFenced)
    );
    match &e {
        KafkaError::Transaction(rd) if rd.is_fatal() && fenced_code => WeirError::ProducerFenced {
            transactional_id,
            context: what.to_string(),
            source: Box::new(e),
        },
        KafkaError::Transaction(rd) if rd.txn_requires_abort() => WeirError::TransactionAborted {
            transactional_id,
            context: what.to_string(),
            source: Box::new(e),
        },
        _ => WeirError::kafka(what, e),
    }
}

impl Drop for SinkProducer {
    fn drop(&mut self) {
        // Topic handles go before the client they belong to (the fields
        // are dropped after this).
        for (_, h) in self.topics.lock().expect("topic handles lock").drain(..) {
            // SAFETY: created by rd_kafka_topic_new, destroyed once.
            unsafe { rdkafka::bindings::rd_kafka_topic_destroy(h.0) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::kafka::tests::config_with;

    #[test]
    fn user_properties_win_over_weir_defaults_but_not_over_what_weir_owns() {
        let c = config_with(
            "127.0.0.1:9092",
            "\"linger.ms\" = \"50\"\n\"delivery.report.only.error\" = \"false\"",
            "delivery = \"exactly-once\"",
        );
        let cc = producer_config(&c);
        assert_eq!(cc.get("linger.ms"), Some("50"));
        assert_eq!(cc.get("delivery.report.only.error"), Some("false"));
        assert_eq!(cc.get("enable.idempotence"), Some("true"));
        assert_eq!(cc.get("transactional.id"), Some("wc-0"));
    }

    /// A producer whose broker never answers (port 1), so nothing leaves
    /// librdkafka's queue, with `properties` as `[kafka.properties]`.
    fn unreachable_producer(properties: &str, cancel: CancellationToken) -> SinkProducer {
        let c = config_with("127.0.0.1:1", properties, "");
        SinkProducer::create(&c, cancel).unwrap()
    }

    /// Cancels `cancel` after `delay`, on another thread.
    fn cancel_after(cancel: &CancellationToken, delay: Duration) -> std::thread::JoinHandle<()> {
        let cancel = cancel.clone();
        std::thread::spawn(move || {
            std::thread::sleep(delay);
            cancel.cancel();
        })
    }

    #[test]
    fn a_batch_enqueues_in_one_call_and_hands_back_records_over_the_size_limit() {
        let p = unreachable_producer(r#""message.max.bytes" = "1000""#, CancellationToken::new());
        let mut batch = ProduceBatch::default();
        batch.push(b"a", b"1");
        batch.push(b"big", &[b'x'; 2000]);
        batch.push(b"c", b"3");
        let sent = p.send_batch("out", &batch).unwrap();
        assert_eq!(sent.sent, 2);
        assert_eq!(sent.too_large, vec![(b"big".to_vec(), 2003)]);
        assert_eq!(batch.len(), 3, "the batch is left as it was, for a copy");
        // in_flight also counts librdkafka's pending events (connection
        // errors here), so it can only be bounded from below.
        assert!(p.in_flight() >= 2, "{}", p.in_flight());
    }

    #[test]
    fn a_batch_blocked_on_a_full_queue_gives_up_when_the_attempt_is_cancelled() {
        let cancel = CancellationToken::new();
        let p = unreachable_producer(r#""queue.buffering.max.messages" = "3""#, cancel.clone());
        let mut batch = ProduceBatch::default();
        for i in 0..5u8 {
            batch.push(&[i], b"v");
        }
        let canceller = cancel_after(&cancel, Duration::from_millis(200));
        let started = std::time::Instant::now();
        let result = p.send_batch("out", &batch);
        assert!(matches!(result, Err(SendError::Cancelled)), "{result:?}");
        assert!(started.elapsed() < Duration::from_secs(5));
        // The first three went in (in_flight also counts pending events);
        // the rest waited for room, in order, until the cancel.
        assert!(p.in_flight() >= 3, "{}", p.in_flight());
        canceller.join().unwrap();
    }

    #[test]
    fn a_send_blocked_on_a_full_queue_gives_up_when_the_attempt_is_cancelled() {
        let cancel = CancellationToken::new();
        let p = unreachable_producer(r#""queue.buffering.max.messages" = "1""#, cancel.clone());
        p.send("out", Some(b"k"), Some(b"v"), None, None).unwrap();
        let canceller = cancel_after(&cancel, Duration::from_millis(200));
        let started = std::time::Instant::now();
        let second = p.send("out", Some(b"k"), Some(b"v"), None, None);
        assert!(matches!(second, Err(SendError::Cancelled)), "{second:?}");
        assert!(started.elapsed() < Duration::from_secs(5));
        canceller.join().unwrap();
    }
}
