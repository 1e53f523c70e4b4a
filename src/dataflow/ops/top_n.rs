//! Top-N per key: `ROW_NUMBER() OVER (PARTITION BY k ORDER BY o) <= N`
//! (Flink's `AppendOnlyTopNFunction` and, per window, `WindowRankOperator`).
//! Deduplication is its `N = 1` case: `ORDER BY t DESC` keeps the last row
//! by event time, `ORDER BY t ASC` the first.
//!
//! Each key's best N rows, in order, are one value of the `top` table.
//! A row that ranks within N goes in at its place; rows that rank equal
//! keep their order of arrival (the earlier ranks first), and the row
//! pushed past N leaves. Every row carries its rank as a last column:
//!
//! - **Running** (no window): each rank whose row changed is updated —
//!   insert when the rank is first filled, else update-before of the old
//!   row and update-after of the new one. The result is unique by (key,
//!   rank), or by key alone when N is 1.
//! - **Per window** (the key holds a window's `window_end`): nothing is
//!   emitted until the watermark passes the window's end; then its N rows,
//!   each once, and the key's state goes. The result is append-only; a
//!   row behind the watermark is late and dropped (counted).

use super::state_ttl::StateTtl;
use crate::dataflow::operator::{Collector, Context, Operator, Record};
use crate::dataflow::ordered::encode_sort_key;
pub use crate::dataflow::ordered::SortKey;
use crate::dataflow::row::{Row, RowKind, Value};
use crate::dataflow::tables::{Table, TableSpec};
use crate::error::Result;
use crate::time::NO_TIMESTAMP;
use std::cmp::Ordering;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopNSpec {
    pub order: Vec<SortKey>,
    pub limit: usize,
    /// The input's `window_end` column, when the key holds the window.
    pub window_end: Option<usize>,
    /// The input takes rows back (an updating result): every row of a key
    /// is kept, not only its best N, so that the row after the N-th moves
    /// up when one of the N is taken back (Flink's retract rank).
    pub retract: bool,
}

pub struct TopN {
    spec: TopNSpec,
    /// A running top-N's keys go when quiet this long ([`StateTtl`]); a
    /// window's go when it fires.
    ttl: Option<StateTtl>,
}

impl TopN {
    pub const TOP: Table = Table(0);
    /// Each key's last write time, with a TTL.
    pub const TTL: Table = Table(1);

    pub fn new(spec: TopNSpec) -> Self {
        Self { spec, ttl: None }
    }

    /// Keys of a running top-N whose rows were last written more than
    /// `ttl` before the watermark go (table [`StateTtl::table`] after
    /// `top`); per window, state goes when the window fires anyway.
    pub fn with_state_ttl(mut self, ttl: Option<StateTtl>) -> Self {
        self.ttl = ttl.filter(|_| self.spec.window_end.is_none());
        self
    }

    /// A key's best rows, in rank order: a list table. Over an updating
    /// input (`retract`), every row of the key: a map table keyed by each
    /// row's sort key ([`encode_sort_key`]), whose value is the rows of
    /// that sort key in their order of arrival, so that a change reads
    /// and writes one entry and the best N are the map's first entries.
    pub fn tables(retract: bool) -> Vec<TableSpec> {
        vec![if retract {
            TableSpec::map::<Vec<Value>>("top")
        } else {
            TableSpec::list::<Vec<Value>>("top")
        }]
    }

    fn cmp(&self, a: &[Value], b: &[Value]) -> Ordering {
        SortKey::compare_rows(&self.spec.order, a, b)
    }

    fn ranked(values: &[Value], rank: usize) -> Vec<Value> {
        let mut v = Vec::with_capacity(values.len() + 1);
        v.extend_from_slice(values);
        v.push(Value::Int(rank as i64 + 1));
        v
    }
}

impl TopN {
    /// A change of an updating input: the row goes into (or out of) the
    /// key's rows, all kept in rank order, and each rank whose row is now
    /// another is updated: an insert for a rank first filled, a delete for
    /// one no longer filled (fewer than N rows), else update-before and
    /// update-after. A retraction of a row the key does not hold (it was
    /// never there) changes nothing.
    fn on_change(&mut self, r: Record, ctx: &mut Context, out: &mut Collector) -> Result<()> {
        let n = self.spec.limit;
        let old = self.best(ctx)?;
        let values = r.row.values;
        let mut key = Vec::new();
        encode_sort_key(&self.spec.order, &values, &mut key);
        let mut peers: Vec<Value> = ctx.map_get(Self::TOP, &key)?.unwrap_or_default();
        if r.row.kind.is_addition() {
            peers.push(Value::List(values.clone()));
        } else {
            match peers
                .iter()
                .position(|x| matches!(x, Value::List(v) if *v == values))
            {
                Some(i) => {
                    peers.remove(i);
                }
                None => return Ok(()),
            }
        }
        if peers.is_empty() {
            ctx.map_delete(Self::TOP, &key)?;
        } else {
            ctx.map_put(Self::TOP, &key, &peers)?;
        }
        // A row that ranks after the N-th changes no rank: one that orders
        // after it, or an addition that orders equal (it comes later).
        if n > 0 && old.len() == n {
            let after_last = match self.cmp(&values, &old[n - 1]) {
                Ordering::Greater => true,
                Ordering::Equal => r.row.kind.is_addition(),
                Ordering::Less => false,
            };
            if after_last {
                return Ok(());
            }
        }
        let now = self.best(ctx)?;
        let before = ctx.update_before_needed();
        for k in 0..old.len().max(now.len()) {
            match (old.get(k), now.get(k)) {
                (Some(was), Some(is)) if was == is => {}
                (Some(was), Some(is)) => {
                    if before {
                        out.emit(
                            Row::new(RowKind::UpdateBefore, Self::ranked(was, k)),
                            r.timestamp,
                        );
                    }
                    out.emit(
                        Row::new(RowKind::UpdateAfter, Self::ranked(is, k)),
                        r.timestamp,
                    );
                }
                (None, Some(is)) => out.emit(Row::insert(Self::ranked(is, k)), r.timestamp),
                (Some(was), None) => {
                    out.emit(Row::new(RowKind::Delete, Self::ranked(was, k)), r.timestamp)
                }
                (None, None) => {}
            }
        }
        if let (Some(ttl), true) = (self.ttl, now.is_empty()) {
            ttl.forget(ctx, Self::TTL)?;
        }
        Ok(())
    }

    /// The key's best N rows, in rank order: its map's first entries.
    fn best(&self, ctx: &mut Context) -> Result<Vec<Vec<Value>>> {
        let n = self.spec.limit;
        let mut rows = Vec::with_capacity(n);
        for (_, peers) in ctx.map_range::<Vec<Value>>(Self::TOP, None, n)? {
            for p in peers {
                if rows.len() == n {
                    return Ok(rows);
                }
                if let Value::List(values) = p {
                    rows.push(values);
                }
            }
        }
        Ok(rows)
    }
}

impl Operator for TopN {
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
        if self.spec.retract {
            return self.on_change(r, ctx, out);
        }
        if !r.row.kind.is_addition() {
            return Err(ctx.failure(
                "top-N takes an append-only input, and a row was taken back (the planner ranks an updating input with a top-N that keeps every row)",
            ));
        }
        let window_end = match self.spec.window_end {
            Some(c) => match r.row.get(c).as_timestamp() {
                Some(end) => {
                    if r.timestamp != NO_TIMESTAMP && end - 1 <= ctx.watermark() {
                        ctx.count_late();
                        return Ok(());
                    }
                    Some(end)
                }
                None => return Ok(()), // No window: no rank.
            },
            None => None,
        };
        let values = r.row.values;
        let old: Vec<Vec<Value>> = ctx.list(Self::TOP)?;
        let pos = old.partition_point(|x| self.cmp(x, &values) != Ordering::Greater);
        if pos >= self.spec.limit {
            return Ok(());
        }
        let mut top = old.clone();
        top.insert(pos, values);
        top.truncate(self.spec.limit);
        match window_end {
            Some(end) => {
                if old.is_empty() {
                    ctx.register_timer(end - 1, b"w")?;
                }
            }
            None => {
                let before = ctx.update_before_needed();
                for (k, new) in top.iter().enumerate().skip(pos) {
                    match old.get(k) {
                        None => out.emit(Row::insert(Self::ranked(new, k)), r.timestamp),
                        Some(was) => {
                            if before {
                                out.emit(
                                    Row::new(RowKind::UpdateBefore, Self::ranked(was, k)),
                                    r.timestamp,
                                );
                            }
                            out.emit(
                                Row::new(RowKind::UpdateAfter, Self::ranked(new, k)),
                                r.timestamp,
                            );
                        }
                    }
                }
            }
        }
        ctx.set_list(Self::TOP, &top)
    }

    fn on_timer(
        &mut self,
        time: i64,
        tag: &[u8],
        ctx: &mut Context,
        out: &mut Collector,
    ) -> Result<()> {
        if tag == StateTtl::TAG {
            if StateTtl::fired(self.ttl, ctx, Self::TTL, tag, time)? {
                if self.spec.retract {
                    for (key, _) in ctx.map_entries::<Vec<Value>>(Self::TOP)? {
                        ctx.map_delete(Self::TOP, &key)?;
                    }
                } else {
                    ctx.delete(Self::TOP)?;
                }
            }
            return Ok(());
        }
        let top: Vec<Vec<Value>> = ctx.list(Self::TOP)?;
        for (k, row) in top.iter().enumerate() {
            out.emit(Row::insert(Self::ranked(row, k)), time);
        }
        ctx.set_list::<Vec<Value>>(Self::TOP, &[])?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataflow::operator::testing::{shown, Harness};

    fn top(limit: usize, window_end: Option<usize>) -> Harness<TopN> {
        let spec = TopNSpec {
            order: vec![SortKey {
                column: 1,
                descending: true,
                nulls_first: false,
            }],
            limit,
            window_end,
            retract: false,
        };
        Harness::keyed(TopN::new(spec), TopN::tables(false), vec![0])
    }

    fn bid(auction: i64, price: Option<i64>) -> Row {
        Row::insert(vec![
            Value::Int(auction),
            price.map_or(Value::Null, Value::Int),
        ])
    }

    #[test]
    fn ranks_shift_as_better_rows_arrive_and_the_last_falls_out() {
        let mut h = top(2, None);
        assert_eq!(shown(h.record(0, bid(1, Some(5)), 1).unwrap()), ["+I1,5,1"]);
        assert_eq!(shown(h.record(0, bid(1, Some(3)), 2).unwrap()), ["+I1,3,2"]);
        assert_eq!(
            shown(h.record(0, bid(1, Some(9)), 3).unwrap()),
            ["-U1,5,1", "+U1,9,1", "-U1,3,2", "+U1,5,2"]
        );
        assert!(
            h.record(0, bid(1, Some(1)), 4).unwrap().is_empty(),
            "below the top 2"
        );
        // An equal price ranks after the row that came first.
        assert_eq!(
            shown(h.record(0, bid(1, Some(5)), 5).unwrap()),
            Vec::<String>::new()
        );
        assert!(
            h.record(0, bid(1, None), 6).unwrap().is_empty(),
            "NULLs last"
        );
        assert_eq!(shown(h.record(0, bid(2, Some(1)), 7).unwrap()), ["+I2,1,1"]);
    }

    #[test]
    fn a_window_emits_its_top_rows_once_when_it_closes() {
        // Column 2 is the window's end.
        let mut h = Harness::keyed(
            TopN::new(TopNSpec {
                order: vec![SortKey {
                    column: 1,
                    descending: true,
                    nulls_first: false,
                }],
                limit: 2,
                window_end: Some(2),
                retract: false,
            }),
            TopN::tables(false),
            vec![0, 2],
        );
        let row = |p: i64| Row::insert(vec![Value::Int(1), Value::Int(p), Value::Timestamp(10)]);
        for p in [4, 8, 6] {
            assert!(h.record(0, row(p), 9).unwrap().is_empty());
        }
        assert_eq!(
            shown(h.watermark(9).unwrap()),
            ["+I1,8,Timestamp(10),1", "+I1,6,Timestamp(10),2"]
        );
        assert!(h.watermark(20).unwrap().is_empty(), "emitted once");
        assert!(h.record(0, row(9), 9).unwrap().is_empty());
        assert_eq!(h.ctx.take_late(), 1);
    }

    /// Over an updating input every row is kept: when one of the best N
    /// is taken back the next moves up; a rank left empty is deleted.
    #[test]
    fn over_retractions_the_next_row_moves_up_and_an_empty_rank_is_deleted() {
        let spec = TopNSpec {
            order: vec![SortKey {
                column: 1,
                descending: true,
                nulls_first: false,
            }],
            limit: 2,
            window_end: None,
            retract: true,
        };
        let mut h = Harness::keyed(TopN::new(spec), TopN::tables(true), vec![0]);
        let change = |kind, price| Row::new(kind, vec![Value::Int(1), Value::Int(price)]);
        for p in [5, 3] {
            h.record(0, change(RowKind::Insert, p), 1).unwrap();
        }
        assert!(
            h.record(0, change(RowKind::Insert, 1), 2)
                .unwrap()
                .is_empty(),
            "third: kept, not ranked"
        );
        // The 5 becomes a 2: the 3 moves up to rank 1, the 2 takes rank 2.
        assert_eq!(
            shown(h.record(0, change(RowKind::UpdateBefore, 5), 3).unwrap()),
            ["-U1,5,1", "+U1,3,1", "-U1,3,2", "+U1,1,2"]
        );
        assert_eq!(
            shown(h.record(0, change(RowKind::UpdateAfter, 2), 3).unwrap()),
            ["-U1,1,2", "+U1,2,2"]
        );
        // Deletions down to one row: rank 2 is deleted.
        h.record(0, change(RowKind::Delete, 1), 4).unwrap();
        assert_eq!(
            shown(h.record(0, change(RowKind::Delete, 2), 4).unwrap()),
            ["-D1,2,2"]
        );
        assert!(
            h.record(0, change(RowKind::Delete, 42), 5)
                .unwrap()
                .is_empty(),
            "a row never held"
        );
    }
}
