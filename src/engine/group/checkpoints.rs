//! Task checkpoints on shared storage, as every group-mode instance takes
//! and restores them (uploads run on the instance's uploader thread,
//! `engine::group::uploader`): load and check a manifest, restore from a local
//! copy by hard links or by download, collect what no retained checkpoint
//! reaches. `label` names the task in errors ("task 3", "stage counts task 3").

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

use tracing::warn;

use super::manifest::{self, ManifestFile, TaskManifest};
use super::storage::SharedStorage;
use crate::error::{Result, WeirError};

/// The file in a local task snapshot naming the manifest it was uploaded as.
pub const LOCAL_POINTER: &str = "WEIR-MANIFEST-KEY";

/// `cached` (a task's upload cache, as a restore by hard links found it in
/// the manifest) less the files storage no longer holds under `prefix`:
/// an instance with a stale view of the task may have collected them, and
/// a manifest must never reference an object that is gone. Dropped entries
/// are uploaded again (under this writer) by the next snapshot. One
/// listing, not a request per file.
pub fn still_stored(
    storage: &SharedStorage,
    prefix: &str,
    label: &str,
    mut cached: HashMap<String, ManifestFile>,
) -> Result<HashMap<String, ManifestFile>> {
    if cached.is_empty() {
        return Ok(cached);
    }
    let listed: std::collections::HashSet<String> =
        storage.list(prefix)?.into_iter().map(|o| o.key).collect();
    cached.retain(|name, f| {
        let stored = listed.contains(&f.key);
        if !stored {
            warn!(task = label, file = %name, key = %f.key, "a file of the restored checkpoint is no longer in storage; the next snapshot uploads it again");
        }
        stored
    });
    Ok(cached)
}

/// Writes manifest `m` and the local pointer next to its snapshot; returns
/// its key.
pub fn write_manifest(storage: &SharedStorage, m: &TaskManifest, target: &Path) -> Result<String> {
    let key = m.key();
    let json = serde_json::to_vec_pretty(m).expect("a manifest serialises");
    storage.put(&key, json)?;
    let local = target.join(LOCAL_POINTER);
    fs::write(&local, &key).map_err(|e| WeirError::io(&local, e))?;
    Ok(key)
}

/// The SST files of `m`, as already uploaded.
pub fn uploaded_files(m: &TaskManifest) -> HashMap<String, ManifestFile> {
    m.files
        .iter()
        .filter(|f| f.name.ends_with(".sst"))
        .map(|f| (f.name.clone(), f.clone()))
        .collect()
}

pub fn load_manifest(storage: &SharedStorage, label: &str, key: &str) -> Result<TaskManifest> {
    let bytes = storage.get(key)?.ok_or_else(|| {
        WeirError::Recovery(format!(
            "{label}: its committed checkpoint {}/{key} is missing; restore that object \
             (weir does not start a task from empty state in its place)",
            storage.location
        ))
    })?;
    manifest::parse_manifest(&bytes).map_err(|e| {
        WeirError::Recovery(format!(
            "{label}: its committed checkpoint {}/{key} cannot be read: {e}",
            storage.location
        ))
    })
}

/// Fetches a checkpoint's files into a folder below `snapshots`, checking
/// each against the manifest.
pub fn download(
    storage: &SharedStorage,
    snapshots: &Path,
    label: &str,
    key: &str,
    m: &TaskManifest,
) -> Result<PathBuf> {
    let target = snapshots.join(format!("{}-{:08}-download", m.writer, m.seq));
    if target.exists() {
        fs::remove_dir_all(&target).map_err(|e| WeirError::io(&target, e))?;
    }
    fs::create_dir_all(&target).map_err(|e| WeirError::io(&target, e))?;
    for f in &m.files {
        let location = format!("{}/{}", storage.location, f.key);
        let path = target.join(&f.name);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).map_err(|e| WeirError::io(parent, e))?;
        }
        let (size, crc) = storage.get_to_file(&f.key, &path)?.ok_or_else(|| {
            WeirError::Recovery(format!(
                "{label}: object {location} of its committed checkpoint {key} is missing \
                 (weir does not start a task from empty state in its place)"
            ))
        })?;
        if size != f.size_bytes || crc != f.crc32 {
            return Err(WeirError::Recovery(format!(
                "{label}: object {location} of its committed checkpoint {key} is damaged \
                 ({size} bytes with CRC-32 {crc:08x}, the manifest says {} bytes with {:08x}); \
                 weir does not start a task from empty state in its place",
                f.size_bytes, f.crc32
            )));
        }
    }
    let path = target.join(LOCAL_POINTER);
    fs::write(&path, key).map_err(|e| WeirError::io(&path, e))?;
    Ok(target)
}

/// A local snapshot folder below `snapshots` holding exactly the files of
/// manifest `key`: each of the manifest's size and, unless the folder is
/// `trusted` (this process took the snapshot, and a rewind restores it),
/// of its CRC-32. A folder left by an earlier process may have been damaged
/// since (a disk, a crash while it was written): such a copy is not linked
/// into a task's database but downloaded again, with a warning naming the
/// file.
pub fn local_copy(snapshots: &Path, key: &str, m: &TaskManifest, trusted: bool) -> Option<PathBuf> {
    for entry in fs::read_dir(snapshots).ok()?.flatten() {
        let folder = entry.path();
        let Ok(named) = fs::read_to_string(folder.join(LOCAL_POINTER)) else {
            continue;
        };
        if named != key {
            continue;
        }
        let complete = m
            .files
            .iter()
            .all(|f| fs::metadata(folder.join(&f.name)).is_ok_and(|md| md.len() == f.size_bytes));
        if !complete {
            continue;
        }
        let damaged = (!trusted)
            .then(|| {
                m.files.iter().find_map(|f| {
                    let path = folder.join(&f.name);
                    match crate::checkpoint::checksum::file_crc32(&path) {
                        Ok(crc) if crc == f.crc32 => None,
                        Ok(crc) => Some(format!(
                            "{}: CRC-32 {crc:08x}, the manifest says {:08x}",
                            path.display(),
                            f.crc32
                        )),
                        Err(e) => Some(format!("{}: {e}", path.display())),
                    }
                })
            })
            .flatten();
        match damaged {
            None => return Some(folder),
            Some(reason) => {
                warn!(
                    checkpoint = key,
                    reason, "the local copy of the checkpoint is damaged; downloading it instead"
                );
                // Never to be linked by a later scan that trusts sizes.
                if let Err(e) = fs::remove_dir_all(&folder) {
                    warn!(folder = %folder.display(), error = %e, "removing a damaged local copy failed");
                }
            }
        }
    }
    None
}

/// Removes local snapshots below `snapshots` other than the committed one
/// (kept for a restore by hard links on this machine).
pub fn remove_stale_snapshots(snapshots: &Path, committed: Option<&str>) {
    let Ok(entries) = fs::read_dir(snapshots) else {
        return;
    };
    for entry in entries.flatten() {
        let folder = entry.path();
        let named = fs::read_to_string(folder.join(LOCAL_POINTER)).ok();
        if named.is_some() && named.as_deref() == committed {
            continue;
        }
        if let Err(e) = fs::remove_dir_all(&folder) {
            warn!(folder = %folder.display(), error = %e, "removing an old local snapshot failed");
        }
    }
}

/// Deletes what no retained checkpoint of the task in `prefix` reaches
/// (`manifest::collectable`); returns how many objects went.
pub fn collect(
    storage: &SharedStorage,
    prefix: &str,
    committed: &str,
    retained: u32,
    grace_ms: i64,
    own: &str,
    stopping: bool,
) -> Result<usize> {
    let mut objects = manifest::TaskObjects::default();
    for o in storage.list(prefix)? {
        if o.key.contains("/manifests/") {
            let files = match storage.get(&o.key)? {
                // Of any format, a newer build's too: its files stay
                // while it is retained. An unreadable manifest is never a
                // committed one (those are checked); its files are not
                // protected.
                Some(b) => manifest::manifest_file_keys(&b).unwrap_or_default(),
                None => continue,
            };
            objects.manifests.insert(o.key, (files, o.modified_ms));
        } else {
            objects.files.insert(o.key, o.modified_ms);
        }
    }
    let now = crate::observe::now_ms() as i64;
    let doomed = manifest::collectable(&objects, committed, retained, now, grace_ms, own, stopping);
    for key in &doomed {
        storage.delete(key)?;
    }
    Ok(doomed.len())
}
