//! Checksums of snapshot files, recorded in `_metadata` and verified before
//! a restore, so that a state file that changed after the checkpoint was
//! taken (a disk error, a stray write) is named and refused instead of
//! being restored, or discovered by RocksDB halfway through a run.
//!
//! SST files are immutable and shared by hard link between consecutive
//! checkpoints, so each is read once: the cache is keyed by the file's
//! inode, size and modification time. A restore reads the whole checkpoint
//! once to verify it.

use std::collections::HashMap;
use std::fs;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

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

/// Checks every state file of `meta` in `folder` against its recorded
/// checksum; the error names the folder, the operator, the subtask and the
/// file.
pub fn verify(meta: &CheckpointMetadata, folder: &Path) -> Result<(), String> {
    for handle in &meta.state {
        let dir = folder.join(&handle.path);
        for f in &handle.files {
            let Some(want) = f.crc32 else { continue };
            let path = dir.join(&f.name);
            match file_crc32(&path) {
                Ok(got) if got == want => {}
                Ok(got) => {
                    return Err(format!(
                        "{}: state file {} of {} subtask {} has changed since the checkpoint was taken \
                         (CRC-32 {got:08x}, recorded {want:08x})",
                        folder.display(),
                        path.display(),
                        handle.uid,
                        handle.subtask
                    ))
                }
                Err(e) => {
                    return Err(format!(
                        "{}: state file {} of {} subtask {} cannot be read: {e}",
                        folder.display(),
                        path.display(),
                        handle.uid,
                        handle.subtask
                    ))
                }
            }
        }
    }
    Ok(())
}
