//! The sink's side of the two-phase commit, behind a small trait.
//!
//! A checkpoint is *prepared* when its `_metadata` is durable; it is
//! *committed* when the commit point says so. With exactly-once delivery the
//! commit point is a Kafka transaction holding the epoch's output and the
//! checkpoint's source offsets (docs/checkpoint-protocol.md). The trait keeps
//! the Coordinator's protocol independent of Kafka, so that a deterministic
//! simulation (tests/simulation.rs) can drive the same protocol code
//! against an in-memory commit point with injected faults.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use rdkafka::consumer::ConsumerGroupMetadata;
use rdkafka::{Offset, TopicPartitionList};

use crate::error::{Result, WeirError};
use crate::kafka::checkpoint_marker;
use crate::kafka::producer::SinkProducer;

/// Next offset per source partition.
pub type Offsets = BTreeMap<(String, i32), i64>;

/// The offsets a commit makes visible with the epoch's output, each with
/// the metadata the group stores beside it. Single mode writes one
/// checkpoint's marker on every partition (`weir-checkpoint=N`); group mode
/// writes, on each task's repartition partition, the pointer to the task's
/// manifest, so that the offset and the state it belongs to are one
/// atomic fact.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommitOffsets(BTreeMap<(String, i32), (i64, String)>);

impl CommitOffsets {
    /// Every partition of `offsets` tied to checkpoint `checkpoint_id`.
    pub fn for_checkpoint(checkpoint_id: u64, offsets: &Offsets) -> Self {
        let marker = checkpoint_marker(checkpoint_id);
        Self(
            offsets
                .iter()
                .map(|(tp, o)| (tp.clone(), (*o, marker.clone())))
                .collect(),
        )
    }

    /// Adds (or replaces) one partition's next offset and metadata.
    pub fn insert(&mut self, topic: &str, partition: i32, offset: i64, metadata: String) {
        self.0
            .insert((topic.to_string(), partition), (offset, metadata));
    }

    /// Partition, next offset and metadata, in partition order.
    pub fn iter(&self) -> impl Iterator<Item = (&(String, i32), &(i64, String))> {
        self.0.iter()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The list librdkafka sends with a transaction.
    pub fn to_list(&self) -> Result<TopicPartitionList> {
        let mut tpl = TopicPartitionList::new();
        for ((t, p), (o, metadata)) in &self.0 {
            let mut e = tpl.add_partition(t, *p);
            e.set_offset(Offset::Offset(*o))
                .map_err(|e| WeirError::kafka("build offset list", e))?;
            e.set_metadata(metadata.as_str());
        }
        Ok(tpl)
    }
}

/// begin / write / prepare / commit / abort / recover, as a two-phase
/// committing sink. `write` is the data path and stays on the concrete
/// producer (one call per record); the rest is the protocol.
pub trait CommitPoint: Send + Sync {
    /// Whether output becomes visible only at commit (exactly-once).
    fn is_transactional(&self) -> bool;
    /// Opens the transaction of the next epoch.
    fn begin(&self) -> Result<()>;
    /// Phase one: everything of the epoch was written without error.
    /// Without a transaction it is also durable when this returns (the
    /// producer's queue is flushed): the checkpoint may then complete.
    fn prepare(&self) -> Result<()>;
    /// Waits until everything written so far is acknowledged by the
    /// broker: in its log (still invisible inside a transaction), so that
    /// nothing written later, through another producer, lands before it.
    fn flush(&self) -> Result<()>;
    /// Phase two: makes the epoch's output and `offsets` visible together,
    /// or fails with neither visible. The group checks the member's
    /// generation it was sent with: a commit from a member the group has
    /// moved past is refused (`engine::group::protocol::classify` says how).
    fn commit(&self, offsets: &CommitOffsets) -> Result<()>;
    /// Drops the open transaction and its output.
    fn abort(&self) -> Result<()>;
    /// How long the open transaction has been open.
    fn transaction_age(&self) -> Option<Duration>;
    /// Aborts the open transaction and begins another holding the same
    /// output, so that an epoch whose checkpoint is late can wait for it
    /// longer than one transaction may stay open. Group mode only (its
    /// producer keeps a journal); single mode never needs it, since its
    /// snapshots are local.
    fn renew(&self) -> Result<()> {
        Err(WeirError::Task {
            task: "commit".into(),
            reason: "this commit point cannot renew its transaction".into(),
        })
    }
}

/// The Kafka commit point: the sink producer's transaction, committed with
/// the consumer group's metadata so that offsets and output are atomic.
pub struct KafkaCommitPoint {
    pub producer: std::sync::Arc<SinkProducer>,
    /// Present whenever the producer is transactional. Single mode's never
    /// changes; a group-mode instance sets it before each commit
    /// ([`Self::set_group`]), because every rebalance moves its generation.
    group: Mutex<Option<ConsumerGroupMetadata>>,
}

impl KafkaCommitPoint {
    /// The commit point of an attempt, with the group's metadata a
    /// transaction sends its offsets with (KIP-447 fencing); refused when a
    /// transactional producer has none to send.
    pub fn for_group(
        producer: std::sync::Arc<crate::kafka::producer::SinkProducer>,
        group: &rdkafka::consumer::BaseConsumer,
    ) -> crate::error::Result<Self> {
        use rdkafka::consumer::Consumer;
        let metadata = group.group_metadata();
        if producer.is_transactional() && metadata.is_none() {
            return Err(crate::error::WeirError::Task {
                task: "coordinator".into(),
                reason: "consumer group metadata unavailable for the transaction".into(),
            });
        }
        Ok(Self {
            producer,
            group: Mutex::new(metadata),
        })
    }

    /// A group-mode instance's commit point: the group's metadata is set
    /// before each commit.
    pub fn for_instance(producer: std::sync::Arc<SinkProducer>) -> Self {
        Self {
            producer,
            group: Mutex::new(None),
        }
    }

    /// The member's current group metadata (generation and member id),
    /// which the next commit is sent with.
    pub fn set_group(&self, metadata: Option<ConsumerGroupMetadata>) {
        *self.group.lock().expect("group metadata lock") = metadata;
    }
}

impl CommitPoint for KafkaCommitPoint {
    fn is_transactional(&self) -> bool {
        self.producer.is_transactional()
    }

    fn begin(&self) -> Result<()> {
        self.producer.begin_transaction()
    }

    fn prepare(&self) -> Result<()> {
        if self.producer.is_transactional() {
            // commit_transaction flushes the epoch's output itself.
            self.producer.check()
        } else {
            self.producer.flush()
        }
    }

    fn flush(&self) -> Result<()> {
        self.producer.flush()
    }

    fn commit(&self, offsets: &CommitOffsets) -> Result<()> {
        let group = self.group.lock().expect("group metadata lock");
        let group = group.as_ref().ok_or_else(|| WeirError::Task {
            task: "commit".into(),
            reason: "consumer group metadata unavailable for the transaction".into(),
        })?;
        self.producer.commit_transaction(&offsets.to_list()?, group)
    }

    fn abort(&self) -> Result<()> {
        self.producer.abort_transaction()
    }

    fn transaction_age(&self) -> Option<Duration> {
        self.producer.transaction_age()
    }

    fn renew(&self) -> Result<()> {
        self.producer.renew_transaction()
    }
}

/// The rule that keeps every transaction inside `transaction.timeout.ms`:
/// a failed checkpoint leaves the transaction open for the next one, but
/// only while the next one can still commit it in time. Otherwise the
/// attempt restarts from the last checkpoint (aborting the transaction)
/// before the broker would abort it on its own.
#[derive(Debug, Clone, Copy)]
pub struct TransactionBudget {
    pub transaction_timeout: Duration,
    pub interval: Duration,
    pub checkpoint_timeout: Duration,
}

impl TransactionBudget {
    /// The budget a job's configuration sets: `transaction.timeout.ms`
    /// (or librdkafka's default), the interval and the checkpoint timeout.
    pub fn from_config(config: &crate::config::Config) -> Self {
        Self {
            transaction_timeout: Duration::from_millis(
                config
                    .transaction_timeout_ms()
                    .unwrap_or(crate::config::DEFAULT_TRANSACTION_TIMEOUT_MS),
            ),
            interval: config.checkpoint.interval,
            checkpoint_timeout: config.checkpoint.timeout,
        }
    }

    /// Time kept for the commit call itself.
    pub fn margin(&self) -> Duration {
        (self.transaction_timeout / 10).min(Duration::from_secs(5))
    }

    /// Whether a transaction of `age` can live through one more checkpoint
    /// (wait for the next trigger, the checkpoint, the commit).
    pub fn allows_another_checkpoint(&self, age: Duration) -> bool {
        age + self.interval + self.checkpoint_timeout + self.margin() < self.transaction_timeout
    }

    /// Whether a transaction of `age` must be renewed now (group mode,
    /// while a late checkpoint uploads): twice the commit's margin before
    /// its timeout, time to abort it and send its output again.
    pub fn must_renew(&self, age: Duration) -> bool {
        age + 2 * self.margin() >= self.transaction_timeout
    }

    /// The latest moment, from now, at which a checkpoint triggered now must
    /// have all its acks, so that its commit still fits.
    pub fn ack_deadline(&self, age: Duration) -> Duration {
        self.checkpoint_timeout.min(
            self.transaction_timeout
                .saturating_sub(age)
                .saturating_sub(self.margin()),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_stops_before_the_transaction_timeout() {
        let b = TransactionBudget {
            transaction_timeout: Duration::from_secs(60),
            interval: Duration::from_secs(10),
            checkpoint_timeout: Duration::from_secs(20),
        };
        assert_eq!(b.margin(), Duration::from_secs(5));
        assert!(b.allows_another_checkpoint(Duration::ZERO));
        assert!(b.allows_another_checkpoint(Duration::from_secs(24)));
        assert!(!b.allows_another_checkpoint(Duration::from_secs(25)));
        assert_eq!(b.ack_deadline(Duration::ZERO), Duration::from_secs(20));
        assert_eq!(
            b.ack_deadline(Duration::from_secs(40)),
            Duration::from_secs(15)
        );
    }
}
