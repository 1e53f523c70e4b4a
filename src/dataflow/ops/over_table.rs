//! OVER aggregations kept current over a table (RisingWave's general
//! `OverWindow`; Flink's streaming OVER refuses this, and Nexmark's q6
//! is "not supported yet in Flink SQL" for it): `agg(x) OVER (PARTITION
//! BY p ORDER BY o <frame>)` where the input takes rows back (an
//! aggregate's or a top-N's result), or where a call reads rows after
//! the current one (`LEAD`).
//!
//! The result is what SQL gives over the input's current rows, as a
//! table: every row with its calls' values over its frame. Each
//! partition holds its rows in order (by the ORDER BY columns, then by
//! every column, so that a ROWS frame does not depend on the order the
//! rows came in). A row that comes or goes changes its own output (an
//! insert or a delete) and the outputs of the rows whose frame, rank or
//! LAG/LEAD reaches it: those are recomputed from the row's place on, and
//! each whose values changed is updated (update-before, update-after).
//! Rows before the change are untouched but for LEAD's reach and the
//! changed row's peers (whose RANGE frames take it in), so a change near
//! the end of the order (the usual case: the newest rows change) costs
//! the frame's width, not the partition's.
//!
//! The partition's rows are one list value in state: a partition is read
//! and written whole on each change, which suits partitions of hundreds
//! or thousands of rows (per seller, per user), not one partition of
//! everything.

use std::cmp::Ordering;

use super::aggregate::{Accumulators, Agg};
use super::over::{aggregate_calls, deepest, Frame, OverCall};
use super::state_ttl::StateTtl;
use super::top_n::SortKey;
use crate::dataflow::operator::{Collector, Context, Operator, Record};
use crate::dataflow::row::{Row, RowKind, Value};
use crate::dataflow::tables::{Table, TableSpec};
use crate::error::Result;

#[derive(Debug, Clone, PartialEq)]
pub struct OverTableSpec {
    /// The ORDER BY columns: rows equal in all of them are peers (RANK,
    /// RANGE frames).
    pub order: Vec<SortKey>,
    /// `Range(d)` reaches back over the first ORDER BY column (ascending,
    /// a TIMESTAMP in ms or a number).
    pub frame: Frame,
    pub calls: Vec<OverCall>,
}

pub struct OverTable {
    spec: OverTableSpec,
    aggs: Vec<Agg>,
    /// Every column ascending: the order of rows equal in `spec.order`.
    tie_break: Vec<SortKey>,
    /// How many rows before a change LEAD reads it from.
    lead_depth: usize,
    /// A partition's rows go when it is quiet this long.
    ttl: Option<StateTtl>,
}

impl OverTable {
    /// The partition's rows, in order.
    pub const ROWS: Table = Table(0);

    pub fn new(spec: OverTableSpec, width: usize) -> Self {
        let aggs = aggregate_calls(&spec.calls);
        let lead_depth = deepest(&spec.calls, |c| match c {
            OverCall::Lead { offset, .. } => Some(*offset),
            _ => None,
        });
        let tie_break = (0..width)
            .map(|column| SortKey {
                column,
                descending: false,
                nulls_first: true,
            })
            .collect();
        Self {
            spec,
            aggs,
            tie_break,
            lead_depth,
            ttl: None,
        }
    }

    /// Partitions last written more than `ttl` before the watermark go
    /// (table [`StateTtl::table`] after `rows`).
    pub fn with_state_ttl(mut self, ttl: Option<StateTtl>) -> Self {
        self.ttl = ttl;
        self
    }

    /// Each partition's last write time, with a TTL.
    pub const TTL: Table = Table(1);

    pub fn tables() -> Vec<TableSpec> {
        vec![TableSpec::list::<Vec<Value>>("rows")]
    }

    fn order(&self, a: &[Value], b: &[Value]) -> Ordering {
        SortKey::compare_rows(&self.spec.order, a, b)
            .then_with(|| SortKey::compare_rows(&self.tie_break, a, b))
    }

    fn peers(&self, a: &[Value], b: &[Value]) -> bool {
        SortKey::compare_rows(&self.spec.order, a, b).is_eq()
    }

    /// The first ORDER BY column as a number (ms for a TIMESTAMP), for a
    /// RANGE frame; None for NULL.
    fn range_key(&self, row: &[Value]) -> Option<i64> {
        let v = &row[self.spec.order.first()?.column];
        v.as_timestamp().or_else(|| v.as_int())
    }

    /// Each call's value for the rows from `from` on.
    fn results(
        &self,
        rows: &[Vec<Value>],
        from: usize,
    ) -> std::result::Result<Vec<Vec<Value>>, String> {
        let n = rows.len();
        // Where each row's peers end (exclusive), and its rank and dense
        // rank: one pass from the first row.
        let mut peers_end = vec![n; n];
        let mut rank = vec![0i64; n];
        let mut dense = vec![0i64; n];
        let mut start = 0;
        let mut groups = 0;
        while start < n {
            let mut end = start + 1;
            while end < n && self.peers(&rows[start], &rows[end]) {
                end += 1;
            }
            groups += 1;
            for i in start..end {
                peers_end[i] = end;
                rank[i] = start as i64 + 1;
                dense[i] = groups;
            }
            start = end;
        }
        // An unbounded frame runs one accumulator along the rows.
        let mut running = Accumulators::new(&self.aggs);
        let mut applied = 0;
        let mut out = Vec::with_capacity(n.saturating_sub(from));
        for i in from..n {
            let (lo, hi) = match self.spec.frame {
                Frame::Rows(k) => (i.saturating_sub(k), i + 1),
                Frame::Range(d) => match self.range_key(&rows[i]) {
                    Some(key) => {
                        let from_key = key.saturating_sub(d);
                        let lo = rows[..i]
                            .partition_point(|r| self.range_key(r).is_none_or(|k| k < from_key));
                        (lo, peers_end[i])
                    }
                    // NULL's frame is its peers, the other NULLs.
                    None => (rank[i] as usize - 1, peers_end[i]),
                },
                Frame::Unbounded { peers } => (0, if peers { peers_end[i] } else { i + 1 }),
            };
            let mut values = Vec::with_capacity(self.spec.calls.len());
            let mut aggregates = Vec::new();
            if !self.aggs.is_empty() {
                if let Frame::Unbounded { .. } = self.spec.frame {
                    while applied < hi {
                        running.apply_values(&self.aggs, &rows[applied], false)?;
                        applied += 1;
                    }
                    running.results(&self.aggs, &mut aggregates);
                } else {
                    let mut acc = Accumulators::new(&self.aggs);
                    for r in &rows[lo..hi] {
                        acc.apply_values(&self.aggs, r, false)?;
                    }
                    acc.results(&self.aggs, &mut aggregates);
                }
            }
            let mut next_agg = aggregates.into_iter();
            for call in &self.spec.calls {
                values.push(match call {
                    OverCall::Aggregate(_) => next_agg.next().unwrap_or(Value::Null),
                    OverCall::RowNumber => Value::Int(i as i64 + 1),
                    OverCall::Rank => Value::Int(rank[i]),
                    OverCall::DenseRank => Value::Int(dense[i]),
                    OverCall::Lag {
                        column,
                        offset,
                        default,
                    } => match i.checked_sub(*offset) {
                        Some(k) => rows[k][*column].clone(),
                        None => default.clone(),
                    },
                    OverCall::Lead {
                        column,
                        offset,
                        default,
                    } => match rows.get(i + offset) {
                        Some(r) => r[*column].clone(),
                        None => default.clone(),
                    },
                });
            }
            out.push(values);
        }
        Ok(out)
    }
}

fn with_results(row: &[Value], results: &[Value], kind: RowKind) -> Row {
    let mut values = Vec::with_capacity(row.len() + results.len());
    values.extend_from_slice(row);
    values.extend_from_slice(results);
    Row::new(kind, values)
}

impl Operator for OverTable {
    fn on_record(
        &mut self,
        _: usize,
        r: Record,
        ctx: &mut Context,
        out: &mut Collector,
    ) -> Result<()> {
        let ts = r.timestamp;
        if let Some(ttl) = self.ttl {
            ttl.touch(ctx, Self::TTL, ts)?;
        }
        let adds = r.row.kind.is_addition();
        let row = r.row.values;
        let mut rows: Vec<Vec<Value>> = ctx.list(Self::ROWS)?;
        // Where the change is: an added row goes after its equals, a
        // taken-back row is the last of its equals.
        let at = rows.partition_point(|x| self.order(x, &row).is_le());
        let at = if adds {
            at
        } else {
            match at.checked_sub(1) {
                Some(k) if rows[k] == row => k,
                // A retraction of a row this partition does not hold: it
                // was never added (the input is consistent), so nothing
                // changes.
                _ => return Ok(()),
            }
        };
        // Rows before the change that it reaches: LEAD's, and the changed
        // row's peers (a RANGE frame takes in every peer).
        let mut from = at.saturating_sub(self.lead_depth);
        while from > 0 && self.peers(&rows[from - 1], &row) {
            from -= 1;
        }
        let fail = |ctx: &Context, e: String| ctx.failure(format!("OVER aggregate: {e}"));
        let before = self.results(&rows, from).map_err(|e| fail(ctx, e))?;
        let gone = if adds {
            rows.insert(at, row);
            None
        } else {
            Some(rows.remove(at))
        };
        let after = self.results(&rows, from).map_err(|e| fail(ctx, e))?;
        // Pair each held row's results before and after the change.
        let mut old = before.iter();
        for (i, new) in after.iter().enumerate() {
            let index = from + i;
            if index == at {
                match &gone {
                    None => {
                        out.emit(with_results(&rows[index], new, RowKind::Insert), ts);
                        continue;
                    }
                    Some(g) => {
                        let was = old.next().expect("the removed row's results");
                        out.emit(with_results(g, was, RowKind::Delete), ts);
                    }
                }
            }
            let was = old.next().expect("a result for each row held before");
            if was != new {
                out.emit(with_results(&rows[index], was, RowKind::UpdateBefore), ts);
                out.emit(with_results(&rows[index], new, RowKind::UpdateAfter), ts);
            }
        }
        if let (Some(g), Some(was)) = (&gone, old.next()) {
            // The removed row was the last.
            out.emit(with_results(g, was, RowKind::Delete), ts);
        }
        if let (Some(ttl), true) = (self.ttl, rows.is_empty()) {
            ttl.forget(ctx, Self::TTL)?;
        }
        ctx.set_list(Self::ROWS, &rows)
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
    use crate::dataflow::operator::testing::{shown, Harness};
    use crate::dataflow::ops::aggregate::AggFunction;

    fn avg(column: usize) -> OverCall {
        OverCall::Aggregate(Agg {
            function: AggFunction::Avg,
            column: Some(column),
            name: "a".into(),
            distinct: false,
            user: None,
        })
    }

    fn max(column: usize) -> OverCall {
        OverCall::Aggregate(Agg {
            function: AggFunction::Max,
            column: Some(column),
            name: "m".into(),
            distinct: false,
            user: None,
        })
    }

    /// Rows (partition, order, value); ordered by column 1.
    fn harness(frame: Frame, calls: Vec<OverCall>) -> Harness<OverTable> {
        let spec = OverTableSpec {
            order: vec![SortKey {
                column: 1,
                descending: false,
                nulls_first: true,
            }],
            frame,
            calls,
        };
        Harness::keyed(OverTable::new(spec, 3), OverTable::tables(), vec![0])
    }

    fn row(kind: RowKind, o: i64, v: i64) -> Row {
        Row::new(kind, vec![Value::Int(1), Value::Int(o), Value::Int(v)])
    }

    #[test]
    fn a_row_that_comes_between_updates_the_frames_that_reach_it() {
        let mut h = harness(Frame::Rows(1), vec![max(2), OverCall::RowNumber]);
        assert_eq!(
            shown(h.record(0, row(RowKind::Insert, 10, 5), 0).unwrap()),
            ["+I1,10,5,5,1"]
        );
        assert_eq!(
            shown(h.record(0, row(RowKind::Insert, 30, 1), 0).unwrap()),
            ["+I1,30,1,5,2"]
        );
        // 20 goes between: 30's frame is now (20, 30), and its number 3.
        assert_eq!(
            shown(h.record(0, row(RowKind::Insert, 20, 3), 0).unwrap()),
            ["+I1,20,3,5,2", "-U1,30,1,5,2", "+U1,30,1,3,3"]
        );
        // Taking 20 back restores 30's row as it was.
        assert_eq!(
            shown(h.record(0, row(RowKind::UpdateBefore, 20, 3), 0).unwrap()),
            ["-D1,20,3,5,2", "-U1,30,1,3,3", "+U1,30,1,5,2"]
        );
        // The last row goes: nothing else changes.
        assert_eq!(
            shown(h.record(0, row(RowKind::Delete, 30, 1), 0).unwrap()),
            ["-D1,30,1,5,2"]
        );
        // A retraction of a row never held changes nothing.
        assert!(h
            .record(0, row(RowKind::Delete, 99, 1), 0)
            .unwrap()
            .is_empty());
    }

    #[test]
    fn lead_updates_the_row_before_when_its_next_row_comes() {
        let lead = OverCall::Lead {
            column: 2,
            offset: 1,
            default: Value::Int(-1),
        };
        let lag = OverCall::Lag {
            column: 2,
            offset: 1,
            default: Value::Int(-1),
        };
        let mut h = harness(Frame::Rows(0), vec![lead, lag]);
        h.record(0, row(RowKind::Insert, 10, 5), 0).unwrap();
        assert_eq!(
            shown(h.record(0, row(RowKind::Insert, 20, 7), 0).unwrap()),
            ["-U1,10,5,-1,-1", "+U1,10,5,7,-1", "+I1,20,7,-1,5"]
        );
    }

    #[test]
    fn range_frames_and_ranks_take_peers_together() {
        let mut h = harness(
            Frame::Range(10),
            vec![avg(2), OverCall::Rank, OverCall::DenseRank],
        );
        for (o, v) in [(10, 2), (10, 4), (25, 6)] {
            h.record(0, row(RowKind::Insert, o, v), 0).unwrap();
        }
        // 18 reaches back to 10 (both peers); 25 now reaches 18 too.
        assert_eq!(
            shown(h.record(0, row(RowKind::Insert, 18, 0), 0).unwrap()),
            [
                "+I1,18,0,Double(2.0),3,2",
                "-U1,25,6,Double(6.0),3,2",
                "+U1,25,6,Double(3.0),4,3"
            ]
        );
    }

    #[test]
    fn a_new_peer_updates_the_peers_before_it_whose_range_takes_it_in() {
        let mut h = harness(
            Frame::Unbounded { peers: true },
            vec![OverCall::Aggregate(Agg::count("c")), OverCall::Rank],
        );
        h.record(0, row(RowKind::Insert, 10, 1), 0).unwrap();
        h.record(0, row(RowKind::Insert, 20, 5), 0).unwrap();
        // (20, 7) orders after (20, 5), its peer: both count 3 rows now.
        assert_eq!(
            shown(h.record(0, row(RowKind::Insert, 20, 7), 0).unwrap()),
            ["-U1,20,5,2,2", "+U1,20,5,3,2", "+I1,20,7,3,2"]
        );
        assert_eq!(
            shown(h.record(0, row(RowKind::Delete, 20, 7), 0).unwrap()),
            ["-U1,20,5,3,2", "+U1,20,5,2,2", "-D1,20,7,3,2"]
        );
    }

    #[test]
    fn unbounded_frames_run_from_the_first_row() {
        let mut h = harness(Frame::Unbounded { peers: false }, vec![max(2)]);
        h.record(0, row(RowKind::Insert, 20, 3), 0).unwrap();
        h.record(0, row(RowKind::Insert, 30, 1), 0).unwrap();
        assert_eq!(
            shown(h.record(0, row(RowKind::Insert, 10, 9), 0).unwrap()),
            [
                "+I1,10,9,9",
                "-U1,20,3,3",
                "+U1,20,3,9",
                "-U1,30,1,3",
                "+U1,30,1,9"
            ]
        );
    }
}
