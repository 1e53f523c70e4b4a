//! Merging the session windows of one key.
//!
//! A record opens a proto-window `[ts, ts + gap)`. Sessions that touch it
//! (overlap, or meet end to start) become one session covering them all, so
//! a key's sessions are always pairwise apart, and the result does not
//! depend on the order in which records arrive. The caller merges the
//! absorbed sessions' state into the merged window's.

use super::assign::Window;

/// Whether `a` and `b` overlap or are adjacent (`[0, 5)` and `[5, 9)` touch:
/// a record at 4 and one at 5 with gap 1 are one session).
pub fn touches(a: &Window, b: &Window) -> bool {
    a.start <= b.end && b.start <= a.end
}

/// `existing` are one key's sessions, sorted by start, pairwise
/// non-touching. Adding a proto-window: every existing session that touches
/// it merges with it into one covering window. Returns the merged window and
/// the indexes of `existing` that it absorbed (sorted). The merged window is
/// `new` itself when nothing is absorbed.
///
/// Should `existing` break its invariant (unsorted, or touching sessions),
/// the result is still a window covering `new` and everything that touches
/// it transitively, never a panic.
pub fn merge(existing: &[Window], new: Window) -> (Window, Vec<usize>) {
    let mut merged = new;
    let mut absorbed = Vec::new();
    // Under the invariant the second pass finds nothing: a session beyond
    // an absorbed one would touch that one.
    loop {
        let before = absorbed.len();
        for (i, w) in existing.iter().enumerate() {
            if touches(w, &merged) && !absorbed.contains(&i) {
                merged.start = merged.start.min(w.start);
                merged.end = merged.end.max(w.end);
                absorbed.push(i);
            }
        }
        if absorbed.len() == before {
            break;
        }
    }
    absorbed.sort_unstable();
    (merged, absorbed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn w(start: i64, end: i64) -> Window {
        Window { start, end }
    }

    /// Adds a record's proto-window to a key's sessions the way an operator
    /// would: merge, drop the absorbed sessions, insert the merged one.
    fn insert(sessions: &mut Vec<Window>, new: Window) {
        let (merged, absorbed) = merge(sessions, new);
        for &i in absorbed.iter().rev() {
            sessions.remove(i);
        }
        let at = sessions.partition_point(|s| s.start < merged.start);
        sessions.insert(at, merged);
    }

    /// Sort the times; a new session starts where the next time lies beyond
    /// the current session's end (last time + gap).
    fn reference(times: &[i64], gap: i64) -> Vec<Window> {
        let mut sorted = times.to_vec();
        sorted.sort_unstable();
        let mut out: Vec<Window> = vec![];
        for ts in sorted {
            match out.last_mut() {
                Some(cur) if ts <= cur.end => cur.end = cur.end.max(ts + gap),
                _ => out.push(w(ts, ts + gap)),
            }
        }
        out
    }

    fn sessions_of(times: &[i64], gap: i64) -> Result<Vec<Window>, TestCaseError> {
        let mut sessions = vec![];
        for &ts in times {
            insert(&mut sessions, w(ts, ts + gap));
            for pair in sessions.windows(2) {
                prop_assert!(pair[0].start < pair[1].start, "sorted: {:?}", sessions);
                prop_assert!(!touches(&pair[0], &pair[1]), "apart: {:?}", sessions);
            }
        }
        Ok(sessions)
    }

    proptest! {
        #[test]
        fn merging_matches_reference_in_any_order(
            (times, shuffled) in proptest::collection::vec(-100..100i64, 1..40)
                .prop_flat_map(|v| (Just(v.clone()), Just(v).prop_shuffle())),
            gap in 1..50i64,
        ) {
            let want = reference(&times, gap);
            prop_assert_eq!(&sessions_of(&times, gap)?, &want);
            prop_assert_eq!(&sessions_of(&shuffled, gap)?, &want);
        }
    }

    #[test]
    fn literal_merges() {
        let existing = [w(0, 10), w(20, 30), w(40, 50)];
        // Apart from everything.
        assert_eq!(merge(&existing, w(12, 15)), (w(12, 15), vec![]));
        // Adjacent on both sides bridges two sessions.
        assert_eq!(merge(&existing, w(10, 20)), (w(0, 30), vec![0, 1]));
        // Inside one.
        assert_eq!(merge(&existing, w(21, 25)), (w(20, 30), vec![1]));
        // Spanning all.
        assert_eq!(merge(&existing, w(-5, 60)), (w(-5, 60), vec![0, 1, 2]));
        // Extends the last one.
        assert_eq!(merge(&existing, w(45, 70)), (w(40, 70), vec![2]));
        assert_eq!(merge(&[], w(1, 2)), (w(1, 2), vec![]));
        assert!(touches(&w(0, 5), &w(5, 9)));
        assert!(!touches(&w(0, 5), &w(6, 9)));
    }

    #[test]
    fn broken_invariant_still_covers() {
        // Unsorted and touching: the merge still covers transitively.
        let existing = [w(30, 40), w(0, 10), w(9, 20), w(19, 31)];
        assert_eq!(merge(&existing, w(0, 1)), (w(0, 40), vec![0, 1, 2, 3]));
    }
}
