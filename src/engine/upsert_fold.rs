//! What an upsert sink writes for a changelog: one record per change of a
//! key's row, a tombstone when the key leaves the result, and never the
//! same row twice in a row.
//!
//! Flink's upsert-kafka sink drops every update-before and writes every
//! update-after. That is one record per update, but over a filter it is
//! wrong twice over: a row that stops passing sends only its update-before
//! (the key must leave the table), and a row that stopped passing and
//! passes again as the same row sends only its update-after, which a
//! reader would see as the row written twice with nothing between. weir
//! holds each update-before until the key's next row: the same row again
//! writes nothing, another row replaces it, and an update-before that no
//! row followed by the epoch's end is written as its tombstone then,
//! before the snapshot, so the epoch's transaction holds it.

use std::collections::HashMap;

/// What to write for one row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpsertWrite {
    /// The row's value under its key.
    Row,
    /// A tombstone under its key (a deletion).
    Tombstone,
    /// Nothing: an update-before (held), or a row equal to the one its
    /// key's update-before took away.
    Nothing,
}

/// The update-befores an upsert sink holds ([module docs](self)).
#[derive(Debug, Default)]
pub struct UpsertFold {
    /// The last update-before, when no other key's came after it: its
    /// update-after is nearly always the next row. Its buffers are reused.
    pending_key: Vec<u8>,
    pending_value: Vec<u8>,
    has_pending: bool,
    /// Other keys whose update-before no row has followed yet, with the
    /// value it took away.
    lone: HashMap<Vec<u8>, Vec<u8>>,
}

impl UpsertFold {
    /// An update-before of `key`'s row `value` (encoded as the sink
    /// writes it): held until the key's next row or the epoch's end.
    pub fn before(&mut self, key: &[u8], value: &[u8]) {
        if self.has_pending && self.pending_key != key {
            self.lone.insert(
                std::mem::take(&mut self.pending_key),
                std::mem::take(&mut self.pending_value),
            );
        }
        self.pending_key.clear();
        self.pending_key.extend_from_slice(key);
        self.pending_value.clear();
        self.pending_value.extend_from_slice(value);
        self.has_pending = true;
    }

    /// An insert or update-after of `key` with `value`: written, unless it
    /// is the very row the key's held update-before took away.
    pub fn row(&mut self, key: &[u8], value: &[u8]) -> UpsertWrite {
        if self.has_pending && self.pending_key == key {
            self.has_pending = false;
            if self.pending_value == value {
                return UpsertWrite::Nothing;
            }
        } else if !self.lone.is_empty() {
            if let Some(before) = self.lone.remove(key) {
                if before == value {
                    return UpsertWrite::Nothing;
                }
            }
        }
        UpsertWrite::Row
    }

    /// A deletion of `key`: its tombstone, and a held update-before of the
    /// key is done with.
    pub fn delete(&mut self, key: &[u8]) -> UpsertWrite {
        if self.has_pending && self.pending_key == key {
            self.has_pending = false;
        } else if !self.lone.is_empty() {
            self.lone.remove(key);
        }
        UpsertWrite::Tombstone
    }

    /// At the epoch's end: the keys whose update-before no row followed,
    /// each to be written as a tombstone. Nothing is held after.
    pub fn end_epoch(&mut self) -> Vec<Vec<u8>> {
        let mut keys: Vec<Vec<u8>> = self.lone.drain().map(|(k, _)| k).collect();
        if std::mem::take(&mut self.has_pending) {
            keys.push(self.pending_key.clone());
        }
        keys
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    /// One changelog row: (key, kind, value).
    #[derive(Debug, Clone, Copy)]
    enum Change {
        Before(u8, u8),
        After(u8, u8),
        Delete(u8),
        EndEpoch,
    }

    /// Writes of a changelog through the fold, as (key, Some(value)) or
    /// (key, None) for a tombstone.
    fn writes(changes: &[Change]) -> Vec<(u8, Option<u8>)> {
        let mut fold = UpsertFold::default();
        let mut out = Vec::new();
        for c in changes {
            match *c {
                Change::Before(k, v) => fold.before(&[k], &[v]),
                Change::After(k, v) => {
                    if fold.row(&[k], &[v]) == UpsertWrite::Row {
                        out.push((k, Some(v)));
                    }
                }
                Change::Delete(k) => {
                    assert_eq!(fold.delete(&[k]), UpsertWrite::Tombstone);
                    out.push((k, None));
                }
                Change::EndEpoch => {
                    let mut keys = fold.end_epoch();
                    keys.sort();
                    out.extend(keys.into_iter().map(|k| (k[0], None)));
                }
            }
        }
        out
    }

    #[test]
    fn an_update_writes_its_after_alone() {
        use Change::*;
        assert_eq!(
            writes(&[After(1, 10), Before(1, 10), After(1, 11), EndEpoch]),
            vec![(1, Some(10)), (1, Some(11))]
        );
    }

    #[test]
    fn a_row_that_stops_passing_a_filter_is_a_tombstone_at_the_epochs_end() {
        use Change::*;
        assert_eq!(
            writes(&[After(1, 10), Before(1, 10), After(2, 5), EndEpoch]),
            vec![(1, Some(10)), (2, Some(5)), (1, None)]
        );
    }

    /// Key 12 of seed 1796600886681946934 in tests/sql_plan.rs: OR 896
    /// passes, NV 348 does not, OR 896 passes again; other keys' rows (no
    /// update-before among them) came between.
    #[test]
    fn the_same_row_passing_again_writes_nothing() {
        use Change::*;
        assert_eq!(
            writes(&[
                After(12, 96),
                After(3, 1),
                Before(12, 96),
                After(5, 2),
                After(12, 96)
            ]),
            vec![(12, Some(96)), (3, Some(1)), (5, Some(2))]
        );
        // With another key's update-before between (the held one is lone).
        assert_eq!(
            writes(&[
                After(12, 96),
                Before(12, 96),
                Before(3, 1),
                After(3, 2),
                After(12, 96)
            ]),
            vec![(12, Some(96)), (3, Some(2))]
        );
    }

    #[test]
    fn a_row_passing_again_as_another_row_replaces_it() {
        use Change::*;
        assert_eq!(
            writes(&[
                After(1, 10),
                Before(1, 10),
                Before(2, 5),
                After(1, 12),
                EndEpoch
            ]),
            vec![(1, Some(10)), (1, Some(12)), (2, None)]
        );
    }

    fn change() -> impl Strategy<Value = (u8, u8, u8)> {
        (0u8..4, 0u8..3, 0u8..10)
    }

    proptest! {
        /// Any changelog a filter over a keyed table can send (each key's
        /// update-before names its current row; a filter drops any part of
        /// a change), folded: the final table is the changelog's, and no
        /// key is written the same row (or tombstone after a tombstone-free
        /// start) twice in a row.
        #[test]
        fn the_fold_keeps_the_table_and_never_repeats_a_row(
            steps in proptest::collection::vec(change(), 0..80),
        ) {
            // The table upstream of the filter, the filter's pass set
            // (values < 5 pass), and the changelog the filter sends.
            let passes = |v: u8| v < 5;
            let mut upstream: BTreeMap<u8, u8> = BTreeMap::new();
            let mut changes = Vec::new();
            for (key, what, value) in steps {
                match (what, upstream.get(&key).copied()) {
                    (0, None) | (1, None) => {
                        upstream.insert(key, value);
                        if passes(value) {
                            changes.push(Change::After(key, value));
                        }
                    }
                    (0, Some(old)) | (1, Some(old)) => {
                        upstream.insert(key, value);
                        if passes(old) {
                            changes.push(Change::Before(key, old));
                        }
                        if passes(value) {
                            changes.push(Change::After(key, value));
                        }
                    }
                    (_, Some(old)) => {
                        upstream.remove(&key);
                        if passes(old) {
                            changes.push(Change::Delete(key));
                        }
                    }
                    (_, None) => changes.push(Change::EndEpoch),
                }
            }
            changes.push(Change::EndEpoch);
            let written = writes(&changes);
            let mut table: BTreeMap<u8, u8> = BTreeMap::new();
            let mut last: BTreeMap<u8, Option<u8>> = BTreeMap::new();
            for (k, v) in written {
                prop_assert_ne!(last.get(&k), Some(&v), "key {} written twice in a row", k);
                last.insert(k, v);
                match v {
                    Some(v) => table.insert(k, v),
                    None => table.remove(&k),
                };
            }
            let want: BTreeMap<u8, u8> =
                upstream.into_iter().filter(|(_, v)| passes(*v)).collect();
            prop_assert_eq!(table, want);
        }
    }
}
