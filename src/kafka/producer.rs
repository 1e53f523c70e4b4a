//! The sink's producer: one per weir process, shared by every sink subtask.
//!
//! With `delivery = "at-least-once"` it is idempotent and flushed at every
//! barrier. With `"exactly-once"` it is transactional: transaction N holds
//! exactly the output of epoch N, and the Coordinator commits it together
//! with the source offsets of checkpoint N (`send_offsets_to_transaction`),
//! which makes the Kafka commit the commit point of the checkpoint.

use std::sync::Mutex;
use std::time::Duration;

use rdkafka::client::ClientContext;
use rdkafka::consumer::ConsumerGroupMetadata;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{DeliveryResult, Message, OwnedHeaders};
use rdkafka::producer::{BaseRecord, Producer, ProducerContext, ThreadedProducer};
use rdkafka::TopicPartitionList;

use crate::config::{Config, Delivery, DEFAULT_TRANSACTION_TIMEOUT_MS};
use crate::error::{Result, WeirError};

/// How long transactional calls may take before the attempt fails.
const TXN_TIMEOUT: Duration = Duration::from_secs(60);

/// Remembers the first failed delivery; librdkafka reports it on its own
/// thread, the sink checks it at the next barrier.
#[derive(Default)]
pub struct SinkContext {
    first_error: Mutex<Option<String>>,
}

impl ClientContext for SinkContext {}

impl ProducerContext for SinkContext {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((e, m)) = result {
            let mut slot = self.first_error.lock().expect("delivery error lock");
            if slot.is_none() {
                *slot = Some(format!(
                    "delivery to {}/{} failed: {e}",
                    m.topic(),
                    m.partition()
                ));
            }
        }
    }
}

/// The sink producer.
pub struct SinkProducer {
    inner: ThreadedProducer<SinkContext>,
    transactional_id: Option<String>,
}

impl SinkProducer {
    /// Creates the producer. A transactional one runs `init_transactions`,
    /// which fences any older instance with the same transactional id and
    /// aborts the transaction it left open.
    pub fn create(c: &Config) -> Result<Self> {
        let mut cc = super::base_config(c);
        // Compression is left to [kafka.properties] ("compression.type"):
        // it costs CPU per record that not every deployment wants to pay.
        // Delivery reports only for failures: the sink only looks at those,
        // and a report per record costs a core's share at high rates.
        cc.set("enable.idempotence", "true")
            .set("linger.ms", "5")
            .set("delivery.report.only.error", "true");
        let transactional_id =
            (c.sink.delivery == Delivery::ExactlyOnce).then(|| c.transactional_id());
        if let Some(id) = &transactional_id {
            let timeout = c
                .kafka
                .properties
                .get("transaction.timeout.ms")
                .cloned()
                .unwrap_or_else(|| DEFAULT_TRANSACTION_TIMEOUT_MS.to_string());
            cc.set("transactional.id", id)
                .set("transaction.timeout.ms", timeout);
        }
        let inner: ThreadedProducer<SinkContext> =
            cc.create_with_context(SinkContext::default())
                .map_err(|e| WeirError::kafka("create producer", e))?;
        let p = Self {
            inner,
            transactional_id,
        };
        if p.transactional_id.is_some() {
            p.inner
                .init_transactions(TXN_TIMEOUT)
                .map_err(|e| p.txn_error("init_transactions", e))?;
        }
        Ok(p)
    }

    pub fn is_transactional(&self) -> bool {
        self.transactional_id.is_some()
    }

    /// Enqueues one record; waits while librdkafka's queue is full.
    pub fn send(
        &self,
        topic: &str,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: Option<OwnedHeaders>,
    ) -> Result<()> {
        let mut record: BaseRecord<'_, [u8], [u8], ()> = BaseRecord::to(topic);
        record.key = key;
        record.payload = value;
        record.headers = headers;
        loop {
            match self.inner.send(record) {
                Ok(()) => return Ok(()),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    record = r;
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err((e, _)) => {
                    self.check()?;
                    return Err(self.txn_error(&format!("produce to {topic:?}"), e));
                }
            }
        }
    }

    /// Fails if any delivery failed or the producer hit a fatal error.
    pub fn check(&self) -> Result<()> {
        if let Some((code, reason)) = self.inner.client().fatal_error() {
            return Err(self.classify(&format!("producer fatal error {code:?}: {reason}"), code));
        }
        if let Some(e) = self
            .inner
            .context()
            .first_error
            .lock()
            .expect("lock")
            .clone()
        {
            return Err(WeirError::Task {
                task: "sink".into(),
                reason: e,
            });
        }
        Ok(())
    }

    /// Waits until everything enqueued so far is acknowledged (at-least-once).
    pub fn flush(&self) -> Result<()> {
        self.inner
            .flush(TXN_TIMEOUT)
            .map_err(|e| WeirError::kafka("flush producer", e))?;
        self.check()
    }

    pub fn begin_transaction(&self) -> Result<()> {
        self.inner
            .begin_transaction()
            .map_err(|e| self.txn_error("begin_transaction", e))
    }

    pub fn abort_transaction(&self) -> Result<()> {
        self.inner
            .abort_transaction(Duration::from_secs(10))
            .map_err(|e| self.txn_error("abort_transaction", e))
    }

    /// Adds the offsets to the open transaction and commits it.
    pub fn commit_transaction(
        &self,
        offsets: &TopicPartitionList,
        group: &ConsumerGroupMetadata,
    ) -> Result<()> {
        self.check()?;
        if offsets.count() > 0 {
            self.inner
                .send_offsets_to_transaction(offsets, group, TXN_TIMEOUT)
                .map_err(|e| self.txn_error("send_offsets_to_transaction", e))?;
        }
        self.inner
            .commit_transaction(TXN_TIMEOUT)
            .map_err(|e| self.txn_error("commit_transaction", e))
    }

    fn txn_error(&self, what: &str, e: KafkaError) -> WeirError {
        match e.rdkafka_error_code() {
            Some(code) => self.classify(&format!("{what}: {e}"), code),
            None => WeirError::kafka(what, e),
        }
    }

    fn classify(&self, detail: &str, code: RDKafkaErrorCode) -> WeirError {
        match code {
            RDKafkaErrorCode::Fenced
            | RDKafkaErrorCode::ProducerFenced
            | RDKafkaErrorCode::InvalidProducerEpoch
            | RDKafkaErrorCode::TransactionCoordinatorFenced => WeirError::Fenced {
                transactional_id: self.transactional_id.clone().unwrap_or_default(),
                detail: detail.to_string(),
            },
            _ => WeirError::Task {
                task: "sink".into(),
                reason: detail.to_string(),
            },
        }
    }
}
