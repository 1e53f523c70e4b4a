//! OVER aggregations over an append-only input (Flink's
//! `OverAggregate`): `agg(x) OVER (PARTITION BY p ORDER BY t <frame>)`,
//! ordered by the event-time column `t`. Each row waits in its key's
//! `pending` list until the watermark passes its time; then the key's
//! rows of that time are taken in order, and each is emitted once with
//! every call's value over its frame:
//!
//! - `ROWS BETWEEN n PRECEDING AND CURRENT ROW`: the row and the n rows
//!   before it (in time order, then arrival);
//! - `RANGE BETWEEN d PRECEDING AND CURRENT ROW`: the rows whose time is
//!   within `d` before the row's, the row's peers (rows of the same time)
//!   included;
//! - `UNBOUNDED PRECEDING` (ROWS, or RANGE, the default with ORDER BY):
//!   every row so far, held as running accumulators, not as rows.
//!
//! `ROW_NUMBER`, `RANK`, `DENSE_RANK` count rows and times; `LAG(x, n,
//! default)` reads the row n before. The output is append-only; a row
//! behind the watermark when it arrives is late, dropped and counted.

use super::aggregate::{Accumulators, Agg};
use super::top_n::SortKey;
use crate::dataflow::operator::{Collector, Context, Operator, Record};
use crate::dataflow::row::{Row, Value};
use crate::dataflow::state::{Table, TableSpec};
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
    /// The aggregate calls, in order (what accumulators compute).
    aggs: Vec<Agg>,
    /// The most rows LAG reads back.
    lag_depth: usize,
}

impl OverAggregate {
    /// Rows waiting for the watermark: their values and then their time.
    pub const PENDING: Table = Table(0);
    /// The rows a bounded frame still reads (values, then time).
    pub const FRAME: Table = Table(1);
    /// The last rows, for LAG.
    pub const LAG: Table = Table(2);
    /// Counters: rows so far, times so far, the last time, its rank.
    pub const COUNTS: Table = Table(3);
    /// An unbounded frame's running accumulators.
    pub const ACC: Table = Table(4);

    pub fn new(spec: OverSpec) -> Self {
        let aggs = aggregate_calls(&spec.calls);
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
            TableSpec::list::<Vec<Value>>("pending"),
            TableSpec::list::<Vec<Value>>("frame"),
            TableSpec::list::<Vec<Value>>("lag"),
            TableSpec::value::<Vec<Value>>("counts"),
            TableSpec::value::<Accumulators>("acc"),
        ]
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
        let mut pending: Vec<Vec<Value>> = ctx.list(Self::PENDING)?;
        // Stable: rows of one time keep their order of arrival, unless
        // ORDER BY orders them further.
        pending.sort_by(|a, b| {
            Self::time_of(a)
                .cmp(&Self::time_of(b))
                .then_with(|| SortKey::compare_rows(&self.spec.then, a, b))
        });
        let ready = pending.partition_point(|r| Self::time_of(r) <= watermark);
        if ready == 0 {
            return Ok(());
        }
        let rest = pending.split_off(ready);
        let mut frame: Vec<Vec<Value>> = match self.spec.frame {
            Frame::Unbounded { .. } => Vec::new(),
            _ => ctx.list(Self::FRAME)?,
        };
        let mut lag: Vec<Vec<Value>> = if self.lag_depth > 0 {
            ctx.list(Self::LAG)?
        } else {
            Vec::new()
        };
        let mut counts = match ctx.get::<Vec<Value>>(Self::COUNTS)? {
            Some(c) if c.len() == 4 => c.iter().map(|v| v.as_int().unwrap_or(0)).collect(),
            _ => vec![0i64, 0, NO_TIMESTAMP, 0],
        };
        let mut acc = match self.spec.frame {
            Frame::Unbounded { .. } => ctx
                .get::<Accumulators>(Self::ACC)?
                .unwrap_or_else(|| Accumulators::new(&self.aggs)),
            _ => Accumulators::new(&self.aggs),
        };
        let fail = |ctx: &Context, e: String| ctx.failure(format!("OVER aggregate: {e}"));
        let mut i = 0;
        while i < pending.len() {
            let t = Self::time_of(&pending[i]);
            let peers_end = i + pending[i..].partition_point(|r| Self::time_of(r) == t);
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
                for r in &pending[i..peers_end] {
                    match self.spec.frame {
                        Frame::Unbounded { .. } => acc
                            .apply_values(&self.aggs, &r[..r.len() - 1], false)
                            .map_err(|e| fail(ctx, e))?,
                        _ => frame.push(r.clone()),
                    }
                }
                if let Frame::Range(d) = self.spec.frame {
                    let from = t.saturating_sub(d);
                    frame.retain(|r| Self::time_of(r) >= from);
                }
            }
            for row in &pending[i..peers_end] {
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
                    Frame::Unbounded { .. } => {
                        let mut v = Vec::new();
                        acc.results(&self.aggs, &mut v);
                        v
                    }
                    _ => self.over(&frame).map_err(|e| fail(ctx, e))?,
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
        // A RANGE frame keeps what a later row can still reach; a ROWS
        // frame its last n + 1 rows.
        match self.spec.frame {
            Frame::Unbounded { .. } => ctx.put(Self::ACC, &acc)?,
            _ => ctx.set_list(Self::FRAME, &frame)?,
        }
        if self.lag_depth > 0 {
            ctx.set_list(Self::LAG, &lag)?;
        }
        let counts: Vec<Value> = counts.into_iter().map(Value::Int).collect();
        ctx.put(Self::COUNTS, &counts)?;
        ctx.set_list(Self::PENDING, &rest)
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
        let mut pending: Vec<Vec<Value>> = ctx.list(Self::PENDING)?;
        if !pending.iter().any(|p| Self::time_of(p) == t) {
            ctx.register_timer(t, b"o")?;
        }
        let mut row = r.row.values;
        row.push(Value::Int(t));
        pending.push(row);
        ctx.set_list(Self::PENDING, &pending)
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
    use crate::dataflow::ops::aggregate::AggFunction;

    fn sum(column: usize) -> OverCall {
        OverCall::Aggregate(Agg {
            function: AggFunction::Sum,
            column: Some(column),
            name: "s".into(),
            distinct: false,
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
