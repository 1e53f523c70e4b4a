//! A group-mode job's committed checkpoint as a checkpoint folder: what
//! `weir checkpoints show` and `weir state get|scan` read, and what
//! `weir savepoint` keeps (`super::savepoint`).
//!
//! A group-mode job has no checkpoint folder: each task's checkpoint is a
//! manifest in shared storage (`crate::engine::group::manifest`), and the one that
//! counts is the one its committed offset names. So "the latest
//! checkpoint" of such a job is read from the consumer group's committed
//! offsets on every stage's repartition topic (read_committed, so an open
//! transaction's offsets are waited for, never read), each pointer's
//! manifest is loaded, and its files are downloaded, checked against the
//! manifest's sizes and CRC-32s, into a private temporary folder. There
//! they are laid out as a single-mode checkpoint folder, with a
//! `_metadata` built from the manifests (each keyed node's kind, key
//! columns and tables, as the manifest records them), so that the readers
//! of single-mode checkpoints (`checkpoint::reader`, `cli::graph_state`)
//! decode them with the operators' own codecs, and single mode restores
//! them (`--restore-from`). A read's folder is removed when the read is
//! done; a savepoint's is kept. Nothing in Kafka or in storage is
//! modified: the group's offsets are only read, and no member joins the
//! group.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use rdkafka::consumer::BaseConsumer;
use rdkafka::Offset;
use serde::Serialize;

use super::manifest::{self, TaskManifest, EMPTY_START, MARKERS};
use super::storage::SharedStorage;
use super::{checkpoints, repartition};
use crate::checkpoint::metadata::{
    CheckpointMetadata, OperatorInfo, PartitionOffset, StateHandle, Topology, FORMAT_VERSION,
};
use crate::checkpoint::SnapshotFile;
use crate::config::Config;
use crate::error::{Result, WeirError};
use crate::kafka;

/// Where the committed checkpoint is laid out.
pub enum Target {
    /// A private temporary folder, removed when the read is dropped.
    Temporary,
    /// A savepoint folder, kept; `graph_sources` are the job graph's input
    /// partitions, whose committed offsets it records.
    Savepoint {
        folder: PathBuf,
        graph_sources: Vec<(String, i32)>,
        /// The job graph's whole topology (sources and sinks too), which a
        /// restore checks against its own.
        topology: Topology,
    },
}

/// One task's committed checkpoint, as `weir checkpoints show` lists it.
#[derive(Debug, Clone, Serialize)]
pub struct TaskCheckpoint {
    /// The uid of the stage's head node.
    pub stage: String,
    pub task: u32,
    pub key_groups: (u32, u32),
    /// The repartition topic's next offset this state has consumed up to.
    pub offset: i64,
    /// The manifest the committed offset names, below the job's folder.
    pub manifest: String,
    pub instance: String,
    pub writer: String,
    pub created_ms: u64,
    pub size_bytes: u64,
}

/// The group's committed checkpoint, downloaded into a folder laid out as
/// a single-mode checkpoint (removed on drop unless it is a savepoint).
pub struct GroupCheckpoint {
    folder: PathBuf,
    keep: bool,
    pub group: String,
    pub storage: String,
    pub tasks: Vec<TaskCheckpoint>,
    /// Committed tasks whose group offset says they start empty
    /// (`weir reset`) or which have no offset at all, as `stage task`.
    pub empty: Vec<String>,
}

impl Drop for GroupCheckpoint {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.folder);
        }
    }
}

impl GroupCheckpoint {
    /// The folder holding `_metadata` and the tasks' state.
    pub fn folder(&self) -> &Path {
        &self.folder
    }

    /// What a person is told the state was read from.
    pub fn describe(&self) -> String {
        format!(
            "the checkpoints consumer group {:?} has committed, in {}",
            self.group, self.storage
        )
    }
}

/// Reads the checkpoint the group of `config`'s job has committed (see
/// the module's documentation); with `operator`, only the tasks of the
/// stage that holds that keyed node are downloaded.
pub fn latest(config: &Config, operator: Option<&str>) -> Result<GroupCheckpoint> {
    read(config, operator, Target::Temporary)
}

/// Reads the committed checkpoint as [`latest`] does, into `target`.
pub fn read(config: &Config, operator: Option<&str>, target: Target) -> Result<GroupCheckpoint> {
    let storage = SharedStorage::open(config)?;
    let stages = committed_stages(&storage)?;
    // A savepoint of a job without keyed stages holds its input offsets
    // alone; a read of state needs some.
    if stages.is_empty() && matches!(target, Target::Temporary) {
        return Err(WeirError::Recovery(format!(
            "no task of job {:?} has committed a checkpoint in {} (no {MARKERS}/ markers): the \
             job has not run in group mode there yet, or `weir reset` started it over",
            config.job.name, storage.location
        )));
    }
    let group = config.kafka.group_id.clone();
    let consumer = group_reader(config)?;

    let (folder, keep, graph_sources, graph_topology) = match target {
        Target::Temporary => (
            std::env::temp_dir().join(format!(
                "weir-group-read-{}-{}",
                std::process::id(),
                crate::observe::now_ms()
            )),
            false,
            Vec::new(),
            None,
        ),
        Target::Savepoint {
            folder,
            graph_sources,
            topology,
        } => (folder, true, graph_sources, Some(topology)),
    };
    crate::checkpoint::store::create_private_dir(&folder)?;
    let mut out = GroupCheckpoint {
        folder,
        keep,
        group: group.clone(),
        storage: storage.location.clone(),
        tasks: Vec::new(),
        empty: Vec::new(),
    };
    // A TOML pipeline's configuration names its input topics; a job
    // graph's are given with its savepoint (a read shows none for it).
    let inputs = if !graph_sources.is_empty() {
        graph_sources
    } else if let Some(b) = config.builtin() {
        kafka::topic_partitions(&consumer, &b.source.topics)?
    } else {
        Vec::new()
    };
    let mut partitions = inputs.clone();
    for (stage, tasks) in &stages {
        let topic = repartition::topic_of(&config.job.name, stage);
        partitions.extend(tasks.iter().map(|t| (topic.clone(), *t as i32)));
    }
    let committed = committed_offsets(&consumer, config, &partitions)?;
    let mut operators: BTreeMap<String, OperatorInfo> = BTreeMap::new();
    let mut handles = Vec::new();
    let mut max_parallelism = config.job.max_parallelism;
    for (stage, tasks) in &stages {
        let topic = repartition::topic_of(&config.job.name, stage);
        for &task in tasks {
            let label = format!("stage {stage} task {task}");
            let Some((offset, pointer)) = committed.get(&(topic.clone(), task as i32)) else {
                out.empty.push(label);
                continue;
            };
            let (offset, key) = (*offset, manifest::parse_pointer(pointer));
            let Some(key) = key else {
                if pointer == EMPTY_START {
                    out.empty.push(label);
                    continue;
                }
                return Err(WeirError::Recovery(format!(
                    "{label}: consumer group {group:?} has committed {topic}/{task} at {offset} \
                     with metadata {pointer:?}, which names no checkpoint"
                )));
            };
            let m = checkpoints::load_manifest(&storage, &label, key)?;
            let Some(state) = &m.graph else {
                return Err(WeirError::Recovery(format!(
                    "{label}: checkpoint {}/{key} is not a job graph task's",
                    storage.location
                )));
            };
            if state.operators.is_empty() {
                return Err(WeirError::Recovery(format!(
                    "{label}: checkpoint {}/{key} was written by a weir that did not record its \
                     operators' key columns in task manifests; read it once the job has \
                     committed a checkpoint with this version",
                    storage.location
                )));
            }
            max_parallelism = m.max_parallelism;
            out.tasks.push(TaskCheckpoint {
                stage: stage.clone(),
                task,
                key_groups: m.key_groups,
                offset,
                manifest: key.to_string(),
                instance: m.instance.clone(),
                writer: m.writer.clone(),
                created_ms: m.created_ms,
                size_bytes: m.size_bytes(),
            });
            for o in &state.operators {
                operators.entry(o.uid.clone()).or_insert_with(|| o.clone());
            }
            let wanted = operator.is_none_or(|u| state.operators.iter().any(|o| o.uid == u));
            if !wanted {
                continue;
            }
            // Tasks one instance committed in one epoch share a writer and
            // a sequence number, which name the download's folder.
            let below = out.folder.join(format!("{stage}-{task:04}"));
            let dir = checkpoints::download(&storage, &below, &label, key, &m)?;
            handles.extend(task_handles(&out.folder, &dir, &m, &state.operators));
        }
    }
    if let Some(uid) = operator.filter(|u| !operators.contains_key(*u)) {
        let known: Vec<&str> = operators.keys().map(String::as_str).collect();
        return Err(WeirError::Recovery(format!(
            "no committed task checkpoint of job {:?} in {} has keyed state for operator \
             {uid:?}; the keyed operators of its committed tasks: {}",
            config.job.name,
            storage.location,
            if known.is_empty() {
                "none".to_string()
            } else {
                known.join(", ")
            }
        )));
    }
    let source_offsets = inputs
        .into_iter()
        .filter_map(|(topic, partition)| {
            let (offset, _) = committed.get(&(topic.clone(), partition))?;
            Some(PartitionOffset {
                topic,
                partition,
                offset: *offset,
                max_timestamp: None,
            })
        })
        .collect();
    let meta = CheckpointMetadata {
        format_version: FORMAT_VERSION,
        job: config.job.name.clone(),
        checkpoint_id: 0,
        trigger_time_ms: 0,
        prepared_time_ms: out.tasks.iter().map(|t| t.created_ms).max().unwrap_or(0),
        topology: graph_topology.unwrap_or_else(|| Topology {
            max_parallelism,
            operators: operators
                .into_values()
                .map(|o| OperatorInfo {
                    parallelism: config.scale.tasks,
                    ..o
                })
                .collect(),
        }),
        source_offsets,
        state: handles,
    };
    let path = out.folder.join(crate::checkpoint::store::METADATA);
    let body = serde_json::to_vec_pretty(&meta).expect("metadata serialises");
    std::fs::write(&path, body).map_err(|e| WeirError::io(&path, e))?;
    Ok(out)
}

/// A consumer of the job's group that joins nothing: it reads the group's
/// committed offsets read_committed (an open transaction's are waited
/// for), and commits only when told.
pub(super) fn group_reader(config: &Config) -> Result<BaseConsumer> {
    kafka::base_config(config)
        .set("group.id", &config.kafka.group_id)
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .create()
        .map_err(|e| WeirError::kafka("create consumer", e))
}

/// Every stage with a committed task, and those tasks, from the markers
/// each task leaves after its first commit (`committed/<stage>/<task>`).
fn committed_stages(storage: &SharedStorage) -> Result<BTreeMap<String, BTreeSet<u32>>> {
    let mut out: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
    for o in storage.list(MARKERS)? {
        let mut parts = o.key.split('/').skip(1);
        if let (Some(stage), Some(task), None) = (parts.next(), parts.next(), parts.next()) {
            if let Ok(task) = task.parse() {
                out.entry(stage.to_string()).or_default().insert(task);
            }
        }
    }
    Ok(out)
}

/// The group's committed offset and its metadata of each of
/// `partitions` that has one, in one request that waits, as an instance
/// does, for a transaction still open on them.
fn committed_offsets(
    consumer: &BaseConsumer,
    config: &Config,
    partitions: &[(String, i32)],
) -> Result<BTreeMap<(String, i32), (i64, String)>> {
    let (_, got) = crate::engine::group::poll::committed_offsets(consumer, config, partitions)?;
    let mut out = BTreeMap::new();
    for e in got.elements() {
        let tp = (e.topic().to_string(), e.partition());
        e.error().map_err(|err| {
            WeirError::kafka(
                format!(
                    "read the committed offset of {}/{} for consumer group {:?}",
                    tp.0, tp.1, config.kafka.group_id
                ),
                err,
            )
        })?;
        if let Offset::Offset(o) = e.offset() {
            out.insert(tp, (o, e.metadata().to_string()));
        }
    }
    Ok(out)
}

/// The state handles of one downloaded task: one RocksDB per keyed node,
/// in `<dir>/<node uid>`, its files named `<node uid>/<file>` in the
/// manifest.
fn task_handles(
    root: &Path,
    dir: &Path,
    m: &TaskManifest,
    operators: &[OperatorInfo],
) -> Vec<StateHandle> {
    let relative = dir.strip_prefix(root).unwrap_or(dir);
    operators
        .iter()
        .map(|o| {
            let prefix = format!("{}/", o.uid);
            let files: Vec<SnapshotFile> = m
                .files
                .iter()
                .filter_map(|f| {
                    Some(SnapshotFile {
                        name: f.name.strip_prefix(&prefix)?.to_string(),
                        size_bytes: f.size_bytes,
                        crc32: Some(f.crc32),
                    })
                })
                .collect();
            StateHandle {
                uid: o.uid.clone(),
                subtask: m.task,
                key_groups: m.key_groups,
                path: relative.join(&o.uid).display().to_string(),
                size_bytes: files.iter().map(|f| f.size_bytes).sum(),
                files,
            }
        })
        .collect()
}
