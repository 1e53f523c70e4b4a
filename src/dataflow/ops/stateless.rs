//! Stateless operators: map, filter, flat-map and union. They chain into
//! the task before them and keep each row's change kind, so they work on
//! updating streams as well as append-only ones (a filter drops the
//! update-before and the update-after of a row alike when both fail it).

use std::sync::Arc;

use crate::dataflow::operator::{Collector, Context, Operator, Record};
use crate::dataflow::row::{Row, RowKind, Value};
use crate::error::Result;

pub type MapFn = Arc<dyn Fn(&[Value]) -> Vec<Value> + Send + Sync>;
pub type FilterFn = Arc<dyn Fn(&[Value]) -> bool + Send + Sync>;
pub type FlatMapFn = Arc<dyn Fn(&[Value], &mut dyn FnMut(Vec<Value>)) + Send + Sync>;

/// New values for each row, of the node's declared schema.
pub struct Map(pub MapFn);

impl Operator for Map {
    fn on_record(
        &mut self,
        _: usize,
        r: Record,
        _: &mut Context,
        out: &mut Collector,
    ) -> Result<()> {
        out.emit(Row::new(r.row.kind, (self.0)(&r.row.values)), r.timestamp);
        Ok(())
    }
}

/// A map over an updating input: an update whose old and new rows map to
/// the same values (a projection that drops the column that changed, as
/// SELECT DISTINCT's hidden count) is no change, and goes nowhere. The
/// update-before is held until the next record says whether its
/// update-after equals it: they come one after the other, from the one
/// operator before this one in its chain.
#[derive(Clone)]
pub struct ChangeMap {
    pub f: MapFn,
    held: Option<(Row, i64)>,
}

impl ChangeMap {
    pub fn new(f: MapFn) -> Self {
        Self { f, held: None }
    }

    fn release(&mut self, out: &mut Collector) {
        if let Some((row, time)) = self.held.take() {
            out.emit(row, time);
        }
    }
}

impl Operator for ChangeMap {
    fn on_record(
        &mut self,
        _: usize,
        r: Record,
        _: &mut Context,
        out: &mut Collector,
    ) -> Result<()> {
        let row = Row::new(r.row.kind, (self.f)(&r.row.values));
        match row.kind {
            RowKind::UpdateBefore => {
                self.release(out);
                self.held = Some((row, r.timestamp));
            }
            RowKind::UpdateAfter => match self.held.take() {
                Some((before, _)) if before.values == row.values => {}
                Some((before, time)) => {
                    out.emit(before, time);
                    out.emit(row, r.timestamp);
                }
                None => out.emit(row, r.timestamp),
            },
            _ => {
                self.release(out);
                out.emit(row, r.timestamp);
            }
        }
        Ok(())
    }

    fn on_watermark(&mut self, _: i64, _: &mut Context, out: &mut Collector) -> Result<()> {
        self.release(out);
        Ok(())
    }

    fn before_snapshot(&mut self, _: &mut Context, out: &mut Collector) -> Result<()> {
        self.release(out);
        Ok(())
    }
}

/// Keeps the rows the predicate holds for.
pub struct Filter(pub FilterFn);

impl Operator for Filter {
    fn on_record(
        &mut self,
        _: usize,
        r: Record,
        _: &mut Context,
        out: &mut Collector,
    ) -> Result<()> {
        if (self.0)(&r.row.values) {
            out.emit(r.row, r.timestamp);
        }
        Ok(())
    }
}

/// Any number of rows per row, each with the input's kind and time.
pub struct FlatMap(pub FlatMapFn);

impl Operator for FlatMap {
    fn on_record(
        &mut self,
        _: usize,
        r: Record,
        _: &mut Context,
        out: &mut Collector,
    ) -> Result<()> {
        let kind = r.row.kind;
        (self.0)(&r.row.values, &mut |values| {
            out.emit(Row::new(kind, values), r.timestamp)
        });
        Ok(())
    }
}

/// Passes every row of every input on: several streams of one schema as one.
pub struct Union;

impl Operator for Union {
    fn on_record(
        &mut self,
        _: usize,
        r: Record,
        _: &mut Context,
        out: &mut Collector,
    ) -> Result<()> {
        out.emit(r.row, r.timestamp);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataflow::row::RowKind;
    use crate::dataflow::RecordKey;

    fn run(op: &mut dyn Operator, row: Row) -> Vec<(Row, i64)> {
        let mut ctx = Context::new("t", 0, None);
        let mut out = Collector::new();
        op.on_record(
            0,
            Record {
                row,
                timestamp: 5,
                key_group: 0,
                key: RecordKey::new(),
            },
            &mut ctx,
            &mut out,
        )
        .unwrap();
        out.take()
    }

    /// An update that projects to the row it replaces goes nowhere; one
    /// that changes the projection goes out whole; a held update-before
    /// is released by what follows it or by the snapshot.
    #[test]
    fn a_change_map_drops_updates_that_project_to_the_same_row() {
        // Keeps the first column of (value, count).
        let mut m = ChangeMap::new(Arc::new(|v| vec![v[0].clone()]));
        let row = |kind, v: i64, n: i64| Row::new(kind, vec![Value::Int(v), Value::Int(n)]);
        let kinds = |got: Vec<(Row, i64)>| -> Vec<(RowKind, Vec<Value>)> {
            got.into_iter().map(|(r, _)| (r.kind, r.values)).collect()
        };
        assert!(run(&mut m, row(RowKind::UpdateBefore, 7, 1)).is_empty());
        assert!(run(&mut m, row(RowKind::UpdateAfter, 7, 2)).is_empty());
        run(&mut m, row(RowKind::UpdateBefore, 7, 2));
        assert_eq!(
            kinds(run(&mut m, row(RowKind::UpdateAfter, 8, 2))),
            vec![
                (RowKind::UpdateBefore, vec![Value::Int(7)]),
                (RowKind::UpdateAfter, vec![Value::Int(8)])
            ]
        );
        run(&mut m, row(RowKind::UpdateBefore, 8, 2));
        assert_eq!(
            kinds(run(&mut m, row(RowKind::Delete, 9, 1))),
            vec![
                (RowKind::UpdateBefore, vec![Value::Int(8)]),
                (RowKind::Delete, vec![Value::Int(9)])
            ]
        );
        run(&mut m, row(RowKind::UpdateBefore, 3, 1));
        let mut ctx = Context::new("t", 0, None);
        let mut out = Collector::new();
        m.before_snapshot(&mut ctx, &mut out).unwrap();
        assert_eq!(
            kinds(out.take()),
            vec![(RowKind::UpdateBefore, vec![Value::Int(3)])]
        );
    }

    #[test]
    fn stateless_operators_keep_kind_and_time() {
        let mut m = Map(Arc::new(|v| vec![Value::Int(v[0].as_int().unwrap() * 2)]));
        let got = run(&mut m, Row::new(RowKind::UpdateBefore, vec![Value::Int(4)]));
        assert_eq!(
            got,
            vec![(Row::new(RowKind::UpdateBefore, vec![Value::Int(8)]), 5)]
        );
        let mut f = Filter(Arc::new(|v| v[0].as_int() == Some(1)));
        assert!(run(&mut f, Row::insert(vec![Value::Int(2)])).is_empty());
        assert_eq!(run(&mut f, Row::insert(vec![Value::Int(1)])).len(), 1);
        let mut fm = FlatMap(Arc::new(|v, emit| {
            for w in v[0].as_str().unwrap().split(' ') {
                emit(vec![Value::from(w)]);
            }
        }));
        let got = run(&mut fm, Row::new(RowKind::Delete, vec![Value::from("a b")]));
        assert_eq!(got.len(), 2);
        assert!(got
            .iter()
            .all(|(r, t)| r.kind == RowKind::Delete && *t == 5));
    }
}
