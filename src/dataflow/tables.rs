//! State as named tables. An operator declares its tables (a value per
//! key, a list per key, a map per key); timers come with every keyed
//! operator. Each keyed (operator, subtask) keeps its tables in its own
//! RocksDB instance, so checkpoints, hard-link restores and rescaling by
//! key group work as for any keyed state (`crate::state`).
//!
//! Key layout in the values family:
//! `key group (u16 BE) | table (u8) | key length (varint) | key | map key`,
//! so a key group is one contiguous range (rescaling), a table of a key
//! group is one range (`weir state` by table), and a key's map entries
//! are one range. Values are the table's codec's bytes, of any size.
//!
//! A bounded write-back cache sits in front ([`KeyedStore`]):
//! dirty entries go into each snapshot's changes file and reach RocksDB
//! in write-back batches, never one put per update.

use std::path::{Path, PathBuf};

use crossbeam_channel::Receiver;
use rocksdb::WriteBatch;
use rustc_hash::{FxHashMap, FxHashSet};

use super::codec::{get_varint, put_varint, StateCodec};
use crate::checkpoint::StateHandle;
use crate::error::{Result, WeirError};
use crate::state::backend::StateBackend;
use crate::state::changes::{self, ChangesWriter};
use crate::state::snapshot_job::{RunningJob, SnapshotJob};
use crate::state::timers::TimerService;
use crate::state::Snapshot;
use crate::state::VALUES;

/// What one table holds per key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableKind {
    Value,
    List,
    Map,
}

/// A table an operator declares: its name (what `weir state` shows), what
/// it holds per key, and the codec of its values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableSpec {
    pub name: String,
    pub kind: TableKind,
    pub codec: &'static str,
}

impl TableSpec {
    pub fn value<T: StateCodec>(name: &str) -> Self {
        Self {
            name: name.into(),
            kind: TableKind::Value,
            codec: T::NAME,
        }
    }

    pub fn list<T: StateCodec>(name: &str) -> Self {
        Self {
            name: name.into(),
            kind: TableKind::List,
            codec: T::NAME,
        }
    }

    pub fn map<T: StateCodec>(name: &str) -> Self {
        Self {
            name: name.into(),
            kind: TableKind::Map,
            codec: T::NAME,
        }
    }
}

/// A handle on one declared table: its index in the operator's list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Table(pub u8);

/// The reserved table that holds, per key group, the watermark its
/// operator had reached at the snapshot (8 bytes, little endian, under an
/// empty key). After a restore, at any parallelism, the operator judges
/// lateness in that key group against it until the live watermark passes
/// it: a replayed record is late exactly when it was before the crash, and
/// a window that fired and was cleaned up is never opened again. Declared
/// tables are numbered from 0 and never reach it.
pub const WATERMARK_TABLE: Table = Table(crate::state::WATERMARK_TABLE_ID);

/// A cached key or value: held inline up to 24 bytes (a word's key and
/// its count's accumulators fit), so that a hit reads the hash table's
/// slot instead of following pointers to two more allocations.
type Bytes = smallvec::SmallVec<[u8; 24]>;

struct Cached {
    /// `None`: deleted, removed from RocksDB at write-back.
    value: Option<Bytes>,
    dirty: bool,
}

impl Cached {
    /// Sets (Some) or deletes (None) the value, keeping the buffer of a
    /// value already there. True if the entry became dirty just now.
    fn set(&mut self, value: Option<&[u8]>) -> bool {
        match (&mut self.value, value) {
            (Some(buf), Some(v)) => {
                buf.clear();
                buf.extend_from_slice(v);
            }
            (slot, v) => *slot = v.map(Bytes::from_slice),
        }
        !std::mem::replace(&mut self.dirty, true)
    }
}

/// What a read-modify-write ([`KeyedStore::update_slice`]) does to the
/// entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Write {
    /// Left as it was.
    Keep,
    /// Replaced by the bytes written into the buffer.
    Put,
    /// Deleted.
    Delete,
}

/// Why a read-modify-write stopped, the entry left as it was.
#[derive(Debug)]
pub(crate) enum UpdateFailed {
    /// The stored bytes are not a value of the table's codec (reported by
    /// the store as corrupt state, naming the key).
    Corrupt(String),
    /// The operator's own logic refused the update.
    Failed(String),
    Other(WeirError),
}

/// Cache entries past which everything dirty is written back.
const WRITE_BACK_AT: usize = 65_536;
/// Pending timer changes that a snapshot writes back after it was taken.
const TIMER_WRITE_BACK: usize = 16_384;

/// The tables and timers of one keyed (operator, subtask).
pub struct KeyedStore {
    pub uid: String,
    pub tables: Vec<TableSpec>,
    backend: StateBackend,
    timers: TimerService,
    cache: FxHashMap<Bytes, Cached>,
    dirty: usize,
    /// The keys of map tables' entries written (not deleted) since the
    /// last write-back, in order: a scan of one key's entries (a session
    /// window's, per record) finds them by range, not by walking a cache
    /// of every key. Deletions are left out, so that a key whose entries
    /// are replaced on every record (a session growing) does not pile up
    /// dead keys for every later scan to walk. Emptied at write-back.
    /// Kept only for the tables in `indexed`: those scanned at least once
    /// (a session window's), so that a table only ever read by key (a
    /// tumbling window's) pays nothing for it.
    dirty_maps: std::collections::BTreeSet<Bytes>,
    /// Per table id, whether `dirty_maps` covers it.
    indexed: Vec<bool>,
    cache_limit: usize,
    /// The size of the last snapshot's changes file: the next one's buffer
    /// starts at it.
    changes_bytes: usize,
    /// Set while a barrier's snapshot is being taken
    /// ([`KeyedStore::hold_write_back`]): no write-back starts meanwhile.
    holding_write_back: bool,
    /// The last snapshot's asynchronous part, while it runs
    /// (`crate::state::snapshot_job`): nothing is written into RocksDB
    /// until it is done.
    job: Option<RunningJob>,
    /// Values an operator put at a barrier straight into the coming
    /// snapshot ([`KeyedStore::stage_for_snapshot`]), not yet in the cache:
    /// being staged, then shared with the snapshot's job (which writes
    /// them after the cache's entries) until applied.
    staged: ChangesWriter,
    staged_in_snapshot: Option<std::sync::Arc<ChangesWriter>>,
    /// The size of the last barrier's staged values: the next buffer
    /// starts at it.
    staged_bytes: usize,
    /// Every entry of recently scanned keys' maps, by the key's prefix,
    /// kept up to date by each write under it. A join reads the other
    /// side's rows of a key on every record (q4: an auction's row, read by
    /// each of its bids) and looks up its own side's row before writing
    /// it; with the key's map listed here neither needs RocksDB (an
    /// iterator's seek, a point read of a row that is new).
    listed: FxHashMap<Bytes, std::collections::BTreeMap<Bytes, Bytes>>,
    /// Entries held in `listed`, bounded by [`LISTED_ENTRIES`].
    listed_entries: usize,
    /// Keys whose maps were found too large to list
    /// ([`KeyedStore::scan_range`] reads them by range), bounded by
    /// [`UNLISTED_KEYS`].
    unlisted: FxHashSet<Bytes>,
}

/// Keys `KeyedStore::unlisted` holds at most before it starts over.
const UNLISTED_KEYS: usize = 1_024;

/// Entries `KeyedStore::listed` holds at most before it starts over.
const LISTED_ENTRIES: usize = 65_536;
/// A key with more entries than this is not listed: building and
/// dropping its listing over and over would cost more than its scans.
const LISTED_PER_KEY: usize = 4_096;

/// The length of the prefix one key's map entries share in `full_key`
/// (`key group | table | key length | key`), if it has one.
fn map_prefix_len(full_key: &[u8]) -> Option<usize> {
    let mut rest = full_key.get(3..)?;
    let before = rest.len();
    let n = usize::try_from(get_varint(&mut rest).ok()?).ok()?;
    let len = 3 + (before - rest.len()) + n;
    (len <= full_key.len()).then_some(len)
}

impl KeyedStore {
    /// Opens empty state at `path` (whatever a previous attempt left is removed).
    pub fn open_empty(
        uid: &str,
        tables: Vec<TableSpec>,
        path: &Path,
        cache_limit: usize,
    ) -> Result<Self> {
        if path.exists() {
            std::fs::remove_dir_all(path).map_err(|e| WeirError::io(path, e))?;
        }
        Self::from_backend(uid, tables, StateBackend::open(path)?, cache_limit)
    }

    /// The key groups `range` of the snapshots `handles` (in `checkpoint_dir`).
    pub fn restore(
        uid: &str,
        tables: Vec<TableSpec>,
        path: &Path,
        checkpoint_dir: &Path,
        handles: &[&StateHandle],
        range: (u32, u32),
        cache_limit: usize,
    ) -> Result<Self> {
        let backend = StateBackend::restore(path, checkpoint_dir, handles, range)?;
        Self::from_backend(uid, tables, backend, cache_limit)
    }

    /// Entries the write-back cache holds at most (`state.cache_entries`).
    pub fn cache_limit(&self) -> usize {
        self.cache_limit
    }

    /// The watermarks saved per key group in `range` ([`WATERMARK_TABLE`]).
    pub(crate) fn saved_watermarks(&mut self, range: (u32, u32)) -> Result<FxHashMap<u32, i64>> {
        let mut out = FxHashMap::default();
        let mut key = Vec::with_capacity(4);
        for kg in range.0..range.1 {
            key_prefix(kg, WATERMARK_TABLE, &[], &mut key);
            let full = key.clone();
            if let Some(w) = self.read_with(&full, |store, bytes| {
                bytes.try_into().map(i64::from_le_bytes).map_err(|_| {
                    store.corrupt(
                        &full,
                        format!("a watermark of {} bytes, not 8", bytes.len()),
                    )
                })
            })? {
                out.insert(kg, w);
            }
        }
        Ok(out)
    }

    /// Saves `watermark` as key group `kg`'s ([`WATERMARK_TABLE`]).
    pub(crate) fn save_watermark(&mut self, kg: u32, watermark: i64) -> Result<()> {
        let mut key = Vec::with_capacity(4);
        key_prefix(kg, WATERMARK_TABLE, &[], &mut key);
        self.write_slice(&key, Some(&watermark.to_le_bytes()))
    }

    fn from_backend(
        uid: &str,
        tables: Vec<TableSpec>,
        backend: StateBackend,
        cache_limit: usize,
    ) -> Result<Self> {
        let timers = TimerService::load(&backend)?;
        Ok(Self {
            uid: uid.into(),
            tables,
            backend,
            timers,
            cache: FxHashMap::default(),
            dirty: 0,
            dirty_maps: Default::default(),
            indexed: Vec::new(),
            cache_limit: cache_limit.max(1),
            changes_bytes: 0,
            holding_write_back: false,
            job: None,
            staged: ChangesWriter::new(),
            staged_in_snapshot: None,
            staged_bytes: 0,
            listed: FxHashMap::default(),
            listed_entries: 0,
            unlisted: FxHashSet::default(),
        })
    }

    /// Whether `full_key` (or a prefix of one) is in a map table.
    fn in_map_table(&self, full_key: &[u8]) -> bool {
        full_key
            .get(2)
            .and_then(|t| self.tables.get(usize::from(*t)))
            .is_some_and(|t| t.kind == TableKind::Map)
    }

    /// Whether `dirty_maps` covers the table of `full_key` (or a prefix).
    fn is_indexed(&self, full_key: &[u8]) -> bool {
        full_key
            .get(2)
            .and_then(|t| self.indexed.get(usize::from(*t)))
            .is_some_and(|i| *i)
    }

    /// Notes a put (or, `put` false, a deletion) of `full_key` for
    /// [`Self::scan`].
    fn note_write(&mut self, full_key: &[u8], value: Option<&[u8]>) {
        if !self.listed.is_empty() {
            self.update_listing(full_key, value);
        }
        if !self.is_indexed(full_key) {
            return;
        }
        if value.is_none() {
            self.dirty_maps.remove(full_key);
        } else if !self.dirty_maps.contains(full_key) {
            self.dirty_maps.insert(Bytes::from_slice(full_key));
        }
    }

    pub(crate) fn corrupt(&self, full_key: &[u8], reason: String) -> WeirError {
        let (key_group, key) = crate::state::split_key(full_key).unwrap_or((0, full_key));
        WeirError::CorruptState {
            uid: self.uid.clone(),
            key_group,
            key: String::from_utf8_lossy(&key[..key.len().min(256)]).into_owned(),
            location: self.backend.path().display().to_string(),
            reason,
        }
    }

    #[cfg(test)]
    pub(crate) fn read(&mut self, full_key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.read_with(full_key, |_, bytes| Ok(bytes.to_vec()))
    }

    /// Calls `f` with the value at `full_key` where it lies (the cache, or
    /// RocksDB's pinned slice, which is then cached): a hit copies nothing.
    pub(crate) fn read_with<R>(
        &mut self,
        full_key: &[u8],
        f: impl FnOnce(&Self, &[u8]) -> Result<R>,
    ) -> Result<Option<R>> {
        if let Some(c) = self.cache.get(full_key) {
            return match &c.value {
                None => Ok(None),
                Some(v) => f(self, v).map(Some),
            };
        }
        if let Some(listing) = self.listing_of(full_key) {
            return match listing.get(full_key) {
                None => Ok(None),
                Some(v) => f(self, v).map(Some),
            };
        }
        let db = self.backend.db();
        let stored = db
            .get_pinned_cf(self.backend.cf(VALUES), full_key)
            .map_err(|e| crate::state::read_error(self.backend.path(), full_key, e))?
            .map(|v| Bytes::from_slice(&v));
        let result = match &stored {
            None => None,
            Some(v) => Some(f(self, v)?),
        };
        if self.cache.len() < self.cache_limit {
            self.cache.insert(
                Bytes::from_slice(full_key),
                Cached {
                    value: stored,
                    dirty: false,
                },
            );
        }
        Ok(result)
    }

    /// What RocksDB itself holds at `full_key`, cache aside (tests of the
    /// snapshot sequence).
    #[cfg(test)]
    pub(crate) fn in_rocksdb(&mut self, full_key: &[u8]) -> Option<Vec<u8>> {
        self.settle(true).expect("the snapshot job ends");
        self.backend
            .db()
            .get_cf(self.backend.cf(VALUES), full_key)
            .expect("read")
    }

    #[cfg(test)]
    pub(crate) fn path(&self) -> &Path {
        self.backend.path()
    }

    pub(crate) fn decode<T: StateCodec>(&self, full_key: &[u8], bytes: &[u8]) -> Result<T> {
        T::decode(bytes).map_err(|e| self.corrupt(full_key, format!("not a {}: {e}", T::NAME)))
    }

    #[cfg(test)]
    pub(crate) fn write(&mut self, full_key: &[u8], value: Option<Vec<u8>>) -> Result<()> {
        self.write_slice(full_key, value.as_deref())
    }

    /// Sets (Some) or deletes (None) the value at `full_key` in the cache;
    /// an entry already cached keeps its buffer, so an update of a cached
    /// key allocates nothing.
    pub(crate) fn write_slice(&mut self, full_key: &[u8], value: Option<&[u8]>) -> Result<()> {
        match self.cache.get_mut(full_key) {
            Some(c) => {
                if c.set(value) {
                    self.dirty += 1;
                }
            }
            None => {
                self.cache.insert(
                    Bytes::from_slice(full_key),
                    Cached {
                        value: value.map(Bytes::from_slice),
                        dirty: true,
                    },
                );
                self.dirty += 1;
            }
        }
        self.note_write(full_key, value);
        self.write_back_if_due()
    }

    /// Writes back once the cache outgrew its limit or holds
    /// [`WRITE_BACK_AT`] dirty entries.
    ///
    /// While a snapshot's job runs, the write-back waits for it: the cache
    /// grows meanwhile (a job takes tens of milliseconds), up to twice its
    /// bounds, past which the task waits for the job.
    pub(crate) fn write_back_if_due(&mut self) -> Result<()> {
        if self.holding_write_back {
            return Ok(());
        }
        if self.job.is_some() {
            let over = self.cache.len() > 2 * self.cache_limit.max(WRITE_BACK_AT)
                || self.dirty >= 2 * WRITE_BACK_AT;
            self.settle(over)?;
            if self.job.is_some() {
                return Ok(());
            }
        }
        if self.cache.len() > self.cache_limit || self.dirty >= WRITE_BACK_AT {
            self.write_back()?;
        }
        Ok(())
    }

    /// Ends the wait for the last snapshot's job once it is done (waiting
    /// for it with `block`). Then the timers' changes are written back if
    /// enough are pending: a write RocksDB refuses leaves them pending, and
    /// they go into the next snapshot's changes file.
    fn settle(&mut self, block: bool) -> Result<()> {
        let Some(job) = &self.job else {
            return Ok(());
        };
        if !job.is_done(block) {
            return Ok(());
        }
        self.job = None;
        self.timers_write_back_if_due();
        Ok(())
    }

    /// See [`Self::settle`].
    fn timers_write_back_if_due(&mut self) {
        if self.timers.pending_changes() < TIMER_WRITE_BACK {
            return;
        }
        if let Err(error) = self.timers.write_back(&self.backend) {
            tracing::warn!(
                store = %self.uid,
                error = %error.report(),
                pending = self.timers.pending_changes(),
                "state write-back failed; the timers' changes stay pending and go into the next snapshot"
            );
        }
    }

    /// Reads and rewrites the value at `full_key` with one cache lookup (a
    /// read-modify-write, such as an aggregate's update). `f` gets the
    /// value there, if any, and a cleared buffer; it says what to do, and
    /// [`Write::Put`] stores the buffer's bytes. Otherwise the same as
    /// [`Self::read_with`] followed by [`Self::write_slice`].
    pub(crate) fn update_slice(
        &mut self,
        full_key: &[u8],
        buf: &mut Vec<u8>,
        f: impl FnOnce(Option<&[u8]>, &mut Vec<u8>) -> std::result::Result<Write, UpdateFailed>,
    ) -> std::result::Result<Write, UpdateFailed> {
        buf.clear();
        // A listed key's map answers for an entry the cache lacks.
        let listed: Option<Option<Bytes>> =
            if self.listed.is_empty() || self.cache.contains_key(full_key) {
                None
            } else {
                self.listing_of(full_key).map(|l| l.get(full_key).cloned())
            };
        let outcome = match (self.cache.get_mut(full_key), listed) {
            (Some(c), _) => {
                let outcome = f(c.value.as_deref(), buf);
                let newly_dirty = match outcome {
                    Ok(Write::Put) => c.set(Some(buf)),
                    Ok(Write::Delete) => c.set(None),
                    Ok(Write::Keep) | Err(_) => false,
                };
                if newly_dirty {
                    self.dirty += 1;
                }
                outcome
            }
            (None, Some(listed)) => {
                // The key's map is listed: its entry (or its absence) is
                // known without RocksDB.
                let outcome = f(listed.as_deref(), buf);
                let value = match outcome {
                    Ok(Write::Put) => Some(Some(Bytes::from_slice(buf))),
                    Ok(Write::Delete) => Some(None),
                    Ok(Write::Keep) | Err(_) => None,
                };
                if let Some(value) = value {
                    self.cache
                        .insert(Bytes::from_slice(full_key), Cached { value, dirty: true });
                    self.dirty += 1;
                }
                outcome
            }
            (None, None) => {
                let db = self.backend.db();
                let stored = db
                    .get_pinned_cf(self.backend.cf(VALUES), full_key)
                    .map_err(|e| {
                        UpdateFailed::Other(crate::state::read_error(
                            self.backend.path(),
                            full_key,
                            e,
                        ))
                    })?;
                let outcome = f(stored.as_deref(), buf);
                let entry = match outcome {
                    Ok(Write::Put) => Some((Some(Bytes::from_slice(buf)), true)),
                    Ok(Write::Delete) => Some((None, true)),
                    Ok(Write::Keep) if self.cache.len() < self.cache_limit => {
                        Some((stored.as_deref().map(Bytes::from_slice), false))
                    }
                    Ok(Write::Keep) | Err(_) => None,
                };
                drop(stored);
                if let Some((value, dirty)) = entry {
                    self.cache
                        .insert(Bytes::from_slice(full_key), Cached { value, dirty });
                    if dirty {
                        self.dirty += 1;
                    }
                }
                outcome
            }
        };
        let write = outcome.map_err(|e| match e {
            UpdateFailed::Corrupt(reason) => UpdateFailed::Other(self.corrupt(full_key, reason)),
            e => e,
        })?;
        match write {
            Write::Put => self.note_write(full_key, Some(buf)),
            Write::Delete => self.note_write(full_key, None),
            Write::Keep => {}
        }
        self.write_back_if_due().map_err(UpdateFailed::Other)?;
        Ok(write)
    }

    /// Entries whose full key starts with `prefix`, cache laid over RocksDB.
    pub(crate) fn scan(&mut self, prefix: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let map_table = self.in_map_table(prefix);
        // Only one key's whole map is listed: a write finds it by prefix.
        let one_key = map_table && map_prefix_len(prefix) == Some(prefix.len());
        if one_key {
            if let Some(listing) = self.listed.get(prefix) {
                return Ok(listing
                    .iter()
                    .map(|(k, v)| (k.to_vec(), v.to_vec()))
                    .collect());
            }
        }
        let found = self.scan_stored(prefix, map_table)?;
        if one_key && found.len() <= LISTED_PER_KEY {
            if self.listed_entries + found.len() > LISTED_ENTRIES {
                self.listed.clear();
                self.listed_entries = 0;
            }
            self.listed_entries += found.len();
            let listing = found
                .iter()
                .map(|(k, v)| (Bytes::from_slice(k), Bytes::from_slice(v)))
                .collect();
            self.listed.insert(Bytes::from_slice(prefix), listing);
        }
        Ok(found)
    }

    /// The first `limit` entries of one key's map (`prefix`) whose full
    /// key is below `below` (all, with none), in key order: what a top-N
    /// reads for its best rows and an OVER window for the rows the
    /// watermark passed, without copying the rest of the map.
    ///
    /// A map small enough to list is listed (as [`Self::scan`] lists it)
    /// and read from its listing; a larger one is read from RocksDB, with
    /// the cache laid over it, and stops after `limit` entries.
    pub(crate) fn scan_range(
        &mut self,
        prefix: &[u8],
        below: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let in_range = |k: &[u8]| below.is_none_or(|b| k < b);
        let one_key = self.in_map_table(prefix) && map_prefix_len(prefix) == Some(prefix.len());
        if !one_key {
            let mut all = self.scan(prefix)?;
            all.retain(|(k, _)| in_range(k));
            all.truncate(limit);
            return Ok(all);
        }
        if !self.unlisted.contains(prefix) {
            let all = match self.listed.get(prefix) {
                Some(_) => Vec::new(),
                None => self.scan(prefix)?,
            };
            if let Some(listing) = self.listed.get(prefix) {
                return Ok(listing
                    .iter()
                    .take_while(|(k, _)| in_range(k))
                    .take(limit)
                    .map(|(k, v)| (k.to_vec(), v.to_vec()))
                    .collect());
            }
            self.note_unlisted(prefix);
            return Ok(all
                .into_iter()
                .take_while(|(k, _)| in_range(k))
                .take(limit)
                .collect());
        }
        self.scan_stored_range(prefix, true, below, limit)
    }

    /// Remembers that the map of `prefix` is too large to list, so that
    /// [`Self::scan_range`] reads it by range rather than whole.
    fn note_unlisted(&mut self, prefix: &[u8]) {
        if self.unlisted.len() >= UNLISTED_KEYS {
            self.unlisted.clear();
        }
        self.unlisted.insert(Bytes::from_slice(prefix));
    }

    /// The listing of the map `full_key` is an entry of, if it is listed.
    fn listing_of(&self, full_key: &[u8]) -> Option<&std::collections::BTreeMap<Bytes, Bytes>> {
        if self.listed.is_empty() || !self.in_map_table(full_key) {
            return None;
        }
        let len = map_prefix_len(full_key)?;
        self.listed.get(&full_key[..len])
    }

    /// Applies a write of `full_key` (`None`: a deletion) to the listing of
    /// its key's map, if that is listed.
    fn update_listing(&mut self, full_key: &[u8], value: Option<&[u8]>) {
        if !self.in_map_table(full_key) {
            return;
        }
        let Some(len) = map_prefix_len(full_key) else {
            return;
        };
        let Some(listing) = self.listed.get_mut(&full_key[..len]) else {
            return;
        };
        match value {
            Some(v) => {
                if listing
                    .insert(Bytes::from_slice(full_key), Bytes::from_slice(v))
                    .is_none()
                {
                    self.listed_entries += 1;
                }
                if listing.len() > LISTED_PER_KEY {
                    self.listed_entries -= listing.len();
                    self.listed.remove(&full_key[..len]);
                    self.note_unlisted(&full_key[..len]);
                }
            }
            None => {
                if listing.remove(full_key).is_some() {
                    self.listed_entries -= 1;
                }
            }
        }
        if self.listed_entries > LISTED_ENTRIES {
            self.listed.clear();
            self.listed_entries = 0;
        }
    }

    /// [`Self::scan`] without its cache: RocksDB's entries under `prefix`
    /// with the write-back cache laid over them.
    fn scan_stored(&mut self, prefix: &[u8], map_table: bool) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.scan_stored_range(prefix, map_table, None, usize::MAX)
    }

    /// [`Self::scan_stored`] of the entries below `below`, stopping after
    /// the first `limit`.
    fn scan_stored_range(
        &mut self,
        prefix: &[u8],
        map_table: bool,
        below: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let in_range = |k: &[u8]| k.starts_with(prefix) && below.is_none_or(|b| k < b);
        if map_table && !self.is_indexed(prefix) {
            // The table's first scan: index its cached puts once; writes
            // keep the index from now on.
            let table = usize::from(prefix[2]);
            for (k, c) in &self.cache {
                if c.dirty && c.value.is_some() && k.get(2) == Some(&prefix[2]) {
                    self.dirty_maps.insert(k.clone());
                }
            }
            if self.indexed.len() <= table {
                self.indexed.resize(table + 1, false);
            }
            self.indexed[table] = true;
        }
        let mut found: std::collections::BTreeMap<Vec<u8>, Vec<u8>> = Default::default();
        let mut live = 0;
        let db = self.backend.db();
        for item in db.iterator_cf(
            self.backend.cf(VALUES),
            rocksdb::IteratorMode::From(prefix, rocksdb::Direction::Forward),
        ) {
            let (k, v) = item.map_err(|e| {
                WeirError::state(format!("scan {}", self.backend.path().display()), e)
            })?;
            if !in_range(&k) || live == limit {
                break;
            }
            // A stored entry the cache has changed: its cached value (none
            // if deleted) wins. The first `limit` live stored entries and
            // the first `limit` cached puts hold the first `limit` of all.
            match self.cache.get(&*k).filter(|c| c.dirty) {
                Some(Cached { value: Some(v), .. }) => found.insert(k.to_vec(), v.to_vec()),
                Some(Cached { value: None, .. }) => continue,
                None => found.insert(k.to_vec(), v.to_vec()),
            };
            live += 1;
        }
        // Entries put since the last write-back, which RocksDB may not hold
        // yet: a map table's through its index, another's (an interactive
        // query's rare scan) by walking the cache.
        let put = |c: &Cached| match c {
            Cached {
                value: Some(v),
                dirty: true,
            } => Some(v.to_vec()),
            _ => None,
        };
        if map_table {
            use std::ops::Bound;
            let keys = self
                .dirty_maps
                .range::<[u8], _>((Bound::Included(prefix), Bound::Unbounded))
                .take_while(|k| in_range(k))
                .filter_map(|k| Some((k, self.cache.get(k.as_slice()).and_then(put)?)))
                .take(limit);
            for (k, v) in keys {
                found.insert(k.to_vec(), v);
            }
        } else {
            for (k, c) in self.cache.iter().filter(|(k, _)| in_range(k)) {
                if let Some(v) = put(c) {
                    found.insert(k.to_vec(), v);
                }
            }
        }
        Ok(found.into_iter().take(limit).collect())
    }

    /// What this store holds in memory: its RocksDB instance's figures
    /// and the cache in front of it (the hash table's slots, with keys and
    /// values up to 24 bytes inline, and the listed maps' entries; longer
    /// keys and values are held apart and not counted).
    pub fn memory(&self) -> crate::observe::memory::StoreMemory {
        use std::mem::size_of;
        // A slot and its control byte.
        let slot = size_of::<(Bytes, Cached)>() + 1;
        // A listed entry: its key and value, and about a third of a
        // B-tree node's overhead.
        let listed = 2 * size_of::<Bytes>() + 16;
        let rocks = self.backend.memory();
        crate::observe::memory::StoreMemory {
            memtables: rocks.memtables,
            block_cache: rocks.block_cache,
            table_readers: rocks.table_readers,
            state_cache: (self.cache.capacity() * slot + self.listed_entries * listed) as u64,
        }
    }

    /// Holds (true) or allows again (false) the write-back that the cache
    /// starts when it is full or holds [`WRITE_BACK_AT`] dirty entries.
    ///
    /// Held from a barrier's alignment until its snapshot is taken: an
    /// operator writes what it kept in memory into the store at the barrier
    /// (an aggregate's hot accumulators, tens of thousands of entries), and
    /// a write-back it started would put a whole batch into RocksDB inside
    /// the checkpoint's pause (BENCHMARKS.md, #21: 65,536 entries, most of
    /// the pause's p99). Held, those entries go into the snapshot's changes
    /// file instead, and the task writes them back right after its ack
    /// ([`KeyedStore::write_back_if_due`], through
    /// `Chain::write_back_after_ack`), outside the pause. Not at the next
    /// write: an aggregate writes into its store only at barriers, so that
    /// write would be held again, and the cache would grow without bound.
    /// The cache briefly holds up to the operator's own in-memory bound
    /// more dirty entries.
    pub fn hold_write_back(&mut self, hold: bool) {
        self.holding_write_back = hold;
    }

    /// Writes every dirty entry to RocksDB; the cache keeps what fits.
    ///
    /// Entries stay dirty until RocksDB took the batch: after a failed
    /// write they are still in the next snapshot's changes file and in the
    /// next write-back, not lost.
    pub fn write_back(&mut self) -> Result<()> {
        self.settle(true)?;
        if self.dirty > 0 {
            let cf = self.backend.cf(VALUES);
            let mut batch = WriteBatch::default();
            for (k, c) in self.cache.iter().filter(|(_, c)| c.dirty) {
                match &c.value {
                    Some(v) => batch.put_cf(cf, k, v),
                    None => batch.delete_cf(cf, k),
                }
            }
            self.backend.write(batch)?;
            for c in self.cache.values_mut() {
                c.dirty = false;
            }
            self.dirty = 0;
            self.dirty_maps.clear();
        }
        if self.cache.len() > self.cache_limit {
            self.cache.clear();
        }
        Ok(())
    }

    /// The SST files of the store's RocksDB now: the folder they are in,
    /// and each one's name and size (`StateBackend::live_sst_files`).
    pub fn live_sst_files(&self) -> Result<(PathBuf, Vec<(String, u64)>)> {
        Ok((
            self.backend.dir().to_path_buf(),
            self.backend.live_sst_files()?,
        ))
    }

    /// Everything written back, then every SST file rewritten
    /// (`StateBackend::compact_all`).
    pub fn compact(&mut self) -> Result<()> {
        self.write_back()?;
        self.timers.write_back(&self.backend)?;
        self.backend.compact_all()
    }

    /// Group mode: snapshots are SST files only, each uploaded once (see
    /// `StateBackend::flush_on_snapshot`).
    pub fn set_flush_on_snapshot(&mut self, flush: bool) {
        self.backend.flush_on_snapshot = flush;
    }

    pub(crate) fn timers(&mut self) -> &mut TimerService {
        &mut self.timers
    }

    /// The RocksDB checkpoint plus a changes file with what the cache and
    /// the timers hold but RocksDB does not yet (nothing is written into
    /// RocksDB at the barrier), taken on this thread: group mode's, and
    /// tests'. Single mode's tasks take the asynchronous part on another
    /// thread ([`Self::begin_snapshot`]).
    pub fn snapshot(&mut self, target: &Path) -> Result<Snapshot> {
        self.apply_staged()?;
        if self.backend.flush_on_snapshot {
            // Everything into RocksDB and then into SST files: the changes
            // file stays empty (see `StateBackend::flush_on_snapshot`).
            self.write_back()?;
            self.timers.write_back(&self.backend)?;
        }
        let snapshot = self.prepare_snapshot(target)?.run();
        self.timers_write_back_if_due();
        snapshot
    }

    /// The synchronous part of a snapshot into `target`, at the barrier:
    /// what changed since the last snapshot (the cache's dirty entries and
    /// the timers' changes) is copied into a changes buffer, and the rest
    /// runs on a thread of its own (`crate::state::snapshot_job`), whose
    /// snapshot comes on the receiver. Nothing is written into RocksDB
    /// until that job is done. The last snapshot's job must be done
    /// first: this waits for it.
    pub fn begin_snapshot(&mut self, target: &Path) -> Result<Receiver<Result<Snapshot>>> {
        let job = self.prepare_snapshot(target)?;
        let (snapshot, running) = job.spawn()?;
        self.job = Some(running);
        Ok(snapshot)
    }

    /// At a barrier, before the snapshot: `value` (None: a delete) at
    /// `full_key` goes into the coming snapshot's changes directly, and
    /// into the cache only once the snapshot's copy is taken
    /// ([`Self::apply_staged`]). For what an operator keeps in memory and
    /// writes at every barrier (an aggregate's hot accumulators, hundreds
    /// of thousands at 10 M keys): the pause encodes each once, in order,
    /// instead of putting it into the cache's hash table and then copying
    /// it out (BENCHMARKS.md, #43 target 1). Nothing may read the store
    /// between this and the apply: the caller applies before the task
    /// handles its next element.
    pub(crate) fn stage_for_snapshot(&mut self, full_key: &[u8], value: Option<&[u8]>) {
        if self.staged.entries() == 0 {
            self.staged = ChangesWriter::with_capacity(self.staged_bytes);
        }
        self.staged.entry(changes::VALUES, full_key, value);
    }

    /// Puts what [`Self::stage_for_snapshot`] staged into the cache, as
    /// writes (dirty, for the next write-back): after the snapshot's copy,
    /// whether or not the snapshot could be taken.
    pub fn apply_staged(&mut self) -> Result<()> {
        if let Some(shared) = self.staged_in_snapshot.take() {
            self.apply(&shared)?;
        }
        let unsnapshotted = std::mem::take(&mut self.staged);
        self.apply(&unsnapshotted)
    }

    /// Writes `staged`'s entries into the cache.
    fn apply(&mut self, staged: &ChangesWriter) -> Result<()> {
        if staged.entries() == 0 {
            return Ok(());
        }
        let started = std::time::Instant::now();
        let mut result = Ok(());
        staged.for_each(|_, key, value| {
            if result.is_ok() {
                result = self.write_slice(key, value);
            }
        });
        // After the pause, before the task's next element, which it
        // delays: `weir-bench checkpoint-cost` reads it from the log.
        tracing::debug!(
            store = %self.uid,
            apply_us = started.elapsed().as_micros() as u64,
            applied = staged.entries(),
            "staged values applied"
        );
        result
    }

    fn prepare_snapshot(&mut self, target: &Path) -> Result<SnapshotJob> {
        self.settle(true)?;
        if let Some(previous) = self.staged_in_snapshot.take() {
            // The last snapshot's staged values were never applied (no
            // caller does that): into the cache before this copy. This
            // barrier's go into the snapshot as staged.
            self.apply(&previous)?;
        }
        let started = std::time::Instant::now();
        let mut out = ChangesWriter::with_capacity(self.changes_bytes);
        for (k, c) in self.cache.iter().filter(|(_, c)| c.dirty) {
            out.entry(changes::VALUES, k, c.value.as_deref());
        }
        let changes = out.entries();
        // After the cache's (the job writes them second): an entry in both
        // is newer here, and a restore applies the file in order.
        let staged = std::sync::Arc::new(std::mem::take(&mut self.staged));
        self.staged_bytes = staged.size_bytes();
        self.staged_in_snapshot = Some(std::sync::Arc::clone(&staged));
        self.timers.collect_dirty(&mut out);
        self.changes_bytes = out.size_bytes();
        // The synchronous part of a snapshot's pause, which `weir-bench
        // checkpoint-cost` reads from the log (the rest is logged by the
        // job, as "state snapshot written").
        tracing::debug!(
            store = %self.uid,
            copy_us = started.elapsed().as_micros() as u64,
            changes,
            staged = staged.entries(),
            timer_changes = out.entries() - changes,
            changes_bytes = out.size_bytes() + staged.size_bytes(),
            "state snapshot"
        );
        Ok(SnapshotJob {
            store: self.uid.clone(),
            backend: self.backend.share(),
            target: target.to_path_buf(),
            changes: out,
            staged,
        })
    }
}

impl Drop for KeyedStore {
    /// A running job holds the RocksDB instance open: the next attempt
    /// reopens it at the same path, so the store waits for the job.
    fn drop(&mut self) {
        if let Some(job) = self.job.take() {
            job.is_done(true);
        }
    }
}

/// `key group | table | key length | key`: the prefix of a key's entries.
pub fn key_prefix(key_group: u32, table: Table, key: &[u8], out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&(key_group as u16).to_be_bytes());
    out.push(table.0);
    put_varint(key.len() as u64, out);
    out.extend_from_slice(key);
}

/// A timer's payload: `key group | key length | key | tag`.
pub fn timer_payload(key_group: u32, key: &[u8], tag: &[u8]) -> Vec<u8> {
    let mut p = Vec::with_capacity(key.len() + tag.len() + 4);
    p.extend_from_slice(&(key_group as u16).to_be_bytes());
    put_varint(key.len() as u64, &mut p);
    p.extend_from_slice(key);
    p.extend_from_slice(tag);
    p
}

/// The key group, key and tag of a timer payload.
pub fn split_timer_payload(p: &[u8]) -> Option<(u32, &[u8], &[u8])> {
    let (kg, mut rest) = p.split_first_chunk::<2>()?;
    let n = super::codec::get_varint(&mut rest).ok()? as usize;
    if rest.len() < n {
        return None;
    }
    let (key, tag) = rest.split_at(n);
    Some((u32::from(u16::from_be_bytes(*kg)), key, tag))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timer_payloads_split_back() {
        let p = timer_payload(7, b"key", b"tag");
        assert_eq!(split_timer_payload(&p), Some((7, &b"key"[..], &b"tag"[..])));
        assert_eq!(split_timer_payload(&[0]), None);
    }

    #[test]
    fn tables_survive_snapshot_and_restore_with_dirty_entries_in_the_changes_file() {
        let dir = tempfile::tempdir().unwrap();
        let tables = vec![
            TableSpec::value::<i64>("count"),
            TableSpec::map::<i64>("per"),
        ];
        let mut s =
            KeyedStore::open_empty("op", tables.clone(), &dir.path().join("db"), 1000).unwrap();
        let mut k = Vec::new();
        key_prefix(3, Table(0), b"a", &mut k);
        let mut bytes = Vec::new();
        42i64.encode(&mut bytes);
        s.write(&k, Some(bytes)).unwrap();
        let mut m = Vec::new();
        key_prefix(3, Table(1), b"a", &mut m);
        for (mk, v) in [(b"x", 1i64), (b"y", 2)] {
            let mut full = m.clone();
            full.extend_from_slice(mk);
            let mut b = Vec::new();
            v.encode(&mut b);
            s.write(&full, Some(b)).unwrap();
        }
        s.timers().register(100, timer_payload(3, b"a", b"t"));
        std::fs::create_dir_all(dir.path().join("chk")).unwrap();
        let snap = s.snapshot(&dir.path().join("chk/op-0")).unwrap();
        assert!(snap.files.iter().any(|f| f.name == changes::FILE));
        drop(s);
        let handle = StateHandle {
            uid: "op".into(),
            subtask: 0,
            key_groups: (0, 8),
            path: "op-0".into(),
            size_bytes: snap.size_bytes,
            files: snap.files,
        };
        let mut r = KeyedStore::restore(
            "op",
            tables,
            &dir.path().join("db2"),
            &dir.path().join("chk"),
            &[&handle],
            (0, 8),
            1000,
        )
        .unwrap();
        let got = r.read(&k).unwrap().unwrap();
        assert_eq!(r.decode::<i64>(&k, &got).unwrap(), 42);
        assert_eq!(r.scan(&m).unwrap().len(), 2);
        assert_eq!(r.timers().pop_due(100).len(), 1);
        let e = r.decode::<i64>(&k, b"abc").unwrap_err().to_string();
        assert!(e.contains("\"op\"") && e.contains("i64"), "{e}");
    }

    /// Random puts, deletes (through both write paths), write-backs, reads
    /// and scans against a model: a scan of one key's prefix, in a map
    /// table and in a value table, returns exactly the model's live
    /// entries, in order, and a read or a read-modify-write sees the
    /// model's value, whether the cache, a listed key's map or RocksDB
    /// answers.
    #[test]
    fn a_scan_sees_the_cache_over_rocksdb_as_a_model_map_does() {
        let dir = tempfile::tempdir().unwrap();
        let tables = vec![TableSpec::map::<i64>("per"), TableSpec::value::<i64>("v")];
        // A small cache limit: write-backs also come from eviction.
        let mut s = KeyedStore::open_empty("op", tables, &dir.path().join("db"), 12).unwrap();
        let mut model: std::collections::BTreeMap<Vec<u8>, Vec<u8>> = Default::default();
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        let prefix = |table: u8, key: u8| {
            let mut p = Vec::new();
            key_prefix(1, Table(table), &[b'k', key], &mut p);
            p
        };
        let mut buf = Vec::new();
        for step in 0..4000u64 {
            let (table, key) = (next(2) as u8, next(3) as u8);
            let mut full = prefix(table, key);
            full.push(next(6) as u8);
            match next(11) {
                0..=3 => {
                    let v = step.to_be_bytes().to_vec();
                    s.write(&full, Some(v.clone())).unwrap();
                    model.insert(full, v);
                }
                4 | 5 => {
                    s.write(&full, None).unwrap();
                    model.remove(&full);
                }
                6 => {
                    let put = next(2) == 0;
                    let v = step.to_be_bytes().to_vec();
                    let was = model.get(&full).cloned();
                    let w = s
                        .update_slice(&full, &mut buf, |existing, b| {
                            assert_eq!(existing.map(<[u8]>::to_vec), was, "step {step}");
                            b.extend_from_slice(&v);
                            Ok(if put { Write::Put } else { Write::Delete })
                        })
                        .map_err(|_| "update")
                        .unwrap();
                    assert_eq!(w == Write::Put, put);
                    if put {
                        model.insert(full, v);
                    } else {
                        model.remove(&full);
                    }
                }
                7 => {
                    s.write_back().unwrap();
                    if next(2) == 0 {
                        // Reads and scans must then find RocksDB's entries.
                        s.cache.clear();
                    }
                }
                8 => {
                    let got = s.read(&full).unwrap();
                    assert_eq!(got.as_ref(), model.get(&full), "step {step}");
                }
                _ => {
                    let p = prefix(table, key);
                    let want: Vec<(Vec<u8>, Vec<u8>)> = model
                        .range(p.clone()..)
                        .take_while(|(k, _)| k.starts_with(&p))
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect();
                    assert_eq!(s.scan(&p).unwrap(), want, "step {step}, table {table}");
                    // The first entries below a bound, read from the
                    // listing or (a map too large to list) by range.
                    let below = [&p[..], &[next(7) as u8]].concat();
                    let limit = next(4) as usize;
                    if next(2) == 0 {
                        if let Some(listing) = s.listed.remove(&p[..]) {
                            s.listed_entries -= listing.len();
                        }
                        s.note_unlisted(&p);
                    }
                    let first: Vec<_> = want
                        .iter()
                        .filter(|(k, _)| *k < below)
                        .take(limit)
                        .cloned()
                        .collect();
                    assert_eq!(
                        s.scan_range(&p, Some(&below), limit).unwrap(),
                        first,
                        "step {step}, table {table}, below {below:?}, limit {limit}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_scanned_key_is_listed_and_its_writes_keep_the_listing_whole() {
        let dir = tempfile::tempdir().unwrap();
        let tables = vec![TableSpec::map::<i64>("per")];
        let mut s = KeyedStore::open_empty("op", tables, &dir.path().join("db"), 100).unwrap();
        let (mut a, mut b) = (Vec::new(), Vec::new());
        key_prefix(1, Table(0), b"a", &mut a);
        key_prefix(1, Table(0), b"ab", &mut b);
        let entry = |p: &[u8], mk: u8| [p, &[mk]].concat();
        s.write(&entry(&a, 1), Some(vec![1])).unwrap();
        s.write_back().unwrap();
        // An entry only RocksDB holds, so that a read that missed the
        // listing would still find it: the listing must answer first.
        s.cache.clear();
        assert_eq!(s.scan(&a).unwrap().len(), 1);
        assert!(s.listed.contains_key(&a[..]), "the scanned key is listed");
        s.write(&entry(&b, 1), Some(vec![2])).unwrap();
        assert_eq!(s.listed[&a[..]].len(), 1, "another key's write leaves it");
        s.write(&entry(&a, 2), Some(vec![3])).unwrap();
        assert_eq!(s.listed[&a[..]].len(), 2, "a write under the key joins it");
        s.write(&entry(&a, 1), None).unwrap();
        s.write_back().unwrap();
        s.cache.clear();
        assert_eq!(s.scan(&a).unwrap(), vec![(entry(&a, 2), vec![3])]);
        assert_eq!(s.read(&entry(&a, 1)).unwrap(), None);
        assert_eq!(s.read(&entry(&a, 2)).unwrap(), Some(vec![3]));
        assert_eq!(s.listed_entries, 1);
        // A prefix of several keys is answered but never listed.
        assert_eq!(s.scan(&a[..3]).unwrap().len(), 2);
        assert!(!s.listed.contains_key(&a[..3]));
        // A key that grows past LISTED_PER_KEY entries stops being listed,
        // and is not listed again by its next scan; scans stay whole.
        for i in 0..LISTED_PER_KEY as u32 {
            let full = [&a[..], &i.to_be_bytes()].concat();
            s.write(&full, Some(vec![4])).unwrap();
        }
        assert!(!s.listed.contains_key(&a[..]));
        assert_eq!(s.listed_entries, 0);
        assert_eq!(s.scan(&a).unwrap().len(), LISTED_PER_KEY + 1);
        assert!(!s.listed.contains_key(&a[..]));
    }

    #[test]
    fn a_read_modify_write_sees_what_was_there_and_writes_what_it_decides() {
        use crate::dataflow::operator::Context;
        let dir = tempfile::tempdir().unwrap();
        let tables = vec![TableSpec::value::<i64>("count")];
        // A cache of one entry: the second key is read from RocksDB and
        // written back at once.
        let store = KeyedStore::open_empty("op", tables, &dir.path().join("db"), 1).unwrap();
        let mut ctx = Context::new("op", 0, Some(store));
        let bump = |ctx: &mut Context, key: &[u8]| {
            ctx.set_key(1, key);
            let mut v = 0i64;
            ctx.update(Table(0), &mut v, |existed, v| {
                *v = if existed { *v + 1 } else { 1 };
                Ok(if *v == 3 {
                    (Write::Delete, (existed, *v))
                } else {
                    (Write::Put, (existed, *v))
                })
            })
            .unwrap()
        };
        assert_eq!(bump(&mut ctx, b"a"), (false, 1));
        assert_eq!(bump(&mut ctx, b"b"), (false, 1));
        assert_eq!(bump(&mut ctx, b"a"), (true, 2));
        assert_eq!(bump(&mut ctx, b"b"), (true, 2));
        assert_eq!(bump(&mut ctx, b"a"), (true, 3), "deleted at 3");
        assert_eq!(bump(&mut ctx, b"a"), (false, 1), "gone after the delete");
        assert_eq!(ctx.get::<i64>(Table(0)).unwrap(), Some(1));
        ctx.set_key(1, b"b");
        assert_eq!(ctx.get::<i64>(Table(0)).unwrap(), Some(2));

        // Keep writes nothing; the operator's refusal leaves the entry.
        let mut v = 0i64;
        let kept = ctx
            .update(Table(0), &mut v, |_, v| {
                *v = 99;
                Ok((Write::Keep, ()))
            })
            .map(|()| v);
        assert_eq!(kept.unwrap(), 99);
        let e = ctx
            .update(Table(0), &mut v, |_, _| Err::<(Write, ()), _>("no".into()))
            .unwrap_err()
            .to_string();
        assert!(e.contains("no"), "{e}");
        assert_eq!(ctx.get::<i64>(Table(0)).unwrap(), Some(2));

        // A value that is not the codec's is reported with its key.
        let mut k = Vec::new();
        key_prefix(1, Table(0), b"c", &mut k);
        ctx.store_mut()
            .unwrap()
            .write(&k, Some(b"abc".to_vec()))
            .unwrap();
        ctx.set_key(1, b"c");
        let e = ctx
            .update(Table(0), &mut v, |_, _| Ok((Write::Put, ())))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("\"op\"") && e.contains("i64") && e.contains('c'),
            "{e}"
        );
    }

    #[test]
    fn watermarks_saved_per_key_group_come_back_after_a_restore_at_another_parallelism() {
        use crate::dataflow::operator::Context;
        let dir = tempfile::tempdir().unwrap();
        let tables = vec![TableSpec::value::<i64>("count")];
        let store =
            KeyedStore::open_empty("op", tables.clone(), &dir.path().join("db"), 1000).unwrap();
        let mut ctx = Context::new("op", 0, Some(store));
        ctx.set_watermark(5_000);
        ctx.save_watermarks((0, 4)).unwrap();
        std::fs::create_dir_all(dir.path().join("chk")).unwrap();
        let snap = ctx
            .store_mut()
            .unwrap()
            .snapshot(&dir.path().join("chk/op-0"))
            .unwrap();
        let handle = StateHandle {
            uid: "op".into(),
            subtask: 0,
            key_groups: (0, 4),
            path: "op-0".into(),
            size_bytes: snap.size_bytes,
            files: snap.files,
        };
        // Restored as key groups 2..6: only 2 and 3 were saved.
        let r = KeyedStore::restore(
            "op",
            tables,
            &dir.path().join("db2"),
            &dir.path().join("chk"),
            &[&handle],
            (2, 6),
            1000,
        )
        .unwrap();
        let mut ctx = Context::new("op", 0, Some(r));
        ctx.load_watermarks((2, 6)).unwrap();
        ctx.set_key(3, b"k");
        assert_eq!(
            ctx.watermark(),
            5_000,
            "the saved watermark judges lateness"
        );
        ctx.set_key(4, b"k");
        assert_eq!(ctx.watermark(), crate::time::MIN_WATERMARK, "never saved");
        ctx.set_watermark(6_000);
        ctx.set_key(3, b"k");
        assert_eq!(ctx.watermark(), 6_000, "the live watermark once it is past");
    }

    /// The snapshot sequence and restores, through the tables' store (one
    /// `i64` count per key, key groups of 8).
    mod snapshots {
        use super::*;
        use crate::checkpoint::CheckpointStore;
        use crate::state::key_groups::{key_group, range_for_subtask};
        use std::fs;

        fn tables() -> Vec<TableSpec> {
            vec![TableSpec::value::<i64>("count")]
        }

        fn open(path: &Path, cache: usize) -> KeyedStore {
            KeyedStore::open_empty("wc", tables(), path, cache).unwrap()
        }

        fn full(key: &str) -> Vec<u8> {
            let mut k = Vec::new();
            key_prefix(
                key_group(key.as_bytes(), 8),
                Table(0),
                key.as_bytes(),
                &mut k,
            );
            k
        }

        fn count(s: &mut KeyedStore, key: &str) -> u64 {
            let k = full(key);
            s.read_with(&k, |s, b| s.decode::<i64>(&k, b))
                .unwrap()
                .map_or(0, |n| n as u64)
        }

        fn add(s: &mut KeyedStore, key: &str, n: u32) {
            for _ in 0..n {
                let now = count(s, key) as i64 + 1;
                s.write_slice(&full(key), Some(&now.to_le_bytes())).unwrap();
            }
        }

        /// Keys `w0`..`w499`, key `wi` counted to `i % 7 + 1`.
        fn add_500(s: &mut KeyedStore) {
            for i in 0..500u32 {
                add(s, &format!("w{i}"), i % 7 + 1);
            }
        }

        /// What [`add_500`] wrote, every key.
        fn assert_500(r: &mut KeyedStore) {
            for i in 0..500u32 {
                assert_eq!(count(r, &format!("w{i}")), u64::from(i % 7 + 1), "w{i}");
            }
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

        fn restore_whole(dir: &Path, live: &str, cache: usize) -> KeyedStore {
            let handle = whole_handle();
            KeyedStore::restore(
                "wc",
                tables(),
                &dir.join(live),
                &dir.join("chk"),
                &[&handle],
                (0, 8),
                cache,
            )
            .unwrap()
        }

        fn snap_dir(dir: &Path) -> std::path::PathBuf {
            let snap = dir.join("chk/state/wc/0");
            fs::create_dir_all(snap.parent().unwrap()).unwrap();
            snap
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
        fn snapshot_and_restore_keep_exactly_the_snapshot() {
            let tmp = tempfile::tempdir().unwrap();
            let mut s = open(&tmp.path().join("live"), 2);
            add(&mut s, "a", 3);
            add(&mut s, "b", 2);
            add(&mut s, "c", 1); // evicts through the small cache
            s.snapshot(&snap_dir(tmp.path())).unwrap();
            add(&mut s, "a", 10); // after the snapshot: must not be restored
            s.write_back().unwrap();
            drop(s);
            let mut r = restore_whole(tmp.path(), "live", 2);
            assert_eq!(
                (count(&mut r, "a"), count(&mut r, "b"), count(&mut r, "c")),
                (3, 2, 1)
            );
            // The restored instance writes on without touching the snapshot.
            add(&mut r, "a", 1);
            r.write_back().unwrap();
            drop(r);
            let mut again = restore_whole(tmp.path(), "again", 2);
            assert_eq!(count(&mut again, "a"), 3);
        }

        #[test]
        fn a_snapshot_copies_the_wal_instead_of_flushing_memtables() {
            let tmp = tempfile::tempdir().unwrap();
            let live = tmp.path().join("live");
            let mut s = open(&live, 1000);
            add_500(&mut s);
            s.write_back().unwrap();
            let ssts_before = files_with(&live, "sst");
            let snap = snap_dir(tmp.path());
            s.snapshot(&snap).unwrap();
            // No flush at the barrier: the live instance has the same SSTs,
            // and the snapshot carries the writes in a copy of the WAL.
            assert_eq!(files_with(&live, "sst"), ssts_before);
            let wal = files_with(&snap, "log");
            assert!(
                wal.iter().any(|(_, len)| *len > 0),
                "no WAL in the snapshot: {wal:?}"
            );
            add(&mut s, "w1", 100); // after the snapshot: must not be restored
            s.write_back().unwrap();
            drop(s);
            let mut r = restore_whole(tmp.path(), "restored", 2);
            assert_500(&mut r);
        }

        #[test]
        fn a_flushing_snapshot_is_sst_files_and_an_empty_changes_file() {
            // Group mode uploads snapshots: each SST once, so nothing may
            // ride in a WAL copy or a changes file uploaded each time.
            let tmp = tempfile::tempdir().unwrap();
            let mut s = open(&tmp.path().join("live"), 1000);
            s.set_flush_on_snapshot(true);
            add_500(&mut s);
            let snap = snap_dir(tmp.path());
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
            let mut r = restore_whole(tmp.path(), "restored", 2);
            assert_500(&mut r);
        }

        /// The asynchronous part of a snapshot runs while the task writes
        /// on: RocksDB takes nothing from the task until the job is done
        /// (a write-back that falls due meanwhile waits), so the snapshot
        /// holds the barrier's state; the task reads its newest values
        /// throughout. Without the wait, the key added after the barrier
        /// would be in the checkpoint and come back after a restore.
        #[cfg(feature = "failpoints")]
        #[test]
        fn an_asynchronous_snapshot_holds_the_barrier_while_the_task_writes_on() {
            let tmp = tempfile::tempdir().unwrap();
            let mut s = open(&tmp.path().join("live"), 4);
            // As at a barrier: the write-back held while the operator
            // writes what it kept, so ten entries are dirty.
            s.hold_write_back(true);
            for i in 0..10 {
                add(&mut s, &format!("k{i}"), 1);
            }
            s.hold_write_back(false);
            fail::cfg("snapshot-job-before-checkpoint", "sleep(300)").unwrap();
            let snapshot = s.begin_snapshot(&snap_dir(tmp.path())).unwrap();
            // While the job runs: the task updates, deletes and adds, past
            // the cache's bound of 4.
            add(&mut s, "k0", 5);
            s.write_slice(&full("k1"), None).unwrap();
            add(&mut s, "late", 1);
            assert!(s.job.is_some(), "the job sleeps before its checkpoint");
            let in_db = |s: &KeyedStore, key: &str| {
                s.backend
                    .db()
                    .get_cf(s.backend.cf(VALUES), full(key))
                    .unwrap()
            };
            for key in ["k0", "k1", "k9", "late"] {
                assert_eq!(
                    in_db(&s, key),
                    None,
                    "{key} reached RocksDB while the job ran"
                );
            }
            assert_eq!(
                (
                    count(&mut s, "k0"),
                    count(&mut s, "k1"),
                    count(&mut s, "k9")
                ),
                (6, 0, 1)
            );
            let snapshot = snapshot.recv().unwrap().unwrap();
            fail::remove("snapshot-job-before-checkpoint");
            assert!(snapshot.files.iter().any(|f| f.name == changes::FILE));
            s.write_back().unwrap();
            assert_eq!(in_db(&s, "k1"), None);
            assert!(
                in_db(&s, "late").is_some(),
                "written back once the job was done"
            );
            drop(s);
            let mut r = restore_whole(tmp.path(), "restored", 4);
            for i in 0..10 {
                assert_eq!(count(&mut r, &format!("k{i}")), 1, "k{i} as at the barrier");
            }
            assert_eq!(count(&mut r, "late"), 0);
        }

        /// What an operator stages at a barrier is in that snapshot, after
        /// (so over) an older dirty value of the same key, and in the
        /// store once applied, dirty, for the next write-back.
        #[test]
        fn staged_values_are_in_the_snapshot_and_then_in_the_store() {
            let tmp = tempfile::tempdir().unwrap();
            let mut s = open(&tmp.path().join("live"), 1000);
            add(&mut s, "a", 1);
            add(&mut s, "b", 2);
            s.stage_for_snapshot(&full("a"), Some(&7i64.to_le_bytes()));
            s.stage_for_snapshot(&full("b"), None);
            s.stage_for_snapshot(&full("c"), Some(&3i64.to_le_bytes()));
            let snapshot = s.begin_snapshot(&snap_dir(tmp.path())).unwrap();
            snapshot.recv().unwrap().unwrap();
            s.apply_staged().unwrap();
            assert_eq!(
                (count(&mut s, "a"), count(&mut s, "b"), count(&mut s, "c")),
                (7, 0, 3)
            );
            assert!(
                s.staged.entries() == 0 && s.staged_in_snapshot.is_none(),
                "applied once"
            );
            s.write_back().unwrap();
            assert_eq!(
                s.in_rocksdb(&full("c"))
                    .map(|v| i64::from_le_bytes(v.try_into().unwrap())),
                Some(3)
            );
            drop(s);
            let mut r = restore_whole(tmp.path(), "restored", 1000);
            assert_eq!(
                (count(&mut r, "a"), count(&mut r, "b"), count(&mut r, "c")),
                (7, 0, 3)
            );
        }

        #[test]
        fn changes_not_yet_written_back_are_in_the_snapshot_and_not_in_rocksdb() {
            let tmp = tempfile::tempdir().unwrap();
            let mut s = open(&tmp.path().join("live"), 1000);
            add(&mut s, "kept", 2);
            add(&mut s, "gone", 1);
            s.write_back().unwrap();
            // Changes after the last write-back: an update, a delete, a new
            // key and a timer.
            add(&mut s, "kept", 3);
            s.write_slice(&full("gone"), None).unwrap();
            add(&mut s, "new", 1);
            s.timers()
                .register(100, timer_payload(key_group(b"new", 8), b"new", b"t"));
            let snapshot = s.snapshot(&snap_dir(tmp.path())).unwrap();
            assert!(snapshot.files.iter().any(|f| f.name == changes::FILE));
            // Nothing was written into RocksDB at the barrier.
            let stored = |s: &mut KeyedStore, key: &str| {
                s.in_rocksdb(&full(key))
                    .map(|v| i64::from_le_bytes(v.try_into().unwrap()))
            };
            assert_eq!(stored(&mut s, "kept"), Some(2));
            assert_eq!(stored(&mut s, "gone"), Some(1));
            assert_eq!(stored(&mut s, "new"), None);
            // The live instance still sees its own changes.
            assert_eq!(
                (
                    count(&mut s, "kept"),
                    count(&mut s, "gone"),
                    count(&mut s, "new")
                ),
                (5, 0, 1)
            );
            drop(s);
            let mut r = restore_whole(tmp.path(), "restored", 1000);
            assert_eq!(
                (
                    count(&mut r, "kept"),
                    count(&mut r, "gone"),
                    count(&mut r, "new")
                ),
                (5, 0, 1)
            );
            assert_eq!(r.timers().next_time(), Some(100));
            assert!(
                !r.path().join(changes::FILE).exists(),
                "the applied changes file is not left in the live instance"
            );
        }

        #[test]
        fn restore_at_another_parallelism_splits_and_merges_key_groups() {
            let tmp = tempfile::tempdir().unwrap();
            let store = CheckpointStore::new(tmp.path().join("chk"));
            let words: Vec<String> = (0..200).map(|i| format!("w{i}")).collect();
            let mut handles = Vec::new();
            // Two subtasks at parallelism 2, each holding only its groups.
            for sub in 0..2u32 {
                let range = range_for_subtask(sub, 2, 8);
                let mut s = open(&tmp.path().join(format!("live{sub}")), 1000);
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
                    let mut r = KeyedStore::restore(
                        "wc",
                        tables(),
                        &tmp.path().join(format!("p{p}-{sub}")),
                        store.root(),
                        &refs,
                        range,
                        1000,
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
                            count(&mut r, w),
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
            let mut s = open(&tmp.path().join("live"), 10);
            let kg = key_group(b"poison", 8);
            s.write_slice(&full("poison"), Some(b"not 8 bytes!"))
                .unwrap();
            s.write_back().unwrap();
            let k = full("poison");
            let e = s.read_with(&k, |s, b| s.decode::<i64>(&k, b)).unwrap_err();
            assert!(e.is_fatal(), "a restart would hit it again: {e}");
            let text = e.to_string();
            assert!(text.contains(&format!("key group {kg}")), "{text}");
            assert!(text.contains("poison"), "{text}");
            assert!(text.contains("not 12"), "{text}");
            assert!(matches!(e, WeirError::CorruptState { .. }), "{e}");
        }

        #[test]
        fn a_key_shorter_than_its_prefix_fails_a_rescaling_restore() {
            let tmp = tempfile::tempdir().unwrap();
            let mut s = open(&tmp.path().join("live"), 10);
            s.write_slice(b"\x01", Some(b"x")).unwrap();
            s.write_back().unwrap();
            s.snapshot(&snap_dir(tmp.path())).unwrap();
            drop(s);
            // Another range than the snapshot's: the keys are read one by one.
            let handle = whole_handle();
            let e = KeyedStore::restore(
                "wc",
                tables(),
                &tmp.path().join("r"),
                &tmp.path().join("chk"),
                &[&handle],
                (0, 4),
                10,
            )
            .err()
            .expect("refused");
            assert!(
                e.to_string().contains("shorter than its key-group prefix"),
                "{e}"
            );
        }
    }
}
