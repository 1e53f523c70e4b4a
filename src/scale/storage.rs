//! Shared checkpoint storage for `scale.mode = "group"`: a path on a
//! shared file system or an `s3://bucket/prefix` location, both through
//! the `object_store` crate so that one code path serves both. Every
//! object of a job lives under `<location>/<job name>/`.
//!
//! `object_store` is async; the group runtime is a plain thread, so the
//! storage keeps a small runtime of its own and blocks on each call.

use std::path::Path as FsPath;
use std::sync::Arc;

use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, PutPayload};

use crate::config::Config;
use crate::error::{Result, WeirError};

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
            None => {
                let dir = c.checkpoint.dir.join(&c.job.name);
                crate::checkpoint::store::create_private_dir(&dir)?;
                let store = object_store::local::LocalFileSystem::new_with_prefix(&dir)
                    .map_err(|e| WeirError::Recovery(format!("{}: {e}", dir.display())))?;
                (Arc::new(store), Path::default(), dir.display().to_string())
            }
        };
        Ok(Self {
            store,
            root,
            location,
            runtime,
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

    /// Writes `bytes` at `key` (which no other writer uses).
    pub fn put(&self, key: &str, bytes: Vec<u8>) -> Result<()> {
        let path = self.path(key);
        self.runtime
            .block_on(self.store.put(&path, PutPayload::from(bytes)))
            .map(|_| ())
            .map_err(|e| self.error("write", key, e))
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
