//! The temporal join: a stream's rows joined with a table's row for their
//! key as the table was at some time (Flink's `TemporalRowTimeJoinOperator`
//! and lookup join). Input 0 is the stream (the probe side), input 1 the
//! table: a changelog keyed by its primary key (a source with
//! `primary_key`, through its normalize operator).
//!
//! - **Event time** (`FOR SYSTEM_TIME AS OF s.event_time`): the table
//!   keeps its versions by their event time, and a stream row waits in
//!   state until the watermark passes its time: then every version up to
//!   that time has arrived, and the row joins the latest version not after
//!   it (none, or a deletion: no match). A version is dropped once a later
//!   one is also behind the watermark. A tombstone has no event time: it
//!   deletes the key from the watermark on, so it also removes the
//!   versions that came before it with times ahead of the watermark. The result does not depend on how
//!   the two inputs interleave, so a replay joins as the first attempt
//!   did. A stream row behind the watermark when it arrives is late
//!   (the versions it needed may be gone): dropped and counted.
//! - **Lookup** (`FOR SYSTEM_TIME AS OF PROCTIME()`): a stream row joins
//!   the table's row as it is when the row arrives, and is not held.
//!
//! Either way the output is append-only (a later version does not change
//! rows already joined), and for a LEFT join a row without a version is
//! emitted padded with NULLs.

use crate::dataflow::codec::StateCodec;
use crate::dataflow::operator::{Collector, Context, Operator, Record};
use crate::dataflow::ops::join::JoinCondition;
use crate::dataflow::row::{Row, RowKind, Value};
use crate::dataflow::tables::{Table, TableSpec};
use crate::error::Result;
use crate::time::NO_TIMESTAMP;

#[derive(Clone)]
pub struct TemporalJoinSpec {
    /// LEFT join: a stream row without a version is kept, padded.
    pub outer: bool,
    /// Versions by event time (else the latest row, looked up at arrival).
    pub event_time: bool,
    /// The key columns of each side; a NULL among the stream's matches
    /// nothing.
    pub keys: [Vec<usize>; 2],
    pub widths: [usize; 2],
    pub condition: Option<JoinCondition>,
}

pub struct TemporalJoin {
    spec: TemporalJoinSpec,
}

/// A time as a map key that sorts as the time does.
fn time_key(t: i64) -> [u8; 8] {
    ((t as u64) ^ (1 << 63)).to_be_bytes()
}

fn key_time(k: &[u8]) -> Option<i64> {
    let b: [u8; 8] = k.get(..8)?.try_into().ok()?;
    Some((u64::from_be_bytes(b) ^ (1 << 63)) as i64)
}

impl TemporalJoin {
    /// Stream rows waiting for the watermark: (time, row) → how many.
    pub const WAITING: Table = Table(0);
    /// The table's versions by time (one, at time 0, for lookups); a
    /// deletion is a version of kind delete.
    pub const VERSIONS: Table = Table(1);

    pub fn new(spec: TemporalJoinSpec) -> Self {
        Self { spec }
    }

    pub fn tables() -> Vec<TableSpec> {
        vec![
            TableSpec::map::<i64>("waiting"),
            TableSpec::map::<Row>("versions"),
        ]
    }

    /// The rows `probe` (with time `ts`) gives joined with `version`.
    fn emit(&self, probe: &[Value], version: Option<&Row>, ts: i64, n: i64, out: &mut Collector) {
        let joined = version
            .filter(|v| v.kind != RowKind::Delete)
            .map(|v| {
                let mut j = probe.to_vec();
                j.extend_from_slice(&v.values);
                j
            })
            .filter(|j| self.spec.condition.as_ref().is_none_or(|c| c(j)));
        let row = match joined {
            Some(j) => j,
            None if self.spec.outer => {
                let mut j = probe.to_vec();
                j.extend(std::iter::repeat_n(Value::Null, self.spec.widths[1]));
                j
            }
            None => return,
        };
        for _ in 0..n {
            out.emit(Row::insert(row.clone()), ts);
        }
    }
}

impl Operator for TemporalJoin {
    fn on_record(
        &mut self,
        input: usize,
        r: Record,
        ctx: &mut Context,
        out: &mut Collector,
    ) -> Result<()> {
        if input == 1 {
            // A change of the table.
            let at = match (self.spec.event_time, r.timestamp) {
                (false, _) => 0,
                // A tombstone carries no event time: it deletes from the
                // watermark on.
                (true, NO_TIMESTAMP) => ctx.watermark().saturating_add(1),
                (true, t) => t,
            };
            let version = match r.row.kind {
                RowKind::Insert | RowKind::UpdateAfter => r.row.with_kind(RowKind::Insert),
                RowKind::Delete => r.row.with_kind(RowKind::Delete),
                // The update-after that follows replaces it.
                RowKind::UpdateBefore => return Ok(()),
            };
            if self.spec.event_time && r.timestamp == NO_TIMESTAMP {
                // A tombstone deletes the key from the watermark on: the
                // versions already here with later times go too, or the
                // latest of them would sort after the deletion and stay
                // the key's row for every later stream row.
                for (k, _) in ctx.map_entries::<Row>(Self::VERSIONS)? {
                    if key_time(&k).is_some_and(|t| t >= at) {
                        ctx.map_delete(Self::VERSIONS, &k)?;
                    }
                }
            }
            ctx.map_put(Self::VERSIONS, &time_key(at), &version)?;
            if self.spec.event_time {
                // Versions the watermark leaves behind go then.
                ctx.register_timer(at, b"v")?;
            }
            return Ok(());
        }
        if !r.row.kind.is_addition() {
            return Err(ctx
                .failure("a temporal join takes an append-only stream, and a row was taken back"));
        }
        let values = r.row.values;
        let null_key = self.spec.keys[0]
            .iter()
            .any(|c| values.get(*c).is_none_or(Value::is_null));
        if null_key {
            self.emit(&values, None, r.timestamp, 1, out);
            return Ok(());
        }
        if !self.spec.event_time {
            let version: Option<Row> = ctx.map_get(Self::VERSIONS, &time_key(0))?;
            self.emit(&values, version.as_ref(), r.timestamp, 1, out);
            return Ok(());
        }
        if r.timestamp == NO_TIMESTAMP || r.timestamp <= ctx.watermark() {
            // Without a time, or behind the watermark: the version it
            // needs may be gone.
            ctx.count_late();
            return Ok(());
        }
        let mut key = time_key(r.timestamp).to_vec();
        values.encode(&mut key);
        let n: i64 = ctx.map_get(Self::WAITING, &key)?.unwrap_or(0);
        ctx.map_put(Self::WAITING, &key, &(n + 1))?;
        ctx.register_timer(r.timestamp, b"p")
    }

    fn on_timer(
        &mut self,
        time: i64,
        _tag: &[u8],
        ctx: &mut Context,
        out: &mut Collector,
    ) -> Result<()> {
        let versions: Vec<(i64, Row)> = ctx
            .map_entries::<Row>(Self::VERSIONS)?
            .into_iter()
            .filter_map(|(k, v)| Some((key_time(&k)?, v)))
            .collect();
        for (k, n) in ctx.map_entries::<i64>(Self::WAITING)? {
            let Some(t) = key_time(&k) else { continue };
            if t > time {
                break; // Sorted by time: the rest wait.
            }
            let probe = Vec::<Value>::decode(&k[8..])
                .map_err(|e| ctx.failure(format!("a waiting row does not decode: {e}")))?;
            let version = versions
                .iter()
                .rev()
                .find(|(vt, _)| *vt <= t)
                .map(|(_, v)| v);
            self.emit(&probe, version, t, n, out);
            ctx.map_delete(Self::WAITING, &k)?;
        }
        // Keep the latest version behind the watermark (rows yet to come
        // may need it) and every later one.
        if let Some(last) = versions.iter().rposition(|(vt, _)| *vt <= time) {
            for (i, (vt, v)) in versions.iter().enumerate() {
                let keep = i > last || (i == last && v.kind != RowKind::Delete);
                if !keep {
                    ctx.map_delete(Self::VERSIONS, &time_key(*vt))?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataflow::operator::testing::{shown, Harness};

    fn harness(event_time: bool, outer: bool) -> Harness<TemporalJoin> {
        let spec = TemporalJoinSpec {
            outer,
            event_time,
            keys: [vec![0], vec![0]],
            widths: [2, 2],
            condition: None,
        };
        Harness::keyed(TemporalJoin::new(spec), TemporalJoin::tables(), vec![0])
    }

    fn row(kind: RowKind, k: i64, v: &str) -> Row {
        Row::new(kind, vec![Value::Int(k), Value::from(v)])
    }

    /// The rows as shown, each with its event time.
    fn values(rows: Vec<(Row, i64)>) -> Vec<(String, i64)> {
        let times: Vec<i64> = rows.iter().map(|(_, t)| *t).collect();
        shown(rows).into_iter().zip(times).collect()
    }

    #[test]
    fn a_row_joins_the_version_valid_at_its_time_whatever_arrives_first() {
        let mut h = harness(true, false);
        h.record(1, row(RowKind::Insert, 1, "v10"), 10).unwrap();
        // The stream is ahead of the table's next version.
        assert!(h
            .record(0, row(RowKind::Insert, 1, "a"), 25)
            .unwrap()
            .is_empty());
        assert!(h
            .record(0, row(RowKind::Insert, 1, "b"), 15)
            .unwrap()
            .is_empty());
        h.record(1, row(RowKind::UpdateBefore, 1, "v10"), 20)
            .unwrap();
        h.record(1, row(RowKind::UpdateAfter, 1, "v20"), 20)
            .unwrap();
        assert!(h
            .record(0, row(RowKind::Insert, 1, "c"), 5)
            .unwrap()
            .is_empty());
        assert_eq!(
            values(h.watermark(30).unwrap()),
            [
                ("+I1,b,1,v10".to_string(), 15),
                ("+I1,a,1,v20".to_string(), 25)
            ],
            "c has no version at 5; b joins v10, a v20"
        );
        assert!(h
            .record(0, row(RowKind::Insert, 1, "late"), 29)
            .unwrap()
            .is_empty());
        assert_eq!(h.ctx.take_late(), 1);
        // v10 is gone; v20 stays for rows yet to come.
        h.record(0, row(RowKind::Insert, 1, "d"), 40).unwrap();
        assert_eq!(
            values(h.watermark(40).unwrap()),
            [("+I1,d,1,v20".to_string(), 40)]
        );
    }

    #[test]
    fn a_deleted_key_matches_nothing_and_a_left_join_pads() {
        let mut h = harness(true, true);
        h.record(1, row(RowKind::Insert, 1, "v"), 10).unwrap();
        h.record(1, row(RowKind::Delete, 1, "v"), 20).unwrap();
        h.record(0, row(RowKind::Insert, 1, "a"), 15).unwrap();
        h.record(0, row(RowKind::Insert, 1, "b"), 25).unwrap();
        assert_eq!(
            values(h.watermark(30).unwrap()),
            [("+I1,a,1,v".to_string(), 15), ("+I1,b,_,_".to_string(), 25)]
        );
    }

    #[test]
    fn a_tombstone_deletes_the_versions_ahead_of_the_watermark_too() {
        for outer in [false, true] {
            let mut h = harness(true, outer);
            h.record(1, row(RowKind::Insert, 1, "v0"), 0).unwrap();
            h.record(1, row(RowKind::Insert, 1, "v100"), 100).unwrap();
            h.record(0, row(RowKind::Insert, 1, "a"), 50).unwrap();
            assert_eq!(
                values(h.watermark(60).unwrap()),
                [("+I1,a,1,v0".to_string(), 50)]
            );
            // A tombstone (no event time) at watermark 60: the version at
            // 100 arrived before it and goes with it.
            h.record(
                1,
                Row::new(RowKind::Delete, vec![Value::Int(1), Value::Null]),
                NO_TIMESTAMP,
            )
            .unwrap();
            for t in [200, 250, 300] {
                h.record(0, row(RowKind::Insert, 1, "b"), t).unwrap();
            }
            let want: Vec<(String, i64)> = if outer {
                [200, 250, 300]
                    .map(|t| ("+I1,b,_,_".to_string(), t))
                    .to_vec()
            } else {
                Vec::new()
            };
            assert_eq!(values(h.watermark(400).unwrap()), want, "outer: {outer}");
            // A version after the tombstone is the key's row again.
            h.record(1, row(RowKind::Insert, 1, "v500"), 500).unwrap();
            h.record(0, row(RowKind::Insert, 1, "c"), 600).unwrap();
            assert_eq!(
                values(h.watermark(700).unwrap()),
                [("+I1,c,1,v500".to_string(), 600)]
            );
        }
    }

    #[test]
    fn a_lookup_joins_the_table_as_it_is_now() {
        let mut h = harness(false, false);
        assert!(h
            .record(0, row(RowKind::Insert, 1, "a"), 1)
            .unwrap()
            .is_empty());
        h.record(1, row(RowKind::Insert, 1, "v1"), 2).unwrap();
        assert_eq!(
            values(h.record(0, row(RowKind::Insert, 1, "b"), 3).unwrap()).len(),
            1
        );
        h.record(1, row(RowKind::UpdateAfter, 1, "v2"), 4).unwrap();
        assert_eq!(
            values(h.record(0, row(RowKind::Insert, 1, "c"), 5).unwrap()),
            [("+I1,c,1,v2".to_string(), 5)]
        );
        h.record(1, row(RowKind::Delete, 1, "v2"), 6).unwrap();
        assert!(h
            .record(0, row(RowKind::Insert, 1, "d"), 7)
            .unwrap()
            .is_empty());
    }
}
