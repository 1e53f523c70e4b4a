//! The instance's thread: the group consumer, its rebalance callbacks and
//! the poll loop (docs/scale-out.md). What a callback or a turn of the loop
//! does to the instance's partitions and tasks is in the sibling modules
//! (`assignment`, `inputs`, `epoch`); this module holds when each runs:
//! - the rebalance callbacks ([`GroupContext`]) run inside `poll`, on the
//!   instance's thread; a revocation commits before the partitions go
//!   (`engine::group::protocol::commit_before_revocation`; a lost assignment never
//!   commits);
//! - the loop and the attempt ([`poll_loop`], [`run_instance`]);
//! - the group consumer as the epoch's [`Membership`] (the epoch itself,
//!   its commit through `CommitPoint` and what a refusal means, is
//!   `engine::group::protocol`);
//! - reading the group's committed offsets, resuming partitions, and the
//!   consumer's configuration.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::client::ClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, RebalanceProtocol};
use rdkafka::statistics::Statistics;
use rdkafka::types::{RDKafkaErrorCode, RDKafkaRespErr};
use rdkafka::{Message, TopicPartitionList};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use super::protocol::Membership;
use super::{Consumer_, GraphInstance, EAGER_UPLOAD_INTERVAL};
use crate::config::{Config, GroupProtocol};
use crate::error::{Result, WeirError};
use crate::kafka::{self, REQUEST_TIMEOUT};
use crate::observe::metrics::Metrics;
use crate::runtime::commit::{CommitOffsets, CommitPoint};
use crate::runtime::query::QueryFailure;
use crate::runtime::source::WATERMARK_INTERVAL;
use crate::runtime::JobShared;
use crate::state::key_groups::subtask_for_key_group;

/// The group consumer's context: rebalance callbacks and consumer lag.
pub struct GroupContext {
    pub instance: Arc<Mutex<GraphInstance>>,
    pub metrics: Arc<Metrics>,
    /// Set once the loop is over and the consumer leaves the group: an
    /// assignment that still arrives (while it closes) is not placed, since
    /// reading committed offsets from a closing consumer waits out its
    /// timeout, and nothing will be read from it.
    pub leaving: AtomicBool,
}

impl ClientContext for GroupContext {
    fn stats(&self, stats: Statistics) {
        kafka::report_lag(&self.metrics, &stats);
    }
}

impl ConsumerContext for GroupContext {
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
                    .on_revoke(consumer, tpl, lost);
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
    // Every partition is assigned at an explicit offset (`GraphInstance::
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

/// Joins the job's group with `instance`, runs its loop, and on an error
/// abandons the attempt: cancels, leaves the group, aborts the open
/// transaction.
#[allow(clippy::too_many_arguments)]
pub(super) fn run_instance(
    config: &Config,
    instance: GraphInstance,
    topics: &[String],
    commit: &dyn CommitPoint,
    cancel: &CancellationToken,
    shared: &JobShared,
    progressed: &Arc<AtomicBool>,
) -> Result<()> {
    let instance = Arc::new(Mutex::new(instance));
    let consumer: Consumer_ = group_consumer_config(config)
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

/// An instance's loop: poll, restore what was assigned, process, commit
/// every epoch, answer queries; on a stop request a final commit.
fn poll_loop(
    consumer: &Consumer_,
    instance: &Arc<Mutex<GraphInstance>>,
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
        if !inst.assignment.pending.is_empty() && inst.activatable()? {
            // The open epoch commits first: the restores must not run
            // inside a transaction the broker times out after
            // `transaction.timeout.ms` (downloads run off this thread
            // before, but linking and opening a large task still take
            // time). A refused commit rewinds, and the rewound partitions
            // are restored with the new ones.
            inst.commit(consumer, false)?;
            sought = inst.activate(consumer)?;
        }
        // Ready once every assigned partition is restored (an instance
        // the group gave nothing is ready too).
        shared
            .ready
            .store(inst.assignment.pending.is_empty(), Ordering::Relaxed);
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
            inst.commit(consumer, false)?;
            progressed.store(true, Ordering::Relaxed);
        }
        if inst.drained() {
            info!("drained: the repartition topics' records are processed and committed");
            shared.stop.store(true, Ordering::Relaxed);
        }
    }
}

/// How long a drain waits, after its last commit, for a record to read
/// before it counts the repartition topics as drained: longer than a
/// fetch of what that commit made visible takes.
const DRAIN_QUIET: Duration = Duration::from_secs(3);

/// What the rebalance callbacks and the loop above ask of the instance
/// besides its partitions' work. Every method runs on the instance's
/// thread: `fail` and `assigned` inside `poll` (a rebalance callback), the
/// rest between polls.
impl GraphInstance {
    /// Rebalance callback: the attempt cannot go on (an error inside a
    /// callback, which cannot return one); the loop ends it at its next
    /// turn.
    pub(super) fn fail(&mut self, error: WeirError) {
        self.failed.get_or_insert(error);
    }

    /// Rebalance callback: partitions were assigned (and paused); the loop
    /// restores them (`activate`).
    pub(super) fn assigned(&mut self, partitions: Vec<(String, i32)>) {
        self.assignment.pending.extend(partitions);
    }

    /// Loop: nothing was read, so what is gathered goes out.
    fn idle(&mut self) -> Result<()> {
        self.flush()
    }

    /// Loop, once per turn: sends the source partitions' watermarks and
    /// queues new snapshot files for upload when their time has come, and
    /// says whether the epoch should end now.
    fn due(&mut self) -> bool {
        // One clock read per turn of the loop.
        let now = Instant::now();
        if now.duration_since(self.sources.last_marks) >= WATERMARK_INTERVAL {
            self.poll_source_marks();
        }
        if now.duration_since(self.epoch.last_eager_upload) >= EAGER_UPLOAD_INTERVAL {
            self.upload_new_files();
        }
        if !self.epoch.dirty {
            return false;
        }
        if self.epoch.behind {
            // A declined checkpoint's files are uploading: the next one
            // starts once they are on storage, or now when the output held
            // reached its bound (its wait then blocks until they are);
            // meanwhile the transaction is renewed before it times out.
            return !self.waiting_for_uploads() || self.renewal_due();
        }
        self.epoch.last_commit.elapsed() >= self.config.checkpoint.interval
    }

    /// Loop, every turn: whether a drain (`weir savepoint`) is done: every
    /// partition is restored, everything read is committed, and nothing
    /// was read for [`DRAIN_QUIET`] since. Its sources are paused, so only
    /// the tasks' own writes could still come; `savepoint::take` checks
    /// the topics after the instance has left.
    fn drained(&self) -> bool {
        self.epoch.drain
            && self.assignment.pending.is_empty()
            && (!self.tasks.is_empty() || !self.sources.partitions.is_empty())
            && !self.epoch.dirty
            && !self.epoch.behind
            && self.epoch.last_commit.elapsed() >= DRAIN_QUIET
    }

    /// Loop, on a stop request: the final commit, one epoch even with
    /// nothing new to commit when the instance owns partitions.
    fn commit_to_stop(&mut self, consumer: &Consumer_) -> Result<()> {
        if !self.tasks.is_empty() || !self.sources.partitions.is_empty() {
            self.epoch.dirty = true;
        }
        self.commit(consumer, true)
    }

    /// Loop: the error a callback met, if any.
    fn take_failed(&mut self) -> Option<WeirError> {
        self.failed.take()
    }

    /// Loop, when the attempt ends in an error: callbacks must not commit
    /// any more.
    fn abandon(&mut self) {
        self.abandoned = true;
    }

    /// Loop, every turn: answers the interactive queries waiting for this
    /// instance, each on the task that owns its key.
    fn answer_queries(&mut self) {
        let c = self.config.clone();
        for (stage, slot, uid, queries) in &self.queries {
            while let Ok(q) = queries.try_recv() {
                let task = subtask_for_key_group(q.key_group, c.scale.tasks, c.job.max_parallelism);
                match self.tasks.get_mut(&(*stage, task)) {
                    Some(t) => {
                        // What it has read, applied first.
                        if let Err(e) = t.core.push_batch() {
                            self.failed.get_or_insert(e);
                        }
                        t.core.chain.answer(*slot, q, Some(task))
                    }
                    None => {
                        let _ = q.reply.send(Err(QueryFailure::NotHere {
                            task,
                            message: format!(
                                "key {:?} of {uid} is in task {task} of stage {:?}, which \
                                 instance {} does not own now; GET /tasks on each instance \
                                 shows which owns it",
                                q.key,
                                self.graph.nodes[self.plan.stages[*stage].entry.head].uid,
                                c.instance()
                            ),
                        }));
                    }
                }
            }
        }
    }
}
