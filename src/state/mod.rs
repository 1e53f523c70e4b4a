//! Keyed state: one RocksDB instance per (operator uid, subtask) over bytes
//! ([`backend`]), typed value state with a write-back cache ([`value`]) and
//! a timer service ([`timers`]); [`KeyedState`] holds the three for one
//! subtask. Keys start with the key group (u16, big endian) in every
//! column family, so a key group is a contiguous range that can be copied
//! into another instance when the parallelism changes.

pub mod backend;
pub mod changes;
pub mod key_groups;
pub mod timers;
pub mod value;

use std::path::Path;

use crate::checkpoint::{SnapshotFile, StateHandle};
use crate::error::{Result, WeirError};
use backend::StateBackend;
use timers::TimerService;
use value::ValueState;

/// A value kept in state: fixed-size, cheap to copy, with its own encoding.
pub trait StateValue: Copy + Default + Send + 'static {
    /// Names the encoding in errors ("32 bytes").
    const NAME: &'static str;
    fn encode(&self, out: &mut Vec<u8>);
    fn decode(bytes: &[u8]) -> Option<Self>;
}

/// The aggregate kept per key (and per window). Little endian, 32 bytes.
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

    /// Folds another accumulator in (merging session windows).
    pub fn merge(&mut self, other: &Accumulator) {
        self.count += other.count;
        self.sum += other.sum;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
    }
}

impl StateValue for Accumulator {
    const NAME: &'static str = "32 bytes";

    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.count.to_le_bytes());
        out.extend_from_slice(&self.sum.to_le_bytes());
        out.extend_from_slice(&self.min.to_le_bytes());
        out.extend_from_slice(&self.max.to_le_bytes());
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

/// A snapshot just taken: its files, for `_metadata`.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub size_bytes: u64,
    pub files: Vec<SnapshotFile>,
}

/// Splits a RocksDB key into key group and the rest, or says it cannot be.
pub fn split_key(full: &[u8]) -> Option<(u32, &[u8])> {
    let (kg, key) = full.split_first_chunk::<2>()?;
    Some((u32::from(u16::from_be_bytes(*kg)), key))
}

/// The error for a value at `full_key` that cannot be decoded.
pub(crate) fn corrupt(path: &Path, full_key: &[u8], reason: String) -> WeirError {
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
pub(crate) fn read_error(path: &Path, full_key: &[u8], e: rocksdb::Error) -> WeirError {
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

/// Pending timer changes that a snapshot writes back to RocksDB after it
/// was taken (below this they ride along in each changes file).
const TIMER_WRITE_BACK: usize = 16_384;

/// One subtask's keyed state: its RocksDB instance, typed values with a
/// write-back cache, and timers.
pub struct KeyedState<V = Accumulator> {
    pub backend: StateBackend,
    pub values: ValueState<V>,
    pub timers: TimerService,
    /// Reused to build keys for lookups, so a cache hit allocates nothing.
    scratch: Vec<u8>,
}

impl<V: StateValue> KeyedState<V> {
    /// Opens (creating) the instance at `path`.
    pub fn open(path: &Path, cache_limit: usize) -> Result<Self> {
        Self::from_backend(StateBackend::open(path)?, cache_limit)
    }

    /// The key groups `range` of the given snapshots at `path` (see
    /// [`StateBackend::restore`]), timers included.
    pub fn restore(
        path: &Path,
        cache_limit: usize,
        checkpoint_dir: &Path,
        handles: &[&StateHandle],
        range: (u32, u32),
    ) -> Result<Self> {
        Self::from_backend(
            StateBackend::restore(path, checkpoint_dir, handles, range)?,
            cache_limit,
        )
    }

    fn from_backend(backend: StateBackend, cache_limit: usize) -> Result<Self> {
        let timers = TimerService::load(&backend)?;
        Ok(Self {
            backend,
            values: ValueState::new(cache_limit),
            timers,
            scratch: Vec::with_capacity(64),
        })
    }

    /// Applies `f` to the value of `key` in `key_group` and returns it.
    pub fn update(&mut self, key_group: u32, key: &[u8], f: impl FnOnce(&mut V)) -> Result<V> {
        self.scratch.clear();
        self.scratch
            .extend_from_slice(&(key_group as u16).to_be_bytes());
        self.scratch.extend_from_slice(key);
        self.values.update(&self.backend, &self.scratch, f)
    }

    /// The current value at a full key (cache first).
    pub fn get(&self, full_key: &[u8]) -> Result<Option<V>> {
        self.values.get(&self.backend, full_key)
    }

    /// Writes a raw value (tests that need corrupt state).
    pub fn put_raw(&self, full_key: &[u8], value: &[u8]) -> Result<()> {
        let mut batch = rocksdb::WriteBatch::default();
        batch.put(full_key, value);
        self.backend.write(batch)
    }

    /// Writes every cached change (values and timers) to RocksDB.
    pub fn write_back(&mut self) -> Result<()> {
        self.values.write_back(&self.backend)?;
        self.timers.write_back(&self.backend)
    }

    /// Writes back and snapshots into `target` (whose parent must exist).
    /// The snapshot is the RocksDB checkpoint plus a changes file with
    /// the cache entries and timer changes not yet written back: nothing is
    /// written into RocksDB at the barrier ([`changes`]).
    pub fn snapshot(&mut self, target: &Path) -> Result<Snapshot> {
        if self.backend.flush_on_snapshot {
            // Everything into RocksDB and then into SST files: the changes
            // file stays empty (see `StateBackend::flush_on_snapshot`).
            self.write_back()?;
        }
        let started = std::time::Instant::now();
        let mut snapshot = self.backend.snapshot(target)?;
        let checkpoint = started.elapsed();
        let mut changes = changes::ChangesWriter::new();
        self.values.collect_dirty(&mut changes);
        self.timers.collect_dirty(&mut changes);
        let entries = changes.entries();
        let size = changes.write(target)?;
        snapshot.files.push(SnapshotFile {
            name: changes::FILE.into(),
            size_bytes: size,
            crc32: None,
        });
        snapshot.files.sort_by(|a, b| a.name.cmp(&b.name));
        snapshot.size_bytes += size;
        let changes_done = started.elapsed();
        // Values are written back in slices as they accumulate; timers have
        // no slices of their own, so a large backlog goes now, after the
        // snapshot was taken.
        if self.timers.pending_changes() >= TIMER_WRITE_BACK {
            self.timers.write_back(&self.backend)?;
        }
        tracing::debug!(
            target_dir = %target.display(),
            checkpoint_us = checkpoint.as_micros() as u64,
            changes_us = (changes_done - checkpoint).as_micros() as u64,
            timers_write_back_us = (started.elapsed() - changes_done).as_micros() as u64,
            changes = entries,
            changes_bytes = size,
            files = snapshot.files.len(),
            "state snapshot"
        );
        Ok(snapshot)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::CheckpointStore;
    use key_groups::{key_group, range_for_subtask};
    use std::fs;

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

    /// The handle of a snapshot of key groups 0..8 at `chk/state/wc/0`.
    fn whole_handle() -> StateHandle {
        StateHandle {
            uid: "wc".into(),
            subtask: 0,
            key_groups: (0, 8),
            path: "state/wc/0".into(),
            size_bytes: 0,
            files: vec![],
        }
    }

    /// Restores the whole key-group range from the snapshot at
    /// `<dir>/chk/state/wc/0` into `<dir>/<live>`.
    fn restore_whole(dir: &Path, live: &str, cache_limit: usize) -> KeyedState {
        let handle = whole_handle();
        KeyedState::restore(
            &dir.join(live),
            cache_limit,
            &dir.join("chk"),
            &[&handle],
            (0, 8),
        )
        .unwrap()
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
        let r = restore_whole(tmp.path(), "live", 2);
        assert_eq!((count(&r, "a"), count(&r, "b"), count(&r, "c")), (3, 2, 1));
        // The restored instance writes on without touching the snapshot.
        let mut r = r;
        add(&mut r, "a", 1);
        r.write_back().unwrap();
        drop(r);
        let again = restore_whole(tmp.path(), "again", 2);
        assert_eq!(count(&again, "a"), 3);
    }

    fn files_with(dir: &Path, extension: &str) -> Vec<(String, u64)> {
        fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap())
            .filter(|e| e.path().extension().is_some_and(|x| x == extension))
            .map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                (name, e.metadata().unwrap().len())
            })
            .collect()
    }

    #[test]
    fn a_snapshot_copies_the_wal_instead_of_flushing_memtables() {
        let tmp = tempfile::tempdir().unwrap();
        let live = tmp.path().join("live");
        let mut s = KeyedState::open(&live, 1000).unwrap();
        for i in 0..500u32 {
            add(&mut s, &format!("w{i}"), i % 7 + 1);
        }
        s.write_back().unwrap();
        let ssts_before = files_with(&live, "sst");
        let snap = tmp.path().join("chk/state/wc/0");
        fs::create_dir_all(snap.parent().unwrap()).unwrap();
        s.snapshot(&snap).unwrap();
        // No flush at the barrier: the live instance has the same SSTs, and
        // the snapshot carries the writes in a copy of the WAL.
        assert_eq!(files_with(&live, "sst"), ssts_before);
        let wal = files_with(&snap, "log");
        assert!(
            wal.iter().any(|(_, len)| *len > 0),
            "no WAL in the snapshot: {wal:?}"
        );
        add(&mut s, "w1", 100); // after the snapshot: must not be restored
        s.write_back().unwrap();
        drop(s);
        let r = restore_whole(tmp.path(), "restored", 2);
        for i in 0..500u32 {
            assert_eq!(count(&r, &format!("w{i}")), u64::from(i % 7 + 1), "w{i}");
        }
    }

    #[test]
    fn a_flushing_snapshot_is_sst_files_and_an_empty_changes_file() {
        // Group mode uploads snapshots: each SST once, so nothing may ride
        // in a WAL copy or a changes file that would be uploaded each time.
        let tmp = tempfile::tempdir().unwrap();
        let live = tmp.path().join("live");
        let mut s = KeyedState::open(&live, 1000).unwrap();
        s.backend.flush_on_snapshot = true;
        for i in 0..500u32 {
            add(&mut s, &format!("w{i}"), i % 7 + 1);
        }
        let snap = tmp.path().join("chk/state/wc/0");
        fs::create_dir_all(snap.parent().unwrap()).unwrap();
        let taken = s.snapshot(&snap).unwrap();
        assert!(files_with(&snap, "log").iter().all(|(_, len)| *len == 0));
        assert!(
            !files_with(&snap, "sst").is_empty(),
            "no SST in the snapshot"
        );
        let changes = taken
            .files
            .iter()
            .find(|f| f.name == changes::FILE)
            .unwrap();
        assert!(
            changes.size_bytes <= 16,
            "changes file of {} bytes",
            changes.size_bytes
        );
        drop(s);
        let r = restore_whole(tmp.path(), "restored", 2);
        for i in 0..500u32 {
            assert_eq!(count(&r, &format!("w{i}")), u64::from(i % 7 + 1), "w{i}");
        }
    }

    #[test]
    fn changes_not_yet_written_back_are_in_the_snapshot_and_not_in_rocksdb() {
        let tmp = tempfile::tempdir().unwrap();
        let live = tmp.path().join("live");
        let mut s = KeyedState::open(&live, 1000).unwrap();
        add(&mut s, "kept", 2);
        add(&mut s, "gone", 1);
        s.write_back().unwrap();
        // Changes after the last write-back: an update, a delete, a new key
        // and a timer.
        add(&mut s, "kept", 3);
        let gone = state_key(key_group(b"gone", 8), b"gone");
        s.values.remove(&s.backend, &gone).unwrap();
        add(&mut s, "new", 1);
        let new_key = state_key(key_group(b"new", 8), b"new");
        s.timers.register(100, new_key.clone());
        let snap = tmp.path().join("chk/state/wc/0");
        fs::create_dir_all(snap.parent().unwrap()).unwrap();
        let snapshot = s.snapshot(&snap).unwrap();
        assert!(snapshot.files.iter().any(|f| f.name == changes::FILE));
        // Nothing was written into RocksDB at the barrier.
        let stored = |s: &KeyedState, key: &[u8]| {
            s.backend
                .db()
                .get_cf(s.backend.cf(backend::VALUES), key)
                .unwrap()
                .map(|v| Accumulator::decode(&v).unwrap().count)
        };
        let kept = state_key(key_group(b"kept", 8), b"kept");
        assert_eq!(stored(&s, &kept), Some(2));
        assert_eq!(stored(&s, &gone), Some(1));
        assert_eq!(stored(&s, &new_key), None);
        // The live instance still sees its own changes.
        assert_eq!(
            (count(&s, "kept"), count(&s, "gone"), count(&s, "new")),
            (5, 0, 1)
        );
        drop(s);
        let r: KeyedState = restore_whole(tmp.path(), "restored", 1000);
        assert_eq!(
            (count(&r, "kept"), count(&r, "gone"), count(&r, "new")),
            (5, 0, 1)
        );
        assert_eq!(r.timers.next_time(), Some(100));
        assert!(
            !tmp.path().join("restored").join(changes::FILE).exists(),
            "the applied changes file is not left in the live instance"
        );
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
        let mut s: KeyedState = KeyedState::open(&tmp.path().join("live"), 10).unwrap();
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
        let s: KeyedState = KeyedState::open(&tmp.path().join("live"), 10).unwrap();
        s.put_raw(b"\x01", b"x").unwrap();
        let target = tmp.path().join("chk/state/wc/0");
        fs::create_dir_all(target.parent().unwrap()).unwrap();
        let mut s = s;
        s.snapshot(&target).unwrap();
        drop(s);
        // Another range than the snapshot's: the keys are read one by one.
        let handle = whole_handle();
        let e = KeyedState::<Accumulator>::restore(
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
