//! The Coordinator's transactions: one commit point per slot, and which
//! epoch writes into which (single mode).
//!
//! With exactly-once delivery a job has two transactional producers, as
//! Flink's `KafkaSink` pools them, and epochs alternate between them:
//! output of epoch N+1 goes into one producer's transaction while the
//! other's transaction N commits, instead of waiting for that commit in
//! memory. Epoch N+1 is routed once every task acked checkpoint N and
//! transaction N's producer is flushed: every record of epoch N is then in
//! the broker's log, so no record of epoch N+1, from the other producer,
//! can land before one of epoch N in a partition, and a key's updates keep
//! their order (as Flink flushes its producer at the barrier). What is
//! saved against one producer is the wait for `_metadata` and the commit's
//! round trips. The commit point's rules stay those of one transaction per
//! checkpoint (docs/checkpoint-protocol.md):
//! - transaction N holds exactly epoch N's output and commits with
//!   checkpoint N's offsets, after checkpoint N's `_metadata` is durable;
//! - commits are in checkpoint order: the Coordinator commits N+1 only
//!   after N;
//! - a failed checkpoint N leaves transaction N open, and epoch N+1 joins
//!   it ([`super::routing`] sends what already went elsewhere again), as
//!   with one producer. The other producer's transaction, which may hold
//!   part of epoch N+1, is aborted once every task has acked a later
//!   barrier: no sink writes into it after that;
//! - both transactional ids are fenced when an attempt starts, so a
//!   killed process's transactions, in either producer, are aborted.
//!
//! With at-least-once delivery there is one producer and no transaction:
//! epoch N+1 is routed once the producer was flushed after checkpoint N.
//!
//! The same code runs the deterministic simulation (tests/simulation.rs)
//! over in-memory commit points, with one slot and with two.

use std::sync::Arc;
use std::time::Duration;

use super::commit::{CommitOffsets, CommitPoint};
use super::gate::EpochGate;
use crate::error::Result;

/// The slots' commit points and where each epoch goes.
pub struct Transactions {
    slots: Vec<Box<dyn CommitPoint>>,
    gate: Arc<EpochGate>,
    /// The slot whose open transaction the next commit commits: the oldest
    /// epoch not committed writes into it.
    committing: usize,
    /// A slot whose transaction may hold output of an epoch that moved
    /// into `committing`'s after a failed checkpoint: aborted once every
    /// task acked a later barrier.
    stale: Option<usize>,
}

impl Transactions {
    /// An attempt's transactions after recovery restored checkpoint
    /// `restored` (0: none): the first epoch's is begun and routed.
    /// `slots` holds one commit point per producer: two alternate, one
    /// serves every epoch.
    pub fn open(
        slots: Vec<Box<dyn CommitPoint>>,
        gate: Arc<EpochGate>,
        restored: u64,
    ) -> Result<Self> {
        assert!(
            matches!(slots.len(), 1 | 2),
            "one producer, or two alternating"
        );
        let t = Self {
            slots,
            gate,
            committing: 0,
            stale: None,
        };
        if t.is_transactional() {
            t.slots[0].begin()?;
        }
        t.gate.route(restored + 1, 0);
        Ok(t)
    }

    pub fn is_transactional(&self) -> bool {
        self.slots[0].is_transactional()
    }

    fn alternating(&self) -> bool {
        self.slots.len() == 2
    }

    fn other(&self) -> usize {
        1 - self.committing
    }

    /// Age of the transaction the next commit commits.
    pub fn age(&self) -> Option<Duration> {
        self.slots[self.committing].transaction_age()
    }

    /// Every task acked checkpoint `id`, none declined, so every sink
    /// holds what it has of epoch `id + 1`. Without a transaction, the
    /// producer is flushed (epoch `id`'s output is in Kafka before the
    /// checkpoint exists) and later output released. With two producers,
    /// transaction `id`'s producer is flushed (every record of epoch `id`
    /// is in the log before any of epoch `id + 1`), a stale transaction is
    /// aborted (every sink has passed barrier `id`, and none writes into it
    /// again), and epoch `id + 1` is routed into the other producer's new
    /// transaction: its output goes out while checkpoint `id` completes.
    pub fn on_acked(&mut self, id: u64) -> Result<()> {
        if !self.is_transactional() {
            self.slots[0].prepare()?;
            self.gate.release(id);
            self.gate.route(id + 1, 0);
            return Ok(());
        }
        if !self.alternating() {
            return Ok(());
        }
        self.slots[self.committing].flush()?;
        let next = self.other();
        if let Some(stale) = self.stale.take() {
            tracing::debug!(
                checkpoint_id = id,
                slot = stale,
                "aborting the transaction whose epoch moved after a failed checkpoint"
            );
            self.slots[stale].abort()?;
        }
        if self.slots[next].transaction_age().is_none() {
            self.slots[next].begin()?;
        }
        self.gate.route(id + 1, next);
        Ok(())
    }

    /// Commits checkpoint `id`: its transaction, with `offsets`. Its
    /// `_metadata` is durable (the caller's order).
    pub fn commit(&self, offsets: &CommitOffsets) -> Result<()> {
        let slot = &self.slots[self.committing];
        slot.prepare()?;
        slot.commit(offsets)
    }

    /// After checkpoint `id`'s commit (and its `_committed` marker): the
    /// next epoch's transaction is the one to commit next, the committed
    /// producer is free for the epoch after, and sinks waiting for `id`
    /// go on. After a final checkpoint nothing is begun, and a transaction
    /// begun for an epoch that will not come is aborted.
    pub fn after_commit(&mut self, id: u64, then_stop: bool) -> Result<()> {
        if self.alternating() {
            self.committing = self.other();
            if then_stop && self.slots[self.committing].transaction_age().is_some() {
                self.slots[self.committing].abort()?;
            }
        } else if self.is_transactional() && !then_stop {
            self.slots[0].begin()?;
            self.gate.route(id + 1, 0);
        }
        self.gate.release(id);
        Ok(())
    }

    /// Checkpoint `id` failed: its transaction stays open for the next
    /// checkpoint, and epoch `id + 1` joins it; if epoch `id + 1` was
    /// routed to the other producer already, that producer's transaction
    /// is stale until every task acked the next checkpoint. Without a
    /// transaction, later output is released.
    pub fn on_failed(&mut self, id: u64) {
        if self.alternating() {
            let other = self.other();
            if self.gate.route_of(id + 1) == Some(other) {
                self.stale = Some(other);
            }
        }
        // Routed first: a sink that sees the release looks its epoch's
        // route up, which must then be this one.
        self.gate.route(id + 1, self.committing);
        self.gate.release(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// A commit point that logs what the protocol asked of it.
    struct Logged {
        slot: usize,
        log: Arc<Mutex<Vec<String>>>,
        open: Mutex<bool>,
    }

    impl Logged {
        fn note(&self, what: String) {
            self.log.lock().unwrap().push(what);
        }
    }

    impl CommitPoint for Logged {
        fn is_transactional(&self) -> bool {
            true
        }
        fn begin(&self) -> Result<()> {
            let mut open = self.open.lock().unwrap();
            assert!(
                !*open,
                "begin on producer {} with a transaction open",
                self.slot
            );
            *open = true;
            self.note(format!("begin {}", self.slot));
            Ok(())
        }
        fn prepare(&self) -> Result<()> {
            Ok(())
        }
        fn flush(&self) -> Result<()> {
            self.note(format!("flush {}", self.slot));
            Ok(())
        }
        fn commit(&self, offsets: &CommitOffsets) -> Result<()> {
            let mut open = self.open.lock().unwrap();
            assert!(
                *open,
                "commit on producer {} without a transaction",
                self.slot
            );
            *open = false;
            let (_, (_, marker)) = offsets.iter().next().unwrap();
            self.note(format!("commit {} {marker}", self.slot));
            Ok(())
        }
        fn abort(&self) -> Result<()> {
            *self.open.lock().unwrap() = false;
            self.note(format!("abort {}", self.slot));
            Ok(())
        }
        fn transaction_age(&self) -> Option<Duration> {
            self.open.lock().unwrap().then_some(Duration::ZERO)
        }
    }

    fn two() -> (Transactions, Arc<EpochGate>, Arc<Mutex<Vec<String>>>) {
        let log = Arc::new(Mutex::new(Vec::new()));
        let gate = Arc::new(EpochGate::new(0));
        let slots = (0..2)
            .map(|slot| {
                Box::new(Logged {
                    slot,
                    log: log.clone(),
                    open: Mutex::new(false),
                }) as Box<dyn CommitPoint>
            })
            .collect();
        let t = Transactions::open(slots, gate.clone(), 0).unwrap();
        (t, gate, log)
    }

    fn offsets(id: u64) -> CommitOffsets {
        let mut o = crate::runtime::commit::Offsets::new();
        o.insert(("in".into(), 0), id as i64);
        CommitOffsets::for_checkpoint(id, &o)
    }

    fn complete(t: &mut Transactions, id: u64) {
        t.on_acked(id).unwrap();
        t.commit(&offsets(id)).unwrap();
        t.after_commit(id, false).unwrap();
    }

    #[test]
    fn epochs_alternate_once_the_previous_producer_is_flushed() {
        let (mut t, gate, log) = two();
        assert_eq!(gate.route_of(1), Some(0));
        t.on_acked(1).unwrap();
        assert_eq!(
            gate.route_of(2),
            Some(1),
            "epoch 2 is routed once 1 is flushed"
        );
        assert_eq!(gate.released(), 0, "before checkpoint 1 commits");
        t.commit(&offsets(1)).unwrap();
        t.after_commit(1, false).unwrap();
        assert_eq!(gate.released(), 1);
        complete(&mut t, 2);
        assert_eq!(gate.route_of(3), Some(0));
        assert_eq!(
            *log.lock().unwrap(),
            [
                "begin 0",
                "flush 0",
                "begin 1",
                "commit 0 weir-checkpoint=1",
                "flush 1",
                "begin 0",
                "commit 1 weir-checkpoint=2"
            ]
        );
    }

    #[test]
    fn a_failed_checkpoint_moves_the_next_epoch_and_aborts_the_other_transaction_later() {
        let (mut t, gate, log) = two();
        complete(&mut t, 1);
        // Checkpoint 2 fails after every ack (its _metadata could not be
        // written): epoch 3 was routed to producer 0 already.
        t.on_acked(2).unwrap();
        assert_eq!(gate.route_of(3), Some(0));
        t.on_failed(2);
        assert_eq!(gate.route_of(3), Some(1), "epoch 3 joins transaction 2");
        assert_eq!(gate.released(), 2);
        // Checkpoint 3: producer 0's transaction is aborted once every
        // task acked 3, and begun again for epoch 4.
        t.on_acked(3).unwrap();
        assert_eq!(gate.route_of(4), Some(0));
        t.commit(&offsets(3)).unwrap();
        t.after_commit(3, false).unwrap();
        complete(&mut t, 4);
        assert_eq!(
            log.lock().unwrap()[4..],
            [
                "flush 1",
                "begin 0",
                "flush 1",
                "abort 0",
                "begin 0",
                "commit 1 weir-checkpoint=3",
                "flush 0",
                "begin 1",
                "commit 0 weir-checkpoint=4"
            ]
        );
    }

    #[test]
    fn a_checkpoint_that_fails_before_its_acks_leaves_the_other_producer_clean() {
        let (mut t, gate, log) = two();
        t.on_failed(1);
        assert_eq!(gate.route_of(2), Some(0), "epoch 2 joins transaction 1");
        complete(&mut t, 2);
        assert_eq!(
            *log.lock().unwrap(),
            [
                "begin 0",
                "flush 0",
                "begin 1",
                "commit 0 weir-checkpoint=2"
            ]
        );
    }

    #[test]
    fn a_final_checkpoint_aborts_the_transaction_begun_for_an_epoch_that_never_comes() {
        let (mut t, _gate, log) = two();
        t.on_acked(1).unwrap();
        t.commit(&offsets(1)).unwrap();
        t.after_commit(1, true).unwrap();
        assert_eq!(
            *log.lock().unwrap(),
            [
                "begin 0",
                "flush 0",
                "begin 1",
                "commit 0 weir-checkpoint=1",
                "abort 1"
            ]
        );
        assert_eq!(t.age(), None, "nothing left open");
    }
}
