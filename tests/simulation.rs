//! A deterministic simulation of the checkpoint and commit protocol.
//!
//! Thousands of seeded schedules run a small word count — two source
//! subtasks, two keyed subtasks with two inputs each — on one thread, with
//! the protocol's real parts: `BarrierAligner` (alignment and its
//! cancellation), `EpochGate` (which transaction each epoch's output goes
//! into, the cancel notice), the sinks' `EpochRouter` (output held until
//! its epoch has a route, copies kept until the previous checkpoint is
//! decided and sent again where a failed one moved the epoch),
//! `Transactions` (one transactional producer, or two alternating per
//! epoch), `AckCollector`, `TransactionBudget`, the recovery decision
//! (`recovery::decide`) and retention (`to_prune`), against in-memory
//! implementations of the `CommitPoint` trait. Every schedule runs with
//! one producer and with two. Each schedule
//! interleaves records, barriers, acks and clock ticks at random and injects
//! faults: crashes at any step, commits that fail, commits whose ack is
//! lost after they applied, snapshots that fail or are slow, stalled
//! sources (timed-out checkpoints), and pauses longer than the transaction
//! timeout. Invariants checked:
//! - the committed output is exactly the output of the committed epochs:
//!   every word's counts 1..=n, each once;
//! - recovery restores the checkpoint the commit point names;
//! - no checkpoint id is committed twice;
//! - no transaction is committed after it outlived its timeout, and the
//!   budget rule keeps the broker from ever having to abort one unless the
//!   process was paused;
//! - no sink writes into a producer with no open transaction, and no
//!   transaction is begun while one is open in the same producer.
//!
//! Run with `--nocapture` to see the number of schedules explored.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use weir::checkpoint::metadata::{OperatorInfo, FORMAT_VERSION};
use weir::checkpoint::recovery::{
    decide, Decision, FolderContents, FolderFacts, GroupOffsets, Observed,
};
use weir::checkpoint::retention::{to_prune, Retained};
use weir::checkpoint::{CheckpointMetadata, PartitionOffset, StateHandle, Topology};
use weir::config::CheckpointMode;
use weir::element::{Barrier, Element};
use weir::engine::single::alignment::BarrierAligner;
use weir::engine::single::coordinator::AckCollector;
use weir::runtime::commit::{CommitOffsets, CommitPoint, Offsets, TransactionBudget};
use weir::runtime::gate::EpochGate;
use weir::runtime::routing::{EpochRouter, SlotSender};
use weir::runtime::transactions::Transactions;
use weir::runtime::Ack;
use weir::{Result, WeirError};
use weir_testkit::Rng;

const SOURCES: usize = 2;
const KEYED: usize = 2;
const WORDS: [&str; 5] = ["a", "b", "c", "d", "e"];
const TOPIC: &str = "in";
const INTERVAL_MS: u64 = 100;
const CHECKPOINT_TIMEOUT_MS: u64 = 300;
const TXN_TIMEOUT_MS: u64 = 1_500;
const TOLERABLE_FAILURES: u32 = 5;
const RETAINED: u32 = 2;

/// Which faults a schedule injects, in parts per thousand per step.
#[derive(Debug, Clone, Copy)]
struct Faults {
    crash: u64,
    commit_fails: u64,
    commit_ack_lost: u64,
    snapshot_fails: u64,
    slow_snapshot: u64,
    /// `_metadata` cannot be written after every ack is in.
    metadata_fails: u64,
    source_stalls: u64,
    pause: u64,
}

// ---------------------------------------------------------------- commit point

#[derive(Debug, Default)]
struct Txn {
    begun_at: u64,
    /// Which transaction: what the log's records carry.
    id: u64,
    /// Written, not yet in the log (librdkafka's queue, in flight).
    in_flight: Vec<(String, u64)>,
}

#[derive(Debug, Default)]
struct Broker {
    clock: u64,
    /// Each producer's open transaction.
    open: [Option<Txn>; 2],
    /// Producers whose transaction the broker aborted for its age.
    expired: [bool; 2],
    /// One output partition's log: every record delivered, with its
    /// transaction, in the order the broker appended them.
    log: Vec<(u64, String, u64)>,
    /// Transactions committed (their records in the log are visible).
    committed_txns: std::collections::HashSet<u64>,
    next_txn: u64,
    committed_offsets: Offsets,
    committed_checkpoint: Option<u64>,
    committed_ids: Vec<u64>,
    /// Transactions the broker aborted because they outlived the timeout.
    timed_out: u32,
    /// Commits per producer.
    commits: [u32; 2],
    /// Records sent again into the transaction a failed checkpoint's
    /// next epoch moved to.
    resent: u32,
    /// Faults armed for the next commit.
    fail_next_commit: bool,
    lose_next_commit_ack: bool,
}

/// An in-memory Kafka: each transactional producer's transaction, the
/// group's committed offsets with their checkpoint id, and a clock.
type Kafka = Arc<Mutex<Broker>>;

/// One producer's commit point.
#[derive(Debug)]
struct FakeCommitPoint {
    broker: Kafka,
    slot: usize,
}

fn failure(reason: &str) -> WeirError {
    WeirError::Task {
        task: "fake commit point".into(),
        reason: reason.into(),
    }
}

impl Broker {
    /// The broker aborts a transaction older than its timeout.
    fn expire(&mut self) {
        for slot in 0..2 {
            if let Some(t) = &self.open[slot] {
                if self.clock - t.begun_at > TXN_TIMEOUT_MS {
                    if std::env::var("SIM_DEBUG").is_ok() {
                        eprintln!(
                            "broker aborts txn of producer {slot} begun at {} at {}",
                            t.begun_at, self.clock
                        );
                    }
                    self.open[slot] = None;
                    self.expired[slot] = true;
                    self.timed_out += 1;
                }
            }
        }
    }

    fn set_clock(&mut self, now: u64) {
        self.clock = now;
        self.expire();
    }

    /// The data path: a record into producer `slot`'s open transaction.
    /// Only the broker's own abort (a pause) may have closed it: a sink
    /// writing into a producer with no transaction is a protocol bug.
    fn write(&mut self, slot: usize, word: &str, count: u64) -> Result<()> {
        self.expire();
        match &mut self.open[slot] {
            Some(t) => {
                t.in_flight.push((word.to_string(), count));
                Ok(())
            }
            None if self.expired[slot] => Err(failure(
                "produce outside a transaction (aborted by the broker)",
            )),
            None => panic!("a sink wrote ({word}, {count}) into producer {slot}, which has no open transaction"),
        }
    }

    /// Producer `slot`'s records in flight reach the log, in order (as
    /// librdkafka's idempotent producer keeps them per partition); another
    /// producer's may reach it before or after.
    fn deliver(&mut self, slot: usize) {
        if let Some(t) = &mut self.open[slot] {
            let id = t.id;
            for (w, c) in std::mem::take(&mut t.in_flight) {
                self.log.push((id, w, c));
            }
        }
    }

    /// What a read_committed reader sees: the log's records of committed
    /// transactions, in log order.
    fn committed_output(&self) -> impl Iterator<Item = (&String, u64)> {
        self.log
            .iter()
            .filter(|(t, _, _)| self.committed_txns.contains(t))
            .map(|(_, w, c)| (w, *c))
    }

    /// What a restarted process's `init_transactions` does, for both
    /// transactional ids: aborts the open transactions of the previous
    /// incarnation.
    fn fence(&mut self) {
        self.open = Default::default();
        self.expired = Default::default();
    }

    fn group_offsets(&self) -> GroupOffsets {
        GroupOffsets {
            offsets: self.committed_offsets.clone(),
            checkpoint_id: self.committed_checkpoint,
        }
    }
}

impl CommitPoint for FakeCommitPoint {
    fn is_transactional(&self) -> bool {
        true
    }

    fn begin(&self) -> Result<()> {
        let mut b = self.broker.lock().unwrap();
        let slot = self.slot;
        assert!(
            b.open[slot].is_none(),
            "begin with a transaction open in producer {slot}"
        );
        b.next_txn += 1;
        b.open[slot] = Some(Txn {
            begun_at: b.clock,
            id: b.next_txn,
            in_flight: Vec::new(),
        });
        b.expired[slot] = false;
        Ok(())
    }

    fn prepare(&self) -> Result<()> {
        let mut b = self.broker.lock().unwrap();
        b.expire();
        if b.open[self.slot].is_none() {
            return Err(failure("transaction aborted by the broker"));
        }
        Ok(())
    }

    fn flush(&self) -> Result<()> {
        self.broker.lock().unwrap().deliver(self.slot);
        Ok(())
    }

    fn commit(&self, offsets: &CommitOffsets) -> Result<()> {
        // Every partition carries the marker of the checkpoint it commits.
        let ids: Vec<Option<u64>> = offsets
            .iter()
            .map(|(_, (_, metadata))| weir::kafka::parse_marker(metadata))
            .collect();
        let checkpoint_id = ids[0].expect("offsets carry a checkpoint marker");
        assert!(
            ids.iter().all(|id| *id == Some(checkpoint_id)),
            "one commit, one checkpoint: {ids:?}"
        );
        let offsets: Offsets = offsets
            .iter()
            .map(|(tp, (o, _))| (tp.clone(), *o))
            .collect();
        let mut b = self.broker.lock().unwrap();
        b.expire();
        // commit_transaction flushes first.
        b.deliver(self.slot);
        if std::mem::take(&mut b.fail_next_commit) {
            return Err(failure("commit failed (injected)"));
        }
        let Some(txn) = b.open[self.slot].take() else {
            return Err(failure("transaction aborted by the broker"));
        };
        assert!(
            b.clock - txn.begun_at <= TXN_TIMEOUT_MS,
            "a transaction outlived its timeout and was committed"
        );
        assert!(
            !b.committed_ids.contains(&checkpoint_id),
            "checkpoint {checkpoint_id} committed twice"
        );
        b.committed_txns.insert(txn.id);
        b.committed_offsets = offsets;
        b.committed_checkpoint = Some(checkpoint_id);
        b.committed_ids.push(checkpoint_id);
        b.commits[self.slot] += 1;
        if std::mem::take(&mut b.lose_next_commit_ack) {
            return Err(failure("commit applied, ack lost (injected)"));
        }
        Ok(())
    }

    fn abort(&self) -> Result<()> {
        self.broker.lock().unwrap().open[self.slot] = None;
        Ok(())
    }

    fn transaction_age(&self) -> Option<Duration> {
        let b = self.broker.lock().unwrap();
        b.open[self.slot]
            .as_ref()
            .map(|t| Duration::from_millis(b.clock - t.begun_at))
    }
}

/// A keyed task's sink: writes a word's count into a producer.
struct FakeWriter<'a>(&'a Kafka);

impl SlotSender<(String, u64)> for FakeWriter<'_> {
    fn send(&mut self, slot: usize, (word, count): &(String, u64), again: bool) -> Result<()> {
        let mut b = self.0.lock().unwrap();
        b.resent += u32::from(again);
        b.write(slot, word, *count)
    }
}

// ---------------------------------------------------------------- durable disk

/// A `chk-N` folder: `_metadata` once prepared, `_committed` once its
/// transaction committed, and the keyed snapshots it holds.
#[derive(Debug, Clone, Default)]
struct Folder {
    meta: Option<CheckpointMetadata>,
    committed_marker: bool,
    snapshots: BTreeMap<u32, HashMap<String, u64>>,
}

fn topology() -> Topology {
    Topology {
        max_parallelism: KEYED as u32,
        operators: vec![
            OperatorInfo {
                uid: "kafka-source".into(),
                kind: "kafka-source".into(),
                parallelism: SOURCES as u32,
                state: None,
            },
            OperatorInfo {
                uid: "word-count".into(),
                kind: "word-count".into(),
                parallelism: KEYED as u32,
                state: None,
            },
        ],
    }
}

// ---------------------------------------------------------------- one attempt

struct Source {
    next: usize,
    triggers: VecDeque<Barrier>,
    stalled_until: u64,
}

struct Keyed {
    aligner: BarrierAligner,
    counts: HashMap<String, u64>,
    /// Which transaction its output goes into, what it holds and keeps.
    router: EpochRouter<(String, u64)>,
    /// A slow snapshot's ack, sent at the given time.
    delayed_ack: Option<(u64, Ack)>,
}

struct InFlight {
    round: AckCollector,
    deadline: u64,
    trigger_time: u64,
    /// Every ack is in and `Transactions::on_acked` ran: the sinks write
    /// the next epoch while `_metadata` is written and the commit runs, at
    /// a later step.
    acked: bool,
}

struct Attempt {
    sources: Vec<Source>,
    /// `channels[s][k]`: source s → keyed k, FIFO.
    channels: Vec<Vec<VecDeque<Element<String>>>>,
    keyed: Vec<Keyed>,
    gate: Arc<EpochGate>,
    transactions: Transactions,
    acks: VecDeque<Ack>,
    due: u64,
    in_flight: Option<InFlight>,
    consecutive_failures: u32,
}

/// Why the attempt ends: the job restarts from the last checkpoint.
struct Restart;

struct Sim {
    rng: Rng,
    faults: Faults,
    clock: u64,
    input: Vec<Vec<&'static str>>,
    folders: BTreeMap<u64, Folder>,
    kafka: Kafka,
    /// Transactional producers: one, or two alternating per epoch.
    producers: usize,
    budget: TransactionBudget,
    attempt: Option<Attempt>,
    next_id: u64,
    paused: bool,
    restarts: u32,
    coordinator_ran: u64,
}

fn route(word: &str) -> usize {
    (word.as_bytes()[0] as usize) % KEYED
}

impl Sim {
    fn new(seed: u64, records: usize, faults: Faults, producers: usize) -> Self {
        let mut rng = Rng::new(seed);
        let input = (0..SOURCES)
            .map(|_| {
                (0..records)
                    .map(|_| WORDS[rng.below(WORDS.len() as u64) as usize])
                    .collect()
            })
            .collect();
        Self {
            rng,
            faults,
            clock: 0,
            input,
            folders: BTreeMap::new(),
            kafka: Kafka::default(),
            producers,
            budget: TransactionBudget {
                transaction_timeout: Duration::from_millis(TXN_TIMEOUT_MS),
                interval: Duration::from_millis(INTERVAL_MS),
                checkpoint_timeout: Duration::from_millis(CHECKPOINT_TIMEOUT_MS),
            },
            attempt: None,
            next_id: 1,
            paused: false,
            restarts: 0,
            coordinator_ran: 0,
        }
    }

    fn chance(&mut self, per_mille: u64) -> bool {
        per_mille > 0 && self.rng.below(1000) < per_mille
    }

    fn expected(&self) -> HashMap<String, u64> {
        let mut m = HashMap::new();
        for p in &self.input {
            for w in p {
                *m.entry(w.to_string()).or_insert(0) += 1;
            }
        }
        m
    }

    /// Start-up: the recovery decision over folders and the commit point,
    /// as `runtime::job::recover` makes it.
    fn start(&mut self) {
        self.kafka.lock().unwrap().fence();
        let group = self.kafka.lock().unwrap().group_offsets();
        let folders: Vec<FolderFacts> = self
            .folders
            .iter()
            .map(|(id, f)| FolderFacts {
                name: format!("chk-{id:010}"),
                id: Some(*id),
                contents: match &f.meta {
                    Some(m) => FolderContents::Valid(Box::new(m.clone())),
                    None => FolderContents::Unfinished("missing _metadata".into()),
                },
                committed_marker: f.committed_marker,
            })
            .collect();
        self.next_id = self
            .next_id
            .max(self.folders.keys().max().map_or(0, |m| m + 1));
        let named = group.checkpoint_id;
        let observed = Observed {
            folders,
            group: Some(group),
            topology: topology(),
            forced: None,
        };
        self.folders.retain(|_, f| f.meta.is_some());
        let (restored, discard) = match decide(&observed) {
            Decision::Refuse(msg) => panic!("recovery refused: {msg}"),
            Decision::Fresh { discard } => {
                assert_eq!(
                    named, None,
                    "fresh start although checkpoint {named:?} committed"
                );
                (None, discard)
            }
            Decision::Restore {
                checkpoint,
                discard,
            } => {
                assert_eq!(
                    Some(checkpoint.checkpoint_id),
                    named,
                    "recovery must restore the checkpoint the commit point names"
                );
                (Some(*checkpoint), discard)
            }
        };
        for id in discard {
            self.folders.remove(&id);
        }
        let offsets = restored
            .as_ref()
            .map(|m| m.offsets_map())
            .unwrap_or_default();
        let snapshots = restored
            .as_ref()
            .map(|m| self.folders[&m.checkpoint_id].snapshots.clone())
            .unwrap_or_default();
        let restored_id = restored.as_ref().map_or(0, |m| m.checkpoint_id);
        let gate = Arc::new(EpochGate::new(restored_id));
        let points = (0..self.producers)
            .map(|slot| {
                Box::new(FakeCommitPoint {
                    broker: self.kafka.clone(),
                    slot,
                }) as Box<dyn CommitPoint>
            })
            .collect();
        let transactions = Transactions::open(points, gate.clone(), restored_id).expect("begin");
        self.attempt = Some(Attempt {
            sources: (0..SOURCES)
                .map(|s| Source {
                    next: offsets
                        .get(&(TOPIC.to_string(), s as i32))
                        .map_or(0, |o| *o as usize),
                    triggers: VecDeque::new(),
                    stalled_until: 0,
                })
                .collect(),
            channels: (0..SOURCES)
                .map(|_| (0..KEYED).map(|_| VecDeque::new()).collect())
                .collect(),
            keyed: (0..KEYED)
                .map(|k| Keyed {
                    aligner: BarrierAligner::new(SOURCES, CheckpointMode::ExactlyOnce),
                    counts: snapshots.get(&(k as u32)).cloned().unwrap_or_default(),
                    router: EpochRouter::new(restored_id),
                    delayed_ack: None,
                })
                .collect(),
            gate,
            transactions,
            acks: VecDeque::new(),
            due: self.clock + INTERVAL_MS,
            in_flight: None,
            consecutive_failures: 0,
        });
    }

    /// A failed attempt: the job restarts (its fence aborts the open
    /// transactions).
    fn restart(&mut self) {
        self.attempt = None;
        self.restarts += 1;
        self.start();
    }

    /// One random step of the running attempt.
    fn step(&mut self, faults_on: bool) -> std::result::Result<(), Restart> {
        self.clock += 1 + self.rng.below(10);
        if faults_on && self.chance(self.faults.pause) {
            // SIGSTOP/SIGCONT: the clock jumps past the transaction timeout.
            self.clock += TXN_TIMEOUT_MS + 1;
            self.paused = true;
        }
        {
            let mut b = self.kafka.lock().unwrap();
            b.set_clock(self.clock);
            // librdkafka delivers in the background, each producer on its own.
            if self.rng.below(3) == 0 {
                let slot = self.rng.below(2) as usize;
                b.deliver(slot);
            }
        }
        // The Coordinator polls its acks at least every 20 ms (the real one
        // every 100 ms at most), whatever the other tasks do.
        let action = self.rng.below(10);
        if action >= 8 || self.clock >= self.coordinator_ran + 20 {
            self.coordinator_ran = self.clock;
            return self.coordinator_step(faults_on);
        }
        match action {
            0..=3 => self.source_step(faults_on),
            _ => self.keyed_step(faults_on),
        }
    }

    fn source_step(&mut self, faults_on: bool) -> std::result::Result<(), Restart> {
        let s = self.rng.below(SOURCES as u64) as usize;
        let stall = faults_on && self.chance(self.faults.source_stalls);
        let clock = self.clock;
        let a = self.attempt.as_mut().expect("running");
        let src = &mut a.sources[s];
        if stall {
            src.stalled_until = clock + CHECKPOINT_TIMEOUT_MS * 2;
        }
        if src.stalled_until > clock {
            return Ok(());
        }
        if let Some(b) = src.triggers.pop_front() {
            for k in 0..KEYED {
                a.channels[s][k].push_back(Element::Barrier(b));
            }
            a.acks.push_back(Ack::Source {
                subtask: s as u32,
                checkpoint_id: b.checkpoint_id,
                offsets: vec![PartitionOffset {
                    topic: TOPIC.into(),
                    partition: s as i32,
                    offset: src.next as i64,
                    max_timestamp: None,
                }],
            });
            return Ok(());
        }
        if let Some(word) = self.input[s].get(src.next) {
            src.next += 1;
            a.channels[s][route(word)].push_back(Element::Records(vec![word.to_string()]));
        }
        Ok(())
    }

    fn keyed_step(&mut self, faults_on: bool) -> std::result::Result<(), Restart> {
        let k = self.rng.below(KEYED as u64) as usize;
        let snapshot_fails = faults_on && self.chance(self.faults.snapshot_fails);
        let slow = faults_on && self.chance(self.faults.slow_snapshot);
        let clock = self.clock;
        let a = self.attempt.as_mut().expect("running");
        let gate = &a.gate;
        let t = &mut a.keyed[k];
        if let Some((at, _)) = &t.delayed_ack {
            if *at <= clock {
                let (_, ack) = t.delayed_ack.take().expect("ack");
                a.acks.push_back(ack);
            }
        }
        // The cancel notice, as the keyed task checks it every loop.
        if let Some(p) = t.aligner.pending() {
            if gate.cancelled() >= p {
                t.aligner.cancel(gate.cancelled());
            }
        }
        let mut writer = FakeWriter(&self.kafka);
        // Held output goes out once its epoch has a route; copies are
        // dropped or sent again once the previous checkpoint is decided.
        if t.router.watching() {
            t.router.poll(gate, &mut writer).map_err(|_| Restart)?;
        }
        let readable: Vec<usize> = (0..SOURCES)
            .filter(|i| !t.aligner.is_blocked(*i) && !a.channels[*i][k].is_empty())
            .collect();
        if readable.is_empty() {
            return Ok(());
        }
        let input = readable[self.rng.below(readable.len() as u64) as usize];
        let element = a.channels[input][k].pop_front().expect("readable");
        match element {
            Element::Records(words) => {
                for w in words {
                    let c = t.counts.entry(w.clone()).or_insert(0);
                    *c += 1;
                    let item = (w, *c);
                    // As `Output::send_item` does.
                    if t.router.watching() {
                        t.router.poll(gate, &mut writer).map_err(|_| Restart)?;
                    }
                    match t.router.slot() {
                        Some(slot) => {
                            writer.send(slot, &item, false).map_err(|_| Restart)?;
                            if t.router.keeps_copies() {
                                t.router.copied(item, 1);
                            }
                        }
                        None => t.router.hold(item, 1),
                    }
                }
            }
            Element::Barrier(b) => {
                let aligned = t.aligner.on_barrier(input, b).expect("barrier order");
                if let Some(b) = aligned {
                    let id = b.checkpoint_id;
                    if gate.cancelled() >= id {
                        return Ok(()); // the keyed task's cancelled-checkpoint guard
                    }
                    // Output held for its route belongs to epoch N and goes
                    // out before the snapshot. Checkpoint N is triggered
                    // only after N-1 committed or failed, and epoch N is
                    // routed by then, so the real task's wait is over at
                    // once: it never blocks here.
                    let settled = t
                        .router
                        .settle(gate, &mut writer, || true)
                        .map_err(|_| Restart)?;
                    assert!(
                        settled,
                        "barrier {id} before checkpoint {} was decided and epoch {id} routed",
                        id - 1
                    );
                    // The snapshot goes into the claimed folder only if it
                    // still exists (`CheckpointStore::snapshot_target`).
                    let handle = match self.folders.get_mut(&id) {
                        Some(f) if !snapshot_fails => {
                            f.snapshots.insert(k as u32, t.counts.clone());
                            Ok(StateHandle {
                                uid: "word-count".into(),
                                subtask: k as u32,
                                key_groups: (k as u32, k as u32 + 1),
                                path: format!("state/word-count/{k}"),
                                size_bytes: 0,
                                files: vec![],
                            })
                        }
                        Some(_) => Err("snapshot failed (injected)".to_string()),
                        None => Err("checkpoint folder is gone".to_string()),
                    };
                    t.router
                        .next_epoch(id, gate, &mut writer)
                        .map_err(|_| Restart)?;
                    let ack = Ack::Task {
                        task: format!("word-count-{k}"),
                        checkpoint_id: id,
                        handles: handle.map(|h| vec![h]),
                        alignment_ms: 0,
                        sync_ms: 0,
                    };
                    if slow {
                        t.delayed_ack = Some((clock + CHECKPOINT_TIMEOUT_MS, ack));
                    } else {
                        a.acks.push_back(ack);
                    }
                }
            }
            Element::Watermark(_) | Element::Idle(_) | Element::EndOfStream => {
                unreachable!("the simulation sends records and barriers only")
            }
        }
        Ok(())
    }

    fn coordinator_step(&mut self, faults_on: bool) -> std::result::Result<(), Restart> {
        let crash_between = faults_on && self.chance(self.faults.crash * 20);
        let crash_after = faults_on && self.chance(self.faults.crash * 20);
        let metadata_fails = faults_on && self.chance(self.faults.metadata_fails);
        if faults_on && self.chance(self.faults.commit_fails) {
            self.kafka.lock().unwrap().fail_next_commit = true;
        }
        if faults_on && self.chance(self.faults.commit_ack_lost) {
            self.kafka.lock().unwrap().lose_next_commit_ack = true;
        }
        let clock = self.clock;
        let a = self.attempt.as_mut().expect("running");
        let Some(flight) = a.in_flight.as_mut() else {
            if clock >= a.due {
                let id = self.next_id;
                self.next_id += 1;
                self.folders.insert(id, Folder::default()); // the claim
                let barrier = Barrier {
                    checkpoint_id: id,
                    timestamp_ms: clock,
                    then_stop: false,
                };
                for s in &mut a.sources {
                    s.triggers.push_back(barrier);
                }
                let window = match a.transactions.age() {
                    Some(age) => self.budget.ack_deadline(age).as_millis() as u64,
                    None => CHECKPOINT_TIMEOUT_MS,
                };
                a.in_flight = Some(InFlight {
                    round: AckCollector::new(id, SOURCES + KEYED),
                    deadline: clock + window,
                    trigger_time: clock,
                    acked: false,
                });
            }
            return Ok(());
        };
        while let Some(ack) = a.acks.pop_front() {
            flight.round.on_ack(ack);
        }
        let id = flight.round.checkpoint_id;
        if std::env::var("SIM_DEBUG").is_ok() {
            eprintln!(
                "t={clock} ckpt {id} acked {}/{} deadline {} age {:?}",
                flight.round.acked,
                flight.round.expected,
                flight.deadline,
                a.transactions.age()
            );
        }
        // Acks that complete the round after its deadline are too late, as
        // for the Coordinator's `recv_timeout`.
        let timed_out = clock > flight.deadline && !flight.acked;
        let complete = flight.round.is_complete() && flight.round.declined.is_empty();
        if !timed_out && complete && !flight.acked {
            // Every ack is in: the next epoch is routed, and the sinks go on
            // before this checkpoint is prepared.
            flight.acked = true;
            return a.transactions.on_acked(id).map_err(|_| Restart);
        }
        let metadata_fails = flight.acked && metadata_fails;
        if flight.acked && !metadata_fails {
            let meta = CheckpointMetadata {
                format_version: FORMAT_VERSION,
                job: "sim".into(),
                checkpoint_id: id,
                trigger_time_ms: flight.trigger_time,
                prepared_time_ms: clock,
                topology: topology(),
                source_offsets: flight
                    .round
                    .offsets
                    .iter()
                    .map(|((t, p), o)| PartitionOffset {
                        topic: t.clone(),
                        partition: *p,
                        offset: *o,
                        max_timestamp: None,
                    })
                    .collect(),
                state: flight.round.state.clone(),
            };
            let offsets = flight.round.offsets.clone();
            self.folders.get_mut(&id).expect("claimed").meta = Some(meta);
            if crash_between {
                return Err(Restart); // prepared, never committed
            }
            a.transactions
                .commit(&CommitOffsets::for_checkpoint(id, &offsets))
                .map_err(|_| Restart)?;
            if crash_after {
                return Err(Restart); // committed, `_committed` never written
            }
            self.folders.get_mut(&id).expect("claimed").committed_marker = true;
            a.transactions
                .after_commit(id, false)
                .map_err(|_| Restart)?;
            a.in_flight = None;
            a.consecutive_failures = 0;
            a.due = clock + INTERVAL_MS;
            let retained: Vec<Retained> = self
                .folders
                .iter()
                .map(|(id, f)| Retained {
                    id: *id,
                    complete: f.meta.is_some() && f.committed_marker,
                })
                .collect();
            for old in to_prune(&retained, RETAINED) {
                self.folders.remove(&old);
            }
            return Ok(());
        }
        if !(timed_out
            || metadata_fails
            || (flight.round.is_complete() && !flight.round.declined.is_empty()))
        {
            return Ok(());
        }
        // Failed: cancel notice, folder removed, the next epoch joins this
        // one's transaction, sinks released.
        a.gate.cancel(id);
        self.folders.remove(&id);
        a.transactions.on_failed(id);
        a.in_flight = None;
        a.consecutive_failures += 1;
        a.due = clock + INTERVAL_MS;
        if a.consecutive_failures > TOLERABLE_FAILURES {
            return Err(Restart);
        }
        if let Some(age) = a.transactions.age() {
            if !self.budget.allows_another_checkpoint(age) {
                return Err(Restart);
            }
        }
        Ok(())
    }

    fn all_committed(&self) -> bool {
        let b = self.kafka.lock().unwrap();
        (0..SOURCES).all(|s| {
            b.committed_offsets
                .get(&(TOPIC.to_string(), s as i32))
                .copied()
                == Some(self.input[s].len() as i64)
        })
    }

    /// Runs a schedule to completion: faults for a while, then none until
    /// every record's output is committed.
    fn run(&mut self, fault_steps: usize) {
        self.start();
        for i in 0.. {
            let faults_on = i < fault_steps;
            assert!(i < fault_steps + 200_000, "no progress without faults");
            if faults_on && self.chance(self.faults.crash) {
                self.attempt = None; // SIGKILL: nothing in memory survives
                self.restarts += 1;
                self.start();
                continue;
            }
            if self.step(faults_on).is_err() {
                self.restart();
            }
            if !faults_on && self.all_committed() {
                break;
            }
        }
    }

    fn check(&self, seed: u64) {
        let b = self.kafka.lock().unwrap();
        let mut got: HashMap<(String, u64), u32> = HashMap::new();
        let mut last: HashMap<&String, u64> = HashMap::new();
        for (w, c) in b.committed_output() {
            *got.entry((w.clone(), c)).or_insert(0) += 1;
            let before = last.insert(w, c).unwrap_or(0);
            assert!(
                c > before,
                "seed {seed}: {w}'s count {c} follows {before} in the log: a key's updates out of order"
            );
        }
        let expected = self.expected();
        let want: HashMap<(String, u64), u32> = expected
            .iter()
            .flat_map(|(w, n)| (1..=*n).map(move |c| ((w.clone(), c), 1)))
            .collect();
        assert_eq!(
            got, want,
            "seed {seed}: committed output is not exactly the output of the committed epochs"
        );
        let mut ids = b.committed_ids.clone();
        ids.dedup();
        assert_eq!(ids, b.committed_ids, "seed {seed}: an id committed twice");
        assert!(
            b.committed_ids.windows(2).all(|w| w[0] < w[1]),
            "seed {seed}: commits out of order"
        );
        if !self.paused {
            assert_eq!(
                b.timed_out, 0,
                "seed {seed}: the broker had to abort a transaction without a pause"
            );
        }
    }
}

/// What a mix of schedules did.
#[derive(Default)]
struct Tally {
    schedules: u64,
    restarts: u32,
    timeouts: u32,
    commits: [u32; 2],
    resent: u32,
}

fn schedules(count: u64, faults: Faults, producers: usize) -> Tally {
    let mut tally = Tally::default();
    let only: Option<u64> = std::env::var("SIM_SEED").ok().and_then(|s| s.parse().ok());
    for seed in 1..=count {
        if only.is_some_and(|o| o != seed * 7919) {
            continue;
        }
        let mut sim = Sim::new(seed * 7919, 40, faults, producers);
        sim.run(3_000);
        sim.check(seed * 7919);
        tally.schedules += 1;
        tally.restarts += sim.restarts;
        let b = sim.kafka.lock().unwrap();
        tally.timeouts += b.timed_out;
        tally.resent += b.resent;
        for slot in 0..2 {
            tally.commits[slot] += b.commits[slot];
        }
    }
    tally
}

#[test]
fn the_protocol_holds_under_thousands_of_seeded_fault_schedules() {
    let mixes = [
        (
            "crashes",
            Faults {
                crash: 3,
                commit_fails: 0,
                commit_ack_lost: 0,
                snapshot_fails: 0,
                metadata_fails: 0,
                slow_snapshot: 0,
                source_stalls: 0,
                pause: 0,
            },
        ),
        (
            "commit faults",
            Faults {
                crash: 0,
                commit_fails: 30,
                commit_ack_lost: 30,
                snapshot_fails: 0,
                metadata_fails: 0,
                slow_snapshot: 0,
                source_stalls: 0,
                pause: 0,
            },
        ),
        (
            "failed and slow checkpoints",
            Faults {
                crash: 0,
                commit_fails: 0,
                commit_ack_lost: 0,
                snapshot_fails: 20,
                metadata_fails: 100,
                slow_snapshot: 20,
                source_stalls: 5,
                pause: 0,
            },
        ),
        (
            "pauses",
            Faults {
                crash: 0,
                commit_fails: 0,
                commit_ack_lost: 0,
                snapshot_fails: 0,
                metadata_fails: 0,
                slow_snapshot: 0,
                source_stalls: 0,
                pause: 2,
            },
        ),
        (
            "everything",
            Faults {
                crash: 2,
                commit_fails: 10,
                commit_ack_lost: 10,
                snapshot_fails: 10,
                metadata_fails: 30,
                slow_snapshot: 10,
                source_stalls: 3,
                pause: 1,
            },
        ),
    ];
    let mut total = 0;
    for producers in [1, 2] {
        for (name, faults) in mixes {
            let t = schedules(500, faults, producers);
            println!(
                "simulation: {} schedules with {name}, {producers} producer(s): {} restarts, {} transactions \
                 aborted by the broker, commits per producer {:?}, {} records sent again after a failed checkpoint",
                t.schedules, t.restarts, t.timeouts, t.commits, t.resent
            );
            assert!(
                t.restarts > 0 || name == "failed and slow checkpoints",
                "{name}: faults never fired"
            );
            if producers == 2 {
                assert!(
                    t.commits[0] > 0 && t.commits[1] > 0,
                    "{name}: both producers commit: {:?}",
                    t.commits
                );
            } else {
                assert_eq!(t.commits[1], 0, "one producer: {:?}", t.commits);
            }
            if producers == 2 && name == "failed and slow checkpoints" {
                assert!(
                    t.resent > 0,
                    "{name}: no epoch ever moved into a failed checkpoint's transaction"
                );
            }
            total += t.schedules;
        }
    }
    println!("simulation: {total} seeded schedules explored, every invariant held");
}
