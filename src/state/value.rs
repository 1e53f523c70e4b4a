//! Typed value state over the bytes of the `default` column family, with a
//! bounded write-back cache in front (as Kafka Streams' record cache): a
//! RocksDB get+put per update caps a core at a few hundred thousand updates
//! a second, while a `WriteBatch` of thousands of puts runs at millions.
//! Dirty entries are written back in slices as they accumulate; a snapshot
//! does not write them back but copies them into its changes file
//! ([`super::changes`]).

use rocksdb::WriteBatch;
use rustc_hash::FxHashMap;

use super::backend::{StateBackend, VALUES};
use super::changes::{self, ChangesWriter};
use super::{corrupt, read_error, StateValue};
use crate::error::Result;

/// Dirty entries written back at once between barriers.
const WRITE_BACK_SLICE: usize = 65_536;

struct Cached<V> {
    /// `None`: deleted, to be removed from RocksDB at write-back.
    value: Option<V>,
    dirty: bool,
}

/// One value per full key (`key_group | key [| namespace]`).
pub struct ValueState<V> {
    cache: FxHashMap<Vec<u8>, Cached<V>>,
    cache_limit: usize,
    /// Keys of the dirty cache entries, in the order they became dirty.
    dirty: Vec<Vec<u8>>,
    /// Reused buffer for encoding values.
    encoded: Vec<u8>,
}

impl<V: StateValue> ValueState<V> {
    pub fn new(cache_limit: usize) -> Self {
        Self {
            cache: FxHashMap::default(),
            cache_limit: cache_limit.max(1),
            dirty: Vec::new(),
            encoded: Vec::with_capacity(64),
        }
    }

    /// Applies `f` to the value at `full_key` (default if absent) and
    /// returns the new value. A hit in the cache allocates nothing.
    pub fn update(
        &mut self,
        backend: &StateBackend,
        full_key: &[u8],
        f: impl FnOnce(&mut V),
    ) -> Result<V> {
        self.update_existed(backend, full_key, f).map(|(v, _)| v)
    }

    /// As [`ValueState::update`], and whether a value was there before
    /// (one lookup, where a `get` then an `update` would make two).
    pub fn update_existed(
        &mut self,
        backend: &StateBackend,
        full_key: &[u8],
        f: impl FnOnce(&mut V),
    ) -> Result<(V, bool)> {
        if let Some(c) = self.cache.get_mut(full_key) {
            let existed = c.value.is_some();
            let v = c.value.get_or_insert_with(V::default);
            f(v);
            let v = *v;
            if !c.dirty {
                c.dirty = true;
                self.dirty.push(full_key.to_vec());
                self.write_back_if_due(backend)?;
            }
            return Ok((v, existed));
        }
        let stored = read(backend, full_key)?;
        let existed = stored.is_some();
        let mut v = stored.unwrap_or_default();
        f(&mut v);
        self.insert(backend, full_key.to_vec(), Some(v))?;
        Ok((v, existed))
    }

    /// Stores `value` at `full_key`.
    pub fn put(&mut self, backend: &StateBackend, full_key: &[u8], value: V) -> Result<()> {
        if let Some(c) = self.cache.get_mut(full_key) {
            c.value = Some(value);
            if !c.dirty {
                c.dirty = true;
                self.dirty.push(full_key.to_vec());
                self.write_back_if_due(backend)?;
            }
            return Ok(());
        }
        self.insert(backend, full_key.to_vec(), Some(value))
    }

    /// Deletes the value at `full_key`.
    pub fn remove(&mut self, backend: &StateBackend, full_key: &[u8]) -> Result<()> {
        if let Some(c) = self.cache.get_mut(full_key) {
            c.value = None;
            if !c.dirty {
                c.dirty = true;
                self.dirty.push(full_key.to_vec());
            }
            return Ok(());
        }
        self.insert(backend, full_key.to_vec(), None)
    }

    fn insert(&mut self, backend: &StateBackend, key: Vec<u8>, value: Option<V>) -> Result<()> {
        if self.cache.len() >= self.cache_limit {
            self.write_back(backend)?;
            self.cache.clear();
        }
        self.dirty.push(key.clone());
        self.cache.insert(key, Cached { value, dirty: true });
        self.write_back_if_due(backend)
    }

    /// The current value at `full_key` (cache first).
    pub fn get(&self, backend: &StateBackend, full_key: &[u8]) -> Result<Option<V>> {
        if let Some(c) = self.cache.get(full_key) {
            return Ok(c.value);
        }
        read(backend, full_key)
    }

    /// Values whose full key starts with `prefix` and is `key_len` bytes
    /// long, cache included, in key order (one key's namespaces, e.g. its
    /// open windows: longer keys that share the prefix belong to other keys
    /// and other entries, and are not decoded).
    pub fn scan_prefix(
        &self,
        backend: &StateBackend,
        prefix: &[u8],
        key_len: usize,
    ) -> Result<Vec<(Vec<u8>, V)>> {
        let mut out = std::collections::BTreeMap::new();
        let db = backend.db();
        for item in db.prefix_iterator_cf(backend.cf(VALUES), prefix) {
            let (k, v) = item.map_err(|e| read_error(backend.path(), prefix, e))?;
            if !k.starts_with(prefix) {
                break;
            }
            if k.len() != key_len {
                continue;
            }
            let value = V::decode(&v).ok_or_else(|| {
                corrupt(
                    backend.path(),
                    &k,
                    format!("value of {} bytes, expected {}", v.len(), V::NAME),
                )
            })?;
            out.insert(k.to_vec(), Some(value));
        }
        for (k, c) in &self.cache {
            if k.starts_with(prefix) && k.len() == key_len {
                out.insert(k.clone(), c.value);
            }
        }
        Ok(out
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| (k, v)))
            .collect())
    }

    /// Writes dirty entries back in slices as they accumulate, so that the
    /// work left for a barrier (and the memtable its snapshot flushes)
    /// stays small whatever the state size.
    fn write_back_if_due(&mut self, backend: &StateBackend) -> Result<()> {
        if self.dirty.len() >= WRITE_BACK_SLICE {
            self.write_back(backend)?;
        }
        Ok(())
    }

    /// Writes every dirty cache entry to RocksDB in one batch.
    pub fn write_back(&mut self, backend: &StateBackend) -> Result<()> {
        let mut batch = WriteBatch::default();
        let cf = backend.cf(VALUES);
        for key in self.dirty.drain(..) {
            if let Some(c) = self.cache.get_mut(&key) {
                if !c.dirty {
                    continue;
                }
                c.dirty = false;
                match &c.value {
                    Some(v) => {
                        self.encoded.clear();
                        v.encode(&mut self.encoded);
                        batch.put_cf(cf, &key, &self.encoded);
                    }
                    None => batch.delete_cf(cf, &key),
                }
            }
        }
        // Deleted entries need not stay cached once written.
        self.cache.retain(|_, c| c.value.is_some() || c.dirty);
        backend.write(batch)
    }

    /// Adds every dirty entry to a snapshot's changes file; they stay dirty.
    pub fn collect_dirty(&mut self, out: &mut ChangesWriter) {
        for key in &self.dirty {
            let Some(c) = self.cache.get(key) else {
                continue;
            };
            if !c.dirty {
                continue;
            }
            match &c.value {
                Some(v) => {
                    self.encoded.clear();
                    v.encode(&mut self.encoded);
                    out.entry(changes::VALUES, key, Some(&self.encoded));
                }
                None => out.entry(changes::VALUES, key, None),
            }
        }
    }

    /// Entries in the cache (for metrics and tests).
    pub fn cached(&self) -> usize {
        self.cache.len()
    }
}

/// Reads and decodes a stored value.
fn read<V: StateValue>(backend: &StateBackend, full_key: &[u8]) -> Result<Option<V>> {
    match backend
        .db()
        .get_pinned_cf(backend.cf(VALUES), full_key)
        .map_err(|e| read_error(backend.path(), full_key, e))?
    {
        None => Ok(None),
        Some(v) => V::decode(&v).map(Some).ok_or_else(|| {
            corrupt(
                backend.path(),
                full_key,
                format!("value of {} bytes, expected {}", v.len(), V::NAME),
            )
        }),
    }
}
