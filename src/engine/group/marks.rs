//! The watermark of a task that reads a repartition topic. Every task
//! that writes to the topic (a source partition, or a task of an earlier
//! stage) sends its watermark to every partition it writes; the reading
//! task holds, per writer, the highest watermark seen and whether the
//! writer is idle. Its own watermark is the minimum over the writers that
//! are not idle, and it waits for every writer it expects (the partitions
//! of its source topics, the tasks of its upstream stages) before it moves
//! at all: a writer that has not been heard from may still send anything.
//!
//! The marks are part of the task's checkpoint (its manifest), so a task
//! restored at a committed offset holds exactly the marks the records
//! before that offset gave it.

use std::collections::{BTreeMap, BTreeSet};

use crate::time::MIN_WATERMARK;

pub use crate::scale::manifest::WriterMark;

/// What reading a watermark changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Advance {
    /// The task's new watermark, if it rose.
    pub watermark: Option<i64>,
    /// The task's new idleness, if it changed.
    pub idle: Option<bool>,
}

#[derive(Debug, Clone)]
pub struct WriterMarks {
    expected: BTreeSet<String>,
    marks: BTreeMap<String, WriterMark>,
    current: i64,
    idle: bool,
}

impl WriterMarks {
    /// Marks for a task expecting `expected`, restored from a checkpoint's
    /// `restored` (empty for a new task).
    pub fn new(expected: BTreeSet<String>, restored: BTreeMap<String, WriterMark>) -> Self {
        let mut m = Self {
            expected,
            marks: restored,
            current: MIN_WATERMARK,
            idle: false,
        };
        let _ = m.recompute();
        m
    }

    pub fn current(&self) -> i64 {
        self.current
    }

    pub fn is_idle(&self) -> bool {
        self.idle
    }

    /// The marks to checkpoint.
    pub fn snapshot(&self) -> BTreeMap<String, WriterMark> {
        self.marks.clone()
    }

    /// Writers expected but not heard from yet (for logs and the console).
    pub fn waiting_for(&self) -> Vec<&str> {
        self.expected
            .iter()
            .filter(|w| !self.marks.contains_key(*w))
            .map(String::as_str)
            .collect()
    }

    /// `writer` sent `watermark` (never taken back: a lower one than seen
    /// before is ignored) and its idleness.
    pub fn on_mark(&mut self, writer: &str, watermark: i64, idle: bool) -> Advance {
        match self.marks.get_mut(writer) {
            Some(m) => {
                m.watermark = m.watermark.max(watermark);
                m.idle = idle;
            }
            None => {
                self.marks
                    .insert(writer.to_string(), WriterMark { watermark, idle });
            }
        }
        self.recompute()
    }

    fn recompute(&mut self) -> Advance {
        let mut out = Advance::default();
        if self.expected.iter().any(|w| !self.marks.contains_key(w)) {
            return out;
        }
        let active: Vec<i64> = self
            .marks
            .values()
            .filter(|m| !m.idle)
            .map(|m| m.watermark)
            .collect();
        let idle = active.is_empty();
        if idle != self.idle {
            self.idle = idle;
            out.idle = Some(idle);
        }
        // A writer back from idleness behind the others does not pull the
        // watermark back; it rejoins the minimum once it catches up.
        if let Some(min) = active.into_iter().filter(|&w| w >= self.current).min() {
            if min > self.current {
                self.current = min;
                out.watermark = Some(min);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expect(ws: &[&str]) -> BTreeSet<String> {
        ws.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn waits_for_every_expected_writer_then_takes_the_minimum() {
        let mut m = WriterMarks::new(expect(&["a", "b"]), BTreeMap::new());
        assert_eq!(m.on_mark("a", 10, false), Advance::default());
        assert_eq!(m.waiting_for(), vec!["b"]);
        assert_eq!(m.on_mark("b", 5, false).watermark, Some(5));
        assert_eq!(m.on_mark("b", 20, false).watermark, Some(10));
        // Never back, per writer or overall.
        assert_eq!(m.on_mark("a", 3, false), Advance::default());
        assert_eq!(m.current(), 10);
    }

    #[test]
    fn idle_writers_leave_the_minimum_and_rejoin_when_caught_up() {
        let mut m = WriterMarks::new(expect(&["a", "b"]), BTreeMap::new());
        m.on_mark("a", 10, false);
        m.on_mark("b", 1, true);
        assert_eq!(m.current(), 10);
        let all_idle = m.on_mark("a", 10, true);
        assert_eq!(all_idle.idle, Some(true));
        assert!(m.is_idle());
        // b comes back behind: it does not pull the watermark back.
        let back = m.on_mark("b", 4, false);
        assert_eq!(back.idle, Some(false));
        assert_eq!(m.current(), 10);
        // Until b catches up, a alone moves the watermark (Flink's valve:
        // b's records below it are late).
        assert_eq!(m.on_mark("a", 30, false).watermark, Some(30));
        assert_eq!(m.on_mark("b", 12, false), Advance::default());
        assert_eq!(
            m.on_mark("a", 50, false).watermark,
            Some(50),
            "b is still behind"
        );
        assert_eq!(m.on_mark("b", 40, false), Advance::default());
        assert_eq!(m.on_mark("a", 60, false).watermark, Some(60));
        assert_eq!(m.on_mark("b", 55, false), Advance::default(), "b behind 60");
        assert_eq!(
            m.on_mark("b", 70, false),
            Advance::default(),
            "b caught up: min is a's 60"
        );
        assert_eq!(m.on_mark("a", 90, false).watermark, Some(70));
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
    }
}
