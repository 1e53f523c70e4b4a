//! A deterministic simulation of group mode's epoch protocol.
//!
//! Hundreds of seeded schedules run a small word count in group mode on
//! one thread: three instances in one consumer group, three input
//! partitions, a two-task keyed count behind a repartition topic. The
//! protocol's real parts run against an in-memory group, broker and
//! storage: `engine::group::protocol::run_epoch` (prepare, the membership checks, the
//! commit through the `CommitPoint` trait, the classification of a refused
//! commit, abort and rewind), `commit_before_revocation` and
//! `restore_point`, with `CommitOffsets` carrying each task's manifest
//! pointer. The in-memory group rebalances the way Kafka's does (a member
//! that loses partitions commits before it lets them go; the generation
//! moves on when every member has; a member whose session expired is
//! removed) and its commits check what Kafka checks: the member is known,
//! its generation is current, its producer was not fenced.
//!
//! Each schedule interleaves reads, commits and rebalances at random and
//! injects faults: crashes at any step (the open transaction stays until a
//! new incarnation fences it), commits that fail, commits whose ack is lost
//! after they applied, crashes after the manifests are written and before
//! the commit, rebalances that race a commit (the member's generation is
//! stale when it commits), pauses past the session timeout (a zombie
//! that resumes and commits or polls), and checkpoints declined because
//! their uploads are late (the epoch goes on, its output waits in the
//! transaction, which is renewed when it could not wait for another
//! checkpoint). Invariants checked:
//! - a member only ever commits partitions the group assigned to it;
//! - every committed pointer names a manifest of that task at that offset;
//! - every input record crosses the repartition topic exactly once;
//! - the committed output is every word's counts 1..=n, each once.
//!
//! Run with `--nocapture` to see the number of schedules explored.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;
use weir::engine::group::manifest;
use weir::engine::group::protocol::{
    commit_before_revocation, restore_point, run_epoch, Committed, EpochWork, Membership,
    RestorePoint,
};
use weir::runtime::commit::{CommitOffsets, CommitPoint, TransactionBudget};
use weir::{Result, WeirError};
use weir_testkit::Rng;

const INPUT: &str = "in";
const REPARTITION: &str = "job.count.repartition";
const INPUTS: i32 = 3;
const TASKS: i32 = 2;
const INSTANCES: usize = 3;
const WORDS: [&str; 5] = ["a", "b", "c", "d", "e"];
const SEEDS: u64 = 150;

/// A member of the group: an instance and its incarnation.
type Member = (usize, u32);
type Partition = (String, i32);

/// Faults per thousand steps.
#[derive(Debug, Clone, Copy)]
struct Faults {
    crash: u64,
    commit_fails: u64,
    commit_ack_lost: u64,
    crash_before_commit: u64,
    racing_rebalance: u64,
    pause: u64,
    decline: u64,
}

/// The budget every incarnation's epochs run under; the fake clock moves
/// 100 ms per step, so that some declined epochs renew and some do not.
const BUDGET: TransactionBudget = TransactionBudget {
    transaction_timeout: Duration::from_secs(10),
    interval: Duration::from_secs(1),
    checkpoint_timeout: Duration::from_secs(2),
};

fn partitions() -> Vec<Partition> {
    (0..INPUTS)
        .map(|p| (INPUT.to_string(), p))
        .chain((0..TASKS).map(|t| (REPARTITION.to_string(), t)))
        .collect()
}

fn task_of(word: &str) -> i32 {
    (word.as_bytes()[0] as i32) % TASKS
}

fn kafka(code: RDKafkaErrorCode) -> WeirError {
    WeirError::kafka("commit the transaction", KafkaError::ConsumerCommit(code))
}

fn failure(reason: &str) -> WeirError {
    WeirError::Task {
        task: "fake broker".into(),
        reason: reason.into(),
    }
}

// ---------------------------------------------------------------- the broker

struct Manifest {
    task: i32,
    offset: i64,
    counts: BTreeMap<String, u64>,
}

#[derive(Default)]
struct Txn {
    repartition: Vec<(i32, String)>,
    output: Vec<(String, u64)>,
    /// The fake clock when it began.
    began: u64,
}

/// An in-memory Kafka (the group coordinator, the topics, transactions)
/// and the shared storage the manifests live on.
#[derive(Default)]
struct Broker {
    input: Vec<Vec<&'static str>>,
    generation: u64,
    members: BTreeSet<Member>,
    owner: BTreeMap<Partition, Member>,
    /// A rebalance in progress: the target assignment and the members that
    /// have let go of what they lose.
    target: Option<BTreeMap<Partition, Member>>,
    released: BTreeSet<Member>,
    committed: BTreeMap<Partition, (i64, String)>,
    /// Committed records of the repartition topic, per task.
    repartition: Vec<Vec<String>>,
    output: Vec<(String, u64)>,
    /// Per transactional id (an instance): the producer epoch and its
    /// open transaction.
    producer_epoch: BTreeMap<usize, u32>,
    open: BTreeMap<usize, Txn>,
    storage: BTreeMap<String, Manifest>,
    fail_next_commit: bool,
    lose_next_ack: bool,
    /// What the schedule explored: commits refused in a rebalance, and
    /// commits of zombies (unknown members, fenced producers).
    refused: u32,
    zombie_commits: u32,
    declined: u32,
    renewed: u32,
    /// Steps of 100 ms.
    clock: u64,
}

impl Broker {
    /// Membership changed: a new target assignment (round robin over the
    /// members, rotated so that partitions move).
    fn start_rebalance(&mut self, rotation: usize) {
        let members: Vec<Member> = self.members.iter().copied().collect();
        self.released.clear();
        if members.is_empty() {
            self.target = Some(BTreeMap::new());
            return;
        }
        self.target = Some(
            partitions()
                .into_iter()
                .enumerate()
                .map(|(i, p)| (p, members[(i + rotation) % members.len()]))
                .collect(),
        );
    }

    /// The rebalance completes once every member has let go of what it
    /// loses: the generation moves on.
    fn try_finish_rebalance(&mut self) {
        if self.target.is_some() && self.members.iter().all(|m| self.released.contains(m)) {
            self.owner = self.target.take().expect("checked");
            self.generation += 1;
        }
    }

    fn join(&mut self, member: Member, rotation: usize) -> u32 {
        let epoch = self.producer_epoch.entry(member.0).or_default();
        *epoch += 1;
        let epoch = *epoch;
        // init_transactions: the previous incarnation's open transaction
        // is aborted.
        self.open.remove(&member.0);
        self.members.insert(member);
        self.start_rebalance(rotation);
        epoch
    }

    /// The session of `member` expired: the group removes it.
    fn expire(&mut self, member: Member, rotation: usize) {
        if self.members.remove(&member) {
            self.start_rebalance(rotation);
            self.try_finish_rebalance();
        }
    }

    fn write(&mut self, instance: usize, epoch: u32) -> Result<&mut Txn> {
        if self.producer_epoch[&instance] != epoch {
            return Err(failure("producer fenced"));
        }
        self.open
            .get_mut(&instance)
            .ok_or_else(|| failure("produce outside a transaction"))
    }
}

/// One incarnation's transactional producer and its group metadata.
struct FakeTxn {
    broker: Arc<Mutex<Broker>>,
    member: Member,
    epoch: u32,
    /// The generation the next commit is sent with (`set_group`).
    generation: AtomicU64,
}

impl CommitPoint for FakeTxn {
    fn is_transactional(&self) -> bool {
        true
    }

    fn begin(&self) -> Result<()> {
        let mut b = self.broker.lock().unwrap();
        if b.producer_epoch[&self.member.0] != self.epoch {
            return Err(failure("producer fenced"));
        }
        assert!(
            !b.open.contains_key(&self.member.0),
            "begin with a transaction open"
        );
        let began = b.clock;
        b.open.insert(
            self.member.0,
            Txn {
                began,
                ..Txn::default()
            },
        );
        Ok(())
    }

    fn prepare(&self) -> Result<()> {
        let mut b = self.broker.lock().unwrap();
        b.write(self.member.0, self.epoch).map(|_| ())
    }

    fn flush(&self) -> Result<()> {
        Ok(())
    }

    fn commit(&self, offsets: &CommitOffsets) -> Result<()> {
        let mut b = self.broker.lock().unwrap();
        if b.producer_epoch[&self.member.0] != self.epoch {
            b.zombie_commits += 1;
            return Err(failure("producer fenced"));
        }
        if !b.members.contains(&self.member) {
            b.zombie_commits += 1;
            return Err(kafka(RDKafkaErrorCode::UnknownMemberId));
        }
        if self.generation.load(Ordering::Relaxed) != b.generation {
            b.refused += 1;
            return Err(kafka(RDKafkaErrorCode::IllegalGeneration));
        }
        if std::mem::take(&mut b.fail_next_commit) {
            return Err(failure("commit failed (injected)"));
        }
        let txn = b
            .open
            .remove(&self.member.0)
            .ok_or_else(|| failure("no open transaction"))?;
        for (tp, (offset, metadata)) in offsets.iter() {
            assert_eq!(
                b.owner.get(tp),
                Some(&self.member),
                "member {:?} committed {tp:?}, which the group assigned to {:?}",
                self.member,
                b.owner.get(tp)
            );
            if tp.0 == REPARTITION {
                let key = manifest::parse_pointer(metadata).expect("a task's offset has a pointer");
                let m = &b.storage[key];
                assert!(
                    m.task == tp.1 && m.offset == *offset,
                    "the pointer of {tp:?} at {offset} names task {} at {}",
                    m.task,
                    m.offset
                );
            }
            b.committed.insert(tp.clone(), (*offset, metadata.clone()));
        }
        for (t, word) in txn.repartition {
            b.repartition[t as usize].push(word);
        }
        b.output.extend(txn.output);
        if std::mem::take(&mut b.lose_next_ack) {
            return Err(failure("commit applied, ack lost (injected)"));
        }
        Ok(())
    }

    fn abort(&self) -> Result<()> {
        let mut b = self.broker.lock().unwrap();
        if b.producer_epoch[&self.member.0] == self.epoch {
            b.open.remove(&self.member.0);
        }
        Ok(())
    }

    fn transaction_age(&self) -> Option<Duration> {
        let b = self.broker.lock().unwrap();
        let txn = b.open.get(&self.member.0)?;
        Some(Duration::from_millis(100 * (b.clock - txn.began)))
    }

    /// As the producer's journal does: the open transaction aborted and a
    /// new one begun holding the same output.
    fn renew(&self) -> Result<()> {
        let mut b = self.broker.lock().unwrap();
        if b.producer_epoch[&self.member.0] != self.epoch {
            return Err(failure("producer fenced"));
        }
        let txn = b
            .open
            .remove(&self.member.0)
            .ok_or_else(|| failure("no open transaction"))?;
        let began = b.clock;
        b.open.insert(self.member.0, Txn { began, ..txn });
        b.renewed += 1;
        Ok(())
    }
}

// ---------------------------------------------------------------- an instance

struct Task {
    counts: BTreeMap<String, u64>,
    next: i64,
}

/// One incarnation of an instance: what librdkafka and the instance know.
struct Inst {
    member: Member,
    broker: Arc<Mutex<Broker>>,
    commit: Arc<FakeTxn>,
    /// The generation of the last assignment received.
    generation: u64,
    assigned: BTreeSet<Partition>,
    lost: bool,
    pending: Vec<Partition>,
    inputs: BTreeMap<i32, i64>,
    tasks: BTreeMap<i32, Task>,
    dirty: bool,
    seq: u64,
    paused: bool,
    /// Just resumed after a pause: its next step is as likely to be a
    /// commit (the loop's `due` check) as a poll.
    resumed: bool,
    /// Faults armed for the next epoch.
    crash_before_commit: bool,
    racing_rebalance: bool,
    decline: bool,
}

/// The membership an epoch is checked against (the real code passes the
/// consumer).
struct View {
    lost: bool,
    assigned: BTreeSet<Partition>,
}

impl Membership for View {
    fn lost(&self) -> bool {
        self.lost
    }

    fn foreign(&self, offsets: &CommitOffsets) -> Result<Vec<String>> {
        Ok(offsets
            .iter()
            .filter(|(tp, _)| !self.assigned.contains(*tp))
            .map(|((t, p), _)| format!("{t}/{p}"))
            .collect())
    }
}

impl EpochWork for Inst {
    fn prepare(&mut self) -> Result<Option<CommitOffsets>> {
        let mut b = self.broker.lock().unwrap();
        if std::mem::take(&mut self.decline) {
            // The snapshots' files were not on storage in time: no
            // manifest, nothing committed; the epoch goes on.
            b.declined += 1;
            return Ok(None);
        }
        let mut offsets = CommitOffsets::default();
        for (p, next) in &self.inputs {
            offsets.insert(INPUT, *p, *next, String::new());
        }
        for (t, task) in &self.tasks {
            self.seq += 1;
            let key = format!(
                "stages/count/{t:04}/{}-{}-{:08}.json",
                self.member.0, self.member.1, self.seq
            );
            b.storage.insert(
                key.clone(),
                Manifest {
                    task: *t,
                    offset: task.next,
                    counts: task.counts.clone(),
                },
            );
            offsets.insert(REPARTITION, *t, task.next, manifest::pointer(&key));
        }
        if std::mem::take(&mut self.crash_before_commit) {
            return Err(failure("crashed after the manifests, before the commit"));
        }
        if std::mem::take(&mut self.racing_rebalance) && b.target.is_none() {
            // The group moves to a new generation before this member's
            // commit reaches it (under KIP-848 another member's join bumps
            // the epoch of every member, whether or not its partitions
            // move). Its partitions stay its own; its commit is stale.
            b.generation += 1;
        }
        Ok(Some(offsets))
    }

    fn committed(&mut self, _offsets: &CommitOffsets) {
        self.dirty = false;
    }

    fn rewind(&mut self) {
        self.pending.extend(
            std::mem::take(&mut self.tasks)
                .into_keys()
                .map(|t| (REPARTITION.to_string(), t)),
        );
        self.pending.extend(
            std::mem::take(&mut self.inputs)
                .into_keys()
                .map(|p| (INPUT.to_string(), p)),
        );
        self.dirty = false;
    }
}

/// Why an incarnation ends: the process restarts.
#[derive(Debug)]
struct Died;

impl Inst {
    fn view(&self) -> View {
        View {
            lost: self.lost,
            assigned: self.assigned.clone(),
        }
    }

    /// The epoch, as `GraphInstance::commit` runs it; `forced` by a
    /// revocation, which cannot let its partitions go with their output
    /// still in the open transaction: a declined checkpoint fails it.
    fn commit_epoch(&mut self, forced: bool) -> Result<()> {
        if !self.dirty {
            return Ok(());
        }
        self.commit
            .generation
            .store(self.generation, Ordering::Relaxed);
        let view = self.view();
        let commit = self.commit.clone();
        let instance = format!("instance-{}", self.member.0);
        match run_epoch(self, &view, &*commit, &instance, &BUDGET)?.0 {
            Committed::Yes | Committed::Refused(_) => Ok(()),
            Committed::Declined { .. } if forced => Err(failure(
                "checkpoint declined while the partitions are taken away",
            )),
            Committed::Declined { .. } => Ok(()),
        }
    }

    /// What `poll` delivers: rebalance callbacks, then the restore of what
    /// was assigned.
    fn poll(&mut self) -> std::result::Result<(), Died> {
        let (kicked, revoke, assign) = {
            let b = self.broker.lock().unwrap();
            let kicked = !b.members.contains(&self.member);
            let revoke: Vec<Partition> = match &b.target {
                Some(target) if !kicked && !b.released.contains(&self.member) => self
                    .assigned
                    .iter()
                    .filter(|p| target.get(*p) != Some(&self.member))
                    .cloned()
                    .collect(),
                _ => Vec::new(),
            };
            let assign = (!kicked && b.target.is_none() && b.generation > self.generation)
                .then(|| (b.generation, b.owner.clone()));
            (kicked, revoke, assign)
        };
        if kicked {
            // The heartbeat learns the session is gone: a lost assignment.
            self.lost = true;
            let instance = format!("instance-{}", self.member.0);
            let failed = commit_before_revocation(true, &instance, self.assigned.len(), || {
                self.commit_epoch(true)
            });
            assert!(failed.is_some(), "a lost assignment must end the attempt");
            return Err(Died);
        }
        let releasing = {
            let b = self.broker.lock().unwrap();
            b.target.is_some() && !b.released.contains(&self.member)
        };
        if releasing {
            if !revoke.is_empty() {
                let instance = format!("instance-{}", self.member.0);
                if commit_before_revocation(false, &instance, revoke.len(), || {
                    self.commit_epoch(true)
                })
                .is_some()
                {
                    return Err(Died);
                }
                for p in &revoke {
                    self.assigned.remove(p);
                    self.pending.retain(|q| q != p);
                    if p.0 == INPUT {
                        self.inputs.remove(&p.1);
                    } else {
                        self.tasks.remove(&p.1);
                    }
                }
            }
            let mut b = self.broker.lock().unwrap();
            b.released.insert(self.member);
            b.try_finish_rebalance();
        }
        if let Some((generation, owner)) = assign {
            self.generation = generation;
            let mine: BTreeSet<Partition> = owner
                .iter()
                .filter(|(_, m)| **m == self.member)
                .map(|(p, _)| p.clone())
                .collect();
            for p in mine.difference(&self.assigned) {
                self.pending.push(p.clone());
            }
            // What it still holds but no longer owns was revoked above.
            self.assigned = mine;
        }
        self.activate();
        Ok(())
    }

    /// Restores the pending partitions from the group's committed offsets.
    fn activate(&mut self) {
        let b = self.broker.lock().unwrap();
        for (topic, p) in std::mem::take(&mut self.pending) {
            let committed = b.committed.get(&(topic.clone(), p));
            let offset = committed.map(|c| c.0);
            let metadata = committed.map_or("", |c| c.1.as_str());
            if topic == INPUT {
                self.inputs.insert(p, offset.unwrap_or(0));
                continue;
            }
            let label = format!("stage \"count\" task {p}");
            let partition = format!("{REPARTITION}/{p}");
            let task = match restore_point(&label, &partition, offset, metadata)
                .expect("every committed task offset carries a pointer")
            {
                RestorePoint::Empty => Task {
                    counts: BTreeMap::new(),
                    next: 0,
                },
                // `weir reset`'s marker: empty from its offset on (the
                // simulation never resets).
                RestorePoint::Reset { offset } => Task {
                    counts: BTreeMap::new(),
                    next: offset,
                },
                RestorePoint::Manifest { offset, key } => {
                    let m = b
                        .storage
                        .get(&key)
                        .unwrap_or_else(|| panic!("the committed pointer {key} names no manifest"));
                    assert_eq!((m.task, m.offset), (p, offset), "manifest {key}");
                    Task {
                        counts: m.counts.clone(),
                        next: offset,
                    }
                }
            };
            self.tasks.insert(p, task);
        }
    }

    /// Reads one record of an owned partition, if there is one.
    fn read(&mut self, pick: u64) -> std::result::Result<(), Died> {
        let owned: Vec<Partition> = self
            .inputs
            .keys()
            .map(|p| (INPUT.to_string(), *p))
            .chain(self.tasks.keys().map(|t| (REPARTITION.to_string(), *t)))
            .collect();
        if owned.is_empty() {
            return Ok(());
        }
        let (topic, p) = &owned[(pick % owned.len() as u64) as usize];
        let mut b = self.broker.lock().unwrap();
        let epoch = self.commit.epoch;
        if topic == INPUT {
            let next = self.inputs.get_mut(p).expect("owned");
            let Some(word) = b.input[*p as usize].get(*next as usize).copied() else {
                return Ok(());
            };
            b.write(self.member.0, epoch)
                .map_err(|_| Died)?
                .repartition
                .push((task_of(word), word.to_string()));
            *next += 1;
        } else {
            let task = self.tasks.get_mut(p).expect("owned");
            let Some(word) = b.repartition[*p as usize].get(task.next as usize).cloned() else {
                return Ok(());
            };
            let count = task.counts.entry(word.clone()).or_default();
            *count += 1;
            let count = *count;
            task.next += 1;
            b.write(self.member.0, epoch)
                .map_err(|_| Died)?
                .output
                .push((word, count));
        }
        self.dirty = true;
        Ok(())
    }
}

// ---------------------------------------------------------------- the schedule

struct Sim {
    rng: Rng,
    faults: Faults,
    broker: Arc<Mutex<Broker>>,
    /// Per instance: the running incarnation, if any, and the last
    /// incarnation number.
    running: Vec<Option<Inst>>,
    incarnations: Vec<u32>,
    /// Dead incarnations still members until their session expires.
    dead: Vec<Member>,
    expected: BTreeMap<String, u64>,
    restarts: u32,
}

impl Sim {
    fn new(seed: u64, records: usize, faults: Faults) -> Self {
        let mut rng = Rng::new(seed);
        let input: Vec<Vec<&'static str>> = (0..INPUTS)
            .map(|_| {
                (0..records)
                    .map(|_| WORDS[rng.below(WORDS.len() as u64) as usize])
                    .collect()
            })
            .collect();
        let mut expected = BTreeMap::new();
        for w in input.iter().flatten() {
            *expected.entry(w.to_string()).or_insert(0) += 1;
        }
        let broker = Broker {
            input,
            repartition: vec![Vec::new(); TASKS as usize],
            ..Broker::default()
        };
        let mut sim = Self {
            rng,
            faults,
            broker: Arc::new(Mutex::new(broker)),
            running: (0..INSTANCES).map(|_| None).collect(),
            incarnations: vec![0; INSTANCES],
            dead: Vec::new(),
            expected,
            restarts: 0,
        };
        for i in 0..INSTANCES {
            sim.start(i);
        }
        sim
    }

    fn chance(&mut self, per_mille: u64) -> bool {
        per_mille > 0 && self.rng.below(1000) < per_mille
    }

    /// A new incarnation of instance `i` joins the group.
    fn start(&mut self, i: usize) {
        self.incarnations[i] += 1;
        let member = (i, self.incarnations[i]);
        let rotation = self.rng.below(7) as usize;
        let epoch = self.broker.lock().unwrap().join(member, rotation);
        let commit = Arc::new(FakeTxn {
            broker: self.broker.clone(),
            member,
            epoch,
            generation: AtomicU64::new(0),
        });
        commit.begin().expect("begin");
        self.running[i] = Some(Inst {
            member,
            broker: self.broker.clone(),
            commit,
            generation: 0,
            assigned: BTreeSet::new(),
            lost: false,
            pending: Vec::new(),
            inputs: BTreeMap::new(),
            tasks: BTreeMap::new(),
            dirty: false,
            seq: 0,
            paused: false,
            resumed: false,
            crash_before_commit: false,
            racing_rebalance: false,
            decline: false,
        });
    }

    /// The incarnation dies (SIGKILL, or its attempt failed): it stays a
    /// member until its session expires; its transaction stays open until
    /// the next incarnation fences it.
    fn kill(&mut self, i: usize) {
        if let Some(inst) = self.running[i].take() {
            self.dead.push(inst.member);
            self.restarts += 1;
        }
    }

    fn step(&mut self, faults_on: bool) {
        self.broker.lock().unwrap().clock += 1;
        let i = self.rng.below(INSTANCES as u64) as usize;
        let f = self.faults;
        // Sessions of dead and paused members expire now and then.
        if self.rng.below(20) == 0 {
            let rotation = self.rng.below(7) as usize;
            let mut expired = std::mem::take(&mut self.dead);
            expired.extend(
                self.running
                    .iter()
                    .flatten()
                    .filter(|r| r.paused)
                    .map(|r| r.member),
            );
            let mut b = self.broker.lock().unwrap();
            for m in expired {
                b.expire(m, rotation);
            }
        }
        let Some(paused) = self.running[i].as_ref().map(|r| r.paused) else {
            if self.rng.below(4) == 0 {
                self.start(i);
            }
            return;
        };
        if paused {
            if !faults_on || self.rng.below(10) == 0 {
                let inst = self.running[i].as_mut().expect("running");
                inst.paused = false; // SIGCONT
                inst.resumed = true;
            }
            return;
        }
        if faults_on && self.chance(f.crash) {
            self.kill(i);
            return;
        }
        if faults_on && self.chance(f.pause) {
            self.running[i].as_mut().expect("running").paused = true; // SIGSTOP
            return;
        }
        let resumed = std::mem::take(&mut self.running[i].as_mut().expect("running").resumed);
        let action = if resumed && self.rng.below(2) == 0 {
            0
        } else {
            self.rng.below(10)
        };
        let pick = self.rng.next_u64();
        let commit_fails = faults_on && self.chance(f.commit_fails);
        let ack_lost = faults_on && self.chance(f.commit_ack_lost);
        let crash_before = faults_on && self.chance(f.crash_before_commit);
        let racing = faults_on && self.chance(f.racing_rebalance);
        let decline = faults_on && self.chance(f.decline);
        let inst = self.running[i].as_mut().expect("running");
        let outcome = match action {
            // A zombie that resumed may commit before it polls.
            0 => {
                {
                    let mut b = self.broker.lock().unwrap();
                    b.fail_next_commit = commit_fails;
                    b.lose_next_ack = ack_lost;
                }
                inst.crash_before_commit = crash_before;
                inst.racing_rebalance = racing;
                inst.decline = decline;
                let r = inst.commit_epoch(false).map_err(|_| Died);
                let mut b = self.broker.lock().unwrap();
                b.fail_next_commit = false;
                b.lose_next_ack = false;
                r
            }
            1..=2 => inst.poll(),
            _ => inst.poll().and_then(|()| inst.read(pick)),
        };
        if outcome.is_err() {
            self.kill(i);
        }
    }

    /// Everything read, processed and committed by a settled group.
    fn settled(&self) -> bool {
        let b = self.broker.lock().unwrap();
        let inputs_done = (0..INPUTS).all(|p| {
            b.committed
                .get(&(INPUT.to_string(), p))
                .is_some_and(|c| c.0 as usize == b.input[p as usize].len())
        });
        let tasks_done = (0..TASKS).all(|t| {
            let len = b.repartition[t as usize].len() as i64;
            len == 0
                || b.committed
                    .get(&(REPARTITION.to_string(), t))
                    .is_some_and(|c| c.0 == len)
        });
        inputs_done && tasks_done && b.open.values().all(|t| t.output.is_empty())
    }

    fn run(&mut self, steps: usize) {
        for _ in 0..steps {
            self.step(true);
        }
        // The faults stop; the group settles and finishes the input.
        for i in 0..INSTANCES {
            if let Some(inst) = self.running[i].as_mut() {
                inst.paused = false;
            }
        }
        let mut quiet = 0;
        while !self.settled() {
            quiet += 1;
            assert!(quiet < 200_000, "the group did not finish the input");
            self.step(false);
        }
    }

    fn check(&self) {
        let b = self.broker.lock().unwrap();
        let total: usize = b.input.iter().map(Vec::len).sum();
        let crossed: usize = b.repartition.iter().map(Vec::len).sum();
        assert_eq!(
            crossed, total,
            "every input record crosses the repartition topic exactly once"
        );
        let mut seen: BTreeMap<String, Vec<u64>> = BTreeMap::new();
        for (w, c) in &b.output {
            seen.entry(w.clone()).or_default().push(*c);
        }
        for (w, n) in &self.expected {
            let mut counts = seen.remove(w).unwrap_or_default();
            counts.sort_unstable();
            assert_eq!(
                counts,
                (1..=*n).collect::<Vec<_>>(),
                "word {w:?}: committed counts must be 1..={n}, each once"
            );
        }
        assert!(seen.is_empty(), "output for words never read: {seen:?}");
    }
}

#[test]
fn group_epochs_hold_under_hundreds_of_seeded_fault_schedules() {
    let none = Faults {
        crash: 0,
        commit_fails: 0,
        commit_ack_lost: 0,
        crash_before_commit: 0,
        racing_rebalance: 0,
        pause: 0,
        decline: 0,
    };
    let mixes = [
        ("no faults", none),
        (
            "crashes",
            Faults {
                crash: 4,
                crash_before_commit: 20,
                ..none
            },
        ),
        (
            "commit faults",
            Faults {
                commit_fails: 60,
                commit_ack_lost: 60,
                ..none
            },
        ),
        (
            "raced rebalances",
            Faults {
                racing_rebalance: 150,
                ..none
            },
        ),
        ("zombies", Faults { pause: 4, ..none }),
        (
            "late uploads",
            Faults {
                decline: 400,
                ..none
            },
        ),
        (
            "everything",
            Faults {
                crash: 2,
                commit_fails: 20,
                commit_ack_lost: 20,
                crash_before_commit: 10,
                racing_rebalance: 50,
                pause: 2,
                decline: 100,
            },
        ),
    ];
    let mut schedules = 0;
    for (name, faults) in mixes {
        let (mut restarts, mut refused, mut zombies, mut declined, mut renewed) = (0, 0, 0, 0, 0);
        for seed in 0..SEEDS {
            let mut sim = Sim::new(seed * 7919 + 1, 40, faults);
            sim.run(3_000);
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sim.check()))
                .unwrap_or_else(|_| panic!("mix {name:?}, seed {seed}: see the panic above"));
            schedules += 1;
            restarts += sim.restarts;
            let b = sim.broker.lock().unwrap();
            refused += b.refused;
            zombies += b.zombie_commits;
            declined += b.declined;
            renewed += b.renewed;
        }
        println!(
            "{name}: {SEEDS} schedules, {restarts} incarnations ended, {refused} commits refused in a \
             rebalance, {zombies} zombie commits refused, {declined} checkpoints declined, \
             {renewed} transactions renewed"
        );
        // Each mix explores what it injects.
        match name {
            "crashes" | "commit faults" => assert!(restarts > 50, "{name}: {restarts}"),
            "raced rebalances" => assert!(refused > 50, "{name}: {refused}"),
            "zombies" => assert!(zombies > 5, "{name}: {zombies}"),
            "late uploads" => assert!(
                declined > 1000 && renewed > 100,
                "{name}: {declined} declined, {renewed} renewed"
            ),
            _ => {}
        }
    }
    println!("{schedules} group schedules");
}
