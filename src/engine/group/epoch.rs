//! The epoch's end: every chain's output sent, each changed task
//! snapshotted, its files uploaded off the poll thread and its manifest
//! written, then one transaction commits it all (`engine::group::protocol::run_epoch`).
//! Runs on the instance's thread: from the loop when the epoch is due, and
//! inside a revocation callback, which commits before partitions go.

use std::fs;
use std::time::Instant;

use rdkafka::consumer::Consumer;
use tracing::{debug, error, info, warn};

use super::checkpoints;
use super::manifest::{self, GraphTaskState, ManifestFile, TaskManifest};
use super::protocol::{run_epoch, Committed, EpochWork};
use crate::engine::chain::SlotBody;
use crate::error::{Result, WeirError};
use crate::runtime::commit::{CommitOffsets, CommitPoint};
use crate::state::key_groups::range_for_subtask;

use super::task::{GraphTask, Staged, TaskEpochEnd};
use super::{housekeeper, Consumer_, GraphInstance, HOUSEKEEPING_INTERVAL, JOURNAL_LIMIT, STAGING};

impl GraphInstance {
    /// The epoch's checkpoint and commit (`engine::group::protocol::run_epoch` over
    /// this instance's [`EpochWork`]), when anything changed. While a
    /// declined checkpoint's files are still uploading, no new one starts
    /// (it would only wait for the same files) unless `forced` (a
    /// revocation, the stop): the open transaction is renewed when it
    /// nears its timeout instead.
    ///
    /// Runs on the instance's thread: the loop (the epoch is due, before an
    /// activation, at the stop) and the revocation callback (forced).
    pub(super) fn commit(&mut self, consumer: &Consumer_, forced: bool) -> Result<()> {
        self.announce(consumer);
        // Housekeeping after this call covers only what it commits:
        // nothing, if it commits nothing (a stop with an empty epoch).
        self.epoch.collectable.clear();
        if !self.epoch.dirty {
            return Ok(());
        }
        if !forced && self.waiting_for_uploads() {
            if self.renewal_due() {
                self.renew()?;
            }
            return Ok(());
        }
        let started = Instant::now();
        self.commit.set_group(consumer.group_metadata());
        let commit = self.commit.clone();
        let instance = self.config.instance().to_string();
        self.epoch.forcing = forced;
        let budget = self.epoch.budget;
        let (outcome, offsets) = run_epoch(self, consumer, &*commit, &instance, &budget)?;
        match outcome {
            Committed::Declined { renewed } => {
                self.metrics.checkpoints_declined.inc();
                if renewed {
                    // `run_epoch` renewed it; how long that took is not known here.
                    self.note_renewal(None);
                }
                if forced {
                    return Err(WeirError::Task {
                        task: "checkpoint".into(),
                        reason: format!(
                            "the epoch's checkpoint files were not on storage within \
                             checkpoint.timeout ({:?}) and the partitions are being taken away or \
                             the instance is stopping: nothing of the epoch is committed, its \
                             partitions resume from their last committed checkpoint",
                            self.config.checkpoint.timeout
                        ),
                    });
                }
                self.epoch.behind = true;
            }
            Committed::Refused(_) => {
                self.metrics.transactions_aborted.inc();
                self.metrics.commits_refused.inc();
                let mut o = self.ownership.lock().expect("ownership lock");
                o.commits_refused += 1;
                o.commits_refused_in_a_row += 1;
                let in_a_row = o.commits_refused_in_a_row;
                drop(o);
                if in_a_row.is_multiple_of(10) {
                    error!(
                        in_a_row,
                        "the group refused this instance's last {in_a_row} commits: it makes no \
                         progress while the group keeps rebalancing (instances joining and \
                         leaving, or one stalling past its session timeout)"
                    );
                }
            }
            Committed::Yes => {
                self.ownership
                    .lock()
                    .expect("ownership lock")
                    .commits_refused_in_a_row = 0;
                self.metrics.transactions_committed.inc();
                self.metrics.checkpoint_completed(
                    self.epoch
                        .committed
                        .load(std::sync::atomic::Ordering::Relaxed),
                    started.elapsed().as_secs_f64(),
                    self.epoch.uploaded_bytes,
                );
                debug!(
                    partitions = offsets.len(),
                    uploaded_bytes = self.epoch.uploaded_bytes,
                    took_ms = started.elapsed().as_millis() as u64,
                    "epoch committed"
                );
                self.epoch.uploaded_bytes = 0;
                if self.epoch.last_housekeeping.elapsed() >= HOUSEKEEPING_INTERVAL {
                    self.housekeeping(false);
                }
            }
        }
        Ok(())
    }

    /// Whether the open transaction must be renewed now to stay inside
    /// `transaction.timeout.ms` (while a late checkpoint uploads).
    ///
    /// Runs on the instance's thread: the loop and `commit`, while a declined
    /// checkpoint's files upload.
    pub(super) fn renewal_due(&self) -> bool {
        self.commit
            .transaction_age()
            .is_some_and(|age| self.epoch.budget.must_renew(age))
    }

    /// Aborts the open transaction and begins another with the same
    /// output (the producer's journal).
    ///
    /// Runs on the instance's thread: `commit` and `wait_for_uploads`.
    pub(super) fn renew(&mut self) -> Result<()> {
        let started = Instant::now();
        self.commit.renew()?;
        self.note_renewal(Some(started.elapsed()));
        Ok(())
    }

    /// Counts and logs a renewal (this instance's, or `run_epoch`'s when
    /// it declined a checkpoint), and how long it took when known.
    ///
    /// Runs on the instance's thread: `commit` and `renew`.
    pub(super) fn note_renewal(&self, took: Option<std::time::Duration>) {
        self.metrics.transactions_renewed.inc();
        info!(
            bytes = self.producer.journal_bytes(),
            took_ms = ?took.map(|t| t.as_millis() as u64),
            "transaction renewed: its output waits for a checkpoint still uploading"
        );
    }

    /// A declined checkpoint's files are still uploading and the output
    /// held is below its bound: no new checkpoint starts yet (it would
    /// only wait for the same files).
    ///
    /// Runs on the instance's thread: the loop (`due`) and `commit`.
    pub(super) fn waiting_for_uploads(&mut self) -> bool {
        self.epoch.behind
            && !self.epoch.uploader.idle()
            && self.producer.journal_bytes() < JOURNAL_LIMIT
    }

    /// Tests: every store compacted whole right after a commit, once, when
    /// the file the failpoint names exists (it is removed): a large
    /// compaction's files for the next checkpoints to upload. (RocksDB
    /// compacts on its own threads; this one runs on the poll thread,
    /// between two epochs, with nothing in the open transaction.)
    ///
    /// Runs on the instance's thread: after a commit (failpoints builds only).
    #[cfg(feature = "failpoints")]
    pub(super) fn compact_on_request(&mut self) {
        let requested = fail::eval("group-compact-after-commit", |path| {
            path.is_some_and(|p| fs::remove_file(p).is_ok())
        })
        .unwrap_or(false);
        if !requested {
            return;
        }
        for task in self.tasks.values_mut() {
            for slot in &mut task.core.chain.slots {
                let SlotBody::Operator { ctx, .. } = &mut slot.body else {
                    continue;
                };
                let Some(store) = ctx.store_mut() else {
                    continue;
                };
                let started = Instant::now();
                match store.compact() {
                    Ok(()) => info!(
                        task = task.id,
                        took_ms = started.elapsed().as_millis() as u64,
                        "store compacted whole (failpoint)"
                    ),
                    Err(e) => warn!(task = task.id, error = %e.report(), "compaction failed"),
                }
            }
            // Its next snapshot has the new files.
            task.changed = true;
        }
        // As the next look would, within a second.
        self.upload_new_files();
    }

    /// Queues for upload the SST files RocksDB wrote since the last look
    /// in the stores of tasks that changed, each through a hard link in
    /// the task's staging folder: a snapshot that includes them finds them
    /// stored or on their way. Best effort: a failure is logged, and the
    /// snapshot queues what is missing.
    ///
    /// Runs on the instance's thread: the loop, every `EAGER_UPLOAD_INTERVAL`.
    pub(super) fn upload_new_files(&mut self) {
        self.epoch.last_eager_upload = Instant::now();
        let prefixes: Vec<((usize, u32), String)> = self
            .tasks
            .iter()
            .filter(|(_, t)| t.changed)
            .map(|(k, _)| (*k, manifest::stage_task_prefix(self.head_uid(k.0), k.1)))
            .collect();
        for (key, prefix) in prefixes {
            let task = self.tasks.get_mut(&key).expect("listed");
            let staging = task.dir.join(STAGING);
            let (mut queued, mut queued_bytes) = (0usize, 0u64);
            for slot in &mut task.core.chain.slots {
                let SlotBody::Operator { ctx, .. } = &mut slot.body else {
                    continue;
                };
                let Some(store) = ctx.store_mut() else {
                    continue;
                };
                let (db, live) = match store.live_sst_files() {
                    Ok(l) => l,
                    Err(e) => {
                        warn!(task = key.1, error = %e.report(), "listing a store's files failed");
                        continue;
                    }
                };
                for (file, size) in live {
                    let name = format!("{}/{file}", slot.uid);
                    if task
                        .uploaded
                        .get(&name)
                        .is_some_and(|m| m.size_bytes == size)
                        || task.uploading.contains_key(&name)
                    {
                        continue;
                    }
                    let link = staging.join(&name);
                    let linked = link
                        .parent()
                        .map_or(Ok(()), fs::create_dir_all)
                        .and_then(|()| match fs::hard_link(db.join(&file), &link) {
                            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
                            r => r,
                        });
                    match linked {
                        Ok(()) => {
                            let k = manifest::file_key(&prefix, &task.writer, 0, &name);
                            self.epoch.uploader.submit(&k, link);
                            task.uploading.insert(name, (k, size));
                            queued += 1;
                            queued_bytes += size;
                        }
                        // Compacted away since it was listed.
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                        Err(e) => {
                            warn!(task = key.1, file = %name, error = %e, "linking a file for upload failed")
                        }
                    }
                }
            }
            if queued > 0 {
                debug!(
                    stage = key.0,
                    task = key.1,
                    files = queued,
                    bytes = queued_bytes,
                    "new SST files queued for upload before their checkpoint"
                );
            }
        }
    }

    /// Ends the task's epoch; snapshots it if it changed and queues the
    /// files storage lacks for upload. None: no offset to commit.
    ///
    /// Runs on the instance's thread: the epoch's end (`prepare`), per task.
    pub(super) fn stage_task(&mut self, task: &mut GraphTask) -> Result<Option<TaskEpochEnd>> {
        task.core.chain.end_epoch()?;
        let Some(next) = task.next else {
            return Ok(None);
        };
        if !task.changed {
            if let Some(p) = &task.pointer {
                return Ok(Some(TaskEpochEnd::Unchanged(next, p.clone())));
            }
        }
        task.harvest(&mut self.epoch.uploader, &mut self.epoch.uploaded_bytes);
        self.epoch.seq += 1;
        let seq = self.epoch.seq;
        let target = task
            .dir
            .join("snapshots")
            .join(format!("{}-{seq:08}", task.writer));
        fs::create_dir_all(&target).map_err(|e| WeirError::io(&target, e))?;
        let files = task.core.snapshot(|uid| Ok(target.join(uid)))?.files();
        let prefix = manifest::stage_task_prefix(self.head_uid(task.stage), task.id);
        let mut staged = Vec::with_capacity(files.len());
        for f in files {
            let sst = f.name.ends_with(".sst");
            let stored = task
                .uploaded
                .get(&f.name)
                .filter(|m| sst && m.size_bytes == f.size_bytes)
                .map(|m| m.key.clone());
            let queued = task
                .uploading
                .get(&f.name)
                .filter(|(_, size)| sst && *size == f.size_bytes)
                .map(|(key, _)| key.clone());
            let key = match stored.or(queued) {
                Some(key) => key,
                None => {
                    let key = manifest::file_key(&prefix, &task.writer, seq, &f.name);
                    self.epoch.uploader.submit(&key, target.join(&f.name));
                    if sst {
                        task.uploading
                            .insert(f.name.clone(), (key.clone(), f.size_bytes));
                    }
                    key
                }
            };
            staged.push((f.name, key));
        }
        Ok(Some(TaskEpochEnd::Staged(Staged {
            key: (task.stage, task.id),
            next,
            seq,
            target,
            files: staged,
        })))
    }

    /// Waits for the uploads of `keys`, as long as the epoch may last: at
    /// most `checkpoint.timeout`, and no longer than the open transaction
    /// can wait for its commit. Whether all are done. With more output
    /// held than [`JOURNAL_LIMIT`] it waits on until they are (no more
    /// input is read meanwhile), and `forced` up to `checkpoint.timeout` in
    /// all, renewing the transaction whenever it nears its timeout.
    ///
    /// Runs on the instance's thread: the epoch's end (`prepare`).
    pub(super) fn wait_for_uploads(&mut self, keys: &[String], forced: bool) -> Result<bool> {
        let started = Instant::now();
        let age = self.commit.transaction_age().unwrap_or_default();
        if self
            .epoch
            .uploader
            .wait(keys, started + self.epoch.budget.ack_deadline(age))
        {
            return Ok(true);
        }
        let timeout = self.config.checkpoint.timeout;
        let held = self.producer.journal_bytes();
        if forced {
            if started.elapsed() >= timeout {
                return Ok(false);
            }
        } else if held < JOURNAL_LIMIT {
            return Ok(false);
        } else {
            warn!(
                held_bytes = held,
                "the output held for a late checkpoint reached its bound: reading no more input \
                 until the checkpoint is on storage"
            );
        }
        loop {
            let age = self.commit.transaction_age().unwrap_or_default();
            let renewal = self
                .epoch
                .budget
                .transaction_timeout
                .saturating_sub(age + 2 * self.epoch.budget.margin());
            let mut until = Instant::now() + renewal;
            if forced {
                until = until.min(started + timeout);
            }
            if self.epoch.uploader.wait(keys, until) {
                return Ok(true);
            }
            if forced && started.elapsed() >= timeout {
                return Ok(false);
            }
            if self.renewal_due() {
                self.renew()?;
            }
        }
    }

    /// Writes the manifest of a task whose files are all on storage;
    /// returns its offset and pointer.
    ///
    /// Runs on the instance's thread: the epoch's end (`prepare`), per staged
    /// task.
    pub(super) fn finish_task(&mut self, staged: Staged) -> Result<(i64, String)> {
        let mut task = self.tasks.remove(&staged.key).expect("a staged task");
        let result = self.write_task_manifest(&mut task, staged);
        self.tasks.insert((task.stage, task.id), task);
        result
    }

    /// Runs on the instance's thread: the epoch's end, from `finish_task`.
    pub(super) fn write_task_manifest(
        &mut self,
        task: &mut GraphTask,
        staged: Staged,
    ) -> Result<(i64, String)> {
        task.harvest(&mut self.epoch.uploader, &mut self.epoch.uploaded_bytes);
        let mut files = Vec::with_capacity(staged.files.len());
        for (name, key) in staged.files {
            if let Some(m) = task.uploaded.get(&name).filter(|m| m.key == key) {
                files.push(m.clone());
                continue;
            }
            match self.epoch.uploader.take(&key) {
                Some(Ok((size_bytes, crc32))) => {
                    self.epoch.uploaded_bytes += size_bytes;
                    files.push(ManifestFile {
                        name,
                        key,
                        size_bytes,
                        crc32,
                    });
                }
                Some(Err(e)) => return Err(e),
                None => {
                    return Err(WeirError::Task {
                        task: format!("stage {} task {}", task.stage, task.id),
                        reason: format!(
                            "the upload of {name} (object {key}) was lost before its manifest \
                             was written"
                        ),
                    })
                }
            }
        }
        let c = &self.config;
        let head = self.head_uid(task.stage).to_string();
        let m = TaskManifest {
            format: manifest::FORMAT,
            job: c.job.name.clone(),
            operator_uid: head.clone(),
            task: task.id,
            tasks: c.scale.tasks,
            key_groups: range_for_subtask(task.id, c.scale.tasks, c.job.max_parallelism),
            max_parallelism: c.job.max_parallelism,
            instance: c.instance().to_string(),
            writer: task.writer.clone(),
            seq: staged.seq,
            created_ms: crate::observe::now_ms(),
            offset: staged.next,
            files,
            graph: Some(GraphTaskState {
                stage: head,
                tables: self.stage_tables[task.stage].clone(),
                watermarks: task.core.marks.snapshot(),
                operators: self.stage_operators[task.stage].clone(),
            }),
        };
        let key = checkpoints::write_manifest(&self.storage, &m, &staged.target)?;
        task.pointer = Some(key.clone());
        Ok((staged.next, key))
    }

    /// Garbage collection of owned tasks' storage and trimming of their
    /// repartition partitions. Failures are logged: the next run retries.
    /// A round of storage collection and repartition trimming for the
    /// tasks whose offsets the last commit carried (`collectable`), on the
    /// housekeeper's thread; the stop path's final round is waited for.
    ///
    /// Runs on the instance's thread: after a commit, and the stop.
    pub(super) fn housekeeping(&mut self, stopping: bool) {
        self.epoch.last_housekeeping = Instant::now();
        let mut round = housekeeper::Round {
            stopping,
            ..Default::default()
        };
        for key in std::mem::take(&mut self.epoch.collectable) {
            let Some(task) = self.tasks.get(&key) else {
                continue;
            };
            let (Some(committed), Some(next)) = (task.committed.clone(), task.next) else {
                continue;
            };
            let (stage, id) = key;
            round.collect.push(housekeeper::Collect {
                stage,
                task: id,
                prefix: manifest::stage_task_prefix(self.head_uid(stage), id),
                committed,
            });
            round
                .trim
                .entry(self.plan.stages[stage].topic.clone())
                .or_default()
                .push((id as i32, next));
        }
        if stopping {
            self.epoch.housekeeper.finish(round);
        } else if !round.collect.is_empty() {
            self.epoch.housekeeper.offer(round);
        }
    }
}

/// The epoch's end on this instance's input partitions and tasks.
impl EpochWork for GraphInstance {
    /// Marks out, every chain's epoch ended, each changed task
    /// snapshotted and uploaded with its manifest; None when the uploads
    /// did not finish in time (the epoch is declined).
    fn prepare(&mut self) -> Result<Option<CommitOffsets>> {
        self.push_batches()?;
        self.send_source_marks()?;
        for c in &mut self.sources.chains {
            c.end_epoch()?;
        }
        for d in &mut self.dead_letters {
            d.flush_batch()?;
        }
        let mut offsets = CommitOffsets::default();
        for ((t, p), input) in &self.sources.partitions {
            if let Some(o) = input.next {
                offsets.insert(t, *p, o, String::new());
            }
        }
        let keys: Vec<(usize, u32)> = self.tasks.keys().copied().collect();
        let mut staged = Vec::new();
        for key in keys {
            let mut task = self.tasks.remove(&key).expect("task listed");
            let result = self.stage_task(&mut task);
            self.tasks.insert(key, task);
            match result? {
                None => {}
                Some(TaskEpochEnd::Unchanged(next, pointer)) => {
                    let topic = &self.plan.stages[key.0].topic;
                    offsets.insert(topic, key.1 as i32, next, manifest::pointer(&pointer));
                }
                Some(TaskEpochEnd::Staged(s)) => staged.push(s),
            }
        }
        let waiting: Vec<String> = staged
            .iter()
            .flat_map(|s| s.files.iter().map(|(_, key)| key.clone()))
            .collect();
        let forced = self.epoch.forcing;
        if !self.wait_for_uploads(&waiting, forced)? {
            let late: Vec<&String> = waiting
                .iter()
                .filter(|k| self.epoch.uploader.is_in_flight(k))
                .collect();
            warn!(
                files = late.len(),
                first = ?late.first(),
                timeout_ms = self.config.checkpoint.timeout.as_millis() as u64,
                "checkpoint declined: its files are still uploading; the epoch's output waits \
                 for a later checkpoint (the uploads go on)"
            );
            return Ok(None);
        }
        for s in staged {
            let key = s.key;
            let (next, pointer) = self.finish_task(s)?;
            let topic = &self.plan.stages[key.0].topic;
            offsets.insert(topic, key.1 as i32, next, manifest::pointer(&pointer));
        }
        Ok(Some(offsets))
    }

    fn committed(&mut self, offsets: &CommitOffsets) {
        self.epoch
            .committed
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.epoch.dirty = false;
        self.epoch.behind = false;
        for task in self.tasks.values_mut() {
            task.harvest(&mut self.epoch.uploader, &mut self.epoch.uploaded_bytes);
            task.clean_staging();
        }
        // Files of declined checkpoints that this one did not need.
        self.epoch.uploader.forget_finished();
        self.epoch.last_commit = Instant::now();
        let stage_of_topic = &self.stage_of_topic;
        self.epoch.collectable = offsets
            .iter()
            .filter_map(|((t, p), _)| Some((*stage_of_topic.get(t)?, *p as u32)))
            .collect();
        for task in self.tasks.values_mut() {
            task.committed = task.pointer.clone();
            task.changed = false;
            if let (false, Some(pointer)) = (task.marked, &task.committed) {
                // Once per task and incarnation: from now on a lost offset
                // of this task is refused, not started over.
                match self.storage.put(&task.marker, pointer.clone().into_bytes()) {
                    Ok(()) => task.marked = true,
                    Err(e) => {
                        warn!(task = task.id, marker = %task.marker, error = %e.report(), "writing the task's committed marker failed; retried at the next commit")
                    }
                }
            }
            checkpoints::remove_stale_snapshots(
                &task.dir.join("snapshots"),
                task.committed.as_deref(),
            );
        }
        self.publish_ownership();
        #[cfg(feature = "failpoints")]
        self.compact_on_request();
    }

    /// Every partition back to its committed offset and state, without
    /// leaving the group.
    fn rewind(&mut self) {
        // What the chains gathered belonged to the aborted epoch, and so
        // did what is uploading.
        self.epoch.uploader.cancel();
        self.epoch.behind = false;
        self.build_source_chains();
        // Closes each RocksDB before its restore opens the same folder.
        let tasks = std::mem::take(&mut self.tasks);
        for (stage, id) in tasks.keys() {
            self.assignment
                .pending
                .push((self.plan.stages[*stage].topic.clone(), *id as i32));
        }
        drop(tasks);
        let inputs = std::mem::take(&mut self.sources.partitions);
        self.assignment.pending.extend(inputs.into_keys());
        self.epoch.dirty = false;
        self.epoch.last_commit = Instant::now();
        self.publish_ownership();
    }
}
