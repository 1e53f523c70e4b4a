//! Single mode: each stage of a job graph runs as `job.parallelism` tasks
//! on their own threads; a hash edge is p×p bounded channels, a forward
//! edge between stages is one channel per subtask; barriers and watermarks
//! flow on them in order with the rows.
//!
//! - [`coordinator`]: the Coordinator, which triggers checkpoints, collects
//!   the tasks' acks and commits.
//! - [`alignment`]: barrier alignment, as bookkeeping.
//! - [`source_task`]: source tasks (Kafka consumer, decode, watermarks).
//! - [`stage_task`]: stage tasks (inputs, alignment, the watermark valve).
//!
//! The commit point (one Kafka transaction per checkpoint for every sink
//! of the job), the epoch gate, recovery and the restart loop are
//! `crate::runtime`'s, shared with group mode.

pub mod alignment;
pub mod coordinator;
pub mod source_task;
pub mod stage_task;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::{bounded, unbounded, Receiver, Sender};
use rdkafka::consumer::Consumer;
use rdkafka::{Offset, TopicPartitionList};
use tokio_util::sync::CancellationToken;
use tracing::info;

use self::coordinator::Coordinator;
use self::source_task::GraphSource;
use self::stage_task::{Input, StageTask};
use crate::checkpoint::store::create_private_dir;
use crate::checkpoint::{CheckpointStore, StateHandle};
use crate::config::{Config, StartPosition};
use crate::dataflow::graph::{Exchange, Graph, NodeBody};
use crate::dataflow::tables::KeyedStore;
use crate::dataflow::Record;
use crate::element::Element;
use crate::engine::chain::{Chain, ExchangeOut, Slot, Target};
use crate::engine::core::marks::WriterMarks;
use crate::engine::core::{restore_store, TaskCore};
use crate::engine::{check_sink_topics, slot_body};
use crate::error::{Result, WeirError};
use crate::kafka::{self, producer::SinkProducer};
use crate::runtime::commit::{KafkaCommitPoint, TransactionBudget};
use crate::runtime::gate::EpochGate;
use crate::runtime::job::{recover, run_attempts, supervise, TaskBody};
use crate::runtime::output::{Output, OutputShared, OutputTarget};
use crate::runtime::source::Position;
use crate::runtime::transactions::Transactions;
use crate::runtime::{JobShared, CHANNEL_CAPACITY};
use crate::state::key_groups::range_for_subtask;

/// Runs `graph` with `config` until a stop request completes a final
/// checkpoint, a fatal error, or the restart budget is spent.
pub fn run(
    graph: Arc<Graph>,
    config: Arc<Config>,
    shared: JobShared,
    restore_from: Option<PathBuf>,
) -> Result<()> {
    let problems = graph.validate();
    if !problems.is_empty() {
        return Err(WeirError::Graph {
            job: graph.name.clone(),
            problems,
        });
    }
    if config.is_group() {
        return crate::engine::group::run(graph, config, shared, restore_from);
    }
    info!(job = %graph.name, graph = %graph.describe(), "job graph");
    run_attempts(
        config,
        shared,
        restore_from,
        |config, shared, restore_from, progressed| {
            run_attempt(&graph, config, shared, restore_from, progressed)
        },
    )
}

type Channel = (Sender<Element<Record>>, Receiver<Element<Record>>);

fn run_attempt(
    graph: &Graph,
    config: &Arc<Config>,
    shared: &JobShared,
    restore_from: Option<PathBuf>,
    progressed: &Arc<AtomicBool>,
) -> Result<()> {
    let store = CheckpointStore::new(config.job_checkpoint_dir());
    create_private_dir(store.root())?;
    let p = config.job.parallelism;
    let max_p = config.job.max_parallelism;
    let cancel = CancellationToken::new();
    let jobs = stores_to_open(graph, config);
    // Fence older instances first, before anything else of the attempt:
    // their open transaction is aborted and they can no longer commit, so
    // the offsets recovery reads are final. The fence waits for the broker
    // to abort a killed process's transaction, so meanwhile the clients and
    // topic metadata are set up here and, on a thread of its own, the
    // checkpoint that recovery will almost surely choose is restored: the
    // newest one whose transaction is known to have committed. Recovery
    // still decides after the fence; a different decision restores again.
    let attempt_started = Instant::now();
    let (producers, fence_ms, guessed, setup) = std::thread::scope(|scope| {
        let fence = scope.spawn(|| {
            let started = Instant::now();
            let producers = create_producers(config, &cancel);
            (producers, started.elapsed().as_millis() as u64)
        });
        let guess = restore_from
            .is_none()
            .then(|| scope.spawn(|| restore_newest_committed(&store, config, &jobs)));
        let setup = clients_and_metadata(graph, config);
        let (producers, fence_ms) = fence.join().unwrap_or_else(|_| {
            (
                Err(WeirError::Task {
                    task: "fence".into(),
                    reason: "the thread creating the producers panicked".into(),
                }),
                0,
            )
        });
        let guessed = guess.and_then(|g| g.join().ok().flatten());
        (producers, fence_ms, guessed, setup)
    });
    let (group, source_partitions) = setup?;
    let all_partitions: Vec<(String, i32)> =
        source_partitions.values().flatten().cloned().collect();
    let producers = producers?;
    let topology = graph.topology(p, max_p);
    let recover_started = Instant::now();
    let restored = recover(
        config,
        topology.clone(),
        &store,
        &group,
        &all_partitions,
        restore_from,
    )?;
    let recover_ms = recover_started.elapsed().as_millis() as u64;
    let restore_started = Instant::now();
    let chosen = restored.checkpoint.as_ref().map(|(c, _)| c.checkpoint_id);
    let stores = match guessed {
        Some((id, stores)) if Some(id) == chosen => {
            info!(
                checkpoint_id = id,
                "the checkpoint restored during the fence is the one recovery chose"
            );
            stores
        }
        other => {
            if let Some((id, _)) = &other {
                info!(guessed = id, chosen = ?chosen, "recovery chose another checkpoint than the one restored during the fence; restoring it");
            }
            // Closed first: the same RocksDB folders are opened again.
            drop(other);
            let (folder, handles) = match &restored.checkpoint {
                Some((c, folder)) => (Some(folder.as_path()), c.state.as_slice()),
                None => (None, &[][..]),
            };
            open_stores(&jobs, config, folder, handles)?
        }
    };
    // Time to the stores being ready after recovery decided: 0 when the
    // side restore was chosen and done, which `guess_ms` then covers.
    let restore_ms = restore_started.elapsed().as_millis() as u64;
    let guess_ms =
        (attempt_started.elapsed().as_millis() as u64).saturating_sub(recover_ms + restore_ms);
    let verification = restored.verification.clone();
    let result = run_restored(
        graph,
        config,
        shared,
        progressed,
        Prepared {
            store,
            group,
            source_partitions,
            all_partitions,
            cancel,
            producers,
            topology,
            restored,
            stores,
            timings: RestartTimings {
                fence_ms,
                guess_ms,
                recover_ms,
                restore_ms,
                attempt_started,
            },
        },
    );
    // A task that read a damaged block (RocksDB checks each block's own
    // checksum) failed the attempt before the CRC check said which
    // checkpoint file is damaged: the check's answer is the cause, and no
    // restart can fix it.
    match (result, verification) {
        (Err(e), Some(check)) => match check.wait() {
            Err(reason) => Err(WeirError::Recovery(format!(
                "the restored checkpoint cannot be trusted: {reason} (the attempt failed with: {})",
                e.report()
            ))),
            Ok(_) => Err(e),
        },
        (result, _) => result,
    }
}

/// The consumer an attempt commits offsets with, and the partitions of
/// each source node (checked to exist, as the sinks' topics are).
fn clients_and_metadata(
    graph: &Graph,
    config: &Config,
) -> Result<(rdkafka::consumer::BaseConsumer, SourcePartitions)> {
    let group = kafka::create_consumer(config)?;
    let mut source_partitions = BTreeMap::new();
    for (i, n) in graph.nodes.iter().enumerate() {
        if let NodeBody::Source(s) = &n.body {
            source_partitions.insert(i, kafka::topic_partitions(&group, &s.topics)?);
        }
    }
    check_sink_topics(graph, &group)?;
    Ok((group, source_partitions))
}

/// Each source node's partitions.
type SourcePartitions = BTreeMap<usize, Vec<(String, i32)>>;

/// Each keyed (node, subtask)'s store.
type Stores = BTreeMap<(usize, u32), KeyedStore>;

/// One keyed (operator, subtask)'s store to open, with what that needs.
struct StoreToOpen {
    /// Node and subtask.
    at: (usize, u32),
    uid: String,
    tables: Vec<crate::dataflow::tables::TableSpec>,
    path: PathBuf,
}

/// Every keyed (operator, subtask) of `graph`, owned, so that the stores
/// can be opened on other threads without the graph.
fn stores_to_open(graph: &Graph, config: &Config) -> Vec<StoreToOpen> {
    let p = config.job.parallelism;
    graph
        .nodes
        .iter()
        .enumerate()
        .filter_map(|(n, node)| match &node.body {
            NodeBody::Operator(spec) if spec.keyed => Some((n, node, spec)),
            _ => None,
        })
        .flat_map(|(n, node, spec)| {
            (0..p).map(move |k| StoreToOpen {
                at: (n, k),
                uid: node.uid.clone(),
                tables: spec.tables.clone(),
                path: config.job_state_dir().join(&node.uid).join(k.to_string()),
            })
        })
        .collect()
}

/// Each store of `jobs`: restored from the snapshots `handles` in
/// `folder`, or empty without a checkpoint. Subtasks are independent and
/// a restore is mostly CPU (RocksDB replays its WAL into memtables), so
/// they are opened on as many threads as there are cores.
fn open_stores(
    jobs: &[StoreToOpen],
    config: &Config,
    folder: Option<&std::path::Path>,
    handles: &[StateHandle],
) -> Result<Stores> {
    let p = config.job.parallelism;
    let max_p = config.job.max_parallelism;
    let cache = config.state.cache_entries;
    let next = std::sync::atomic::AtomicUsize::new(0);
    let opened = std::sync::Mutex::new(Vec::with_capacity(jobs.len()));
    let workers = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .min(jobs.len());
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(job) = jobs.get(i) else {
                    return;
                };
                let range = range_for_subtask(job.at.1, p, max_p);
                let tables = job.tables.clone();
                let mine: Vec<&StateHandle> = handles.iter().filter(|h| h.uid == job.uid).collect();
                let from = folder.map(|f| (f, mine.as_slice()));
                let store = restore_store(&job.uid, tables, &job.path, from, range, cache);
                opened
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((job.at, store));
            });
        }
    });
    let mut stores = BTreeMap::new();
    let mut opened = opened.into_inner().unwrap_or_else(|e| e.into_inner());
    // The first subtask's error, whichever thread finished first.
    opened.sort_by_key(|(at, _)| *at);
    for (at, store) in opened {
        stores.insert(at, store?);
    }
    Ok(stores)
}

/// The side restore during the fence: the newest valid checkpoint with
/// its `_committed` marker, restored into every store, with its id. None
/// when there is no such checkpoint or anything fails: recovery then
/// decides and restores as if this had not run (and names any damage).
fn restore_newest_committed(
    store: &CheckpointStore,
    config: &Config,
    jobs: &[StoreToOpen],
) -> Option<(u64, Stores)> {
    let folders = store.scan().ok()?;
    let newest = folders
        .iter()
        .filter(|f| f.committed_marker)
        .filter_map(|f| match &f.contents {
            crate::checkpoint::recovery::FolderContents::Valid(meta) => Some(meta),
            _ => None,
        })
        .max_by_key(|meta| meta.checkpoint_id)?;
    let folder = store.folder(newest.checkpoint_id);
    // Damaged files are recovery's to name: restore nothing from them.
    crate::checkpoint::checksum::verify_up_front(newest, &folder).ok()?;
    let stores = open_stores(jobs, config, Some(&folder), &newest.state).ok()?;
    Some((newest.checkpoint_id, stores))
}

/// The job's sink producers, each fenced (`init_transactions`) at once:
/// with exactly-once delivery two, alternating per epoch
/// (`runtime::transactions`), each with its own transactional id; else one.
fn create_producers(config: &Config, cancel: &CancellationToken) -> Result<Vec<Arc<SinkProducer>>> {
    let slots = match config.output.delivery {
        crate::config::Delivery::ExactlyOnce => 2,
        crate::config::Delivery::AtLeastOnce => 1,
    };
    std::thread::scope(|scope| {
        let fences: Vec<_> = (0..slots)
            .map(|slot| {
                scope.spawn(move || SinkProducer::create_slot(config, slot, cancel.clone()))
            })
            .collect();
        fences
            .into_iter()
            .map(|f| {
                f.join()
                    .unwrap_or_else(|_| {
                        Err(WeirError::Task {
                            task: "fence".into(),
                            reason: "the thread creating a producer panicked".into(),
                        })
                    })
                    .map(Arc::new)
            })
            .collect()
    })
}

/// What an attempt set up before restoring state: its clients, the fenced
/// producers and what recovery chose, with the time each step took.
struct Prepared {
    store: CheckpointStore,
    group: rdkafka::consumer::BaseConsumer,
    source_partitions: SourcePartitions,
    all_partitions: Vec<(String, i32)>,
    cancel: CancellationToken,
    /// One per slot: two alternating with exactly-once delivery.
    producers: Vec<Arc<SinkProducer>>,
    topology: crate::checkpoint::Topology,
    restored: crate::runtime::job::Restored,
    /// Every keyed (node, subtask)'s store, restored or empty.
    stores: Stores,
    timings: RestartTimings,
}

/// How long each step of an attempt's start took, in ms.
struct RestartTimings {
    /// `init_transactions` of every producer (at once), which fences
    /// older instances.
    fence_ms: u64,
    /// The fence, the clients and topic metadata, and the side restore
    /// together (they run at once).
    guess_ms: u64,
    /// Recovery's decision, with the checks before a restore.
    recover_ms: u64,
    /// The stores restored after the decision (0 when the side restore
    /// was the one chosen).
    restore_ms: u64,
    /// When the attempt began.
    attempt_started: Instant,
}

fn run_restored(
    graph: &Graph,
    config: &Arc<Config>,
    shared: &JobShared,
    progressed: &Arc<AtomicBool>,
    prepared: Prepared,
) -> Result<()> {
    let Prepared {
        store,
        group,
        source_partitions,
        all_partitions,
        cancel,
        producers,
        topology,
        restored,
        mut stores,
        timings,
    } = prepared;
    let p = config.job.parallelism;
    let max_p = config.job.max_parallelism;
    let restored_id = restored
        .checkpoint
        .as_ref()
        .map_or(0, |(c, _)| c.checkpoint_id);
    let gate = Arc::new(EpochGate::new(restored_id));
    let outputs = OutputShared {
        producers: producers.clone(),
        metrics: shared.metrics.clone(),
        cancel: cancel.clone(),
    };
    let restored_id_check = restored
        .verification
        .clone()
        .map(|check| (restored_id, check));
    let commit_points = producers
        .iter()
        .map(|p| {
            KafkaCommitPoint::for_group(p.clone(), &group)
                .map(|c| Box::new(c) as Box<dyn crate::runtime::commit::CommitPoint>)
        })
        .collect::<Result<Vec<_>>>()?;
    let transactions = Transactions::open(commit_points, gate.clone(), restored_id)?;
    let (ack_tx, ack_rx) = unbounded();
    let stages = graph.stages();
    let stage_of: BTreeMap<usize, usize> = stages
        .iter()
        .enumerate()
        .flat_map(|(s, st)| st.nodes.iter().map(move |n| (*n, s)))
        .collect();

    // Channels of every edge that crosses stages: [edge][from subtask][to subtask].
    let mut channels: BTreeMap<usize, Vec<Vec<Option<Channel>>>> = BTreeMap::new();
    for (e, edge) in graph.edges.iter().enumerate() {
        if stage_of[&edge.from] == stage_of[&edge.to] {
            continue;
        }
        let grid = (0..p)
            .map(|i| {
                (0..p)
                    .map(|j| match edge.exchange {
                        Exchange::Hash(_) => Some(bounded(CHANNEL_CAPACITY)),
                        Exchange::Forward => (i == j).then(|| bounded(CHANNEL_CAPACITY)),
                    })
                    .collect()
            })
            .collect();
        channels.insert(e, grid);
    }

    let restored_offsets = restored
        .checkpoint
        .as_ref()
        .map(|(c, _)| c.offsets_map())
        .unwrap_or_default();
    let restored_max_ts = restored
        .checkpoint
        .as_ref()
        .map(|(c, _)| c.max_timestamps())
        .unwrap_or_default();

    // Interactive queries: one queue per keyed node and subtask.
    let mut query_inputs: BTreeMap<
        usize,
        Vec<Option<Receiver<crate::runtime::query::StateQuery>>>,
    > = BTreeMap::new();
    for (n, node) in graph.nodes.iter().enumerate() {
        if node.is_keyed() {
            let receivers =
                shared
                    .queries
                    .register_keyed(&node.uid, p, max_p, Some(graph.key_column_info(n)));
            query_inputs.insert(n, receivers.into_iter().map(Some).collect());
        }
    }
    let mut tasks: Vec<(String, TaskBody)> = Vec::new();
    let mut commands = Vec::new();
    let mut task_acks = 0usize;
    for stage in &stages {
        let head = stage.head();
        for k in 0..p {
            let task_name = format!("{}-{k}", graph.nodes[head].uid);
            let range = range_for_subtask(k, p, max_p);
            // Slots, in stage order, and their targets.
            let mut slots = Vec::new();
            let mut exchanges = Vec::new();
            for &n in &stage.nodes {
                let node = &graph.nodes[n];
                let mut targets = Vec::new();
                for (e, edge) in graph.edges.iter().enumerate().filter(|(_, e)| e.from == n) {
                    match channels.get_mut(&e) {
                        None => {
                            let slot = stage
                                .nodes
                                .iter()
                                .position(|m| *m == edge.to)
                                .expect("chained in this stage");
                            targets.push(Target::Slot {
                                slot,
                                port: edge.port,
                            });
                        }
                        Some(grid) => {
                            let senders: Vec<_> = grid[k as usize]
                                .iter()
                                .filter_map(|c| c.as_ref().map(|(tx, _)| tx.clone()))
                                .collect();
                            let key = match &edge.exchange {
                                Exchange::Hash(cols) => Some(cols.clone()),
                                Exchange::Forward => None,
                            };
                            targets.push(Target::Exchange(exchanges.len()));
                            exchanges.push(ExchangeOut::new(senders, key));
                        }
                    }
                }
                let store = stores.remove(&(n, k));
                let body = slot_body(graph, n, k, store, |what| {
                    let target = what.target(graph.output_label(n), k);
                    Output::gated(target, &outputs, gate.clone())
                });
                slots.push(Slot {
                    uid: node.uid.clone(),
                    body,
                    targets,
                });
            }
            let mut chain = Chain::new(
                task_name.clone(),
                k,
                slots,
                exchanges,
                max_p,
                cancel.clone(),
                shared.metrics.clone(),
            );
            match &graph.nodes[head].body {
                NodeBody::Source(spec) => {
                    chain.load_watermarks(range)?;
                    let partitions = &source_partitions[&head];
                    let consumer =
                        kafka::create_source_consumer(config, shared.metrics.clone(), &task_name)?;
                    let mut tpl = TopicPartitionList::new();
                    let mut positions = Vec::new();
                    for (i, (topic, partition)) in partitions.iter().enumerate() {
                        if i as u32 % p != k {
                            continue;
                        }
                        let mut next = restored_offsets.get(&(topic.clone(), *partition)).copied();
                        let offset = match (next, spec.start) {
                            (Some(o), _) => Offset::Offset(o),
                            (None, StartPosition::Earliest) => Offset::Beginning,
                            (None, StartPosition::Latest) => {
                                // Resolved now and kept as the position, so a
                                // restart before the first record skips nothing.
                                let (_, high) = consumer
                                    .fetch_watermarks(topic, *partition, kafka::REQUEST_TIMEOUT)
                                    .map_err(|e| {
                                        WeirError::kafka(
                                            format!("end offset of {topic}/{partition}"),
                                            e,
                                        )
                                    })?;
                                next = Some(high);
                                Offset::Offset(high)
                            }
                        };
                        tpl.add_partition_offset(topic, *partition, offset)
                            .map_err(|e| WeirError::kafka("build assignment", e))?;
                        positions.push(Position {
                            topic: topic.clone(),
                            partition: *partition,
                            next,
                        });
                    }
                    // The leaders known before the assignment: a partition
                    // assigned at BEGINNING without one waits for
                    // librdkafka's offset-query timer (500 ms) before its
                    // first fetch, which every start and recovery paid.
                    let topics: BTreeSet<&str> = positions
                        .iter()
                        .map(|p: &Position| p.topic.as_str())
                        .collect();
                    for topic in topics {
                        consumer
                            .fetch_metadata(Some(topic), kafka::REQUEST_TIMEOUT)
                            .map_err(|e| {
                                WeirError::kafka(format!("metadata of topic {topic:?}"), e)
                            })?;
                    }
                    consumer.assign(&tpl).map_err(|e| {
                        WeirError::kafka(format!("assign partitions to source task {task_name}"), e)
                    })?;
                    let (cmd_tx, cmd_rx) = unbounded();
                    commands.push(cmd_tx);
                    let dead_letters = Output::gated(
                        OutputTarget {
                            uid: graph.nodes[head].uid.clone(),
                            subtask: k,
                            sink_topic: String::new(),
                            dead_letter_topic: spec.dead_letter_topic.clone(),
                            on_bad_record: spec.on_bad_record,
                        },
                        &outputs,
                        gate.clone(),
                    );
                    let watermarks = source_task::watermarks(spec, &positions, &restored_max_ts);
                    let t = GraphSource {
                        uid: graph.nodes[head].uid.clone(),
                        subtask: k,
                        spec: spec.clone(),
                        schema: graph.nodes[head].schema.clone(),
                        consumer,
                        positions,
                        watermarks,
                        chain,
                        dead_letters,
                        commands: cmd_rx,
                        acks: ack_tx.clone(),
                        store: store.clone(),
                    };
                    tasks.push((task_name, Box::new(move || t.run())));
                }
                _ => {
                    let mut inputs = Vec::new();
                    for (e, edge) in graph.edges.iter().enumerate().filter(|(_, e)| e.to == head) {
                        let grid = channels
                            .get_mut(&e)
                            .expect("a stage head's inputs cross stages");
                        for row in grid.iter() {
                            if let Some((_, rx)) = &row[k as usize] {
                                inputs.push(Input {
                                    channel: rx.clone(),
                                    port: edge.port,
                                });
                            }
                        }
                    }
                    task_acks += 1;
                    let queries = stage
                        .nodes
                        .iter()
                        .enumerate()
                        .filter_map(|(slot, n)| {
                            let rx = query_inputs.get_mut(n)?[k as usize].take()?;
                            Some((slot, rx))
                        })
                        .collect();
                    let marks = WriterMarks::new(
                        (0..inputs.len()).map(stage_task::input_name).collect(),
                        BTreeMap::new(),
                    );
                    let t = StageTask {
                        core: TaskCore::new(chain, marks, range)?,
                        inputs,
                        mode: config.checkpoint.mode,
                        store: store.clone(),
                        acks: ack_tx.clone(),
                        gate: gate.clone(),
                        queries,
                    };
                    tasks.push((task_name, Box::new(move || t.run())));
                }
            }
        }
    }
    // Only the tasks hold channel ends now: a task that ends closes its own.
    drop(channels);
    drop(ack_tx);

    let coordinator = Coordinator {
        config: config.clone(),
        store,
        topology,
        sources: commands,
        task_acks,
        acks: ack_rx,
        transactions,
        budget: TransactionBudget::from_config(config),
        group,
        gate,
        next_id: restored.next_id,
        shared: shared.clone(),
        cancel: cancel.clone(),
        progressed: progressed.clone(),
        start_offsets: restored_offsets,
        checksums: Default::default(),
        restore_check: restored_id_check,
        attempt_started: timings.attempt_started,
    };
    // Each step of a (re)start, timed apart: `weir-bench recovery` reads them.
    info!(
        job = %graph.name,
        parallelism = p,
        stages = stages.len(),
        tasks = tasks.len(),
        partitions = all_partitions.len(),
        delivery = ?config.output.delivery,
        mode = ?config.checkpoint.mode,
        fence_ms = timings.fence_ms,
        fence_and_side_restore_ms = timings.guess_ms,
        recover_ms = timings.recover_ms,
        verify_ms = restored.verify_ms,
        restore_ms = timings.restore_ms,
        since_start_ms = crate::observe::since_process_start().as_millis() as u64,
        "job running"
    );
    tasks.push(("coordinator".into(), Box::new(move || coordinator.run())));
    supervise(tasks, &cancel, &producers, shared)
}
