//! `_metadata`: what a checkpoint holds, as JSON, written last and atomically.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Bumped when the layout changes in a way older weir versions cannot read.
pub const FORMAT_VERSION: u32 = 1;

/// The contents of `chk-N/_metadata`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointMetadata {
    pub format_version: u32,
    pub job: String,
    pub checkpoint_id: u64,
    pub trigger_time_ms: u64,
    pub prepared_time_ms: u64,
    pub topology: Topology,
    /// Next offset to read, per source partition.
    pub source_offsets: Vec<PartitionOffset>,
    /// One RocksDB snapshot per (operator uid, subtask).
    pub state: Vec<StateHandle>,
}

impl CheckpointMetadata {
    /// Source offsets as a map, for comparisons with the group's offsets.
    pub fn offsets_map(&self) -> BTreeMap<(String, i32), i64> {
        self.source_offsets
            .iter()
            .map(|o| ((o.topic.clone(), o.partition), o.offset))
            .collect()
    }

    /// The max event time per source partition, where one was recorded.
    pub fn max_timestamps(&self) -> BTreeMap<(String, i32), i64> {
        self.source_offsets
            .iter()
            .filter_map(|o| Some(((o.topic.clone(), o.partition), o.max_timestamp?)))
            .collect()
    }

    /// Bytes of state referenced by this checkpoint.
    pub fn state_size(&self) -> u64 {
        self.state.iter().map(|s| s.size_bytes).sum()
    }
}

/// The shape of the job that wrote a checkpoint, checked on restore.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Topology {
    pub max_parallelism: u32,
    pub operators: Vec<OperatorInfo>,
}

impl Topology {
    /// Uids present in exactly one of the two topologies, as
    /// (only in `self`, only in `other`), but for stateless transforms
    /// (maps, filters, unions: [`OperatorInfo::is_stateless_transform`]),
    /// which hold nothing a restore could lose, so that a plan whose
    /// rewrite rules merged or dropped some still restores (Flink matches
    /// state to operators the same way).
    pub fn uid_difference(&self, other: &Topology) -> (Vec<String>, Vec<String>) {
        let uids = |t: &Topology| -> Vec<String> {
            t.operators
                .iter()
                .filter(|o| !o.is_stateless_transform())
                .map(|o| o.uid.clone())
                .collect()
        };
        let (mine, theirs) = (uids(self), uids(other));
        (
            mine.iter()
                .filter(|u| !theirs.contains(u))
                .cloned()
                .collect(),
            theirs
                .iter()
                .filter(|u| !mine.contains(u))
                .cloned()
                .collect(),
        )
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperatorInfo {
    pub uid: String,
    pub kind: String,
    pub parallelism: u32,
    /// The keyed state of a job graph's operator: what a restore checks
    /// (state another operator wrote is refused) and what `weir state`
    /// decodes by. None for the built-in pipelines and for stateless nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<StateInfo>,
}

impl OperatorInfo {
    /// A node without state that only transforms rows: not a source (its
    /// offsets are state), a sink (its transactions) or a built-in
    /// pipeline's operator.
    pub fn is_stateless_transform(&self) -> bool {
        self.state.is_none()
            && matches!(self.kind.as_str(), "map" | "filter" | "flat-map" | "union")
    }
}

/// A keyed operator's key and tables, as a checkpoint records them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateInfo {
    /// The key columns' names and types (`VARCHAR`, `BIGINT`, ...).
    pub key: Vec<KeyColumn>,
    pub tables: Vec<TableInfo>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyColumn {
    pub name: String,
    pub data_type: String,
}

/// One state table: its name, what it holds per key (`value`, `list`,
/// `map`) and its codec's name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TableInfo {
    pub name: String,
    pub kind: String,
    pub codec: String,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PartitionOffset {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    /// With event time: the highest event time read from the partition
    /// before the offset, so its watermark resumes where it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_timestamp: Option<i64>,
}

/// Where one subtask's RocksDB snapshot lives, and which key groups it holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateHandle {
    pub uid: String,
    pub subtask: u32,
    /// Key groups `[start, end)`.
    pub key_groups: (u32, u32),
    /// Relative to the checkpoint folder.
    pub path: String,
    pub size_bytes: u64,
    /// Every file of the snapshot with its size, checked before a restore
    /// so that a missing or truncated file is named, not discovered by
    /// RocksDB halfway through. Empty in checkpoints of older versions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<SnapshotFile>,
}

/// One file of a state snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotFile {
    /// Relative to the snapshot folder.
    pub name: String,
    pub size_bytes: u64,
    /// CRC-32 of the contents, verified at a restore (an SST file's while
    /// the restored job runs, before its first commit: `checksum`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crc32: Option<u32>,
}
