//! Deduplication: the first row of each key passes, later rows with the
//! same key are dropped (Flink SQL's keep-first `ROW_NUMBER() ... = 1`
//! over processing order). Its state is one marker per key seen: the
//! event time of the row that passed. With a TTL ([`StateTtl`]) the
//! marker goes once the watermark passes that time plus the TTL, and the
//! key's next row passes again.

use crate::dataflow::operator::{Collector, Context, Operator, Record};
use crate::dataflow::row::RowKind;
use crate::dataflow::tables::{Table, TableSpec};
use crate::error::Result;
use crate::time::NO_TIMESTAMP;

use super::state_ttl::StateTtl;

#[derive(Default)]
pub struct Deduplicate {
    ttl: Option<StateTtl>,
}

impl Deduplicate {
    pub const SEEN: Table = Table(0);

    pub fn new(ttl: Option<StateTtl>) -> Self {
        Self { ttl }
    }

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
            if let (Some(ttl), true) = (self.ttl, r.timestamp != NO_TIMESTAMP) {
                ctx.register_timer(ttl.due(r.timestamp), StateTtl::TAG)?;
            }
            out.emit(r.row, r.timestamp);
        }
        Ok(())
    }

    /// The marker's time ran out: the key's next row passes.
    fn on_timer(
        &mut self,
        _time: i64,
        tag: &[u8],
        ctx: &mut Context,
        _out: &mut Collector,
    ) -> Result<()> {
        if tag == StateTtl::TAG && ctx.get::<i64>(Self::SEEN)?.is_some() {
            ctx.delete(Self::SEEN)?;
            ctx.count_expired(1);
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
    fn with_a_ttl_a_key_passes_again_once_its_marker_went() {
        let ttl = StateTtl {
            ttl: 1_000,
            sweep_every: 1_000,
        };
        let mut h = Harness::keyed(Deduplicate::new(Some(ttl)), Deduplicate::tables(), vec![0]);
        let row = |k: &str| Row::insert(vec![Value::from(k)]);
        assert_eq!(h.record(0, row("a"), 10).unwrap().len(), 1);
        assert!(h.record(0, row("a"), 500).unwrap().is_empty());
        h.watermark(1_999).unwrap();
        assert!(
            h.record(0, row("a"), 2_000).unwrap().is_empty(),
            "due at 2000"
        );
        h.watermark(2_000).unwrap();
        assert_eq!(h.ctx.take_expired(), 1);
        assert_eq!(h.record(0, row("a"), 2_100).unwrap().len(), 1);
    }

    #[test]
    fn only_the_first_row_of_a_key_passes() {
        let mut h = Harness::keyed(Deduplicate::default(), Deduplicate::tables(), vec![0]);
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
