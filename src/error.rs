//! Errors that carry what a person needs to act on them.

use std::path::{Path, PathBuf};

/// Everything that can stop a job attempt.
#[derive(Debug, thiserror::Error)]
pub enum WeirError {
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),

    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("RocksDB ({context}): {source}")]
    State {
        context: String,
        #[source]
        source: rocksdb::Error,
    },

    #[error("Kafka ({context}): {source}")]
    Kafka {
        context: String,
        #[source]
        source: rdkafka::error::KafkaError,
    },

    #[error("bad record at {topic}/{partition}@{offset}: {reason}")]
    BadRecord {
        topic: String,
        partition: i32,
        offset: i64,
        reason: String,
    },

    #[error("source topic {topic:?} does not exist or has no partitions")]
    MissingTopic { topic: String },

    #[error("recovery refused: {0}")]
    Recovery(String),

    #[error(
        "producer with transactional.id {transactional_id:?} was fenced: another weir instance \
         with the same job and transactional id took over ({detail})"
    )]
    Fenced {
        transactional_id: String,
        detail: String,
    },

    #[error("checkpoint {checkpoint_id} failed: {reason}")]
    Checkpoint { checkpoint_id: u64, reason: String },

    #[error("task {task} failed: {reason}")]
    Task { task: String, reason: String },

    /// A task saw a peer's channel close: a consequence of that peer's own
    /// failure, which is the one to report.
    #[error("task {task} stopped: {reason}")]
    PeerGone { task: String, reason: String },

    #[error("lock {path}: {reason}")]
    Locked { path: PathBuf, reason: String },
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

    pub fn kafka(context: impl Into<String>, source: rdkafka::error::KafkaError) -> Self {
        Self::Kafka {
            context: context.into(),
            source,
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
                | Self::MissingTopic { .. }
                | Self::Recovery(_)
                | Self::Fenced { .. }
                | Self::Locked { .. }
        )
    }
}
