//! A task's watermark over its named inputs: in group mode each writer
//! of its repartition partition (a source partition, or a task of an
//! earlier stage, which sends its watermark and idleness to every
//! partition it writes), in single mode each input channel. The task holds
//! one input of a [`WatermarkValve`] per input, so the rules are one: the minimum over the writers that are not idle, a writer back
//! from idleness behind the others rejoins once it caught up, and when every
//! writer is idle the watermark moves to the highest of theirs. Every
//! writer the task expects (the partitions of its source topics, the tasks
//! of its upstream stages) starts at `i64::MIN`, so the watermark does not
//! move before each has been heard from: one not heard from may still send
//! anything.
//!
//! The marks are part of the task's checkpoint (its manifest), so a task
//! restored at a committed offset holds exactly the marks the records
//! before that offset gave it.

use std::collections::{BTreeMap, BTreeSet};

use crate::time::valve::{ValveOutput, WatermarkValve};

pub use crate::engine::group::manifest::WriterMark;

#[derive(Debug, Clone)]
pub struct WriterMarks {
    /// Each writer's input of the valve.
    inputs: BTreeMap<String, usize>,
    /// Per input, whether its writer was heard from (or restored).
    heard: Vec<bool>,
    valve: WatermarkValve,
}

impl WriterMarks {
    /// Marks for a task expecting `expected`, restored from a checkpoint's
    /// `restored` (empty for a new task).
    pub fn new(expected: BTreeSet<String>, restored: BTreeMap<String, WriterMark>) -> Self {
        let names: BTreeSet<String> = expected
            .into_iter()
            .chain(restored.keys().cloned())
            .collect();
        let states: Vec<(i64, bool)> = names
            .iter()
            .map(|w| {
                restored
                    .get(w)
                    .map_or((i64::MIN, false), |m| (m.watermark, m.idle))
            })
            .collect();
        Self {
            heard: names.iter().map(|w| restored.contains_key(w)).collect(),
            inputs: names.into_iter().enumerate().map(|(i, w)| (w, i)).collect(),
            valve: WatermarkValve::restored(&states),
        }
    }

    pub fn current(&self) -> i64 {
        self.valve.current()
    }

    pub fn is_idle(&self) -> bool {
        self.valve.is_idle()
    }

    /// The marks to checkpoint: each writer heard from, with the highest
    /// watermark it delivered and whether it is idle.
    pub fn snapshot(&self) -> BTreeMap<String, WriterMark> {
        self.inputs
            .iter()
            .filter(|(_, &i)| self.heard[i])
            .filter_map(|(w, &i)| {
                let (watermark, idle) = self.valve.input(i)?;
                Some((w.clone(), WriterMark { watermark, idle }))
            })
            .collect()
    }

    /// Writers expected but not heard from yet (for logs and the console).
    pub fn waiting_for(&self) -> Vec<&str> {
        self.inputs
            .iter()
            .filter(|(_, &i)| !self.heard[i])
            .map(|(w, _)| w.as_str())
            .collect()
    }

    /// The valve's input of `writer`, added if the plan did not list it (a
    /// partition added to a source topic: it counts once it has caught
    /// up), and marked heard from.
    fn input_of(&mut self, writer: &str, out: &mut Vec<ValveOutput>) -> usize {
        let input = match self.inputs.get(writer) {
            Some(&i) => i,
            None => {
                let (i, changes) = self.valve.add_input();
                out.extend(changes);
                self.inputs.insert(writer.to_string(), i);
                self.heard.push(false);
                i
            }
        };
        self.heard[input] = true;
        input
    }

    /// `writer`'s watermark alone (single mode's channels send it apart
    /// from idleness).
    pub fn on_watermark(&mut self, writer: &str, watermark: i64) -> Vec<ValveOutput> {
        let mut out = Vec::new();
        let input = self.input_of(writer, &mut out);
        out.extend(
            self.valve
                .on_watermark(input, watermark)
                .map(ValveOutput::Watermark),
        );
        out
    }

    /// `writer`'s idleness alone.
    pub fn on_idle(&mut self, writer: &str, idle: bool) -> Vec<ValveOutput> {
        let mut out = Vec::new();
        let input = self.input_of(writer, &mut out);
        out.extend(self.valve.on_idle(input, idle));
        out
    }

    /// `writer` ended its stream: it no longer holds the watermark back.
    pub fn on_end(&mut self, writer: &str) -> Vec<ValveOutput> {
        let mut out = Vec::new();
        let input = self.input_of(writer, &mut out);
        out.extend(self.valve.on_end(input));
        out
    }

    /// `writer` sent `watermark` (never taken back: one not above what it
    /// sent before is ignored) and its idleness. Returns the task's output
    /// changes in the order to apply them, as the valve gives them.
    pub fn on_mark(&mut self, writer: &str, watermark: i64, idle: bool) -> Vec<ValveOutput> {
        let mut out = Vec::new();
        let input = self.input_of(writer, &mut out);
        // The watermark it reached, then its idleness: a writer going idle
        // has delivered its last watermark first.
        if idle {
            out.extend(
                self.valve
                    .on_watermark(input, watermark)
                    .map(ValveOutput::Watermark),
            );
            out.extend(self.valve.on_idle(input, true));
        } else {
            out.extend(self.valve.on_idle(input, false));
            out.extend(
                self.valve
                    .on_watermark(input, watermark)
                    .map(ValveOutput::Watermark),
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ValveOutput::{Active, Idle, Watermark};

    fn expect(ws: &[&str]) -> BTreeSet<String> {
        ws.iter().map(|s| s.to_string()).collect()
    }

    /// The watermark the outputs move to, if any.
    fn moved(out: &[ValveOutput]) -> Option<i64> {
        out.iter().rev().find_map(|o| match o {
            Watermark(w) => Some(*w),
            _ => None,
        })
    }

    #[test]
    fn waits_for_every_expected_writer_then_takes_the_minimum() {
        let mut m = WriterMarks::new(expect(&["a", "b"]), BTreeMap::new());
        assert_eq!(m.on_mark("a", 10, false), vec![]);
        assert_eq!(m.waiting_for(), vec!["b"]);
        assert_eq!(m.on_mark("b", 5, false), vec![Watermark(5)]);
        assert_eq!(m.on_mark("b", 20, false), vec![Watermark(10)]);
        // Never back, per writer or overall.
        assert_eq!(m.on_mark("a", 3, false), vec![]);
        assert_eq!(m.current(), 10);
    }

    #[test]
    fn idle_writers_leave_the_minimum_and_rejoin_when_caught_up() {
        let mut m = WriterMarks::new(expect(&["a", "b"]), BTreeMap::new());
        m.on_mark("a", 10, false);
        m.on_mark("b", 1, true);
        assert_eq!(m.current(), 10);
        let all_idle = m.on_mark("a", 10, true);
        assert_eq!(all_idle, vec![Idle]);
        assert!(m.is_idle());
        // b comes back behind: it does not pull the watermark back.
        let back = m.on_mark("b", 4, false);
        assert_eq!(back, vec![Active]);
        assert_eq!(m.current(), 10);
        // Until b catches up, a alone moves the watermark (Flink's valve:
        // b's records below it are late).
        assert_eq!(moved(&m.on_mark("a", 30, false)), Some(30));
        assert_eq!(m.on_mark("b", 12, false), vec![]);
        assert_eq!(
            moved(&m.on_mark("a", 50, false)),
            Some(50),
            "b is still behind"
        );
        assert_eq!(m.on_mark("b", 40, false), vec![]);
        assert_eq!(moved(&m.on_mark("a", 60, false)), Some(60));
        assert_eq!(m.on_mark("b", 55, false), vec![], "b behind 60");
        assert_eq!(
            m.on_mark("b", 70, false),
            vec![],
            "b caught up: min is a's 60"
        );
        assert_eq!(moved(&m.on_mark("a", 90, false)), Some(70));
    }

    /// As a single-mode stage task's valve: when the last writer goes idle,
    /// the watermark moves to the highest any writer reached (no writer
    /// will hold it back any more).
    #[test]
    fn all_writers_idle_move_the_watermark_to_the_highest() {
        let mut m = WriterMarks::new(expect(&["a", "b"]), BTreeMap::new());
        m.on_mark("a", 100, false);
        assert_eq!(m.on_mark("b", 50, false), vec![Watermark(50)]);
        assert_eq!(m.on_mark("a", 100, true), vec![]);
        assert_eq!(
            m.on_mark("b", 60, true),
            vec![Watermark(60), Watermark(100), Idle]
        );
        assert!(m.is_idle());
        // Restored from that checkpoint, the task is where it was.
        let r = WriterMarks::new(expect(&["a", "b"]), m.snapshot());
        assert_eq!((r.current(), r.is_idle()), (100, true));
    }

    #[test]
    fn a_writer_not_expected_counts_once_caught_up() {
        let mut m = WriterMarks::new(expect(&["a"]), BTreeMap::new());
        assert_eq!(m.on_mark("a", 20, false), vec![Watermark(20)]);
        assert_eq!(m.on_mark("new", 5, false), vec![]);
        assert_eq!(m.on_mark("a", 30, false), vec![Watermark(30)]);
        assert_eq!(m.on_mark("new", 35, false), vec![]);
        assert_eq!(m.on_mark("a", 40, false), vec![Watermark(35)]);
        assert_eq!(m.snapshot().len(), 2);
    }

    #[test]
    fn restored_marks_give_the_restored_watermark() {
        let restored = BTreeMap::from([
            (
                "a".to_string(),
                WriterMark {
                    watermark: 7,
                    idle: false,
                },
            ),
            (
                "b".to_string(),
                WriterMark {
                    watermark: 9,
                    idle: false,
                },
            ),
        ]);
        let m = WriterMarks::new(expect(&["a", "b"]), restored.clone());
        assert_eq!(m.current(), 7);
        assert_eq!(m.snapshot(), restored);
        assert!(m.waiting_for().is_empty());
    }
}
