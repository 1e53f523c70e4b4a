//! The watermark valve of a subtask with several input channels, as Flink's
//! `StatusWatermarkValve`.
//!
//! A keyed subtask reads one channel per source subtask. Its event time is
//! the minimum of its inputs' watermarks, because any input may still send a
//! record up to its own watermark. Idle inputs are left out, so that a source
//! without data does not stall everything; an input that comes back behind
//! the others rejoins only when it has caught up, so the output never goes
//! back.

/// A change of the valve's output, in the order to send it downstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValveOutput {
    /// The output watermark advanced to this value.
    Watermark(i64),
    /// Every input is idle (or ended).
    Idle,
    /// An input became active again after `Idle` was output.
    Active,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ChannelState {
    /// The highest watermark received; never decreases.
    watermark: i64,
    idle: bool,
    /// Active and `watermark >= last_output`: the channel counts towards
    /// the minimum.
    aligned: bool,
    /// End of stream: idle for good.
    ended: bool,
}

/// The watermark valve of one subtask.
#[derive(Debug, Clone)]
pub struct WatermarkValve {
    channels: Vec<ChannelState>,
    last_output: i64,
    idle_output: bool,
}

impl WatermarkValve {
    /// Every channel starts active, with watermark `i64::MIN`, aligned. A
    /// valve without inputs is idle from the start (and says nothing).
    pub fn new(inputs: usize) -> Self {
        Self {
            channels: vec![
                ChannelState {
                    watermark: i64::MIN,
                    idle: false,
                    aligned: true,
                    ended: false,
                };
                inputs
            ],
            last_output: i64::MIN,
            idle_output: inputs == 0,
        }
    }

    /// A valve whose channels hold the `(watermark, idle)` states of
    /// `inputs`, as a checkpoint kept them, with the output they give: the
    /// minimum over the active channels, or, when every one is idle, the
    /// highest watermark (the flush the last one's going idle made).
    pub fn restored(inputs: &[(i64, bool)]) -> Self {
        let mut v = Self::new(inputs.len());
        for (c, &(watermark, idle)) in v.channels.iter_mut().zip(inputs) {
            c.watermark = watermark;
            c.idle = idle;
        }
        let active_min = v
            .channels
            .iter()
            .filter(|c| !c.idle)
            .map(|c| c.watermark)
            .min();
        let all_max = v.channels.iter().map(|c| c.watermark).max();
        v.last_output = active_min.or(all_max).unwrap_or(i64::MIN);
        v.idle_output = v.channels.iter().all(|c| c.idle);
        let last_output = v.last_output;
        for c in &mut v.channels {
            c.aligned = !c.idle && c.watermark >= last_output;
        }
        v
    }

    /// An input that was not there before (a writer first heard of): a
    /// channel at `i64::MIN`, active, which counts toward the minimum once
    /// it has caught up with the output, as a channel back from idleness
    /// does. Returns its index and the output changes (`Active` if every
    /// other channel was idle).
    pub fn add_input(&mut self) -> (usize, Vec<ValveOutput>) {
        self.channels.push(ChannelState {
            watermark: i64::MIN,
            idle: false,
            aligned: self.last_output == i64::MIN,
            ended: false,
        });
        (self.channels.len() - 1, self.settle())
    }

    /// The highest watermark `input` delivered and whether it is idle.
    pub fn input(&self, input: usize) -> Option<(i64, bool)> {
        self.channels.get(input).map(|c| (c.watermark, c.idle))
    }

    /// A watermark arrived on `input`: returns the new output watermark if
    /// it advanced.
    ///
    /// Ignored (`None`): a watermark not above the channel's last one, a
    /// watermark on an idle or ended channel (a sender reports `Active`
    /// before its watermarks, as in Flink), and an `input` out of range.
    pub fn on_watermark(&mut self, input: usize, wm: i64) -> Option<i64> {
        let last_output = self.last_output;
        let ch = self.channels.get_mut(input)?;
        if ch.idle || ch.ended || wm <= ch.watermark {
            return None;
        }
        ch.watermark = wm;
        if wm >= last_output {
            ch.aligned = true;
        }
        self.advance_to_min()
    }

    /// `input` became idle (`true`) or active (`false`): returns the output
    /// changes, in order. At most two:
    /// - going idle: `[Watermark(w)]` if the idle channel was holding the
    ///   minimum back; when it was the last active one, `[Watermark(max),
    ///   Idle]` or `[Idle]` (all watermarks are flushed to the highest one,
    ///   since no channel will advance any more);
    /// - going active: `[Active]` if the valve was idle, followed by
    ///   `Watermark(w)` if the channel's return lets the minimum advance.
    ///
    /// A repeated status, an ended channel and an `input` out of range
    /// change nothing.
    pub fn on_idle(&mut self, input: usize, idle: bool) -> Vec<ValveOutput> {
        let last_output = self.last_output;
        let Some(ch) = self.channels.get_mut(input) else {
            return Vec::new();
        };
        if ch.ended || ch.idle == idle {
            return Vec::new();
        }
        ch.idle = idle;
        // A returning channel counts only once it has caught up.
        ch.aligned = !idle && ch.watermark >= last_output;
        self.settle()
    }

    /// An input ended for good (end of stream): it no longer holds anything
    /// back, like an idle channel that never comes back. The output does not
    /// jump to `i64::MAX`: a stop with a final checkpoint ends the streams
    /// too, and must not fire every window. (A bounded input that wants
    /// that sends `Watermark(i64::MAX)` before its end.) Returns the output
    /// changes as [`on_idle`](Self::on_idle) does.
    pub fn on_end(&mut self, input: usize) -> Vec<ValveOutput> {
        let Some(ch) = self.channels.get_mut(input) else {
            return Vec::new();
        };
        if ch.ended {
            return Vec::new();
        }
        ch.ended = true;
        ch.idle = true;
        ch.aligned = false;
        self.settle()
    }

    /// The last output watermark (`i64::MIN` before any).
    pub fn current(&self) -> i64 {
        self.last_output
    }

    /// Whether the last status output was `Idle`.
    pub fn is_idle(&self) -> bool {
        self.idle_output
    }

    /// After a channel changed status: the status change first, then the
    /// watermark.
    fn settle(&mut self) -> Vec<ValveOutput> {
        let mut out = Vec::new();
        if self.channels.iter().any(|c| !c.idle) {
            if self.idle_output {
                self.idle_output = false;
                out.push(ValveOutput::Active);
            }
            out.extend(self.advance_to_min().map(ValveOutput::Watermark));
        } else {
            let max = self.channels.iter().map(|c| c.watermark).max();
            if let Some(max) = max.filter(|&m| m > self.last_output) {
                self.last_output = max;
                out.push(ValveOutput::Watermark(max));
            }
            if !self.idle_output {
                self.idle_output = true;
                out.push(ValveOutput::Idle);
            }
        }
        out
    }

    /// Outputs the minimum over the aligned channels if it is above the
    /// last output.
    fn advance_to_min(&mut self) -> Option<i64> {
        let min = self
            .channels
            .iter()
            .filter(|c| c.aligned)
            .map(|c| c.watermark)
            .min()?;
        if min > self.last_output {
            self.last_output = min;
            Some(min)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use ValveOutput::{Active, Idle, Watermark};

    #[test]
    fn minimum_over_inputs() {
        let mut v = WatermarkValve::new(3);
        assert_eq!(v.current(), i64::MIN);
        assert_eq!(v.on_watermark(0, 10), None);
        assert_eq!(v.on_watermark(1, 20), None);
        assert_eq!(v.on_watermark(2, 5), Some(5));
        assert_eq!(v.on_watermark(2, 30), Some(10));
        assert_eq!(v.on_watermark(0, 25), Some(20));
        assert_eq!(v.on_watermark(1, 40), Some(25));
        assert_eq!(v.current(), 25);
    }

    #[test]
    fn lagging_input_holds_the_output() {
        let mut v = WatermarkValve::new(2);
        assert_eq!(v.on_watermark(0, 100), None);
        assert_eq!(v.on_watermark(0, 200), None);
        assert_eq!(v.on_watermark(0, 300), None);
        assert_eq!(v.on_watermark(1, 1), Some(1));
        assert_eq!(v.on_watermark(1, 2), Some(2));
        assert_eq!(v.on_watermark(1, 1000), Some(300));
    }

    #[test]
    fn restored_channels_give_the_output_they_gave_live() {
        let v = WatermarkValve::restored(&[(7, false), (9, false), (3, true)]);
        assert_eq!((v.current(), v.is_idle()), (7, false));
        assert_eq!(v.input(2), Some((3, true)));
        // Every one idle: the highest, as the flush when the last went idle.
        let v = WatermarkValve::restored(&[(7, true), (9, true)]);
        assert_eq!((v.current(), v.is_idle()), (9, true));
        let v = WatermarkValve::restored(&[]);
        assert_eq!((v.current(), v.is_idle()), (i64::MIN, true));
    }

    #[test]
    fn an_added_input_joins_once_caught_up() {
        let mut v = WatermarkValve::new(1);
        assert_eq!(v.on_watermark(0, 20), Some(20));
        let (i, out) = v.add_input();
        assert_eq!((i, out), (1, vec![]));
        // Behind the output: it does not pull it back, nor hold it.
        assert_eq!(v.on_watermark(1, 5), None);
        assert_eq!(v.on_watermark(0, 30), Some(30));
        assert_eq!(v.on_watermark(1, 40), None);
        assert_eq!(v.on_watermark(0, 50), Some(40));
        // Added while every other input is idle: the valve is active again.
        assert_eq!(v.on_idle(0, true), vec![]);
        assert_eq!(v.on_idle(1, true), vec![Watermark(50), Idle]);
        assert_eq!(v.add_input(), (2, vec![Active]));
    }

    #[test]
    fn watermarks_never_decrease() {
        let mut v = WatermarkValve::new(2);
        v.on_watermark(0, 50);
        assert_eq!(v.on_watermark(1, 40), Some(40));
        // Lower or equal watermarks on a channel are ignored.
        assert_eq!(v.on_watermark(1, 10), None);
        assert_eq!(v.on_watermark(1, 40), None);
        assert_eq!(v.on_watermark(0, 45), None);
        assert_eq!(v.on_watermark(1, 60), Some(50));
        assert_eq!(v.current(), 50);
    }

    #[test]
    fn idle_input_leaves_the_minimum() {
        let mut v = WatermarkValve::new(3);
        v.on_watermark(0, 10);
        v.on_watermark(1, 20);
        assert_eq!(v.on_idle(2, true), vec![Watermark(10)]);
        assert_eq!(v.on_idle(2, true), vec![]);
        assert_eq!(v.on_watermark(0, 30), Some(20));
        // An idle channel that was not the minimum changes nothing.
        assert_eq!(v.on_idle(0, true), vec![]);
        assert_eq!(v.on_watermark(1, 25), Some(25));
        // A watermark on an idle channel is ignored.
        assert_eq!(v.on_watermark(2, 1000), None);
    }

    #[test]
    fn all_idle_flushes_to_the_max() {
        let mut v = WatermarkValve::new(2);
        v.on_watermark(0, 100);
        assert_eq!(v.on_watermark(1, 50), Some(50));
        assert_eq!(v.on_idle(0, true), vec![]);
        assert_eq!(v.on_idle(1, true), vec![Watermark(100), Idle]);
        assert!(v.is_idle());
        assert_eq!(v.current(), 100);
    }

    #[test]
    fn all_idle_without_flush() {
        let mut v = WatermarkValve::new(2);
        v.on_watermark(0, 10);
        v.on_watermark(1, 10);
        assert_eq!(v.on_idle(0, true), vec![]);
        assert_eq!(v.on_idle(1, true), vec![Idle]);
    }

    #[test]
    fn rejoin_only_when_caught_up() {
        let mut v = WatermarkValve::new(2);
        v.on_watermark(0, 100);
        v.on_watermark(1, 10);
        assert_eq!(v.current(), 10);
        assert_eq!(v.on_idle(1, true), vec![Watermark(100)]);
        // Back, but behind: active, not aligned, does not pull back.
        assert_eq!(v.on_idle(1, false), vec![]);
        assert_eq!(v.on_watermark(1, 50), None);
        assert_eq!(v.current(), 100);
        assert_eq!(v.on_watermark(0, 200), Some(200));
        assert_eq!(v.on_watermark(1, 150), None);
        // Caught up: aligned again and holding the minimum.
        assert_eq!(v.on_watermark(1, 210), None);
        assert_eq!(v.on_watermark(0, 300), Some(210));
        assert_eq!(v.on_watermark(1, 400), Some(300));
    }

    #[test]
    fn active_after_all_idle() {
        let mut v = WatermarkValve::new(2);
        v.on_watermark(0, 100);
        v.on_watermark(1, 50);
        v.on_idle(0, true);
        assert_eq!(v.on_idle(1, true), vec![Watermark(100), Idle]);
        // Channel 1 returns behind the output: active, not aligned.
        assert_eq!(v.on_idle(1, false), vec![Active]);
        assert!(!v.is_idle());
        assert_eq!(v.on_watermark(1, 80), None);
        // Channel 0 returns exactly at the output: aligned at once.
        assert_eq!(v.on_idle(0, false), vec![]);
        // Channel 1 catches up and rejoins; channel 0 holds the minimum.
        assert_eq!(v.on_watermark(1, 120), None);
        assert_eq!(v.on_watermark(0, 125), Some(120));
        assert_eq!(v.on_watermark(1, 130), Some(125));
    }

    #[test]
    fn returning_channel_can_advance_the_minimum() {
        // Channel 1 is back but behind (not aligned); channel 0 goes idle
        // and leaves no aligned channel. Channel 2, idle at 150 all along,
        // returns as the only aligned channel and the output advances.
        let mut v = WatermarkValve::new(3);
        v.on_watermark(0, 100);
        v.on_watermark(1, 100);
        v.on_watermark(2, 150);
        assert_eq!(v.current(), 100);
        assert_eq!(v.on_idle(1, true), vec![]);
        assert_eq!(v.on_watermark(0, 120), Some(120));
        assert_eq!(v.on_idle(1, false), vec![]);
        assert_eq!(v.on_idle(2, true), vec![]);
        assert_eq!(v.on_idle(0, true), vec![]);
        assert_eq!(v.current(), 120);
        assert_eq!(v.on_idle(2, false), vec![Watermark(150)]);
        // Channel 1 (at 100) still does not pull anything back.
        assert_eq!(v.on_watermark(1, 140), None);
        assert_eq!(v.current(), 150);
    }

    #[test]
    fn end_of_stream() {
        let mut v = WatermarkValve::new(3);
        v.on_watermark(0, 10);
        v.on_watermark(1, 20);
        v.on_watermark(2, 30);
        assert_eq!(v.current(), 10);
        assert_eq!(v.on_end(0), vec![Watermark(20)]);
        assert_eq!(v.on_end(0), vec![]);
        // An ended channel says nothing more.
        assert_eq!(v.on_watermark(0, 1000), None);
        assert_eq!(v.on_idle(0, false), vec![]);
        assert_eq!(v.on_end(1), vec![Watermark(30)]);
        // The last one ends: idle, no jump to i64::MAX.
        assert_eq!(v.on_end(2), vec![Idle]);
        assert_eq!(v.current(), 30);
    }

    #[test]
    fn end_while_others_idle_flushes() {
        let mut v = WatermarkValve::new(2);
        v.on_watermark(0, 100);
        v.on_watermark(1, 10);
        v.on_idle(0, true);
        assert_eq!(v.current(), 10);
        assert_eq!(v.on_end(1), vec![Watermark(100), Idle]);
    }

    #[test]
    fn bad_indexes_and_no_inputs() {
        let mut v = WatermarkValve::new(1);
        assert_eq!(v.on_watermark(5, 1), None);
        assert_eq!(v.on_idle(5, true), vec![]);
        assert_eq!(v.on_end(5), vec![]);
        let mut none = WatermarkValve::new(0);
        assert!(none.is_idle());
        assert_eq!(none.on_watermark(0, 1), None);
        assert_eq!(none.current(), i64::MIN);
    }

    #[derive(Debug, Clone)]
    enum Op {
        Wm(usize, i64),
        Idle(usize, bool),
        End(usize),
        Add,
    }

    proptest! {
        /// Whatever arrives: the output never decreases, is always the
        /// minimum over aligned channels when any is aligned, an aligned
        /// channel is never behind the output, and Idle/Active alternate.
        #[test]
        fn invariants(ops in proptest::collection::vec(prop_oneof![
            4 => (0..4usize, -50..50i64).prop_map(|(i, w)| Op::Wm(i, w)),
            2 => (0..4usize, any::<bool>()).prop_map(|(i, b)| Op::Idle(i, b)),
            1 => (0..3usize).prop_map(Op::End),
            1 => Just(Op::Add),
        ], 0..80)) {
            let mut v = WatermarkValve::new(3);
            let mut last = i64::MIN;
            let mut idle = false;
            for op in ops {
                let outs = match op {
                    Op::Wm(i, w) => v.on_watermark(i, w).map(Watermark).into_iter().collect(),
                    Op::Idle(i, b) => v.on_idle(i, b),
                    Op::End(i) => v.on_end(i),
                    Op::Add => v.add_input().1,
                };
                for o in outs {
                    match o {
                        Watermark(w) => {
                            prop_assert!(w > last);
                            last = w;
                        }
                        Idle => {
                            prop_assert!(!idle);
                            idle = true;
                        }
                        Active => {
                            prop_assert!(idle);
                            idle = false;
                        }
                    }
                }
                prop_assert_eq!(v.current(), last);
                prop_assert_eq!(v.is_idle(), idle);
                prop_assert_eq!(idle, v.channels.iter().all(|c| c.idle));
                for c in &v.channels {
                    prop_assert_eq!(c.aligned, !c.idle && c.watermark >= last);
                }
                if let Some(min) = v.channels.iter().filter(|c| c.aligned).map(|c| c.watermark).min() {
                    prop_assert_eq!(min, last);
                }
            }
        }
    }
}
