//! Checksums of snapshot files, recorded in `_metadata` and verified before
//! a restore, so that a state file that changed after the checkpoint was
//! taken (a disk error, a stray write) is named and refused instead of
//! being restored, or discovered by RocksDB halfway through a run.
//!
//! SST files are immutable and shared by hard link between consecutive
//! checkpoints, so each is read once: the cache is keyed by the file's
//! inode, size and modification time.
//!
//! A restore does not read the whole checkpoint before it starts, since
//! that read grows with the state. Before it starts, every file's size is checked, and so is the
//! CRC of every file RocksDB does not checksum itself (MANIFEST, CURRENT,
//! OPTIONS, the WAL, the changes file). The SST files' CRCs are checked
//! by a [`BackgroundVerification`] while the job runs. The Coordinator
//! waits for it before the restored job's first commit, and a mismatch
//! stops the job before anything it computed becomes visible. Meanwhile
//! RocksDB verifies each SST block's own checksum as it reads it.

use std::collections::HashMap;
use std::fs;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::Instant;

use super::metadata::{CheckpointMetadata, StateHandle};

/// CRC-32 of a file's contents.
pub fn file_crc32(path: &Path) -> std::io::Result<u32> {
    let mut f = fs::File::open(path)?;
    let mut hasher = crc32fast::Hasher::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            return Ok(hasher.finalize());
        }
        hasher.update(&buf[..n]);
    }
}

/// Checksums already computed, by (device, inode, size, mtime).
#[derive(Debug, Default)]
pub struct ChecksumCache {
    known: HashMap<(u64, u64, u64, i64, i64), u32>,
}

impl ChecksumCache {
    /// The checksum of `path`, read only if this file was not seen before.
    pub fn crc32(&mut self, path: &Path) -> std::io::Result<u32> {
        let m = fs::metadata(path)?;
        let key = (m.dev(), m.ino(), m.len(), m.mtime(), m.mtime_nsec());
        if let Some(c) = self.known.get(&key) {
            return Ok(*c);
        }
        let c = file_crc32(path)?;
        self.known.insert(key, c);
        Ok(c)
    }

    /// Records `crc` as the checksum of `path` as it is now, so that a
    /// checkpoint that links the same file does not read it again.
    pub fn remember(&mut self, path: &Path, crc: u32) {
        if let Ok(m) = fs::metadata(path) {
            let key = (m.dev(), m.ino(), m.len(), m.mtime(), m.mtime_nsec());
            self.known.insert(key, crc);
        }
    }

    /// Fills in the checksum of every file of `handle`, in checkpoint
    /// folder `folder`.
    pub fn fill(&mut self, folder: &Path, handle: &mut StateHandle) -> std::io::Result<()> {
        let dir = folder.join(&handle.path);
        for f in &mut handle.files {
            f.crc32 = Some(self.crc32(&dir.join(&f.name))?);
        }
        // Entries of files no longer in any recent checkpoint would pile up.
        if self.known.len() > 100_000 {
            self.known.clear();
        }
        Ok(())
    }
}

/// Whether RocksDB checks `name` itself as it reads it: every block of an
/// SST file carries a checksum that each read verifies.
fn checked_by_rocksdb(name: &str) -> bool {
    name.ends_with(".sst")
}

/// A state file whose CRC is left for the [`BackgroundVerification`].
#[derive(Debug, Clone)]
pub struct Deferred {
    path: PathBuf,
    size_bytes: u64,
    crc32: u32,
    uid: String,
    subtask: u32,
}

/// Checks every state file of `meta` in `folder`: it exists and has its
/// recorded size, and, unless RocksDB checksums it itself, its recorded
/// CRC. Returns the files whose CRC is still to be checked. The error
/// names the folder, the operator, the subtask and the file.
pub fn verify_up_front(meta: &CheckpointMetadata, folder: &Path) -> Result<Vec<Deferred>, String> {
    let mut deferred = Vec::new();
    for handle in &meta.state {
        let dir = folder.join(&handle.path);
        let named =
            |path: &Path, what: String| file_error(folder, path, &handle.uid, handle.subtask, what);
        for f in &handle.files {
            let path = dir.join(&f.name);
            let len = fs::metadata(&path)
                .map_err(|e| named(&path, format!("cannot be read: {e}")))?
                .len();
            if len != f.size_bytes {
                return Err(named(
                    &path,
                    format!(
                        "has changed since the checkpoint was taken ({len} bytes, recorded {})",
                        f.size_bytes
                    ),
                ));
            }
            let Some(want) = f.crc32 else { continue };
            let file = Deferred {
                path,
                size_bytes: len,
                crc32: want,
                uid: handle.uid.clone(),
                subtask: handle.subtask,
            };
            if checked_by_rocksdb(&f.name) {
                deferred.push(file);
            } else {
                check_crc(folder, &file)?;
            }
        }
    }
    Ok(deferred)
}

/// Bytes the deferred files hold: what a background check reads.
pub fn deferred_bytes(files: &[Deferred]) -> u64 {
    files.iter().map(|f| f.size_bytes).sum()
}

/// Checks the deferred files now, before returning.
pub fn verify_deferred(folder: &Path, files: &[Deferred]) -> Result<(), String> {
    files.iter().try_for_each(|f| check_crc(folder, f))
}

/// Checks `meta` whole before returning: sizes and every CRC.
pub fn verify(meta: &CheckpointMetadata, folder: &Path) -> Result<(), String> {
    verify_deferred(folder, &verify_up_front(meta, folder)?)
}

/// Why a state file of checkpoint `folder` cannot be restored, naming the
/// folder, the file, the operator and the subtask.
fn file_error(folder: &Path, path: &Path, uid: &str, subtask: u32, what: String) -> String {
    format!(
        "{}: state file {} of {uid} subtask {subtask} {what}",
        folder.display(),
        path.display()
    )
}

fn check_crc(folder: &Path, file: &Deferred) -> Result<(), String> {
    let named = |what: String| file_error(folder, &file.path, &file.uid, file.subtask, what);
    match file_crc32(&file.path) {
        Ok(got) if got == file.crc32 => Ok(()),
        Ok(got) => Err(named(format!(
            "has changed since the checkpoint was taken (CRC-32 {got:08x}, recorded {:08x})",
            file.crc32
        ))),
        Err(e) => Err(named(format!("cannot be read: {e}"))),
    }
}

/// The files checked, with their CRCs, or why the checkpoint cannot be
/// trusted.
pub type VerifiedFiles = Result<Vec<(PathBuf, u32)>, String>;

/// The CRC check of a restored checkpoint's SST files, on a thread of its
/// own while the job runs (module docs).
pub struct BackgroundVerification {
    state: Mutex<Pending>,
}

enum Pending {
    Running(JoinHandle<VerifiedFiles>),
    Done(VerifiedFiles),
}

impl BackgroundVerification {
    /// Starts checking `files` of the checkpoint in `folder`.
    pub fn spawn(folder: &Path, files: Vec<Deferred>) -> std::io::Result<Self> {
        let folder = folder.to_path_buf();
        let handle = std::thread::Builder::new()
            .name("verify-restore".into())
            .spawn(move || {
                let started = Instant::now();
                let mut bytes = 0u64;
                let mut out = Vec::with_capacity(files.len());
                for file in &files {
                    check_crc(&folder, file)?;
                    bytes += file.size_bytes;
                    out.push((file.path.clone(), file.crc32));
                }
                tracing::info!(
                    files = out.len(),
                    bytes,
                    verify_ms = started.elapsed().as_millis() as u64,
                    "restored checkpoint's SST files verified"
                );
                Ok(out)
            })?;
        Ok(Self {
            state: Mutex::new(Pending::Running(handle)),
        })
    }

    /// Waits for the check to end, and returns its outcome.
    pub fn wait(&self) -> VerifiedFiles {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if let Pending::Running(_) = &*state {
            let Pending::Running(handle) =
                std::mem::replace(&mut *state, Pending::Done(Ok(Vec::new())))
            else {
                unreachable!()
            };
            let outcome = handle
                .join()
                .unwrap_or_else(|_| Err("the restore's CRC check panicked".into()));
            *state = Pending::Done(outcome);
        }
        match &*state {
            Pending::Done(outcome) => outcome.clone(),
            Pending::Running(_) => unreachable!("joined above"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::metadata::{SnapshotFile, StateHandle, Topology, FORMAT_VERSION};

    /// A checkpoint in `folder` with one subtask's snapshot of `files`
    /// (name, contents), each recorded with its size and CRC.
    fn checkpoint(folder: &Path, files: &[(&str, &[u8])]) -> CheckpointMetadata {
        let dir = folder.join("state/op/0");
        fs::create_dir_all(&dir).unwrap();
        let files = files
            .iter()
            .map(|(name, bytes)| {
                fs::write(dir.join(name), bytes).unwrap();
                SnapshotFile {
                    name: name.to_string(),
                    size_bytes: bytes.len() as u64,
                    crc32: Some(file_crc32(&dir.join(name)).unwrap()),
                }
            })
            .collect();
        CheckpointMetadata {
            format_version: FORMAT_VERSION,
            job: "job".into(),
            checkpoint_id: 7,
            trigger_time_ms: 0,
            prepared_time_ms: 0,
            topology: Topology {
                max_parallelism: 8,
                operators: Vec::new(),
            },
            source_offsets: Vec::new(),
            state: vec![StateHandle {
                uid: "op".into(),
                subtask: 0,
                key_groups: (0, 8),
                path: "state/op/0".into(),
                size_bytes: 0,
                files,
            }],
        }
    }

    /// Same length, other bytes: only a CRC can tell.
    fn flip_a_byte(path: &Path) {
        let mut bytes = fs::read(path).unwrap();
        bytes[0] ^= 0xff;
        fs::write(path, bytes).unwrap();
    }

    #[test]
    fn up_front_checks_sizes_and_small_files_and_leaves_sst_files_for_later() {
        let tmp = tempfile::tempdir().unwrap();
        let meta = checkpoint(
            tmp.path(),
            &[
                ("000012.sst", b"table data"),
                ("MANIFEST-000005", b"manifest"),
            ],
        );
        let deferred = verify_up_front(&meta, tmp.path()).unwrap();
        assert_eq!(deferred.len(), 1);
        assert!(deferred[0].path.ends_with("000012.sst"));
        assert_eq!(deferred_bytes(&deferred), 10);
        verify_deferred(tmp.path(), &deferred).unwrap();

        // A changed SST file of the same size passes the up-front check;
        // the background one names it.
        flip_a_byte(&tmp.path().join("state/op/0/000012.sst"));
        let deferred = verify_up_front(&meta, tmp.path()).unwrap();
        let check = BackgroundVerification::spawn(tmp.path(), deferred).unwrap();
        let err = check.wait().unwrap_err();
        assert!(
            err.contains("000012.sst") && err.contains("has changed"),
            "{err}"
        );
        assert_eq!(check.wait().unwrap_err(), err, "the outcome is kept");
        assert!(verify(&meta, tmp.path())
            .unwrap_err()
            .contains("000012.sst"));
    }

    #[test]
    fn up_front_refuses_a_changed_small_file_a_truncated_or_a_missing_one() {
        let tmp = tempfile::tempdir().unwrap();
        let meta = checkpoint(
            tmp.path(),
            &[
                ("000012.sst", b"table data"),
                ("MANIFEST-000005", b"manifest"),
            ],
        );
        let dir = tmp.path().join("state/op/0");
        flip_a_byte(&dir.join("MANIFEST-000005"));
        let err = verify_up_front(&meta, tmp.path()).unwrap_err();
        assert!(
            err.contains("MANIFEST-000005") && err.contains("CRC-32"),
            "{err}"
        );

        fs::write(dir.join("000012.sst"), b"table").unwrap();
        let err = verify_up_front(&meta, tmp.path()).unwrap_err();
        assert!(
            err.contains("000012.sst") && err.contains("5 bytes, recorded 10"),
            "{err}"
        );

        fs::remove_file(dir.join("000012.sst")).unwrap();
        let err = verify_up_front(&meta, tmp.path()).unwrap_err();
        assert!(
            err.contains("000012.sst") && err.contains("cannot be read"),
            "{err}"
        );
        assert!(err.contains("op subtask 0"), "{err}");
    }

    #[test]
    fn a_verified_file_seeds_the_cache_of_its_hard_links() {
        let tmp = tempfile::tempdir().unwrap();
        let meta = checkpoint(tmp.path(), &[("000012.sst", b"table data")]);
        let deferred = verify_up_front(&meta, tmp.path()).unwrap();
        let files = BackgroundVerification::spawn(tmp.path(), deferred)
            .unwrap()
            .wait()
            .unwrap();
        let mut cache = ChecksumCache::default();
        for (path, crc) in &files {
            cache.remember(path, *crc);
        }
        let link = tmp.path().join("linked.sst");
        fs::hard_link(&files[0].0, &link).unwrap();
        // A wrong remembered CRC would show it was not read again.
        cache.remember(&link, 42);
        assert_eq!(cache.crc32(&files[0].0).unwrap(), 42);
    }
}
