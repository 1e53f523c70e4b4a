//! A job graph in group mode (`scale.mode = "group"`): several instances
//! run one graph; Kafka's consumer group assigns the work, the repartition
//! topics carry the exchanges, and one transaction per instance per epoch
//! makes it exactly-once, as for the built-in pipeline
//! (`crate::scale::engine`, whose poll loop, rebalance callbacks and
//! task checkpoints on shared storage this engine runs on).
//!
//! What an instance owns, all on its one thread:
//! - **input partitions** of the sources' topics. Each record runs through
//!   its source's chain (decode, the stateless nodes after it) into sinks
//!   and into the repartition topics of the stages it feeds. Each input
//!   partition is a watermark writer: at every commit it sends its
//!   watermark to every partition of those topics.
//! - **tasks**: partition `t` of stage `s`'s repartition topic is task
//!   `(s, t)`, with its chain (the stage's keyed head and what follows it),
//!   one RocksDB per keyed node, and the watermarks of its writers
//!   ([`marks`]). A task's watermark advance fires its timers and goes on,
//!   as the task's own mark, into the topics it writes.
//!
//! Every epoch (`checkpoint.interval`) the instance snapshots each changed
//! task and uploads it with its manifest (files, writer marks, offset), then
//! commits one transaction holding its repartition writes, its sinks'
//! output and the offsets of every partition it owns, each task's offset
//! carrying the pointer to its manifest. The commit is the checkpoint.
//!
//! - [`plan`]: which nodes run in which chain, and the stages' topics.
//! - [`wire`]: rows and watermarks on a repartition topic.
//! - [`exchange`]: a hash edge as a repartition topic.
//! - [`marks`]: a task's watermark over its writers.
//! - [`reset`]: `weir reset`, starting the job over with empty state.

pub mod exchange;
mod fetcher;
mod housekeeper;
pub mod marks;
pub mod plan;
pub mod reset;
mod uploader;
pub mod wire;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::BorrowedMessage;
use rdkafka::{Message, Offset, TopicPartitionList};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use self::exchange::RepartitionOut;
use self::marks::WriterMarks;
use self::plan::{partition_writer, task_writer, Entry, GroupPlan, Writers};
use super::chain::{Chain, ExchangeOut, SlotBody, Target};
use super::{check_sink_topics, slot_body, OutputFor};
use crate::checkpoint::metadata::OperatorInfo;
use crate::checkpoint::{SnapshotFile, StateHandle};
use crate::config::{BadRecordPolicy, Config, StartPosition};
use crate::dataflow::graph::{Exchange, Graph, NodeBody, NodeId, RecordError, SourceSpec};
use crate::dataflow::row::Row;
use crate::dataflow::state::KeyedStore;
use crate::dataflow::{Record, RecordKey};
use crate::element::Element;
use crate::error::{Result, WeirError};
use crate::kafka::producer::SinkProducer;
use crate::kafka::{self, REQUEST_TIMEOUT};
use crate::observe::metrics::Metrics;
use crate::runtime::commit::{CommitOffsets, CommitPoint, KafkaCommitPoint, TransactionBudget};
use crate::runtime::output::{Output, OutputShared, OutputTarget};
use crate::runtime::query::{QueryFailure, StateQuery};
use crate::runtime::source::{bad_record, WATERMARK_INTERVAL};
use crate::runtime::{DeadLetter, JobShared, BATCH};
use crate::scale::engine::{
    committed_offsets, forget_lag, resume, run_instance, writer_id, GroupContext, GroupWork,
    Ownership, Rebalancing,
};
use crate::scale::epoch::{
    commit_before_revocation, restore_point, run_epoch, Committed, EpochWork, RestorePoint,
};
use crate::scale::manifest::{self, GraphTaskState, ManifestFile, TaskManifest};
use crate::scale::storage::SharedStorage;
use crate::scale::{checkpoints, repartition};
use crate::state::key_groups::{key_group, range_for_subtask, subtask_for_key_group};
use crate::time::watermark::SourceWatermarks;
use crate::time::MIN_WATERMARK;

/// How often storage is garbage-collected and the repartition topics trimmed.
const HOUSEKEEPING_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);

/// The most output (keys and values) an instance holds in its transaction
/// while its checkpoint uploads are late: past it, the instance reads no
/// more input until the checkpoint is on storage, renewing the transaction
/// meanwhile (`GraphInstance::wait_for_uploads`).
const JOURNAL_LIMIT: usize = 256 << 20;

/// How often the stores of changed tasks are looked at for SST files that
/// RocksDB wrote since (flushes, compactions): those are queued for upload
/// at once, not at the epoch's end (`GraphInstance::upload_new_files`).
const EAGER_UPLOAD_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// A task's folder of hard links to SST files queued for upload before
/// their snapshot (RocksDB may delete a file before its upload is done).
const STAGING: &str = "staging";

type Consumer_ = BaseConsumer<GroupContext<GraphInstance>>;

/// The resolved start offset of each input partition that had no
/// committed offset (`GraphInstance::start_offset`).
type Starts = Arc<Mutex<BTreeMap<(String, i32), i64>>>;

/// One input partition this instance owns.
struct InputPartition {
    /// Its source, an index into `plan.sources`.
    source: usize,
    next: Option<i64>,
    /// Its watermark, with event time.
    marks: Option<SourceWatermarks>,
    /// The watermark and idleness last sent downstream.
    sent: Option<(i64, bool)>,
}

/// One task of a stage this instance owns.
struct GraphTask {
    stage: usize,
    id: u32,
    chain: Chain,
    /// Rows read for input `port` and not yet pushed into the chain: they
    /// go in batches, and before anything else (a watermark, a query, the
    /// epoch's end) reaches the chain.
    batch: Vec<Record>,
    port: usize,
    marks: WriterMarks,
    next: Option<i64>,
    /// The manifest of the last checkpoint taken, and of the last committed.
    pointer: Option<String>,
    committed: Option<String>,
    /// SST files on storage under this incarnation's writer, by name, and
    /// those queued for upload or being uploaded (name: object key, size).
    uploaded: HashMap<String, ManifestFile>,
    uploading: HashMap<String, (String, u64)>,
    /// Names this incarnation's objects (see `scale::engine`).
    writer: String,
    changed: bool,
    dir: PathBuf,
    /// The key groups `[start, end)` it owns.
    key_groups: (u32, u32),
    /// The key of this task's committed marker in storage
    /// (`manifest::committed_marker`), and whether this incarnation wrote
    /// it.
    marker: String,
    marked: bool,
}

/// A task's snapshot of this epoch, its files on their way to storage.
struct Staged {
    key: (usize, u32),
    next: i64,
    seq: u64,
    target: PathBuf,
    /// Each file's name and the object it is (or will be) stored as.
    files: Vec<(String, String)>,
}

/// What a task's epoch end gives the commit.
enum TaskCheckpoint {
    /// Nothing changed: its offset, with the pointer it had.
    Unchanged(i64, String),
    Staged(Staged),
}

impl GraphTask {
    /// Moves the uploads the uploader finished into the task's cache of
    /// stored files; forgets those that failed or were cancelled (a later
    /// snapshot that needs them queues them again).
    fn harvest(&mut self, uploader: &mut uploader::Uploader, bytes: &mut u64) {
        let uploaded = &mut self.uploaded;
        self.uploading.retain(|name, (key, _)| {
            match uploader.take(key) {
                Some(Ok((size_bytes, crc32))) => {
                    *bytes += size_bytes;
                    uploaded.insert(
                        name.clone(),
                        ManifestFile {
                            name: name.clone(),
                            key: key.clone(),
                            size_bytes,
                            crc32,
                        },
                    );
                    false
                }
                Some(Err(e)) => {
                    warn!(file = %name, error = %e.report(), "a checkpoint file's upload failed; queued again when a snapshot needs it");
                    false
                }
                None => uploader.is_in_flight(key),
            }
        });
    }

    /// Removes the staging links of files no longer uploading (stored, or
    /// failed and dropped).
    fn clean_staging(&self) {
        let staging = self.dir.join(STAGING);
        let Ok(uids) = fs::read_dir(&staging) else {
            return;
        };
        for uid in uids.flatten() {
            let Ok(files) = fs::read_dir(uid.path()) else {
                continue;
            };
            for f in files.flatten() {
                let name = format!(
                    "{}/{}",
                    uid.file_name().to_string_lossy(),
                    f.file_name().to_string_lossy()
                );
                if !self.uploading.contains_key(&name) {
                    let _ = fs::remove_file(f.path());
                }
            }
        }
    }

    /// One row read from the repartition topic at `at` into the batch
    /// for input `port`, checked to be of this task's key groups
    /// (`settings`: `job.max_parallelism` and `scale.tasks`).
    fn apply(
        &mut self,
        port: usize,
        key: &[u8],
        timestamp: i64,
        row: Row,
        at: (&str, i32, i64),
        settings: (u32, u32),
    ) -> Result<()> {
        let (max_p, tasks) = settings;
        let kg = key_group(key, max_p);
        if !(self.key_groups.0..self.key_groups.1).contains(&kg) {
            // Written by an instance with another job.max_parallelism or
            // scale.tasks: applying it would put the key's state where no
            // task of this job looks for it.
            let (topic, partition, offset) = at;
            return Err(WeirError::Recovery(format!(
                "{topic}/{partition} offset {offset}: a row of key group {kg} (of \
                 job.max_parallelism = {max_p}), which task {} does not own (its key groups \
                 are {:?} with scale.tasks = {tasks}): the instance that wrote it runs with \
                 other job.max_parallelism or scale.tasks; every instance of a job must have \
                 the same",
                self.id, self.key_groups
            )));
        }
        let record = Record {
            row,
            timestamp,
            key_group: kg,
            key: RecordKey::from_slice(key),
        };
        if self.port != port {
            self.push_batch()?;
            self.port = port;
        }
        self.batch.push(record);
        if self.batch.len() >= BATCH {
            self.push_batch()?;
        }
        Ok(())
    }

    fn push_batch(&mut self) -> Result<()> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let batch = std::mem::replace(&mut self.batch, Vec::with_capacity(BATCH));
        self.chain.push(0, self.port, batch)
    }
}

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

/// A partition's position, decided when it was assigned (or rewound), and
/// the group's committed offset and checkpoint pointer for it.
struct Placed {
    committed: Option<i64>,
    metadata: String,
    position: i64,
}

/// The instance's state, shared between the poll loop and the rebalance
/// callbacks (which run inside `poll`, on the same thread).
pub struct GraphInstance {
    graph: Arc<Graph>,
    plan: Arc<GroupPlan>,
    stage_of_topic: HashMap<String, usize>,
    source_of_topic: HashMap<String, usize>,
    /// Per stage, the writers its tasks wait for, and each keyed node's
    /// declared tables as its checkpoints record them.
    expected: Vec<BTreeSet<String>>,
    stage_tables: Vec<BTreeMap<String, Vec<String>>>,
    /// Per stage, its keyed nodes as its manifests describe them to
    /// readers (`GraphTaskState::operators`).
    stage_operators: Vec<Vec<OperatorInfo>>,
    /// Per source, its `weir_records_in_total` counter.
    records_in: Vec<prometheus::IntCounter>,
    /// The wall clock the input partitions' idleness is judged by, read
    /// with their watermarks (every `WATERMARK_INTERVAL`), not per record.
    now_ms: u64,
    config: Arc<Config>,
    /// Reads the tasks' last committed pointers without waiting for open
    /// transactions (`fence_dead_owners`).
    last_committed: BaseConsumer,
    metrics: Arc<Metrics>,
    producer: Arc<SinkProducer>,
    /// The producer's transaction as the epoch's commit point.
    commit: Arc<KafkaCommitPoint>,
    /// Bytes uploaded since the last commit.
    uploaded_bytes: u64,
    storage: SharedStorage,
    /// Streams the tasks' snapshot files to storage off this thread.
    uploader: uploader::Uploader,
    /// The last epoch's checkpoint was declined (its files were not on
    /// storage in time) and its output waits in the open transaction: no
    /// new checkpoint starts until the uploader is idle.
    behind: bool,
    last_eager_upload: Instant,
    /// The epoch being committed must commit now (a revocation, the stop).
    forcing: bool,
    budget: TransactionBudget,
    writer: String,
    seq: u64,
    /// Epochs committed; the repartition exchanges read it too: each
    /// writes its shape first in every epoch (`exchange::RepartitionOut`).
    epoch: Arc<std::sync::atomic::AtomicU64>,
    incarnations: u64,
    /// The group member id last announced on shared storage.
    announced: Option<String>,
    inputs: BTreeMap<(String, i32), InputPartition>,
    /// One chain per source (stateless: shared by its partitions), and the
    /// rows read for it not yet pushed.
    source_chains: Vec<Chain>,
    source_batches: Vec<Vec<Record>>,
    dead_letters: Vec<Output>,
    tasks: BTreeMap<(usize, u32), GraphTask>,
    pending: Vec<(String, i32)>,
    /// Positions set when partitions were assigned, and what their
    /// restore needs, until they are activated.
    placed: HashMap<(String, i32), Placed>,
    /// The tasks whose offsets the last commit carried: the only ones
    /// storage collection may touch (`housekeeping`).
    collectable: BTreeSet<(usize, u32)>,
    housekeeper: housekeeper::Housekeeper,
    /// Local copies of committed checkpoints made ready off the poll
    /// thread; per task being fetched, the manifest it waits for, and the
    /// manifests whose local copy is ready and checked.
    fetcher: fetcher::Fetcher,
    fetching: HashMap<(usize, u32), String>,
    fetched: HashMap<String, PathBuf>,
    failed: Option<WeirError>,
    abandoned: bool,
    dirty: bool,
    last_commit: Instant,
    last_housekeeping: Instant,
    last_marks: Instant,
    ownership: Arc<Mutex<Ownership>>,
    starts: Starts,
    /// Interactive queries per keyed node: its stage, its slot in the
    /// stage's chain, its uid, and the one queue the instance answers.
    queries: Vec<(
        usize,
        usize,
        String,
        crossbeam_channel::Receiver<StateQuery>,
    )>,
    cancel: CancellationToken,
}

/// Runs `graph` as one instance of its group until a stop request, a fatal
/// error or the restart budget.
pub fn run(graph: Arc<Graph>, config: Arc<Config>, shared: JobShared) -> Result<()> {
    let plan = Arc::new(
        GroupPlan::new(&graph, &config.job.name).map_err(|problems| WeirError::Graph {
            job: graph.name.clone(),
            problems,
        })?,
    );
    info!(job = %graph.name, graph = %graph.describe(), stages = plan.stages.len(), "job graph (group mode)");
    // Where input partitions without a committed offset start, once
    // resolved: kept across refused commits and attempts until a commit
    // records them, so that `latest` means the end when the job started,
    // not the end at every retry.
    let starts = Arc::new(Mutex::new(BTreeMap::new()));
    crate::runtime::job::run_attempts(config, shared, None, |config, shared, _, progressed| {
        run_attempt(&graph, &plan, config, shared, progressed, &starts)
    })
}

/// Each keyed node of `stage`'s chain and its declared tables, `name kind
/// codec`, as a graph task's manifest records them.
fn stage_tables(graph: &Graph, stage: &plan::StagePlan) -> BTreeMap<String, Vec<String>> {
    stage
        .entry
        .nodes
        .iter()
        .filter_map(|n| match &graph.nodes[*n].body {
            NodeBody::Operator(o) if o.keyed => Some((
                graph.nodes[*n].uid.clone(),
                o.tables
                    .iter()
                    .map(|t| format!("{} {:?} {}", t.name, t.kind, t.codec).to_lowercase())
                    .collect(),
            )),
            _ => None,
        })
        .collect()
}

/// Each keyed node of `stage`'s chain as the job's topology describes it
/// (kind, key columns, tables), for the stage's manifests.
fn stage_operators(graph: &Graph, stage: &plan::StagePlan, config: &Config) -> Vec<OperatorInfo> {
    let topology = graph.topology(config.scale.tasks, config.job.max_parallelism);
    stage
        .entry
        .nodes
        .iter()
        .map(|n| &topology.operators[*n])
        .filter(|o| o.state.is_some())
        .cloned()
        .collect()
}

/// The offsets `at` (`Beginning` or `End`) stands for in each of
/// `partitions`, in one request, as the group consumer reads them
/// (read_committed: the end is the last stable offset).
fn list_offsets<C: rdkafka::consumer::ConsumerContext>(
    consumer: &BaseConsumer<C>,
    partitions: &[(String, i32)],
    at: Offset,
) -> Result<HashMap<(String, i32), i64>> {
    let what = || format!("the {at:?} offsets of {partitions:?}");
    let mut tpl = TopicPartitionList::new();
    for (topic, partition) in partitions {
        tpl.add_partition_offset(topic, *partition, at)
            .map_err(|e| WeirError::kafka(what(), e))?;
    }
    let got = consumer
        .offsets_for_times(tpl, REQUEST_TIMEOUT)
        .map_err(|e| WeirError::kafka(what(), e))?;
    let mut out = HashMap::new();
    for e in got.elements() {
        let tp = format!("{}/{}", e.topic(), e.partition());
        e.error()
            .map_err(|err| WeirError::kafka(format!("the {at:?} offset of {tp}"), err))?;
        match e.offset() {
            Offset::Offset(o) => out.insert((e.topic().to_string(), e.partition()), o),
            other => {
                return Err(WeirError::Recovery(format!(
                    "the {at:?} offset of {tp}: answered {other:?}"
                )))
            }
        };
    }
    for (topic, partition) in partitions {
        if !out.contains_key(&(topic.clone(), *partition)) {
            return Err(WeirError::Recovery(format!(
                "the {at:?} offset of {topic}/{partition}: no answer for it"
            )));
        }
    }
    Ok(out)
}

fn source_spec(graph: &Graph, node: NodeId) -> &SourceSpec {
    match &graph.nodes[node].body {
        NodeBody::Source(s) => s,
        _ => unreachable!("a source entry's head is a source"),
    }
}

fn run_attempt(
    graph: &Arc<Graph>,
    plan: &Arc<GroupPlan>,
    config: &Arc<Config>,
    shared: &JobShared,
    progressed: &Arc<AtomicBool>,
    starts: &Starts,
) -> Result<()> {
    let cancel = CancellationToken::new();
    // Fences this instance's previous incarnation and aborts its open
    // transaction, so the offsets read below are final.
    // With a journal: a transaction whose checkpoint is late is renewed
    // (`GraphInstance::renew`), never held past its timeout.
    let producer = Arc::new(SinkProducer::create(config, cancel.clone())?.with_journal());
    let commit = Arc::new(KafkaCommitPoint::for_instance(producer.clone()));
    commit.begin()?;
    let meta = kafka::create_consumer(config)?;
    check_sink_topics(graph, &meta)?;
    let mut topics = Vec::new();
    let mut source_of_topic = HashMap::new();
    let mut partitions_of_source = Vec::new();
    for (s, entry) in plan.sources.iter().enumerate() {
        let spec = source_spec(graph, entry.head);
        for t in &spec.topics {
            source_of_topic.insert(t.clone(), s);
            topics.push(t.clone());
        }
        partitions_of_source.push(kafka::topic_partitions(&meta, &spec.topics)?);
    }
    for st in &plan.stages {
        topics.push(repartition::ensure_topic(config, &meta, st.topic.clone())?);
    }
    let tasks = config.scale.tasks;
    let expected = plan
        .stages
        .iter()
        .map(|st| {
            let mut w = BTreeSet::new();
            for ws in &st.writers {
                match ws {
                    Writers::Source(s) => w.extend(
                        partitions_of_source[*s]
                            .iter()
                            .map(|(t, p)| partition_writer(t, *p)),
                    ),
                    Writers::Stage(g) => {
                        let head = &graph.nodes[plan.stages[*g].entry.head].uid;
                        w.extend((0..tasks).map(|t| task_writer(head, t)));
                    }
                }
            }
            w
        })
        .collect();
    let writer = writer_id();
    let housekeeper = housekeeper::Housekeeper::start(
        config,
        housekeeper::Rules {
            retained: config.checkpoint.retained,
            grace_ms: (2 * config.checkpoint.timeout).as_millis() as i64,
            own: format!("{writer}-"),
        },
    )?;
    let mut instance = GraphInstance {
        graph: graph.clone(),
        plan: plan.clone(),
        stage_of_topic: plan.topics().into_iter().collect(),
        source_of_topic,
        expected,
        stage_tables: plan
            .stages
            .iter()
            .map(|st| stage_tables(graph, st))
            .collect(),
        stage_operators: plan
            .stages
            .iter()
            .map(|st| stage_operators(graph, st, config))
            .collect(),
        records_in: plan
            .sources
            .iter()
            .map(|e| {
                shared
                    .metrics
                    .records_in
                    .with_label_values(&[graph.nodes[e.head].uid.as_str()])
            })
            .collect(),
        now_ms: crate::runtime::now_ms(),
        config: config.clone(),
        last_committed: kafka::create_last_committed_reader(config)?,
        metrics: shared.metrics.clone(),
        producer: producer.clone(),
        commit: commit.clone(),
        uploaded_bytes: 0,
        storage: SharedStorage::open(config)?,
        uploader: uploader::Uploader::start(config)?,
        behind: false,
        last_eager_upload: Instant::now(),
        forcing: false,
        budget: TransactionBudget::from_config(config),
        writer,
        seq: 0,
        epoch: Arc::default(),
        incarnations: 0,
        announced: None,
        inputs: BTreeMap::new(),
        source_chains: Vec::new(),
        source_batches: Vec::new(),
        dead_letters: Vec::new(),
        tasks: BTreeMap::new(),
        pending: Vec::new(),
        placed: HashMap::new(),
        collectable: BTreeSet::new(),
        housekeeper,
        fetcher: fetcher::Fetcher::start(config)?,
        fetching: HashMap::new(),
        fetched: HashMap::new(),
        failed: None,
        abandoned: false,
        dirty: false,
        last_commit: Instant::now(),
        last_housekeeping: Instant::now(),
        last_marks: Instant::now(),
        ownership: shared.ownership.clone(),
        starts: starts.clone(),
        queries: plan
            .stages
            .iter()
            .enumerate()
            .flat_map(|(stage, st)| {
                st.entry
                    .nodes
                    .iter()
                    .enumerate()
                    .filter(|(_, n)| graph.nodes[**n].is_keyed())
                    .map(move |(slot, n)| (stage, slot, *n))
            })
            .map(|(stage, slot, n)| {
                let uid = graph.nodes[n].uid.clone();
                let rx = shared
                    .queries
                    .register_keyed(
                        &uid,
                        1,
                        config.job.max_parallelism,
                        Some(graph.key_column_info(n)),
                    )
                    .pop()
                    .expect("one queue");
                (stage, slot, uid, rx)
            })
            .collect(),
        cancel: cancel.clone(),
    };
    instance.build_source_chains();
    instance.publish_ownership();
    info!(
        job = %config.job.name,
        instance = config.instance(),
        tasks,
        topics = ?topics,
        protocol = ?config.scale.group_protocol,
        "instance joining the job's group"
    );
    run_instance(
        config, instance, &topics, &*commit, &cancel, shared, progressed,
    )
}

impl GraphInstance {
    fn head_uid(&self, stage: usize) -> &str {
        &self.graph.nodes[self.plan.stages[stage].entry.head].uid
    }

    /// What every output of this instance shares.
    fn outputs(&self) -> OutputShared {
        OutputShared {
            producer: self.producer.clone(),
            metrics: self.metrics.clone(),
            cancel: self.cancel.clone(),
        }
    }

    /// The sinks' output in group mode: written in the open transaction on
    /// this thread, between records, so nothing is ever held back.
    fn output(&self, uid: &str, subtask: u32, what: OutputFor<'_>) -> Output {
        Output::ungated(what.target(uid, subtask), &self.outputs())
    }

    /// The chain of `entry` for task (or source) `subtask`: its nodes, hash
    /// edges out of it as repartition topics, `stores` for its keyed nodes.
    fn build_chain(
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
                        self.epoch.clone(),
                        self.repartition_too_large(n, name.clone(), subtask, stage),
                    ),
                    cols.clone(),
                ));
            }
            let body = slot_body(graph, n, subtask, stores.remove(&n), |what| {
                self.output(graph.output_label(n), subtask, what)
            });
            slots.push(super::chain::Slot {
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
    fn repartition_too_large(
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
    fn build_source_chains(&mut self) {
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
        self.source_batches = chains.iter().map(|_| Vec::new()).collect();
        self.source_chains = chains;
        self.dead_letters = dead;
    }

    fn publish_ownership(&self) {
        let mut o = self.ownership.lock().expect("ownership lock");
        o.instance = self.config.instance().to_string();
        o.inputs = self
            .inputs
            .keys()
            .map(|(t, p)| format!("{t}/{p}"))
            .collect();
        o.stages.clear();
        for (stage, id) in self.tasks.keys() {
            o.stages
                .entry(self.head_uid(*stage).to_string())
                .or_default()
                .push(*id);
        }
        // `tasks` and `committed` show the first stage (a TOML pipeline's
        // only one), as for the built-in pipelines before graphs; every
        // stage's tasks are in `stages`.
        o.tasks = self
            .tasks
            .keys()
            .filter(|(stage, _)| *stage == 0)
            .map(|(_, id)| *id)
            .collect();
        o.committed = self
            .tasks
            .iter()
            .filter(|((stage, _), _)| *stage == 0)
            .filter_map(|((_, id), t)| Some((*id, t.committed.clone()?)))
            .collect();
    }

    fn on_revoke(&mut self, consumer: &Consumer_, tpl: &TopicPartitionList, lost: bool) {
        if !self.abandoned && self.failed.is_none() {
            let instance = self.config.instance().to_string();
            self.failed = commit_before_revocation(lost, &instance, tpl.count(), || {
                self.commit(consumer, true)
            });
        }
        for e in tpl.elements() {
            let tp = (e.topic().to_string(), e.partition());
            info!(
                topic = e.topic(),
                partition = e.partition(),
                "partition revoked"
            );
            self.pending.retain(|p| *p != tp);
            self.placed.remove(&tp);
            if let Some(stage) = self.stage_of_topic.get(&tp.0) {
                self.fetching.remove(&(*stage, tp.1 as u32));
            }
            forget_lag(&self.metrics, &tp);
            match self.stage_of_topic.get(&tp.0) {
                Some(stage) => {
                    if let Some(task) = self.tasks.remove(&(*stage, tp.1 as u32)) {
                        task.chain.forget_gauges();
                        // Its queued uploads are another owner's business
                        // now; the links would keep their files on disk.
                        let _ = fs::remove_dir_all(task.dir.join(STAGING));
                    }
                }
                None => {
                    self.inputs.remove(&tp);
                }
            }
        }
        self.publish_ownership();
    }

    /// Announces this instance's group member id on shared storage when it
    /// changed (see [`GraphInstance::fence_dead_owners`]): at each
    /// assignment and each commit. A failed write is a warning; it is
    /// tried again at the next.
    fn announce(&mut self, consumer: &Consumer_) {
        let Some(member) = kafka::members::own_member_id(consumer.client()) else {
            return;
        };
        if self.announced.as_deref() == Some(member.as_str()) {
            return;
        }
        let presence = manifest::Presence {
            instance: self.config.instance().to_string(),
            member: member.clone(),
            writer: format!("{}-{}", self.writer, self.incarnations),
            written_ms: crate::runtime::now_ms(),
            wire_format: wire::FORMAT,
            manifest_format: manifest::FORMAT,
        };
        let bytes = serde_json::to_vec(&presence).expect("a presence serializes");
        match self
            .storage
            .put(&manifest::presence_key(self.config.instance()), bytes)
        {
            Ok(()) => {
                info!(member = %member, "announced this instance's group member id");
                self.announced = Some(member);
            }
            Err(e) => {
                warn!(error = %e.report(), "cannot announce this instance's group member id; tried again at the next commit")
            }
        }
    }

    /// Where each of `partitions` resumes, from the group's committed
    /// offsets (read_committed), checked: an error for one partition is an
    /// error (not "no offset", which would start it over); lost offsets of
    /// a job that committed are refused; a repartition partition trimmed
    /// past its committed offset is refused; an input partition passed by
    /// retention starts at its first offset with a warning; one without an
    /// offset at `source.start`, resolved to an offset once.
    fn positions(
        &mut self,
        consumer: &Consumer_,
        partitions: &[(String, i32)],
    ) -> Result<Vec<((String, i32), Placed)>> {
        self.announce(consumer);
        if partitions.is_empty() {
            return Ok(Vec::new());
        }
        self.fence_dead_owners(partitions);
        let (_, committed) = committed_offsets(consumer, &self.config, partitions)?;
        let mut lost_inputs = Vec::new();
        for e in committed.elements() {
            if let Err(error) = e.error() {
                return Err(WeirError::kafka(
                    format!(
                        "read the committed offset of {}/{} for consumer group {:?}",
                        e.topic(),
                        e.partition(),
                        self.config.kafka.group_id
                    ),
                    error,
                ));
            }
            if !matches!(e.offset(), Offset::Offset(_))
                && !self.stage_of_topic.contains_key(e.topic())
            {
                lost_inputs.push(format!("{}/{}", e.topic(), e.partition()));
            }
        }
        if !lost_inputs.is_empty() {
            self.refuse_lost_input_offsets(consumer, &lost_inputs)?;
        }
        // Every partition's first offset, in one request.
        let firsts = list_offsets(consumer, partitions, Offset::Beginning)?;
        let mut placed = Vec::new();
        for e in committed.elements() {
            let tp = (e.topic().to_string(), e.partition());
            let (topic, partition) = (tp.0.as_str(), tp.1);
            let offset = match e.offset() {
                Offset::Offset(o) => Some(o),
                _ => None,
            };
            let first = firsts[&tp];
            let position = match self.stage_of_topic.get(topic).copied() {
                Some(stage) => match offset {
                    // weir trims a repartition partition only below what
                    // its task committed.
                    Some(o) if o < first => {
                        return Err(WeirError::Recovery(format!(
                            "the committed offset {o} of {topic}/{partition} (task {partition} \
                             of stage {:?}) is below the partition's first offset {first}: \
                             records the task had not read were deleted from its repartition \
                             topic, so its state cannot be brought up to date. Nothing was \
                             started; `weir reset --config <file>` starts the job over",
                            self.head_uid(stage)
                        )));
                    }
                    Some(o) => o,
                    None => first,
                },
                None => match offset {
                    Some(o) => self.past_retention(topic, partition, o, first),
                    None => {
                        let source = self.source_of_topic[topic];
                        let start = source_spec(&self.graph, self.plan.sources[source].head).start;
                        self.start_offset(consumer, topic, partition, start, first)?
                    }
                },
            };
            placed.push((
                tp,
                Placed {
                    committed: offset,
                    metadata: e.metadata().to_string(),
                    position,
                },
            ));
        }
        Ok(placed)
    }

    /// Sets the position of every partition of `tpl`, about to be
    /// assigned, and keeps what their restore needs.
    fn place(&mut self, consumer: &Consumer_, tpl: &mut TopicPartitionList) -> Result<()> {
        let partitions: Vec<(String, i32)> = tpl
            .elements()
            .iter()
            .map(|e| (e.topic().to_string(), e.partition()))
            .collect();
        for (tp, placed) in self.positions(consumer, &partitions)? {
            tpl.set_partition_offset(&tp.0, tp.1, Offset::Offset(placed.position))
                .map_err(|e| WeirError::kafka(format!("position {}/{}", tp.0, tp.1), e))?;
            self.placed.insert(tp, placed);
        }
        Ok(())
    }

    /// Restores the partitions assigned (or rewound) since the last call
    /// and lets them be read. A rewound partition is still assigned and
    /// fetching: it is sought to its position, synchronously and checked
    /// per partition. Returns the partitions sought.
    fn activate(&mut self, consumer: &Consumer_) -> Result<Vec<(String, i32)>> {
        let pending = std::mem::take(&mut self.pending);
        let started = Instant::now();
        let rewound: Vec<(String, i32)> = pending
            .iter()
            .filter(|tp| !self.placed.contains_key(*tp))
            .cloned()
            .collect();
        if !rewound.is_empty() {
            let mut seek = TopicPartitionList::new();
            for (topic, partition) in &rewound {
                seek.add_partition(topic, *partition);
            }
            self.place(consumer, &mut seek)?;
            let sought = consumer
                .seek_partitions(seek, REQUEST_TIMEOUT)
                .map_err(|e| WeirError::kafka("seek rewound partitions", e))?;
            for e in sought.elements() {
                if let Err(error) = e.error() {
                    return Err(WeirError::kafka(
                        format!(
                            "seek {}/{} to offset {:?}",
                            e.topic(),
                            e.partition(),
                            e.offset()
                        ),
                        error,
                    ));
                }
            }
        }
        let mut tpl = TopicPartitionList::new();
        let mut waiting = Vec::new();
        for tp in pending {
            let (topic, partition) = (tp.0.clone(), tp.1);
            match self.stage_of_topic.get(&topic).copied() {
                Some(stage) => {
                    let id = partition as u32;
                    let verified = if rewound.contains(&tp) {
                        // Its own snapshot, on this machine.
                        None
                    } else {
                        match self.readiness(stage, id, &tp)? {
                            Some(verified) => verified,
                            None => {
                                waiting.push(tp);
                                continue;
                            }
                        }
                    };
                    let placed = self
                        .placed
                        .remove(&tp)
                        .expect("a pending partition is placed");
                    let task =
                        self.restore_task(stage, id, placed.committed, &placed.metadata, verified)?;
                    self.tasks.insert((stage, id), task);
                }
                None => {
                    let placed = self
                        .placed
                        .remove(&tp)
                        .expect("a pending partition is placed");
                    let source = self.source_of_topic[&topic];
                    let spec = source_spec(&self.graph, self.plan.sources[source].head);
                    let marks = spec.event_time.as_ref().map(|et| {
                        let mut w =
                            SourceWatermarks::new(et.max_out_of_orderness_ms, et.idle_timeout_ms);
                        w.register(&topic, partition, None, crate::runtime::now_ms());
                        w
                    });
                    if placed.committed != Some(placed.position) {
                        // The next epoch commits it, even without a record.
                        self.dirty = true;
                    }
                    self.inputs.insert(
                        (topic.clone(), partition),
                        InputPartition {
                            source,
                            next: Some(placed.position),
                            marks,
                            sent: None,
                        },
                    );
                }
            }
            tpl.add_partition(&topic, partition);
        }
        self.pending = waiting;
        if tpl.count() == 0 {
            return Ok(rewound);
        }
        resume(consumer, &tpl, started)?;
        self.publish_ownership();
        Ok(rewound)
    }

    /// Whether task `id` of `stage`, assigned as `tp`, can be restored now:
    /// `Some(verified)` if so (`verified`: the folder the fetcher made ready
    /// and checked, if its restore is from a checkpoint), `None` while the
    /// fetcher makes its committed checkpoint ready locally (asked here the
    /// first time).
    fn readiness(
        &mut self,
        stage: usize,
        id: u32,
        tp: &(String, i32),
    ) -> Result<Option<Option<PathBuf>>> {
        let placed = &self.placed[tp];
        let label = format!("stage {:?} task {id}", self.head_uid(stage));
        let partition = format!("{}/{}", tp.0, tp.1);
        let RestorePoint::Manifest { key, .. } =
            restore_point(&label, &partition, placed.committed, &placed.metadata)?
        else {
            return Ok(Some(None));
        };
        if let Some(folder) = self.fetched.remove(&key) {
            self.fetching.remove(&(stage, id));
            return Ok(Some(Some(folder)));
        }
        if self.fetching.get(&(stage, id)) == Some(&key) {
            return Ok(None);
        }
        self.fetcher.fetch(fetcher::Fetch {
            stage,
            task: id,
            label,
            snapshots: self.task_dir(stage, id).join("snapshots"),
            key: key.clone(),
        });
        self.fetching.insert((stage, id), key);
        Ok(None)
    }

    /// Takes the fetcher's finished work. A fetch that failed (a missing or
    /// damaged object) stops the instance, as a restore would; one for a
    /// task no longer waiting for that checkpoint is dropped.
    fn take_fetched(&mut self) -> Result<()> {
        for f in self.fetcher.finished() {
            if self.fetching.get(&(f.stage, f.task)) != Some(&f.key) {
                continue;
            }
            let folder = f.result?;
            self.fetched.insert(f.key, folder);
        }
        Ok(())
    }

    /// Whether [`Self::activate`] has something to do: a pending partition
    /// that is not waiting for the fetcher.
    fn activatable(&mut self) -> Result<bool> {
        self.take_fetched()?;
        Ok(self
            .pending
            .iter()
            .any(|(topic, p)| match self.stage_of_topic.get(topic) {
                Some(stage) => self
                    .fetching
                    .get(&(*stage, *p as u32))
                    .is_none_or(|key| self.fetched.contains_key(key)),
                None => true,
            }))
    }

    /// The folder of task `id` of `stage` below `state.dir`.
    fn task_dir(&self, stage: usize, id: u32) -> PathBuf {
        self.config
            .job_state_dir()
            .join("stages")
            .join(self.head_uid(stage))
            .join(format!("{id:04}"))
    }

    /// Where input partition `topic`/`partition` without a committed
    /// offset starts: `start` resolved to an offset (the end is the last
    /// stable offset, read_committed) the first time, the same offset after
    /// that until a commit records it. Resolving `latest` again after a
    /// refused first commit would skip what arrived in between.
    fn start_offset(
        &self,
        consumer: &Consumer_,
        topic: &str,
        partition: i32,
        start: StartPosition,
        first: i64,
    ) -> Result<i64> {
        let key = (topic.to_string(), partition);
        if let Some(o) = self.starts.lock().expect("starts lock").get(&key) {
            return Ok(*o);
        }
        let o = match start {
            // The partition's first offset, just read.
            StartPosition::Earliest => first,
            StartPosition::Latest => {
                list_offsets(consumer, std::slice::from_ref(&key), Offset::End)?[&key]
            }
        };
        info!(topic, partition, offset = o, start = ?start, "input partition without a committed offset starts here");
        self.starts.lock().expect("starts lock").insert(key, o);
        Ok(o)
    }

    /// `committed`, or the partition's `first` offset when retention deleted
    /// the records from `committed` on before they were read: said in the
    /// log and counted, where librdkafka would reset it silently.
    fn past_retention(&self, topic: &str, partition: i32, committed: i64, first: i64) -> i64 {
        if committed >= first {
            return committed;
        }
        warn!(
            topic,
            partition,
            committed,
            first,
            lost = first - committed,
            "records from the committed offset on were deleted by the topic's retention before they were read; starting at the partition's first offset"
        );
        self.metrics
            .records_deleted_unread
            .with_label_values(&[topic])
            .inc_by((first - committed) as u64);
        first
    }

    /// A task whose previous owner died (or lost its membership) with its
    /// epoch open: the read of committed offsets waits for that
    /// transaction, and so does every read_committed reader of the
    /// repartition partitions it wrote to, on every instance, until the
    /// broker aborts it `transaction.timeout.ms` after it began. So before
    /// that read, each newly assigned task's last committed pointer names
    /// the instance that wrote its checkpoint (`manifest_instance`; read
    /// without waiting), and that instance is fenced by its transactional
    /// id (its open transaction is aborted now, and a zombie can no longer
    /// commit) only when it is not a member of the group.
    ///
    /// Members are told apart by their group member id, which every
    /// instance announces on shared storage when it changes
    /// ([`manifest::Presence`], [`GraphInstance::announce`]): the instance
    /// is alive when the member id of its latest announcement is among the
    /// group's members (DescribeConsumerGroups). So a live member is never
    /// fenced, whatever `client.id` it sets (the user's: builds before
    /// issue #38 went by a `client.id` weir set, and fenced live instances
    /// with their own); and a restarted incarnation, which announces its
    /// new member id as it joins, is not fenced by a survivor that takes
    /// over what its predecessor wrote (the restart's own
    /// `init_transactions` aborted that transaction already). An instance
    /// that never announced one (a build before this) is not fenced: the
    /// read waits as before.
    ///
    /// Static membership (`group.instance.id`) would name instances too,
    /// but it changes what the group does: a stopped or killed member keeps
    /// its partitions until its session times out, so scale-in and
    /// take-over after a crash would wait for it. The member id in the
    /// pointer alone would not know a restarted incarnation (a new member
    /// id), which would then be fenced needlessly.
    ///
    /// When the pointers, the members or an announcement cannot be read,
    /// or the fence fails, it warns and the read waits as before.
    fn fence_dead_owners(&self, partitions: &[(String, i32)]) {
        let mut tpl = TopicPartitionList::new();
        for (t, p) in partitions
            .iter()
            .filter(|(t, _)| self.stage_of_topic.contains_key(t))
        {
            tpl.add_partition(t, *p);
        }
        if tpl.count() == 0 {
            return;
        }
        let last = match self.last_committed.committed_offsets(tpl, REQUEST_TIMEOUT) {
            Ok(last) => last,
            Err(e) => {
                warn!(error = %e, "cannot read the tasks' last committed offsets; a dead previous owner's open transaction is left to time out");
                return;
            }
        };
        let own = self.config.instance();
        let writers: BTreeSet<String> = last
            .elements()
            .iter()
            .filter_map(|e| {
                let instance = manifest::manifest_instance(manifest::parse_pointer(e.metadata())?)?;
                (instance != own).then(|| instance.to_string())
            })
            .collect();
        if writers.is_empty() {
            return;
        }
        let group = &self.config.kafka.group_id;
        let members = match kafka::members::group_members(
            self.last_committed.client(),
            group,
            REQUEST_TIMEOUT,
        ) {
            Ok(m) => m,
            Err(e) => {
                warn!(error = %e.report(), "cannot list the group's members; a dead previous owner's open transaction is left to time out");
                return;
            }
        };
        for instance in &writers {
            let presence = match self.storage.get(&manifest::presence_key(instance)) {
                Ok(Some(bytes)) => match serde_json::from_slice::<manifest::Presence>(&bytes) {
                    Ok(p) => p,
                    Err(e) => {
                        warn!(instance, error = %e, "an instance's announced member id does not parse; not fenced, its open transaction, if any, is left to time out");
                        continue;
                    }
                },
                Ok(None) => {
                    info!(instance, "an instance that last committed a task never announced its group member id (a build before it did): not fenced; its open transaction, if any, is left to time out");
                    continue;
                }
                Err(e) => {
                    warn!(instance, error = %e.report(), "cannot read an instance's announced member id; not fenced, its open transaction, if any, is left to time out");
                    continue;
                }
            };
            if members.iter().any(|m| m.member_id == presence.member) {
                debug!(instance, member = %presence.member, "the task's last writer is a member of the group: not fenced");
                continue;
            }
            let transactional_id = self.config.transactional_id_of(instance);
            let started = Instant::now();
            if let Err(e) = kafka::producer::fence(&self.config, &transactional_id) {
                warn!(
                    instance,
                    transactional_id,
                    error = %e.report(),
                    "cannot take over the transactional id of an instance that is no longer in the group; its open transaction, if any, is left to time out"
                );
                continue;
            }
            info!(
                instance,
                transactional_id,
                member = %presence.member,
                took_ms = started.elapsed().as_millis() as u64,
                "took over the transactional id of an instance that is no longer in the group: its open transaction, if any, is aborted"
            );
        }
    }

    /// Input partitions without a committed offset start at the source's
    /// `start`: right for a new job or a partition added to a topic, wrong
    /// when the group's offsets were lost while storage holds the tasks'
    /// checkpoints (a deleted or reset group, or offsets expired after
    /// `offsets.retention.minutes` with every instance down), which would
    /// send the retained input through the tasks again. The group's
    /// offsets expire or go all together, so a job whose group has no
    /// offset for any task but whose storage holds task checkpoints lost
    /// them: refused, naming `inputs`.
    fn refuse_lost_input_offsets(&self, consumer: &Consumer_, inputs: &[String]) -> Result<()> {
        let tasks: Vec<(String, i32)> = self
            .plan
            .stages
            .iter()
            .flat_map(|s| (0..self.config.scale.tasks as i32).map(|p| (s.topic.clone(), p)))
            .collect();
        if tasks.is_empty() {
            return Ok(());
        }
        let (_, committed) = committed_offsets(consumer, &self.config, &tasks)?;
        if committed
            .elements()
            .iter()
            .any(|e| matches!(e.offset(), Offset::Offset(_)))
        {
            return Ok(());
        }
        for stage in 0..self.plan.stages.len() {
            for id in 0..self.config.scale.tasks {
                if let Some(marker) = self.committed_marker(stage, id)? {
                    return Err(WeirError::Recovery(format!(
                        "the consumer group {:?} has no committed offset for the input partitions \
                         {} nor for any task, but {} holds checkpoints the job's tasks committed \
                         (stage {:?} task {id}: {marker}): the group's offsets were lost (a deleted or \
                         reset group, or offsets expired after offsets.retention.minutes while \
                         every instance was down). Starting from source.start would process the \
                         retained input again over the tasks' state. Nothing was started. To \
                         start the job over with empty state on purpose, stop every instance and \
                         run `weir reset --config <file>`",
                        self.config.kafka.group_id,
                        inputs.join(", "),
                        self.storage.location,
                        self.head_uid(stage),
                    )));
                }
            }
        }
        Ok(())
    }

    /// Whether task `id` of `stage` ever committed, by its marker in
    /// storage (`manifest::committed_marker`): its key, if so.
    fn committed_marker(&self, stage: usize, id: u32) -> Result<Option<String>> {
        let key = manifest::committed_marker(self.head_uid(stage), id);
        Ok(self.storage.get(&key)?.map(|_| key))
    }

    /// Opens task `id` of `stage`: exactly the checkpoint its committed
    /// offset names; empty when the group has no offset for it and storage
    /// no checkpoint of it (a new job), or from `weir reset`'s offset.
    fn restore_task(
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
        let keyed: Vec<(NodeId, String, Vec<crate::dataflow::state::TableSpec>)> = self.plan.stages
            [stage]
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
                return Err(WeirError::Recovery(format!(
                    "{label}: the consumer group {:?} has no committed offset for its partition \
                     {partition}, but {} holds the checkpoints it committed ({marker}): the group's \
                     offsets were lost (a deleted or reset group, or offsets expired after \
                     offsets.retention.minutes while every instance was down). Starting it with \
                     empty state would process the retained input again and write wrong \
                     results. Nothing was started. To start the job over with empty state on \
                     purpose, stop every instance and run `weir reset --config <file>`",
                    self.config.kafka.group_id,
                    self.storage.location,
                )));
            }
        }
        let (pointer, uploaded, restored_marks) = match point {
            RestorePoint::Empty | RestorePoint::Reset { .. } => {
                for (n, uid, tables) in &keyed {
                    let store = KeyedStore::open_empty(
                        uid,
                        tables.clone(),
                        &dir.join("db").join(uid),
                        cache,
                    )?;
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
                    return Err(WeirError::Recovery(format!(
                        "{label}: checkpoint {key} in {} was written by weir before job graphs \
                         (its manifest names no stage and no tables); this weir runs every \
                         pipeline as a job graph and cannot restore it. Nothing was started. To \
                         start over with empty state, run the job under a new `job.name` and a \
                         new `kafka.group_id` (its own storage folder, committed offsets and \
                         transactional ids); until then the previous weir can go on running it",
                        self.storage.location
                    )));
                }
                let state = m.graph.clone().filter(|g| g.stage == head);
                if m.task != id || m.key_groups != range || m.offset != o || state.is_none() {
                    return Err(WeirError::Recovery(format!(
                        "{label}: checkpoint {key} in {} is of task {} (stage {:?}) with key groups \
                         {:?} at offset {}, but the group's pointer is for task {id} of stage \
                         {head:?}, key groups {range:?}, offset {o}",
                        self.storage.location,
                        m.task,
                        m.graph.as_ref().map(|g| g.stage.as_str()),
                        m.key_groups,
                        m.offset
                    )));
                }
                let state = state.expect("checked above");
                let declared = &self.stage_tables[stage];
                if state.tables != *declared {
                    return Err(WeirError::Recovery(format!(
                        "{label}: its checkpoint {key} holds the tables {:?}, but the job now \
                         declares {declared:?}; a job keeps its operators' state for its life. \
                         Start a new job (another job.name) to change them",
                        state.tables
                    )));
                }
                // A rewind restores what this process snapshotted (the
                // manifest's CRCs were computed from those very files);
                // a folder an earlier process left is checked against them.
                // The fetcher checked the folder it names just now, if
                // `verified` (and it still names this checkpoint).
                let trusted = m.writer.starts_with(&format!("{}-", self.writer));
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
                    let store = KeyedStore::restore(
                        uid,
                        tables.clone(),
                        &dir.join("db").join(uid),
                        &folder,
                        &[&handle],
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
        let mut chain = self.build_chain(&entry, format!("{head}-{id}"), id, &writer, stores);
        chain.load_watermarks(range_for_subtask(
            id,
            self.config.scale.tasks,
            self.config.job.max_parallelism,
        ))?;
        let marks = WriterMarks::new(self.expected[stage].clone(), restored_marks);
        if marks.current() > MIN_WATERMARK {
            // The operators judge lateness by it; downstream already has it.
            chain.advance_watermark(marks.current())?;
        }
        self.incarnations += 1;
        Ok(GraphTask {
            stage,
            id,
            chain,
            batch: Vec::with_capacity(BATCH),
            port: 0,
            marks,
            next: offset,
            committed: pointer.clone(),
            pointer,
            uploaded,
            uploading: HashMap::new(),
            writer: format!("{}-{}", self.writer, self.incarnations),
            changed: false,
            dir,
            marker: manifest::committed_marker(&head, id),
            marked: false,
            key_groups: range,
        })
    }

    /// One record from the consumer.
    fn on_message(&mut self, m: &BorrowedMessage<'_>) -> Result<()> {
        match self.stage_of_topic.get(m.topic()).copied() {
            Some(stage) => self.on_repartition(stage, m),
            None => self.on_input(m),
        }
    }

    fn on_repartition(&mut self, stage: usize, m: &BorrowedMessage<'_>) -> Result<()> {
        let (topic, partition, offset) = (m.topic(), m.partition(), m.offset());
        let max_p = self.config.job.max_parallelism;
        let Some(task) = self.tasks.get_mut(&(stage, partition as u32)) else {
            // Read before its restore (it is sought back) or after revocation.
            return Ok(());
        };
        if task.next.is_some_and(|next| offset < next) {
            warn!(stage, task = task.id, offset, next = ?task.next, "skipped a repartition record already applied");
            return Ok(());
        }
        let bad = |reason: String| WeirError::BadRecord {
            topic: topic.to_string(),
            partition,
            offset,
            reason,
        };
        let plan = &self.plan.stages[stage];
        let inputs = plan.inputs;
        let check_port = |port: usize| {
            if port >= inputs {
                return Err(bad(format!(
                    "a row for input {port} of {:?}, which has {inputs}",
                    self.graph.nodes[plan.entry.head].uid
                )));
            }
            Ok(())
        };
        let at = (topic, partition, offset);
        let settings = (max_p, self.config.scale.tasks);
        match wire::decode(m.payload().unwrap_or_default()).map_err(bad)? {
            wire::Wire::Rows { port, rows } => {
                check_port(port)?;
                for next in rows {
                    let (key, timestamp, row) = next.map_err(bad)?;
                    task.apply(port, key, timestamp, row, at, settings)?;
                }
            }
            wire::Wire::Row {
                port,
                timestamp,
                row,
            } => {
                check_port(port)?;
                let key = m.key().unwrap_or_default();
                task.apply(port, key, timestamp, row, at, settings)?;
            }
            wire::Wire::Shape { instance, shape } => {
                let ours = (max_p, self.config.scale.tasks);
                if (shape.max_parallelism, shape.tasks) != ours {
                    // Its rows' partitions stand for other key groups than
                    // this task's: none of them may become state.
                    return Err(WeirError::Recovery(format!(
                        "{topic}/{partition} offset {offset}: instance {instance:?} writes with \
                         job.max_parallelism = {} and scale.tasks = {}, this instance runs with \
                         job.max_parallelism = {max_p} and scale.tasks = {}; every instance of a \
                         job must have the same (weir validate prints the settings that must \
                         match)",
                        shape.max_parallelism, shape.tasks, self.config.scale.tasks
                    )));
                }
            }
            wire::Wire::Watermark {
                writer,
                watermark,
                idle,
            } => {
                task.push_batch()?;
                let advance = task.marks.on_mark(&writer, watermark, idle);
                if let Some(idle) = advance.idle {
                    task.chain.broadcast(Element::Idle(idle))?;
                }
                if let Some(wm) = advance.watermark {
                    task.chain.advance_watermark(wm)?;
                }
            }
        }
        task.next = Some(offset + 1);
        task.changed = true;
        self.dirty = true;
        Ok(())
    }

    fn on_input(&mut self, m: &BorrowedMessage<'_>) -> Result<()> {
        let (topic, partition, offset) = (m.topic(), m.partition(), m.offset());
        let tp = (topic.to_string(), partition);
        let Some(input) = self.inputs.get_mut(&tp) else {
            return Ok(());
        };
        if input.next.is_some_and(|n| offset < n) {
            warn!(topic, partition, offset, next = ?input.next, "skipped an input record already processed");
            return Ok(());
        }
        input.next = Some(offset + 1);
        self.dirty = true;
        let source = input.source;
        let head = self.plan.sources[source].head;
        let node = &self.graph.nodes[head];
        let spec = source_spec(&self.graph, head);
        self.records_in[source].inc();
        match super::source::decode(spec, &node.schema, &super::source::record_of(m)) {
            Ok(None) => Ok(()),
            Ok(Some((row, timestamp))) => {
                if let Some(w) = &mut input.marks {
                    w.on_record(topic, partition, timestamp, self.now_ms);
                }
                let batch = &mut self.source_batches[source];
                batch.push(Record {
                    row,
                    timestamp,
                    key_group: 0,
                    key: RecordKey::new(),
                });
                if batch.len() >= BATCH {
                    self.push_source(source)?;
                }
                Ok(())
            }
            // Not skipped: the instance fails its epoch and restarts from
            // the last committed one, which reads the record again.
            Err(RecordError::Unavailable(reason)) => Err(WeirError::Operator {
                uid: node.uid.clone(),
                subtask: 0,
                reason: format!("{topic}/{partition}@{offset}: {reason}"),
            }),
            Err(RecordError::Bad(reason)) => {
                match bad_record(
                    spec.on_bad_record,
                    &self.metrics,
                    topic,
                    partition,
                    offset,
                    reason,
                )? {
                    None => Ok(()),
                    Some(error) => self.dead_letters[source].dead_letter(Box::new(DeadLetter {
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

    /// Polls the input partitions' watermarks; a change makes the epoch
    /// worth committing (an idle partition's news must reach the stages
    /// even when nothing is read).
    fn poll_source_marks(&mut self) {
        let now = crate::runtime::now_ms();
        self.now_ms = now;
        for input in self.inputs.values_mut() {
            if let Some(w) = &mut input.marks {
                w.poll(now);
                if input.sent != Some((w.current(), w.is_idle())) {
                    self.dirty = true;
                }
            }
        }
        self.last_marks = Instant::now();
    }

    /// Every input partition's watermark to the stages its source feeds.
    fn send_source_marks(&mut self) -> Result<()> {
        let now = crate::runtime::now_ms();
        for ((topic, partition), input) in self.inputs.iter_mut() {
            let Some(w) = &mut input.marks else {
                continue;
            };
            w.poll(now);
            let state = (w.current(), w.is_idle());
            if state.0 > crate::time::MIN_WATERMARK {
                self.metrics
                    .source_watermark
                    .with_label_values(&[topic.as_str(), &partition.to_string()])
                    .set(state.0);
            }
            self.source_chains[input.source].send_mark(
                &partition_writer(topic, *partition),
                state.0,
                state.1,
            )?;
            input.sent = Some(state);
        }
        Ok(())
    }

    /// The rows read for `source` into its chain.
    fn push_source(&mut self, source: usize) -> Result<()> {
        let batch = std::mem::replace(&mut self.source_batches[source], Vec::with_capacity(BATCH));
        if batch.is_empty() {
            return Ok(());
        }
        self.source_chains[source].push(0, 0, batch)
    }

    /// Every row read into its chain.
    fn push_batches(&mut self) -> Result<()> {
        for source in 0..self.source_chains.len() {
            self.push_source(source)?;
        }
        for t in self.tasks.values_mut() {
            t.push_batch()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        self.push_batches()?;
        for c in &mut self.source_chains {
            c.flush()?;
        }
        for d in &mut self.dead_letters {
            d.flush_batch()?;
        }
        for t in self.tasks.values_mut() {
            t.chain.flush()?;
        }
        Ok(())
    }

    /// The epoch's checkpoint and commit (`scale::epoch::run_epoch` over
    /// this instance's [`EpochWork`]), when anything changed. While a
    /// declined checkpoint's files are still uploading, no new one starts
    /// (it would only wait for the same files) unless `forced` (a
    /// revocation, the stop): the open transaction is renewed when it
    /// nears its timeout instead.
    fn commit(&mut self, consumer: &Consumer_, forced: bool) -> Result<()> {
        self.announce(consumer);
        // Housekeeping after this call covers only what it commits:
        // nothing, if it commits nothing (a stop with an empty epoch).
        self.collectable.clear();
        if !self.dirty {
            return Ok(());
        }
        if !forced && self.waiting_for_uploads() {
            if self.renewal_due() {
                self.renew()?;
            }
            return Ok(());
        }
        let started = Instant::now();
        self.commit.set_group(consumer.group_metadata());
        let commit = self.commit.clone();
        let instance = self.config.instance().to_string();
        self.forcing = forced;
        let budget = self.budget;
        let (outcome, offsets) = run_epoch(self, consumer, &*commit, &instance, &budget)?;
        match outcome {
            Committed::Declined { renewed } => {
                self.metrics.checkpoints_declined.inc();
                if renewed {
                    // `run_epoch` renewed it; how long that took is not known here.
                    self.note_renewal(None);
                }
                if forced {
                    return Err(WeirError::Task {
                        task: "checkpoint".into(),
                        reason: format!(
                            "the epoch's checkpoint files were not on storage within \
                             checkpoint.timeout ({:?}) and the partitions are being taken away or \
                             the instance is stopping: nothing of the epoch is committed, its \
                             partitions resume from their last committed checkpoint",
                            self.config.checkpoint.timeout
                        ),
                    });
                }
                self.behind = true;
            }
            Committed::Refused(_) => {
                self.metrics.transactions_aborted.inc();
                self.metrics.commits_refused.inc();
                let mut o = self.ownership.lock().expect("ownership lock");
                o.commits_refused += 1;
                o.commits_refused_in_a_row += 1;
                let in_a_row = o.commits_refused_in_a_row;
                drop(o);
                if in_a_row.is_multiple_of(10) {
                    error!(
                        in_a_row,
                        "the group refused this instance's last {in_a_row} commits: it makes no \
                         progress while the group keeps rebalancing (instances joining and \
                         leaving, or one stalling past its session timeout)"
                    );
                }
            }
            Committed::Yes => {
                self.ownership
                    .lock()
                    .expect("ownership lock")
                    .commits_refused_in_a_row = 0;
                self.metrics.transactions_committed.inc();
                self.metrics.checkpoint_completed(
                    self.epoch.load(std::sync::atomic::Ordering::Relaxed),
                    started.elapsed().as_secs_f64(),
                    self.uploaded_bytes,
                );
                debug!(
                    partitions = offsets.len(),
                    uploaded_bytes = self.uploaded_bytes,
                    took_ms = started.elapsed().as_millis() as u64,
                    "epoch committed"
                );
                self.uploaded_bytes = 0;
                if self.last_housekeeping.elapsed() >= HOUSEKEEPING_INTERVAL {
                    self.housekeeping(false);
                }
            }
        }
        Ok(())
    }

    /// Whether the open transaction must be renewed now to stay inside
    /// `transaction.timeout.ms` (while a late checkpoint uploads).
    fn renewal_due(&self) -> bool {
        self.commit
            .transaction_age()
            .is_some_and(|age| self.budget.must_renew(age))
    }

    /// Aborts the open transaction and begins another with the same
    /// output (the producer's journal).
    fn renew(&mut self) -> Result<()> {
        let started = Instant::now();
        self.commit.renew()?;
        self.note_renewal(Some(started.elapsed()));
        Ok(())
    }

    /// Counts and logs a renewal (this instance's, or `run_epoch`'s when
    /// it declined a checkpoint), and how long it took when known.
    fn note_renewal(&self, took: Option<std::time::Duration>) {
        self.metrics.transactions_renewed.inc();
        info!(
            bytes = self.producer.journal_bytes(),
            took_ms = ?took.map(|t| t.as_millis() as u64),
            "transaction renewed: its output waits for a checkpoint still uploading"
        );
    }

    /// A declined checkpoint's files are still uploading and the output
    /// held is below its bound: no new checkpoint starts yet (it would
    /// only wait for the same files).
    fn waiting_for_uploads(&mut self) -> bool {
        self.behind && !self.uploader.idle() && self.producer.journal_bytes() < JOURNAL_LIMIT
    }

    /// Tests: every store compacted whole right after a commit, once, when
    /// the file the failpoint names exists (it is removed): a large
    /// compaction's files for the next checkpoints to upload. (RocksDB
    /// compacts on its own threads; this one runs on the poll thread,
    /// between two epochs, with nothing in the open transaction.)
    #[cfg(feature = "failpoints")]
    fn compact_on_request(&mut self) {
        let requested = fail::eval("group-compact-after-commit", |path| {
            path.is_some_and(|p| fs::remove_file(p).is_ok())
        })
        .unwrap_or(false);
        if !requested {
            return;
        }
        for task in self.tasks.values_mut() {
            for slot in &mut task.chain.slots {
                let SlotBody::Operator { ctx, .. } = &mut slot.body else {
                    continue;
                };
                let Some(store) = ctx.store_mut() else {
                    continue;
                };
                let started = Instant::now();
                match store.compact() {
                    Ok(()) => info!(
                        task = task.id,
                        took_ms = started.elapsed().as_millis() as u64,
                        "store compacted whole (failpoint)"
                    ),
                    Err(e) => warn!(task = task.id, error = %e.report(), "compaction failed"),
                }
            }
            // Its next snapshot has the new files.
            task.changed = true;
        }
        // As the next look would, within a second.
        self.upload_new_files();
    }

    /// Queues for upload the SST files RocksDB wrote since the last look
    /// in the stores of tasks that changed, each through a hard link in
    /// the task's staging folder: a snapshot that includes them finds them
    /// stored or on their way. Best effort: a failure is logged, and the
    /// snapshot queues what is missing.
    fn upload_new_files(&mut self) {
        self.last_eager_upload = Instant::now();
        let prefixes: Vec<((usize, u32), String)> = self
            .tasks
            .iter()
            .filter(|(_, t)| t.changed)
            .map(|(k, _)| (*k, manifest::stage_task_prefix(self.head_uid(k.0), k.1)))
            .collect();
        for (key, prefix) in prefixes {
            let task = self.tasks.get_mut(&key).expect("listed");
            let staging = task.dir.join(STAGING);
            let (mut queued, mut queued_bytes) = (0usize, 0u64);
            for slot in &mut task.chain.slots {
                let SlotBody::Operator { ctx, .. } = &mut slot.body else {
                    continue;
                };
                let Some(store) = ctx.store_mut() else {
                    continue;
                };
                let (db, live) = match store.live_sst_files() {
                    Ok(l) => l,
                    Err(e) => {
                        warn!(task = key.1, error = %e.report(), "listing a store's files failed");
                        continue;
                    }
                };
                for (file, size) in live {
                    let name = format!("{}/{file}", slot.uid);
                    if task
                        .uploaded
                        .get(&name)
                        .is_some_and(|m| m.size_bytes == size)
                        || task.uploading.contains_key(&name)
                    {
                        continue;
                    }
                    let link = staging.join(&name);
                    let linked = link
                        .parent()
                        .map_or(Ok(()), fs::create_dir_all)
                        .and_then(|()| match fs::hard_link(db.join(&file), &link) {
                            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
                            r => r,
                        });
                    match linked {
                        Ok(()) => {
                            let k = manifest::file_key(&prefix, &task.writer, 0, &name);
                            self.uploader.submit(&k, link);
                            task.uploading.insert(name, (k, size));
                            queued += 1;
                            queued_bytes += size;
                        }
                        // Compacted away since it was listed.
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                        Err(e) => {
                            warn!(task = key.1, file = %name, error = %e, "linking a file for upload failed")
                        }
                    }
                }
            }
            if queued > 0 {
                debug!(
                    stage = key.0,
                    task = key.1,
                    files = queued,
                    bytes = queued_bytes,
                    "new SST files queued for upload before their checkpoint"
                );
            }
        }
    }

    /// Ends the task's epoch; snapshots it if it changed and queues the
    /// files storage lacks for upload. None: no offset to commit.
    fn stage_task(&mut self, task: &mut GraphTask) -> Result<Option<TaskCheckpoint>> {
        task.chain.end_epoch()?;
        let Some(next) = task.next else {
            return Ok(None);
        };
        if !task.changed {
            if let Some(p) = &task.pointer {
                return Ok(Some(TaskCheckpoint::Unchanged(next, p.clone())));
            }
        }
        task.harvest(&mut self.uploader, &mut self.uploaded_bytes);
        self.seq += 1;
        let seq = self.seq;
        let target = task
            .dir
            .join("snapshots")
            .join(format!("{}-{seq:08}", task.writer));
        fs::create_dir_all(&target).map_err(|e| WeirError::io(&target, e))?;
        let range = range_for_subtask(
            task.id,
            self.config.scale.tasks,
            self.config.job.max_parallelism,
        );
        task.chain.save_watermarks(range)?;
        let mut files = Vec::new();
        for slot in &mut task.chain.slots {
            let SlotBody::Operator { ctx, .. } = &mut slot.body else {
                continue;
            };
            let Some(store) = ctx.store_mut() else {
                continue;
            };
            let snapshot = store.snapshot(&target.join(&slot.uid))?;
            files.extend(snapshot.files.into_iter().map(|f| SnapshotFile {
                name: format!("{}/{}", slot.uid, f.name),
                ..f
            }));
        }
        let prefix = manifest::stage_task_prefix(self.head_uid(task.stage), task.id);
        let mut staged = Vec::with_capacity(files.len());
        for f in files {
            let sst = f.name.ends_with(".sst");
            let stored = task
                .uploaded
                .get(&f.name)
                .filter(|m| sst && m.size_bytes == f.size_bytes)
                .map(|m| m.key.clone());
            let queued = task
                .uploading
                .get(&f.name)
                .filter(|(_, size)| sst && *size == f.size_bytes)
                .map(|(key, _)| key.clone());
            let key = match stored.or(queued) {
                Some(key) => key,
                None => {
                    let key = manifest::file_key(&prefix, &task.writer, seq, &f.name);
                    self.uploader.submit(&key, target.join(&f.name));
                    if sst {
                        task.uploading
                            .insert(f.name.clone(), (key.clone(), f.size_bytes));
                    }
                    key
                }
            };
            staged.push((f.name, key));
        }
        Ok(Some(TaskCheckpoint::Staged(Staged {
            key: (task.stage, task.id),
            next,
            seq,
            target,
            files: staged,
        })))
    }

    /// Waits for the uploads of `keys`, as long as the epoch may last: at
    /// most `checkpoint.timeout`, and no longer than the open transaction
    /// can wait for its commit. Whether all are done. With more output
    /// held than [`JOURNAL_LIMIT`] it waits on until they are (no more
    /// input is read meanwhile), and `forced` up to `checkpoint.timeout` in
    /// all, renewing the transaction whenever it nears its timeout.
    fn wait_for_uploads(&mut self, keys: &[String], forced: bool) -> Result<bool> {
        let started = Instant::now();
        let age = self.commit.transaction_age().unwrap_or_default();
        if self
            .uploader
            .wait(keys, started + self.budget.ack_deadline(age))
        {
            return Ok(true);
        }
        let timeout = self.config.checkpoint.timeout;
        let held = self.producer.journal_bytes();
        if forced {
            if started.elapsed() >= timeout {
                return Ok(false);
            }
        } else if held < JOURNAL_LIMIT {
            return Ok(false);
        } else {
            warn!(
                held_bytes = held,
                "the output held for a late checkpoint reached its bound: reading no more input \
                 until the checkpoint is on storage"
            );
        }
        loop {
            let age = self.commit.transaction_age().unwrap_or_default();
            let renewal = self
                .budget
                .transaction_timeout
                .saturating_sub(age + 2 * self.budget.margin());
            let mut until = Instant::now() + renewal;
            if forced {
                until = until.min(started + timeout);
            }
            if self.uploader.wait(keys, until) {
                return Ok(true);
            }
            if forced && started.elapsed() >= timeout {
                return Ok(false);
            }
            if self.renewal_due() {
                self.renew()?;
            }
        }
    }

    /// Writes the manifest of a task whose files are all on storage;
    /// returns its offset and pointer.
    fn finish_task(&mut self, staged: Staged) -> Result<(i64, String)> {
        let mut task = self.tasks.remove(&staged.key).expect("a staged task");
        let result = self.write_task_manifest(&mut task, staged);
        self.tasks.insert((task.stage, task.id), task);
        result
    }

    fn write_task_manifest(
        &mut self,
        task: &mut GraphTask,
        staged: Staged,
    ) -> Result<(i64, String)> {
        task.harvest(&mut self.uploader, &mut self.uploaded_bytes);
        let mut files = Vec::with_capacity(staged.files.len());
        for (name, key) in staged.files {
            if let Some(m) = task.uploaded.get(&name).filter(|m| m.key == key) {
                files.push(m.clone());
                continue;
            }
            match self.uploader.take(&key) {
                Some(Ok((size_bytes, crc32))) => {
                    self.uploaded_bytes += size_bytes;
                    files.push(ManifestFile {
                        name,
                        key,
                        size_bytes,
                        crc32,
                    });
                }
                Some(Err(e)) => return Err(e),
                None => {
                    return Err(WeirError::Task {
                        task: format!("stage {} task {}", task.stage, task.id),
                        reason: format!(
                            "the upload of {name} (object {key}) was lost before its manifest \
                             was written"
                        ),
                    })
                }
            }
        }
        let c = &self.config;
        let head = self.head_uid(task.stage).to_string();
        let m = TaskManifest {
            format: manifest::FORMAT,
            job: c.job.name.clone(),
            operator_uid: head.clone(),
            task: task.id,
            tasks: c.scale.tasks,
            key_groups: range_for_subtask(task.id, c.scale.tasks, c.job.max_parallelism),
            max_parallelism: c.job.max_parallelism,
            instance: c.instance().to_string(),
            writer: task.writer.clone(),
            seq: staged.seq,
            created_ms: crate::observe::now_ms(),
            offset: staged.next,
            files,
            graph: Some(GraphTaskState {
                stage: head,
                tables: self.stage_tables[task.stage].clone(),
                watermarks: task.marks.snapshot(),
                operators: self.stage_operators[task.stage].clone(),
            }),
        };
        let key = checkpoints::write_manifest(&self.storage, &m, &staged.target)?;
        task.pointer = Some(key.clone());
        Ok((staged.next, key))
    }

    /// Garbage collection of owned tasks' storage and trimming of their
    /// repartition partitions. Failures are logged: the next run retries.
    /// A round of storage collection and repartition trimming for the
    /// tasks whose offsets the last commit carried (`collectable`), on the
    /// housekeeper's thread; the stop path's final round is waited for.
    fn housekeeping(&mut self, stopping: bool) {
        self.last_housekeeping = Instant::now();
        let mut round = housekeeper::Round {
            stopping,
            ..Default::default()
        };
        for key in std::mem::take(&mut self.collectable) {
            let Some(task) = self.tasks.get(&key) else {
                continue;
            };
            let (Some(committed), Some(next)) = (task.committed.clone(), task.next) else {
                continue;
            };
            let (stage, id) = key;
            round.collect.push(housekeeper::Collect {
                stage,
                task: id,
                prefix: manifest::stage_task_prefix(self.head_uid(stage), id),
                committed,
            });
            round
                .trim
                .entry(self.plan.stages[stage].topic.clone())
                .or_default()
                .push((id as i32, next));
        }
        if stopping {
            self.housekeeper.finish(round);
        } else if !round.collect.is_empty() {
            self.housekeeper.offer(round);
        }
    }
}

/// The epoch's end on this instance's input partitions and tasks.
impl EpochWork for GraphInstance {
    /// Marks out, every chain's epoch ended, each changed task
    /// snapshotted and uploaded with its manifest; None when the uploads
    /// did not finish in time (the epoch is declined).
    fn prepare(&mut self) -> Result<Option<CommitOffsets>> {
        self.push_batches()?;
        self.send_source_marks()?;
        for c in &mut self.source_chains {
            c.end_epoch()?;
        }
        for d in &mut self.dead_letters {
            d.flush_batch()?;
        }
        let mut offsets = CommitOffsets::default();
        for ((t, p), input) in &self.inputs {
            if let Some(o) = input.next {
                offsets.insert(t, *p, o, String::new());
            }
        }
        let keys: Vec<(usize, u32)> = self.tasks.keys().copied().collect();
        let mut staged = Vec::new();
        for key in keys {
            let mut task = self.tasks.remove(&key).expect("task listed");
            let result = self.stage_task(&mut task);
            self.tasks.insert(key, task);
            match result? {
                None => {}
                Some(TaskCheckpoint::Unchanged(next, pointer)) => {
                    let topic = &self.plan.stages[key.0].topic;
                    offsets.insert(topic, key.1 as i32, next, manifest::pointer(&pointer));
                }
                Some(TaskCheckpoint::Staged(s)) => staged.push(s),
            }
        }
        let waiting: Vec<String> = staged
            .iter()
            .flat_map(|s| s.files.iter().map(|(_, key)| key.clone()))
            .collect();
        let forced = self.forcing;
        if !self.wait_for_uploads(&waiting, forced)? {
            let late: Vec<&String> = waiting
                .iter()
                .filter(|k| self.uploader.is_in_flight(k))
                .collect();
            warn!(
                files = late.len(),
                first = ?late.first(),
                timeout_ms = self.config.checkpoint.timeout.as_millis() as u64,
                "checkpoint declined: its files are still uploading; the epoch's output waits \
                 for a later checkpoint (the uploads go on)"
            );
            return Ok(None);
        }
        for s in staged {
            let key = s.key;
            let (next, pointer) = self.finish_task(s)?;
            let topic = &self.plan.stages[key.0].topic;
            offsets.insert(topic, key.1 as i32, next, manifest::pointer(&pointer));
        }
        Ok(Some(offsets))
    }

    fn committed(&mut self, offsets: &CommitOffsets) {
        self.epoch
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.dirty = false;
        self.behind = false;
        for task in self.tasks.values_mut() {
            task.harvest(&mut self.uploader, &mut self.uploaded_bytes);
            task.clean_staging();
        }
        // Files of declined checkpoints that this one did not need.
        self.uploader.forget_finished();
        self.last_commit = Instant::now();
        let stage_of_topic = &self.stage_of_topic;
        self.collectable = offsets
            .iter()
            .filter_map(|((t, p), _)| Some((*stage_of_topic.get(t)?, *p as u32)))
            .collect();
        for task in self.tasks.values_mut() {
            task.committed = task.pointer.clone();
            task.changed = false;
            if let (false, Some(pointer)) = (task.marked, &task.committed) {
                // Once per task and incarnation: from now on a lost offset
                // of this task is refused, not started over.
                match self.storage.put(&task.marker, pointer.clone().into_bytes()) {
                    Ok(()) => task.marked = true,
                    Err(e) => {
                        warn!(task = task.id, marker = %task.marker, error = %e.report(), "writing the task's committed marker failed; retried at the next commit")
                    }
                }
            }
            checkpoints::remove_stale_snapshots(
                &task.dir.join("snapshots"),
                task.committed.as_deref(),
            );
        }
        self.publish_ownership();
        #[cfg(feature = "failpoints")]
        self.compact_on_request();
    }

    /// Every partition back to its committed offset and state, without
    /// leaving the group.
    fn rewind(&mut self) {
        // What the chains gathered belonged to the aborted epoch, and so
        // did what is uploading.
        self.uploader.cancel();
        self.behind = false;
        self.build_source_chains();
        // Closes each RocksDB before its restore opens the same folder.
        let tasks = std::mem::take(&mut self.tasks);
        for (stage, id) in tasks.keys() {
            self.pending
                .push((self.plan.stages[*stage].topic.clone(), *id as i32));
        }
        drop(tasks);
        let inputs = std::mem::take(&mut self.inputs);
        self.pending.extend(inputs.into_keys());
        self.dirty = false;
        self.last_commit = Instant::now();
        self.publish_ownership();
    }
}

impl Rebalancing for GraphInstance {
    fn revoked(&mut self, consumer: &Consumer_, tpl: &TopicPartitionList, lost: bool) {
        self.on_revoke(consumer, tpl, lost);
    }

    fn place(&mut self, consumer: &Consumer_, tpl: &mut TopicPartitionList) -> Result<()> {
        GraphInstance::place(self, consumer, tpl)
    }

    fn assigned(&mut self, partitions: Vec<(String, i32)>) {
        self.pending.extend(partitions);
    }

    fn fail(&mut self, error: WeirError) {
        self.failed.get_or_insert(error);
    }
}

impl GroupWork for GraphInstance {
    fn on_message(&mut self, m: &BorrowedMessage<'_>) -> Result<()> {
        GraphInstance::on_message(self, m)
    }
    fn idle(&mut self) -> Result<()> {
        self.flush()
    }
    fn due(&mut self) -> bool {
        // One clock read per turn of the loop.
        let now = Instant::now();
        if now.duration_since(self.last_marks) >= WATERMARK_INTERVAL {
            self.poll_source_marks();
        }
        if now.duration_since(self.last_eager_upload) >= EAGER_UPLOAD_INTERVAL {
            self.upload_new_files();
        }
        if !self.dirty {
            return false;
        }
        if self.behind {
            // A declined checkpoint's files are uploading: the next one
            // starts once they are on storage, or now when the output held
            // reached its bound (its wait then blocks until they are);
            // meanwhile the transaction is renewed before it times out.
            return !self.waiting_for_uploads() || self.renewal_due();
        }
        self.last_commit.elapsed() >= self.config.checkpoint.interval
    }
    fn commit(&mut self, consumer: &Consumer_) -> Result<()> {
        GraphInstance::commit(self, consumer, false)
    }
    fn commit_to_stop(&mut self, consumer: &Consumer_) -> Result<()> {
        if !self.tasks.is_empty() || !self.inputs.is_empty() {
            self.dirty = true;
        }
        GraphInstance::commit(self, consumer, true)
    }
    fn housekeeping(&mut self, stopping: bool) {
        GraphInstance::housekeeping(self, stopping)
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
    fn activatable(&mut self) -> Result<bool> {
        GraphInstance::activatable(self)
    }
    /// The open epoch was committed just before (`poll_loop`); if its
    /// checkpoint was declined instead, its output waits in a suspended
    /// transaction while the restores run, so that they cannot outlast the
    /// transaction's timeout, and is sent again into a new one after.
    fn activate(&mut self, consumer: &Consumer_) -> Result<Vec<(String, i32)>> {
        let suspend = self.dirty;
        if suspend {
            self.producer.suspend_transaction()?;
        }
        let activated = GraphInstance::activate(self, consumer);
        if suspend {
            self.producer.resume_transaction()?;
        }
        activated
    }
    fn answer_queries(&mut self) {
        let c = self.config.clone();
        for (stage, slot, uid, queries) in &self.queries {
            while let Ok(q) = queries.try_recv() {
                let task = subtask_for_key_group(q.key_group, c.scale.tasks, c.job.max_parallelism);
                match self.tasks.get_mut(&(*stage, task)) {
                    Some(t) => {
                        // What it has read, applied first.
                        if let Err(e) = t.push_batch() {
                            self.failed.get_or_insert(e);
                        }
                        t.chain.answer(*slot, q, Some(task))
                    }
                    None => {
                        let _ = q.reply.send(Err(QueryFailure::NotHere {
                            task,
                            message: format!(
                                "key {:?} of {uid} is in task {task} of stage {:?}, which \
                                 instance {} does not own now; GET /tasks on each instance \
                                 shows which owns it",
                                q.key,
                                self.graph.nodes[self.plan.stages[*stage].entry.head].uid,
                                c.instance()
                            ),
                        }));
                    }
                }
            }
        }
    }
}
