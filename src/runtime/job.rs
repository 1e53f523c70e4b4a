//! One job: the restart loop around attempts, and an attempt's assembly:
//! recover, build channels and tasks, run them, and turn any task error or
//! panic into a failed attempt that every task stops for.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, unbounded};
use rdkafka::consumer::Consumer;
use rdkafka::{Offset, TopicPartitionList};
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use super::commit::{KafkaCommitPoint, TransactionBudget};
use super::coordinator::Coordinator;
use super::gate::EpochGate;
use super::keyed::KeyedTask;
use super::output::Output;
use super::source::EventTime;
use super::source::{Position, SourceTask};
use super::{JobShared, CHANNEL_CAPACITY};
use crate::checkpoint::metadata::OperatorInfo;
use crate::checkpoint::recovery::{self, Decision, FolderContents, Observed};
use crate::checkpoint::store::{self, create_private_dir};
use crate::checkpoint::StateHandle;
use crate::checkpoint::{CheckpointMetadata, CheckpointStore, Topology};
use crate::config::{Config, Delivery, SOURCE_UID};
use crate::config::{LatePolicy, WindowConfig, WindowKind};
use crate::error::{Result, WeirError};
use crate::kafka::{self, producer::SinkProducer};
use crate::operators::aggregate::AggregateOperator;
use crate::operators::window::WindowOperator;
use crate::operators::Pipeline;
use crate::state::key_groups::range_for_subtask;
use crate::state::{KeyedState, StateValue};
use crate::time::timestamp::{normalize_pointer, TimestampExtractor};
use crate::time::watermark::SourceWatermarks;
use crate::window::assign::WindowSpec;

/// The topology this configuration runs, as recorded in checkpoints.
pub fn topology(c: &Config) -> Topology {
    Topology {
        max_parallelism: c.job.max_parallelism,
        operators: vec![
            OperatorInfo {
                uid: SOURCE_UID.into(),
                kind: "kafka-source".into(),
                parallelism: c.job.parallelism,
                state: None,
            },
            OperatorInfo {
                uid: c.keyed_uid(),
                kind: Pipeline::from_config(c).kind(),
                parallelism: c.job.parallelism,
                state: None,
            },
        ],
    }
}

/// Runs the job until a stop request completes a final checkpoint (Ok),
/// a fatal error, or the restart budget is spent.
pub fn run(config: Arc<Config>, shared: JobShared, restore_from: Option<PathBuf>) -> Result<()> {
    run_attempts(
        config,
        shared,
        restore_from,
        |config, shared, restore_from, progressed| {
            if config.is_group() {
                crate::scale::engine::run_attempt(config, shared, progressed)
            } else {
                run_attempt(config, shared, restore_from, progressed)
            }
        },
    )
}

/// The restart loop around `attempt`, shared by the built-in pipelines and
/// job graphs: the state-directory lock, the owner token, the restart
/// budget with backoff, and the checks that no other instance took over.
pub fn run_attempts(
    config: Arc<Config>,
    shared: JobShared,
    restore_from: Option<PathBuf>,
    attempt: impl Fn(&Arc<Config>, &JobShared, Option<PathBuf>, &Arc<AtomicBool>) -> Result<()>,
) -> Result<()> {
    let stop = shared.stop.clone();
    // Only the state directory is locked. The checkpoint directory may be
    // shared storage that a replacement instance takes over while the old
    // one is still alive; there Kafka's fencing (exactly-once) and atomic
    // folder claims keep them apart, which a local lock could not.
    let _state_lock = DirLock::acquire(&config.job_state_dir())?;
    for removed in store::remove_partial_copies(&config.savepoint_dir())? {
        warn!(folder = %removed.display(), "removed a savepoint copy that a crash cut short");
    }
    // Claimed before this process fences anyone, checked before each
    // restart: see `ownership`.
    // Group mode fences through the consumer group and the transactional
    // id; the checkpoint folder's owner token is a single-process notion.
    let ownership = match config.sink.delivery {
        _ if config.is_group() => None,
        Delivery::ExactlyOnce => Some(super::ownership::Ownership::claim(
            &config.job_checkpoint_dir(),
            &config.transactional_id(),
        )?),
        Delivery::AtLeastOnce => None,
    };
    let mut failures = 0u32;
    let mut backoff = config.restart.backoff;
    let mut restore_from = restore_from;
    loop {
        let progressed = Arc::new(AtomicBool::new(false));
        let result = attempt(&config, &shared, restore_from.take(), &progressed);
        shared.ready.store(false, Ordering::Relaxed);
        // Queries answer 503 "no job attempt is running" until the next
        // attempt registers its subtasks.
        shared.queries.clear();
        let err = match result {
            Ok(()) => return Ok(()),
            Err(e) if e.is_fatal() => {
                error!(error = %e.report(), "weir cannot go on: a restart would not fix this");
                return Err(e);
            }
            Err(e) => e,
        };
        if let Some(o) = &ownership {
            // A restart would fence whoever took over; stop instead.
            if let Err(fenced) = o.check() {
                error!(error = %fenced.report(), cause = %err.report(), "another instance owns this job now; exiting");
                return Err(fenced);
            }
        }
        if progressed.load(Ordering::Relaxed) {
            // The attempt completed checkpoints: a new failure, not a loop.
            failures = 0;
            backoff = config.restart.backoff;
        }
        failures += 1;
        if failures > config.restart.max_attempts {
            error!(attempts = failures - 1, error = %err.report(), "restart budget spent; giving up");
            return Err(err);
        }
        shared.metrics.restarts.inc();
        warn!(
            attempt = failures,
            max_attempts = config.restart.max_attempts,
            backoff_ms = backoff.as_millis() as u64,
            error = %err.report(),
            "job failed; restarting from the last checkpoint"
        );
        let until = Instant::now() + backoff;
        while Instant::now() < until {
            if stop.load(Ordering::Relaxed) {
                info!("stop requested while waiting to restart; the last checkpoint stands");
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        // Checked again after the wait: a replacement may have started
        // meanwhile, and the next attempt's init_transactions would fence it.
        if let Some(o) = &ownership {
            if let Err(fenced) = o.check() {
                error!(error = %fenced.report(), "another instance owns this job now; exiting");
                return Err(fenced);
            }
        }
        backoff = (backoff * 2).min(config.restart.max_backoff);
    }
}

/// What recovery settled on.
pub(crate) struct Restored {
    /// The checkpoint and the folder it is in.
    pub(crate) checkpoint: Option<(CheckpointMetadata, PathBuf)>,
    pub(crate) next_id: u64,
}

/// Decides what to restore (docs/recovery.md): the checkpoint whose
/// transaction committed, checked against `topology` and verified, or a
/// fresh start; refuses where neither is safe.
pub(crate) fn recover(
    config: &Config,
    topology: Topology,
    store: &CheckpointStore,
    group: &rdkafka::consumer::BaseConsumer,
    partitions: &[(String, i32)],
    restore_from: Option<PathBuf>,
) -> Result<Restored> {
    let folders = store.scan()?;
    let next_id = folders.iter().filter_map(|f| f.id).max().unwrap_or(0) + 1;
    let forced = match &restore_from {
        None => None,
        Some(path) => match store::inspect_any(path) {
            Ok(m) => Some(Box::new(m)),
            Err(reason) => {
                return Err(WeirError::Recovery(format!(
                    "--restore-from {}: {reason}",
                    path.display()
                )))
            }
        },
    };
    let group_offsets = match config.sink.delivery {
        Delivery::ExactlyOnce => Some(kafka::committed_offsets(group, partitions)?),
        Delivery::AtLeastOnce => None,
    };
    let observed = Observed {
        folders,
        group: group_offsets,
        topology,
        forced,
    };
    for (folder, reason) in recovery::skipped(&observed) {
        warn!(folder = %folder, reason = %reason, "checkpoint folder skipped");
    }
    // Folders of checkpoints that were in flight when a process died hold
    // nothing anyone relies on.
    for f in &observed.folders {
        if let (FolderContents::Unfinished(_), Some(id)) = (&f.contents, f.id) {
            store.delete(id)?;
        }
    }
    let decision = recovery::decide(&observed);
    let (checkpoint, discard) = match decision {
        Decision::Refuse(msg) => return Err(WeirError::Recovery(msg)),
        Decision::Fresh { discard } => (None, discard),
        Decision::Restore {
            checkpoint,
            discard,
        } => (Some(*checkpoint), discard),
    };
    for id in discard {
        warn!(
            checkpoint_id = id,
            "discarding a prepared checkpoint whose transaction never committed"
        );
        store.delete(id)?;
    }
    let next_id = next_id.max(checkpoint.as_ref().map_or(0, |c| c.checkpoint_id) + 1);
    let checkpoint = match checkpoint {
        None => None,
        Some(c) => {
            let folder = restore_from
                .clone()
                .unwrap_or_else(|| store.folder(c.checkpoint_id));
            // Never restore state that changed after it was checkpointed,
            // and never fall back to empty state instead.
            crate::checkpoint::checksum::verify(&c, &folder).map_err(|reason| {
                WeirError::Recovery(format!(
                    "checkpoint {} cannot be restored: {reason}. Restore an earlier checkpoint or a \
                     savepoint with --restore-from",
                    c.checkpoint_id
                ))
            })?;
            info!(
                checkpoint_id = c.checkpoint_id,
                folder = %folder.display(),
                offsets = ?c.offsets_map(),
                "restoring checkpoint"
            );
            Some((c, folder))
        }
    };
    if checkpoint.is_none() {
        info!("no checkpoint to restore: fresh start");
    }
    Ok(Restored {
        checkpoint,
        next_id,
    })
}

fn run_attempt(
    config: &Arc<Config>,
    shared: &JobShared,
    restore_from: Option<PathBuf>,
    progressed: &Arc<AtomicBool>,
) -> Result<()> {
    let store = CheckpointStore::new(config.job_checkpoint_dir());
    create_private_dir(store.root())?;
    let p = config.job.parallelism;
    let group = kafka::create_consumer(config)?;
    let partitions = kafka::source_partitions(config, &group)?;
    let cancel = CancellationToken::new();
    // Fence older instances first: their open transaction is aborted and
    // they can no longer commit, so the offsets read next are final.
    let producer = Arc::new(SinkProducer::create(config, cancel.clone())?);
    let restored = recover(
        config,
        topology(config),
        &store,
        &group,
        &partitions,
        restore_from,
    )?;
    let restored_id = restored
        .checkpoint
        .as_ref()
        .map_or(0, |(c, _)| c.checkpoint_id);
    let gate = Arc::new(EpochGate::new(restored_id));
    if producer.is_transactional() {
        producer.begin_transaction()?;
    }
    let pipeline = Pipeline::from_config(config);
    let uid = config.keyed_uid();

    // Data channels: source s → keyed k.
    let mut to_keyed: Vec<Vec<_>> = (0..p).map(|_| Vec::new()).collect();
    let mut from_source: Vec<Vec<_>> = (0..p).map(|_| Vec::new()).collect();
    for outputs in from_source.iter_mut() {
        for inputs in to_keyed.iter_mut() {
            let (tx, rx) = bounded(CHANNEL_CAPACITY);
            outputs.push(tx);
            inputs.push(rx);
        }
    }
    let (ack_tx, ack_rx) = unbounded();

    let handles: Vec<_> = restored
        .checkpoint
        .iter()
        .flat_map(|(c, _)| c.state.iter().filter(|h| h.uid == uid))
        .collect();
    let window = config.pipeline.window().cloned();
    let mut keyed_tasks: Vec<(String, TaskBody)> = Vec::new();
    let query_inputs = shared.queries.register(&uid, p, config.job.max_parallelism);
    for ((k, inputs), queries) in to_keyed.into_iter().enumerate().zip(query_inputs) {
        let k = k as u32;
        let range = range_for_subtask(k, p, config.job.max_parallelism);
        let path = config.job_state_dir().join(&uid).join(k.to_string());
        let folder = restored.checkpoint.as_ref().map(|(_, f)| f.as_path());
        let output = Output::new(
            uid.clone(),
            k,
            producer.clone(),
            config.sink.topic.clone(),
            config.source.dead_letter_topic.clone(),
            config.source.on_bad_record,
            gate.clone(),
            shared.metrics.clone(),
            cancel.clone(),
        );
        let name = format!("{uid}-{k}");
        macro_rules! task {
            ($operator:expr) => {
                KeyedTask {
                    subtask: k,
                    uid: uid.clone(),
                    key_groups: range,
                    mode: config.checkpoint.mode,
                    operator: $operator,
                    output,
                    inputs,
                    acks: ack_tx.clone(),
                    store: store.clone(),
                    metrics: shared.metrics.clone(),
                    cancel: cancel.clone(),
                    queries,
                }
            };
        }
        match &window {
            None => {
                let state = keyed_state(config, folder, &handles, &path, range)?;
                let task = task!(AggregateOperator::new(
                    uid.clone(),
                    pipeline.clone(),
                    config.sink.emit,
                    state,
                    config.state.cache_entries,
                ));
                keyed_tasks.push((name, Box::new(move || task.run())));
            }
            Some(w) => {
                let state = keyed_state(config, folder, &handles, &path, range)?;
                let task = task!(WindowOperator::new(
                    uid.clone(),
                    k,
                    range,
                    pipeline.clone(),
                    window_spec(w),
                    w.allowed_lateness.as_millis() as i64,
                    w.on_late,
                    w.emit,
                    state,
                    shared.metrics.clone(),
                )?);
                keyed_tasks.push((name, Box::new(move || task.run())));
            }
        }
    }

    let restored_offsets: BTreeMap<(String, i32), i64> = restored
        .checkpoint
        .as_ref()
        .map(|(c, _)| c.offsets_map())
        .unwrap_or_default();
    let restored_max_ts: BTreeMap<(String, i32), i64> = restored
        .checkpoint
        .as_ref()
        .map(|(c, _)| c.max_timestamps())
        .unwrap_or_default();
    let mut source_tasks = Vec::new();
    let mut commands = Vec::new();
    for (s, outputs) in from_source.into_iter().enumerate() {
        let mine: Vec<&(String, i32)> = partitions
            .iter()
            .enumerate()
            .filter(|(i, _)| *i as u32 % p == s as u32)
            .map(|(_, tp)| tp)
            .collect();
        let consumer = kafka::create_source_consumer(config, shared.metrics.clone())?;
        let mut tpl = TopicPartitionList::new();
        let mut positions = Vec::new();
        // Every assigned partition is registered with its restored max
        // event time before its first record, so a silent one holds the
        // watermark back (until idle) and a restored one resumes.
        let mut event_time = config.source.event_time.as_ref().map(|et| EventTime {
            extractor: TimestampExtractor::new(
                et.field.as_deref().map(normalize_pointer),
                et.format,
            ),
            watermarks: SourceWatermarks::new(
                et.max_out_of_orderness.as_millis() as i64,
                et.idle_timeout.as_millis() as u64,
            ),
            keep_origin: window
                .as_ref()
                .is_some_and(|w| w.on_late == LatePolicy::DeadLetter),
        });
        for (topic, partition) in mine {
            let mut next = restored_offsets.get(&(topic.clone(), *partition)).copied();
            let offset = match (next, config.source.start) {
                (Some(o), _) => Offset::Offset(o),
                (None, crate::config::StartPosition::Earliest) => Offset::Beginning,
                (None, crate::config::StartPosition::Latest) => {
                    // "latest" is resolved now and kept as this partition's
                    // position, so that a restart before its first record
                    // does not skip what arrived in between.
                    let (_, high) = consumer
                        .fetch_watermarks(topic, *partition, kafka::REQUEST_TIMEOUT)
                        .map_err(|e| {
                            WeirError::kafka(format!("end offset of {topic}/{partition}"), e)
                        })?;
                    next = Some(high);
                    Offset::Offset(high)
                }
            };
            tpl.add_partition_offset(topic, *partition, offset)
                .map_err(|e| WeirError::kafka("build assignment", e))?;
            if let Some(et) = &mut event_time {
                et.watermarks.register(
                    topic,
                    *partition,
                    restored_max_ts.get(&(topic.clone(), *partition)).copied(),
                    super::now_ms(),
                );
            }
            positions.push(Position {
                topic: topic.clone(),
                partition: *partition,
                next,
            });
        }
        consumer
            .assign(&tpl)
            .map_err(|e| WeirError::kafka(format!("assign partitions to source subtask {s}"), e))?;
        let (cmd_tx, cmd_rx) = unbounded();
        commands.push(cmd_tx);
        source_tasks.push(SourceTask {
            subtask: s as u32,
            consumer,
            positions,
            outputs,
            commands: cmd_rx,
            acks: ack_tx.clone(),
            pipeline: pipeline.clone(),
            policy: config.source.on_bad_record,
            max_parallelism: config.job.max_parallelism,
            metrics: shared.metrics.clone(),
            cancel: cancel.clone(),
            event_time,
        });
    }
    drop(ack_tx);

    let commit = KafkaCommitPoint::for_group(producer.clone(), &group)?;
    let coordinator = Coordinator {
        config: config.clone(),
        store,
        topology: topology(config),
        sources: commands,
        task_acks: p as usize,
        acks: ack_rx,
        commit: Box::new(commit),
        budget: TransactionBudget::from_config(config),
        group,
        gate,
        next_id: restored.next_id,
        shared: shared.clone(),
        cancel: cancel.clone(),
        progressed: progressed.clone(),
        start_offsets: restored_offsets,
        checksums: Default::default(),
    };

    info!(
        job = %config.job.name,
        parallelism = p,
        partitions = partitions.len(),
        delivery = ?config.sink.delivery,
        mode = ?config.checkpoint.mode,
        "job running"
    );
    let mut tasks: Vec<(String, TaskBody)> = Vec::new();
    for t in source_tasks {
        tasks.push((format!("source-{}", t.subtask), Box::new(move || t.run())));
    }
    tasks.extend(keyed_tasks);
    tasks.push(("coordinator".into(), Box::new(move || coordinator.run())));
    supervise(tasks, &cancel, &producer, shared)
}

/// Runs an attempt's tasks, each on its own thread, until the Coordinator
/// ends or a task fails; then cancels the rest, waits for them within
/// [`STOP_TIMEOUT`], and aborts the open transaction of a failed attempt.
/// The cause of a failure wins over its consequences.
pub(crate) fn supervise(
    tasks: Vec<(String, TaskBody)>,
    cancel: &CancellationToken,
    producer: &SinkProducer,
    shared: &JobShared,
) -> Result<()> {
    let (done_tx, done_rx) = unbounded::<(String, Result<()>)>();
    let mut threads = Vec::new();
    let mut spawn = |name: String, f: Box<dyn FnOnce() -> Result<()> + Send>| {
        let tx = done_tx.clone();
        let thread_name = name.clone();
        let handle = std::thread::Builder::new()
            .name(thread_name)
            .spawn(move || {
                let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
                    .unwrap_or_else(|panic| {
                        let reason = panic
                            .downcast_ref::<String>()
                            .cloned()
                            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                            .unwrap_or_else(|| "panic".into());
                        Err(WeirError::Task {
                            task: name.clone(),
                            reason: format!("panicked: {reason}"),
                        })
                    });
                let _ = tx.send((name, result));
            })
            .expect("spawn a task thread");
        threads.push(handle);
    };
    let total = tasks.len();
    for (name, run) in tasks {
        spawn(name, run);
    }
    drop(done_tx);
    shared.ready.store(true, Ordering::Relaxed);

    let mut outcome: Result<()> = Ok(());
    // Once one task has ended, the attempt is ending: the others get
    // STOP_TIMEOUT to follow.
    let mut stop_by: Option<Instant> = None;
    for _ in 0..total {
        let next = match stop_by {
            None => done_rx.recv().ok(),
            Some(t) => done_rx
                .recv_timeout(t.saturating_duration_since(Instant::now()))
                .ok(),
        };
        let Some((name, result)) = next else {
            break;
        };
        // A failure ends the attempt; so does the Coordinator, which ends
        // last after a final checkpoint (sources end before its commit).
        if result.is_err() || name == "coordinator" {
            stop_by.get_or_insert_with(|| Instant::now() + STOP_TIMEOUT);
        }
        if let Err(e) = result {
            cancel.cancel();
            if e.is_consequence() {
                warn!(task = %name, error = %e.report(), "task stopped after another task's failure");
            } else {
                error!(task = %name, error = %e.report(), "task failed; stopping every task of this attempt");
            }
            // The cause wins over its consequences, whichever came first.
            let replace = match &outcome {
                Ok(()) => true,
                Err(first) => first.is_consequence() && !e.is_consequence(),
            };
            if replace {
                outcome = Err(e);
            }
        }
    }
    cancel.cancel();
    // Every task watches the token; one that does not stop in time is
    // stuck (a blocked system call, a bug). Its thread may hold RocksDB and
    // Kafka clients, so no new attempt may start in this process.
    let stuck = join_within(
        threads,
        &done_rx,
        stop_by.map_or(STOP_TIMEOUT, |t| {
            t.saturating_duration_since(Instant::now())
        }),
    );
    if !stuck.is_empty() {
        for task in &stuck {
            error!(task = %task, waited_ms = STOP_TIMEOUT.as_millis() as u64, "task did not stop after its attempt was cancelled");
        }
        return Err(WeirError::Stuck {
            tasks: stuck,
            waited_ms: STOP_TIMEOUT.as_millis() as u64,
        });
    }
    if outcome.is_err() && producer.is_transactional() {
        // The next attempt's init_transactions would abort it too; doing it
        // now frees read_committed readers sooner.
        match producer.abort_transaction() {
            Ok(()) => shared.metrics.transactions_aborted.inc(),
            Err(e) => warn!(
                error = %e.report(),
                "the open transaction could not be aborted (the broker may have aborted it already); \
                 the next attempt's init_transactions aborts it in any case"
            ),
        }
    }
    outcome
}

/// A task's body, run on its own thread.
pub(crate) type TaskBody = Box<dyn FnOnce() -> Result<()> + Send>;

/// Opens a keyed subtask's state, restored from `folder` when there is a
/// checkpoint, else empty (removing whatever a previous attempt left).
fn keyed_state<V: StateValue>(
    config: &Config,
    folder: Option<&Path>,
    handles: &[&StateHandle],
    path: &Path,
    range: (u32, u32),
) -> Result<KeyedState<V>> {
    match folder {
        Some(folder) => {
            KeyedState::restore(path, config.state.cache_entries, folder, handles, range)
        }
        None => {
            if path.exists() {
                fs::remove_dir_all(path).map_err(|e| WeirError::io(path, e))?;
            }
            KeyedState::open(path, config.state.cache_entries)
        }
    }
}

/// The window assignment `[pipeline.window]` describes (validated).
pub fn window_spec(w: &WindowConfig) -> WindowSpec {
    let ms = |d: Option<Duration>| d.unwrap_or_default().as_millis() as i64;
    match w.kind {
        WindowKind::Tumbling => WindowSpec::Tumbling {
            size: ms(w.size),
            offset: ms(w.offset),
        },
        WindowKind::Hopping => WindowSpec::Hopping {
            size: ms(w.size),
            slide: ms(w.slide),
            offset: ms(w.offset),
        },
        WindowKind::Session => WindowSpec::Session { gap: ms(w.gap) },
    }
}

/// How long the tasks of a cancelled attempt may take to stop.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(15);

/// Joins the task threads, waiting at most `timeout` in all; returns the
/// names of those still running. Tasks report on `done` as they end.
fn join_within(
    threads: Vec<std::thread::JoinHandle<()>>,
    done: &crossbeam_channel::Receiver<(String, Result<()>)>,
    timeout: Duration,
) -> Vec<String> {
    let until = Instant::now() + timeout;
    let mut running: Vec<_> = threads;
    loop {
        running.retain(|t| !t.is_finished());
        if running.is_empty() || Instant::now() >= until {
            break;
        }
        // Wakes up when a task reports, or polls a few times a second.
        let _ = done.recv_timeout(Duration::from_millis(50));
    }
    running
        .into_iter()
        .map(|t| t.thread().name().unwrap_or("unnamed").to_string())
        .collect()
}

/// An exclusive lock on a directory (`flock` on `<dir>/LOCK.weir`), held for
/// the life of the process, naming the holder's pid.
pub struct DirLock {
    _file: fs::File,
}

impl DirLock {
    pub fn acquire(dir: &Path) -> Result<Self> {
        create_private_dir(dir)?;
        let path = dir.join("LOCK.weir");
        let mut file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(|e| WeirError::io(&path, e))?;
        // SAFETY: flock on a file descriptor we own.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc != 0 {
            let holder = fs::read_to_string(&path).unwrap_or_default();
            return Err(WeirError::Locked {
                path,
                reason: format!(
                    "held by another weir process (pid {}); two processes must not share a state or checkpoint directory",
                    holder.trim()
                ),
            });
        }
        file.set_len(0).map_err(|e| WeirError::io(&path, e))?;
        write!(file, "{}", std::process::id()).map_err(|e| WeirError::io(&path, e))?;
        Ok(Self { _file: file })
    }
}
