//! The changes file of a snapshot: the cache entries not yet written back
//! to RocksDB when the snapshot was taken.
//!
//! A snapshot is the RocksDB checkpoint (hard links and a WAL copy) *plus*
//! this file, so the barrier no longer writes the write-back cache into
//! RocksDB: it encodes the dirty entries sequentially into one file, which
//! costs a fraction of a `WriteBatch` into the memtable and the WAL. The
//! entries stay dirty in the cache and reach RocksDB with the next
//! write-back slice. A restore opens the checkpoint and then applies the
//! file's entries of its key groups (docs/checkpoint-protocol.md,
//! "Snapshot cost"). The Coordinator fsyncs and checksums it with the
//! other snapshot files.
//!
//! Format: the magic `WEIRCHG1`, then entries of
//! `family (u8: 0 values, 1 timers) | op (u8: 1 put, 0 delete) |
//! key length (u32 LE) | key | value length (u32 LE) | value`, keys with
//! their key-group prefix as in RocksDB.

use std::fs;
use std::io::Write;
use std::path::Path;

use rocksdb::{ColumnFamily, WriteBatch};

use super::{split_key, FAMILIES};
use crate::error::{Result, WeirError};

/// The file's name inside a snapshot folder.
pub const FILE: &str = "WEIR-CHANGES";

const MAGIC: &[u8; 8] = b"WEIRCHG1";

/// Family numbers in the file (indexes into [`FAMILIES`]).
pub const VALUES: u8 = 0;
pub const TIMERS: u8 = 1;

/// Collects entries for one changes file.
pub struct ChangesWriter {
    buf: Vec<u8>,
    entries: usize,
}

impl Default for ChangesWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl ChangesWriter {
    pub fn new() -> Self {
        Self::with_capacity(0)
    }

    /// Room for `bytes` (a store's last changes file, so that one of the
    /// same size is not grown by doubling, copied each time).
    pub fn with_capacity(bytes: usize) -> Self {
        let mut buf = Vec::with_capacity(bytes.max(MAGIC.len()));
        buf.extend_from_slice(MAGIC);
        Self { buf, entries: 0 }
    }

    /// A put (`Some`) or a delete (`None`) of `key` in `family`.
    pub fn entry(&mut self, family: u8, key: &[u8], value: Option<&[u8]>) {
        self.buf.push(family);
        self.buf.push(u8::from(value.is_some()));
        self.buf
            .extend_from_slice(&(key.len() as u32).to_le_bytes());
        self.buf.extend_from_slice(key);
        let value = value.unwrap_or_default();
        self.buf
            .extend_from_slice(&(value.len() as u32).to_le_bytes());
        self.buf.extend_from_slice(value);
        self.entries += 1;
    }

    pub fn entries(&self) -> usize {
        self.entries
    }

    /// The file's size so far, in bytes.
    pub fn size_bytes(&self) -> usize {
        self.buf.len()
    }

    /// Calls `f` with each entry collected, in order: family, key, and the
    /// value (None: a delete).
    pub fn for_each(&self, mut f: impl FnMut(u8, &[u8], Option<&[u8]>)) {
        for entry in entries(&self.buf) {
            let (family, key, value) = entry.expect("a changes buffer holds whole entries");
            f(family, key, value);
        }
    }

    /// Writes the file into the snapshot folder `dir` (not synced: the
    /// Coordinator syncs every snapshot file before `_metadata`). Returns
    /// its size.
    pub fn write(&self, dir: &Path) -> Result<u64> {
        self.write_with(dir, &ChangesWriter::new())
    }

    /// [`Self::write`] of this file's entries, then `then`'s, without
    /// copying them into one buffer first.
    pub fn write_with(&self, dir: &Path, then: &ChangesWriter) -> Result<u64> {
        let path = dir.join(FILE);
        let mut f = fs::File::create(&path).map_err(|e| WeirError::io(&path, e))?;
        let rest = &then.buf[MAGIC.len()..];
        f.write_all(&self.buf)
            .and_then(|()| f.write_all(rest))
            .map_err(|e| WeirError::io(&path, e))?;
        Ok((self.buf.len() + rest.len()) as u64)
    }
}

/// One entry of a changes file.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    /// Index into [`FAMILIES`].
    pub family: u8,
    pub key: Vec<u8>,
    /// None for a delete.
    pub value: Option<Vec<u8>>,
}

/// Reads the changes file in snapshot folder `dir` (none: no changes).
pub fn read(dir: &Path) -> Result<Vec<Change>> {
    let path = dir.join(FILE);
    let bytes = match fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(WeirError::io(&path, e)),
    };
    entries(&bytes)
        .map(|entry| {
            let (family, key, value) = entry.map_err(|(at, why)| {
                WeirError::Recovery(format!(
                    "changes file {} is damaged at byte {at}: {why}",
                    path.display()
                ))
            })?;
            Ok(Change {
                family,
                key: key.to_vec(),
                value: value.map(<[u8]>::to_vec),
            })
        })
        .collect()
}

/// One entry: family, key, and the value (None: a delete).
type Entry<'a> = (u8, &'a [u8], Option<&'a [u8]>);

/// The entries of a changes file's bytes, in order, each checked. A
/// damaged one is an error with the byte it was found at and why, and
/// ends the iteration.
fn entries(
    bytes: &[u8],
) -> impl Iterator<Item = std::result::Result<Entry<'_>, (usize, &'static str)>> {
    let mut at = MAGIC.len();
    let mut failed = bytes.get(..MAGIC.len()) != Some(&MAGIC[..]);
    let mut first = failed.then_some(Err((0, "it does not start with WEIRCHG1")));
    std::iter::from_fn(move || {
        if let Some(error) = first.take() {
            return Some(error);
        }
        if failed || at >= bytes.len() {
            return None;
        }
        let entry = entry_at(bytes, &mut at);
        failed = entry.is_err();
        Some(entry)
    })
}

/// The entry at `at`, which then points past it.
fn entry_at<'a>(
    bytes: &'a [u8],
    at: &mut usize,
) -> std::result::Result<Entry<'a>, (usize, &'static str)> {
    let mut take = |n: usize| {
        let part = bytes
            .get(*at..*at + n)
            .ok_or((*at, "it ends inside an entry"))?;
        *at += n;
        Ok(part)
    };
    let head = take(2)?;
    let (family, op) = (head[0], head[1]);
    if usize::from(family) >= FAMILIES.len() {
        return Err((*at - 2, "unknown column family"));
    }
    let key_len = u32::from_le_bytes(take(4)?.try_into().expect("4 bytes")) as usize;
    let key = take(key_len)?;
    let value_len = u32::from_le_bytes(take(4)?.try_into().expect("4 bytes")) as usize;
    let value = take(value_len)?;
    if split_key(key).is_none() {
        return Err((*at, "a key shorter than its key group"));
    }
    match op {
        1 => Ok((family, key, Some(value))),
        0 => Ok((family, key, None)),
        _ => Err((*at, "unknown operation")),
    }
}

/// The changes file in snapshot folder `dir`, if there is one, as one
/// batch for the instance whose column families `cf` gives by name: only
/// keys of key groups in `range`. Returns it with how many entries it
/// holds (`StateBackend::apply_changes` writes it).
pub fn batch<'a>(
    dir: &Path,
    range: (u32, u32),
    cf: impl Fn(&str) -> &'a ColumnFamily,
) -> Result<(WriteBatch, usize)> {
    let mut batch = WriteBatch::default();
    let mut entries = 0;
    for change in read(dir)? {
        let (kg, _) = split_key(&change.key).expect("checked by read");
        if kg < range.0 || kg >= range.1 {
            continue;
        }
        let cf = cf(FAMILIES[usize::from(change.family)]);
        match &change.value {
            Some(v) => batch.put_cf(cf, &change.key, v),
            None => batch.delete_cf(cf, &change.key),
        }
        entries += 1;
    }
    Ok((batch, entries))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::backend::StateBackend;
    use crate::state::state_key;
    use crate::state::VALUES as VALUES_CF;

    #[test]
    fn entries_of_the_range_are_applied_and_others_left_alone() {
        let tmp = tempfile::tempdir().unwrap();
        let backend = StateBackend::open(&tmp.path().join("db")).unwrap();
        let mut w = ChangesWriter::new();
        w.entry(VALUES, &state_key(1, b"a"), Some(b"one"));
        w.entry(VALUES, &state_key(5, b"b"), Some(b"five"));
        w.entry(VALUES, &state_key(2, b"gone"), None);
        w.entry(TIMERS, &state_key(2, b"t"), Some(b""));
        let snap = tmp.path().join("snap");
        fs::create_dir(&snap).unwrap();
        let mut batch = WriteBatch::default();
        batch.put_cf(backend.cf(VALUES_CF), state_key(2, b"gone"), b"x");
        backend.write(batch).unwrap();
        assert_eq!(w.entries(), 4);
        w.write(&snap).unwrap();
        assert_eq!(backend.apply_changes(&snap, (0, 4)).unwrap(), 3);
        let get = |k: &[u8]| backend.db().get_cf(backend.cf(VALUES_CF), k).unwrap();
        assert_eq!(get(&state_key(1, b"a")), Some(b"one".to_vec()));
        assert_eq!(
            get(&state_key(5, b"b")),
            None,
            "key group 5 is outside 0..4"
        );
        assert_eq!(get(&state_key(2, b"gone")), None, "deleted");
        let timer = backend
            .db()
            .get_cf(backend.cf(FAMILIES[1]), state_key(2, b"t"))
            .unwrap();
        assert_eq!(timer, Some(vec![]));
    }

    #[test]
    fn entries_written_after_others_follow_them_and_read_back_as_written() {
        let mut a = ChangesWriter::new();
        a.entry(VALUES, &state_key(1, b"k"), Some(b"old"));
        let mut b = ChangesWriter::new();
        b.entry(VALUES, &state_key(1, b"k"), Some(b"new"));
        b.entry(TIMERS, &state_key(3, b"t"), None);
        let mut seen = Vec::new();
        b.for_each(|family, key, value| {
            seen.push((family, key.to_vec(), value.map(<[u8]>::to_vec)))
        });
        assert_eq!(
            seen,
            vec![
                (VALUES, state_key(1, b"k"), Some(b"new".to_vec())),
                (TIMERS, state_key(3, b"t"), None),
            ]
        );
        let tmp = tempfile::tempdir().unwrap();
        let size = a.write_with(tmp.path(), &b).unwrap();
        assert_eq!(
            size as usize,
            a.size_bytes() + b.size_bytes() - 8,
            "one magic"
        );
        let read = read(tmp.path()).unwrap();
        assert_eq!(read.len(), 3);
        assert_eq!(read[0].value.as_deref(), Some(&b"old"[..]));
        assert_eq!(
            read[1].value.as_deref(),
            Some(&b"new"[..]),
            "the later entry is the newer"
        );
        assert_eq!(read[2].value, None);
    }

    #[test]
    fn a_missing_file_is_no_changes_and_a_cut_one_is_named() {
        let tmp = tempfile::tempdir().unwrap();
        let backend = StateBackend::open(&tmp.path().join("db")).unwrap();
        assert_eq!(backend.apply_changes(tmp.path(), (0, 8)).unwrap(), 0);
        let mut w = ChangesWriter::new();
        w.entry(VALUES, &state_key(1, b"abc"), Some(b"value"));
        w.write(tmp.path()).unwrap();
        let path = tmp.path().join(FILE);
        let bytes = fs::read(&path).unwrap();
        fs::write(&path, &bytes[..bytes.len() - 2]).unwrap();
        let e = backend
            .apply_changes(tmp.path(), (0, 8))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(FILE) && e.contains("ends inside an entry"),
            "{e}"
        );
    }
}
