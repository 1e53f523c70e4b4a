//! One RocksDB instance per (operator uid, subtask), over bytes, with one
//! column family per kind of state. Every key of every column family starts
//! with its key group (u16, big endian), so a key group is a contiguous
//! range in each family: a snapshot taken at one parallelism is split or
//! merged into another by copying ranges (docs/recovery.md).
//!
//! RocksDB's own WAL is off: durability comes from checkpoints, and the
//! Checkpoint API flushes the memtables before linking files.

use std::fs;
use std::path::{Path, PathBuf};

use rocksdb::{checkpoint::Checkpoint, ColumnFamily, Options, WriteBatch, WriteOptions, DB};

use super::{split_key, state_key, Snapshot};
use crate::checkpoint::store::{create_private_dir, link_or_copy_dir};
use crate::checkpoint::{SnapshotFile, StateHandle};
use crate::error::{Result, WeirError};

/// Values: keyed state (`key_group | key [| namespace]`).
pub const VALUES: &str = "default";
/// The timer index: `key_group | fire time (sign-flipped, big endian) | payload`.
pub const TIMERS: &str = "timers";
/// Every column family, in the order they are opened and restored.
pub const FAMILIES: [&str; 2] = [VALUES, TIMERS];

fn db_options() -> Options {
    let mut o = Options::default();
    o.create_if_missing(true);
    o.create_missing_column_families(true);
    // Small memtables keep the flush that every snapshot does short: the
    // rest of an interval's writes were flushed in the background already.
    o.set_write_buffer_size(4 << 20);
    o.set_max_write_buffer_number(4);
    o.set_compression_type(rocksdb::DBCompressionType::Lz4);
    o.set_max_background_jobs(2);
    o.set_keep_log_file_num(2);
    // Most lookups of new keys miss: a bloom filter answers them without
    // reading data blocks. Filters and indexes stay in memory (not in the
    // block cache, where a large state would evict them).
    let mut table = rocksdb::BlockBasedOptions::default();
    table.set_bloom_filter(10.0, false);
    o.set_block_based_table_factory(&table);
    o
}

/// The RocksDB instance of one subtask.
pub struct StateBackend {
    db: DB,
    path: PathBuf,
    write_opts: WriteOptions,
}

impl StateBackend {
    /// Opens (creating) the instance at `path`.
    pub fn open(path: &Path) -> Result<Self> {
        create_private_dir(path)?;
        let db = DB::open_cf(&db_options(), path, FAMILIES)
            .map_err(|e| WeirError::state(format!("open {}", path.display()), e))?;
        let mut write_opts = WriteOptions::default();
        write_opts.disable_wal(true);
        Ok(Self {
            db,
            path: path.to_path_buf(),
            write_opts,
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
        if path.exists() {
            fs::remove_dir_all(path).map_err(|e| WeirError::io(path, e))?;
        }
        let overlapping: Vec<&StateHandle> = handles
            .iter()
            .copied()
            .filter(|h| h.key_groups.0 < range.1 && h.key_groups.1 > range.0)
            .collect();
        if let [h] = overlapping[..] {
            if h.key_groups == range {
                link_or_copy_dir(&checkpoint_dir.join(&h.path), path)?;
                return Self::open(path);
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
            fs::remove_dir_all(&scratch).map_err(|e| WeirError::io(&scratch, e))?;
        }
        Ok(state)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn db(&self) -> &DB {
        &self.db
    }

    /// A column family of this instance (one of [`FAMILIES`]).
    pub fn cf(&self, name: &str) -> &ColumnFamily {
        cf(&self.db, name)
    }

    pub fn write(&self, batch: WriteBatch) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        self.db
            .write_opt(batch, &self.write_opts)
            .map_err(|e| WeirError::state(format!("write {}", self.path.display()), e))
    }

    /// Creates a RocksDB checkpoint at `target` (flush + hard links:
    /// milliseconds, whatever the state size). The caller writes back its
    /// caches first. The parent of `target` must exist: a snapshot never
    /// creates the checkpoint folder it goes into. Returns its files.
    pub fn snapshot(&self, target: &Path) -> Result<Snapshot> {
        let cp = Checkpoint::new(&self.db).map_err(|e| WeirError::state("checkpoint", e))?;
        cp.create_checkpoint(target)
            .map_err(|e| WeirError::state(format!("checkpoint into {}", target.display()), e))?;
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

fn cf<'a>(db: &'a DB, name: &str) -> &'a ColumnFamily {
    db.cf_handle(name)
        .expect("every column family is opened with the instance")
}
