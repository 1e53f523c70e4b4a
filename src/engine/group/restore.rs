//! A task or an input partition brought back to its committed checkpoint:
//! its chain built, its state linked from a local copy or downloaded, its
//! writers' watermarks read back. Runs on the instance's thread, from
//! `activate` in the loop (never inside a rebalance callback).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

use tracing::info;

use super::checkpoints;
use super::exchange::RepartitionOut;
use super::manifest;
use super::plan::{task_writer, Entry};
use super::protocol::{restore_point, RestorePoint};
use crate::checkpoint::StateHandle;
use crate::config::BadRecordPolicy;
use crate::dataflow::graph::{Exchange, NodeBody, NodeId};
use crate::dataflow::tables::KeyedStore;
use crate::engine::chain::{Chain, ExchangeOut, Target};
use crate::engine::core::marks::WriterMarks;
use crate::engine::core::{restore_store, TaskCore};
use crate::engine::slot_body;
use crate::error::{Refusal, Result, WeirError};
use crate::runtime::output::{Output, OutputTarget};
use crate::state::key_groups::range_for_subtask;

use super::task::GraphTask;
use super::{source_spec, wire, GraphInstance, STAGING};

impl GraphInstance {
    /// The chain of `entry` for task (or source) `subtask`: its nodes, hash
    /// edges out of it as repartition topics, `stores` for its keyed nodes.
    ///
    /// Runs on the instance's thread: the loop: from `restore_task`, and for
    /// the source chains.
    pub(super) fn build_chain(
        &self,
        entry: &Entry,
        name: String,
        subtask: u32,
        writer: &str,
        mut stores: BTreeMap<NodeId, KeyedStore>,
    ) -> Chain {
        let graph = &self.graph;
        let mut slots = Vec::new();
        let mut exchanges = Vec::new();
        for &n in &entry.nodes {
            let node = &graph.nodes[n];
            let mut targets = Vec::new();
            for e in graph.outputs(n) {
                if let Some(slot) = entry.nodes.iter().position(|m| *m == e.to) {
                    targets.push(Target::Slot { slot, port: e.port });
                    continue;
                }
                let (Some(stage), Exchange::Hash(cols)) =
                    (self.plan.stage_of_head(e.to), &e.exchange)
                else {
                    unreachable!("an edge out of a chain is a hash edge into a stage's head");
                };
                targets.push(Target::Exchange(exchanges.len()));
                exchanges.push(ExchangeOut::repartition(
                    RepartitionOut::new(
                        self.producer.clone(),
                        self.plan.stages[stage].topic.clone(),
                        e.port,
                        writer.to_string(),
                        self.config.instance().to_string(),
                        wire::Shape {
                            max_parallelism: self.config.job.max_parallelism,
                            tasks: self.config.scale.tasks,
                        },
                        self.epoch.committed.clone(),
                        self.repartition_too_large(n, name.clone(), subtask, stage),
                    ),
                    cols.clone(),
                ));
            }
            let body = slot_body(graph, n, subtask, stores.remove(&n), |what| {
                self.output(graph.output_label(n), subtask, what)
            });
            slots.push(crate::engine::chain::Slot {
                uid: node.uid.clone(),
                body,
                targets,
            });
        }
        Chain::new(
            name,
            subtask,
            slots,
            exchanges,
            self.config.job.max_parallelism,
            self.cancel.clone(),
            self.metrics.clone(),
        )
    }

    /// What a hash edge out of `node` does with a row too large for a
    /// repartition record: the `on_bad_record` of the sources upstream of
    /// it, through the sink's path for an oversized result. When they
    /// differ, the strictest wins (fail, then dead-letter, then skip): a
    /// source that asked to stop on a bad record never has its rows
    /// dropped for another source's policy.
    ///
    /// Runs on the instance's thread: the loop, from `build_chain`.
    pub(super) fn repartition_too_large(
        &self,
        node: NodeId,
        uid: String,
        subtask: u32,
        stage: usize,
    ) -> Output {
        let graph = &self.graph;
        let mut seen = BTreeSet::new();
        let mut todo = vec![node];
        let mut policy: Option<(BadRecordPolicy, Option<String>)> = None;
        while let Some(n) = todo.pop() {
            if !seen.insert(n) {
                continue;
            }
            if let NodeBody::Source(s) = &graph.nodes[n].body {
                let rank = |p: BadRecordPolicy| match p {
                    BadRecordPolicy::Fail => 2,
                    BadRecordPolicy::DeadLetter => 1,
                    BadRecordPolicy::Skip => 0,
                };
                if policy
                    .as_ref()
                    .is_none_or(|(p, _)| rank(s.on_bad_record) > rank(*p))
                {
                    policy = Some((s.on_bad_record, s.dead_letter_topic.clone()));
                }
            }
            todo.extend(graph.inputs(n).map(|e| e.from));
        }
        let (policy, dead_letters) = policy.unwrap_or((BadRecordPolicy::Fail, None));
        let policy = match (policy, &dead_letters) {
            // Validated with the source; never a dead letter without a topic.
            (BadRecordPolicy::DeadLetter, None) => BadRecordPolicy::Fail,
            (p, _) => p,
        };
        Output::ungated(
            OutputTarget {
                uid,
                subtask,
                sink_topic: self.plan.stages[stage].topic.clone(),
                dead_letter_topic: dead_letters,
                on_bad_record: policy,
            },
            &self.outputs(),
        )
    }

    /// The sources' chains and dead-letter outputs, new (nothing gathered).
    ///
    /// Runs on the instance's thread: the loop: once an attempt starts, and in
    /// a rewind.
    pub(super) fn build_source_chains(&mut self) {
        let mut chains = Vec::new();
        let mut dead = Vec::new();
        for entry in self.plan.sources.iter() {
            let uid = self.graph.nodes[entry.head].uid.clone();
            chains.push(self.build_chain(entry, uid.clone(), 0, &uid, BTreeMap::new()));
            let spec = source_spec(&self.graph, entry.head);
            dead.push(Output::ungated(
                OutputTarget {
                    uid,
                    subtask: 0,
                    sink_topic: String::new(),
                    dead_letter_topic: spec.dead_letter_topic.clone(),
                    on_bad_record: spec.on_bad_record,
                },
                &self.outputs(),
            ));
        }
        self.sources.batches = chains.iter().map(|_| Vec::new()).collect();
        self.sources.chains = chains;
        self.dead_letters = dead;
    }

    /// The folder of task `id` of `stage` below `state.dir`.
    ///
    /// Runs on the instance's thread: the loop (restores) and the assignment
    /// callback.
    pub(super) fn task_dir(&self, stage: usize, id: u32) -> PathBuf {
        self.config
            .job_state_dir()
            .join("stages")
            .join(self.head_uid(stage))
            .join(format!("{id:04}"))
    }

    /// Whether task `id` of `stage` ever committed, by its marker in
    /// storage (`manifest::committed_marker`): its key, if so.
    ///
    /// Runs on the instance's thread: the assignment callback (from
    /// `refuse_lost_input_offsets`) and the loop (from `restore_task`).
    pub(super) fn committed_marker(&self, stage: usize, id: u32) -> Result<Option<String>> {
        let key = manifest::committed_marker(self.head_uid(stage), id);
        Ok(self.storage.get(&key)?.map(|_| key))
    }

    /// Opens task `id` of `stage`: exactly the checkpoint its committed
    /// offset names; empty when the group has no offset for it and storage
    /// no checkpoint of it (a new job), or from `weir reset`'s offset.
    ///
    /// Runs on the instance's thread: the loop, from `activate`; never inside a
    /// callback.
    pub(super) fn restore_task(
        &mut self,
        stage: usize,
        id: u32,
        offset: Option<i64>,
        metadata: &str,
        verified: Option<PathBuf>,
    ) -> Result<GraphTask> {
        let c = self.config.clone();
        let head = self.head_uid(stage).to_string();
        let label = format!("stage {head:?} task {id}");
        let range = range_for_subtask(id, c.scale.tasks, c.job.max_parallelism);
        let dir = self.task_dir(stage, id);
        let snapshots = dir.join("snapshots");
        fs::create_dir_all(&snapshots).map_err(|e| WeirError::io(&snapshots, e))?;
        // Links an earlier incarnation queued: its uploads are gone.
        let staging = dir.join(STAGING);
        if staging.exists() {
            fs::remove_dir_all(&staging).map_err(|e| WeirError::io(&staging, e))?;
        }
        let keyed: Vec<(NodeId, String, Vec<crate::dataflow::tables::TableSpec>)> =
            self.plan.stages[stage]
                .entry
                .nodes
                .iter()
                .filter_map(|n| match &self.graph.nodes[*n].body {
                    NodeBody::Operator(o) if o.keyed => {
                        Some((*n, self.graph.nodes[*n].uid.clone(), o.tables.clone()))
                    }
                    _ => None,
                })
                .collect();
        let cache = c.state.cache_entries;
        let mut stores = BTreeMap::new();
        let partition = format!("{}/{id}", self.plan.stages[stage].topic);
        let point = restore_point(&label, &partition, offset, metadata)?;
        if point == RestorePoint::Empty {
            if let Some(marker) = self.committed_marker(stage, id)? {
                return Err(Refusal::TaskOffsetLost {
                    task: label.clone(),
                    group: self.config.kafka.group_id.clone(),
                    partition: partition.clone(),
                    storage: self.storage.location.clone(),
                    marker,
                }
                .into());
            }
        }
        let (pointer, uploaded, restored_marks) = match point {
            RestorePoint::Empty | RestorePoint::Reset { .. } => {
                for (n, uid, tables) in &keyed {
                    let path = dir.join("db").join(uid);
                    let store = restore_store(uid, tables.clone(), &path, None, range, cache)?;
                    stores.insert(*n, store);
                }
                match offset {
                    None => {
                        info!(stage = %head, task = id, "task starts with empty state: the group has no offset for it")
                    }
                    Some(o) => {
                        info!(stage = %head, task = id, offset = o, "task starts with empty state where weir reset put it")
                    }
                }
                (None, HashMap::new(), BTreeMap::new())
            }
            RestorePoint::Manifest { offset: o, key } => {
                let key = key.as_str();
                let started = Instant::now();
                let m = checkpoints::load_manifest(&self.storage, &label, key)?;
                if m.graph.is_none() {
                    return Err(Refusal::BeforeJobGraphs {
                        task: label.clone(),
                        key: key.to_string(),
                        storage: self.storage.location.clone(),
                    }
                    .into());
                }
                let state = m.graph.clone().filter(|g| g.stage == head);
                if m.task != id || m.key_groups != range || m.offset != o || state.is_none() {
                    return Err(Refusal::ManifestMismatch {
                        task: label.clone(),
                        key: key.to_string(),
                        storage: self.storage.location.clone(),
                        found_task: m.task,
                        found_stage: m.graph.as_ref().map(|g| g.stage.clone()),
                        found_key_groups: m.key_groups,
                        found_offset: m.offset,
                        id,
                        stage: head.to_string(),
                        key_groups: range,
                        offset: o,
                    }
                    .into());
                }
                let state = state.expect("checked above");
                let declared = &self.stage_tables[stage];
                if state.tables != *declared {
                    return Err(Refusal::TablesChanged {
                        task: label.clone(),
                        key: key.to_string(),
                        found: state.tables.clone(),
                        declared: declared.clone(),
                    }
                    .into());
                }
                // A rewind restores what this process snapshotted (the
                // manifest's CRCs were computed from those very files);
                // a folder an earlier process left is checked against them.
                // The fetcher checked the folder it names just now, if
                // `verified` (and it still names this checkpoint).
                let trusted = m.writer.starts_with(&format!("{}-", self.epoch.writer));
                let verified = verified.filter(|f| {
                    fs::read_to_string(f.join(checkpoints::LOCAL_POINTER)).is_ok_and(|k| k == key)
                });
                let linked = match &verified {
                    Some(f) => Some(f.clone()),
                    None => checkpoints::local_copy(&snapshots, key, &m, trusted),
                };
                let (folder, how, uploaded) = match linked {
                    Some(f) => (
                        f.clone(),
                        how_linked(&f, verified.is_some()),
                        checkpoints::still_stored(
                            &self.storage,
                            &manifest::stage_task_prefix(&head, id),
                            &label,
                            checkpoints::uploaded_files(&m),
                        )?,
                    ),
                    // Every file was just read from storage.
                    None => (
                        checkpoints::download(&self.storage, &snapshots, &label, key, &m)?,
                        "download",
                        checkpoints::uploaded_files(&m),
                    ),
                };
                for (n, uid, tables) in &keyed {
                    let handle = StateHandle {
                        uid: uid.clone(),
                        subtask: id,
                        key_groups: range,
                        path: uid.clone(),
                        size_bytes: 0,
                        files: Vec::new(),
                    };
                    let store = restore_store(
                        uid,
                        tables.clone(),
                        &dir.join("db").join(uid),
                        Some((&folder, &[&handle])),
                        range,
                        cache,
                    )?;
                    stores.insert(*n, store);
                }
                info!(
                    stage = %head,
                    task = id,
                    checkpoint = key,
                    bytes = m.size_bytes(),
                    how,
                    took_ms = started.elapsed().as_millis() as u64,
                    "task restored"
                );
                (Some(key.to_string()), uploaded, state.watermarks)
            }
        };
        for store in stores.values_mut() {
            store.set_flush_on_snapshot(true);
        }
        let writer = task_writer(&head, id);
        let entry = self.plan.stages[stage].entry.clone();
        let chain = self.build_chain(&entry, format!("{head}-{id}"), id, &writer, stores);
        let marks = WriterMarks::new(self.expected[stage].clone(), restored_marks);
        let core = TaskCore::new(chain, marks, range)?;
        self.epoch.incarnations += 1;
        Ok(GraphTask {
            stage,
            id,
            core,
            next: offset,
            committed: pointer.clone(),
            pointer,
            uploaded,
            uploading: HashMap::new(),
            writer: format!("{}-{}", self.epoch.writer, self.epoch.incarnations),
            changed: false,
            dir,
            marker: manifest::committed_marker(&head, id),
            marked: false,
        })
    }
}

/// (`verified`: the fetcher made it ready, by download into a
/// `...-download` folder or by checking an earlier process's copy).
/// How a task restored from local folder `f` got there, for the log
/// (`verified`: the fetcher made it ready, by download into a
/// `...-download` folder or by checking an earlier process's copy).
fn how_linked(f: &Path, verified: bool) -> &'static str {
    let downloaded = f
        .file_name()
        .is_some_and(|n| n.to_string_lossy().ends_with("-download"));
    match (verified, downloaded) {
        (true, true) => "hard links from a download made off the poll thread",
        (true, false) => "hard links from a local copy checked off the poll thread",
        (false, _) => "hard links from a local copy",
    }
}
