//! One instance of a job in group mode (docs/scale-out.md).
//!
//! The instance is one thread around one consumer of the job's group,
//! subscribed to the input topics and the repartition topic. Kafka assigns
//! it some of each:
//! - an **input partition** runs the stateless steps and writes each
//!   update to the repartition partition of its key group's task;
//! - a **repartition partition** is a keyed **task**: one RocksDB, fed in
//!   partition order, writing results to the sink.
//!
//! Every epoch (`checkpoint.interval`) the instance snapshots each changed
//! task, uploads what storage lacks and writes the task's manifest, then
//! commits one transaction holding its repartition writes, its output and
//! the offsets of every partition it owns; each task offset carries the
//! pointer to its manifest. The commit is the checkpoint: a task's state
//! is exactly the manifest its committed offset names.
//!
//! Rebalance callbacks run inside `poll`, on this thread. A revocation
//! commits before the partitions go (a lost assignment never commits: the
//! attempt fails and its transaction is aborted). New partitions are
//! paused in the callback and restored in the loop: committed offset and
//! pointer, state from a local copy (hard links) or from storage, seek,
//! resume.

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::client::ClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use rdkafka::message::BorrowedMessage;
use rdkafka::statistics::Statistics;
use rdkafka::{Message, Offset, TopicPartitionList};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use super::checkpoints;
use super::manifest::{self, ManifestFile, TaskManifest};
use super::repartition;
use super::storage::SharedStorage;
use crate::checkpoint::StateHandle;
use crate::config::{Config, GroupProtocol, StartPosition, SOURCE_UID};
use crate::error::{Result, WeirError};
use crate::kafka::producer::{ProduceBatch, SinkProducer};
use crate::kafka::{self, REQUEST_TIMEOUT};
use crate::observe::metrics::Metrics;
use crate::operators::aggregate::AggregateOperator;
use crate::operators::Pipeline;
use crate::runtime::gate::EpochGate;
use crate::runtime::operator::Operator;
use crate::runtime::output::Output;
use crate::runtime::query::{KeyState, QueryFailure, StateQuery};
use crate::runtime::source::bad_record;
use crate::runtime::{DeadLetter, JobShared, Update};
use crate::state::key_groups::{key_group, range_for_subtask, subtask_for_key_group};
use crate::state::KeyedState;

/// Records per repartition batch call.
const REPARTITION_BATCH: usize = 1024;
/// How often storage is garbage-collected and the repartition topic trimmed.
const HOUSEKEEPING_INTERVAL: Duration = Duration::from_secs(10);

pub use crate::runtime::assignment::Ownership;

/// A keyed task this instance owns.
struct Task {
    id: u32,
    operator: AggregateOperator,
    output: Output,
    /// Next repartition offset; None until the first record or a restore.
    next: Option<i64>,
    /// The manifest of the last checkpoint taken, and of the last committed.
    pointer: Option<String>,
    committed: Option<String>,
    /// SST files already in storage, by local name.
    uploaded: HashMap<String, ManifestFile>,
    /// Names this incarnation's objects: a task restored again (after a
    /// reset, or when it comes back) continues RocksDB's file numbers from
    /// its checkpoint, so an SST name may repeat with other contents.
    writer: String,
    changed: bool,
    dir: PathBuf,
}

/// The instance's state, shared between the poll loop and the rebalance
/// callbacks (which run inside `poll`, on the same thread).
pub struct Instance {
    config: Arc<Config>,
    metrics: Arc<Metrics>,
    producer: Arc<SinkProducer>,
    storage: SharedStorage,
    topic: String,
    pipeline: Pipeline,
    uid: String,
    /// Unique per process attempt: names its objects and manifests.
    writer: String,
    seq: u64,
    /// Epochs committed by this attempt.
    epoch: u64,
    /// Tasks restored by this attempt (each gets its own writer id).
    incarnations: u64,
    inputs: BTreeMap<(String, i32), Option<i64>>,
    tasks: BTreeMap<u32, Task>,
    /// Assigned in a callback, paused, not yet restored.
    pending: Vec<(String, i32)>,
    failed: Option<WeirError>,
    /// Set when the attempt is ending: callbacks must not commit.
    abandoned: bool,
    batches: Vec<ProduceBatch>,
    /// Bad input records go to the dead-letter topic through this.
    dead_letters: Output,
    scratch: Vec<(String, f64, i64)>,
    value_buf: Vec<u8>,
    /// Something was read since the last commit.
    dirty: bool,
    last_commit: Instant,
    last_housekeeping: Instant,
    ownership: Arc<Mutex<Ownership>>,
    /// Interactive queries for the tasks it owns.
    queries: crossbeam_channel::Receiver<StateQuery>,
    cancel: CancellationToken,
}

pub(crate) enum CommitRefusal {
    Migrated(WeirError),
    Fenced(WeirError),
    Other(WeirError),
}

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
    /// Partitions were assigned (and paused): restore them in the loop.
    fn assigned(&mut self, partitions: Vec<(String, i32)>);
}

/// The group consumer's context: rebalance callbacks and consumer lag.
pub struct GroupContext<I> {
    pub instance: Arc<Mutex<I>>,
    pub metrics: Arc<Metrics>,
}

impl<I: Rebalancing> ClientContext for GroupContext<I> {
    fn stats(&self, stats: Statistics) {
        kafka::report_lag(&self.metrics, &stats);
    }
}

impl<I: Rebalancing> ConsumerContext for GroupContext<I> {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(tpl) = rebalance {
            let lost = consumer.assignment_lost();
            let mut inst = self.instance.lock().expect("instance lock");
            inst.revoked(consumer, tpl, lost);
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(tpl) => {
                // Nothing is read before its state is restored and its
                // position set (in the loop, not here).
                if let Err(e) = consumer.pause(tpl) {
                    warn!(error = %e, "pausing newly assigned partitions failed");
                }
                let mut partitions = Vec::new();
                for e in tpl.elements() {
                    info!(
                        topic = e.topic(),
                        partition = e.partition(),
                        "partition assigned"
                    );
                    partitions.push((e.topic().to_string(), e.partition()));
                }
                self.instance
                    .lock()
                    .expect("instance lock")
                    .assigned(partitions);
            }
            Rebalance::Revoke(_) => {}
            Rebalance::Error(e) => warn!(error = %e, "rebalance error"),
        }
    }
}

impl Rebalancing for Instance {
    fn revoked(&mut self, consumer: &GroupConsumer, tpl: &TopicPartitionList, lost: bool) {
        self.on_revoke(consumer, tpl, lost);
    }

    fn assigned(&mut self, partitions: Vec<(String, i32)>) {
        self.pending.extend(partitions);
    }
}

type GroupConsumer = BaseConsumer<GroupContext<Instance>>;

impl Instance {
    fn task_dir(&self, task: u32) -> PathBuf {
        self.config
            .job_state_dir()
            .join("tasks")
            .join(format!("{task:04}"))
    }

    fn publish_ownership(&self) {
        let mut o = self.ownership.lock().expect("ownership lock");
        o.instance = self.config.instance().to_string();
        o.tasks = self.tasks.keys().copied().collect();
        o.inputs = self
            .inputs
            .keys()
            .map(|(t, p)| format!("{t}/{p}"))
            .collect();
        o.committed = self
            .tasks
            .values()
            .filter_map(|t| Some((t.id, t.committed.clone()?)))
            .collect();
    }

    /// Partitions are being taken away: commit what they hold (unless the
    /// assignment was lost or the attempt is failing), then let them go.
    fn on_revoke(&mut self, consumer: &GroupConsumer, tpl: &TopicPartitionList, lost: bool) {
        if !self.abandoned && self.failed.is_none() {
            let instance = self.config.instance().to_string();
            self.failed =
                commit_before_revocation(lost, &instance, tpl.count(), || self.commit(consumer));
        }
        for e in tpl.elements() {
            let tp = (e.topic().to_string(), e.partition());
            info!(
                topic = e.topic(),
                partition = e.partition(),
                "partition revoked"
            );
            self.pending.retain(|p| *p != tp);
            forget_lag(&self.metrics, &tp);
            if tp.0 == self.topic {
                self.tasks.remove(&(tp.1 as u32));
            } else {
                self.inputs.remove(&tp);
            }
        }
        self.publish_ownership();
    }

    /// Restores the partitions assigned since the last call and lets them
    /// be read.
    fn activate(&mut self, consumer: &GroupConsumer) -> Result<()> {
        let pending = std::mem::take(&mut self.pending);
        let started = Instant::now();
        let (tpl, committed) = committed_offsets(consumer, &self.config, &pending)?;
        for e in committed.elements() {
            let (topic, partition) = (e.topic().to_string(), e.partition());
            let offset = match e.offset() {
                Offset::Offset(o) => Some(o),
                _ => None,
            };
            let position = if topic == self.topic {
                let task = self.restore_task(partition as u32, offset, e.metadata())?;
                self.tasks.insert(partition as u32, task);
                offset.map_or(Offset::Beginning, Offset::Offset)
            } else {
                self.inputs.insert((topic.clone(), partition), offset);
                match (offset, self.config.source.start) {
                    (Some(o), _) => Offset::Offset(o),
                    (None, StartPosition::Earliest) => Offset::Beginning,
                    (None, StartPosition::Latest) => Offset::End,
                }
            };
            // Asynchronous (timeout 0): a blocking seek waits on the
            // partition's fetcher, which may itself wait for the group's
            // stable offsets. The seek discards whatever was fetched before.
            consumer
                .seek(&topic, partition, position, Duration::ZERO)
                .map_err(|e| WeirError::kafka(format!("seek {topic}/{partition}"), e))?;
        }
        resume(consumer, &tpl, started)?;
        self.publish_ownership();
        Ok(())
    }

    /// Opens task `id`'s state: exactly the checkpoint its committed offset
    /// names, or empty when the group has no offset for it yet.
    fn restore_task(&mut self, id: u32, offset: Option<i64>, metadata: &str) -> Result<Task> {
        let c = &self.config;
        let range = range_for_subtask(id, c.scale.tasks, c.job.max_parallelism);
        let dir = self.task_dir(id);
        let db = dir.join("db");
        fs::create_dir_all(dir.join("snapshots")).map_err(|e| WeirError::io(&dir, e))?;
        let (state, pointer, uploaded) = match (offset, manifest::parse_pointer(metadata)) {
            (None, _) => {
                if db.exists() {
                    fs::remove_dir_all(&db).map_err(|e| WeirError::io(&db, e))?;
                }
                info!(
                    task = id,
                    "task starts with empty state: the group has no offset for it"
                );
                (
                    KeyedState::open(&db, c.state.cache_entries)?,
                    None,
                    HashMap::new(),
                )
            }
            (Some(o), None) => {
                return Err(WeirError::Recovery(format!(
                    "task {id}: the group committed offset {o} of {}/{id} without a checkpoint \
                     pointer (metadata {metadata:?}); its state cannot be found, and weir does not \
                     start a task from empty state in its place",
                    self.topic
                )))
            }
            (Some(o), Some(key)) => {
                let started = Instant::now();
                let label = format!("task {id}");
                let m = checkpoints::load_manifest(&self.storage, &label, key)?;
                if m.task != id || m.key_groups != range || m.offset != o {
                    return Err(WeirError::Recovery(format!(
                        "task {id}: checkpoint {key} in {} is of task {} with key groups {:?} at \
                         offset {}, but the group's pointer is for task {id}, key groups {range:?}, \
                         offset {o}",
                        self.storage.location, m.task, m.key_groups, m.offset
                    )));
                }
                let snapshots = dir.join("snapshots");
                let (folder, how) = match checkpoints::local_copy(&snapshots, key, &m) {
                    Some(f) => (f, "hard links from a local copy"),
                    None => (
                        checkpoints::download(&self.storage, &snapshots, &label, key, &m)?,
                        "download",
                    ),
                };
                let handle = StateHandle {
                    uid: self.uid.clone(),
                    subtask: id,
                    key_groups: range,
                    path: ".".into(),
                    size_bytes: m.size_bytes(),
                    files: Vec::new(),
                };
                let state =
                    KeyedState::restore(&db, c.state.cache_entries, &folder, &[&handle], range)?;
                info!(
                    task = id,
                    checkpoint = key,
                    bytes = m.size_bytes(),
                    how,
                    took_ms = started.elapsed().as_millis() as u64,
                    "task restored"
                );
                (
                    state,
                    Some(key.to_string()),
                    checkpoints::uploaded_files(&m),
                )
            }
        };
        let mut state = state;
        state.backend.flush_on_snapshot = true;
        let operator = AggregateOperator::new(
            self.uid.clone(),
            self.pipeline.clone(),
            c.sink.emit,
            state,
            c.state.cache_entries,
        );
        self.incarnations += 1;
        Ok(Task {
            id,
            operator,
            output: self.output(id),
            writer: format!("{}-{}", self.writer, self.incarnations),
            next: offset,
            committed: pointer.clone(),
            pointer,
            uploaded,
            changed: false,
            dir,
        })
    }

    fn output(&self, subtask: u32) -> Output {
        let c = &self.config;
        Output::new(
            self.uid.clone(),
            subtask,
            self.producer.clone(),
            c.sink.topic.clone(),
            c.source.dead_letter_topic.clone(),
            c.source.on_bad_record,
            // Commits happen on this thread between records: the gate
            // never holds anything back.
            Arc::new(EpochGate::new(0)),
            self.metrics.clone(),
            self.cancel.clone(),
        )
    }

    /// One record from the consumer.
    fn on_message(&mut self, m: &BorrowedMessage<'_>) -> Result<()> {
        let (topic, partition, offset) = (m.topic(), m.partition(), m.offset());
        if topic == self.topic {
            let Some(task) = self.tasks.get_mut(&(partition as u32)) else {
                // Read before its restore (it is sought back) or after revocation.
                return Ok(());
            };
            if task.next.is_some_and(|next| offset < next) {
                // Already in the state: a record fetched before the seek to
                // the restored position. Applying it again would count it twice.
                warn!(task = task.id, offset, next = ?task.next, "skipped a repartition record already applied");
                return Ok(());
            }
            let key = m
                .key()
                .map(|k| String::from_utf8_lossy(k).into_owned())
                .unwrap_or_default();
            let (value, timestamp) =
                repartition::decode(m.payload().unwrap_or_default()).map_err(|reason| {
                    WeirError::BadRecord {
                        topic: topic.to_string(),
                        partition,
                        offset,
                        reason,
                    }
                })?;
            let update = Update {
                key_group: key_group(key.as_bytes(), self.config.job.max_parallelism),
                key,
                value,
                timestamp,
                origin: None,
            };
            task.operator.on_update(update, &mut task.output)?;
            task.next = Some(offset + 1);
            task.changed = true;
            self.dirty = true;
            return Ok(());
        }
        let tp = (topic.to_string(), partition);
        let Some(next) = self.inputs.get_mut(&tp) else {
            return Ok(());
        };
        if next.is_some_and(|n| offset < n) {
            warn!(topic, partition, offset, next = ?*next, "skipped an input record already processed");
            return Ok(());
        }
        *next = Some(offset + 1);
        self.dirty = true;
        self.metrics
            .records_in
            .with_label_values(&[SOURCE_UID])
            .inc();
        self.scratch.clear();
        let scratch = &mut self.scratch;
        let extracted =
            self.pipeline
                .extract(m.payload(), m.timestamp().to_millis(), None, |k, v, ts| {
                    scratch.push((k, v, ts))
                });
        match extracted {
            Ok(()) => {
                let (tasks, max_p) = (self.config.scale.tasks, self.config.job.max_parallelism);
                let mut updates = std::mem::take(&mut self.scratch);
                for (key, value, timestamp) in updates.drain(..) {
                    let kg = key_group(key.as_bytes(), max_p);
                    let t = subtask_for_key_group(kg, tasks, max_p);
                    repartition::encode(value, timestamp, &mut self.value_buf);
                    let batch = &mut self.batches[t as usize];
                    batch.push(key.as_bytes(), &self.value_buf);
                    if batch.len() >= REPARTITION_BATCH {
                        self.send_repartition(t)?;
                    }
                }
                self.scratch = updates;
                Ok(())
            }
            Err(reason) => {
                let policy = self.config.source.on_bad_record;
                match bad_record(policy, &self.metrics, topic, partition, offset, reason)? {
                    None => Ok(()),
                    Some(error) => self.dead_letters.dead_letter(Box::new(DeadLetter {
                        key: m.key().map(<[u8]>::to_vec),
                        value: m.payload().map(<[u8]>::to_vec),
                        error,
                        topic: topic.to_string(),
                        partition,
                        offset,
                        headers: Vec::new(),
                    })),
                }
            }
        }
    }

    fn send_repartition(&mut self, task: u32) -> Result<()> {
        let batch = &mut self.batches[task as usize];
        if batch.is_empty() {
            return Ok(());
        }
        let sent = self
            .producer
            .send_batch_to(&self.topic, task as i32, batch)
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

    /// Answers a query from the task that owns the key's group, if this
    /// instance owns it and has restored it.
    fn answer(&mut self, q: StateQuery) {
        let c = &self.config;
        let task = subtask_for_key_group(q.key_group, c.scale.tasks, c.job.max_parallelism);
        let answer = match self.tasks.get_mut(&task) {
            Some(t) => t
                .operator
                .query(q.key_group, &q.key)
                .map(|state| KeyState {
                    task: Some(task),
                    ..state
                })
                .map_err(|e| QueryFailure::Failed(e.report().to_string())),
            None => Err(QueryFailure::NotHere {
                task,
                message: format!(
                    "key {:?} is in task {task}, which instance {} does not own now; \
                     GET /tasks on each instance shows which owns it",
                    q.key,
                    c.instance()
                ),
            }),
        };
        let _ = q.reply.send(answer);
    }

    /// Sends what is gathered: repartition batches and task output.
    fn flush(&mut self) -> Result<()> {
        for t in 0..self.batches.len() as u32 {
            self.send_repartition(t)?;
        }
        for task in self.tasks.values_mut() {
            task.output.flush_batch()?;
        }
        Ok(())
    }

    fn due(&self) -> bool {
        self.dirty && self.last_commit.elapsed() >= self.config.checkpoint.interval
    }

    /// The epoch's checkpoint and commit: snapshot and upload each changed
    /// task, then one transaction with the offsets and their pointers.
    fn commit(&mut self, consumer: &GroupConsumer) -> Result<()> {
        if !self.dirty {
            return Ok(());
        }
        let started = Instant::now();
        self.flush()?;
        let mut offsets = TopicPartitionList::new();
        for ((t, p), next) in &self.inputs {
            if let Some(o) = next {
                offsets
                    .add_partition_offset(t, *p, Offset::Offset(*o))
                    .map_err(|e| WeirError::kafka("build offset list", e))?;
            }
        }
        let ids: Vec<u32> = self.tasks.keys().copied().collect();
        let mut uploaded_bytes = 0u64;
        for id in ids {
            let mut task = self.tasks.remove(&id).expect("task listed");
            let result = self.checkpoint_task(&mut task, &mut uploaded_bytes);
            self.tasks.insert(id, task);
            if let Some((next, pointer)) = result? {
                let mut e = offsets.add_partition(&self.topic, id as i32);
                e.set_offset(Offset::Offset(next))
                    .map_err(|e| WeirError::kafka("build offset list", e))?;
                e.set_metadata(manifest::pointer(&pointer));
            }
        }
        let prepared = started.elapsed();
        if let Committed::Refused(cause) =
            commit_epoch(consumer, &self.producer, self.config.instance(), &offsets)?
        {
            return self.reset_to_committed(&cause);
        }
        self.metrics.transactions_committed.inc();
        self.epoch += 1;
        self.metrics.checkpoint_completed(
            self.epoch,
            started.elapsed().as_secs_f64(),
            uploaded_bytes,
        );
        self.dirty = false;
        self.last_commit = Instant::now();
        for task in self.tasks.values_mut() {
            task.committed = task.pointer.clone();
            task.changed = false;
            checkpoints::remove_stale_snapshots(
                &task.dir.join("snapshots"),
                task.committed.as_deref(),
            );
        }
        debug!(
            partitions = offsets.count(),
            uploaded_bytes,
            prepare_ms = prepared.as_millis() as u64,
            took_ms = started.elapsed().as_millis() as u64,
            "epoch committed"
        );
        self.publish_ownership();
        if self.last_housekeeping.elapsed() >= HOUSEKEEPING_INTERVAL {
            self.housekeeping(false);
        }
        Ok(())
    }

    /// After a commit the group refused in a rebalance: aborts the epoch
    /// and takes every partition back to its committed offset and state
    /// (a local restore by hard links), without leaving the group.
    fn reset_to_committed(&mut self, cause: &WeirError) -> Result<()> {
        warn!(
            error = %cause.report(),
            "the group refused the commit (its assignment changed meanwhile); aborting the epoch \
             and resuming every partition from its committed checkpoint"
        );
        self.producer.abort_transaction()?;
        self.metrics.transactions_aborted.inc();
        self.producer.begin_transaction()?;
        for b in &mut self.batches {
            b.clear();
        }
        // Closes each RocksDB before its restore opens the same folder.
        let tasks = std::mem::take(&mut self.tasks);
        self.pending
            .extend(tasks.keys().map(|id| (self.topic.clone(), *id as i32)));
        drop(tasks);
        let inputs = std::mem::take(&mut self.inputs);
        self.pending.extend(inputs.into_keys());
        self.dirty = false;
        self.last_commit = Instant::now();
        self.publish_ownership();
        Ok(())
    }

    /// Snapshots and uploads a task that changed since its last checkpoint;
    /// returns its offset and pointer, if it has an offset to commit.
    fn checkpoint_task(
        &mut self,
        task: &mut Task,
        uploaded_bytes: &mut u64,
    ) -> Result<Option<(i64, String)>> {
        task.operator.before_snapshot(&mut task.output)?;
        task.output.flush_batch()?;
        let Some(next) = task.next else {
            return Ok(None);
        };
        if !task.changed {
            if let Some(p) = &task.pointer {
                return Ok(Some((next, p.clone())));
            }
        }
        self.seq += 1;
        let seq = self.seq;
        let snapshots = task.dir.join("snapshots");
        fs::create_dir_all(&snapshots).map_err(|e| WeirError::io(&snapshots, e))?;
        let target = snapshots.join(format!("{}-{seq:08}", task.writer));
        let snapshot = task.operator.snapshot(&target)?;
        let prefix = manifest::task_prefix(task.id);
        let files = checkpoints::upload(
            &self.storage,
            &prefix,
            &task.writer,
            seq,
            &target,
            &snapshot.files,
            &mut task.uploaded,
            uploaded_bytes,
        )?;
        let c = &self.config;
        let m = TaskManifest {
            format: manifest::FORMAT,
            job: c.job.name.clone(),
            operator_uid: self.uid.clone(),
            task: task.id,
            tasks: c.scale.tasks,
            key_groups: range_for_subtask(task.id, c.scale.tasks, c.job.max_parallelism),
            max_parallelism: c.job.max_parallelism,
            instance: c.instance().to_string(),
            writer: task.writer.clone(),
            seq,
            created_ms: crate::observe::now_ms(),
            offset: next,
            files,
            graph: None,
        };
        let key = checkpoints::write_manifest(&self.storage, &m, &target)?;
        task.pointer = Some(key.clone());
        Ok(Some((next, key)))
    }

    /// Garbage collection of owned tasks' storage and trimming of their
    /// repartition partitions. Failures are logged: the next run retries.
    fn housekeeping(&mut self, stopping: bool) {
        self.last_housekeeping = Instant::now();
        let grace = (2 * self.config.checkpoint.timeout).as_millis() as i64;
        let mut trim = Vec::new();
        for task in self.tasks.values() {
            let Some(committed) = task.committed.as_deref() else {
                continue;
            };
            if let Some(next) = task.next {
                trim.push((task.id as i32, next));
            }
            // Every incarnation of a task in this attempt: `<writer>-<n>`.
            let own = format!("{}-", self.writer);
            let collected = checkpoints::collect(
                &self.storage,
                &manifest::task_prefix(task.id),
                committed,
                self.config.checkpoint.retained,
                grace,
                stopping.then_some(own.as_str()),
            );
            match collected {
                Ok(n) if n > 0 => debug!(task = task.id, deleted = n, "storage garbage collected"),
                Ok(_) => {}
                Err(e) => {
                    warn!(task = task.id, error = %e.report(), "storage garbage collection failed; retried later")
                }
            }
        }
        if let Err(e) = repartition::trim(&self.config, &self.topic, &trim) {
            warn!(error = %e.report(), "trimming the repartition topic failed; retried later");
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

/// Partitions are being taken away: unless the assignment was `lost` (a
/// lost one never commits: the attempt fails and its transaction is
/// aborted), `commit` what they hold first. Returns the failure that ends
/// the attempt, if any.
pub(crate) fn commit_before_revocation(
    lost: bool,
    instance: &str,
    partitions: usize,
    commit: impl FnOnce() -> Result<()>,
) -> Option<WeirError> {
    if lost {
        warn!("the group took this instance's partitions (assignment lost); not committing");
        return Some(WeirError::GroupFenced {
            instance: instance.to_string(),
            context: "assignment lost: the session timed out or the member was fenced".into(),
        });
    }
    let started = Instant::now();
    match commit() {
        Ok(()) => {
            info!(
                partitions,
                took_ms = started.elapsed().as_millis() as u64,
                "committed before revocation"
            );
            None
        }
        Err(e) => {
            error!(error = %e.report(), "commit before revocation failed; the attempt aborts");
            Some(e)
        }
    }
}

/// What became of an epoch's transaction.
pub(crate) enum Committed {
    /// Committed, and the next transaction begun.
    Yes,
    /// The group refused it in a rebalance (the work migrated; nothing is
    /// wrong): the caller aborts the epoch and resumes from what the group
    /// committed.
    Refused(WeirError),
}

/// Commits an instance's epoch: its writes and `offsets` (with their
/// checkpoint pointers) in one transaction, sent with the group's
/// metadata so that a member whose generation moved on is refused. Only
/// what librdkafka still counts as assigned may be committed: a partition
/// it took away (a lost or fenced membership not yet reported to the loop)
/// belongs to another member now. Err for a zombie or any other failure.
pub(crate) fn commit_epoch<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    producer: &SinkProducer,
    instance: &str,
    offsets: &TopicPartitionList,
) -> Result<Committed> {
    if consumer.assignment_lost() {
        return Err(WeirError::GroupFenced {
            instance: instance.to_string(),
            context: "assignment lost before the commit".into(),
        });
    }
    let assigned = consumer
        .assignment()
        .map_err(|e| WeirError::kafka("read the assignment", e))?;
    let foreign: Vec<String> = offsets
        .elements()
        .iter()
        .filter(|e| assigned.find_partition(e.topic(), e.partition()).is_none())
        .map(|e| format!("{}/{}", e.topic(), e.partition()))
        .collect();
    if !foreign.is_empty() {
        return Ok(Committed::Refused(WeirError::Task {
            task: "scale".into(),
            reason: format!("partitions no longer assigned: {}", foreign.join(", ")),
        }));
    }
    let group = consumer.group_metadata().ok_or_else(|| WeirError::Task {
        task: "scale".into(),
        reason: "consumer group metadata unavailable for the transaction".into(),
    })?;
    crate::crash_point!("group-before-commit");
    // Tests: the group refuses this commit, as in a raced rebalance.
    fail::fail_point!("group-commit-refused", |_| {
        Ok(Committed::Refused(WeirError::Task {
            task: "scale".into(),
            reason: "the commit was refused (failpoint group-commit-refused)".into(),
        }))
    });
    if let Err(e) = producer.commit_transaction(offsets, &group) {
        return match classify(instance, e) {
            CommitRefusal::Migrated(e) => Ok(Committed::Refused(e)),
            CommitRefusal::Fenced(e) | CommitRefusal::Other(e) => Err(e),
        };
    }
    producer.begin_transaction()?;
    Ok(Committed::Yes)
}

/// What a refused commit means. The group coordinator checks the
/// member's generation (its epoch under KIP-848) against the group
/// metadata sent with the offsets: a rebalance that moved on while the
/// epoch was prepared refuses it (the work migrated; nothing is wrong), a
/// member the group no longer knows is a zombie, and so is a producer the
/// broker fenced.
pub(crate) fn classify(instance: &str, e: WeirError) -> CommitRefusal {
    use rdkafka::types::RDKafkaErrorCode as C;
    let fenced = |e: &WeirError| WeirError::GroupFenced {
        instance: instance.to_string(),
        context: e.report().to_string(),
    };
    let code = match &e {
        WeirError::TransactionAborted { source, .. }
        | WeirError::ProducerFenced { source, .. }
        | WeirError::Kafka { source, .. } => source.rdkafka_error_code(),
        _ => None,
    };
    match code {
        Some(C::IllegalGeneration | C::StaleMemberEpoch | C::RebalanceInProgress) => {
            CommitRefusal::Migrated(e)
        }
        Some(C::UnknownMemberId | C::FencedInstanceId | C::FencedMemberEpoch) => {
            CommitRefusal::Fenced(fenced(&e))
        }
        _ if matches!(e, WeirError::ProducerFenced { .. }) => CommitRefusal::Fenced(fenced(&e)),
        _ => CommitRefusal::Other(e),
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
    if !c.kafka.properties.contains_key("statistics.interval.ms") {
        cc.set("statistics.interval.ms", "1000");
    }
    cc
}

/// A writer id unique to this process attempt.
pub(crate) fn writer_id() -> String {
    use std::sync::atomic::AtomicU32;
    static ATTEMPT: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!(
        "{:x}{:08x}{:x}",
        std::process::id(),
        nanos,
        ATTEMPT.fetch_add(1, Ordering::Relaxed)
    )
}

/// One attempt of an instance in group mode: join, work, and on any error
/// abort the open transaction and return it (the restart loop decides).
pub fn run_attempt(
    config: &Arc<Config>,
    shared: &JobShared,
    progressed: &Arc<AtomicBool>,
) -> Result<()> {
    let cancel = CancellationToken::new();
    // Fences this instance's previous incarnation and aborts its open
    // transaction, so the offsets read below are final.
    let producer = Arc::new(SinkProducer::create(config, cancel.clone())?);
    producer.begin_transaction()?;
    let topic = repartition::ensure_topic(config, &kafka::create_consumer(config)?)?;
    let storage = SharedStorage::open(config)?;
    let uid = config.keyed_uid();
    let instance = Instance {
        config: config.clone(),
        metrics: shared.metrics.clone(),
        producer: producer.clone(),
        storage,
        topic: topic.clone(),
        pipeline: Pipeline::from_config(config),
        uid: uid.clone(),
        writer: writer_id(),
        seq: 0,
        epoch: 0,
        incarnations: 0,
        inputs: BTreeMap::new(),
        tasks: BTreeMap::new(),
        pending: Vec::new(),
        failed: None,
        abandoned: false,
        batches: (0..config.scale.tasks)
            .map(|_| ProduceBatch::default())
            .collect(),
        dead_letters: Output::new(
            SOURCE_UID.into(),
            0,
            producer.clone(),
            config.sink.topic.clone(),
            config.source.dead_letter_topic.clone(),
            config.source.on_bad_record,
            Arc::new(EpochGate::new(0)),
            shared.metrics.clone(),
            cancel.clone(),
        ),
        scratch: Vec::new(),
        value_buf: Vec::with_capacity(16),
        dirty: false,
        last_commit: Instant::now(),
        last_housekeeping: Instant::now(),
        ownership: shared.ownership.clone(),
        // One query queue for the instance: its poll loop answers for the
        // tasks it owns.
        queries: shared
            .queries
            .register(&uid, 1, config.job.max_parallelism)
            .pop()
            .expect("one queue"),
        cancel: cancel.clone(),
    };
    instance.publish_ownership();
    let mut topics = config.source.topics.clone();
    topics.push(topic.clone());
    info!(
        job = %config.job.name,
        instance = config.instance(),
        tasks = config.scale.tasks,
        repartition_topic = %topic,
        protocol = ?config.scale.group_protocol,
        "instance joining the job's group"
    );
    run_instance(
        config, instance, &topics, &producer, &cancel, shared, progressed,
    )
}

/// Joins the job's group with `instance`, runs its loop, and on an error
/// abandons the attempt: cancels, leaves the group, aborts the open
/// transaction.
#[allow(clippy::too_many_arguments)]
pub fn run_instance<I: GroupWork>(
    config: &Config,
    instance: I,
    topics: &[String],
    producer: &SinkProducer,
    cancel: &CancellationToken,
    shared: &JobShared,
    progressed: &Arc<AtomicBool>,
) -> Result<()> {
    let instance = Arc::new(Mutex::new(instance));
    let consumer: BaseConsumer<GroupContext<I>> = group_consumer_config(config)
        .create_with_context(GroupContext {
            instance: instance.clone(),
            metrics: shared.metrics.clone(),
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
    consumer.unsubscribe();
    drop(consumer);
    if outcome.is_err() {
        match producer.abort_transaction() {
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
    fn housekeeping(&mut self, stopping: bool);
    fn take_failed(&mut self) -> Option<WeirError>;
    /// The attempt is ending: callbacks must not commit any more.
    fn abandon(&mut self);
    /// Assigned partitions not restored yet.
    fn pending(&self) -> &[(String, i32)];
    fn activate(&mut self, consumer: &BaseConsumer<GroupContext<Self>>) -> Result<()>;
    /// Answers the interactive queries waiting for this instance.
    fn answer_queries(&mut self);
}

impl GroupWork for Instance {
    fn on_message(&mut self, m: &BorrowedMessage<'_>) -> Result<()> {
        Instance::on_message(self, m)
    }
    fn idle(&mut self) -> Result<()> {
        self.flush()
    }
    fn due(&mut self) -> bool {
        Instance::due(self)
    }
    fn commit(&mut self, consumer: &GroupConsumer) -> Result<()> {
        Instance::commit(self, consumer)
    }
    fn housekeeping(&mut self, stopping: bool) {
        Instance::housekeeping(self, stopping)
    }
    fn take_failed(&mut self) -> Option<WeirError> {
        self.failed.take()
    }
    fn abandon(&mut self) {
        self.abandoned = true;
    }
    fn pending(&self) -> &[(String, i32)] {
        &self.pending
    }
    fn activate(&mut self, consumer: &GroupConsumer) -> Result<()> {
        Instance::activate(self, consumer)
    }
    fn answer_queries(&mut self) {
        while let Ok(q) = self.queries.try_recv() {
            self.answer(q);
        }
    }
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
            inst.commit(consumer)?;
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
        // Partitions restored and sought in this iteration. The message
        // polled above, if it is from one of them, was fetched before the
        // seek: at a position the restore no longer matches (after a reset,
        // ahead of the committed offset). Applying it would move the
        // position past records the seek fetches again, which the
        // below-position check would then skip: lost updates (and, without
        // that check, duplicates). It is dropped; the seek re-reads it.
        let mut activated: Vec<(String, i32)> = Vec::new();
        if !inst.pending().is_empty() {
            shared.ready.store(false, Ordering::Relaxed);
            activated = inst.pending().to_vec();
            inst.activate(consumer)?;
        }
        // Ready once every assigned partition is restored (an instance
        // the group gave nothing is ready too).
        shared.ready.store(true, Ordering::Relaxed);
        match msg {
            None => inst.idle()?,
            Some(Err(e)) => {
                if let Some((code, reason)) = consumer.client().fatal_error() {
                    return Err(WeirError::Task {
                        task: "group consumer".into(),
                        reason: format!("fatal error {code:?}: {reason}"),
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
                let stale = activated
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
