//! OVER aggregations over an append-only input (Flink's
//! `OverAggregate`): `agg(x) OVER (PARTITION BY p ORDER BY t <frame>)`,
//! ordered by the event-time column `t`. Each row waits in its key's
//! `pending` map, keyed by its time and arrival ([`crate::dataflow::ordered`]),
//! until the watermark passes its time; then the key's rows up to the
//! watermark are read as a range of that map, in order, and each is
//! emitted once with every call's value over its frame:
//!
//! - `ROWS BETWEEN n PRECEDING AND CURRENT ROW`: the row and the n rows
//!   before it (in time order, then arrival);
//! - `RANGE BETWEEN d PRECEDING AND CURRENT ROW`: the rows whose time is
//!   within `d` before the row's, the row's peers (rows of the same time)
//!   included. The frame's rows are a map by time, and its aggregates are
//!   accumulators that rows leave as they fall out of reach (Flink's
//!   `RowTimeRangeBoundedPrecedingFunction` retracts them the same way):
//!   a row costs its own entry, not a pass over the frame;
//! - `UNBOUNDED PRECEDING` (ROWS, or RANGE, the default with ORDER BY):
//!   every row so far, held as running accumulators, not as rows.
//!
//! `ROW_NUMBER`, `RANK`, `DENSE_RANK` count rows and times; `LAG(x, n,
//! default)` reads the row n before. The output is append-only; a row
//! behind the watermark when it arrives is late, dropped and counted.

use super::aggregate::{Accumulators, Agg, AggFunction};
use super::top_n::SortKey;
use crate::dataflow::operator::{Collector, Context, Operator, Record};
use crate::dataflow::ordered::encode_time;
use crate::dataflow::row::{Row, Value};
use crate::dataflow::tables::{Table, TableSpec};
use crate::error::Result;
use crate::time::NO_TIMESTAMP;

/// Which rows before the current one an aggregate call reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame {
    /// `ROWS BETWEEN n PRECEDING AND CURRENT ROW`.
    Rows(usize),
    /// `RANGE BETWEEN d PRECEDING AND CURRENT ROW`, in ms.
    Range(i64),
    /// `UNBOUNDED PRECEDING`; with `peers`, RANGE (a row's peers are in
    /// its frame), else ROWS.
    Unbounded { peers: bool },
}

/// One call of the OVER clause.
#[derive(Debug, Clone, PartialEq)]
pub enum OverCall {
    /// COUNT, SUM, AVG, MIN or MAX over the frame.
    Aggregate(Agg),
    RowNumber,
    Rank,
    DenseRank,
    /// The value of `column` `offset` rows before, or `default`.
    Lag {
        column: usize,
        offset: usize,
        default: Value,
    },
    /// The value of `column` `offset` rows after, or `default`: only
    /// [`super::over_table::OverTable`] computes it, updating a row when
    /// its next rows come (this operator emits each row once).
    Lead {
        column: usize,
        offset: usize,
        default: Value,
    },
}

/// The aggregate calls among `calls`, in order (what accumulators compute).
pub(super) fn aggregate_calls(calls: &[OverCall]) -> Vec<Agg> {
    calls
        .iter()
        .filter_map(|c| match c {
            OverCall::Aggregate(a) => Some(a.clone()),
            _ => None,
        })
        .collect()
}

/// The most rows any of `calls` reads away from its row, by `offset`
/// (LAG's back, LEAD's ahead); 0 for none.
pub(super) fn deepest(calls: &[OverCall], offset: impl Fn(&OverCall) -> Option<usize>) -> usize {
    calls.iter().filter_map(offset).max().unwrap_or(0)
}

#[derive(Debug, Clone, PartialEq)]
pub struct OverSpec {
    /// The event-time column the rows are ordered by.
    pub time: usize,
    /// Further ORDER BY columns: the order of rows of one time (else
    /// their arrival), so that a ROWS frame, ROW_NUMBER and LAG do not
    /// depend on how partitions interleave.
    pub then: Vec<SortKey>,
    pub frame: Frame,
    pub calls: Vec<OverCall>,
}

pub struct OverAggregate {
    spec: OverSpec,
    /// The aggregate calls, in order (what accumulators compute). For a
    /// RANGE frame, MIN and MAX keep their values' multiset, so that a row
    /// leaving the frame is taken out of them exactly.
    aggs: Vec<Agg>,
    /// The most rows LAG reads back.
    lag_depth: usize,
}

impl OverAggregate {
    /// Rows waiting for the watermark (values, then time), by time and
    /// arrival ([`Self::entry_key`]).
    pub const PENDING: Table = Table(0);
    /// The rows a ROWS frame still reads (values, then time).
    pub const FRAME: Table = Table(1);
    /// The last rows, for LAG.
    pub const LAG: Table = Table(2);
    /// Counters: rows so far, times so far, the last time, its rank, and
    /// rows that arrived (the next row's arrival number).
    pub const COUNTS: Table = Table(3);
    /// An unbounded or RANGE frame's accumulators.
    pub const ACC: Table = Table(4);
    /// The rows a RANGE frame still reads, keyed as in `pending`.
    pub const RANGE: Table = Table(5);

    pub fn new(spec: OverSpec) -> Self {
        let mut aggs = aggregate_calls(&spec.calls);
        if matches!(spec.frame, Frame::Range(_)) {
            for a in &mut aggs {
                if matches!(a.function, AggFunction::Min | AggFunction::Max) {
                    a.distinct = true;
                }
            }
        }
        let lag_depth = deepest(&spec.calls, |c| match c {
            OverCall::Lag { offset, .. } => Some(*offset),
            _ => None,
        });
        Self {
            spec,
            aggs,
            lag_depth,
        }
    }

    pub fn tables() -> Vec<TableSpec> {
        vec![
            TableSpec::map::<Vec<Value>>("pending"),
            TableSpec::list::<Vec<Value>>("frame"),
            TableSpec::list::<Vec<Value>>("lag"),
            TableSpec::value::<Vec<Value>>("counts"),
            TableSpec::value::<Accumulators>("acc"),
            TableSpec::map::<Vec<Value>>("range"),
        ]
    }

    /// A row's key in `pending` and `range`: its time, then its arrival
    /// number, so that the map's order is the order rows are taken in.
    fn entry_key(time: i64, arrival: i64) -> Vec<u8> {
        let mut key = Vec::with_capacity(16);
        encode_time(time, &mut key);
        encode_time(arrival, &mut key);
        key
    }

    /// The key below which every entry's time is at most `time`.
    fn up_to(time: i64) -> Vec<u8> {
        let mut key = Vec::with_capacity(8);
        match time.checked_add(1) {
            Some(next) => encode_time(next, &mut key),
            None => key.extend_from_slice(&[0xFF; 9]),
        }
        key
    }

    /// The key's counters: rows, times, the last time, its rank, arrivals.
    fn counts(ctx: &mut Context) -> Result<[i64; 5]> {
        let mut counts = [0, 0, NO_TIMESTAMP, 0, 0];
        if let Some(stored) = ctx.get::<Vec<Value>>(Self::COUNTS)? {
            for (c, v) in counts.iter_mut().zip(&stored) {
                *c = v.as_int().unwrap_or(*c);
            }
        }
        Ok(counts)
    }

    fn time_of(row: &[Value]) -> i64 {
        row.last().and_then(Value::as_int).unwrap_or(NO_TIMESTAMP)
    }

    /// The aggregate results over `rows` (each with its time last).
    fn over(&self, rows: &[Vec<Value>]) -> std::result::Result<Vec<Value>, String> {
        let mut acc = Accumulators::new(&self.aggs);
        for r in rows {
            acc.apply_values(&self.aggs, &r[..r.len() - 1], false)?;
        }
        let mut out = Vec::new();
        acc.results(&self.aggs, &mut out);
        Ok(out)
    }

    /// Emits the key's rows whose time the watermark has passed, in order.
    fn fire(&mut self, ctx: &mut Context, out: &mut Collector) -> Result<()> {
        let watermark = ctx.watermark();
        let ready =
            ctx.map_range::<Vec<Value>>(Self::PENDING, Some(&Self::up_to(watermark)), usize::MAX)?;
        if ready.is_empty() {
            return Ok(());
        }
        let mut pending = Vec::with_capacity(ready.len());
        for (key, row) in ready {
            ctx.map_delete(Self::PENDING, &key)?;
            pending.push((key, row));
        }
        // Stable: rows of one time keep their order of arrival, unless
        // ORDER BY orders them further.
        if !self.spec.then.is_empty() {
            pending.sort_by(|(_, a), (_, b)| {
                Self::time_of(a)
                    .cmp(&Self::time_of(b))
                    .then_with(|| SortKey::compare_rows(&self.spec.then, a, b))
            });
        }
        let mut frame: Vec<Vec<Value>> = match self.spec.frame {
            Frame::Rows(_) => ctx.list(Self::FRAME)?,
            _ => Vec::new(),
        };
        let mut lag: Vec<Vec<Value>> = if self.lag_depth > 0 {
            ctx.list(Self::LAG)?
        } else {
            Vec::new()
        };
        let mut counts = Self::counts(ctx)?;
        let mut acc = match self.spec.frame {
            Frame::Unbounded { .. } | Frame::Range(_) => ctx
                .get::<Accumulators>(Self::ACC)?
                .unwrap_or_else(|| Accumulators::new(&self.aggs)),
            Frame::Rows(_) => Accumulators::new(&self.aggs),
        };
        let fail = |ctx: &Context, e: String| ctx.failure(format!("OVER aggregate: {e}"));
        let mut i = 0;
        while i < pending.len() {
            let t = Self::time_of(&pending[i].1);
            let peers_end = i + pending[i..].partition_point(|(_, r)| Self::time_of(r) == t);
            // RANK and DENSE_RANK: a new time starts a new rank.
            if counts[2] != t {
                counts[3] = counts[0] + 1;
                counts[1] += 1;
                counts[2] = t;
            }
            let range_like = matches!(
                self.spec.frame,
                Frame::Range(_) | Frame::Unbounded { peers: true }
            );
            if range_like {
                // A row's peers are in its frame: all of them go in first.
                for (key, r) in &pending[i..peers_end] {
                    acc.apply_values(&self.aggs, &r[..r.len() - 1], false)
                        .map_err(|e| fail(ctx, e))?;
                    if let Frame::Range(_) = self.spec.frame {
                        ctx.map_put(Self::RANGE, key, r)?;
                    }
                }
                if let Frame::Range(d) = self.spec.frame {
                    // Rows before t - d leave the frame.
                    let below = Self::up_to(t.saturating_sub(d).saturating_sub(1));
                    for (key, r) in
                        ctx.map_range::<Vec<Value>>(Self::RANGE, Some(&below), usize::MAX)?
                    {
                        acc.apply_values(&self.aggs, &r[..r.len() - 1], true)
                            .map_err(|e| fail(ctx, e))?;
                        ctx.map_delete(Self::RANGE, &key)?;
                    }
                }
            }
            for (_, row) in &pending[i..peers_end] {
                if !range_like {
                    match self.spec.frame {
                        Frame::Unbounded { .. } => acc
                            .apply_values(&self.aggs, &row[..row.len() - 1], false)
                            .map_err(|e| fail(ctx, e))?,
                        Frame::Rows(n) => {
                            frame.push(row.clone());
                            if frame.len() > n + 1 {
                                frame.drain(..frame.len() - (n + 1));
                            }
                        }
                        Frame::Range(_) => {}
                    }
                }
                counts[0] += 1;
                let aggregates = match self.spec.frame {
                    Frame::Unbounded { .. } | Frame::Range(_) => {
                        let mut v = Vec::new();
                        acc.results(&self.aggs, &mut v);
                        v
                    }
                    Frame::Rows(_) => self.over(&frame).map_err(|e| fail(ctx, e))?,
                };
                let values = &row[..row.len() - 1];
                let mut result = values.to_vec();
                let mut next_agg = aggregates.into_iter();
                for call in &self.spec.calls {
                    result.push(match call {
                        OverCall::Aggregate(_) => next_agg.next().unwrap_or(Value::Null),
                        OverCall::RowNumber => Value::Int(counts[0]),
                        OverCall::Rank => Value::Int(counts[3]),
                        OverCall::DenseRank => Value::Int(counts[1]),
                        OverCall::Lag {
                            column,
                            offset,
                            default,
                        } => match lag.len().checked_sub(*offset) {
                            Some(k) => lag[k][*column].clone(),
                            None => default.clone(),
                        },
                        // Refused by `JobBuilder::over_aggregate`.
                        OverCall::Lead { .. } => Value::Null,
                    });
                }
                if self.lag_depth > 0 {
                    lag.push(values.to_vec());
                    if lag.len() > self.lag_depth {
                        lag.drain(..lag.len() - self.lag_depth);
                    }
                }
                out.emit(Row::insert(result), t);
            }
            i = peers_end;
        }
        // An unbounded or RANGE frame keeps its accumulators; a ROWS frame
        // its last n + 1 rows.
        match self.spec.frame {
            Frame::Unbounded { .. } | Frame::Range(_) => ctx.put(Self::ACC, &acc)?,
            Frame::Rows(_) => ctx.set_list(Self::FRAME, &frame)?,
        }
        if self.lag_depth > 0 {
            ctx.set_list(Self::LAG, &lag)?;
        }
        let counts: Vec<Value> = counts.into_iter().map(Value::Int).collect();
        ctx.put(Self::COUNTS, &counts)
    }
}

impl Operator for OverAggregate {
    fn on_record(
        &mut self,
        _: usize,
        r: Record,
        ctx: &mut Context,
        _out: &mut Collector,
    ) -> Result<()> {
        if !r.row.kind.is_addition() {
            return Err(ctx.failure(
                "an OVER aggregation takes an append-only input, and a row was taken back (the planner refuses updating inputs)",
            ));
        }
        let Some(t) = r.row.get(self.spec.time).as_timestamp() else {
            return Ok(()); // No time: no place in the order.
        };
        if t <= ctx.watermark() {
            ctx.count_late();
            return Ok(());
        }
        // One timer per time (registering it again changes nothing).
        ctx.register_timer(t, b"o")?;
        let mut counts = Self::counts(ctx)?;
        let key = Self::entry_key(t, counts[4]);
        counts[4] += 1;
        let counts: Vec<Value> = counts.into_iter().map(Value::Int).collect();
        ctx.put(Self::COUNTS, &counts)?;
        let mut row = r.row.values;
        row.push(Value::Int(t));
        ctx.map_put(Self::PENDING, &key, &row)
    }

    fn on_timer(
        &mut self,
        _time: i64,
        _tag: &[u8],
        ctx: &mut Context,
        out: &mut Collector,
    ) -> Result<()> {
        self.fire(ctx, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataflow::operator::testing::{shown, Harness};

    fn sum(column: usize) -> OverCall {
        OverCall::Aggregate(Agg {
            function: AggFunction::Sum,
            column: Some(column),
            name: "s".into(),
            distinct: false,
            user: None,
        })
    }

    fn harness(frame: Frame, calls: Vec<OverCall>) -> Harness<OverAggregate> {
        let spec = OverSpec {
            time: 1,
            then: Vec::new(),
            frame,
            calls,
        };
        Harness::keyed(OverAggregate::new(spec), OverAggregate::tables(), vec![0])
    }

    fn at(t: i64, v: i64) -> Row {
        Row::insert(vec![Value::Int(1), Value::Timestamp(t), Value::Int(v)])
    }

    #[test]
    fn rows_wait_for_the_watermark_and_come_out_in_time_order() {
        let mut h = harness(Frame::Rows(1), vec![sum(2), OverCall::RowNumber]);
        for (t, v) in [(30, 3), (10, 1), (20, 2)] {
            assert!(h.record(0, at(t, v), t).unwrap().is_empty());
        }
        assert_eq!(
            shown(h.watermark(25).unwrap()),
            ["+I1,Timestamp(10),1,1,1", "+I1,Timestamp(20),2,3,2"]
        );
        assert_eq!(
            shown(h.watermark(30).unwrap()),
            ["+I1,Timestamp(30),3,5,3"],
            "ROWS 1 PRECEDING: 2 + 3"
        );
        assert!(h.record(0, at(5, 9), 5).unwrap().is_empty());
        assert_eq!(h.ctx.take_late(), 1);
    }

    #[test]
    fn a_range_frame_holds_peers_and_drops_rows_out_of_reach() {
        let mut h = harness(
            Frame::Range(10),
            vec![sum(2), OverCall::Rank, OverCall::DenseRank],
        );
        for (t, v) in [(10, 1), (10, 2), (15, 4), (30, 8)] {
            h.record(0, at(t, v), t).unwrap();
        }
        assert_eq!(
            shown(h.watermark(40).unwrap()),
            [
                "+I1,Timestamp(10),1,3,1,1",
                "+I1,Timestamp(10),2,3,1,1",
                "+I1,Timestamp(15),4,7,3,2",
                "+I1,Timestamp(30),8,8,4,3"
            ]
        );
    }

    #[test]
    fn unbounded_frames_run_and_lag_reads_back() {
        let lag = OverCall::Lag {
            column: 2,
            offset: 1,
            default: Value::Int(-1),
        };
        let mut h = harness(Frame::Unbounded { peers: false }, vec![sum(2), lag]);
        for (t, v) in [(10, 1), (20, 2), (30, 4)] {
            h.record(0, at(t, v), t).unwrap();
        }
        assert_eq!(
            shown(h.watermark(30).unwrap()),
            [
                "+I1,Timestamp(10),1,1,-1",
                "+I1,Timestamp(20),2,3,1",
                "+I1,Timestamp(30),4,7,2"
            ]
        );
    }
}
