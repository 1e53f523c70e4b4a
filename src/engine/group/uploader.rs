//! Task checkpoint files uploaded off the poll thread (issue #18, hole 4).
//!
//! An epoch's end snapshots each changed task locally (RocksDB checkpoints:
//! hard links, milliseconds) and hands the files storage lacks to this
//! thread, which streams them to storage one after the other
//! (`SharedStorage::put_file`: chunks, multipart parts on S3). The poll
//! thread waits for them only as long as the epoch may last
//! (`checkpoint.timeout`, less when the open transaction would reach
//! `transaction.timeout.ms` first); an epoch whose files are not all there
//! by then is declined and its output waits, in the renewed transaction,
//! for a later epoch's checkpoint, while the uploads go on here. A large
//! compaction therefore costs a few declined epochs, never a fenced
//! producer, and the files it uploaded are referenced by the next manifest
//! instead of being uploaded again.
//!
//! Results are kept by object key until the instance takes them. A rewind
//! (a refused commit) or the end of the attempt cancels what is queued: a
//! job of an older generation is skipped, and a result of one is dropped.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use tracing::debug;

use super::storage::SharedStorage;
use crate::config::Config;
use crate::error::{Result, WeirError};

/// What became of one upload: the size and CRC-32 of the bytes stored.
pub type Outcome = std::result::Result<(u64, u32), WeirError>;

struct Job {
    generation: u64,
    key: String,
    path: PathBuf,
}

pub struct Uploader {
    jobs: Option<Sender<Job>>,
    done: Receiver<(u64, String, Outcome)>,
    /// Jobs of an older generation are skipped by the thread.
    generation: Arc<AtomicU64>,
    /// Keys submitted and not reported yet.
    in_flight: HashSet<String>,
    finished: HashMap<String, Outcome>,
    thread: Option<JoinHandle<()>>,
}

impl Uploader {
    /// Its own storage client, kept for the attempt, so that the poll
    /// thread's storage calls (manifests, markers) never queue behind an
    /// upload.
    pub fn start(config: &Config) -> Result<Self> {
        let storage = SharedStorage::open(config)?;
        let (jobs, queue) = channel::<Job>();
        let (report, done) = channel();
        let generation = Arc::new(AtomicU64::new(0));
        let current = generation.clone();
        let thread = std::thread::Builder::new()
            .name("weir-uploader".into())
            .spawn(move || {
                while let Ok(job) = queue.recv() {
                    if job.generation != current.load(Ordering::Acquire) {
                        continue;
                    }
                    let started = Instant::now();
                    let outcome = storage.put_file(&job.key, &job.path);
                    if let Ok((bytes, _)) = &outcome {
                        debug!(
                            key = %job.key,
                            bytes,
                            took_ms = started.elapsed().as_millis() as u64,
                            "checkpoint file uploaded"
                        );
                    }
                    if report.send((job.generation, job.key, outcome)).is_err() {
                        return;
                    }
                }
            })
            .expect("spawn the uploader thread");
        Ok(Self {
            jobs: Some(jobs),
            done,
            generation,
            in_flight: HashSet::new(),
            finished: HashMap::new(),
            thread: Some(thread),
        })
    }

    /// Queues the file at `path` for `key`, unless that key is already
    /// queued or uploaded.
    pub fn submit(&mut self, key: &str, path: PathBuf) {
        if self.in_flight.contains(key) || self.finished.contains_key(key) {
            return;
        }
        let Some(jobs) = &self.jobs else { return };
        let job = Job {
            generation: self.generation.load(Ordering::Acquire),
            key: key.to_string(),
            path,
        };
        if jobs.send(job).is_ok() {
            self.in_flight.insert(key.to_string());
        } else {
            self.finished.insert(key.to_string(), gone());
        }
    }

    fn record(&mut self, (generation, key, outcome): (u64, String, Outcome)) {
        if generation == self.generation.load(Ordering::Acquire) && self.in_flight.remove(&key) {
            self.finished.insert(key, outcome);
        }
    }

    /// Takes in what the thread reported, without waiting.
    pub fn collect(&mut self) {
        while let Ok(r) = self.done.try_recv() {
            self.record(r);
        }
    }

    /// Waits until every key of `keys` is reported or `until` passes;
    /// whether all were.
    pub fn wait(&mut self, keys: &[String], until: Instant) -> bool {
        self.collect();
        loop {
            if keys.iter().all(|k| !self.in_flight.contains(k)) {
                return true;
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            match self.done.recv_timeout(left) {
                Ok(r) => self.record(r),
                Err(RecvTimeoutError::Timeout) => return false,
                Err(RecvTimeoutError::Disconnected) => {
                    for k in keys {
                        if self.in_flight.remove(k) {
                            self.finished.insert(k.clone(), gone());
                        }
                    }
                    return true;
                }
            }
        }
    }

    /// Whether `key` is queued or being uploaded.
    pub fn is_in_flight(&self, key: &str) -> bool {
        self.in_flight.contains(key)
    }

    /// The outcome of `key`'s upload, once reported; taken.
    pub fn take(&mut self, key: &str) -> Option<Outcome> {
        self.finished.remove(key)
    }

    /// Nothing queued or being uploaded.
    pub fn idle(&mut self) -> bool {
        self.collect();
        self.in_flight.is_empty()
    }

    /// Forgets every queued upload and result: the thread skips what is
    /// queued, and the result of what it is uploading now is dropped.
    pub fn cancel(&mut self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.in_flight.clear();
        self.finished.clear();
        while self.done.try_recv().is_ok() {}
    }

    /// Forgets the results nobody took (files of declined checkpoints that
    /// no later one needed): once an epoch committed.
    pub fn forget_finished(&mut self) {
        self.finished.clear();
    }
}

/// The outcome of an upload the thread can no longer report.
fn gone() -> Outcome {
    Err(WeirError::Task {
        task: "uploader".into(),
        reason: "the uploader thread is gone".into(),
    })
}

impl Drop for Uploader {
    fn drop(&mut self) {
        // Queued jobs are skipped; the one running ends on its own (an
        // attempt that ends must not wait for storage).
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.jobs.take();
        self.thread.take();
    }
}
