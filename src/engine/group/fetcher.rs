//! Local copies of task checkpoints, made ready on a thread of their own
//! before the tasks are restored.
//!
//! A restore by download is proportional to the task's state (minutes for
//! tens of gigabytes on a slow link), and checking an earlier process's
//! local copy reads all of it. Done on the poll thread, either would stop
//! the instance from polling for that long: past `max.poll.interval.ms`
//! librdkafka leaves the group, and the instance loses every partition it
//! has. Here the poll thread keeps reading, committing and answering while
//! the fetcher downloads (or verifies) the committed checkpoint into the
//! task's `snapshots/` folder; the task is then restored from that folder
//! by hard links, and only then resumed.

use std::path::PathBuf;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::thread::JoinHandle;

use tracing::info;

use super::checkpoints;
use super::storage::SharedStorage;
use crate::config::Config;
use crate::error::{Result, WeirError};

/// A task's committed checkpoint to have ready locally.
#[derive(Debug, Clone)]
pub struct Fetch {
    pub stage: usize,
    pub task: u32,
    /// Names the task in messages.
    pub label: String,
    /// The task's `snapshots/` folder.
    pub snapshots: PathBuf,
    /// The manifest its committed offset points to.
    pub key: String,
}

/// A fetch's outcome: the folder holding a complete local copy of `key`,
/// checked against the manifest's sizes and CRC-32s. The restore links
/// exactly that folder (another one naming the same checkpoint may be a
/// damaged copy).
#[derive(Debug)]
pub struct Fetched {
    pub stage: usize,
    pub task: u32,
    pub key: String,
    pub result: Result<PathBuf>,
}

pub struct Fetcher {
    jobs: Option<Sender<Fetch>>,
    done: Receiver<Fetched>,
    _thread: JoinHandle<()>,
}

impl Fetcher {
    /// Its own storage client, so that the poll thread's uploads never
    /// queue behind a download.
    pub fn start(config: &Config) -> Result<Self> {
        let storage = SharedStorage::open(config)?;
        let (jobs, rx) = channel::<Fetch>();
        let (tx, done) = channel::<Fetched>();
        let thread = std::thread::Builder::new()
            .name("weir-fetcher".into())
            .spawn(move || {
                while let Ok(f) = rx.recv() {
                    let result = prepare(&storage, &f);
                    let fetched = Fetched {
                        stage: f.stage,
                        task: f.task,
                        key: f.key,
                        result,
                    };
                    if tx.send(fetched).is_err() {
                        return;
                    }
                }
            })
            .map_err(|e| WeirError::io(std::path::Path::new("weir-fetcher thread"), e))?;
        Ok(Self {
            jobs: Some(jobs),
            done,
            _thread: thread,
        })
    }

    pub fn fetch(&self, f: Fetch) {
        if let Some(jobs) = &self.jobs {
            // The thread ends only when this sender goes.
            let _ = jobs.send(f);
        }
    }

    /// The fetches finished since the last call.
    pub fn finished(&self) -> Vec<Fetched> {
        self.done.try_iter().collect()
    }
}

impl Drop for Fetcher {
    fn drop(&mut self) {
        // The thread ends after its current fetch; not waited for.
        self.jobs.take();
    }
}

fn prepare(storage: &SharedStorage, f: &Fetch) -> Result<PathBuf> {
    let started = std::time::Instant::now();
    let m = checkpoints::load_manifest(storage, &f.label, &f.key)?;
    let (folder, how) = match checkpoints::local_copy(&f.snapshots, &f.key, &m, false) {
        Some(folder) => (folder, "local copy checked"),
        None => (
            checkpoints::download(storage, &f.snapshots, &f.label, &f.key, &m)?,
            "downloaded",
        ),
    };
    info!(
        stage = f.stage,
        task = f.task,
        checkpoint = %f.key,
        bytes = m.size_bytes(),
        how,
        took_ms = started.elapsed().as_millis() as u64,
        folder = %folder.display(),
        "checkpoint ready locally"
    );
    Ok(folder)
}
