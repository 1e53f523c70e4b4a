//! Keyed state in RocksDB, one instance per (operator uid, subtask).
//!
//! Keys are `key_group (u16, big endian) ++ key bytes`, so a key group is a
//! contiguous key range that can be copied into another instance when the
//! parallelism changes. A bounded write-back cache sits in front of RocksDB
//! (as Kafka Streams' record cache does): a get+put per update caps a core
//! at a few hundred thousand updates a second, while a `WriteBatch` of
//! thousands of puts runs at millions. The cache is written back as one
//! batch when it is full and at every barrier, before the snapshot.
//!
//! RocksDB's own WAL is off: durability comes from checkpoints, and the
//! Checkpoint API flushes the memtable before linking files.

pub mod key_groups;

use std::fs;
use std::path::{Path, PathBuf};

use rocksdb::{checkpoint::Checkpoint, Options, WriteBatch, WriteOptions, DB};
use rustc_hash::FxHashMap;

use crate::checkpoint::store::{create_private_dir, link_or_copy_dir};
use crate::checkpoint::{SnapshotFile, StateHandle};
use crate::error::{Result, WeirError};

/// The aggregate kept per key. Fixed layout, little endian, 32 bytes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Accumulator {
    pub count: u64,
    pub sum: f64,
    pub min: f64,
    pub max: f64,
}

impl Default for Accumulator {
    fn default() -> Self {
        Self {
            count: 0,
            sum: 0.0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
        }
    }
}

impl Accumulator {
    pub fn add(&mut self, value: f64) {
        self.count += 1;
        self.sum += value;
        self.min = self.min.min(value);
        self.max = self.max.max(value);
    }

    fn encode(&self) -> [u8; 32] {
        let mut b = [0u8; 32];
        b[0..8].copy_from_slice(&self.count.to_le_bytes());
        b[8..16].copy_from_slice(&self.sum.to_le_bytes());
        b[16..24].copy_from_slice(&self.min.to_le_bytes());
        b[24..32].copy_from_slice(&self.max.to_le_bytes());
        b
    }

    fn decode(b: &[u8]) -> Option<Self> {
        if b.len() != 32 {
            return None;
        }
        let f = |r: std::ops::Range<usize>| b[r].try_into().ok();
        Some(Self {
            count: u64::from_le_bytes(f(0..8)?),
            sum: f64::from_le_bytes(f(8..16)?),
            min: f64::from_le_bytes(f(16..24)?),
            max: f64::from_le_bytes(f(24..32)?),
        })
    }
}

struct Cached {
    acc: Accumulator,
    dirty: bool,
}

/// One subtask's keyed state.
pub struct KeyedState {
    db: DB,
    path: PathBuf,
    /// Keyed by the full RocksDB key; Fx hashing, since keys are short and
    /// not attacker-chosen in a way that matters to a per-subtask cache.
    cache: FxHashMap<Vec<u8>, Cached>,
    cache_limit: usize,
    write_opts: WriteOptions,
    /// Reused to build keys for lookups, so a cache hit allocates nothing.
    scratch: Vec<u8>,
    /// Keys of the dirty cache entries, in the order they became dirty.
    dirty: Vec<Vec<u8>>,
}

/// Dirty entries written back at once between barriers.
const WRITE_BACK_SLICE: usize = 65_536;

fn db_options() -> Options {
    let mut o = Options::default();
    o.create_if_missing(true);
    // Small memtables keep the flush that every snapshot does short: the
    // rest of an interval's writes were flushed in the background already.
    o.set_write_buffer_size(4 << 20);
    o.set_max_write_buffer_number(4);
    o.set_compression_type(rocksdb::DBCompressionType::Lz4);
    o.set_max_background_jobs(2);
    o.set_keep_log_file_num(2);
    // Most lookups of new keys miss: a bloom filter answers them without
    // reading data blocks.
    // Filters and indexes stay in memory (not in the block cache, where a
    // large state would evict them and every miss would read them again).
    let mut table = rocksdb::BlockBasedOptions::default();
    table.set_bloom_filter(10.0, false);
    o.set_block_based_table_factory(&table);
    o
}

/// A snapshot just taken: its files, for `_metadata`.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub size_bytes: u64,
    pub files: Vec<SnapshotFile>,
}

/// Splits a RocksDB key into key group and key, or says why it cannot be.
fn split_key(full: &[u8]) -> Option<(u32, &[u8])> {
    let (kg, key) = full.split_first_chunk::<2>()?;
    Some((u32::from(u16::from_be_bytes(*kg)), key))
}

/// The error for a value at `full_key` that cannot be decoded.
fn corrupt(path: &Path, full_key: &[u8], reason: String) -> WeirError {
    let (key_group, key) = split_key(full_key).unwrap_or((0, full_key));
    WeirError::CorruptState {
        uid: String::new(),
        key_group,
        key: String::from_utf8_lossy(&key[..key.len().min(256)]).into_owned(),
        location: path.display().to_string(),
        reason,
    }
}

/// A read error; RocksDB's corruption errors (bad checksums) are corrupt
/// state, which no restart can fix.
fn read_error(path: &Path, full_key: &[u8], e: rocksdb::Error) -> WeirError {
    if e.kind() == rocksdb::ErrorKind::Corruption {
        corrupt(path, full_key, e.into_string())
    } else {
        WeirError::state(format!("get from {}", path.display()), e)
    }
}

/// Builds a RocksDB key: key group prefix, then the key.
pub fn state_key(key_group: u32, key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(2 + key.len());
    k.extend_from_slice(&(key_group as u16).to_be_bytes());
    k.extend_from_slice(key);
    k
}

impl KeyedState {
    /// Opens (creating) the instance at `path`.
    pub fn open(path: &Path, cache_limit: usize) -> Result<Self> {
        create_private_dir(path)?;
        let db = DB::open(&db_options(), path)
            .map_err(|e| WeirError::state(format!("open {}", path.display()), e))?;
        let mut write_opts = WriteOptions::default();
        write_opts.disable_wal(true);
        Ok(Self {
            db,
            path: path.to_path_buf(),
            cache: FxHashMap::default(),
            cache_limit,
            write_opts,
            scratch: Vec::with_capacity(64),
            dirty: Vec::new(),
        })
    }

    /// Replaces the instance at `path` with the key groups `range` of the
    /// given snapshots. A snapshot with exactly this range is hard-linked
    /// (immutable SST files; the small mutable files are copied), so the
    /// cost does not grow with state size; otherwise the overlapping key
    /// groups of each snapshot are copied (rescaling).
    pub fn restore(
        path: &Path,
        cache_limit: usize,
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
                return Self::open(path, cache_limit);
            }
        }
        let state = Self::open(path, cache_limit)?;
        let scratch = path.with_extension("restore-scratch");
        for h in overlapping {
            if scratch.exists() {
                fs::remove_dir_all(&scratch).map_err(|e| WeirError::io(&scratch, e))?;
            }
            link_or_copy_dir(&checkpoint_dir.join(&h.path), &scratch)?;
            let src = DB::open(&db_options(), &scratch)
                .map_err(|e| WeirError::state(format!("open {}", scratch.display()), e))?;
            let lo = state_key(range.0, b"");
            let mut batch = WriteBatch::default();
            for item in src.iterator(rocksdb::IteratorMode::From(
                &lo,
                rocksdb::Direction::Forward,
            )) {
                let (k, v) = item.map_err(|e| {
                    WeirError::state(
                        format!("read snapshot {}", checkpoint_dir.join(&h.path).display()),
                        e,
                    )
                })?;
                let Some((kg, _)) = split_key(&k) else {
                    return Err(WeirError::Recovery(format!(
                        "state of {} subtask {} in {} holds a key of {} bytes, shorter than its key-group prefix: \
                         the snapshot is corrupt",
                        h.uid,
                        h.subtask,
                        checkpoint_dir.join(&h.path).display(),
                        k.len()
                    )));
                };
                if kg >= range.1 {
                    break;
                }
                batch.put(&k, &v);
                if batch.len() >= 10_000 {
                    state.write(std::mem::take(&mut batch))?;
                }
            }
            state.write(batch)?;
            drop(src);
            fs::remove_dir_all(&scratch).map_err(|e| WeirError::io(&scratch, e))?;
        }
        Ok(state)
    }

    fn write(&self, batch: WriteBatch) -> Result<()> {
        self.db
            .write_opt(batch, &self.write_opts)
            .map_err(|e| WeirError::state(format!("write {}", self.path.display()), e))
    }

    /// Applies `f` to the accumulator of `key` in `key_group` and returns
    /// the new value.
    pub fn update(
        &mut self,
        key_group: u32,
        key: &[u8],
        f: impl FnOnce(&mut Accumulator),
    ) -> Result<Accumulator> {
        self.scratch.clear();
        self.scratch
            .extend_from_slice(&(key_group as u16).to_be_bytes());
        self.scratch.extend_from_slice(key);
        if let Some(c) = self.cache.get_mut(self.scratch.as_slice()) {
            f(&mut c.acc);
            let acc = c.acc;
            if !c.dirty {
                c.dirty = true;
                self.dirty.push(self.scratch.clone());
                self.write_back_if_due()?;
            }
            return Ok(acc);
        }
        if self.cache.len() >= self.cache_limit {
            self.write_back()?;
            self.cache.clear();
        }
        let full_key = self.scratch.clone();
        let mut acc = self.read(&full_key)?.unwrap_or_default();
        f(&mut acc);
        self.dirty.push(full_key.clone());
        self.cache.insert(full_key, Cached { acc, dirty: true });
        self.write_back_if_due()?;
        Ok(acc)
    }

    /// Writes dirty entries back in slices as they accumulate, so that the
    /// work left for a barrier (and the memtable its snapshot flushes)
    /// stays small whatever the state size.
    fn write_back_if_due(&mut self) -> Result<()> {
        if self.dirty.len() >= WRITE_BACK_SLICE {
            self.write_back()?;
        }
        Ok(())
    }

    /// The current value of `key` (cache first).
    pub fn get(&self, key: &[u8]) -> Result<Option<Accumulator>> {
        if let Some(c) = self.cache.get(key) {
            return Ok(Some(c.acc));
        }
        self.read(key)
    }

    /// Reads and decodes a stored value.
    fn read(&self, full_key: &[u8]) -> Result<Option<Accumulator>> {
        match self
            .db
            .get_pinned(full_key)
            .map_err(|e| read_error(&self.path, full_key, e))?
        {
            None => Ok(None),
            Some(v) => Accumulator::decode(&v).map(Some).ok_or_else(|| {
                corrupt(
                    &self.path,
                    full_key,
                    format!("value of {} bytes, expected 32", v.len()),
                )
            }),
        }
    }

    /// Writes a raw value (tests that need corrupt state).
    pub fn put_raw(&self, full_key: &[u8], value: &[u8]) -> Result<()> {
        let mut batch = WriteBatch::default();
        batch.put(full_key, value);
        self.write(batch)
    }

    /// Writes every dirty cache entry to RocksDB in one batch.
    pub fn write_back(&mut self) -> Result<()> {
        let mut batch = WriteBatch::default();
        for key in self.dirty.drain(..) {
            if let Some(c) = self.cache.get_mut(&key) {
                batch.put(&key, c.acc.encode());
                c.dirty = false;
            }
        }
        if !batch.is_empty() {
            self.write(batch)?;
        }
        Ok(())
    }

    /// Writes back the cache and creates a RocksDB checkpoint at `target`
    /// (flush + hard links: milliseconds, whatever the state size). The
    /// parent of `target` must exist: a snapshot never creates the
    /// checkpoint folder it goes into. Returns its files and their sizes.
    pub fn snapshot(&mut self, target: &Path) -> Result<Snapshot> {
        self.write_back()?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::CheckpointStore;
    use key_groups::{key_group, range_for_subtask};

    fn add(state: &mut KeyedState, key: &str, n: u32) {
        let kg = key_group(key.as_bytes(), 8);
        for _ in 0..n {
            state.update(kg, key.as_bytes(), |a| a.add(1.0)).unwrap();
        }
    }

    fn count(state: &KeyedState, key: &str) -> u64 {
        let kg = key_group(key.as_bytes(), 8);
        state
            .get(&state_key(kg, key.as_bytes()))
            .unwrap()
            .map_or(0, |a| a.count)
    }

    #[test]
    fn snapshot_and_restore_keep_exactly_the_snapshot() {
        let tmp = tempfile::tempdir().unwrap();
        let mut s = KeyedState::open(&tmp.path().join("live"), 2).unwrap();
        add(&mut s, "a", 3);
        add(&mut s, "b", 2);
        add(&mut s, "c", 1); // evicts through the small cache
        let snap = tmp.path().join("chk/state/wc/0");
        fs::create_dir_all(snap.parent().unwrap()).unwrap();
        s.snapshot(&snap).unwrap();
        add(&mut s, "a", 10); // after the snapshot: must not be restored
        s.write_back().unwrap();
        drop(s);
        let handle = StateHandle {
            uid: "wc".into(),
            subtask: 0,
            key_groups: (0, 8),
            path: "state/wc/0".into(),
            size_bytes: 0,
            files: vec![],
        };
        let r = KeyedState::restore(
            &tmp.path().join("live"),
            2,
            &tmp.path().join("chk"),
            &[&handle],
            (0, 8),
        )
        .unwrap();
        assert_eq!((count(&r, "a"), count(&r, "b"), count(&r, "c")), (3, 2, 1));
        // The restored instance writes on without touching the snapshot.
        let mut r = r;
        add(&mut r, "a", 1);
        r.write_back().unwrap();
        drop(r);
        let again = KeyedState::restore(
            &tmp.path().join("again"),
            2,
            &tmp.path().join("chk"),
            &[&handle],
            (0, 8),
        )
        .unwrap();
        assert_eq!(count(&again, "a"), 3);
    }

    #[test]
    fn restore_at_another_parallelism_splits_and_merges_key_groups() {
        let tmp = tempfile::tempdir().unwrap();
        let store = CheckpointStore::new(tmp.path().join("chk"));
        let words: Vec<String> = (0..200).map(|i| format!("w{i}")).collect();
        let mut handles = Vec::new();
        // Two subtasks at parallelism 2, each holding only its own groups.
        for sub in 0..2u32 {
            let range = range_for_subtask(sub, 2, 8);
            let mut s = KeyedState::open(&tmp.path().join(format!("live{sub}")), 1000).unwrap();
            for (i, w) in words.iter().enumerate() {
                let kg = key_group(w.as_bytes(), 8);
                if kg >= range.0 && kg < range.1 {
                    add(&mut s, w, i as u32 % 5 + 1);
                }
            }
            let rel = CheckpointStore::state_path("wc", sub);
            fs::create_dir_all(store.root().join(&rel).parent().unwrap()).unwrap();
            s.snapshot(&store.root().join(&rel)).unwrap();
            handles.push(StateHandle {
                uid: "wc".into(),
                subtask: sub,
                key_groups: range,
                path: rel,
                size_bytes: 0,
                files: vec![],
            });
        }
        let refs: Vec<&StateHandle> = handles.iter().collect();
        for p in [1u32, 3] {
            for sub in 0..p {
                let range = range_for_subtask(sub, p, 8);
                let r = KeyedState::restore(
                    &tmp.path().join(format!("p{p}-{sub}")),
                    1000,
                    store.root(),
                    &refs,
                    range,
                )
                .unwrap();
                for (i, w) in words.iter().enumerate() {
                    let kg = key_group(w.as_bytes(), 8);
                    let expected = if kg >= range.0 && kg < range.1 {
                        i as u64 % 5 + 1
                    } else {
                        0
                    };
                    assert_eq!(
                        count(&r, w),
                        expected,
                        "{w} at parallelism {p} subtask {sub}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_corrupt_value_is_an_error_naming_key_group_and_key() {
        let tmp = tempfile::tempdir().unwrap();
        let mut s = KeyedState::open(&tmp.path().join("live"), 10).unwrap();
        let kg = key_group(b"poison", 8);
        s.put_raw(&state_key(kg, b"poison"), b"not 32 bytes")
            .unwrap();
        let e = s.update(kg, b"poison", |a| a.add(1.0)).unwrap_err();
        assert!(e.is_fatal(), "a restart would hit it again: {e}");
        let text = e.to_string();
        assert!(text.contains(&format!("key group {kg}")), "{text}");
        assert!(text.contains("\"poison\""), "{text}");
        assert!(text.contains("12 bytes, expected 32"), "{text}");
        let e = s.get(&state_key(kg, b"poison")).unwrap_err();
        assert!(matches!(e, WeirError::CorruptState { .. }), "{e}");
    }

    #[test]
    fn a_key_shorter_than_its_prefix_fails_a_rescaling_restore() {
        let tmp = tempfile::tempdir().unwrap();
        let s = KeyedState::open(&tmp.path().join("live"), 10).unwrap();
        s.put_raw(b"\x01", b"x").unwrap();
        let target = tmp.path().join("chk/state/wc/0");
        fs::create_dir_all(target.parent().unwrap()).unwrap();
        let mut s = s;
        s.snapshot(&target).unwrap();
        drop(s);
        let handle = StateHandle {
            uid: "wc".into(),
            subtask: 0,
            key_groups: (0, 8),
            path: "state/wc/0".into(),
            size_bytes: 0,
            files: vec![],
        };
        // Another range than the snapshot's: the keys are read one by one.
        let e = KeyedState::restore(
            &tmp.path().join("r"),
            10,
            &tmp.path().join("chk"),
            &[&handle],
            (0, 4),
        )
        .err()
        .expect("refused");
        assert!(
            e.to_string().contains("shorter than its key-group prefix"),
            "{e}"
        );
    }
}
