//! One task of a stage that this instance owns: its [`TaskCore`] (the
//! chain, its writers' watermarks, the snapshot), where it has read its
//! repartition partition up to, its snapshot files on their way to
//! storage.

use std::collections::HashMap;
use std::fs;
use std::path::PathBuf;

use tracing::warn;

use super::manifest::ManifestFile;
use crate::dataflow::row::Row;
use crate::dataflow::{Record, RecordKey};
use crate::engine::core::{InputEvent, TaskCore};
use crate::error::{Refusal, Result};
use crate::state::key_groups::key_group;

use super::{uploader, STAGING};

/// One task of a stage this instance owns.
pub(super) struct GraphTask {
    pub(super) stage: usize,
    pub(super) id: u32,
    pub(super) core: TaskCore,
    pub(super) next: Option<i64>,
    /// The manifest of the last checkpoint taken, and of the last committed.
    pub(super) pointer: Option<String>,
    pub(super) committed: Option<String>,
    /// SST files on storage under this incarnation's writer, by name, and
    /// those queued for upload or being uploaded (name: object key, size).
    pub(super) uploaded: HashMap<String, ManifestFile>,
    pub(super) uploading: HashMap<String, (String, u64)>,
    /// Names this incarnation's objects (`engine::group::manifest::writer_id`).
    pub(super) writer: String,
    pub(super) changed: bool,
    pub(super) dir: PathBuf,
    /// The key of this task's committed marker in storage
    /// (`manifest::committed_marker`), and whether this incarnation wrote
    /// it.
    pub(super) marker: String,
    pub(super) marked: bool,
}

/// A task's snapshot of this epoch, its files on their way to storage.
pub(super) struct Staged {
    pub(super) key: (usize, u32),
    pub(super) next: i64,
    pub(super) seq: u64,
    pub(super) target: PathBuf,
    /// Each file's name and the object it is (or will be) stored as.
    pub(super) files: Vec<(String, String)>,
}

/// What a task's epoch end gives the commit.
pub(super) enum TaskEpochEnd {
    /// Nothing changed: its offset, with the pointer it had.
    Unchanged(i64, String),
    Staged(Staged),
}

impl GraphTask {
    /// Moves the uploads the uploader finished into the task's cache of
    /// stored files; forgets those that failed or were cancelled (a later
    /// snapshot that needs them queues them again).
    pub(super) fn harvest(&mut self, uploader: &mut uploader::Uploader, bytes: &mut u64) {
        let uploaded = &mut self.uploaded;
        self.uploading.retain(|name, (key, _)| {
            match uploader.take(key) {
                Some(Ok((size_bytes, crc32))) => {
                    *bytes += size_bytes;
                    uploaded.insert(
                        name.clone(),
                        ManifestFile {
                            name: name.clone(),
                            key: key.clone(),
                            size_bytes,
                            crc32,
                        },
                    );
                    false
                }
                Some(Err(e)) => {
                    warn!(file = %name, error = %e.report(), "a checkpoint file's upload failed; queued again when a snapshot needs it");
                    false
                }
                None => uploader.is_in_flight(key),
            }
        });
    }

    /// Removes the staging links of files no longer uploading (stored, or
    /// failed and dropped).
    pub(super) fn clean_staging(&self) {
        let staging = self.dir.join(STAGING);
        let Ok(uids) = fs::read_dir(&staging) else {
            return;
        };
        for uid in uids.flatten() {
            let Ok(files) = fs::read_dir(uid.path()) else {
                continue;
            };
            for f in files.flatten() {
                let name = format!(
                    "{}/{}",
                    uid.file_name().to_string_lossy(),
                    f.file_name().to_string_lossy()
                );
                if !self.uploading.contains_key(&name) {
                    let _ = fs::remove_file(f.path());
                }
            }
        }
    }

    /// One row read from the repartition topic at `at` into the batch
    /// for input `port`, checked to be of this task's key groups
    /// (`settings`: `job.max_parallelism` and `scale.tasks`).
    pub(super) fn apply(
        &mut self,
        port: usize,
        key: &[u8],
        timestamp: i64,
        row: Row,
        at: (&str, i32, i64),
        settings: (u32, u32),
    ) -> Result<()> {
        let (max_p, tasks) = settings;
        let kg = key_group(key, max_p);
        let owned = self.core.key_groups;
        if !(owned.0..owned.1).contains(&kg) {
            // Written by an instance with another job.max_parallelism or
            // scale.tasks: applying it would put the key's state where no
            // task of this job looks for it.
            let (topic, partition, offset) = at;
            return Err(Refusal::KeyGroupNotOwned {
                topic: topic.to_string(),
                partition,
                offset,
                key_group: kg,
                max_parallelism: max_p,
                task: self.id,
                key_groups: owned,
                tasks,
            }
            .into());
        }
        let record = Record {
            row,
            timestamp,
            key_group: kg,
            key: RecordKey::from_slice(key),
        };
        // Rows name no writer: only marks move the valve.
        self.core.on_input("", InputEvent::Row { port, record })
    }
}
