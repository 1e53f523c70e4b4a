//! Reading keyed state straight out of a checkpoint folder, without Kafka
//! and without a running job (`weir checkpoints show`, `weir state get|scan`).
//!
//! Nothing in the folder is modified: each subtask's RocksDB snapshot is
//! opened read-only (its WAL copy replayed in memory), RocksDB's info log
//! goes to a private temporary folder instead of the snapshot, and the
//! snapshot's changes file (the cache entries not yet in RocksDB) is laid
//! over it in memory, as a restore would apply it. So it is safe while weir
//! runs; a checkpoint that retention deletes meanwhile fails the read with
//! the missing file named.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rocksdb::{IteratorMode, Options, DB};
use serde::Serialize;

use super::metadata::{CheckpointMetadata, StateHandle};
use super::store::inspect_any;
use crate::config::AggregateFunction;
use crate::error::{Result, WeirError};
use crate::operators::window::{unflip, WindowAcc, WATERMARK_TAG};
use crate::operators::Pipeline;
use crate::state::backend::{FAMILIES, VALUES};
use crate::state::key_groups::key_group;
use crate::state::{changes, split_key, state_key, Accumulator, StateValue};

/// One entry of keyed state, decoded.
#[derive(Debug, Clone, PartialEq)]
pub enum Entry {
    /// A key's value (aggregate without windows).
    Value { key: String, acc: Accumulator },
    /// One window of a key, `[start, end)` in ms.
    Window {
        key: String,
        start: i64,
        end: i64,
        acc: Accumulator,
    },
    /// The event-time watermark a key group had reached.
    Watermark { key_group: u32, watermark: i64 },
}

/// What `weir checkpoints show` prints per subtask.
#[derive(Debug, Clone, Serialize)]
pub struct SubtaskSummary {
    pub operator: String,
    pub subtask: u32,
    pub key_groups: (u32, u32),
    /// Keys with a value (without windows) or with at least one window.
    pub keys: u64,
    /// Windows held (open, or fired and within allowed lateness).
    pub windows: u64,
    /// The lowest watermark among its key groups (windows only).
    pub watermark_ms: Option<i64>,
    pub size_bytes: u64,
    pub files: usize,
}

/// Called with each raw `(full key, value)` entry.
pub type RawVisitor<'a> = dyn FnMut(&[u8], &[u8]) -> Result<()> + 'a;

/// A checkpoint folder opened for reading.
pub struct CheckpointReader {
    folder: PathBuf,
    meta: CheckpointMetadata,
    /// RocksDB's info log of read-only opens (never the snapshot folder).
    log_dir: PathBuf,
}

impl Drop for CheckpointReader {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.log_dir);
    }
}

impl CheckpointReader {
    /// Opens the checkpoint or savepoint in `folder`, checking its
    /// `_metadata` and that every state file is there with its size.
    pub fn open(folder: &Path) -> Result<Self> {
        let meta = inspect_any(folder).map_err(|reason| {
            WeirError::Recovery(format!(
                "checkpoint folder {} cannot be read: {reason}",
                folder.display()
            ))
        })?;
        let log_dir = std::env::temp_dir().join(format!(
            "weir-reader-{}-{}",
            std::process::id(),
            meta.checkpoint_id
        ));
        std::fs::create_dir_all(&log_dir).map_err(|e| WeirError::io(&log_dir, e))?;
        Ok(Self {
            folder: folder.to_path_buf(),
            meta,
            log_dir,
        })
    }

    pub fn metadata(&self) -> &CheckpointMetadata {
        &self.meta
    }

    pub fn folder(&self) -> &Path {
        &self.folder
    }

    /// The function whose result the operator's values show (`count`,
    /// `sum`, ...), from the kind the checkpoint recorded.
    pub fn function(&self, uid: &str) -> Result<AggregateFunction> {
        let op = self
            .meta
            .topology
            .operators
            .iter()
            .find(|o| o.uid == uid)
            .ok_or_else(|| self.unknown_operator(uid))?;
        Ok(Pipeline::function_of_kind(&op.kind).unwrap_or(AggregateFunction::Count))
    }

    fn unknown_operator(&self, uid: &str) -> WeirError {
        let keyed: Vec<String> = self.handles_by_uid().into_keys().collect();
        WeirError::Recovery(format!(
            "checkpoint {} in {} has no keyed state for operator {uid:?}; it has: {}",
            self.meta.checkpoint_id,
            self.folder.display(),
            if keyed.is_empty() {
                "none".to_string()
            } else {
                keyed.join(", ")
            }
        ))
    }

    fn handles_by_uid(&self) -> BTreeMap<String, Vec<&StateHandle>> {
        let mut out: BTreeMap<String, Vec<&StateHandle>> = BTreeMap::new();
        for h in &self.meta.state {
            out.entry(h.uid.clone()).or_default().push(h);
        }
        out
    }

    fn handles(&self, uid: &str) -> Result<Vec<&StateHandle>> {
        self.handles_by_uid()
            .remove(uid)
            .ok_or_else(|| self.unknown_operator(uid))
    }

    /// The value or windows of `key` in operator `uid`.
    pub fn get(&self, uid: &str, key: &str) -> Result<Vec<Entry>> {
        let kg = key_group(key.as_bytes(), self.meta.topology.max_parallelism);
        let handles = self.handles(uid)?;
        let Some(h) = handles
            .iter()
            .find(|h| h.key_groups.0 <= kg && kg < h.key_groups.1)
        else {
            return Ok(Vec::new());
        };
        let prefix = state_key(kg, key.as_bytes());
        let mut out = Vec::new();
        self.for_each(h, Some(&prefix), &mut |e| {
            match &e {
                Entry::Value { key: k, .. } | Entry::Window { key: k, .. } if k == key => {
                    out.push(e)
                }
                _ => {}
            }
            Ok(())
        })?;
        Ok(out)
    }

    /// Every entry of operator `uid` whose key starts with `prefix`, in
    /// subtask order, then key-group order.
    pub fn scan(
        &self,
        uid: &str,
        prefix: &str,
        f: &mut dyn FnMut(Entry) -> Result<()>,
    ) -> Result<()> {
        for h in self.handles(uid)? {
            self.for_each(h, None, &mut |e| match &e {
                Entry::Value { key, .. } | Entry::Window { key, .. } if key.starts_with(prefix) => {
                    f(e)
                }
                _ => Ok(()),
            })?;
        }
        Ok(())
    }

    /// Keys, windows and watermark of every keyed subtask.
    pub fn summary(&self) -> Result<Vec<SubtaskSummary>> {
        let mut out = Vec::new();
        for h in &self.meta.state {
            let graph = self
                .meta
                .topology
                .operators
                .iter()
                .any(|o| o.uid == h.uid && o.state.is_some());
            if graph {
                out.push(self.graph_summary(h)?);
                continue;
            }
            let (mut keys, mut windows, mut watermark) = (0u64, 0u64, None::<i64>);
            let mut last_key: Option<String> = None;
            self.for_each(h, None, &mut |e| {
                match e {
                    Entry::Value { .. } => keys += 1,
                    Entry::Window { key, .. } => {
                        windows += 1;
                        if last_key.as_deref() != Some(key.as_str()) {
                            keys += 1;
                            last_key = Some(key);
                        }
                    }
                    Entry::Watermark { watermark: w, .. } => {
                        watermark = Some(watermark.map_or(w, |m: i64| m.min(w)));
                    }
                }
                Ok(())
            })?;
            out.push(SubtaskSummary {
                operator: h.uid.clone(),
                subtask: h.subtask,
                key_groups: h.key_groups,
                keys,
                windows,
                watermark_ms: watermark,
                size_bytes: h.size_bytes,
                files: h.files.len(),
            });
        }
        Ok(out)
    }

    /// A job graph operator's snapshot: its keys are the distinct
    /// `key group | key` of its entries (in any table), whose layout is
    /// `key group (2) | table (1) | key length (varint) | key | map key`
    /// (docs/architecture.md, "State as named tables").
    fn graph_summary(&self, h: &StateHandle) -> Result<SubtaskSummary> {
        let mut keys = std::collections::BTreeSet::new();
        let mut watermark: Option<i64> = None;
        self.for_each_raw(h, None, &mut |k, v| {
            if k.get(2) == Some(&crate::dataflow::state::WATERMARK_TABLE.0) {
                // The watermark a key group had reached (runtime-owned).
                if let Ok(b) = <[u8; 8]>::try_from(v) {
                    let w = i64::from_le_bytes(b);
                    watermark = Some(watermark.map_or(w, |m| m.max(w)));
                }
            } else if let Some(key) = graph_key(k) {
                keys.insert(key);
            }
            Ok(())
        })?;
        Ok(SubtaskSummary {
            operator: h.uid.clone(),
            subtask: h.subtask,
            key_groups: h.key_groups,
            keys: keys.len() as u64,
            windows: 0,
            watermark_ms: watermark,
            size_bytes: h.size_bytes,
            files: h.files.len(),
        })
    }

    /// Visits the decoded entries of one snapshot (RocksDB with the
    /// changes file over it), in key order, optionally only under `prefix`
    /// (a full RocksDB key prefix, key group included).
    fn for_each(
        &self,
        h: &StateHandle,
        prefix: Option<&[u8]>,
        f: &mut dyn FnMut(Entry) -> Result<()>,
    ) -> Result<()> {
        let dir = self.folder.join(&h.path);
        self.for_each_raw(h, prefix, &mut |k, v| f(decode(&dir, k, v)?))
    }

    /// The snapshots of operator `uid`, in subtask order.
    pub fn snapshots(&self, uid: &str) -> Result<Vec<&StateHandle>> {
        self.handles(uid)
    }

    /// Visits the raw entries `(full key, value)` of one snapshot's values
    /// family (RocksDB with the changes file over it), in key order,
    /// optionally only under `prefix`: for readers that decode by a
    /// codec of their own (job graphs' tables).
    pub fn for_each_raw(
        &self,
        h: &StateHandle,
        prefix: Option<&[u8]>,
        f: &mut RawVisitor<'_>,
    ) -> Result<()> {
        let dir = self.folder.join(&h.path);
        let mut opts = Options::default();
        opts.set_db_log_dir(&self.log_dir);
        let db = DB::open_cf_for_read_only(&opts, &dir, FAMILIES, false)
            .map_err(|e| WeirError::state(format!("open {} read-only", dir.display()), e))?;
        // The changes file wins over RocksDB for the keys it names.
        let mut overlay: BTreeMap<Vec<u8>, Option<Vec<u8>>> = BTreeMap::new();
        for c in changes::read(&dir)? {
            let in_prefix = prefix.is_none_or(|p| c.key.starts_with(p));
            if c.family == changes::VALUES && in_prefix {
                overlay.insert(c.key, c.value);
            }
        }
        let cf = db.cf_handle(VALUES).ok_or_else(|| {
            WeirError::Recovery(format!("{} has no {VALUES} column family", dir.display()))
        })?;
        let mode = match prefix {
            Some(p) => IteratorMode::From(p, rocksdb::Direction::Forward),
            None => IteratorMode::Start,
        };
        let mut pending = overlay.into_iter().peekable();
        let mut emit = |k: &[u8], v: &[u8]| -> Result<()> { f(k, v) };
        for item in db.iterator_cf(cf, mode) {
            let (k, v) =
                item.map_err(|e| WeirError::state(format!("read {}", dir.display()), e))?;
            if prefix.is_some_and(|p| !k.starts_with(p)) {
                break;
            }
            // Overlay keys before this one.
            while let Some((ok, _)) = pending.peek() {
                if ok.as_slice() >= &k[..] {
                    break;
                }
                let (ok, ov) = pending.next().expect("peeked");
                if let Some(ov) = ov {
                    emit(&ok, &ov)?;
                }
            }
            match pending.peek() {
                Some((ok, _)) if ok.as_slice() == &k[..] => {
                    let (ok, ov) = pending.next().expect("peeked");
                    if let Some(ov) = ov {
                        emit(&ok, &ov)?;
                    }
                }
                _ => emit(&k, &v)?,
            }
        }
        for (ok, ov) in pending {
            if let Some(ov) = ov {
                emit(&ok, &ov)?;
            }
        }
        Ok(())
    }
}

/// `key group | key` of a job graph's table entry, without table and map key.
fn graph_key(full: &[u8]) -> Option<Vec<u8>> {
    let (kg, rest) = full.split_first_chunk::<2>()?;
    let mut rest = rest.get(1..)?;
    let (mut len, mut shift) = (0usize, 0);
    loop {
        let (&b, tail) = rest.split_first()?;
        rest = tail;
        len |= usize::from(b & 0x7f) << shift;
        if b < 0x80 {
            break;
        }
        shift += 7;
        if shift > 63 {
            return None;
        }
    }
    let mut key = kg.to_vec();
    key.extend_from_slice(rest.get(..len)?);
    Some(key)
}

/// Decodes one RocksDB entry of the values family by its shape: 32-byte
/// accumulators (`key_group | key`), 40-byte window accumulators
/// (`key_group | key | start`), 8-byte watermarks (`key_group | 0xFF`).
fn decode(dir: &Path, full: &[u8], value: &[u8]) -> Result<Entry> {
    let corrupt = |why: &str| {
        WeirError::Recovery(format!(
            "state in {} has an entry it cannot decode (key {:?}, {} value bytes): {why}",
            dir.display(),
            String::from_utf8_lossy(full),
            value.len()
        ))
    };
    let (kg, rest) = split_key(full).ok_or_else(|| corrupt("key shorter than its key group"))?;
    if rest == [WATERMARK_TAG] && value.len() == 8 {
        let watermark = i64::from_le_bytes(value.try_into().expect("8 bytes"));
        return Ok(Entry::Watermark {
            key_group: kg,
            watermark,
        });
    }
    let text =
        |b: &[u8]| String::from_utf8(b.to_vec()).map_err(|_| corrupt("the key is not UTF-8"));
    match value.len() {
        32 => Ok(Entry::Value {
            key: text(rest)?,
            acc: Accumulator::decode(value).ok_or_else(|| corrupt("bad accumulator"))?,
        }),
        40 if rest.len() >= 8 => {
            let w = WindowAcc::decode(value).ok_or_else(|| corrupt("bad window accumulator"))?;
            let (key, start) = rest.split_at(rest.len() - 8);
            Ok(Entry::Window {
                key: text(key)?,
                start: unflip(start).expect("8 bytes"),
                end: w.end,
                acc: w.acc,
            })
        }
        _ => Err(corrupt("neither a value, a window nor a watermark")),
    }
}
