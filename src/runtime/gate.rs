//! The epoch gate between the Coordinator and the sinks (exactly-once).
//!
//! After barrier N a sink may not produce output of epoch N+1 into the
//! Kafka transaction until transaction N is committed (or checkpoint N is
//! aborted, in which case epoch N+1's output joins the same transaction).
//! The Coordinator releases N; sinks check the released epoch cheaply on
//! their hot path and wait on it only when their buffer is full.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

#[derive(Debug, Default)]
pub struct EpochGate {
    released: AtomicU64,
    /// The highest checkpoint the Coordinator gave up on (timed out or
    /// failed): the cancel notice, as Flink's CancelCheckpointMarker, but
    /// out of band so that it reaches a subtask whose inputs are blocked.
    cancelled: AtomicU64,
    lock: Mutex<()>,
    changed: Condvar,
}

impl EpochGate {
    pub fn new(released: u64) -> Self {
        Self {
            released: AtomicU64::new(released),
            ..Default::default()
        }
    }

    /// The highest checkpoint whose commit (or abort) released the sinks.
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

    pub fn release(&self, checkpoint_id: u64) {
        let _guard = self.lock.lock().expect("gate lock");
        self.released.fetch_max(checkpoint_id, Ordering::AcqRel);
        self.changed.notify_all();
    }

    /// Waits up to `timeout` for `checkpoint_id` to be released.
    pub fn wait(&self, checkpoint_id: u64, timeout: Duration) -> bool {
        let guard = self.lock.lock().expect("gate lock");
        let (_guard, _) = self
            .changed
            .wait_timeout_while(guard, timeout, |_| self.released() < checkpoint_id)
            .expect("gate lock");
        self.released() >= checkpoint_id
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn wait_returns_once_released() {
        let gate = Arc::new(EpochGate::new(3));
        assert!(gate.wait(3, Duration::ZERO));
        assert!(!gate.wait(4, Duration::from_millis(10)));
        let g = gate.clone();
        let t = std::thread::spawn(move || g.wait(4, Duration::from_secs(10)));
        std::thread::sleep(Duration::from_millis(20));
        gate.release(4);
        assert!(t.join().unwrap());
        gate.release(2);
        assert_eq!(gate.released(), 4, "never moves back");
    }
}
