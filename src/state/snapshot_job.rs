//! The asynchronous part of a keyed store's snapshot.
//!
//! At a barrier the task only copies what changed since the last snapshot:
//! the dirty entries of its cache and its timer changes, encoded into a
//! changes buffer ([`ChangesWriter`]). The rest is a [`SnapshotJob`] on a
//! thread of its own, while the task goes on with the next epoch's
//! records, as Flink's asynchronous snapshots do:
//!
//! 1. RocksDB's checkpoint (hard links to the SST files, a copy of the
//!    live WAL and its fsync);
//! 2. the changes file, from the buffer;
//! 3. the snapshot is handed over (the task's ack waits for it).
//!
//! The snapshot is the checkpoint plus the changes file, so RocksDB must
//! not take anything written after the barrier before step 1 is done: the
//! task writes nothing into RocksDB while a job runs (`KeyedStore` holds
//! its write-backs until then). The entries the buffer holds stay dirty in
//! the cache, and reach RocksDB with the task's next write-back, as they
//! did when the snapshot was taken on the task's thread.
//!
//! A first version also wrote the buffer back into RocksDB in the job. At
//! 10 M keys that write-back took 169 ms at p50 and 860 ms at p99 (about
//! 236,000 entries per task and checkpoint, into 4 MiB memtables), held
//! the task's own write-backs all that time, and competed with the task
//! for the machine's two cores: the pause did not shrink and peak RSS rose
//! by 160 MB (BENCHMARKS.md, #43 target 1).

use std::path::PathBuf;
use std::time::Instant;

use crossbeam_channel::{bounded, Receiver, TryRecvError};

use super::backend::StateBackend;
use super::changes::{self, ChangesWriter};
use super::Snapshot;
use crate::checkpoint::SnapshotFile;
use crate::error::{Result, WeirError};

/// What a snapshot's asynchronous part does: see the module's doc.
pub struct SnapshotJob {
    /// The store's uid, for the log.
    pub store: String,
    /// A handle on the store's RocksDB instance.
    pub backend: StateBackend,
    /// The snapshot's folder, which the job creates.
    pub target: PathBuf,
    /// What changed since the last snapshot, as of the barrier: the
    /// cache's dirty entries and the timers' changes...
    pub changes: ChangesWriter,
    /// ...then what an operator staged for this snapshot, shared with its
    /// store, which applies it meanwhile (written after `changes`, so it
    /// wins over an older value of the same key).
    pub staged: std::sync::Arc<ChangesWriter>,
}

/// A job running on its own thread, as its store sees it.
pub struct RunningJob {
    done: Receiver<()>,
}

impl RunningJob {
    /// Whether the job is done (waiting for it with `block`). A job whose
    /// thread ended without a word (it panicked) is done too: it no
    /// longer uses RocksDB, and its snapshot's receiver says it failed.
    pub fn is_done(&self, block: bool) -> bool {
        if block {
            let _ = self.done.recv();
            return true;
        }
        !matches!(self.done.try_recv(), Err(TryRecvError::Empty))
    }
}

impl SnapshotJob {
    /// Runs the job on a thread of its own. The snapshot (or why it could
    /// not be taken) comes on the receiver; the job's store follows it
    /// through the [`RunningJob`].
    pub fn spawn(self) -> Result<(Receiver<Result<Snapshot>>, RunningJob)> {
        let (snapshot_tx, snapshot_rx) = bounded(1);
        let (done_tx, done_rx) = bounded(1);
        let target = self.target.clone();
        std::thread::Builder::new()
            .name("weir-snapshot".into())
            .spawn(move || {
                let snapshot = self.run();
                // Done with RocksDB before the ack can go: a task that waits
                // for its job after the ack (a restart reopening the
                // instance) never finds it still running.
                let _ = done_tx.send(());
                let _ = snapshot_tx.send(snapshot);
            })
            .map_err(|e| WeirError::Snapshot {
                target,
                message: format!("cannot start the snapshot's thread: {e}"),
            })?;
        Ok((snapshot_rx, RunningJob { done: done_rx }))
    }

    /// Runs the job on this thread.
    pub fn run(self) -> Result<Snapshot> {
        // Tests of a job still running while the task writes on.
        fail::fail_point!("snapshot-job-before-checkpoint");
        let started = Instant::now();
        let snapshot = self.backend.snapshot(&self.target);
        let checkpointed = started.elapsed();
        let snapshot = snapshot.and_then(|mut snapshot| {
            let size = self.changes.write_with(&self.target, &self.staged)?;
            snapshot.files.push(SnapshotFile {
                name: changes::FILE.into(),
                size_bytes: size,
                crc32: None,
            });
            snapshot.files.sort_by(|a, b| a.name.cmp(&b.name));
            snapshot.size_bytes += size;
            Ok(snapshot)
        });
        // The parts of a snapshot's asynchronous work, which `weir-bench
        // checkpoint-cost` reads from the log.
        tracing::debug!(
            store = %self.store,
            checkpoint_us = checkpointed.as_micros() as u64,
            file_us = (started.elapsed() - checkpointed).as_micros() as u64,
            "state snapshot written"
        );
        snapshot
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::changes::{TIMERS, VALUES};
    use crate::state::{state_key, FAMILIES};
    use rocksdb::WriteBatch;

    fn get(backend: &StateBackend, family: &str, key: &[u8]) -> Option<Vec<u8>> {
        backend.db().get_cf(backend.cf(family), key).unwrap()
    }

    /// The snapshot is RocksDB as it was plus the changes file; the job
    /// writes nothing into the live instance.
    #[test]
    fn the_snapshot_is_the_checkpoint_and_the_changes_file() {
        let dir = tempfile::tempdir().unwrap();
        let backend = StateBackend::open(&dir.path().join("db")).unwrap();
        let mut batch = WriteBatch::default();
        batch.put_cf(backend.cf(FAMILIES[0]), state_key(1, b"old"), b"1");
        backend.write(batch).unwrap();
        let mut changes = ChangesWriter::new();
        changes.entry(VALUES, &state_key(1, b"new"), Some(b"2"));
        changes.entry(VALUES, &state_key(1, b"old"), None);
        changes.entry(TIMERS, &state_key(1, b"t"), Some(b""));
        let target = dir.path().join("snap");
        let job = SnapshotJob {
            store: "s".into(),
            backend: backend.share(),
            target: target.clone(),
            changes,
            staged: Default::default(),
        };
        let (snapshot, running) = job.spawn().unwrap();
        let snapshot = snapshot.recv().unwrap().unwrap();
        assert!(
            running.is_done(false),
            "done before the snapshot is handed over"
        );
        assert!(snapshot.files.iter().any(|f| f.name == changes::FILE));
        assert_eq!(get(&backend, FAMILIES[0], &state_key(1, b"new")), None);
        assert_eq!(
            get(&backend, FAMILIES[0], &state_key(1, b"old")),
            Some(b"1".to_vec())
        );
        drop(backend);
        let restored = StateBackend::open(&target).unwrap();
        assert_eq!(restored.apply_changes(&target, (0, 8)).unwrap(), 3);
        assert_eq!(
            get(&restored, FAMILIES[0], &state_key(1, b"new")),
            Some(b"2".to_vec())
        );
        assert_eq!(get(&restored, FAMILIES[0], &state_key(1, b"old")), None);
        assert_eq!(
            get(&restored, FAMILIES[1], &state_key(1, b"t")),
            Some(vec![])
        );
    }

    /// A snapshot that cannot be taken (its folder's parent is missing)
    /// is an error on the receiver, naming the folder.
    #[test]
    fn a_snapshot_that_cannot_be_taken_is_an_error_naming_its_folder() {
        let dir = tempfile::tempdir().unwrap();
        let backend = StateBackend::open(&dir.path().join("db")).unwrap();
        let job = SnapshotJob {
            store: "s".into(),
            backend: backend.share(),
            target: dir.path().join("missing/snap"),
            changes: ChangesWriter::new(),
            staged: Default::default(),
        };
        let (snapshot, running) = job.spawn().unwrap();
        let e = snapshot.recv().unwrap().unwrap_err().to_string();
        assert!(e.contains("missing/snap"), "{e}");
        assert!(running.is_done(true));
    }
}
