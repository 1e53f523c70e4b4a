//! Barrier alignment for a subtask with several input channels.
//!
//! In exactly-once mode a channel that delivered barrier N is blocked (its
//! elements stay in the channel, so nothing is buffered without bound) until
//! every live channel has delivered N; only then does the subtask snapshot.
//! In at-least-once mode nothing is blocked: records after barrier N on a
//! fast channel are processed before the snapshot, so a replay may count
//! them twice. This type only keeps the books; the task loop asks it which
//! channels it may read.

use crate::config::CheckpointMode;
use crate::element::Barrier;

/// A barrier sequence that the protocol cannot produce.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AlignmentError {
    #[error("input {input} delivered barrier {got} while aligning checkpoint {expected}")]
    EpochMismatch {
        input: usize,
        expected: u64,
        got: u64,
    },
    #[error("input {input} delivered barrier {checkpoint_id} twice")]
    DuplicateBarrier { input: usize, checkpoint_id: u64 },
    #[error("input {input} delivered a barrier after its end of stream")]
    AfterEndOfStream { input: usize },
}

/// Alignment state of one subtask's inputs.
#[derive(Debug)]
pub struct BarrierAligner {
    mode: CheckpointMode,
    arrived: Vec<bool>,
    finished: Vec<bool>,
    pending: Option<Barrier>,
    /// Barriers of this checkpoint and older ones were cancelled: ignored
    /// when they still arrive.
    cancelled_up_to: u64,
}

impl BarrierAligner {
    pub fn new(inputs: usize, mode: CheckpointMode) -> Self {
        Self {
            mode,
            arrived: vec![false; inputs],
            finished: vec![false; inputs],
            pending: None,
            cancelled_up_to: 0,
        }
    }

    /// Whether the task must leave `input` unread for now.
    pub fn is_blocked(&self, input: usize) -> bool {
        self.mode == CheckpointMode::ExactlyOnce && self.arrived[input]
    }

    /// Whether `input` may still deliver elements.
    pub fn is_live(&self, input: usize) -> bool {
        !self.finished[input]
    }

    /// True once every input delivered its end of stream.
    pub fn all_finished(&self) -> bool {
        self.finished.iter().all(|f| *f)
    }

    /// The checkpoint being aligned, if any.
    pub fn pending(&self) -> Option<u64> {
        self.pending.map(|b| b.checkpoint_id)
    }

    /// The Coordinator cancelled `checkpoint_id`: a pending alignment of it
    /// (or of an older one) ends, every input is readable again, and its
    /// barriers still in the channels are dropped when they arrive.
    /// Returns true if an alignment was in progress.
    pub fn cancel(&mut self, checkpoint_id: u64) -> bool {
        self.cancelled_up_to = self.cancelled_up_to.max(checkpoint_id);
        match self.pending {
            Some(p) if p.checkpoint_id <= checkpoint_id => {
                self.pending = None;
                self.arrived.iter_mut().for_each(|a| *a = false);
                true
            }
            _ => false,
        }
    }

    /// Records barrier arrival; returns the barrier once it has arrived on
    /// every live input (time to snapshot and forward it).
    pub fn on_barrier(
        &mut self,
        input: usize,
        barrier: Barrier,
    ) -> Result<Option<Barrier>, AlignmentError> {
        if self.finished[input] {
            return Err(AlignmentError::AfterEndOfStream { input });
        }
        if barrier.checkpoint_id <= self.cancelled_up_to {
            return Ok(None);
        }
        match self.pending {
            Some(p) if p.checkpoint_id == barrier.checkpoint_id => {
                if self.arrived[input] {
                    return Err(AlignmentError::DuplicateBarrier {
                        input,
                        checkpoint_id: barrier.checkpoint_id,
                    });
                }
            }
            Some(p) if self.mode == CheckpointMode::ExactlyOnce => {
                return Err(AlignmentError::EpochMismatch {
                    input,
                    expected: p.checkpoint_id,
                    got: barrier.checkpoint_id,
                });
            }
            // At-least-once: an older barrier is stale, a newer one subsumes
            // the pending checkpoint (the Coordinator aborted it).
            Some(p) if barrier.checkpoint_id < p.checkpoint_id => return Ok(None),
            _ => {
                self.arrived.iter_mut().for_each(|a| *a = false);
                self.pending = Some(barrier);
            }
        }
        self.arrived[input] = true;
        Ok(self.complete_if_aligned())
    }

    /// Records that `input` ended; this may complete a pending alignment.
    pub fn on_end_of_stream(&mut self, input: usize) -> Option<Barrier> {
        self.finished[input] = true;
        self.arrived[input] = false;
        self.pending?;
        self.complete_if_aligned()
    }

    fn complete_if_aligned(&mut self) -> Option<Barrier> {
        let pending = self.pending?;
        let aligned = (0..self.arrived.len()).all(|i| self.finished[i] || self.arrived[i]);
        if !aligned {
            return None;
        }
        self.arrived.iter_mut().for_each(|a| *a = false);
        self.pending = None;
        Some(pending)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::element::Element;
    use std::collections::VecDeque;

    fn b(id: u64) -> Barrier {
        Barrier {
            checkpoint_id: id,
            timestamp_ms: 0,
            then_stop: false,
        }
    }

    /// What the task did, in order.
    #[derive(Debug, PartialEq)]
    enum Out {
        Rec(&'static str),
        Snapshot(u64),
        End,
    }

    /// Drives an aligner the way the keyed task does: round-robin over the
    /// inputs it may read, one element at a time, until nothing is readable.
    /// Returns what was processed and what was left unread per input.
    fn drive(
        mode: CheckpointMode,
        inputs: Vec<Vec<Element<&'static str>>>,
    ) -> Result<(Vec<Out>, Vec<usize>), AlignmentError> {
        let mut queues: Vec<VecDeque<_>> = inputs.into_iter().map(VecDeque::from).collect();
        let mut aligner = BarrierAligner::new(queues.len(), mode);
        let mut out = Vec::new();
        loop {
            let mut progressed = false;
            for (i, queue) in queues.iter_mut().enumerate() {
                if aligner.is_blocked(i) || !aligner.is_live(i) {
                    continue;
                }
                let Some(e) = queue.pop_front() else {
                    continue;
                };
                progressed = true;
                match e {
                    Element::Records(rs) => out.extend(rs.into_iter().map(Out::Rec)),
                    Element::Barrier(bar) => {
                        if let Some(done) = aligner.on_barrier(i, bar)? {
                            out.push(Out::Snapshot(done.checkpoint_id));
                        }
                    }
                    Element::Watermark(_) | Element::Idle(_) => {}
                    Element::EndOfStream => {
                        if let Some(done) = aligner.on_end_of_stream(i) {
                            out.push(Out::Snapshot(done.checkpoint_id));
                        }
                        if aligner.all_finished() {
                            out.push(Out::End);
                        }
                    }
                }
            }
            if !progressed {
                return Ok((out, queues.iter().map(VecDeque::len).collect()));
            }
        }
    }

    use Element::{Barrier as B, EndOfStream as Eos, Records as R};
    use Out::{End, Rec, Snapshot};

    #[test]
    fn exactly_once_blocks_an_input_until_all_barriers_arrive() {
        let (out, left) = drive(
            CheckpointMode::ExactlyOnce,
            vec![
                vec![R(vec!["a1"]), B(b(1)), R(vec!["a2"]), R(vec!["a3"])],
                vec![
                    R(vec!["b1"]),
                    R(vec!["b2"]),
                    R(vec!["b3"]),
                    B(b(1)),
                    R(vec!["b4"]),
                ],
            ],
        )
        .unwrap();
        // a2 and a3 wait behind barrier 1 until input 1 delivers it.
        assert_eq!(
            out,
            vec![
                Rec("a1"),
                Rec("b1"),
                Rec("b2"),
                Rec("b3"),
                Snapshot(1),
                Rec("a2"),
                Rec("b4"),
                Rec("a3"),
            ]
        );
        assert_eq!(left, vec![0, 0]);
    }

    #[test]
    fn a_blocked_input_is_left_unread() {
        let (out, left) = drive(
            CheckpointMode::ExactlyOnce,
            vec![
                vec![B(b(7)), R(vec!["a1"]), R(vec!["a2"])],
                vec![R(vec!["b1"])],
                vec![R(vec!["c1"]), B(b(7))],
            ],
        )
        .unwrap();
        // Input 1 never delivers barrier 7: inputs 0 and 2 stay blocked,
        // their records stay in their channels, no snapshot is taken.
        assert_eq!(out, vec![Rec("b1"), Rec("c1")]);
        assert_eq!(left, vec![2, 0, 0]);
    }

    #[test]
    fn at_least_once_does_not_block() {
        let (out, _) = drive(
            CheckpointMode::AtLeastOnce,
            vec![
                vec![B(b(1)), R(vec!["a1"]), R(vec!["a2"])],
                vec![R(vec!["b1"]), R(vec!["b2"]), B(b(1))],
            ],
        )
        .unwrap();
        // a1 and a2 are processed before the snapshot: they would be replayed.
        assert_eq!(
            out,
            vec![Rec("b1"), Rec("a1"), Rec("b2"), Rec("a2"), Snapshot(1)]
        );
    }

    #[test]
    fn epoch_mismatch_is_an_error() {
        let err = drive(
            CheckpointMode::ExactlyOnce,
            vec![vec![B(b(1))], vec![B(b(2))]],
        )
        .unwrap_err();
        assert_eq!(
            err,
            AlignmentError::EpochMismatch {
                input: 1,
                expected: 1,
                got: 2
            }
        );
    }

    #[test]
    fn duplicate_barrier_is_an_error() {
        let mut a = BarrierAligner::new(2, CheckpointMode::AtLeastOnce);
        assert_eq!(a.on_barrier(0, b(3)), Ok(None));
        assert_eq!(
            a.on_barrier(0, b(3)),
            Err(AlignmentError::DuplicateBarrier {
                input: 0,
                checkpoint_id: 3
            })
        );
    }

    #[test]
    fn at_least_once_newer_barrier_subsumes_an_aborted_one() {
        let mut a = BarrierAligner::new(2, CheckpointMode::AtLeastOnce);
        assert_eq!(a.on_barrier(0, b(3)), Ok(None));
        assert_eq!(a.on_barrier(0, b(4)), Ok(None));
        assert_eq!(a.on_barrier(1, b(3)), Ok(None), "stale barrier ignored");
        assert_eq!(a.on_barrier(1, b(4)), Ok(Some(b(4))));
    }

    #[test]
    fn end_of_stream_after_the_final_barrier() {
        let stop = Barrier {
            then_stop: true,
            ..b(9)
        };
        let (out, left) = drive(
            CheckpointMode::ExactlyOnce,
            vec![
                vec![R(vec!["a1"]), B(stop), Eos],
                vec![R(vec!["b1"]), R(vec!["b2"]), B(stop), Eos],
            ],
        )
        .unwrap();
        assert_eq!(out, vec![Rec("a1"), Rec("b1"), Rec("b2"), Snapshot(9), End]);
        assert_eq!(left, vec![0, 0]);
    }

    #[test]
    fn an_ended_input_does_not_hold_back_alignment() {
        let (out, _) = drive(
            CheckpointMode::ExactlyOnce,
            vec![vec![Eos], vec![R(vec!["b1"]), B(b(2)), R(vec!["b2"])]],
        )
        .unwrap();
        assert_eq!(out, vec![Rec("b1"), Snapshot(2), Rec("b2")]);
    }

    #[test]
    fn a_cancelled_alignment_unblocks_its_inputs_and_drops_late_barriers() {
        let mut a = BarrierAligner::new(2, CheckpointMode::ExactlyOnce);
        assert_eq!(a.on_barrier(0, b(5)), Ok(None));
        assert!(a.is_blocked(0));
        // Input 1 is stuck; the Coordinator times checkpoint 5 out.
        assert!(a.cancel(5));
        assert!(!a.is_blocked(0), "input 0 is readable again");
        assert_eq!(a.pending(), None);
        // Input 0 goes on to barrier 6 while input 1 still delivers 5.
        assert_eq!(a.on_barrier(0, b(6)), Ok(None));
        assert_eq!(a.on_barrier(1, b(5)), Ok(None), "late barrier 5 is dropped");
        assert!(!a.is_blocked(1));
        assert_eq!(a.on_barrier(1, b(6)), Ok(Some(b(6))));
        // Cancelling a checkpoint that is not being aligned changes nothing.
        assert!(!a.cancel(3));
    }

    /// The keyed task's loop over aligner and watermark valve together:
    /// what the operator saw, in order (records, watermark advances,
    /// snapshots with the watermark they saw).
    fn drive_with_valve(inputs: Vec<Vec<Element<&'static str>>>) -> Vec<String> {
        use crate::time::valve::WatermarkValve;
        let mut queues: Vec<VecDeque<_>> = inputs.into_iter().map(VecDeque::from).collect();
        let mut aligner = BarrierAligner::new(queues.len(), CheckpointMode::ExactlyOnce);
        let mut valve = WatermarkValve::new(queues.len());
        let mut seen = Vec::new();
        loop {
            let mut progressed = false;
            for (i, queue) in queues.iter_mut().enumerate() {
                if aligner.is_blocked(i) {
                    continue;
                }
                let Some(e) = queue.pop_front() else { continue };
                progressed = true;
                match e {
                    Element::Records(rs) => seen.extend(rs.into_iter().map(String::from)),
                    Element::Watermark(w) => {
                        if let Some(w) = valve.on_watermark(i, w) {
                            seen.push(format!("fire<={w}"));
                        }
                    }
                    Element::Barrier(bar) => {
                        if let Some(done) = aligner.on_barrier(i, bar).unwrap() {
                            seen.push(format!(
                                "snapshot {} at wm {}",
                                done.checkpoint_id,
                                valve.current()
                            ));
                        }
                    }
                    _ => {}
                }
            }
            if !progressed {
                return seen;
            }
        }
    }

    #[test]
    fn a_blocked_channel_holds_back_its_watermark_so_the_snapshot_sees_the_pre_barrier_one() {
        use Element::Watermark as W;
        let seen = drive_with_valve(vec![
            // Input 0: barrier 1, then a watermark that belongs after it.
            vec![W(10), B(b(1)), W(50), R(vec!["a-after"])],
            // Input 1: slower; its barrier comes after its own watermark 20.
            vec![R(vec!["b1"]), W(20), R(vec!["b2"]), B(b(1)), W(60)],
        ]);
        assert_eq!(
            seen,
            vec![
                "b1", // input 0 is blocked after its barrier: W(50) waits
                "fire<=10",
                "b2",
                // min(10, 20): nothing from after input 0's barrier.
                "snapshot 1 at wm 10",
                "fire<=20", // unblocked: 50 from input 0, still 20 from input 1
                "fire<=50",
                "a-after",
            ]
        );
    }
}
