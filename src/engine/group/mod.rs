//! A job graph in group mode (`scale.mode = "group"`): several instances
//! run one graph; Kafka's consumer group assigns the work, the repartition
//! topics carry the exchanges, and one transaction per instance per epoch
//! makes it exactly-once, with task checkpoints on shared storage
//! ([`storage`], [`manifest`]).
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
//!   (`engine::core::marks`). A task's watermark advance fires its timers and goes on,
//!   as the task's own mark, into the topics it writes.
//!
//! Every epoch (`checkpoint.interval`) the instance snapshots each changed
//! task and uploads it with its manifest (files, writer marks, offset), then
//! commits one transaction holding its repartition writes, its sinks'
//! output and the offsets of every partition it owns, each task's offset
//! carrying the pointer to its manifest. The commit is the checkpoint.
//!
//! - [`plan`]: which nodes run in which chain, and the stages' topics.
//! - [`protocol`]: an instance's epoch and its commit, independent of
//!   Kafka (`tests/simulation_group.rs` drives it against a simulated group).
//! - [`repartition`]: the repartition topics and their records.
//! - [`manifest`]: task checkpoints on storage, pointers, garbage collection;
//!   [`checkpoints`]: reading and collecting them.
//! - [`storage`]: a shared folder or S3 through `object_store`.
//! - [`wire`]: rows and watermarks on a repartition topic.
//! - [`exchange`]: a hash edge as a repartition topic.
//! - [`reset`]: `weir reset`, starting the job over with empty state.
//! - [`committed`]: the group's committed checkpoint as a checkpoint folder.
//! - [`savepoint`]: `weir savepoint` (drain, then that folder, kept), and
//!   `--restore-from` a savepoint of either mode.

mod assignment;
pub mod checkpoints;
pub mod committed;
mod epoch;
pub mod exchange;
mod fetcher;
mod housekeeper;
mod inputs;
pub mod manifest;
pub mod plan;
pub(crate) mod poll;
pub mod protocol;
pub mod repartition;
pub mod reset;
mod restore;
pub mod savepoint;
pub mod storage;
mod task;
mod uploader;
pub mod wire;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use self::manifest::writer_id;
use self::plan::{partition_writer, task_writer, GroupPlan, Writers};
use self::poll::{run_instance, GroupContext};
use self::storage::SharedStorage;
use super::chain::Chain;
use super::{check_sink_topics, OutputFor};
use crate::checkpoint::metadata::OperatorInfo;
use crate::config::Config;
use crate::dataflow::graph::{Graph, NodeBody, NodeId, SourceSpec};
use crate::dataflow::Record;
use crate::error::{Result, WeirError};
use crate::kafka::producer::SinkProducer;
use crate::kafka::{self, REQUEST_TIMEOUT};
use crate::observe::metrics::Metrics;
use crate::runtime::assignment::Ownership;
use crate::runtime::commit::{CommitPoint, KafkaCommitPoint, TransactionBudget};
use crate::runtime::output::{Output, OutputShared};
use crate::runtime::query::StateQuery;
use crate::runtime::JobShared;
use crate::time::watermark::SourceWatermarks;

use self::task::GraphTask;

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

type Consumer_ = BaseConsumer<GroupContext>;

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

/// A partition's position, decided when it was assigned (or rewound), and
/// the group's committed offset and checkpoint pointer for it.
struct Placed {
    committed: Option<i64>,
    metadata: String,
    position: i64,
}

/// The instance's state, shared between the poll loop and the rebalance
/// callbacks (which run inside `poll`, on the same thread), by concern:
/// what the job is (the graph, its plan and what follows from them), its
/// clients, the tasks it owns, and four groups of working state, each
/// touched by the methods of one file ([`AssignmentState`], [`RestoreState`],
/// [`EpochState`], [`SourceState`]).
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
    config: Arc<Config>,
    /// Reads the tasks' last committed pointers without waiting for open
    /// transactions (`fence_dead_owners`).
    last_committed: BaseConsumer,
    metrics: Arc<Metrics>,
    producer: Arc<SinkProducer>,
    /// The producer's transaction as the epoch's commit point.
    commit: Arc<KafkaCommitPoint>,
    storage: SharedStorage,
    dead_letters: Vec<Output>,
    tasks: BTreeMap<(usize, u32), GraphTask>,
    /// An error a rebalance callback met (it cannot return one), for the
    /// loop to end the attempt with; and whether the attempt was abandoned
    /// (callbacks commit nothing more).
    failed: Option<WeirError>,
    abandoned: bool,
    ownership: Arc<Mutex<Ownership>>,
    /// Interactive queries per keyed node: its stage, its slot in the
    /// stage's chain, its uid, and the one queue the instance answers.
    queries: Vec<(
        usize,
        usize,
        String,
        crossbeam_channel::Receiver<StateQuery>,
    )>,
    cancel: CancellationToken,
    assignment: AssignmentState,
    restore: RestoreState,
    epoch: EpochState,
    sources: SourceState,
}

/// What the assignment callback leaves for the loop (`assignment.rs`).
struct AssignmentState {
    /// Partitions assigned (or rewound) and not yet restored.
    pending: Vec<(String, i32)>,
    /// Positions set when partitions were assigned, and what their
    /// restore needs, until they are activated.
    placed: HashMap<(String, i32), Placed>,
    starts: Starts,
    /// The group member id last announced on shared storage.
    announced: Option<String>,
}

/// Local copies of committed checkpoints made ready off the poll thread
/// (`restore.rs`): per task being fetched, the manifest it waits for, and
/// the manifests whose local copy is ready and checked.
struct RestoreState {
    fetcher: fetcher::Fetcher,
    fetching: HashMap<(usize, u32), String>,
    fetched: HashMap<String, PathBuf>,
}

/// The epoch and the checkpoint it ends with (`epoch.rs`), and the
/// storage work that follows commits.
struct EpochState {
    /// Something was read or is due since the last commit.
    dirty: bool,
    /// `weir savepoint`'s run: the sources stay paused, and the loop stops
    /// once what the repartition topics held is processed and committed
    /// (`GraphInstance::drained`).
    drain: bool,
    /// The last epoch's checkpoint was declined (its files were not on
    /// storage in time) and its output waits in the open transaction: no
    /// new checkpoint starts until the uploader is idle.
    behind: bool,
    /// The epoch being committed must commit now (a revocation, the stop).
    forcing: bool,
    budget: TransactionBudget,
    /// Names this process attempt's objects; its checkpoint sequence.
    writer: String,
    seq: u64,
    /// Epochs committed; the repartition exchanges read it too: each
    /// writes its shape first in every epoch (`exchange::RepartitionOut`).
    committed: Arc<std::sync::atomic::AtomicU64>,
    incarnations: u64,
    last_commit: Instant,
    /// Streams the tasks' snapshot files to storage off this thread;
    /// bytes uploaded since the last commit.
    uploader: uploader::Uploader,
    uploaded_bytes: u64,
    last_eager_upload: Instant,
    /// The tasks whose offsets the last commit carried: the only ones
    /// storage collection may touch (`housekeeping`).
    collectable: BTreeSet<(usize, u32)>,
    housekeeper: housekeeper::Housekeeper,
    last_housekeeping: Instant,
}

/// The input partitions this instance reads (`inputs.rs`).
struct SourceState {
    partitions: BTreeMap<(String, i32), InputPartition>,
    /// One chain per source (stateless: shared by its partitions), and the
    /// rows read for it not yet pushed.
    chains: Vec<Chain>,
    batches: Vec<Vec<Record>>,
    /// Per source, its `weir_records_in_total` counter.
    records_in: Vec<prometheus::IntCounter>,
    /// The wall clock the input partitions' idleness is judged by, read
    /// with their watermarks (every `WATERMARK_INTERVAL`), not per record.
    now_ms: u64,
    last_marks: Instant,
}

/// Runs `graph` as one instance of its group until a stop request, a fatal
/// error or the restart budget. With `restore_from`, a savepoint of either
/// mode, the job's tasks are first seeded from it (`savepoint::seed`).
pub fn run(
    graph: Arc<Graph>,
    config: Arc<Config>,
    shared: JobShared,
    restore_from: Option<PathBuf>,
) -> Result<()> {
    if let Some(folder) = &restore_from {
        savepoint::seed(&graph, &config, folder)?;
    }
    run_with(graph, config, shared, false)
}

/// Runs `graph` as [`run`] does; with `drain`, as `weir savepoint`'s
/// drain (`GraphInstance::drained`).
fn run_with(graph: Arc<Graph>, config: Arc<Config>, shared: JobShared, drain: bool) -> Result<()> {
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
        run_attempt(&graph, &plan, config, shared, progressed, &starts, drain)
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

/// Says on shared storage that a process of `instance` is starting, before
/// its producer takes the transactional id over: a survivor taking over a
/// task this instance last wrote fences the id only when the instance's
/// latest process is gone, and without this the new process would look
/// gone (its predecessor's member id, not in the group) from the moment
/// its producer fenced that predecessor until it joined the group and
/// announced its own member id, and a fence then ends it. A failed write
/// is a warning: the window stays open, as before.
fn announce_starting(storage: &SharedStorage, instance: &str, writer: &str) {
    let presence = manifest::Presence::starting(instance, writer);
    let bytes = serde_json::to_vec(&presence).expect("a presence serializes");
    if let Err(e) = storage.put(&manifest::presence_key(instance), bytes) {
        warn!(error = %e.report(), "cannot announce that this instance is starting; a survivor may fence it until it joins the group");
    }
}

fn run_attempt(
    graph: &Arc<Graph>,
    plan: &Arc<GroupPlan>,
    config: &Arc<Config>,
    shared: &JobShared,
    progressed: &Arc<AtomicBool>,
    starts: &Starts,
    drain: bool,
) -> Result<()> {
    let cancel = CancellationToken::new();
    let storage = SharedStorage::open(config)?;
    let writer = writer_id();
    announce_starting(&storage, config.instance(), &writer);
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
        config: config.clone(),
        last_committed: kafka::create_last_committed_reader(config)?,
        metrics: shared.metrics.clone(),
        producer: producer.clone(),
        commit: commit.clone(),
        storage,
        dead_letters: Vec::new(),
        tasks: BTreeMap::new(),
        failed: None,
        abandoned: false,
        ownership: shared.ownership.clone(),
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
        assignment: AssignmentState {
            pending: Vec::new(),
            placed: HashMap::new(),
            starts: starts.clone(),
            announced: None,
        },
        restore: RestoreState {
            fetcher: fetcher::Fetcher::start(config)?,
            fetching: HashMap::new(),
            fetched: HashMap::new(),
        },
        epoch: EpochState {
            dirty: false,
            drain,
            behind: false,
            forcing: false,
            budget: TransactionBudget::from_config(config),
            writer,
            seq: 0,
            committed: Arc::default(),
            incarnations: 0,
            last_commit: Instant::now(),
            uploader: uploader::Uploader::start(config)?,
            uploaded_bytes: 0,
            last_eager_upload: Instant::now(),
            collectable: BTreeSet::new(),
            housekeeper,
            last_housekeeping: Instant::now(),
        },
        sources: SourceState {
            partitions: BTreeMap::new(),
            chains: Vec::new(),
            batches: Vec::new(),
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
            last_marks: Instant::now(),
        },
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
            producers: vec![self.producer.clone()],
            metrics: self.metrics.clone(),
            cancel: self.cancel.clone(),
        }
    }

    /// The sinks' output in group mode: written in the open transaction on
    /// this thread, between records, so nothing is ever held back.
    fn output(&self, uid: &str, subtask: u32, what: OutputFor<'_>) -> Output {
        Output::ungated(what.target(uid, subtask), &self.outputs())
    }
}
