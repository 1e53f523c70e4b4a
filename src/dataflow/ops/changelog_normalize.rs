//! A table read from an upsert topic, as a changelog (Flink's
//! `ChangelogNormalize`). Each record of a topic with a primary key
//! replaces its key's row and a tombstone deletes it, but the record says
//! nothing of the row it replaces. An aggregate downstream must take the
//! old row back before it adds the new one, so this operator keeps each
//! key's current row and turns the upserts into whole changes:
//!
//! - the first row of a key: insert;
//! - a row for a key that has one: update-before (the old row), then
//!   update-after; nothing if the row did not change, so a topic's
//!   duplicates (a replay, a compaction's leftovers) change nothing;
//! - a deletion (a tombstone, decoded as a delete with the key's columns):
//!   delete of the key's row; nothing if the key has none.
//!
//! Its state is the current row per key: the table itself. With a TTL
//! ([`StateTtl`]) a key's row goes once the watermark passes the time of
//! its last record plus the TTL; its next upsert is then an insert.

use crate::dataflow::operator::{Collector, Context, Operator, Record};
use crate::dataflow::row::{Row, RowKind};
use crate::dataflow::tables::{Table, TableSpec};
use crate::error::Result;

use super::state_ttl::StateTtl;

#[derive(Default)]
pub struct ChangelogNormalize {
    ttl: Option<StateTtl>,
}

impl ChangelogNormalize {
    pub const ROWS: Table = Table(0);
    /// Each key's last write time, with a TTL ([`StateTtl::table`]).
    pub const TTL: Table = Table(1);

    pub fn new(ttl: Option<StateTtl>) -> Self {
        Self { ttl }
    }

    pub fn tables() -> Vec<TableSpec> {
        vec![TableSpec::value::<Row>("rows")]
    }
}

impl Operator for ChangelogNormalize {
    fn on_record(
        &mut self,
        _: usize,
        r: Record,
        ctx: &mut Context,
        out: &mut Collector,
    ) -> Result<()> {
        if let Some(ttl) = self.ttl {
            ttl.touch(ctx, Self::TTL, r.timestamp)?;
        }
        let old: Option<Row> = ctx.get(Self::ROWS)?;
        match r.row.kind {
            RowKind::Insert | RowKind::UpdateAfter => {
                let new = r.row.with_kind(RowKind::Insert);
                match old {
                    Some(old) if old.values == new.values => {}
                    Some(old) => {
                        ctx.put(Self::ROWS, &new)?;
                        out.emit(old.with_kind(RowKind::UpdateBefore), r.timestamp);
                        out.emit(new.with_kind(RowKind::UpdateAfter), r.timestamp);
                    }
                    None => {
                        ctx.put(Self::ROWS, &new)?;
                        out.emit(new, r.timestamp);
                    }
                }
            }
            RowKind::Delete => {
                if let Some(ttl) = self.ttl {
                    ttl.forget(ctx, Self::TTL)?;
                }
                if let Some(old) = old {
                    ctx.delete(Self::ROWS)?;
                    out.emit(old.with_kind(RowKind::Delete), r.timestamp);
                }
            }
            RowKind::UpdateBefore => {
                // An upsert source sends none; a retracting input's
                // update-after replaces the row anyway.
            }
        }
        Ok(())
    }

    fn on_timer(
        &mut self,
        time: i64,
        tag: &[u8],
        ctx: &mut Context,
        _out: &mut Collector,
    ) -> Result<()> {
        if StateTtl::fired(self.ttl, ctx, Self::TTL, tag, time)? {
            ctx.delete(Self::ROWS)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataflow::operator::testing::Harness;
    use crate::dataflow::row::Value;

    fn row(id: i64, state: &str) -> Row {
        Row::insert(vec![Value::Int(id), Value::from(state)])
    }

    fn tombstone(id: i64) -> Row {
        Row::insert(vec![Value::Int(id), Value::Null]).with_kind(RowKind::Delete)
    }

    #[test]
    fn upserts_and_tombstones_become_whole_changes() {
        let mut h = Harness::keyed(
            ChangelogNormalize::default(),
            ChangelogNormalize::tables(),
            vec![0],
        );
        assert_eq!(
            h.record(0, row(1, "OR"), 1).unwrap(),
            vec![(row(1, "OR"), 1)]
        );
        // The same row again: nothing changed, nothing written.
        assert!(h.record(0, row(1, "OR"), 2).unwrap().is_empty());
        assert_eq!(
            h.record(0, row(1, "CA"), 3).unwrap(),
            vec![
                (row(1, "OR").with_kind(RowKind::UpdateBefore), 3),
                (row(1, "CA").with_kind(RowKind::UpdateAfter), 3),
            ]
        );
        // A tombstone carries only the key; the delete is the whole row.
        assert_eq!(
            h.record(0, tombstone(1), 4).unwrap(),
            vec![(row(1, "CA").with_kind(RowKind::Delete), 4)]
        );
        // A tombstone for a key without a row changes nothing.
        assert!(h.record(0, tombstone(1), 5).unwrap().is_empty());
        assert!(h.record(0, tombstone(2), 6).unwrap().is_empty());
        // After a delete, the key's next row is an insert.
        assert_eq!(
            h.record(0, row(1, "WA"), 7).unwrap(),
            vec![(row(1, "WA"), 7)]
        );
    }
}
