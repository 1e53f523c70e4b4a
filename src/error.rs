//! Errors that carry what a person needs to act on them.
//!
//! Each variant's message says what failed and where; the underlying error
//! (I/O, RocksDB, librdkafka) stays typed as its `source()`, and is not
//! repeated in the message. [`Report`] prints the whole chain once, which
//! is what logs and the exit message use.

use std::fmt;
use std::path::{Path, PathBuf};

use rdkafka::error::KafkaError;

/// Everything that can stop a job attempt.
#[derive(Debug, thiserror::Error)]
pub enum WeirError {
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),

    #[error("{path}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("RocksDB ({context})")]
    State {
        context: String,
        #[source]
        source: rocksdb::Error,
    },

    /// RocksDB refused a checkpoint through the C API, whose errors are
    /// messages only.
    #[error("RocksDB checkpoint into {}: {message}", target.display())]
    Snapshot { target: PathBuf, message: String },

    /// A stored state value or key that cannot be decoded: restarting would
    /// hit it again, so the job stops with where it is.
    #[error(
        "corrupt state in operator {uid:?}, key group {key_group}, key {key:?} ({location}): {reason}"
    )]
    CorruptState {
        uid: String,
        key_group: u32,
        key: String,
        location: String,
        reason: String,
    },

    #[error("Kafka ({context})")]
    Kafka {
        context: String,
        #[source]
        source: Box<KafkaError>,
    },

    #[error("bad record at {topic}/{partition}@{offset}: {reason}")]
    BadRecord {
        topic: String,
        partition: i32,
        offset: i64,
        reason: String,
    },

    /// An output record the producer refuses for its size; with
    /// `on_bad_record = "fail"` the job stops, since a replay would make it
    /// again.
    #[error(
        "output record for key {key:?} to topic {topic:?} is {bytes} bytes, over the producer's \
         message.max.bytes; raise message.max.bytes (and the topic's max.message.bytes) or set \
         source.on_bad_record to \"skip\" or \"dead-letter\""
    )]
    OutputTooLarge {
        topic: String,
        key: String,
        bytes: usize,
    },

    #[error("source topic {topic:?} does not exist or has no partitions")]
    MissingTopic { topic: String },

    /// A job graph's sink writes to a topic that is not there: refused at
    /// start rather than failing (and restarting) at the first record.
    #[error("sink {sink:?} writes to topic {topic:?}, which does not exist or has no partitions; create it first")]
    MissingSinkTopic { sink: String, topic: String },

    /// The same for an operator's dead-letter topic for late records.
    #[error("operator {operator:?} sends late records to topic {topic:?}, which does not exist or has no partitions; create it first")]
    MissingLateTopic { operator: String, topic: String },

    #[error("recovery refused: {0}")]
    Recovery(String),

    /// A group-mode restore that must not go on, by its kind (boxed: the
    /// variants carry what they found, and `Result`s stay small).
    #[error("recovery refused: {0}")]
    Refused(Box<Refusal>),

    /// `weir reset` cannot go on (single mode, or instances still running).
    #[error("weir reset refused: {0}")]
    ResetRefused(String),

    /// `weir savepoint`, or `--restore-from` a savepoint in group mode,
    /// cannot go on (instances still running, a job that already has
    /// task checkpoints, repartition topics that would not drain).
    #[error("savepoint refused: {0}")]
    SavepointRefused(String),

    /// librdkafka reports the producer fenced. With Kafka 4 that is also
    /// how a transaction the broker aborted after `transaction.timeout.ms`
    /// shows, so this alone is restartable: before the restart, the job
    /// checks whether another instance took over (`runtime::ownership`).
    #[error(
        "the broker fenced the producer of transactional.id {transactional_id:?} ({context}): it \
         aborted the transaction after transaction.timeout.ms, or another instance took over; \
         the restart checks which"
    )]
    ProducerFenced {
        transactional_id: String,
        context: String,
        #[source]
        source: Box<KafkaError>,
    },

    /// Another instance of this job with the same transactional id took
    /// over: this process must not go on.
    #[error(
        "producer with transactional.id {transactional_id:?} was fenced: another weir instance \
         with the same job and transactional id took over ({evidence})"
    )]
    Fenced {
        transactional_id: String,
        evidence: String,
    },

    /// The broker or librdkafka aborted the open transaction (for instance
    /// it outlived `transaction.timeout.ms` while the process was paused):
    /// the epochs since the last checkpoint are replayed after a restart.
    #[error(
        "the Kafka transaction of transactional.id {transactional_id:?} must be aborted ({context}); \
         its output is replayed from the last checkpoint"
    )]
    TransactionAborted {
        transactional_id: String,
        context: String,
        #[source]
        source: Box<KafkaError>,
    },

    /// Shared checkpoint storage (a shared folder or S3) refused a call.
    #[error("checkpoint storage: cannot {what} {location}: {reason}")]
    Storage {
        location: String,
        what: String,
        reason: String,
    },

    /// This instance lost its tasks to other members of the consumer group
    /// while it could not reach the group (paused, partitioned): its open
    /// transaction is aborted and it stops, as a zombie must.
    #[error(
        "fenced by the consumer group ({context}): the tasks of instance {instance:?} moved to \
         other instances while it was unresponsive; its uncommitted output was aborted"
    )]
    GroupFenced { instance: String, context: String },

    #[error("checkpoint {checkpoint_id} failed: {reason}")]
    Checkpoint { checkpoint_id: u64, reason: String },

    #[error("task {task} failed: {reason}")]
    Task { task: String, reason: String },

    /// A task saw a peer's channel close: a consequence of that peer's own
    /// failure, which is the one to report.
    #[error("task {task} stopped: {reason}")]
    PeerGone { task: String, reason: String },

    /// Tasks that did not stop within the bound after their attempt was
    /// cancelled. Their threads may still hold RocksDB and Kafka clients,
    /// so an in-process restart is unsafe: the process exits and its
    /// supervisor starts a clean one.
    #[error("tasks did not stop within {waited_ms} ms after the attempt was cancelled: {tasks:?}")]
    Stuck { tasks: Vec<String>, waited_ms: u64 },

    #[error("lock {path}: {reason}")]
    Locked { path: PathBuf, reason: String },

    /// A job graph that cannot run, with every problem found, each naming
    /// its node.
    #[error("job {job:?} cannot run: {}", problems.join("; "))]
    Graph { job: String, problems: Vec<String> },

    /// An operator's logic refused its input (a retraction it cannot
    /// handle, an overflow); a replay would meet the same row again.
    #[error("operator {uid:?} subtask {subtask}: {reason}")]
    Operator {
        uid: String,
        subtask: u32,
        reason: String,
    },
}

pub type Result<T, E = WeirError> = std::result::Result<T, E>;

/// Why a task or partition in group mode is not restored: what was found
/// on storage or in Kafka that a restart cannot change, and what to do.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// Retention (or a trim) deleted repartition records a task had not
    /// read.
    #[error(
        "the committed offset {committed} of {topic}/{partition} (task {partition} of stage \
         {stage:?}) is below the partition's first offset {first}: records the task had not \
         read were deleted from its repartition topic, so its state cannot be brought up to \
         date. Nothing was started; `weir reset --config <file>` starts the job over"
    )]
    RepartitionRecordsDeleted {
        topic: String,
        partition: i32,
        stage: String,
        committed: i64,
        first: i64,
    },

    /// The group has no offsets at all, but storage holds committed task
    /// checkpoints.
    #[error(
        "the consumer group {group:?} has no committed offset for the input partitions \
         {inputs} nor for any task, but {storage} holds checkpoints the job's tasks committed \
         (stage {stage:?} task {task}: {marker}): the group's offsets were lost (a deleted or \
         reset group, or offsets expired after offsets.retention.minutes while every instance \
         was down). Starting from source.start would process the retained input again over \
         the tasks' state. Nothing was started. To start the job over with empty state on \
         purpose, stop every instance and run `weir reset --config <file>`"
    )]
    GroupOffsetsLost {
        group: String,
        inputs: String,
        storage: String,
        stage: String,
        task: u32,
        marker: String,
    },

    /// One task's offset is gone, but it committed checkpoints.
    #[error(
        "{task}: the consumer group {group:?} has no committed offset for its partition \
         {partition}, but {storage} holds the checkpoints it committed ({marker}): the group's \
         offsets were lost (a deleted or reset group, or offsets expired after \
         offsets.retention.minutes while every instance was down). Starting it with empty \
         state would process the retained input again and write wrong results. Nothing was \
         started. To start the job over with empty state on purpose, stop every instance and \
         run `weir reset --config <file>`"
    )]
    TaskOffsetLost {
        task: String,
        group: String,
        partition: String,
        storage: String,
        marker: String,
    },

    /// A checkpoint from a weir that ran pipelines without job graphs.
    #[error(
        "{task}: checkpoint {key} in {storage} was written by weir before job graphs (its \
         manifest names no stage and no tables); this weir runs every pipeline as a job graph \
         and cannot restore it. Nothing was started. To start over with empty state, run the \
         job under a new `job.name` and a new `kafka.group_id` (its own storage folder, \
         committed offsets and transactional ids); until then the previous weir can go on \
         running it"
    )]
    BeforeJobGraphs {
        task: String,
        key: String,
        storage: String,
    },

    /// The manifest a pointer names is of another task, range or offset.
    #[error(
        "{task}: checkpoint {key} in {storage} is of task {found_task} (stage {found_stage:?}) \
         with key groups {found_key_groups:?} at offset {found_offset}, but the group's \
         pointer is for task {id} of stage {stage:?}, key groups {key_groups:?}, offset {offset}"
    )]
    ManifestMismatch {
        task: String,
        key: String,
        storage: String,
        found_task: u32,
        found_stage: Option<String>,
        found_key_groups: (u32, u32),
        found_offset: i64,
        id: u32,
        stage: String,
        key_groups: (u32, u32),
        offset: i64,
    },

    /// The job's keyed operators declare other tables than the checkpoint
    /// holds.
    #[error(
        "{task}: its checkpoint {key} holds the tables {found:?}, but the job now declares \
         {declared:?}; a job keeps its operators' state for its life. Start a new job (another \
         job.name) to change them"
    )]
    TablesChanged {
        task: String,
        key: String,
        found: std::collections::BTreeMap<String, Vec<String>>,
        declared: std::collections::BTreeMap<String, Vec<String>>,
    },

    /// Another instance writes a repartition topic with other settings.
    #[error(
        "{topic}/{partition} offset {offset}: instance {instance:?} writes with \
         job.max_parallelism = {their_max_parallelism} and scale.tasks = {their_tasks}, this \
         instance runs with job.max_parallelism = {max_parallelism} and scale.tasks = {tasks}; \
         every instance of a job must have the same (weir validate prints the settings that \
         must match)"
    )]
    SettingsDiffer {
        topic: String,
        partition: i32,
        offset: i64,
        instance: String,
        their_max_parallelism: u32,
        their_tasks: u32,
        max_parallelism: u32,
        tasks: u32,
    },

    /// A repartition row of a key group the reading task does not own.
    #[error(
        "{topic}/{partition} offset {offset}: a row of key group {key_group} (of \
         job.max_parallelism = {max_parallelism}), which task {task} does not own (its key \
         groups are {key_groups:?} with scale.tasks = {tasks}): the instance that wrote it \
         runs with other job.max_parallelism or scale.tasks; every instance of a job must \
         have the same"
    )]
    KeyGroupNotOwned {
        topic: String,
        partition: i32,
        offset: i64,
        key_group: u32,
        max_parallelism: u32,
        task: u32,
        key_groups: (u32, u32),
        tasks: u32,
    },
}

impl From<Refusal> for WeirError {
    fn from(r: Refusal) -> Self {
        Self::Refused(Box::new(r))
    }
}

impl WeirError {
    pub fn io(path: &Path, source: std::io::Error) -> Self {
        Self::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    pub fn state(context: impl Into<String>, source: rocksdb::Error) -> Self {
        Self::State {
            context: context.into(),
            source,
        }
    }

    pub fn kafka(context: impl Into<String>, source: KafkaError) -> Self {
        Self::Kafka {
            context: context.into(),
            source: Box::new(source),
        }
    }

    /// Whether this error only follows from another task's failure.
    pub fn is_consequence(&self) -> bool {
        matches!(self, Self::PeerGone { .. })
    }

    /// Errors that a restart from the last checkpoint cannot fix: the job
    /// stops instead of looping through its restart budget.
    pub fn is_fatal(&self) -> bool {
        matches!(
            self,
            Self::Config(_)
                | Self::BadRecord { .. }
                | Self::OutputTooLarge { .. }
                | Self::CorruptState { .. }
                | Self::MissingTopic { .. }
                | Self::MissingSinkTopic { .. }
                | Self::MissingLateTopic { .. }
                | Self::Recovery(_)
                | Self::Refused(_)
                | Self::ResetRefused(_)
                | Self::SavepointRefused(_)
                | Self::Fenced { .. }
                | Self::GroupFenced { .. }
                | Self::Stuck { .. }
                | Self::Locked { .. }
                | Self::Graph { .. }
                | Self::Operator { .. }
        )
    }

    /// The whole cause chain on one line.
    pub fn report(&self) -> Report<'_> {
        Report(self)
    }
}

/// Prints an error and each of its causes once, joined by ": ".
pub struct Report<'a>(pub &'a (dyn std::error::Error + 'static));

impl fmt::Display for Report<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut cause = self.0.source();
        while let Some(c) = cause {
            write!(f, ": {c}")?;
            cause = c.source();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::error::RDKafkaErrorCode;

    #[test]
    fn a_report_names_each_cause_once() {
        let e = WeirError::kafka(
            "commit_transaction",
            KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge),
        );
        let text = e.report().to_string();
        let cause =
            KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge).to_string();
        assert_eq!(text.matches(&cause).count(), 1, "{text}");
        assert!(text.starts_with("Kafka (commit_transaction): "), "{text}");
        // The cause stays typed.
        let source = std::error::Error::source(&e).unwrap();
        assert!(
            source.downcast_ref::<Box<KafkaError>>().is_some()
                || source.downcast_ref::<KafkaError>().is_some()
        );

        let io = WeirError::io(
            Path::new("/x/chk-1"),
            std::io::Error::from_raw_os_error(libc::ENOSPC),
        );
        let text = io.report().to_string();
        assert_eq!(text.matches("/x/chk-1").count(), 1, "{text}");
        assert_eq!(text.matches("No space left on device").count(), 1, "{text}");
    }
}
