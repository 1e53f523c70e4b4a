//! A sink's side of the epoch gate ([`super::gate`]): the epoch it writes,
//! the slot (transactional producer) that epoch's transaction is in, the
//! output it holds while the epoch has no route yet, and copies of what it
//! sent while the previous checkpoint was undecided.
//!
//! Why copies: with two producers alternating, output of epoch N+1 goes
//! into the other producer's transaction while checkpoint N is still being
//! prepared and committed. If checkpoint N fails instead, its transaction stays open for
//! the next checkpoint, and epoch N+1's output must be in that same
//! transaction: the two cannot commit as one otherwise (a commit carries
//! one checkpoint's offsets). The sink then sends its copies again into
//! N's transaction, in order, before anything newer; what it had sent
//! into the other transaction is aborted with it once every task has
//! passed the next barrier (`super::transactions`). Copies live from the
//! route (every ack in, the other producer flushed) to the commit: the
//! `_metadata` write and the commit's round trips, a few milliseconds; a
//! sink keeps the batch it sent rather than copying it.
//!
//! The same state machine runs the real sinks (`super::output`) and the
//! deterministic simulation of the protocol (tests/simulation.rs).

use std::time::Duration;

use super::gate::{EpochGate, GateEvent};
use crate::error::Result;

/// Where a sink sends: implemented by the sink's writer.
pub trait SlotSender<T> {
    /// Sends `item` into slot `slot`'s open transaction. The item stays
    /// the caller's (it may be kept as a copy). `again`: a copy, sent
    /// before into a transaction that is given up (counted then).
    fn send(&mut self, slot: usize, item: &T, again: bool) -> Result<()>;
    /// An item no longer needed, for its buffers to be reused.
    fn recycle(&mut self, _item: T) {}
}

/// The sink's position in the epochs. `T` is a unit of output (a batch of
/// records, one record, a dead letter); counts are in records.
pub struct EpochRouter<T> {
    /// The epoch whose output the sink writes now: checkpoint `epoch`
    /// commits it.
    epoch: u64,
    /// The slot of `epoch`'s transaction; None while the epoch has no
    /// route (output is held).
    slot: Option<usize>,
    /// The previous checkpoint, not yet committed or failed: output sent
    /// meanwhile is kept as copies.
    undecided: Option<u64>,
    held: Vec<T>,
    held_records: usize,
    copies: Vec<T>,
    copied_records: usize,
}

impl<T> EpochRouter<T> {
    /// A sink starting after checkpoint `released` (the restored one, or
    /// 0): it writes epoch `released + 1` once that has a route.
    pub fn new(released: u64) -> Self {
        Self {
            epoch: released + 1,
            slot: None,
            undecided: None,
            held: Vec::new(),
            held_records: 0,
            copies: Vec::new(),
            copied_records: 0,
        }
    }

    /// A sink without a gate (group mode): everything goes into slot 0 at
    /// once. With a route and nothing undecided, polling and settling have
    /// nothing to do, and only a barrier ([`Self::next_epoch`], which an
    /// output without a gate refuses) would change that.
    pub fn ungated() -> Self {
        Self {
            slot: Some(0),
            ..Self::new(0)
        }
    }

    /// Whether the gate must be looked at before the next send (the hot
    /// path's only check).
    #[inline]
    pub fn watching(&self) -> bool {
        self.slot.is_none() || self.undecided.is_some()
    }

    /// The slot to send into now; None: hold.
    #[inline]
    pub fn slot(&self) -> Option<usize> {
        self.slot
    }

    /// The epoch being written.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Whether what is sent now must also be kept ([`Self::copied`]).
    #[inline]
    pub fn keeps_copies(&self) -> bool {
        self.undecided.is_some()
    }

    /// Records held or kept: bounded by the caller.
    pub fn pending_records(&self) -> usize {
        self.held_records + self.copied_records
    }

    /// `item` could not be sent yet (no route): it waits, in order.
    pub fn hold(&mut self, item: T, records: usize) {
        self.held.push(item);
        self.held_records += records;
    }

    /// The last held item, to append to (a batch of results).
    pub fn last_held(&mut self) -> Option<&mut T> {
        self.held.last_mut()
    }

    /// Counts records appended to the last held item.
    pub fn held_more(&mut self, records: usize) {
        self.held_records += records;
    }

    /// `item` was sent while the previous checkpoint is undecided: kept.
    pub fn copied(&mut self, item: T, records: usize) {
        self.copies.push(item);
        self.copied_records += records;
    }

    /// Catches up with the gate: once the previous checkpoint is decided,
    /// the copies are dropped (it committed) or sent again into the
    /// epoch's new route (it failed); once the epoch has a route, what was
    /// held is sent, in order.
    pub fn poll(&mut self, gate: &EpochGate, sender: &mut impl SlotSender<T>) -> Result<()> {
        if let Some(n) = self.undecided {
            if gate.released() >= n {
                self.undecided = None;
                let route = gate.route_of(self.epoch);
                match (self.slot, route) {
                    (Some(sent_to), Some(now)) if sent_to != now => {
                        tracing::debug!(
                            epoch = self.epoch,
                            from_slot = sent_to,
                            to_slot = now,
                            records = self.copied_records,
                            "checkpoint failed: this epoch's output sent again into its transaction"
                        );
                        self.slot = Some(now);
                        for item in std::mem::take(&mut self.copies) {
                            sender.send(now, &item, true)?;
                            sender.recycle(item);
                        }
                    }
                    _ => {
                        for item in std::mem::take(&mut self.copies) {
                            sender.recycle(item);
                        }
                    }
                }
                self.copied_records = 0;
            }
        }
        if self.slot.is_none() {
            if let Some(slot) = gate.route_of(self.epoch) {
                self.slot = Some(slot);
                let records = std::mem::take(&mut self.held_records);
                for item in std::mem::take(&mut self.held) {
                    sender.send(slot, &item, false)?;
                    if self.undecided.is_some() {
                        self.copies.push(item);
                    } else {
                        sender.recycle(item);
                    }
                }
                if self.undecided.is_some() {
                    self.copied_records += records;
                }
            }
        }
        Ok(())
    }

    /// Waits, while more than `bound` records are held or kept, for the
    /// gate to decide what lets them go; then polls. False if `cancelled`
    /// said stop meanwhile.
    pub fn bound(
        &mut self,
        bound: usize,
        gate: &EpochGate,
        sender: &mut impl SlotSender<T>,
        cancelled: impl Fn() -> bool,
    ) -> Result<bool> {
        while self.pending_records() >= bound {
            let until = match (self.slot, self.undecided) {
                (None, _) => GateEvent::Routed(self.epoch),
                (Some(_), Some(n)) => GateEvent::Released(n),
                (Some(_), None) => break,
            };
            while !gate.wait_for(until, Duration::from_millis(100)) {
                if cancelled() {
                    return Ok(false);
                }
            }
            self.poll(gate, sender)?;
        }
        Ok(true)
    }

    /// Before the snapshot of the epoch's checkpoint: waits for the
    /// previous checkpoint to be decided and the epoch to have a route
    /// (both are a moment away: checkpoint N is triggered only after N-1
    /// completed or failed), and sends what was held. False if
    /// `cancelled` said stop meanwhile.
    pub fn settle(
        &mut self,
        gate: &EpochGate,
        sender: &mut impl SlotSender<T>,
        cancelled: impl Fn() -> bool,
    ) -> Result<bool> {
        loop {
            self.poll(gate, sender)?;
            let until = match (self.undecided, self.slot) {
                (Some(n), _) => GateEvent::Released(n),
                (None, None) => GateEvent::Routed(self.epoch),
                (None, Some(_)) => return Ok(true),
            };
            if !gate.wait_for(until, Duration::from_millis(100)) && cancelled() {
                return Ok(false);
            }
        }
    }

    /// The sink snapshotted checkpoint `id`: epoch `id + 1` begins, with
    /// `id` undecided. Call [`Self::settle`] first.
    pub fn next_epoch(
        &mut self,
        id: u64,
        gate: &EpochGate,
        sender: &mut impl SlotSender<T>,
    ) -> Result<()> {
        debug_assert!(self.held.is_empty() && self.copies.is_empty());
        self.epoch = id + 1;
        self.slot = None;
        self.undecided = Some(id);
        self.poll(gate, sender)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records what was sent where.
    #[derive(Default)]
    struct Log(Vec<(usize, u32)>);

    impl SlotSender<u32> for Log {
        fn send(&mut self, slot: usize, item: &u32, _again: bool) -> Result<()> {
            self.0.push((slot, *item));
            Ok(())
        }
    }

    /// Sends `item` as the real sinks do.
    fn write(r: &mut EpochRouter<u32>, gate: &EpochGate, log: &mut Log, item: u32) {
        if r.watching() {
            r.poll(gate, log).unwrap();
        }
        match r.slot() {
            Some(slot) => {
                log.send(slot, &item, false).unwrap();
                if r.keeps_copies() {
                    r.copied(item, 1);
                }
            }
            None => r.hold(item, 1),
        }
    }

    #[test]
    fn output_waits_for_a_route_and_goes_out_at_once_once_routed() {
        let gate = EpochGate::new(0);
        let (mut r, mut log) = (EpochRouter::new(0), Log::default());
        write(&mut r, &gate, &mut log, 1);
        assert!(log.0.is_empty(), "no route yet: held");
        gate.route(1, 0);
        gate.route(2, 1);
        write(&mut r, &gate, &mut log, 2);
        assert_eq!(log.0, [(0, 1), (0, 2)]);
        // Barrier 1: epoch 2 goes into slot 1 at once, kept until 1 commits.
        r.settle(&gate, &mut log, || false).unwrap();
        r.next_epoch(1, &gate, &mut log).unwrap();
        write(&mut r, &gate, &mut log, 3);
        assert_eq!(log.0.last(), Some(&(1, 3)));
        assert_eq!(
            r.pending_records(),
            1,
            "a copy while checkpoint 1 is undecided"
        );
        gate.release(1);
        write(&mut r, &gate, &mut log, 4);
        assert_eq!(r.pending_records(), 0, "committed: the copies are dropped");
        assert_eq!(log.0, [(0, 1), (0, 2), (1, 3), (1, 4)]);
    }

    #[test]
    fn a_failed_checkpoint_moves_the_next_epoch_into_its_transaction_in_order() {
        let gate = EpochGate::new(0);
        let (mut r, mut log) = (EpochRouter::new(0), Log::default());
        gate.route(1, 0);
        gate.route(2, 1);
        write(&mut r, &gate, &mut log, 1);
        r.settle(&gate, &mut log, || false).unwrap();
        r.next_epoch(1, &gate, &mut log).unwrap();
        write(&mut r, &gate, &mut log, 2);
        write(&mut r, &gate, &mut log, 3);
        // Checkpoint 1 failed: epoch 2 joins slot 0's transaction.
        gate.route(2, 0);
        gate.release(1);
        write(&mut r, &gate, &mut log, 4);
        assert_eq!(
            log.0,
            [(0, 1), (1, 2), (1, 3), (0, 2), (0, 3), (0, 4)],
            "sent again into slot 0 before anything newer"
        );
        assert_eq!(r.pending_records(), 0);
    }

    #[test]
    fn held_output_routed_while_undecided_is_kept_too() {
        let gate = EpochGate::new(0);
        let (mut r, mut log) = (EpochRouter::new(0), Log::default());
        gate.route(1, 0);
        r.settle(&gate, &mut log, || false).unwrap();
        r.next_epoch(1, &gate, &mut log).unwrap();
        write(&mut r, &gate, &mut log, 7);
        assert_eq!(r.slot(), None, "epoch 2 has no route: held");
        gate.route(2, 1);
        write(&mut r, &gate, &mut log, 8);
        assert_eq!(log.0, [(1, 7), (1, 8)]);
        assert_eq!(r.pending_records(), 2, "both kept while 1 is undecided");
        gate.route(2, 0);
        gate.release(1);
        assert!(r.settle(&gate, &mut log, || false).unwrap());
        assert_eq!(log.0, [(1, 7), (1, 8), (0, 7), (0, 8)]);
    }

    #[test]
    fn an_ungated_router_sends_everything_to_slot_zero() {
        let gate = EpochGate::new(0);
        let (mut r, mut log) = (EpochRouter::<u32>::ungated(), Log::default());
        assert!(!r.watching());
        write(&mut r, &gate, &mut log, 1);
        assert_eq!(log.0, [(0, 1)]);
        assert!(
            r.settle(&gate, &mut log, || false).unwrap(),
            "nothing to wait for"
        );
        assert_eq!(log.0, [(0, 1)]);
    }
}
