//! Which partitions this instance owns: what a rebalance callback does when
//! the group takes partitions away or gives new ones (their positions, read
//! inside `poll`), and the restore of what was given, run by the loop
//! between polls (`activate`). Also the ownership this instance publishes,
//! and the fencing of owners that died.

use std::collections::BTreeSet;
use std::fs;
use std::path::PathBuf;
use std::time::Instant;

use rdkafka::consumer::Consumer;
use rdkafka::{Offset, TopicPartitionList};
use tracing::{debug, info, warn};

use super::manifest;
use super::poll::{committed_offsets, forget_lag, resume};
use super::protocol::{commit_before_revocation, restore_point, RestorePoint};
use crate::config::StartPosition;
use crate::error::{Refusal, Result, WeirError};
use crate::kafka::{self, REQUEST_TIMEOUT};
use crate::time::watermark::SourceWatermarks;

use super::{
    fetcher, list_offsets, source_spec, wire, Consumer_, GraphInstance, InputPartition, Placed,
    STAGING,
};

impl GraphInstance {
    /// Runs on the instance's thread: once an attempt starts, after each
    /// commit, rewind and activation (the loop), and in a revocation
    /// (callback).
    pub(super) fn publish_ownership(&self) {
        let mut o = self.ownership.lock().expect("ownership lock");
        o.instance = self.config.instance().to_string();
        o.inputs = self
            .sources
            .partitions
            .keys()
            .map(|(t, p)| format!("{t}/{p}"))
            .collect();
        o.stages.clear();
        for (stage, id) in self.tasks.keys() {
            o.stages
                .entry(self.head_uid(*stage).to_string())
                .or_default()
                .push(*id);
        }
        // `tasks` and `committed` show the first stage (a TOML pipeline's
        // only one), as for the built-in pipelines before graphs; every
        // stage's tasks are in `stages`.
        o.tasks = self
            .tasks
            .keys()
            .filter(|(stage, _)| *stage == 0)
            .map(|(_, id)| *id)
            .collect();
        o.committed = self
            .tasks
            .iter()
            .filter(|((stage, _), _)| *stage == 0)
            .filter_map(|((_, id), t)| Some((*id, t.committed.clone()?)))
            .collect();
    }

    /// Runs on the instance's thread: the revocation callback, inside `poll`.
    pub(super) fn on_revoke(&mut self, consumer: &Consumer_, tpl: &TopicPartitionList, lost: bool) {
        if !self.abandoned && self.failed.is_none() {
            let instance = self.config.instance().to_string();
            self.failed = commit_before_revocation(lost, &instance, tpl.count(), || {
                self.commit(consumer, true)
            });
        }
        for e in tpl.elements() {
            let tp = (e.topic().to_string(), e.partition());
            info!(
                topic = e.topic(),
                partition = e.partition(),
                "partition revoked"
            );
            self.assignment.pending.retain(|p| *p != tp);
            self.assignment.placed.remove(&tp);
            if let Some(stage) = self.stage_of_topic.get(&tp.0) {
                self.restore.fetching.remove(&(*stage, tp.1 as u32));
            }
            forget_lag(&self.metrics, &tp);
            match self.stage_of_topic.get(&tp.0) {
                Some(stage) => {
                    if let Some(task) = self.tasks.remove(&(*stage, tp.1 as u32)) {
                        task.core.chain.forget_gauges();
                        // Its queued uploads are another owner's business
                        // now; the links would keep their files on disk.
                        let _ = fs::remove_dir_all(task.dir.join(STAGING));
                    }
                }
                None => {
                    self.sources.partitions.remove(&tp);
                }
            }
        }
        self.publish_ownership();
    }

    /// Announces this instance's group member id on shared storage when it
    /// changed (see [`GraphInstance::fence_dead_owners`]): at each
    /// assignment and each commit. A failed write is a warning; it is
    /// tried again at the next.
    ///
    /// Runs on the instance's thread: the assignment callback (from
    /// `positions`) and each commit (the loop or a revocation).
    pub(super) fn announce(&mut self, consumer: &Consumer_) {
        let Some(member) = kafka::members::own_member_id(consumer.client()) else {
            return;
        };
        if self.assignment.announced.as_deref() == Some(member.as_str()) {
            return;
        }
        let presence = manifest::Presence {
            instance: self.config.instance().to_string(),
            member: member.clone(),
            writer: format!("{}-{}", self.epoch.writer, self.epoch.incarnations),
            written_ms: crate::runtime::now_ms(),
            wire_format: wire::FORMAT,
            manifest_format: manifest::FORMAT,
        };
        let bytes = serde_json::to_vec(&presence).expect("a presence serializes");
        match self
            .storage
            .put(&manifest::presence_key(self.config.instance()), bytes)
        {
            Ok(()) => {
                info!(member = %member, "announced this instance's group member id");
                self.assignment.announced = Some(member);
            }
            Err(e) => {
                warn!(error = %e.report(), "cannot announce this instance's group member id; tried again at the next commit")
            }
        }
    }

    /// Where each of `partitions` resumes, from the group's committed
    /// offsets (read_committed), checked: an error for one partition is an
    /// error (not "no offset", which would start it over); lost offsets of
    /// a job that committed are refused; a repartition partition trimmed
    /// past its committed offset is refused; an input partition passed by
    /// retention starts at its first offset with a warning; one without an
    /// offset at `source.start`, resolved to an offset once.
    ///
    /// Runs on the instance's thread: the assignment callback (from `place`),
    /// and the loop when rewound partitions are placed again.
    pub(super) fn positions(
        &mut self,
        consumer: &Consumer_,
        partitions: &[(String, i32)],
    ) -> Result<Vec<((String, i32), Placed)>> {
        self.announce(consumer);
        if partitions.is_empty() {
            return Ok(Vec::new());
        }
        self.fence_dead_owners(partitions);
        let (_, committed) = committed_offsets(consumer, &self.config, partitions)?;
        let mut lost_inputs = Vec::new();
        for e in committed.elements() {
            if let Err(error) = e.error() {
                return Err(WeirError::kafka(
                    format!(
                        "read the committed offset of {}/{} for consumer group {:?}",
                        e.topic(),
                        e.partition(),
                        self.config.kafka.group_id
                    ),
                    error,
                ));
            }
            if !matches!(e.offset(), Offset::Offset(_))
                && !self.stage_of_topic.contains_key(e.topic())
            {
                lost_inputs.push(format!("{}/{}", e.topic(), e.partition()));
            }
        }
        if !lost_inputs.is_empty() {
            self.refuse_lost_input_offsets(consumer, &lost_inputs)?;
        }
        // Every partition's first offset, in one request.
        let firsts = list_offsets(consumer, partitions, Offset::Beginning)?;
        let mut placed = Vec::new();
        for e in committed.elements() {
            let tp = (e.topic().to_string(), e.partition());
            let (topic, partition) = (tp.0.as_str(), tp.1);
            let offset = match e.offset() {
                Offset::Offset(o) => Some(o),
                _ => None,
            };
            let first = firsts[&tp];
            let position = match self.stage_of_topic.get(topic).copied() {
                Some(stage) => match offset {
                    // weir trims a repartition partition only below what
                    // its task committed.
                    Some(o) if o < first => {
                        return Err(Refusal::RepartitionRecordsDeleted {
                            topic: topic.to_string(),
                            partition,
                            stage: self.head_uid(stage).to_string(),
                            committed: o,
                            first,
                        }
                        .into());
                    }
                    Some(o) => o,
                    None => first,
                },
                None => match offset {
                    Some(o) => self.past_retention(topic, partition, o, first),
                    None => {
                        let source = self.source_of_topic[topic];
                        let start = source_spec(&self.graph, self.plan.sources[source].head).start;
                        self.start_offset(consumer, topic, partition, start, first)?
                    }
                },
            };
            placed.push((
                tp,
                Placed {
                    committed: offset,
                    metadata: e.metadata().to_string(),
                    position,
                },
            ));
        }
        Ok(placed)
    }

    /// Sets the position of every partition of `tpl`, about to be
    /// assigned, and keeps what their restore needs.
    ///
    /// Runs on the instance's thread: the assignment callback, inside `poll`,
    /// before librdkafka assigns; and the loop, for rewound partitions.
    pub(super) fn place(
        &mut self,
        consumer: &Consumer_,
        tpl: &mut TopicPartitionList,
    ) -> Result<()> {
        let partitions: Vec<(String, i32)> = tpl
            .elements()
            .iter()
            .map(|e| (e.topic().to_string(), e.partition()))
            .collect();
        for (tp, placed) in self.positions(consumer, &partitions)? {
            tpl.set_partition_offset(&tp.0, tp.1, Offset::Offset(placed.position))
                .map_err(|e| WeirError::kafka(format!("position {}/{}", tp.0, tp.1), e))?;
            self.assignment.placed.insert(tp, placed);
        }
        Ok(())
    }

    /// Restores the partitions assigned (or rewound) since the last call
    /// and lets them be read. A rewound partition is still assigned and
    /// fetching: it is sought to its position, synchronously and checked
    /// per partition. Returns the partitions sought.
    ///
    /// Runs on the instance's thread: the loop, between polls, once
    /// `activatable` says so.
    pub(super) fn activate(&mut self, consumer: &Consumer_) -> Result<Vec<(String, i32)>> {
        // The open epoch was committed just before (`poll_loop`); if its
        // checkpoint was declined instead, its output waits in a suspended
        // transaction while the restores run, so that they cannot outlast
        // the transaction's timeout, and is sent again into a new one after.
        let suspend = self.epoch.dirty;
        if suspend {
            self.producer.suspend_transaction()?;
        }
        let activated = self.restore_pending(consumer);
        if suspend {
            self.producer.resume_transaction()?;
        }
        activated
    }

    fn restore_pending(&mut self, consumer: &Consumer_) -> Result<Vec<(String, i32)>> {
        let pending = std::mem::take(&mut self.assignment.pending);
        let started = Instant::now();
        let rewound: Vec<(String, i32)> = pending
            .iter()
            .filter(|tp| !self.assignment.placed.contains_key(*tp))
            .cloned()
            .collect();
        if !rewound.is_empty() {
            let mut seek = TopicPartitionList::new();
            for (topic, partition) in &rewound {
                seek.add_partition(topic, *partition);
            }
            self.place(consumer, &mut seek)?;
            let sought = consumer
                .seek_partitions(seek, REQUEST_TIMEOUT)
                .map_err(|e| WeirError::kafka("seek rewound partitions", e))?;
            for e in sought.elements() {
                if let Err(error) = e.error() {
                    return Err(WeirError::kafka(
                        format!(
                            "seek {}/{} to offset {:?}",
                            e.topic(),
                            e.partition(),
                            e.offset()
                        ),
                        error,
                    ));
                }
            }
        }
        let mut tpl = TopicPartitionList::new();
        let mut waiting = Vec::new();
        for tp in pending {
            let (topic, partition) = (tp.0.clone(), tp.1);
            match self.stage_of_topic.get(&topic).copied() {
                Some(stage) => {
                    let id = partition as u32;
                    let verified = if rewound.contains(&tp) {
                        // Its own snapshot, on this machine.
                        None
                    } else {
                        match self.readiness(stage, id, &tp)? {
                            Some(verified) => verified,
                            None => {
                                waiting.push(tp);
                                continue;
                            }
                        }
                    };
                    let placed = self
                        .assignment
                        .placed
                        .remove(&tp)
                        .expect("a pending partition is placed");
                    let task =
                        self.restore_task(stage, id, placed.committed, &placed.metadata, verified)?;
                    self.tasks.insert((stage, id), task);
                }
                None => {
                    let placed = self
                        .assignment
                        .placed
                        .remove(&tp)
                        .expect("a pending partition is placed");
                    let source = self.source_of_topic[&topic];
                    let spec = source_spec(&self.graph, self.plan.sources[source].head);
                    let marks = spec.event_time.as_ref().map(|et| {
                        let mut w =
                            SourceWatermarks::new(et.max_out_of_orderness_ms, et.idle_timeout_ms);
                        w.register(&topic, partition, None, crate::runtime::now_ms());
                        w
                    });
                    if placed.committed != Some(placed.position) {
                        // The next epoch commits it, even without a record.
                        self.epoch.dirty = true;
                    }
                    self.sources.partitions.insert(
                        (topic.clone(), partition),
                        InputPartition {
                            source,
                            next: Some(placed.position),
                            marks,
                            sent: None,
                        },
                    );
                    if self.epoch.drain {
                        // Owned and committed at its position, never read.
                        continue;
                    }
                }
            }
            tpl.add_partition(&topic, partition);
        }
        self.assignment.pending = waiting;
        if tpl.count() == 0 {
            return Ok(rewound);
        }
        resume(consumer, &tpl, started)?;
        self.publish_ownership();
        Ok(rewound)
    }

    /// Whether task `id` of `stage`, assigned as `tp`, can be restored now:
    /// `Some(verified)` if so (`verified`: the folder the fetcher made ready
    /// and checked, if its restore is from a checkpoint), `None` while the
    /// fetcher makes its committed checkpoint ready locally (asked here the
    /// first time).
    ///
    /// Runs on the instance's thread: the loop, from `activate`.
    pub(super) fn readiness(
        &mut self,
        stage: usize,
        id: u32,
        tp: &(String, i32),
    ) -> Result<Option<Option<PathBuf>>> {
        let placed = &self.assignment.placed[tp];
        let label = format!("stage {:?} task {id}", self.head_uid(stage));
        let partition = format!("{}/{}", tp.0, tp.1);
        let RestorePoint::Manifest { key, .. } =
            restore_point(&label, &partition, placed.committed, &placed.metadata)?
        else {
            return Ok(Some(None));
        };
        if let Some(folder) = self.restore.fetched.remove(&key) {
            self.restore.fetching.remove(&(stage, id));
            return Ok(Some(Some(folder)));
        }
        if self.restore.fetching.get(&(stage, id)) == Some(&key) {
            return Ok(None);
        }
        self.restore.fetcher.fetch(fetcher::Fetch {
            stage,
            task: id,
            label,
            snapshots: self.task_dir(stage, id).join("snapshots"),
            key: key.clone(),
        });
        self.restore.fetching.insert((stage, id), key);
        Ok(None)
    }

    /// Takes the fetcher's finished work. A fetch that failed (a missing or
    /// damaged object) stops the instance, as a restore would; one for a
    /// task no longer waiting for that checkpoint is dropped.
    ///
    /// Runs on the instance's thread: the loop, from `activatable`.
    pub(super) fn take_fetched(&mut self) -> Result<()> {
        for f in self.restore.fetcher.finished() {
            if self.restore.fetching.get(&(f.stage, f.task)) != Some(&f.key) {
                continue;
            }
            let folder = f.result?;
            self.restore.fetched.insert(f.key, folder);
        }
        Ok(())
    }

    /// Whether [`Self::activate`] has something to do: a pending partition
    /// that is not waiting for the fetcher.
    ///
    /// Runs on the instance's thread: the loop, every turn while partitions are
    /// pending.
    pub(super) fn activatable(&mut self) -> Result<bool> {
        self.take_fetched()?;
        Ok(self
            .assignment
            .pending
            .iter()
            .any(|(topic, p)| match self.stage_of_topic.get(topic) {
                Some(stage) => self
                    .restore
                    .fetching
                    .get(&(*stage, *p as u32))
                    .is_none_or(|key| self.restore.fetched.contains_key(key)),
                None => true,
            }))
    }

    /// Where input partition `topic`/`partition` without a committed
    /// offset starts: `start` resolved to an offset (the end is the last
    /// stable offset, read_committed) the first time, the same offset after
    /// that until a commit records it. Resolving `latest` again after a
    /// refused first commit would skip what arrived in between.
    ///
    /// Runs on the instance's thread: the assignment callback, from
    /// `positions`.
    pub(super) fn start_offset(
        &self,
        consumer: &Consumer_,
        topic: &str,
        partition: i32,
        start: StartPosition,
        first: i64,
    ) -> Result<i64> {
        let key = (topic.to_string(), partition);
        if let Some(o) = self
            .assignment
            .starts
            .lock()
            .expect("starts lock")
            .get(&key)
        {
            return Ok(*o);
        }
        let o = match start {
            // The partition's first offset, just read.
            StartPosition::Earliest => first,
            StartPosition::Latest => {
                list_offsets(consumer, std::slice::from_ref(&key), Offset::End)?[&key]
            }
        };
        info!(topic, partition, offset = o, start = ?start, "input partition without a committed offset starts here");
        self.assignment
            .starts
            .lock()
            .expect("starts lock")
            .insert(key, o);
        Ok(o)
    }

    /// `committed`, or the partition's `first` offset when retention deleted
    /// the records from `committed` on before they were read: said in the
    /// log and counted, where librdkafka would reset it silently.
    ///
    /// Runs on the instance's thread: the assignment callback, from
    /// `positions`.
    pub(super) fn past_retention(
        &self,
        topic: &str,
        partition: i32,
        committed: i64,
        first: i64,
    ) -> i64 {
        if committed >= first {
            return committed;
        }
        warn!(
            topic,
            partition,
            committed,
            first,
            lost = first - committed,
            "records from the committed offset on were deleted by the topic's retention before they were read; starting at the partition's first offset"
        );
        self.metrics
            .records_deleted_unread
            .with_label_values(&[topic])
            .inc_by((first - committed) as u64);
        first
    }

    /// A task whose previous owner died (or lost its membership) with its
    /// epoch open: the read of committed offsets waits for that
    /// transaction, and so does every read_committed reader of the
    /// repartition partitions it wrote to, on every instance, until the
    /// broker aborts it `transaction.timeout.ms` after it began. So before
    /// that read, each newly assigned task's last committed pointer names
    /// the instance that wrote its checkpoint (`manifest_instance`; read
    /// without waiting), and that instance is fenced by its transactional
    /// id (its open transaction is aborted now, and a zombie can no longer
    /// commit) only when it is not a member of the group.
    ///
    /// Members are told apart by their group member id, which every
    /// instance announces on shared storage when it changes
    /// ([`manifest::Presence`], [`GraphInstance::announce`]): the instance
    /// is alive when the member id of its latest announcement is among the
    /// group's members (DescribeConsumerGroups). So a live member is never
    /// fenced, whatever `client.id` it sets (the user's: builds before
    /// issue #38 went by a `client.id` weir set, and fenced live instances
    /// with their own); and a restarted incarnation, which announces its
    /// new member id as it joins, is not fenced by a survivor that takes
    /// over what its predecessor wrote (the restart's own
    /// `init_transactions` aborted that transaction already). Nor is one
    /// whose latest process announced that it is starting (before its
    /// producer fenced the predecessor, `announce_starting`): until it
    /// joins, its predecessor's member id is the one on storage, not in the
    /// group, and a fence then ended the new process (seen in CI). An instance
    /// that never announced one (a build before this) is not fenced: the
    /// read waits as before.
    ///
    /// Static membership (`group.instance.id`) would name instances too,
    /// but it changes what the group does: a stopped or killed member keeps
    /// its partitions until its session times out, so scale-in and
    /// take-over after a crash would wait for it. The member id in the
    /// pointer alone would not know a restarted incarnation (a new member
    /// id), which would then be fenced needlessly.
    ///
    /// When the pointers, the members or an announcement cannot be read,
    /// or the fence fails, it warns and the read waits as before.
    ///
    /// Runs on the instance's thread: the assignment callback, from
    /// `positions`.
    pub(super) fn fence_dead_owners(&self, partitions: &[(String, i32)]) {
        let mut tpl = TopicPartitionList::new();
        for (t, p) in partitions
            .iter()
            .filter(|(t, _)| self.stage_of_topic.contains_key(t))
        {
            tpl.add_partition(t, *p);
        }
        if tpl.count() == 0 {
            return;
        }
        let last = match self.last_committed.committed_offsets(tpl, REQUEST_TIMEOUT) {
            Ok(last) => last,
            Err(e) => {
                warn!(error = %e, "cannot read the tasks' last committed offsets; a dead previous owner's open transaction is left to time out");
                return;
            }
        };
        let own = self.config.instance();
        let writers: BTreeSet<String> = last
            .elements()
            .iter()
            .filter_map(|e| {
                let instance = manifest::manifest_instance(manifest::parse_pointer(e.metadata())?)?;
                (instance != own).then(|| instance.to_string())
            })
            .collect();
        if writers.is_empty() {
            return;
        }
        let group = &self.config.kafka.group_id;
        let members = match kafka::members::group_members(
            self.last_committed.client(),
            group,
            REQUEST_TIMEOUT,
        ) {
            Ok(m) => m,
            Err(e) => {
                warn!(error = %e.report(), "cannot list the group's members; a dead previous owner's open transaction is left to time out");
                return;
            }
        };
        for instance in &writers {
            let presence = match self.storage.get(&manifest::presence_key(instance)) {
                Ok(Some(bytes)) => match serde_json::from_slice::<manifest::Presence>(&bytes) {
                    Ok(p) => p,
                    Err(e) => {
                        warn!(instance, error = %e, "an instance's announced member id does not parse; not fenced, its open transaction, if any, is left to time out");
                        continue;
                    }
                },
                Ok(None) => {
                    info!(instance, "an instance that last committed a task never announced its group member id (a build before it did): not fenced; its open transaction, if any, is left to time out");
                    continue;
                }
                Err(e) => {
                    warn!(instance, error = %e.report(), "cannot read an instance's announced member id; not fenced, its open transaction, if any, is left to time out");
                    continue;
                }
            };
            if presence.is_starting() {
                debug!(instance, writer = %presence.writer, "the task's last writer is starting again (it fences its predecessor itself): not fenced");
                continue;
            }
            if members.iter().any(|m| m.member_id == presence.member) {
                debug!(instance, member = %presence.member, "the task's last writer is a member of the group: not fenced");
                continue;
            }
            let transactional_id = self.config.transactional_id_of(instance);
            let started = Instant::now();
            if let Err(e) = kafka::producer::fence(&self.config, &transactional_id) {
                warn!(
                    instance,
                    transactional_id,
                    error = %e.report(),
                    "cannot take over the transactional id of an instance that is no longer in the group; its open transaction, if any, is left to time out"
                );
                continue;
            }
            info!(
                instance,
                transactional_id,
                member = %presence.member,
                took_ms = started.elapsed().as_millis() as u64,
                "took over the transactional id of an instance that is no longer in the group: its open transaction, if any, is aborted"
            );
        }
    }

    /// Input partitions without a committed offset start at the source's
    /// `start`: right for a new job or a partition added to a topic, wrong
    /// when the group's offsets were lost while storage holds the tasks'
    /// checkpoints (a deleted or reset group, or offsets expired after
    /// `offsets.retention.minutes` with every instance down), which would
    /// send the retained input through the tasks again. The group's
    /// offsets expire or go all together, so a job whose group has no
    /// offset for any task but whose storage holds task checkpoints lost
    /// them: refused, naming `inputs`.
    ///
    /// Runs on the instance's thread: the assignment callback, from
    /// `positions`.
    pub(super) fn refuse_lost_input_offsets(
        &self,
        consumer: &Consumer_,
        inputs: &[String],
    ) -> Result<()> {
        let tasks: Vec<(String, i32)> = self
            .plan
            .stages
            .iter()
            .flat_map(|s| (0..self.config.scale.tasks as i32).map(|p| (s.topic.clone(), p)))
            .collect();
        if tasks.is_empty() {
            return Ok(());
        }
        let (_, committed) = committed_offsets(consumer, &self.config, &tasks)?;
        if committed
            .elements()
            .iter()
            .any(|e| matches!(e.offset(), Offset::Offset(_)))
        {
            return Ok(());
        }
        for stage in 0..self.plan.stages.len() {
            for id in 0..self.config.scale.tasks {
                if let Some(marker) = self.committed_marker(stage, id)? {
                    return Err(Refusal::GroupOffsetsLost {
                        group: self.config.kafka.group_id.clone(),
                        inputs: inputs.join(", "),
                        storage: self.storage.location.clone(),
                        stage: self.head_uid(stage).to_string(),
                        task: id,
                        marker,
                    }
                    .into());
                }
            }
        }
        Ok(())
    }
}
