//! Savepoints of a group-mode job, in the one checkpoint folder format, so
//! that a job moves between the modes (docs/scale-out.md, "Savepoints and
//! moving between modes").
//!
//! **Taking one** (`weir savepoint`, every instance stopped). A group-mode
//! job's state is its tasks' committed checkpoints *and* the records in its
//! repartition topics that no task has read yet: written by an earlier
//! stage from input the sources have already committed past. A folder of
//! state and source offsets cannot hold those, so they are processed
//! first, as Flink's stop-with-savepoint drains its pipeline: the command
//! joins the group as its only member, with the sources paused, runs the
//! tasks until everything the repartition topics held is processed and
//! committed ([`super::GraphInstance`]'s drain), leaves, and checks with a
//! separate read_committed reader that no record is left past any task's
//! committed offset. Then the committed task checkpoints are laid out as a
//! checkpoint folder ([`super::committed`]) with the sources' committed
//! offsets, below `checkpoint.savepoint_dir`.
//!
//! **Restoring one** (`weir run --restore-from <folder>` in group mode): a
//! savepoint or checkpoint folder of either mode seeds the job before its
//! instance joins the group, as `weir reset` does for empty state: each
//! task's key groups are read out of the folder's state (any parallelism:
//! the folder's key-group ranges need not be the tasks'), snapshotted and
//! uploaded as the task's checkpoint; then one commit puts every task at
//! its repartition partition's end with the pointer to it, and every input
//! partition at the folder's offset. Seeding is refused while instances
//! run or once the job has committed task checkpoints (a job is seeded
//! once; `weir reset` starts it over), and done once per folder: an
//! instance restarted with the same `--restore-from` finds it recorded
//! and committed, and joins (recorded but not committed, a seeding cut
//! short, it seeds again).
//!
//! What crosses with the keyed state: timers, windows, and the watermark
//! each key group had reached, which judges lateness after the restore
//! until the live watermark passes it (`Context::save_watermarks`). What
//! does not: the inputs' watermarks. A seeded task hears its writers anew
//! (no marks), and a group savepoint records no event time per input
//! partition, so a restored job's watermark starts from the records it
//! reads, as at a fresh start.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use tracing::{info, warn};

use super::checkpoints::write_manifest;
use super::committed::{self, group_reader, Target};
use super::manifest::{
    self, committed_marker, file_key, stage_task_prefix, writer_id, GraphTaskState, ManifestFile,
    TaskManifest, MARKERS, SEEDED,
};
use super::plan::GroupPlan;
use super::repartition;
use super::reset::active_members;
use super::storage::SharedStorage;
use super::{run_with, stage_operators, stage_tables};
use crate::checkpoint::metadata::StateHandle;
use crate::checkpoint::recovery::{check_topology, Decision};
use crate::checkpoint::store::{self, CheckpointStore};
use crate::config::Config;
use crate::dataflow::graph::{Graph, NodeBody};
use crate::error::{Result, WeirError};
use crate::kafka;
use crate::runtime::JobShared;
use crate::state::backend::StateBackend;
use crate::state::key_groups::range_for_subtask;

/// Drains before the savepoint: a drain that leaves records behind (a
/// watermark a task sent as the quiet period ended) is run again.
const DRAIN_ROUNDS: usize = 3;

/// How long the check waits for a repartition partition's records.
const CHECK_TIMEOUT: Duration = Duration::from_secs(30);

/// `weir savepoint`: in group mode, drains the job and writes its
/// committed checkpoint as a savepoint folder (see the module's
/// documentation); in single mode, copies the job's last completed
/// checkpoint (a stopped job's final one) into the savepoint directory.
/// Returns the folder.
pub fn take(graph: Arc<Graph>, config: Arc<Config>) -> Result<PathBuf> {
    let dir = config.savepoint_dir();
    std::fs::create_dir_all(&dir).map_err(|e| WeirError::io(&dir, e))?;
    // The bound `POST /savepoints` keeps, before any work.
    let max = config.checkpoint.max_savepoints;
    let held = store::count_savepoints(&dir)?;
    if max == 0 || held >= max as usize {
        return Err(WeirError::SavepointRefused(format!(
            "{held} savepoints in {} reach checkpoint.max_savepoints = {max}; delete one you no \
             longer need (weir never deletes savepoints) or raise the limit",
            dir.display()
        )));
    }
    if !config.is_group() {
        return copy_last_checkpoint(&config, &dir);
    }
    let plan = GroupPlan::new(&graph, &config.job.name).map_err(|problems| WeirError::Graph {
        job: graph.name.clone(),
        problems,
    })?;
    let consumer = group_reader(&config)?;
    refuse_members(&consumer, &config, "weir savepoint")?;
    for round in 1..=DRAIN_ROUNDS {
        info!(round, "draining the repartition topics, sources paused");
        let (shared, _savepoints) = JobShared::new();
        run_with(graph.clone(), config.clone(), shared, true)?;
        match left_behind(&config, &plan)? {
            None => break,
            Some(what) if round == DRAIN_ROUNDS => {
                return Err(WeirError::SavepointRefused(format!(
                    "after {DRAIN_ROUNDS} drains, {what}; no savepoint was written"
                )))
            }
            Some(what) => warn!(round, left = %what, "records left after a drain; draining again"),
        }
    }
    let mut graph_sources = Vec::new();
    for node in &graph.nodes {
        if let NodeBody::Source(spec) = &node.body {
            graph_sources.extend(kafka::topic_partitions(&consumer, &spec.topics)?);
        }
    }
    let name = format!("savepoint-group-{}", crate::observe::now_ms());
    let partial = dir.join(format!("{name}.partial"));
    let read = committed::read(
        &config,
        None,
        Target::Savepoint {
            folder: partial.clone(),
            graph_sources,
            topology: graph.topology(config.scale.tasks, config.job.max_parallelism),
        },
    )?;
    drop(read);
    store::sync_tree(&partial)?;
    let folder = dir.join(&name);
    std::fs::rename(&partial, &folder).map_err(|e| WeirError::io(&folder, e))?;
    store::sync_dir(&dir)?;
    info!(savepoint = %folder.display(), "savepoint written");
    Ok(folder)
}

/// A single-mode job's savepoint: its newest completed checkpoint, copied.
fn copy_last_checkpoint(config: &Config, dir: &Path) -> Result<PathBuf> {
    let checkpoints = CheckpointStore::new(config.job_checkpoint_dir());
    let last = checkpoints.latest_completed()?.ok_or_else(|| {
        WeirError::SavepointRefused(format!(
            "no completed checkpoint in {}: run the job until it has taken one (a SIGTERM \
                 takes a final one)",
            checkpoints.root().display()
        ))
    })?;
    let folder = dir.join(format!("savepoint-{last:010}-{}", crate::observe::now_ms()));
    store::copy_checkpoint(&checkpoints.folder(last), &folder)?;
    info!(checkpoint_id = last, savepoint = %folder.display(), "savepoint written");
    Ok(folder)
}

/// How long `weir savepoint` waits for the group's members to go: an
/// instance killed without leaving stays a member until its session times
/// out on the broker (`group.consumer.session.timeout.ms`, 45 s by
/// default).
const MEMBERS_WAIT: Duration = Duration::from_secs(90);

/// Refuses `what` while the job's group has members (their commits would
/// race it), once [`MEMBERS_WAIT`] has not seen them go.
fn refuse_members(consumer: &BaseConsumer, config: &Config, what: &str) -> Result<()> {
    let group = &config.kafka.group_id;
    let deadline = Instant::now() + MEMBERS_WAIT;
    let mut members;
    loop {
        members = active_members(consumer, group)?;
        if members.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            break;
        }
        info!(
            group = %group,
            members = members.len(),
            "waiting for the group's members to leave (a killed instance's session to time out)"
        );
        std::thread::sleep(Duration::from_secs(2));
    }
    Err(WeirError::SavepointRefused(format!(
        "consumer group {group:?} still has {} active members after {}s: {}; stop every \
         instance of the job before {what}",
        members.len(),
        MEMBERS_WAIT.as_secs(),
        members.join(", ")
    )))
}

/// The first record past a task's committed offset, if any, as "stage S
/// task T: a record at <topic>/<partition>@<offset>": read with a
/// read_committed reader of its own, not the engine's.
fn left_behind(config: &Config, plan: &GroupPlan) -> Result<Option<String>> {
    let consumer = group_reader(config)?;
    for stage in &plan.stages {
        let partitions: Vec<(String, i32)> = (0..config.scale.tasks as i32)
            .map(|p| (stage.topic.clone(), p))
            .collect();
        let (_, committed) = super::poll::committed_offsets(&consumer, config, &partitions)?;
        for e in committed.elements() {
            let from = match e.offset() {
                Offset::Offset(o) => o,
                _ => 0,
            };
            let (_, high) = super::reset::watermarks(&consumer, e.topic(), e.partition())?;
            if from >= high {
                continue;
            }
            if let Some(at) = first_record(config, e.topic(), e.partition(), from)? {
                return Ok(Some(format!(
                    "stage {:?} task {}: a record at {}/{}@{at} is past its committed offset \
                     {from}",
                    stage.topic,
                    e.partition(),
                    e.topic(),
                    e.partition()
                )));
            }
        }
    }
    Ok(None)
}

/// The offset of the first committed record of `topic`/`partition` at or
/// after `from`, or None when it holds none (only transaction markers).
fn first_record(config: &Config, topic: &str, partition: i32, from: i64) -> Result<Option<i64>> {
    let reader: BaseConsumer = kafka::base_config(config)
        .set(
            "group.id",
            format!("{}-savepoint-check", config.kafka.group_id),
        )
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true")
        .create()
        .map_err(|e| WeirError::kafka("create the drain check's reader", e))?;
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, Offset::Offset(from))
        .map_err(|e| WeirError::kafka(format!("offset of {topic}/{partition}"), e))?;
    reader
        .assign(&tpl)
        .map_err(|e| WeirError::kafka(format!("assign {topic}/{partition}"), e))?;
    let deadline = Instant::now() + CHECK_TIMEOUT;
    while Instant::now() < deadline {
        match reader.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => return Ok(Some(m.offset())),
            Some(Err(KafkaError::PartitionEOF(_))) => return Ok(None),
            Some(Err(e)) => return Err(WeirError::kafka(format!("read {topic}/{partition}"), e)),
            None => {}
        }
    }
    Err(WeirError::SavepointRefused(format!(
        "{topic}/{partition} could not be read to its end from offset {from} within {}s",
        CHECK_TIMEOUT.as_secs()
    )))
}

/// Whether a seeding's commit is in the group: a task's offset with a
/// checkpoint pointer, or, for a job without keyed stages, an input
/// partition's offset.
fn seeding_committed(
    consumer: &BaseConsumer,
    config: &Config,
    plan: &GroupPlan,
    graph: &Graph,
) -> Result<bool> {
    let mut partitions: Vec<(String, i32)> = plan
        .stages
        .iter()
        .flat_map(|st| (0..config.scale.tasks as i32).map(|p| (st.topic.clone(), p)))
        .collect();
    if partitions.is_empty() {
        for node in &graph.nodes {
            if let NodeBody::Source(spec) = &node.body {
                partitions.extend(kafka::topic_partitions(consumer, &spec.topics)?);
            }
        }
    }
    if partitions.is_empty() {
        return Ok(true);
    }
    let (_, committed) = super::poll::committed_offsets(consumer, config, &partitions)?;
    Ok(committed.elements().iter().any(|e| {
        matches!(e.offset(), Offset::Offset(_))
            && (plan.stages.is_empty() || manifest::parse_pointer(e.metadata()).is_some())
    }))
}

/// Seeds the group-mode job `graph` from the checkpoint or savepoint
/// `folder` of either mode (see the module's documentation).
pub fn seed(graph: &Graph, config: &Config, folder: &Path) -> Result<()> {
    let refused = |reason: String| {
        WeirError::SavepointRefused(format!("--restore-from {}: {reason}", folder.display()))
    };
    let meta = store::inspect_any(folder).map_err(refused)?;
    let topology = graph.topology(config.scale.tasks, config.job.max_parallelism);
    if let Decision::Refuse(reason) = check_topology(&meta, &topology, Vec::new()) {
        return Err(refused(reason));
    }
    let storage = SharedStorage::open(config)?;
    let seeded = format!(
        "{SEEDED}/{}-{}",
        folder
            .file_name()
            .map_or_else(|| "savepoint".into(), |n| n.to_string_lossy()),
        meta.prepared_time_ms
    );
    let plan = GroupPlan::new(graph, &config.job.name).map_err(|problems| WeirError::Graph {
        job: graph.name.clone(),
        problems,
    })?;
    let consumer = group_reader(config)?;
    if storage.get(&seeded)?.is_some() {
        if seeding_committed(&consumer, config, &plan, graph)? {
            info!(savepoint = %folder.display(), "the job was seeded from this savepoint before; joining the group");
            return Ok(());
        }
        warn!(savepoint = %folder.display(), "a seeding from this savepoint was cut short before its commit; seeding again");
    }
    if let Some(marker) = storage.list(MARKERS)?.first() {
        return Err(refused(format!(
            "job {:?} already has committed task checkpoints ({}/{}); a savepoint seeds a \
             group-mode job that has none. Stop every instance, run `weir reset`, then start \
             one instance with --restore-from",
            config.job.name, storage.location, marker.key
        )));
    }
    refuse_members(&consumer, config, "seeding it from a savepoint")?;
    for st in &plan.stages {
        repartition::ensure_topic(config, &consumer, st.topic.clone())?;
    }

    let started = Instant::now();
    let scratch = config.job_state_dir().join("seeding");
    if scratch.exists() {
        std::fs::remove_dir_all(&scratch).map_err(|e| WeirError::io(&scratch, e))?;
    }
    let writer = format!("{}-0", writer_id());
    let (tasks, max_p) = (config.scale.tasks, config.job.max_parallelism);
    let mut offsets = TopicPartitionList::new();
    let mut markers = Vec::new();
    let mut bytes = 0u64;
    for st in &plan.stages {
        let head = graph.nodes[st.entry.head].uid.clone();
        let operators = stage_operators(graph, st, config);
        let tables = stage_tables(graph, st);
        for task in 0..tasks {
            let range = range_for_subtask(task, tasks, max_p);
            let prefix = stage_task_prefix(&head, task);
            let target = scratch.join(format!("{head}-{task:04}"));
            let mut files = Vec::new();
            for o in &operators {
                let handles: Vec<&StateHandle> =
                    meta.state.iter().filter(|h| h.uid == o.uid).collect();
                let db = StateBackend::restore(
                    &target.join("db").join(&o.uid),
                    folder,
                    &handles,
                    range,
                )?;
                let snapshot = target.join("snapshot").join(&o.uid);
                std::fs::create_dir_all(target.join("snapshot"))
                    .map_err(|e| WeirError::io(&target, e))?;
                for f in db.snapshot(&snapshot)?.files {
                    let name = format!("{}/{}", o.uid, f.name);
                    let key = file_key(&prefix, &writer, 1, &name);
                    let (size_bytes, crc32) = storage.put_file(&key, &snapshot.join(&f.name))?;
                    bytes += size_bytes;
                    files.push(ManifestFile {
                        name,
                        key,
                        size_bytes,
                        crc32,
                    });
                }
            }
            let (_, end) = super::reset::watermarks(&consumer, &st.topic, task as i32)?;
            let m = TaskManifest {
                format: manifest::FORMAT,
                job: config.job.name.clone(),
                operator_uid: head.clone(),
                task,
                tasks,
                key_groups: range,
                max_parallelism: max_p,
                instance: "savepoint".into(),
                writer: writer.clone(),
                seq: 1,
                created_ms: crate::observe::now_ms(),
                offset: end,
                files,
                graph: Some(GraphTaskState {
                    stage: head.clone(),
                    tables: tables.clone(),
                    watermarks: BTreeMap::new(),
                    operators: operators.clone(),
                }),
            };
            let key = write_manifest(&storage, &m, &target)?;
            offsets
                .add_partition_offset(&st.topic, task as i32, Offset::Offset(end))
                .map_err(|e| WeirError::kafka(format!("offset of {}/{task}", st.topic), e))?;
            offsets
                .find_partition(&st.topic, task as i32)
                .expect("added above")
                .set_metadata(manifest::pointer(&key));
            markers.push((committed_marker(&head, task), manifest::pointer(&key)));
        }
    }
    let source_offsets = meta.offsets_map();
    let mut inputs = 0;
    for node in &graph.nodes {
        let NodeBody::Source(spec) = &node.body else {
            continue;
        };
        for tp in kafka::topic_partitions(&consumer, &spec.topics)? {
            // A partition the savepoint does not know (added since) starts
            // at the source's `start`, as in single mode.
            if let Some(offset) = source_offsets.get(&tp) {
                offsets
                    .add_partition_offset(&tp.0, tp.1, Offset::Offset(*offset))
                    .map_err(|e| WeirError::kafka(format!("offset of {}/{}", tp.0, tp.1), e))?;
                inputs += 1;
            }
        }
    }
    // Recorded before the commit: a restart with the same folder finds
    // it, and seeds again only if the commit is not there.
    storage.put(&seeded, folder.display().to_string().into_bytes())?;
    consumer.commit(&offsets, CommitMode::Sync).map_err(|e| {
        WeirError::kafka(
            format!(
                "commit the seeded offsets for consumer group {:?} (refused while the group has \
                 members: stop every instance first)",
                config.kafka.group_id
            ),
            e,
        )
    })?;
    for (key, body) in markers {
        storage.put(&key, body.into_bytes())?;
    }
    std::fs::remove_dir_all(&scratch).map_err(|e| WeirError::io(&scratch, e))?;
    info!(
        savepoint = %folder.display(),
        tasks = plan.stages.len() as u32 * tasks,
        inputs,
        bytes,
        took_ms = started.elapsed().as_millis() as u64,
        "job seeded from the savepoint"
    );
    Ok(())
}
