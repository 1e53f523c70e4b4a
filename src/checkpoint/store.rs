//! The checkpoint directory on disk:
//!
//! ```text
//! <checkpoint.dir>/<job>/chk-0000000042/_metadata     written last, atomically
//!                                      /_committed    its transaction committed
//!                                      /state/<uid>/<subtask>/  RocksDB checkpoint
//! ```

use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::metadata::{CheckpointMetadata, FORMAT_VERSION};
use super::recovery::{FolderContents, FolderFacts};
use crate::error::{Result, WeirError};

pub const METADATA: &str = "_metadata";
const METADATA_TMP: &str = "_metadata.tmp";
pub const COMMITTED: &str = "_committed";

/// A job's checkpoint folder.
#[derive(Debug, Clone)]
pub struct CheckpointStore {
    root: PathBuf,
}

/// Creates a directory and its parents, owner-only.
pub fn create_private_dir(path: &Path) -> Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
        .map_err(|e| WeirError::io(path, e))
}

impl CheckpointStore {
    pub fn new(root: PathBuf) -> Self {
        Self { root }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn folder_name(id: u64) -> String {
        format!("chk-{id:010}")
    }

    pub fn folder(&self, id: u64) -> PathBuf {
        self.root.join(Self::folder_name(id))
    }

    /// Where subtask `subtask` of operator `uid` puts its snapshot, relative
    /// to the checkpoint folder.
    pub fn state_path(uid: &str, subtask: u32) -> String {
        format!("state/{uid}/{subtask}")
    }

    /// Claims `chk-N/` for a checkpoint about to be triggered. The claim is
    /// an atomic `mkdir`: if the folder exists, another instance of the job
    /// (a zombie about to be fenced) is using this id, and the caller
    /// must pick the next one.
    pub fn claim(&self, id: u64) -> Result<Option<PathBuf>> {
        create_private_dir(&self.root)?;
        let dir = self.folder(id);
        match fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Ok(None),
            Err(e) => return Err(WeirError::io(&dir, e)),
        }
        create_private_dir(&dir.join("state"))?;
        // The new entries are durable in their parents.
        sync_dir(&dir)?;
        sync_dir(&self.root)?;
        Ok(Some(dir))
    }

    /// Where a subtask's snapshot of checkpoint `id` goes. Creates
    /// `state/<uid>/` inside the claimed folder, never the folder itself:
    /// if the Coordinator removed it (the checkpoint was cancelled), this
    /// fails and nothing re-creates it.
    pub fn snapshot_target(&self, id: u64, uid: &str, subtask: u32) -> Result<PathBuf> {
        let state = self.folder(id).join("state");
        let operator = state.join(uid);
        match fs::DirBuilder::new().mode(0o700).create(&operator) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(WeirError::Checkpoint {
                    checkpoint_id: id,
                    reason: format!(
                        "{} is gone (the checkpoint was cancelled); not snapshotting into it",
                        self.folder(id).display()
                    ),
                })
            }
            Err(e) => return Err(WeirError::io(&operator, e)),
        }
        Ok(operator.join(subtask.to_string()))
    }

    /// Makes every file and folder of checkpoint `id` durable (fsync), so
    /// that `_metadata`, written next, never names state a power cut could
    /// lose. Files that are already durable (hard-linked SSTs) cost little.
    pub fn sync_checkpoint(&self, id: u64) -> Result<()> {
        sync_tree(&self.folder(id))
    }

    /// Writes `_metadata` atomically: temp file, fsync, rename, fsync folder.
    /// From this moment the checkpoint is prepared.
    pub fn write_metadata(&self, meta: &CheckpointMetadata) -> Result<()> {
        let dir = self.folder(meta.checkpoint_id);
        let tmp = dir.join(METADATA_TMP);
        let bytes = serde_json::to_vec_pretty(meta).expect("metadata serializes");
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(|e| WeirError::io(&tmp, e))?;
        f.write_all(&bytes).map_err(|e| WeirError::io(&tmp, e))?;
        f.sync_all().map_err(|e| WeirError::io(&tmp, e))?;
        drop(f);
        let target = dir.join(METADATA);
        fs::rename(&tmp, &target).map_err(|e| WeirError::io(&target, e))?;
        sync_dir(&dir)?;
        Ok(())
    }

    /// Makes the checkpoint or savepoint folder `from` this job's completed
    /// checkpoint `meta.checkpoint_id` (a `--restore-from` folder, kept so
    /// that a crash before the next checkpoint restores it again): copied
    /// by hard links under a name the scan ignores, given `meta` and the
    /// committed marker, made durable, then renamed into place.
    pub fn adopt(&self, from: &Path, meta: &CheckpointMetadata) -> Result<()> {
        let id = meta.checkpoint_id;
        let tmp = self.root.join(format!("adopting-{id}"));
        if tmp.exists() {
            fs::remove_dir_all(&tmp).map_err(|e| WeirError::io(&tmp, e))?;
        }
        link_or_copy_dir(from, &tmp)?;
        let path = tmp.join(METADATA);
        let bytes = serde_json::to_vec_pretty(meta).expect("metadata serializes");
        fs::write(&path, bytes).map_err(|e| WeirError::io(&path, e))?;
        let marker = tmp.join(COMMITTED);
        fs::write(&marker, b"").map_err(|e| WeirError::io(&marker, e))?;
        sync_tree(&tmp)?;
        let to = self.folder(id);
        fs::rename(&tmp, &to).map_err(|e| WeirError::io(&to, e))?;
        sync_dir(&self.root)
    }

    /// Records that checkpoint `id`'s transaction committed (informative:
    /// the group's offsets are the truth; see `recovery`).
    pub fn mark_committed(&self, id: u64) -> Result<()> {
        let dir = self.folder(id);
        let path = dir.join(COMMITTED);
        fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&path)
            .map_err(|e| WeirError::io(&path, e))?;
        sync_dir(&dir)
    }

    pub fn delete(&self, id: u64) -> Result<()> {
        let dir = self.folder(id);
        match fs::remove_dir_all(&dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(WeirError::io(&dir, e)),
        }
    }

    /// The newest checkpoint with its `_committed` marker, if any.
    pub fn latest_completed(&self) -> Result<Option<u64>> {
        Ok(self
            .scan()?
            .into_iter()
            .rev()
            .find(|f| f.committed_marker && f.id.is_some())
            .and_then(|f| f.id))
    }

    /// Reads and checks every `chk-*` folder. Never fails on a bad folder:
    /// it is reported as invalid with the reason.
    pub fn scan(&self) -> Result<Vec<FolderFacts>> {
        let entries = match fs::read_dir(&self.root) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(WeirError::io(&self.root, e)),
        };
        let mut out = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| WeirError::io(&self.root, e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if !name.starts_with("chk-") {
                continue;
            }
            out.push(self.inspect(&name, &entry.path()));
        }
        out.sort_by(|a, b| a.id.cmp(&b.id).then(a.name.cmp(&b.name)));
        Ok(out)
    }

    /// Checks one `chk-N` folder.
    pub fn inspect(&self, name: &str, path: &Path) -> FolderFacts {
        let id = name
            .strip_prefix("chk-")
            .and_then(|n| n.parse::<u64>().ok());
        let committed_marker = path.join(COMMITTED).exists();
        let checked = match id {
            Some(id) => check_folder(path, Some(id)),
            None => Err("folder name is not chk-<number>".to_string()),
        };
        let contents = match checked {
            Ok(m) => FolderContents::Valid(Box::new(m)),
            // Never prepared, unless its transaction committed: then a lost
            // `_metadata` is damage, not a checkpoint in flight.
            Err(reason) if !path.join(METADATA).exists() && !committed_marker => {
                FolderContents::Unfinished(reason)
            }
            Err(reason) => FolderContents::Invalid(reason),
        };
        FolderFacts {
            name: name.to_string(),
            id,
            contents,
            committed_marker,
        }
    }

    /// Total bytes under a checkpoint folder.
    pub fn size(&self, id: u64) -> u64 {
        dir_size(&self.folder(id))
    }
}

/// Checks any checkpoint or savepoint folder (`--restore-from`), whatever
/// its name.
pub fn inspect_any(path: &Path) -> std::result::Result<CheckpointMetadata, String> {
    if !path.is_dir() {
        return Err("not a folder".into());
    }
    check_folder(path, None)
}

/// Checks a folder's `_metadata` and state; `id`, when given, must match.
fn check_folder(path: &Path, id: Option<u64>) -> std::result::Result<CheckpointMetadata, String> {
    if path.join(METADATA_TMP).exists() {
        return Err(format!(
            "stale temp file {METADATA_TMP} (interrupted while being written)"
        ));
    }
    let bytes = match fs::read(path.join(METADATA)) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err("missing _metadata (never prepared)".into())
        }
        Err(e) => return Err(format!("unreadable _metadata: {e}")),
    };
    let meta: CheckpointMetadata =
        serde_json::from_slice(&bytes).map_err(|e| format!("partial or corrupt _metadata: {e}"))?;
    if meta.format_version != FORMAT_VERSION {
        return Err(format!(
            "_metadata format version {} is not supported (this weir reads {FORMAT_VERSION})",
            meta.format_version
        ));
    }
    if let Some(id) = id.filter(|id| *id != meta.checkpoint_id) {
        return Err(format!(
            "_metadata names checkpoint {} but the folder is {id}",
            meta.checkpoint_id
        ));
    }
    for handle in &meta.state {
        let dir = path.join(&handle.path);
        if !dir.join("CURRENT").is_file() {
            return Err(format!(
                "state of {} subtask {} is missing or unreadable at {}",
                handle.uid,
                handle.subtask,
                dir.display()
            ));
        }
        for file in &handle.files {
            let at = dir.join(&file.name);
            match fs::metadata(&at) {
                Ok(m) if m.len() == file.size_bytes => {}
                Ok(m) => {
                    return Err(format!(
                    "state file {} of {} subtask {} has {} bytes, {} when the checkpoint was taken",
                    at.display(),
                    handle.uid,
                    handle.subtask,
                    m.len(),
                    file.size_bytes
                ))
                }
                Err(e) => {
                    return Err(format!(
                        "state file {} of {} subtask {} is missing or unreadable: {e}",
                        at.display(),
                        handle.uid,
                        handle.subtask
                    ))
                }
            }
        }
    }
    Ok(meta)
}

/// Hard-links immutable `.sst` files and copies the rest (RocksDB appends
/// to or rewrites the others, which must not change the source), falling
/// back to copies across file systems. Recurses into folders.
pub fn link_or_copy_dir(from: &Path, to: &Path) -> Result<()> {
    create_private_dir(to)?;
    for entry in fs::read_dir(from).map_err(|e| WeirError::io(from, e))? {
        let entry = entry.map_err(|e| WeirError::io(from, e))?;
        let src = entry.path();
        let dst = to.join(entry.file_name());
        if entry
            .file_type()
            .map_err(|e| WeirError::io(&src, e))?
            .is_dir()
        {
            link_or_copy_dir(&src, &dst)?;
            continue;
        }
        let is_sst = src.extension().is_some_and(|e| e == "sst");
        if is_sst && fs::hard_link(&src, &dst).is_ok() {
            continue;
        }
        fs::copy(&src, &dst).map_err(|e| WeirError::io(&src, e))?;
    }
    Ok(())
}

/// Copies a complete checkpoint folder (a savepoint) into `<to>.partial`,
/// makes every file durable, then renames it into place, so that a copy
/// cut short is never mistaken for a usable one.
pub fn copy_checkpoint(from: &Path, to: &Path) -> Result<()> {
    let tmp = to.with_extension("partial");
    link_or_copy_dir(from, &tmp)?;
    sync_tree(&tmp)?;
    fs::rename(&tmp, to).map_err(|e| WeirError::io(to, e))?;
    if let Some(parent) = to.parent() {
        sync_dir(parent)?;
    }
    Ok(())
}

/// The savepoints in `dir`: `savepoint-*` folders, not counting copies
/// still being written (`*.partial`). A missing folder holds none.
pub fn count_savepoints(dir: &Path) -> Result<usize> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(WeirError::io(dir, e)),
    };
    let mut n = 0;
    for entry in entries {
        let path = entry.map_err(|e| WeirError::io(dir, e))?.path();
        let is_savepoint = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("savepoint-"));
        if is_savepoint && path.is_dir() && path.extension().is_none_or(|e| e != "partial") {
            n += 1;
        }
    }
    Ok(n)
}

/// Removes `*.partial` folders in `dir`: savepoint copies a crash cut short.
/// Returns the folders removed.
pub fn remove_partial_copies(dir: &Path) -> Result<Vec<PathBuf>> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(WeirError::io(dir, e)),
    };
    let mut removed = Vec::new();
    for entry in entries {
        let path = entry.map_err(|e| WeirError::io(dir, e))?.path();
        if path.is_dir() && path.extension().is_some_and(|e| e == "partial") {
            fs::remove_dir_all(&path).map_err(|e| WeirError::io(&path, e))?;
            removed.push(path);
        }
    }
    if !removed.is_empty() {
        sync_dir(dir)?;
    }
    Ok(removed)
}

/// fsyncs a folder, so that the entries created in it survive a power cut.
pub fn sync_dir(dir: &Path) -> Result<()> {
    #[cfg(test)]
    synced::record(dir);
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| WeirError::io(dir, e))
}

/// fsyncs every file under `dir`, then every folder bottom-up, `dir` last.
pub fn sync_tree(dir: &Path) -> Result<()> {
    for entry in fs::read_dir(dir).map_err(|e| WeirError::io(dir, e))? {
        let entry = entry.map_err(|e| WeirError::io(dir, e))?;
        let path = entry.path();
        let kind = entry.file_type().map_err(|e| WeirError::io(&path, e))?;
        if kind.is_dir() {
            sync_tree(&path)?;
        } else if kind.is_file() {
            #[cfg(test)]
            synced::record(&path);
            fs::File::open(&path)
                .and_then(|f| f.sync_all())
                .map_err(|e| WeirError::io(&path, e))?;
        }
    }
    sync_dir(dir)
}

/// Which paths this thread fsynced, for the durability tests.
#[cfg(test)]
pub(crate) mod synced {
    use std::cell::RefCell;
    use std::path::{Path, PathBuf};

    thread_local!(static SYNCED: RefCell<Vec<PathBuf>> = const { RefCell::new(Vec::new()) });

    pub fn record(p: &Path) {
        SYNCED.with(|s| s.borrow_mut().push(p.to_path_buf()));
    }

    /// Returns and forgets what was fsynced so far.
    pub fn take() -> Vec<PathBuf> {
        SYNCED.with(|s| std::mem::take(&mut *s.borrow_mut()))
    }
}

/// Bytes of regular files under `path` (hard links counted once per name).
pub fn dir_size(path: &Path) -> u64 {
    let Ok(entries) = fs::read_dir(path) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_size(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::metadata::Topology;

    fn meta(id: u64) -> CheckpointMetadata {
        CheckpointMetadata {
            format_version: FORMAT_VERSION,
            job: "wc".into(),
            checkpoint_id: id,
            trigger_time_ms: 1,
            prepared_time_ms: 2,
            topology: Topology {
                max_parallelism: 128,
                operators: vec![],
            },
            source_offsets: vec![],
            state: vec![],
        }
    }

    fn reason(f: &FolderFacts) -> &str {
        match &f.contents {
            FolderContents::Invalid(r) | FolderContents::Unfinished(r) => r,
            FolderContents::Valid(_) => "valid",
        }
    }

    #[test]
    fn scan_reports_each_folder_with_its_state() {
        let tmp = tempfile::tempdir().unwrap();
        let store = CheckpointStore::new(tmp.path().to_path_buf());
        store.claim(1).unwrap().unwrap();
        store.write_metadata(&meta(1)).unwrap();
        store.mark_committed(1).unwrap();
        store.claim(2).unwrap(); // never prepared
        store.claim(3).unwrap();
        fs::write(
            store.folder(3).join(METADATA),
            b"{\"format_version\": 1, \"job\"",
        )
        .unwrap();
        store.claim(4).unwrap().unwrap();
        store.write_metadata(&meta(4)).unwrap();
        fs::write(store.folder(4).join(METADATA_TMP), b"").unwrap();
        let facts = store.scan().unwrap();
        let summary: Vec<_> = facts
            .iter()
            .map(|f| (f.id, reason(f), f.committed_marker))
            .collect();
        assert_eq!(summary[0], (Some(1), "valid", true));
        assert_eq!(summary[1].0, Some(2));
        assert!(summary[1].1.contains("missing _metadata"));
        assert!(summary[2].1.contains("partial or corrupt _metadata"));
        assert!(summary[3].1.contains("stale temp file"));
        // Never prepared (no _metadata) vs prepared but damaged.
        assert!(matches!(facts[1].contents, FolderContents::Unfinished(_)));
        assert!(matches!(facts[2].contents, FolderContents::Invalid(_)));
        assert!(matches!(facts[3].contents, FolderContents::Invalid(_)));
    }

    #[test]
    fn state_named_in_metadata_must_exist() {
        let tmp = tempfile::tempdir().unwrap();
        let store = CheckpointStore::new(tmp.path().to_path_buf());
        store.claim(5).unwrap();
        let mut m = meta(5);
        m.state.push(crate::checkpoint::metadata::StateHandle {
            uid: "word-count".into(),
            subtask: 0,
            key_groups: (0, 64),
            path: CheckpointStore::state_path("word-count", 0),
            size_bytes: 0,
            files: vec![],
        });
        store.write_metadata(&m).unwrap();
        let facts = store.scan().unwrap();
        assert!(
            reason(&facts[0]).contains("word-count subtask 0"),
            "{}",
            reason(&facts[0])
        );
    }

    #[test]
    fn folders_are_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let store = CheckpointStore::new(tmp.path().join("job"));
        let dir = store.claim(1).unwrap().unwrap();
        store.write_metadata(&meta(1)).unwrap();
        assert_eq!(
            fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
            0o700
        );
        assert_eq!(
            fs::metadata(dir.join(METADATA))
                .unwrap()
                .permissions()
                .mode()
                & 0o777,
            0o600
        );
    }

    #[test]
    fn every_new_folder_and_file_is_fsynced_before_metadata_names_it() {
        let tmp = tempfile::tempdir().unwrap();
        let store = CheckpointStore::new(tmp.path().join("job"));
        synced::take();
        let dir = store.claim(7).unwrap().unwrap();
        let after_claim = synced::take();
        assert!(
            after_claim.contains(&store.root().to_path_buf()),
            "{after_claim:?}"
        );
        assert!(after_claim.contains(&dir), "{after_claim:?}");
        // A subtask's snapshot lands in state/<uid>/<n>.
        let target = store.snapshot_target(7, "wc", 0).unwrap();
        fs::create_dir(&target).unwrap();
        fs::write(target.join("000001.sst"), b"x").unwrap();
        store.sync_checkpoint(7).unwrap();
        let synced_now = synced::take();
        for p in [
            target.join("000001.sst"),
            target.clone(),
            dir.join("state/wc"),
            dir.join("state"),
            dir.clone(),
        ] {
            assert!(synced_now.contains(&p), "{p:?} not fsynced: {synced_now:?}");
        }
        store.write_metadata(&meta(7)).unwrap();
        assert!(synced::take().contains(&dir));
        store.mark_committed(7).unwrap();
        assert!(synced::take().contains(&dir));
    }

    #[test]
    fn a_snapshot_never_recreates_a_removed_checkpoint_folder() {
        let tmp = tempfile::tempdir().unwrap();
        let store = CheckpointStore::new(tmp.path().join("job"));
        store.claim(3).unwrap().unwrap();
        store.delete(3).unwrap(); // the Coordinator cancelled it
        let e = store.snapshot_target(3, "wc", 1).unwrap_err();
        assert!(e.to_string().contains("cancelled"), "{e}");
        assert!(!store.folder(3).exists());
    }

    #[test]
    fn savepoint_copies_are_fsynced_and_partial_ones_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let from = tmp.path().join("chk-1");
        fs::create_dir_all(from.join("state/wc/0")).unwrap();
        fs::write(from.join("state/wc/0/CURRENT"), b"x").unwrap();
        fs::write(from.join(METADATA), b"{}").unwrap();
        let sp = tmp.path().join("savepoints");
        fs::create_dir_all(sp.join("savepoint-1.partial")).unwrap();
        synced::take();
        copy_checkpoint(&from, &sp.join("savepoint-2")).unwrap();
        let synced_now = synced::take();
        assert!(synced_now.contains(&sp.join("savepoint-2.partial/state/wc/0/CURRENT")));
        assert!(synced_now.contains(&sp));
        assert_eq!(
            count_savepoints(&sp).unwrap(),
            1,
            "the partial copy is not one"
        );
        assert_eq!(count_savepoints(&tmp.path().join("none")).unwrap(), 0);
        let removed = remove_partial_copies(&sp).unwrap();
        assert_eq!(removed, vec![sp.join("savepoint-1.partial")]);
        assert!(sp.join("savepoint-2").is_dir());
    }

    #[test]
    fn a_missing_or_truncated_state_file_makes_the_folder_invalid_naming_it() {
        let tmp = tempfile::tempdir().unwrap();
        let store = CheckpointStore::new(tmp.path().to_path_buf());
        store.claim(9).unwrap();
        let target = store.snapshot_target(9, "wc", 0).unwrap();
        fs::create_dir(&target).unwrap();
        fs::write(target.join("CURRENT"), b"MANIFEST-000001\n").unwrap();
        fs::write(target.join("000012.sst"), vec![7u8; 100]).unwrap();
        let mut m = meta(9);
        m.state.push(crate::checkpoint::metadata::StateHandle {
            uid: "wc".into(),
            subtask: 0,
            key_groups: (0, 128),
            path: CheckpointStore::state_path("wc", 0),
            size_bytes: 116,
            files: vec![
                crate::checkpoint::SnapshotFile {
                    name: "000012.sst".into(),
                    size_bytes: 100,
                    crc32: None,
                },
                crate::checkpoint::SnapshotFile {
                    name: "CURRENT".into(),
                    size_bytes: 16,
                    crc32: None,
                },
            ],
        });
        store.write_metadata(&m).unwrap();
        assert_eq!(reason(&store.scan().unwrap()[0]), "valid");
        fs::write(target.join("000012.sst"), vec![7u8; 50]).unwrap();
        let r = reason(&store.scan().unwrap()[0]).to_string();
        assert!(r.contains("000012.sst") && r.contains("50 bytes"), "{r}");
        fs::remove_file(target.join("000012.sst")).unwrap();
        let r = reason(&store.scan().unwrap()[0]).to_string();
        assert!(r.contains("000012.sst") && r.contains("missing"), "{r}");
        assert!(matches!(
            store.scan().unwrap()[0].contents,
            FolderContents::Invalid(_)
        ));
    }
}
