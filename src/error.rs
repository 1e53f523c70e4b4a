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

    /// `weir reset` cannot go on (single mode, or instances still running).
    #[error("weir reset refused: {0}")]
    ResetRefused(String),

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
                | Self::ResetRefused(_)
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
