//! What every instance of a job in group mode shares (docs/scale-out.md);
//! `crate::engine::group` is the instance that runs a job graph on it.
//!
//! The instance is one thread around one consumer of the job's group,
//! subscribed to the input topics and the repartition topics; Kafka assigns
//! it some partitions of each. This module holds what does not depend on
//! what the instance computes:
//! - the rebalance callbacks ([`Rebalancing`], [`GroupContext`]): they run
//!   inside `poll`, on the instance's thread; a revocation commits before
//!   the partitions go (`scale::epoch::commit_before_revocation`; a lost
//!   assignment never commits);
//! - the loop and the attempt ([`GroupWork`], [`poll_loop`],
//!   [`run_instance`]);
//! - the group consumer as the epoch's [`Membership`] (the epoch itself,
//!   its commit through `CommitPoint` and what a refusal means, is
//!   `scale::epoch`);
//! - reading the group's committed offsets, resuming partitions, and the
//!   consumer's configuration.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::client::ClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, RebalanceProtocol};
use rdkafka::message::BorrowedMessage;
use rdkafka::statistics::Statistics;
use rdkafka::types::{RDKafkaErrorCode, RDKafkaRespErr};
use rdkafka::{Message, TopicPartitionList};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use crate::config::{Config, GroupProtocol};
use crate::error::{Result, WeirError};
use crate::kafka::{self, REQUEST_TIMEOUT};
use crate::observe::metrics::Metrics;
use crate::runtime::commit::{CommitOffsets, CommitPoint};
use crate::runtime::JobShared;
use crate::scale::epoch::Membership;

pub use crate::runtime::assignment::Ownership;

/// What an instance does when the group moves partitions (both the
/// built-in pipeline's instance and a job graph's).
pub trait Rebalancing: Send + Sized + 'static {
    /// Partitions are being taken away: commit what they hold (unless the
    /// assignment was `lost` or the attempt is failing), then let them go.
    fn revoked(
        &mut self,
        consumer: &BaseConsumer<GroupContext<Self>>,
        tpl: &TopicPartitionList,
        lost: bool,
    );
    /// Partitions are about to be assigned: set each one's position in
    /// `tpl` (an offset, never a logical one), so that librdkafka starts
    /// fetching exactly there and no seek is needed.
    fn place(
        &mut self,
        consumer: &BaseConsumer<GroupContext<Self>>,
        tpl: &mut TopicPartitionList,
    ) -> Result<()>;
    /// Partitions were assigned (and paused): restore them in the loop.
    fn assigned(&mut self, partitions: Vec<(String, i32)>);
    /// The attempt cannot go on (an error inside a callback, which cannot
    /// return one): the loop ends it at its next turn.
    fn fail(&mut self, error: WeirError);
}

/// The group consumer's context: rebalance callbacks and consumer lag.
pub struct GroupContext<I> {
    pub instance: Arc<Mutex<I>>,
    pub metrics: Arc<Metrics>,
    /// Set once the loop is over and the consumer leaves the group: an
    /// assignment that still arrives (while it closes) is not placed, since
    /// reading committed offsets from a closing consumer waits out its
    /// timeout, and nothing will be read from it.
    pub leaving: AtomicBool,
}

impl<I: Rebalancing> ClientContext for GroupContext<I> {
    fn stats(&self, stats: Statistics) {
        kafka::report_lag(&self.metrics, &stats);
    }
}

impl<I: Rebalancing> ConsumerContext for GroupContext<I> {
    /// rust-rdkafka's own callback assigns what the group gives with no
    /// position, which leaves it to the committed offset or to
    /// `auto.offset.reset`, and a seek afterwards races the fetcher (an
    /// asynchronous seek on a partition whose fetcher has not started is
    /// dropped; a synchronous one fails). weir assigns each partition at
    /// the offset its checkpoint names, read here before the assignment.
    fn rebalance(
        &self,
        consumer: &BaseConsumer<Self>,
        err: RDKafkaRespErr,
        tpl: &mut TopicPartitionList,
    ) {
        let cooperative = matches!(
            consumer.rebalance_protocol(),
            RebalanceProtocol::Cooperative
        );
        let unassign = |tpl: &TopicPartitionList, what: &str| {
            let unassigned = if cooperative {
                consumer.incremental_unassign(tpl)
            } else {
                consumer.unassign()
            };
            if let Err(e) = unassigned {
                warn!(error = %e, "unassigning {what} failed");
            }
        };
        match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                let mut inst = self.instance.lock().expect("instance lock");
                if self.leaving.load(Ordering::Relaxed) {
                    // Nothing is placed or read any more.
                } else if let Err(e) = inst.place(consumer, tpl) {
                    // Assigned anyway (the rebalance must complete) and
                    // paused; the loop ends the attempt before any read.
                    inst.fail(e);
                }
                let assigned = if cooperative {
                    consumer.incremental_assign(tpl)
                } else {
                    consumer.assign(tpl)
                };
                if let Err(e) = assigned {
                    inst.fail(WeirError::kafka("assign partitions", e));
                }
                // Nothing is read before its state is restored (in the
                // loop, not here). A record fetched before the pause is
                // discarded by librdkafka (the pause is a new fetch
                // version), and reading resumes where the assignment put it.
                if let Err(e) = consumer.pause(tpl) {
                    inst.fail(WeirError::kafka("pause newly assigned partitions", e));
                }
                let mut partitions = Vec::new();
                for e in tpl.elements() {
                    info!(
                        topic = e.topic(),
                        partition = e.partition(),
                        offset = ?e.offset(),
                        "partition assigned"
                    );
                    partitions.push((e.topic().to_string(), e.partition()));
                }
                inst.assigned(partitions);
            }
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => {
                let lost = consumer.assignment_lost();
                self.instance
                    .lock()
                    .expect("instance lock")
                    .revoked(consumer, tpl, lost);
                unassign(tpl, "revoked partitions");
            }
            other => {
                let code: RDKafkaErrorCode = other.into();
                warn!(error = %code, "rebalance error");
                // As rust-rdkafka's own callback answers an error.
                unassign(tpl, "after a rebalance error");
            }
        }
    }
}

/// The partitions newly `assigned` as a list, and the group's committed
/// offsets (with their checkpoint pointers) for them, read_committed: the
/// read waits for a previous owner's open transaction, which the broker
/// aborts after `transaction.timeout.ms` at the latest.
pub(crate) fn committed_offsets<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    config: &Config,
    assigned: &[(String, i32)],
) -> Result<(TopicPartitionList, TopicPartitionList)> {
    let mut tpl = TopicPartitionList::new();
    for (t, p) in assigned {
        tpl.add_partition(t, *p);
    }
    let wait = Duration::from_millis(
        config
            .transaction_timeout_ms()
            .unwrap_or(crate::config::DEFAULT_TRANSACTION_TIMEOUT_MS),
    ) + REQUEST_TIMEOUT;
    let committed = consumer
        .committed_offsets(tpl.clone(), wait)
        .map_err(|e| WeirError::kafka("read the group's committed offsets", e))?;
    Ok((tpl, committed))
}

/// Lets the restored and sought partitions `tpl` be read.
pub(crate) fn resume<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    tpl: &TopicPartitionList,
    started: Instant,
) -> Result<()> {
    consumer
        .resume(tpl)
        .map_err(|e| WeirError::kafka("resume assigned partitions", e))?;
    info!(
        partitions = tpl.count(),
        took_ms = started.elapsed().as_millis() as u64,
        since_start_ms = crate::observe::since_process_start().as_millis() as u64,
        "assigned partitions restored and resumed"
    );
    Ok(())
}

/// A revoked partition's lag is its new owner's to report now: a stale
/// value here would count it twice in a sum over instances.
pub(crate) fn forget_lag(metrics: &Metrics, (topic, partition): &(String, i32)) {
    let _ = metrics
        .consumer_lag
        .remove_label_values(&[topic.as_str(), &partition.to_string()]);
}

/// The group consumer as the epoch protocol sees it.
impl<C: ConsumerContext> Membership for BaseConsumer<C> {
    fn lost(&self) -> bool {
        self.assignment_lost()
    }

    fn foreign(&self, offsets: &CommitOffsets) -> Result<Vec<String>> {
        let assigned = self
            .assignment()
            .map_err(|e| WeirError::kafka("read the assignment", e))?;
        Ok(offsets
            .iter()
            .filter(|((t, p), _)| assigned.find_partition(t, *p).is_none())
            .map(|((t, p), _)| format!("{t}/{p}"))
            .collect())
    }
}

/// The group consumer's configuration: weir's consumer settings plus the
/// group protocol.
pub(crate) fn group_consumer_config(c: &Config) -> rdkafka::ClientConfig {
    let mut cc = kafka::consumer_config(c);
    match c.scale.group_protocol {
        GroupProtocol::Consumer => {
            cc.set("group.protocol", "consumer");
        }
        GroupProtocol::Classic => {
            cc.set("partition.assignment.strategy", "cooperative-sticky");
        }
    }
    // Every partition is assigned at an explicit offset (`Rebalancing::
    // place`): a fetch position out of range (records deleted by
    // retention while being read, a log truncated) is an error, not a
    // silent jump to either end of the partition.
    cc.set("auto.offset.reset", "error");
    // Names the instance among the group's members for people and tools
    // (`weir reset`), and for instances of builds before issue #38, which
    // tell a live instance by it: a build of today goes by member ids
    // (`GraphInstance::fence_dead_owners`), so a `client.id` of the user's
    // own changes nothing.
    if !c.kafka.properties.contains_key("client.id") {
        cc.set(
            "client.id",
            kafka::members::instance_client_id(c.instance()),
        );
    }
    if !c.kafka.properties.contains_key("statistics.interval.ms") {
        cc.set("statistics.interval.ms", "1000");
    }
    cc
}

/// How long a fetch position out of range waits for the group to say
/// whether this instance was fenced (two heartbeats at the broker's default
/// `group.consumer.heartbeat.interval.ms` of 5 s) before it is reported as
/// records deleted under the instance.
const FENCING_VERDICT: Duration = Duration::from_secs(10);

/// A writer id unique to this process attempt.
pub(crate) fn writer_id() -> String {
    // 128 random bits: a pid and a clock collide across containers (pid 1
    // in each) and hosts, and a writer id names objects no other writer may
    // write.
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).expect("the operating system's random source");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Joins the job's group with `instance`, runs its loop, and on an error
/// abandons the attempt: cancels, leaves the group, aborts the open
/// transaction.
#[allow(clippy::too_many_arguments)]
pub fn run_instance<I: GroupWork>(
    config: &Config,
    instance: I,
    topics: &[String],
    commit: &dyn CommitPoint,
    cancel: &CancellationToken,
    shared: &JobShared,
    progressed: &Arc<AtomicBool>,
) -> Result<()> {
    let instance = Arc::new(Mutex::new(instance));
    let consumer: BaseConsumer<GroupContext<I>> = group_consumer_config(config)
        .create_with_context(GroupContext {
            instance: instance.clone(),
            metrics: shared.metrics.clone(),
            leaving: AtomicBool::new(false),
        })
        .map_err(|e| WeirError::kafka("create group consumer", e))?;
    let topics: Vec<&str> = topics.iter().map(String::as_str).collect();
    consumer
        .subscribe(&topics)
        .map_err(|e| WeirError::kafka("subscribe", e))?;
    let outcome = poll_loop(&consumer, &instance, shared, progressed);
    if let Err(e) = &outcome {
        cancel.cancel();
        instance.lock().expect("instance lock").abandon();
        error!(error = %e.report(), "instance attempt failed; aborting its transaction");
    }
    // Leaving the group hands the partitions to the others at once. On
    // success the revocation finds nothing left to commit.
    consumer.context().leaving.store(true, Ordering::Relaxed);
    consumer.unsubscribe();
    drop(consumer);
    if outcome.is_err() {
        match commit.abort() {
            Ok(()) => shared.metrics.transactions_aborted.inc(),
            Err(e) => {
                warn!(error = %e.report(), "the open transaction could not be aborted; the broker aborts it after transaction.timeout.ms")
            }
        }
    }
    outcome
}

/// The work of one group-mode instance, driven by [`poll_loop`].
pub trait GroupWork: Rebalancing {
    fn on_message(&mut self, m: &BorrowedMessage<'_>) -> Result<()>;
    /// Nothing was read: send what is gathered.
    fn idle(&mut self) -> Result<()>;
    fn due(&mut self) -> bool;
    fn commit(&mut self, consumer: &BaseConsumer<GroupContext<Self>>) -> Result<()>;
    /// The stop path's final commit: one epoch even with nothing new to
    /// commit, when the instance owns partitions.
    fn commit_to_stop(&mut self, consumer: &BaseConsumer<GroupContext<Self>>) -> Result<()>;
    fn housekeeping(&mut self, stopping: bool);
    fn take_failed(&mut self) -> Option<WeirError>;
    /// The attempt is ending: callbacks must not commit any more.
    fn abandon(&mut self);
    /// Assigned partitions not restored yet.
    fn pending(&self) -> &[(String, i32)];
    /// Whether some pending partition can be restored now (others may wait
    /// for their checkpoint to be made ready locally, off the poll thread).
    fn activatable(&mut self) -> Result<bool>;
    /// Restores the pending partitions that can be and resumes them;
    /// returns those it had to seek (see [`poll_loop`]).
    fn activate(
        &mut self,
        consumer: &BaseConsumer<GroupContext<Self>>,
    ) -> Result<Vec<(String, i32)>>;
    /// Answers the interactive queries waiting for this instance.
    fn answer_queries(&mut self);
}

/// An instance's loop: poll, restore what was assigned, process, commit
/// every epoch, answer queries; on a stop request a final commit.
pub fn poll_loop<I: GroupWork>(
    consumer: &BaseConsumer<GroupContext<I>>,
    instance: &Arc<Mutex<I>>,
    shared: &JobShared,
    progressed: &Arc<AtomicBool>,
) -> Result<()> {
    let mut first_read = false;
    loop {
        if shared.stop.load(Ordering::Relaxed) {
            let mut inst = instance.lock().expect("instance lock");
            // Even with nothing new: the commit is what proves this
            // instance still owns its tasks before their final collection
            // (a zombie's is refused, and it then collects nothing).
            inst.commit_to_stop(consumer)?;
            // A member that lost its assignment holds a stale view of its
            // tasks and must not collect their storage.
            if consumer.assignment_lost() {
                return Err(WeirError::GroupFenced {
                    instance: shared
                        .ownership
                        .lock()
                        .expect("ownership lock")
                        .instance
                        .clone(),
                    context: "assignment lost before the final collection".into(),
                });
            }
            inst.housekeeping(true);
            info!("stop requested: final commit done; leaving the group");
            return Ok(());
        }
        let msg = consumer.poll(Duration::from_millis(10));
        let mut inst = instance.lock().expect("instance lock");
        inst.answer_queries();
        if let Some(e) = inst.take_failed() {
            return Err(e);
        }
        // Partitions sought back in this iteration (a rewind after a
        // refused commit; newly assigned ones are assigned at their
        // position and need no seek). The message polled above, if it is
        // from one of them, was fetched before the seek: at a position the
        // restore no longer matches (ahead of the committed offset).
        // Applying it would move the position past records the seek
        // fetches again, which the below-position check would then skip:
        // lost updates. It is dropped; the seek re-reads it.
        let mut sought: Vec<(String, i32)> = Vec::new();
        if !inst.pending().is_empty() && inst.activatable()? {
            // The open epoch commits first: the restores must not run
            // inside a transaction the broker times out after
            // `transaction.timeout.ms` (downloads run off this thread
            // before, but linking and opening a large task still take
            // time). A refused commit rewinds, and the rewound partitions
            // are restored with the new ones.
            inst.commit(consumer)?;
            sought = inst.activate(consumer)?;
        }
        // Ready once every assigned partition is restored (an instance
        // the group gave nothing is ready too).
        shared
            .ready
            .store(inst.pending().is_empty(), Ordering::Relaxed);
        match msg {
            None => inst.idle()?,
            Some(Err(e)) => {
                if let Some((code, reason)) = consumer.client().fatal_error() {
                    return Err(WeirError::Task {
                        task: "group consumer".into(),
                        reason: format!("fatal error {code:?}: {reason}"),
                    });
                }
                if e.rdkafka_error_code() == Some(RDKafkaErrorCode::AutoOffsetReset) {
                    // `auto.offset.reset = error`: going on would skip or
                    // re-read records without a word. The restart assigns
                    // each partition at its committed offset again, and one
                    // whose records retention deleted starts at its first
                    // offset with a warning naming it and a metric.
                    //
                    // An instance paused past its session (a zombie) meets
                    // this too: the task's new owner committed past its
                    // position and trimmed the repartition topic below it.
                    // The group says so at its next heartbeat; that verdict
                    // is the one to report (the attempt ends either way,
                    // so what is polled meanwhile is dropped).
                    drop(inst);
                    let deadline = Instant::now() + FENCING_VERDICT;
                    while Instant::now() < deadline {
                        let _ = consumer.poll(Duration::from_millis(100));
                        if let Some(fenced) = instance.lock().expect("instance lock").take_failed()
                        {
                            return Err(fenced);
                        }
                    }
                    return Err(WeirError::Task {
                        task: "group consumer".into(),
                        reason: format!(
                            "a partition's fetch position is out of range ({e}): its records \
                             were deleted (retention) or its log truncated while it was read"
                        ),
                    });
                }
                warn!(error = %e, "consumer error");
            }
            Some(Ok(m)) => {
                if !first_read {
                    first_read = true;
                    info!(
                        topic = m.topic(),
                        partition = m.partition(),
                        offset = m.offset(),
                        since_start_ms = crate::observe::since_process_start().as_millis() as u64,
                        "first record read"
                    );
                }
                let stale = sought
                    .iter()
                    .any(|(t, p)| t == m.topic() && *p == m.partition());
                if stale {
                    debug!(
                        topic = m.topic(),
                        partition = m.partition(),
                        offset = m.offset(),
                        "dropped a record fetched before its partition's restore and seek"
                    );
                } else {
                    inst.on_message(&m)?;
                }
            }
        }
        if inst.due() {
            inst.commit(consumer)?;
            progressed.store(true, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    /// Writer ids are 128 bits in hex, and no two are alike (the old
    /// `<pid><nanos><counter>` ids of two containers' pid-1 processes could
    /// be).
    #[test]
    fn writer_ids_are_random_128_bit_hex() {
        let ids: std::collections::BTreeSet<String> =
            (0..1000).map(|_| super::writer_id()).collect();
        assert_eq!(ids.len(), 1000);
        assert!(ids
            .iter()
            .all(|id| id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit())));
    }
}
