//! A filter over a row expression (`Stream::filter_where`): keeps the
//! rows whose predicate is TRUE, as SQL's `WHERE` does. Stateless, so it
//! chains into the task before it. A value the predicate cannot evaluate
//! (an overflow, a division by zero) fails the job naming the operator
//! and the reason, as Flink does. The predicate is compiled by weir's
//! one expression compiler, SQL's ([`crate::dataflow::expr::Expr::compile`]).

use std::sync::Arc;

use crate::dataflow::operator::{Collector, Context, Operator, Record};
use crate::dataflow::row::Value;
use crate::error::Result;
use crate::sql::compiled::EvalFn;

#[derive(Clone)]
pub struct WhereFilter {
    /// Compiled against the input's schema when the job was built.
    pub predicate: Arc<EvalFn>,
}

impl Operator for WhereFilter {
    fn on_record(
        &mut self,
        _: usize,
        r: Record,
        ctx: &mut Context,
        out: &mut Collector,
    ) -> Result<()> {
        let keep = (self.predicate)(&r.row.values)
            .map_err(|reason| ctx.failure(format!("the filter's predicate: {reason}")))?
            == Value::Bool(true);
        if keep {
            out.emit(r.row, r.timestamp);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataflow::expr::Expr;
    use crate::dataflow::row::{DataType, Field, Row, Schema};
    use crate::dataflow::RecordKey;

    #[test]
    fn keeps_what_holds_and_names_what_cannot_be_evaluated() {
        let schema = Schema::new(vec![
            Field::new("user", DataType::String),
            Field::new("amount", DataType::BigInt),
        ]);
        let (predicate, _) = Expr::col("amount")
            .divided_by(Expr::lit(2))
            .ge(Expr::lit(3))
            .compile(&schema)
            .unwrap();
        let mut op = WhereFilter { predicate };
        let mut ctx = Context::new("big", 0, None);
        let mut out = Collector::new();
        for amount in [Value::Int(6), Value::Int(5), Value::Null] {
            let r = Record {
                row: Row::insert(vec!["u".into(), amount]),
                timestamp: 0,
                key_group: 0,
                key: RecordKey::new(),
            };
            op.on_record(0, r, &mut ctx, &mut out).unwrap();
        }
        let kept = out.take();
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].0.values[1], Value::Int(6));
        let (predicate, _) = Expr::col("amount")
            .divided_by(Expr::lit(0))
            .ge(Expr::lit(3))
            .compile(&schema)
            .unwrap();
        let mut op = WhereFilter { predicate };
        let r = Record {
            row: Row::insert(vec!["u".into(), Value::Int(1)]),
            timestamp: 0,
            key_group: 0,
            key: RecordKey::new(),
        };
        let e = op
            .on_record(0, r, &mut ctx, &mut out)
            .unwrap_err()
            .to_string();
        assert!(e.contains("big") && e.contains("division by zero"), "{e}");
    }
}
