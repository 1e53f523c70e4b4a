//! Deduplication: the first row of each key passes, later rows with the
//! same key are dropped (Flink SQL's keep-first `ROW_NUMBER() ... = 1`
//! over processing order). Its state is one marker per key seen: the
//! event time of the row that passed.

use crate::dataflow::operator::{Collector, Context, Operator, Record};
use crate::dataflow::row::RowKind;
use crate::dataflow::state::{Table, TableSpec};
use crate::error::Result;

pub struct Deduplicate;

impl Deduplicate {
    pub const SEEN: Table = Table(0);

    pub fn tables() -> Vec<TableSpec> {
        vec![TableSpec::value::<i64>("seen")]
    }
}

impl Operator for Deduplicate {
    fn on_record(
        &mut self,
        _: usize,
        r: Record,
        ctx: &mut Context,
        out: &mut Collector,
    ) -> Result<()> {
        if r.row.kind != RowKind::Insert {
            return Err(ctx.failure(format!(
                "deduplication takes append-only input, not a {} row",
                r.row.kind.short()
            )));
        }
        if ctx.get::<i64>(Self::SEEN)?.is_none() {
            ctx.put(Self::SEEN, &r.timestamp)?;
            out.emit(r.row, r.timestamp);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataflow::operator::testing::Harness;
    use crate::dataflow::row::{Row, Value};

    #[test]
    fn only_the_first_row_of_a_key_passes() {
        let mut h = Harness::keyed(Deduplicate, Deduplicate::tables(), vec![0]);
        let row = |k: &str, v: i64| Row::insert(vec![Value::from(k), Value::Int(v)]);
        assert_eq!(
            h.record(0, row("a", 1), 10).unwrap(),
            vec![(row("a", 1), 10)]
        );
        assert!(h.record(0, row("a", 2), 11).unwrap().is_empty());
        assert_eq!(h.record(0, row("b", 3), 12).unwrap().len(), 1);
        let e = h
            .record(0, row("c", 1).with_kind(RowKind::Delete), 13)
            .unwrap_err()
            .to_string();
        assert!(e.contains("append-only"), "{e}");
    }
}
