//! One job's life around its attempts, for every job graph (the TOML
//! pipelines' and those built in Rust; `crate::engine` assembles an
//! attempt): the restart loop, recovery (what to restore, or a refusal),
//! and the supervision that turns any task error or panic into a failed
//! attempt that every task stops for.

use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::unbounded;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use super::commit::TransactionBudget;
use super::JobShared;
use crate::checkpoint::checksum;
use crate::checkpoint::recovery::{self, Decision, FolderContents, Observed};
use crate::checkpoint::store::{self, create_private_dir};
use crate::checkpoint::{CheckpointMetadata, CheckpointStore, Topology};
use crate::config::{Config, Delivery};
use crate::error::{Result, WeirError};
use crate::kafka::{self, producer::SinkProducer};

/// The restart loop around `attempt`: the state-directory lock, the owner token, the restart
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
    // One token per transactional id: single mode's exactly-once jobs
    // alternate two producers, and either id's fence would cut off the
    // other process.
    let ownership = match config.output.delivery {
        _ if config.is_group() => Vec::new(),
        Delivery::ExactlyOnce => (0..2)
            .map(|slot| {
                super::ownership::Ownership::claim(
                    &config.job_checkpoint_dir(),
                    &config.transactional_id_of_slot(slot),
                )
            })
            .collect::<Result<Vec<_>>>()?,
        Delivery::AtLeastOnce => Vec::new(),
    };
    if config.is_group() || config.output.delivery == Delivery::ExactlyOnce {
        crate::kafka::brokers::warn_without_verification(&config);
    }
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
        for o in &ownership {
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
        for o in &ownership {
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
    /// The CRC check of the restored SST files, still running (exactly-once
    /// only; the Coordinator waits for it before its first commit).
    pub(crate) verification: Option<Arc<checksum::BackgroundVerification>>,
    /// Time the checks before the restore took.
    pub(crate) verify_ms: u64,
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
    let group_offsets = match config.output.delivery {
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
    let mut next_id = next_id.max(checkpoint.as_ref().map_or(0, |c| c.checkpoint_id) + 1);
    // A `--restore-from` folder becomes the job's newest completed
    // checkpoint (hard links), as Flink adds a savepoint to its checkpoint
    // store: a crash before the first checkpoint of this run restores it
    // again, not an older checkpoint or empty state.
    let checkpoint = match (&restore_from, checkpoint) {
        (Some(from), Some(mut c)) => {
            c.checkpoint_id = next_id;
            store.adopt(from, &c)?;
            let id = next_id;
            next_id += 1;
            info!(from = %from.display(), checkpoint_id = id, "--restore-from: the folder is kept as the job's newest checkpoint");
            Some(c)
        }
        (_, c) => c,
    };
    let (mut verification, mut verify_ms) = (None, 0);
    let checkpoint = match checkpoint {
        None => None,
        Some(c) => {
            let folder = store.folder(c.checkpoint_id);
            // Never restore state that changed after it was checkpointed,
            // and never fall back to empty state instead. With a
            // transaction nothing is visible before the first commit, so
            // the SST files' CRCs are checked while the job runs, and the
            // Coordinator waits for that check before committing
            // (`checksum` module docs). Without one, output goes out as it
            // is made: everything is checked first.
            let verify_started = Instant::now();
            let refused = |reason: String| {
                WeirError::Recovery(format!(
                    "checkpoint {} cannot be restored: {reason}. Restore an earlier checkpoint or a \
                     savepoint with --restore-from",
                    c.checkpoint_id
                ))
            };
            match config.output.delivery {
                Delivery::ExactlyOnce => {
                    let deferred = checksum::verify_up_front(&c, &folder).map_err(refused)?;
                    // The first commit waits for the background check with
                    // its transaction open: a check that could outlast the
                    // transaction would abort it, restart and check again,
                    // forever. Past a quarter of the timeout at a slow
                    // disk's 100 MB/s, the files are checked first instead.
                    let budget = TransactionBudget::from_config(config).transaction_timeout;
                    let readable = budget.as_secs() / 4 * 100_000_000;
                    if checksum::deferred_bytes(&deferred) > readable {
                        checksum::verify_deferred(&folder, &deferred).map_err(refused)?;
                    } else {
                        verification = Some(Arc::new(
                            checksum::BackgroundVerification::spawn(&folder, deferred)
                                .map_err(|e| WeirError::io(&folder, e))?,
                        ));
                    }
                }
                Delivery::AtLeastOnce => checksum::verify(&c, &folder).map_err(refused)?,
            }
            verify_ms = verify_started.elapsed().as_millis() as u64;
            info!(
                checkpoint_id = c.checkpoint_id,
                folder = %folder.display(),
                offsets = ?c.offsets_map(),
                verify_ms,
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
        verification,
        verify_ms,
    })
}

/// Runs an attempt's tasks, each on its own thread, until the Coordinator
/// ends or a task fails; then cancels the rest, waits for them within
/// [`STOP_TIMEOUT`], and aborts the open transaction of a failed attempt.
/// The cause of a failure wins over its consequences.
pub(crate) fn supervise(
    tasks: Vec<(String, TaskBody)>,
    cancel: &CancellationToken,
    producers: &[Arc<SinkProducer>],
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
    let failed = outcome.is_err();
    let open = producers
        .iter()
        .filter(|p| failed && p.is_transactional() && p.transaction_age().is_some());
    for producer in open {
        // The next attempt's init_transactions would abort it too; doing it
        // now frees read_committed readers sooner.
        match producer.abort_transaction() {
            Ok(()) => shared.metrics.transactions_aborted.inc(),
            Err(e) => warn!(
                error = %e.report(),
                "an open transaction could not be aborted (the broker may have aborted it already); \
                 the next attempt's init_transactions aborts it in any case"
            ),
        }
    }
    outcome
}

/// A task's body, run on its own thread.
pub(crate) type TaskBody = Box<dyn FnOnce() -> Result<()> + Send>;

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
