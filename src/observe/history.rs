//! Checkpoint history, like Flink's checkpoint statistics: the most recent
//! checkpoints with their timings, size and outcome, served as JSON.

use std::collections::VecDeque;
use std::sync::Mutex;

use serde::Serialize;

/// Entries kept.
const CAPACITY: usize = 200;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Completed,
    /// Could not be completed (timeout, a subtask declined, disk error).
    Failed,
    /// Cut short because the job attempt stopped.
    Aborted,
}

/// One checkpoint's statistics.
#[derive(Debug, Clone, Serialize)]
pub struct CheckpointStats {
    pub id: u64,
    pub trigger_time_ms: u64,
    pub status: Status,
    /// Set when it failed or was aborted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub end_to_end_ms: u64,
    /// Longest barrier alignment among the keyed subtasks.
    pub alignment_ms: u64,
    /// Longest snapshot (cache write-back + RocksDB checkpoint) among them.
    pub snapshot_ms: u64,
    /// Kafka transaction commit (exactly-once), or 0.
    pub commit_ms: u64,
    pub state_size_bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub savepoint: Option<String>,
}

/// The shared history, newest last.
#[derive(Debug, Default)]
pub struct History {
    entries: Mutex<VecDeque<CheckpointStats>>,
}

impl History {
    pub fn record(&self, stats: CheckpointStats) {
        let mut e = self.entries.lock().expect("history lock");
        if e.len() == CAPACITY {
            e.pop_front();
        }
        e.push_back(stats);
    }

    pub fn snapshot(&self) -> Vec<CheckpointStats> {
        self.entries
            .lock()
            .expect("history lock")
            .iter()
            .cloned()
            .collect()
    }
}
