//! Shared checkpoint storage for `scale.mode = "group"`: a path on a
//! shared file system or an `s3://bucket/prefix` location, both through
//! the `object_store` crate so that one code path serves both. Every
//! object of a job lives under `<location>/<job name>/`.
//!
//! `object_store` is async; the group runtime is a plain thread, so the
//! storage keeps a small runtime of its own and blocks on each call.
//!
//! A shared folder is written through weir's own durable put
//! ([`durable_put`]), not `object_store`'s local backend, which renames
//! without an fsync: weir commits the pointer to a manifest right after
//! writing it, and a pointer that survives a crash of the file server must
//! name bytes that survived it too.

use std::fs;
use std::io::Write;
use std::path::{Path as FsPath, PathBuf};
use std::sync::Arc;

use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, PutPayload};

use crate::config::Config;
use crate::error::{Result, WeirError};

/// How much of a file an upload reads at a time.
const CHUNK: usize = 1 << 20;

/// Files up to this size go in one request; larger ones in parts of it
/// (S3's smallest part is 5 MiB).
const PART: usize = 8 << 20;

/// Fills as much of `buf` as the file has left; 0 at its end.
fn read_chunk(file: &mut fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    use std::io::Read;
    let mut filled = 0;
    while filled < buf.len() {
        match file.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// One object as listed: its key below the job's root and when it was
/// last written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub key: String,
    pub modified_ms: i64,
    pub size: u64,
}

/// The job's folder of shared checkpoint storage.
pub struct SharedStorage {
    store: Arc<dyn ObjectStore>,
    root: Path,
    /// What the location looks like to a person, for messages.
    pub location: String,
    runtime: tokio::runtime::Runtime,
    /// The job's folder, for a shared folder: puts go through
    /// [`durable_put`].
    local: Option<PathBuf>,
}

impl SharedStorage {
    /// Opens `checkpoint.dir` for the configured job.
    pub fn open(c: &Config) -> Result<Self> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| WeirError::io(FsPath::new("tokio runtime"), e))?;
        let (store, root, location): (Arc<dyn ObjectStore>, Path, String) = match c.checkpoint_url()
        {
            Some(url) => {
                let rest = url.trim_start_matches("s3://");
                let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
                let mut b = object_store::aws::AmazonS3Builder::from_env().with_bucket_name(bucket);
                if let Some(s3) = &c.checkpoint.s3 {
                    if let Some(v) = &s3.endpoint {
                        b = b.with_endpoint(v);
                    }
                    if let Some(v) = &s3.region {
                        b = b.with_region(v);
                    }
                    if let Some(v) = &s3.access_key_id {
                        b = b.with_access_key_id(v);
                    }
                    if let Some(v) = &s3.secret_access_key {
                        b = b.with_secret_access_key(v);
                    }
                    b = b.with_allow_http(s3.allow_http);
                }
                let store = b
                    .build()
                    .map_err(|e| WeirError::Recovery(format!("checkpoint.dir {url:?}: {e}")))?;
                let root = Path::from(prefix).child(c.job.name.as_str());
                (Arc::new(store), root, format!("{url}/{}", c.job.name))
            }
            None => return Self::folder(c.checkpoint.dir.join(&c.job.name)),
        };
        Ok(Self {
            store,
            root,
            location,
            runtime,
            local: None,
        })
    }

    /// A job's folder `dir` on a (shared) file system.
    fn folder(dir: PathBuf) -> Result<Self> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| WeirError::io(FsPath::new("tokio runtime"), e))?;
        crate::checkpoint::store::create_private_dir(&dir)?;
        let store = object_store::local::LocalFileSystem::new_with_prefix(&dir)
            .map_err(|e| WeirError::Recovery(format!("{}: {e}", dir.display())))?;
        Ok(Self {
            store: Arc::new(store),
            root: Path::default(),
            location: dir.display().to_string(),
            runtime,
            local: Some(dir),
        })
    }

    fn path(&self, key: &str) -> Path {
        let mut p = self.root.clone();
        for part in key.split('/') {
            p = p.child(part);
        }
        p
    }

    fn error(&self, what: &str, key: &str, e: object_store::Error) -> WeirError {
        WeirError::Storage {
            location: format!("{}/{key}", self.location),
            what: what.to_string(),
            reason: e.to_string(),
        }
    }

    /// Writes `bytes` at `key` (which no other writer uses), durably once
    /// it returns.
    pub fn put(&self, key: &str, bytes: Vec<u8>) -> Result<()> {
        if let Some(dir) = &self.local {
            return durable_put(dir, key, &bytes);
        }
        let path = self.path(key);
        self.runtime
            .block_on(self.store.put(&path, PutPayload::from(bytes)))
            .map(|_| ())
            .map_err(|e| self.error("write", key, e))
    }

    /// Writes the file at `source` to `key` (which no other writer uses),
    /// durably once it returns, streamed: read in chunks, never whole (an
    /// SST file is tens of megabytes). Returns its size and CRC-32, of the
    /// bytes as read.
    pub fn put_file(&self, key: &str, source: &FsPath) -> Result<(u64, u32)> {
        let mut file = fs::File::open(source).map_err(|e| WeirError::io(source, e))?;
        let mut crc = crc32fast::Hasher::new();
        let mut size = 0u64;
        let mut buf = vec![0u8; CHUNK];
        if let Some(dir) = &self.local {
            let mut read_error = None;
            let written = durable_write(dir, key, |out| loop {
                let n = match read_chunk(&mut file, &mut buf) {
                    Ok(n) => n,
                    Err(e) => {
                        read_error = Some(WeirError::io(
                            source,
                            std::io::Error::new(e.kind(), e.to_string()),
                        ));
                        return Err(e);
                    }
                };
                if n == 0 {
                    return Ok(());
                }
                crc.update(&buf[..n]);
                size += n as u64;
                out.write_all(&buf[..n])?;
            });
            if let Some(e) = read_error {
                return Err(e);
            }
            written?;
            return Ok((size, crc.finalize()));
        }
        let len = file.metadata().map_err(|e| WeirError::io(source, e))?.len();
        if len <= PART as u64 {
            let mut bytes = Vec::with_capacity(len as usize);
            std::io::Read::read_to_end(&mut file, &mut bytes)
                .map_err(|e| WeirError::io(source, e))?;
            let out = (bytes.len() as u64, crc32fast::hash(&bytes));
            self.put(key, bytes)?;
            return Ok(out);
        }
        // Multipart: parts of PART bytes, at most two in flight, so that
        // memory stays a few parts whatever the file's size.
        let path = self.path(key);
        let uploaded: std::result::Result<(), WeirError> = self.runtime.block_on(async {
            let upload = self
                .store
                .put_multipart(&path)
                .await
                .map_err(|e| self.error("write", key, e))?;
            let mut w = object_store::WriteMultipart::new_with_chunk_size(upload, PART);
            loop {
                let n = match read_chunk(&mut file, &mut buf) {
                    Ok(n) => n,
                    Err(e) => {
                        let _ = w.abort().await;
                        return Err(WeirError::io(source, e));
                    }
                };
                if n == 0 {
                    break;
                }
                crc.update(&buf[..n]);
                size += n as u64;
                if let Err(e) = w.wait_for_capacity(2).await {
                    return Err(self.error("write", key, e));
                }
                w.write(&buf[..n]);
            }
            w.finish().await.map_err(|e| self.error("write", key, e))?;
            Ok(())
        });
        uploaded?;
        Ok((size, crc.finalize()))
    }

    /// Reads `key`; `Ok(None)` when it does not exist.
    pub fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        let path = self.path(key);
        let got = self.runtime.block_on(async {
            let r = self.store.get(&path).await?;
            r.bytes().await
        });
        match got {
            Ok(b) => Ok(Some(b.to_vec())),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.error("read", key, e)),
        }
    }

    /// Reads `key` into a new file at `target`, streamed (never whole in
    /// memory); `Ok(None)` when the object does not exist. Returns its size
    /// and CRC-32. Not fsynced: a local copy is checked against its
    /// manifest before a later process links it.
    pub fn get_to_file(&self, key: &str, target: &FsPath) -> Result<Option<(u64, u32)>> {
        let path = self.path(key);
        let mut out = fs::File::create(target).map_err(|e| WeirError::io(target, e))?;
        let mut crc = crc32fast::Hasher::new();
        let mut size = 0u64;
        let read: std::result::Result<bool, WeirError> = self.runtime.block_on(async {
            let got = match self.store.get(&path).await {
                Ok(g) => g,
                Err(object_store::Error::NotFound { .. }) => return Ok(false),
                Err(e) => return Err(self.error("read", key, e)),
            };
            let mut stream = got.into_stream();
            while let Some(chunk) = stream
                .try_next()
                .await
                .map_err(|e| self.error("read", key, e))?
            {
                crc.update(&chunk);
                size += chunk.len() as u64;
                out.write_all(&chunk)
                    .map_err(|e| WeirError::io(target, e))?;
            }
            Ok(true)
        });
        match read {
            Ok(true) => Ok(Some((size, crc.finalize()))),
            Ok(false) => {
                drop(out);
                let _ = fs::remove_file(target);
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Every object below `prefix` (a folder key such as `tasks/0003`).
    pub fn list(&self, prefix: &str) -> Result<Vec<Listed>> {
        let path = self.path(prefix);
        let root_parts = self.root.parts().count();
        let listed: Vec<object_store::ObjectMeta> = self
            .runtime
            .block_on(self.store.list(Some(&path)).try_collect())
            .map_err(|e| self.error("list", prefix, e))?;
        Ok(listed
            .into_iter()
            .map(|m| Listed {
                key: m
                    .location
                    .parts()
                    .skip(root_parts)
                    .map(|p| p.as_ref().to_string())
                    .collect::<Vec<_>>()
                    .join("/"),
                modified_ms: m.last_modified.timestamp_millis(),
                size: m.size,
            })
            .collect())
    }

    /// Deletes `key`; a missing object is not an error.
    pub fn delete(&self, key: &str) -> Result<()> {
        let path = self.path(key);
        match self.runtime.block_on(self.store.delete(&path)) {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(self.error("delete", key, e)),
        }
    }
}

/// Writes `bytes` at `key` below the folder `dir` so that they survive a
/// crash of this machine or of the file server once this returns: into a
/// staging file beside the key (`<name>#<digits>`, which listings skip, as
/// `object_store`'s own staging files), fsynced, renamed over the key; then
/// the key's folder fsynced, and the parent of every folder this put
/// created. Every error is returned, naming the path.
pub(crate) fn durable_put(dir: &FsPath, key: &str, bytes: &[u8]) -> Result<()> {
    durable_write(dir, key, |file| file.write_all(bytes))
}

/// [`durable_put`] with the bytes written by `write` into the staging file
/// (an error of `write`'s is reported on the staging file; one reading a
/// source must name its source itself).
fn durable_write(
    dir: &FsPath,
    key: &str,
    write: impl FnOnce(&mut fs::File) -> std::io::Result<()>,
) -> Result<()> {
    use crate::checkpoint::store::sync_dir;
    let path = key
        .split('/')
        .fold(dir.to_path_buf(), |p, part| p.join(part));
    let folder = path.parent().expect("a key below the job's folder");
    let mut created = Vec::new();
    let mut f = folder;
    while !f.exists() && f != dir {
        created.push(f.to_path_buf());
        f = f.parent().expect("below the job's folder");
    }
    fs::create_dir_all(folder).map_err(|e| WeirError::io(folder, e))?;
    static STAGED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = STAGED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = path
        .file_name()
        .expect("a key names a file")
        .to_string_lossy();
    let staging = folder.join(format!("{name}#{}{n}", std::process::id()));
    let written = fs::File::create(&staging).and_then(|mut file| {
        write(&mut file)?;
        #[cfg(test)]
        crate::checkpoint::store::synced::record(&staging);
        file.sync_all()
    });
    if let Err(e) = written {
        let _ = fs::remove_file(&staging);
        return Err(WeirError::io(&staging, e));
    }
    if let Err(e) = fs::rename(&staging, &path) {
        let _ = fs::remove_file(&staging);
        return Err(WeirError::io(&path, e));
    }
    sync_dir(folder)?;
    // Outermost last: each new folder's entry in its parent.
    for c in &created {
        sync_dir(c.parent().expect("below the job's folder"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::store::synced;

    /// A put on a shared folder fsyncs the bytes before they take the key's
    /// name, then the key's folder and the parent of every folder it
    /// created; nothing of the staging is left or listed.
    #[test]
    fn a_put_on_a_shared_folder_is_durable_before_it_returns() {
        let tmp = tempfile::tempdir().unwrap();
        let job = tmp.path().join("job");
        let storage = SharedStorage::folder(job.clone()).unwrap();
        synced::take();
        let key = "stages/count/0001/manifests/0000000000001-i0-w-00000001.json";
        storage.put(key, b"{\"a\":1}".to_vec()).unwrap();
        let synced = synced::take();
        let folder = job.join("stages/count/0001/manifests");
        // The staged bytes, then the key's folder, then the new folders'
        // parents.
        assert_eq!(synced[0].parent(), Some(folder.as_path()), "{synced:?}");
        assert!(synced[0].to_string_lossy().contains(".json#"), "{synced:?}");
        assert_eq!(synced[1], folder, "{synced:?}");
        for created in [
            "stages/count/0001/manifests",
            "stages/count/0001",
            "stages/count",
            "stages",
        ] {
            let parent = job.join(created).parent().unwrap().to_path_buf();
            assert!(synced.contains(&parent), "{parent:?} not in {synced:?}");
        }
        assert_eq!(storage.get(key).unwrap().unwrap(), b"{\"a\":1}");
        let listed: Vec<String> = storage
            .list("stages")
            .unwrap()
            .into_iter()
            .map(|l| l.key)
            .collect();
        assert_eq!(listed, vec![key.to_string()]);
        assert_eq!(fs::read_dir(&folder).unwrap().count(), 1);

        // A second put into the folder syncs only the folder, and a put
        // that cannot write says where.
        storage
            .put("stages/count/0001/manifests/b.json", b"2".to_vec())
            .unwrap();
        let synced = synced::take();
        assert_eq!(synced.last(), Some(&folder), "{synced:?}");
        fs::write(job.join("stages/blocked"), b"a file, not a folder").unwrap();
        let e = storage
            .put("stages/blocked/x", b"3".to_vec())
            .unwrap_err()
            .to_string();
        assert!(e.contains("stages/blocked"), "{e}");
    }
}
