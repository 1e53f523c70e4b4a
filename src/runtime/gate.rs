//! The epoch gate between the Coordinator and the sinks.
//!
//! Each epoch's output goes into the transaction of one *slot*: one of the
//! job's transactional producers (exactly-once), or its one producer
//! (at-least-once). The Coordinator publishes an epoch's *route* once that
//! slot's transaction is open for it; a sink sends an epoch's output only
//! once it has a route, and holds it meanwhile.
//!
//! With two producers alternating (exactly-once), epoch N+1 is routed to
//! the other slot once every task acked checkpoint N and transaction N's
//! producer is flushed: output of epoch N+1 goes out while `_metadata` is
//! written and transaction N commits.
//! Checkpoint N is *released* once it committed or failed. If it failed,
//! the Coordinator first routes epoch N+1 into N's transaction, which stays
//! open for the next checkpoint; a sink that sent output of epoch N+1
//! elsewhere sends it again there (`runtime::output`).
//!
//! With one producer (at-least-once), epoch N+1 is routed only once the
//! producer is flushed after checkpoint N, which keeps the flush to epoch
//! N's output.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

/// Routes kept: the sinks ask for the epoch they write and the next.
const ROUTES_KEPT: usize = 8;

#[derive(Debug, Default)]
pub struct EpochGate {
    released: AtomicU64,
    /// The highest checkpoint the Coordinator gave up on (timed out or
    /// failed): the cancel notice, as Flink's CancelCheckpointMarker, but
    /// out of band so that it reaches a subtask whose inputs are blocked.
    cancelled: AtomicU64,
    /// The highest epoch with a route: sinks holding output check it per
    /// record without a lock.
    routed: AtomicU64,
    /// Epoch and slot, the newest last.
    routes: Mutex<VecDeque<(u64, usize)>>,
    lock: Mutex<()>,
    changed: Condvar,
}

impl EpochGate {
    /// A gate after checkpoint `released` (the restored one, or 0), with
    /// no route yet.
    pub fn new(released: u64) -> Self {
        Self {
            released: AtomicU64::new(released),
            ..Default::default()
        }
    }

    /// The highest checkpoint whose commit (or failure) released the sinks.
    pub fn released(&self) -> u64 {
        self.released.load(Ordering::Acquire)
    }

    /// Cancels checkpoint `checkpoint_id` (and every older one): subtasks
    /// aligning it unblock their inputs and never snapshot it.
    pub fn cancel(&self, checkpoint_id: u64) {
        self.cancelled.fetch_max(checkpoint_id, Ordering::AcqRel);
    }

    /// The highest cancelled checkpoint.
    pub fn cancelled(&self) -> u64 {
        self.cancelled.load(Ordering::Acquire)
    }

    /// Checkpoint `checkpoint_id` committed or failed. A failed one's next
    /// epoch must have been routed into its transaction first.
    pub fn release(&self, checkpoint_id: u64) {
        let _guard = self.lock.lock().expect("gate lock");
        self.released.fetch_max(checkpoint_id, Ordering::AcqRel);
        self.changed.notify_all();
    }

    /// Epoch `epoch`'s output goes into slot `slot`'s open transaction
    /// (again, if the epoch had another route: its checkpoint's
    /// predecessor failed).
    pub fn route(&self, epoch: u64, slot: usize) {
        let _guard = self.lock.lock().expect("gate lock");
        {
            let mut routes = self.routes.lock().expect("routes lock");
            routes.retain(|(e, _)| *e != epoch);
            routes.push_back((epoch, slot));
            routes.make_contiguous().sort_unstable();
            while routes.len() > ROUTES_KEPT {
                routes.pop_front();
            }
        }
        self.routed.fetch_max(epoch, Ordering::AcqRel);
        self.changed.notify_all();
    }

    /// The slot of `epoch`'s transaction, once open.
    pub fn route_of(&self, epoch: u64) -> Option<usize> {
        if self.routed.load(Ordering::Acquire) < epoch {
            return None;
        }
        self.routes
            .lock()
            .expect("routes lock")
            .iter()
            .find(|(e, _)| *e == epoch)
            .map(|(_, s)| *s)
    }

    /// Waits up to `timeout` for `epoch` to have a route, or for
    /// `checkpoint_id` to be released, whichever `until` asks for; true
    /// once it holds.
    pub fn wait_for(&self, until: GateEvent, timeout: Duration) -> bool {
        let holds = || match until {
            GateEvent::Released(id) => self.released() >= id,
            GateEvent::Routed(epoch) => self.routed.load(Ordering::Acquire) >= epoch,
        };
        let guard = self.lock.lock().expect("gate lock");
        let (_guard, _) = self
            .changed
            .wait_timeout_while(guard, timeout, |_| !holds())
            .expect("gate lock");
        holds()
    }
}

/// What a sink may wait for at the gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateEvent {
    /// The checkpoint committed or failed.
    Released(u64),
    /// The epoch has a route.
    Routed(u64),
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn wait_returns_once_released() {
        let gate = Arc::new(EpochGate::new(3));
        let released = |id| GateEvent::Released(id);
        assert!(gate.wait_for(released(3), Duration::ZERO));
        assert!(!gate.wait_for(released(4), Duration::from_millis(10)));
        let g = gate.clone();
        let t = std::thread::spawn(move || g.wait_for(released(4), Duration::from_secs(10)));
        std::thread::sleep(Duration::from_millis(20));
        gate.release(4);
        assert!(t.join().unwrap());
        gate.release(2);
        assert_eq!(gate.released(), 4, "never moves back");
    }

    #[test]
    fn a_route_is_seen_once_published_and_may_be_moved() {
        let gate = Arc::new(EpochGate::new(0));
        assert_eq!(gate.route_of(1), None);
        let g = gate.clone();
        let t =
            std::thread::spawn(move || g.wait_for(GateEvent::Routed(2), Duration::from_secs(10)));
        gate.route(1, 0);
        gate.route(2, 1);
        assert!(t.join().unwrap());
        assert_eq!((gate.route_of(1), gate.route_of(2)), (Some(0), Some(1)));
        // Checkpoint 1 failed: epoch 2 joins its transaction.
        gate.route(2, 0);
        assert_eq!(gate.route_of(2), Some(0));
        assert_eq!(gate.route_of(3), None);
        for e in 3..20 {
            gate.route(e, (e % 2) as usize);
        }
        assert_eq!(gate.route_of(19), Some(1));
        assert_eq!(gate.route_of(2), None, "old routes are dropped");
    }
}
