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
use crate::error::{Result, WeirError};
use crate::state::changes;
use crate::state::{FAMILIES, VALUES};

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

    /// `uid` has no keyed state in this checkpoint: the error names the
    /// operators that have.
    pub fn unknown_operator(&self, uid: &str) -> WeirError {
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
            // Written before job graphs: its layout is not recorded, so
            // only what the handle says is shown.
            out.push(SubtaskSummary {
                operator: h.uid.clone(),
                subtask: h.subtask,
                key_groups: h.key_groups,
                keys: 0,
                windows: 0,
                watermark_ms: None,
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
        let mut windows = 0u64;
        // Tables holding windows: a window aggregate's map of accumulators.
        let window_tables: Vec<u8> = self
            .meta
            .topology
            .operators
            .iter()
            .find(|o| o.uid == h.uid)
            .and_then(|o| o.state.as_ref())
            .map(|s| {
                s.tables
                    .iter()
                    .enumerate()
                    .filter(|(_, t)| t.kind == "map" && t.codec == "accumulators")
                    .map(|(i, _)| i as u8)
                    .collect()
            })
            .unwrap_or_default();
        self.for_each_raw(h, None, &mut |k, v| {
            match k.get(2) {
                Some(&t) if t == crate::state::WATERMARK_TABLE_ID => {
                    // The watermark a key group had reached (runtime-owned).
                    if let Ok(b) = <[u8; 8]>::try_from(v) {
                        let w = i64::from_le_bytes(b);
                        watermark = Some(watermark.map_or(w, |m| m.min(w)));
                    }
                    return Ok(());
                }
                Some(t) if window_tables.contains(t) => windows += 1,
                _ => {}
            }
            if let Some(key) = graph_key(k) {
                keys.insert(key);
            }
            Ok(())
        })?;
        Ok(SubtaskSummary {
            operator: h.uid.clone(),
            subtask: h.subtask,
            key_groups: h.key_groups,
            keys: keys.len() as u64,
            windows,
            watermark_ms: watermark,
            size_bytes: h.size_bytes,
            files: h.files.len(),
        })
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
