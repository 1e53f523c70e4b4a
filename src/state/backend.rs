//! One RocksDB instance per (operator uid, subtask), over bytes, with one
//! column family per kind of state. Every key of every column family starts
//! with its key group (u16, big endian), so a key group is a contiguous
//! range in each family: a snapshot taken at one parallelism is split or
//! merged into another by copying ranges (docs/recovery.md).
//!
//! Durability comes from checkpoints, not from RocksDB: its write-ahead log
//! is written but never synced. It is there so that a snapshot need not
//! flush memtables at the barrier: the Checkpoint API hard-links the SST
//! files and copies the live WAL instead (bounded by `max_total_wal_size`),
//! and memtables are flushed in the background as they fill. A flush at
//! every barrier was most of the snapshot pause with large state
//! (docs/checkpoint-protocol.md, "Snapshot cost").

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rocksdb::{checkpoint::Checkpoint, ColumnFamily, Options, WriteBatch, WriteOptions, DB};

use super::{changes, split_key, state_key, Snapshot, FAMILIES};
use crate::checkpoint::store::{create_private_dir, link_or_copy_dir};
use crate::checkpoint::{SnapshotFile, StateHandle};
use crate::error::{Result, WeirError};

/// Upper bound of the live WAL, so of what a snapshot copies and of what
/// a restore replays into memtables before the first record: at 16 MiB
/// that replay took over a second per subtask at 10 M keys, at 4 MiB it
/// fits within the fence (BENCHMARKS.md, #21).
const MAX_TOTAL_WAL_SIZE: u64 = 4 << 20;

/// A snapshot copies the live WAL when it is smaller than this, and flushes
/// the memtables otherwise (only if the bound above was overshot).
const WAL_SIZE_FOR_FLUSH: u64 = 4 * MAX_TOTAL_WAL_SIZE;

/// Memtable size: small, so that every flush is short.
const WRITE_BUFFER: usize = 4 << 20;
/// Memtable size while a restore replays a snapshot's WAL: above
/// `WAL_SIZE_FOR_FLUSH`, the most WAL a snapshot copies.
const RESTORE_WRITE_BUFFER: usize = 2 * WAL_SIZE_FOR_FLUSH as usize;

fn db_options() -> Options {
    let mut o = Options::default();
    o.create_if_missing(true);
    o.create_missing_column_families(true);
    // Small memtables keep the flush that every snapshot does short: the
    // rest of an interval's writes were flushed in the background already.
    o.set_write_buffer_size(WRITE_BUFFER);
    o.set_max_write_buffer_number(4);
    o.set_compression_type(rocksdb::DBCompressionType::Lz4);
    o.set_max_background_jobs(2);
    o.set_keep_log_file_num(2);
    // The live WAL is what a snapshot copies; past this size RocksDB
    // flushes the column family holding the oldest data, so a snapshot
    // never copies more than this.
    o.set_max_total_wal_size(MAX_TOTAL_WAL_SIZE);
    // Every snapshot copies the MANIFEST, which grows with each flush and
    // compaction until it is rolled (1 GiB by default); rolled at 4 MiB,
    // the copy stays small.
    o.set_max_manifest_file_size(4 << 20);
    // Most lookups of new keys miss: a bloom filter answers them without
    // reading data blocks. Filters and indexes stay in memory (not in the
    // block cache, where a large state would evict them).
    let mut table = rocksdb::BlockBasedOptions::default();
    table.set_bloom_filter(10.0, false);
    o.set_block_based_table_factory(&table);
    o
}

/// Bytes one RocksDB instance holds in memory ([`StateBackend::memory`]).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RocksMemory {
    /// Active and immutable memtables.
    pub memtables: u64,
    /// The block cache (data blocks read back from SST files).
    pub block_cache: u64,
    /// Open tables' indexes and bloom filters, held outside the cache.
    pub table_readers: u64,
}

/// The RocksDB instance of one subtask.
///
/// [`StateBackend::share`] gives a second handle on the same instance, for
/// a snapshot's asynchronous part on another thread (RocksDB is safe to
/// use from several threads; the instance closes with the last handle).
pub struct StateBackend {
    db: Arc<DB>,
    path: PathBuf,
    write_opts: WriteOptions,
    /// Snapshots flush the memtables instead of copying the WAL (group
    /// mode): a snapshot is then only SST files, each uploaded once, where
    /// a WAL copy would be uploaded again at every checkpoint.
    pub flush_on_snapshot: bool,
}

impl StateBackend {
    /// Opens (creating) the instance at `path`.
    pub fn open(path: &Path) -> Result<Self> {
        Self::open_with(path, db_options())
    }

    /// Opens a restored snapshot at `path`. RocksDB replays the snapshot's
    /// WAL (up to [`MAX_TOTAL_WAL_SIZE`], and more when a snapshot
    /// overshot it) into memtables on open, and at the usual 4 MiB it
    /// wrote an L0 file for every 4 MiB replayed, synchronously, before
    /// the first record (most of a restart's time at 10 M keys). With
    /// memtables large enough for the whole WAL, the replay flushes at
    /// most once; the usual size then applies to later writes, so the
    /// replayed memtable is flushed in the background as the job runs.
    fn open_restored(path: &Path) -> Result<Self> {
        let mut o = db_options();
        o.set_write_buffer_size(RESTORE_WRITE_BUFFER);
        let state = Self::open_with(path, o)?;
        let usual = WRITE_BUFFER.to_string();
        for family in FAMILIES {
            state
                .db
                .set_options_cf(state.cf(family), &[("write_buffer_size", &usual)])
                .map_err(|e| {
                    WeirError::state(format!("set write_buffer_size on {}", path.display()), e)
                })?;
        }
        Ok(state)
    }

    fn open_with(path: &Path, options: Options) -> Result<Self> {
        create_private_dir(path)?;
        let db = DB::open_cf(&options, path, FAMILIES)
            .map_err(|e| WeirError::state(format!("open {}", path.display()), e))?;
        // WAL on, never synced: see the module's doc.
        let write_opts = WriteOptions::default();
        Ok(Self {
            db: Arc::new(db),
            path: path.to_path_buf(),
            write_opts,
            flush_on_snapshot: false,
        })
    }

    /// Replaces the instance at `path` with the key groups `range` of the
    /// given snapshots. A snapshot with exactly this range is hard-linked
    /// (immutable SST files; the small mutable files are copied), so the
    /// cost does not grow with state size; otherwise the overlapping key
    /// groups of each snapshot are copied, family by family (rescaling).
    pub fn restore(
        path: &Path,
        checkpoint_dir: &Path,
        handles: &[&StateHandle],
        range: (u32, u32),
    ) -> Result<Self> {
        let started = std::time::Instant::now();
        if path.exists() {
            fs::remove_dir_all(path).map_err(|e| WeirError::io(path, e))?;
        }
        let remove_ms = started.elapsed().as_millis() as u64;
        let overlapping: Vec<&StateHandle> = handles
            .iter()
            .copied()
            .filter(|h| h.key_groups.0 < range.1 && h.key_groups.1 > range.0)
            .collect();
        if let [h] = overlapping[..] {
            if h.key_groups == range {
                let from = checkpoint_dir.join(&h.path);
                let step = std::time::Instant::now();
                link_or_copy_dir(&from, path)?;
                let copy = path.join(changes::FILE);
                if copy.exists() {
                    fs::remove_file(&copy).map_err(|e| WeirError::io(&copy, e))?;
                }
                let link_ms = step.elapsed().as_millis() as u64;
                let step = std::time::Instant::now();
                let state = Self::open_restored(path)?;
                let open_ms = step.elapsed().as_millis() as u64;
                let step = std::time::Instant::now();
                state.apply_changes(&from, range)?;
                tracing::info!(
                    path = %path.display(),
                    remove_ms,
                    link_ms,
                    open_ms,
                    changes_ms = step.elapsed().as_millis() as u64,
                    "state restored"
                );
                return Ok(state);
            }
        }
        let state = Self::open(path)?;
        let scratch = path.with_extension("restore-scratch");
        for h in overlapping {
            if scratch.exists() {
                fs::remove_dir_all(&scratch).map_err(|e| WeirError::io(&scratch, e))?;
            }
            let from = checkpoint_dir.join(&h.path);
            link_or_copy_dir(&from, &scratch)?;
            let src = DB::open_cf(&db_options(), &scratch, FAMILIES)
                .map_err(|e| WeirError::state(format!("open {}", scratch.display()), e))?;
            for family in FAMILIES {
                let (src_cf, dst_cf) = (cf(&src, family), state.cf(family));
                let lo = state_key(range.0, b"");
                let mut batch = WriteBatch::default();
                for item in src.iterator_cf(
                    src_cf,
                    rocksdb::IteratorMode::From(&lo, rocksdb::Direction::Forward),
                ) {
                    let (k, v) = item.map_err(|e| {
                        WeirError::state(format!("read snapshot {}", from.display()), e)
                    })?;
                    let Some((kg, _)) = split_key(&k) else {
                        return Err(WeirError::Recovery(format!(
                            "state of {} subtask {} in {} ({family}) holds a key of {} bytes, shorter \
                             than its key-group prefix: the snapshot is corrupt",
                            h.uid,
                            h.subtask,
                            from.display(),
                            k.len()
                        )));
                    };
                    if kg >= range.1 {
                        break;
                    }
                    batch.put_cf(dst_cf, &k, &v);
                    if batch.len() >= 10_000 {
                        state.write(std::mem::take(&mut batch))?;
                    }
                }
                state.write(batch)?;
            }
            drop(src);
            state.apply_changes(&from, range)?;
            fs::remove_dir_all(&scratch).map_err(|e| WeirError::io(&scratch, e))?;
        }
        Ok(state)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Another handle on this instance (see the type's doc).
    pub fn share(&self) -> Self {
        Self {
            db: Arc::clone(&self.db),
            path: self.path.clone(),
            write_opts: WriteOptions::default(),
            flush_on_snapshot: self.flush_on_snapshot,
        }
    }

    pub fn db(&self) -> &DB {
        &self.db
    }

    /// Rewrites every SST file of every column family into new ones (a
    /// full compaction, the bottommost level included), after flushing the
    /// memtables: what a large compaction does to a checkpoint's upload,
    /// on demand (tests of group mode's late checkpoints).
    pub fn compact_all(&self) -> Result<()> {
        let mut opts = rocksdb::CompactOptions::default();
        opts.set_bottommost_level_compaction(rocksdb::BottommostLevelCompaction::Force);
        for family in FAMILIES {
            let cf = self.cf(family);
            self.db
                .flush_cf(cf)
                .map_err(|e| WeirError::state(format!("flush {}", self.path.display()), e))?;
            self.db
                .compact_range_cf_opt(cf, None::<&[u8]>, None::<&[u8]>, &opts);
        }
        Ok(())
    }

    /// The SST files RocksDB holds now, by name (in [`Self::dir`]) and
    /// size. Only installed files are live: each is complete and never
    /// changes again.
    pub fn live_sst_files(&self) -> Result<Vec<(String, u64)>> {
        let files = self
            .db
            .live_files()
            .map_err(|e| WeirError::state(format!("live files of {}", self.path.display()), e))?;
        Ok(files
            .into_iter()
            .map(|f| (f.name.trim_start_matches('/').to_string(), f.size as u64))
            .filter(|(name, _)| name.ends_with(".sst"))
            .collect())
    }

    /// The folder RocksDB keeps its files in.
    pub fn dir(&self) -> &Path {
        &self.path
    }

    /// A column family of this instance (one of [`FAMILIES`]).
    pub fn cf(&self, name: &str) -> &ColumnFamily {
        cf(&self.db, name)
    }

    /// What this instance holds in memory, by RocksDB's own accounting
    /// (reported as `weir_memory_bytes`, src/observe/memory.rs):
    /// memtables (active and immutable) and table readers (indexes and
    /// bloom filters, which stay out of the block cache) over every
    /// column family, and the block cache they share.
    pub fn memory(&self) -> RocksMemory {
        use rocksdb::properties::{
            BLOCK_CACHE_USAGE, CUR_SIZE_ALL_MEM_TABLES, ESTIMATE_TABLE_READERS_MEM,
        };
        let read = |family: &str, property| {
            self.db
                .property_int_value_cf(self.cf(family), property)
                .ok()
                .flatten()
                .unwrap_or(0)
        };
        let mut m = RocksMemory::default();
        for family in FAMILIES {
            m.memtables += read(family, CUR_SIZE_ALL_MEM_TABLES);
            m.table_readers += read(family, ESTIMATE_TABLE_READERS_MEM);
        }
        m.block_cache = read(FAMILIES[0], BLOCK_CACHE_USAGE);
        m
    }

    /// Applies the changes file in snapshot folder `dir`, if there is one:
    /// only keys of key groups in `range`. Returns how many entries it
    /// applied.
    pub fn apply_changes(&self, dir: &Path, range: (u32, u32)) -> Result<usize> {
        let (batch, applied) = changes::batch(dir, range, |family| self.cf(family))?;
        self.write(batch)?;
        Ok(applied)
    }

    pub fn write(&self, batch: WriteBatch) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        self.db
            .write_opt(batch, &self.write_opts)
            .map_err(|e| WeirError::state(format!("write {}", self.path.display()), e))
    }

    /// Creates a RocksDB checkpoint at `target`: hard links to the SST
    /// files and a copy of the live WAL, no memtable flush, so the cost
    /// grows with neither the state nor the writes since the last
    /// snapshot beyond `MAX_TOTAL_WAL_SIZE`. The caller writes back its
    /// caches first. The parent of `target` must exist: a snapshot never
    /// creates the checkpoint folder it goes into. Returns its files.
    pub fn snapshot(&self, target: &Path) -> Result<Snapshot> {
        let cp = Checkpoint::new(&self.db).map_err(|e| WeirError::state("checkpoint", e))?;
        let wal_size_for_flush = if self.flush_on_snapshot {
            0
        } else {
            WAL_SIZE_FOR_FLUSH
        };
        create_checkpoint(&cp, target, wal_size_for_flush).map_err(|message| {
            WeirError::Snapshot {
                target: target.to_path_buf(),
                message,
            }
        })?;
        let mut files = Vec::new();
        for entry in fs::read_dir(target).map_err(|e| WeirError::io(target, e))? {
            let entry = entry.map_err(|e| WeirError::io(target, e))?;
            let meta = entry
                .metadata()
                .map_err(|e| WeirError::io(&entry.path(), e))?;
            if meta.is_file() {
                files.push(SnapshotFile {
                    name: entry.file_name().to_string_lossy().into_owned(),
                    size_bytes: meta.len(),
                    crc32: None,
                });
            }
        }
        files.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(Snapshot {
            size_bytes: files.iter().map(|f| f.size_bytes).sum(),
            files,
        })
    }
}

/// `Checkpoint::create_checkpoint` with RocksDB's `log_size_for_flush`,
/// which rust-rocksdb fixes at 0 (always flush). Below that WAL size the
/// checkpoint copies the WAL instead of flushing the memtables.
fn create_checkpoint(
    cp: &Checkpoint<'_>,
    target: &Path,
    log_size_for_flush: u64,
) -> std::result::Result<(), String> {
    use std::os::unix::ffi::OsStrExt;
    // rust-rocksdb's Checkpoint holds the C handle as its only field that
    // is not zero-sized; this fails to compile if that ever changes.
    const _: () = assert!(
        std::mem::size_of::<Checkpoint<'static>>()
            == std::mem::size_of::<*mut librocksdb_sys::rocksdb_checkpoint_t>()
    );
    let path = std::ffi::CString::new(target.as_os_str().as_bytes())
        .map_err(|_| "the path holds a NUL byte".to_string())?;
    let mut err: *mut std::ffi::c_char = std::ptr::null_mut();
    // SAFETY: the handle is alive for the borrow of `cp`; `path` outlives
    // the call; RocksDB sets `err` to a malloc'ed message on failure, which
    // is copied and freed here.
    unsafe {
        let handle =
            *(cp as *const Checkpoint<'_> as *const *mut librocksdb_sys::rocksdb_checkpoint_t);
        librocksdb_sys::rocksdb_checkpoint_create(
            handle,
            path.as_ptr(),
            log_size_for_flush,
            &mut err,
        );
        if !err.is_null() {
            let message = std::ffi::CStr::from_ptr(err).to_string_lossy().into_owned();
            librocksdb_sys::rocksdb_free(err as *mut std::ffi::c_void);
            return Err(message);
        }
    }
    Ok(())
}

fn cf<'a>(db: &'a DB, name: &str) -> &'a ColumnFamily {
    db.cf_handle(name)
        .expect("every column family is opened with the instance")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The figures come from RocksDB itself: a write shows in the
    /// memtables, a flush moves it into a table whose reader (index and
    /// filter) is then held.
    #[test]
    fn memory_reads_rocksdbs_own_figures() {
        let dir = tempfile::tempdir().unwrap();
        let store = StateBackend::open(&dir.path().join("db")).unwrap();
        let empty = store.memory();
        let mut batch = WriteBatch::default();
        for i in 0u32..20_000 {
            batch.put_cf(store.cf(FAMILIES[0]), i.to_be_bytes(), [7u8; 100]);
        }
        store.write(batch).unwrap();
        let written = store.memory();
        assert!(
            written.memtables > empty.memtables + 1_000_000,
            "{empty:?} then {written:?}"
        );
        store.compact_all().unwrap();
        let flushed = store.memory();
        assert!(flushed.table_readers > 0, "{flushed:?}");
        assert!(
            flushed.memtables < written.memtables,
            "{written:?} then {flushed:?}"
        );
    }
}
