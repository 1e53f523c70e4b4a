//! What both runners share: the commit point (one Kafka transaction per
//! checkpoint or epoch), the epoch gate and the output sinks write
//! through, interactive queries, the restart loop and recovery (`job`),
//! task ownership, and helpers for source positions (`source`). Single
//! mode's own machinery, the Coordinator and barrier alignment, is in
//! `crate::engine::single`. `crate::engine` builds an attempt's tasks from
//! a job graph on these.
//!
//! Every task is its own OS thread (RocksDB and librdkafka calls block; a
//! dedicated thread keeps them off any async reactor, as tokio advises)
//! connected by bounded crossbeam channels, so backpressure reaches the
//! Kafka consumer instead of memory.

pub mod assignment;
pub mod commit;
pub mod gate;
pub mod job;
pub mod output;
pub mod ownership;
pub mod query;
pub mod routing;
pub mod source;
pub mod transactions;

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use crate::observe::history::History;
use crate::observe::metrics::Metrics;

use crate::checkpoint::{PartitionOffset, StateHandle};
use crate::element::Barrier;

/// Savepoint requests waiting for a checkpoint; more answer 503 at once.
pub const SAVEPOINT_QUEUE: usize = 1;

/// Records per batch on a data channel.
pub const BATCH: usize = 512;
/// Batches a data channel holds before its sender blocks.
pub const CHANNEL_CAPACITY: usize = 8;

/// The task reading a data channel is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReceiverGone;

/// Sends on a bounded data channel, blocking while it is full
/// (backpressure) but watching `cancel`. Ok whether sent or cancelled.
pub fn send_bounded<T>(
    tx: &crossbeam_channel::Sender<T>,
    mut item: T,
    cancel: &tokio_util::sync::CancellationToken,
) -> std::result::Result<(), ReceiverGone> {
    use crossbeam_channel::SendTimeoutError;
    loop {
        match tx.send_timeout(item, std::time::Duration::from_millis(100)) {
            Ok(()) => return Ok(()),
            Err(SendTimeoutError::Timeout(back)) => {
                if cancel.is_cancelled() {
                    return Ok(());
                }
                item = back;
            }
            Err(SendTimeoutError::Disconnected(_)) => return Err(ReceiverGone),
        }
    }
}

/// The event time of a record of a job without event time.
pub use crate::time::NO_TIMESTAMP;

/// The original record and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct DeadLetter {
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub error: String,
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    /// More headers, e.g. the window and watermark of a late record.
    pub headers: Vec<(String, String)>,
}

/// Coordinator → source subtask.
#[derive(Debug, Clone, Copy)]
pub enum SourceCommand {
    Trigger(Barrier),
}

/// Subtask → Coordinator: "my part of checkpoint N is done".
#[derive(Debug, Clone)]
pub enum Ack {
    Source {
        subtask: u32,
        checkpoint_id: u64,
        offsets: Vec<PartitionOffset>,
    },
    /// A task of a job graph (`crate::engine`): the snapshots of its keyed
    /// operators, or why one could not be taken (the checkpoint fails;
    /// processing goes on); none for a stateless task, whose ack still says
    /// that its output of the epoch reached the producer.
    Task {
        task: String,
        checkpoint_id: u64,
        handles: std::result::Result<Vec<StateHandle>, String>,
        alignment_ms: u64,
        sync_ms: u64,
    },
}

impl Ack {
    pub fn checkpoint_id(&self) -> u64 {
        match self {
            Ack::Source { checkpoint_id, .. } | Ack::Task { checkpoint_id, .. } => *checkpoint_id,
        }
    }
}

/// What lives as long as the process, across job attempts: observability
/// state the admin endpoint reads, the stop flag, savepoint requests.
#[derive(Clone)]
pub struct JobShared {
    pub metrics: Arc<Metrics>,
    pub history: Arc<History>,
    /// True while an attempt is restored and processing.
    pub ready: Arc<AtomicBool>,
    /// Set by SIGTERM/SIGINT: take a final checkpoint and stop.
    pub stop: Arc<AtomicBool>,
    pub savepoints: crossbeam_channel::Receiver<SavepointRequest>,
    /// The tasks and partitions this instance owns (group mode).
    pub ownership: Arc<std::sync::Mutex<assignment::Ownership>>,
    /// Where interactive queries go (the running attempt's keyed subtasks).
    pub queries: Arc<query::QueryRoutes>,
}

impl JobShared {
    /// A context with fresh metrics, and the sender for savepoint requests.
    pub fn new() -> (Self, crossbeam_channel::Sender<SavepointRequest>) {
        let (tx, rx) = crossbeam_channel::bounded(SAVEPOINT_QUEUE);
        (
            Self {
                metrics: Arc::new(Metrics::new()),
                history: Arc::new(History::default()),
                ready: Arc::new(AtomicBool::new(false)),
                stop: Arc::new(AtomicBool::new(false)),
                savepoints: rx,
                ownership: Default::default(),
                queries: Default::default(),
            },
            tx,
        )
    }
}

pub use crate::observe::now_ms;

/// A request for a savepoint (from the admin endpoint); the Coordinator
/// answers with its path.
pub struct SavepointRequest {
    pub reply: tokio::sync::oneshot::Sender<Result<String, SavepointError>>,
}

/// Why no savepoint was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SavepointError {
    /// The checkpoint or the copy failed.
    Failed(String),
    /// `checkpoint.max_savepoints` savepoints are already there; none was
    /// taken.
    TooMany(String),
}

/// A named crash point for crash tests (`--features failpoints`, set with
/// `FAILPOINTS=name=return`): the process kills itself with SIGKILL, as an
/// operator's `kill -9` would. Compiled out of release builds.
#[macro_export]
macro_rules! crash_point {
    ($name:expr) => {
        #[cfg(feature = "failpoints")]
        fail::eval($name, |_| {
            eprintln!("crash point {} reached: SIGKILL", $name);
            // SAFETY: kill(2) on our own pid has no memory-safety effects.
            unsafe {
                libc::kill(libc::getpid(), libc::SIGKILL);
            }
        });
    };
}
