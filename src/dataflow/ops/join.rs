//! The two-input equi-join, keyed by the join columns of each side (Flink's
//! `StreamingJoinOperator`, with its interval and window joins as modes of
//! the same operator rather than three operators).
//!
//! Each side keeps its rows per key in a map table (`left`, `right`): the
//! row's values are the map key, and the entry counts how many times the
//! row is held, how many rows of the other side it matches (an outer side
//! emits its row padded with NULLs exactly while that is zero), its event
//! time, and when it expires. A row that arrives is matched against every
//! row the other side holds for its key, through the residual condition
//! (the ON clause's conjuncts that are not key equalities).
//!
//! - An addition (insert, update-after) emits the joined rows; on an
//!   outer side without matches, the row padded with NULLs. A row of the
//!   other side whose first match this is takes its padded row back.
//! - A retraction (update-before, delete) emits the joined rows as
//!   deletions, and gives a row of the other side its padded row again
//!   when it loses its last match.
//!
//! State is bounded in two ways, both on event time, so that a replay
//! after a crash joins exactly as the first attempt did:
//! - **Expiry by the watermark** (interval and window joins): where the
//!   condition bounds one side's time by the other side's row (`b.t
//!   BETWEEN a.t AND a.expires`, equal `window_end`s), the planner gives
//!   each side the time after which no future row of the other side can
//!   match it. A row is dropped when the watermark passes that time; a
//!   row that arrives behind the watermark is late (its partners may be
//!   gone) and is dropped and counted as late. Output stays append-only.
//! - **TTL** (`[pipeline] state_ttl`): rows further apart in event time
//!   than the TTL do not match, and a row leaves state once the watermark
//!   passes its time plus the TTL (counted in `weir_state_expired_total`).
//!   For rows that are not late the two agree, so what joins does not
//!   depend on how far the watermark had gone when a row arrived. A
//!   retraction meets by the time of the row it takes back (held in
//!   state), not its own: an aggregate or a table's normalize stamps an
//!   update-before with the time of the change that replaced the row, and
//!   a pair that joined must be taken back however much later that was.

use std::sync::Arc;

use crate::dataflow::codec::{get_varint, put_varint, StateCodec};
use crate::dataflow::operator::{Collector, Context, Operator, Record};
use crate::dataflow::row::{Row, RowKind, Value};
use crate::dataflow::tables::{Table, TableSpec};
use crate::error::Result;
use crate::time::NO_TIMESTAMP;

/// Which rows without a match are kept, padded with NULLs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinKind {
    Inner,
    Left,
    Right,
    Full,
    /// The left rows that have a match (`EXISTS`, `IN`, `INTERSECT`), as
    /// they are: each held copy once while it has at least one, taken
    /// back when it loses its last.
    Semi,
    /// The left rows that have no match (`NOT EXISTS`, `NOT IN`,
    /// `EXCEPT`), as they are: taken back when a match arrives, given
    /// again when it goes.
    Anti,
}

impl JoinKind {
    /// Whether `side`'s rows (0: left, 1: right) appear without a match.
    pub fn outer(self, side: usize) -> bool {
        matches!(
            (self, side),
            (JoinKind::Left | JoinKind::Anti, 0) | (JoinKind::Right, 1) | (JoinKind::Full, _)
        )
    }

    /// A semi- or anti-join: the output is the left rows alone.
    pub fn filters_left(self) -> bool {
        matches!(self, JoinKind::Semi | JoinKind::Anti)
    }

    /// Whether `side`'s held rows count their matches: an outer side's,
    /// and a semi-join's left rows.
    fn counts_matches(self, side: usize) -> bool {
        self.outer(side) || (self == JoinKind::Semi && side == 0)
    }

    pub fn name(self) -> &'static str {
        match self {
            JoinKind::Inner => "inner",
            JoinKind::Left => "left outer",
            JoinKind::Right => "right outer",
            JoinKind::Full => "full outer",
            JoinKind::Semi => "semi",
            JoinKind::Anti => "anti",
        }
    }
}

/// The residual condition over a joined row (left's values, then right's);
/// an error counts as no match (the planner reports it).
pub type JoinCondition = Arc<dyn Fn(&[Value]) -> bool + Send + Sync>;

/// When a side's row can no longer match anything the other side will
/// send: once the watermark reaches its `column` (a TIMESTAMP) plus
/// `offset` ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expiry {
    pub column: usize,
    pub offset: i64,
}

#[derive(Clone)]
pub struct JoinSpec {
    pub kind: JoinKind,
    /// The key columns of each side (the hash edges route by them): a row
    /// with a NULL among them matches nothing.
    pub keys: [Vec<usize>; 2],
    /// How many columns each side has (a padded row has as many NULLs).
    pub widths: [usize; 2],
    pub condition: Option<JoinCondition>,
    /// Per side, when its rows expire by the watermark. With both set the
    /// join is bounded: late rows are dropped, and inner output is
    /// append-only.
    pub expiry: [Option<Expiry>; 2],
    /// Rows expire this long (ms) after their event time.
    pub ttl: Option<i64>,
    /// Expired rows are swept from state on timers this many ms apart
    /// (per key and side), not one per row: a hot key's rows would
    /// otherwise each fire a timer that reads all the key's rows. A row
    /// stops matching at its exact expiry either way; the sweep only
    /// frees it up to this much later.
    pub sweep_every: i64,
}

/// The planner's sweep interval ([`JoinSpec::sweep_every`]).
pub const SWEEP_EVERY_MS: i64 = 1_000;

impl JoinSpec {
    pub fn bounded(&self) -> bool {
        self.expiry.iter().all(Option::is_some)
    }
}

/// One row a side holds for a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JoinEntry {
    /// How many times the row is held (an input may send a row twice).
    pub count: u64,
    /// Rows of the other side it matches, counted with their multiplicity.
    pub matches: u64,
    /// Its event time (the latest, if held more than once).
    pub time: i64,
    /// When it expires ([`i64::MAX`]: never).
    pub expires: i64,
}

impl StateCodec for JoinEntry {
    const NAME: &'static str = "join-entry";

    fn encode(&self, out: &mut Vec<u8>) {
        put_varint(self.count, out);
        put_varint(self.matches, out);
        out.extend_from_slice(&self.time.to_le_bytes());
        out.extend_from_slice(&self.expires.to_le_bytes());
    }

    fn decode(bytes: &[u8]) -> std::result::Result<Self, String> {
        let mut input = bytes;
        let count = get_varint(&mut input)?;
        let matches = get_varint(&mut input)?;
        if input.len() != 16 {
            return Err(format!(
                "a join entry ends in 16 bytes, not {}",
                input.len()
            ));
        }
        let (a, b) = input.split_at(8);
        let time = i64::from_le_bytes(a.try_into().expect("8 bytes"));
        let expires = i64::from_le_bytes(b.try_into().expect("8 bytes"));
        Ok(Self {
            count,
            matches,
            time,
            expires,
        })
    }
}

pub struct Join {
    spec: JoinSpec,
    /// Buffers reused per record.
    key: Vec<u8>,
}

impl Join {
    /// Each side's rows: map tables keyed by the row's values.
    pub const SIDES: [Table; 2] = [Table(0), Table(1)];

    pub fn new(spec: JoinSpec) -> Self {
        Self {
            spec,
            key: Vec::new(),
        }
    }

    pub fn tables() -> Vec<TableSpec> {
        vec![
            TableSpec::map::<JoinEntry>("left"),
            TableSpec::map::<JoinEntry>("right"),
        ]
    }

    /// The joined row of `this` (on `side`) and `other`.
    fn joined(side: usize, this: &[Value], other: &[Value]) -> Vec<Value> {
        let (l, r) = if side == 0 {
            (this, other)
        } else {
            (other, this)
        };
        let mut v = Vec::with_capacity(l.len() + r.len());
        v.extend_from_slice(l);
        v.extend_from_slice(r);
        v
    }

    /// `this` (on `side`) with NULLs for the other side's columns; a
    /// semi- or anti-join's left row as it is.
    fn padded(&self, side: usize, this: &[Value]) -> Vec<Value> {
        if self.spec.kind.filters_left() {
            return this.to_vec();
        }
        let nulls = vec![Value::Null; self.spec.widths[1 - side]];
        Self::joined(side, this, &nulls)
    }

    fn matches(&self, joined: &[Value]) -> bool {
        self.spec.condition.as_ref().is_none_or(|c| c(joined))
    }

    /// When a row of `side` with event time `ts` expires (`i64::MAX`: never).
    fn expiry_of(&self, side: usize, values: &[Value], ts: i64) -> i64 {
        let mut at = i64::MAX;
        if let Some(e) = self.spec.expiry[side] {
            at = match values.get(e.column).and_then(Value::as_timestamp) {
                Some(t) => t.saturating_add(e.offset),
                // A NULL bound matches nothing: the row expires at once.
                None => i64::MIN,
            };
        }
        if let (Some(ttl), true) = (self.spec.ttl, ts != NO_TIMESTAMP) {
            at = at.min(ts.saturating_add(ttl));
        }
        at
    }
}

fn emit_n(out: &mut Collector, kind: RowKind, values: &[Value], ts: i64, n: u64) {
    for _ in 0..n {
        out.emit(Row::new(kind, values.to_vec()), ts);
    }
}

impl Operator for Join {
    fn on_record(
        &mut self,
        side: usize,
        r: Record,
        ctx: &mut Context,
        out: &mut Collector,
    ) -> Result<()> {
        let other = 1 - side;
        let watermark = ctx.watermark();
        let addition = r.row.kind.is_addition();
        // What a row without a match, padded, is emitted as.
        let change = if addition {
            RowKind::Insert
        } else {
            RowKind::Delete
        };
        let ts = r.timestamp;
        if self.spec.bounded() && ts != NO_TIMESTAMP && ts <= watermark {
            // Rows it would have matched may be gone already.
            ctx.count_late();
            return Ok(());
        }
        let values = r.row.values;
        let null_key = self.spec.keys[side]
            .iter()
            .any(|c| values.get(*c).is_none_or(Value::is_null));
        if null_key {
            // NULL = NULL is not true: no row ever matches it.
            if self.spec.kind.outer(side) {
                out.emit(Row::new(change, self.padded(side, &values)), ts);
            }
            return Ok(());
        }

        // This side's own entry: a retraction meets exactly the rows its
        // addition met, by the held row's event time, not its own (an
        // aggregate or a table's normalize stamps an update-before with
        // the time of the change that replaced the row).
        self.key.clear();
        values.encode(&mut self.key);
        let held: Option<JoinEntry> = ctx.map_get(Self::SIDES[side], &self.key)?;
        let meets_at = match (&held, addition) {
            (Some(e), false) => e.time,
            _ => ts,
        };

        // The other side's rows for this key that match.
        let mut matched = 0u64;
        let kind = self.spec.kind;
        let other_counts = kind.counts_matches(other);
        // A semi-join emits a left row when it gains its first match,
        // where an outer (or anti-) join takes its padded row back.
        let (gained, lost) = if kind == JoinKind::Semi {
            (RowKind::Insert, RowKind::Delete)
        } else {
            (RowKind::Delete, RowKind::Insert)
        };
        // A bounded outer join (a window or interval join) pads a row once,
        // when it expires without a match: its output stays append-only.
        let deferred = self.spec.bounded();
        for (map_key, mut entry) in ctx.map_entries::<JoinEntry>(Self::SIDES[other])? {
            if entry.expires <= watermark {
                continue; // Expired; its timer removes it.
            }
            if let (Some(ttl), true) = (self.spec.ttl, meets_at != NO_TIMESTAMP) {
                // Rows further apart in event time than the TTL do not
                // meet, whichever came first and however far the
                // watermark has gone: a replay joins as the first attempt.
                let apart = i128::from(meets_at).abs_diff(i128::from(entry.time));
                if entry.time != NO_TIMESTAMP && apart > ttl as u128 {
                    continue;
                }
            }
            let o = Vec::<Value>::decode(&map_key)
                .map_err(|e| ctx.failure(format!("a held row does not decode: {e}")))?;
            let joined = Self::joined(side, &values, &o);
            if !self.matches(&joined) {
                continue;
            }
            matched += entry.count;
            let at = ts.max(entry.time);
            if addition {
                if other_counts {
                    if entry.matches == 0 && !deferred {
                        emit_n(out, gained, &self.padded(other, &o), at, entry.count);
                    }
                    entry.matches += 1;
                    ctx.map_put(Self::SIDES[other], &map_key, &entry)?;
                }
                if !kind.filters_left() {
                    emit_n(out, RowKind::Insert, &joined, at, entry.count);
                }
            } else {
                if !kind.filters_left() {
                    emit_n(out, RowKind::Delete, &joined, at, entry.count);
                }
                if other_counts {
                    entry.matches = entry.matches.saturating_sub(1);
                    if entry.matches == 0 && !deferred {
                        emit_n(out, lost, &self.padded(other, &o), at, entry.count);
                    }
                    ctx.map_put(Self::SIDES[other], &map_key, &entry)?;
                }
            }
        }
        if matched == 0 && kind.outer(side) && !deferred {
            out.emit(Row::new(change, self.padded(side, &values)), ts);
        }
        if matched > 0 && kind == JoinKind::Semi && side == 0 {
            out.emit(Row::new(change, values.clone()), ts);
        }

        // This side's own entry.
        if addition {
            let expires = self.expiry_of(side, &values, ts);
            if expires <= watermark {
                return Ok(()); // Nothing later can match it.
            }
            let entry = match held {
                Some(mut e) => {
                    e.count += 1;
                    e.time = e.time.max(ts);
                    e.expires = e.expires.max(expires);
                    e
                }
                None => JoinEntry {
                    count: 1,
                    matches: matched,
                    time: ts,
                    expires,
                },
            };
            ctx.map_put(Self::SIDES[side], &self.key, &entry)?;
            if expires != i64::MAX {
                let every = self.spec.sweep_every.max(1);
                let sweep = expires
                    .checked_add(every - 1)
                    .map_or(expires, |t| t.div_euclid(every) * every);
                ctx.register_timer(sweep.max(expires), &[side as u8])?;
            }
        } else if let Some(mut e) = held {
            e.count -= 1;
            if e.count == 0 {
                ctx.map_delete(Self::SIDES[side], &self.key)?;
            } else {
                ctx.map_put(Self::SIDES[side], &self.key, &e)?;
            }
        }
        Ok(())
    }

    fn on_timer(
        &mut self,
        time: i64,
        tag: &[u8],
        ctx: &mut Context,
        out: &mut Collector,
    ) -> Result<()> {
        let Some(side) = tag.first().map(|s| usize::from(*s).min(1)) else {
            return Ok(());
        };
        let mut expired = 0;
        let pads = self.spec.bounded() && self.spec.kind.outer(side);
        for (map_key, entry) in ctx.map_entries::<JoinEntry>(Self::SIDES[side])? {
            if entry.expires <= time {
                if pads && entry.matches == 0 {
                    // No row of the other side can match it any more.
                    let row = Vec::<Value>::decode(&map_key)
                        .map_err(|e| ctx.failure(format!("a held row does not decode: {e}")))?;
                    let padded = self.padded(side, &row);
                    emit_n(out, RowKind::Insert, &padded, entry.time, entry.count);
                }
                ctx.map_delete(Self::SIDES[side], &map_key)?;
                expired += entry.count;
            }
        }
        ctx.count_expired(expired);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataflow::operator::testing::{shown, Harness};

    fn spec(kind: JoinKind) -> JoinSpec {
        JoinSpec {
            kind,
            keys: [vec![0], vec![0]],
            widths: [2, 2],
            condition: None,
            expiry: [None, None],
            ttl: None,
            sweep_every: 1,
        }
    }

    fn harness(spec: JoinSpec) -> Harness<Join> {
        Harness::keyed(Join::new(spec), Join::tables(), vec![0])
    }

    fn row(kind: RowKind, k: i64, v: &str) -> Row {
        Row::new(kind, vec![Value::Int(k), Value::from(v)])
    }

    #[test]
    fn an_inner_join_emits_each_match_once_and_retracts_it() {
        let mut h = harness(spec(JoinKind::Inner));
        assert!(h
            .record(0, row(RowKind::Insert, 1, "a"), 10)
            .unwrap()
            .is_empty());
        let out = h.record(1, row(RowKind::Insert, 1, "x"), 20).unwrap();
        assert_eq!(shown(out.clone()), ["+I1,a,1,x"]);
        assert_eq!(out[0].1, 20, "a joined row has the later event time");
        assert_eq!(
            shown(h.record(0, row(RowKind::Insert, 1, "b"), 30).unwrap()),
            ["+I1,b,1,x"]
        );
        assert!(h
            .record(1, row(RowKind::Insert, 2, "y"), 5)
            .unwrap()
            .is_empty());
        assert_eq!(
            shown(h.record(1, row(RowKind::Delete, 1, "x"), 40).unwrap()),
            ["-D1,a,1,x", "-D1,b,1,x"]
        );
        assert!(h
            .record(0, row(RowKind::Insert, 1, "c"), 50)
            .unwrap()
            .is_empty());
    }

    /// A semi-join emits a left row while it has a match, each held copy
    /// once; an anti-join while it has none. Neither emits joined rows.
    #[test]
    fn semi_and_anti_joins_emit_the_left_rows_with_and_without_a_match() {
        let mut semi = harness(spec(JoinKind::Semi));
        let mut anti = harness(spec(JoinKind::Anti));
        let both = |h: &mut Harness<Join>, side, r: Row, t| shown(h.record(side, r, t).unwrap());
        // A left row without a match: the anti-join's.
        assert!(both(&mut semi, 0, row(RowKind::Insert, 1, "a"), 1).is_empty());
        assert_eq!(
            both(&mut anti, 0, row(RowKind::Insert, 1, "a"), 1),
            ["+I1,a"]
        );
        // Its first match: the semi-join's now, taken back by the anti-join.
        assert_eq!(
            both(&mut semi, 1, row(RowKind::Insert, 1, "x"), 2),
            ["+I1,a"]
        );
        assert_eq!(
            both(&mut anti, 1, row(RowKind::Insert, 1, "x"), 2),
            ["-D1,a"]
        );
        // A second match changes nothing; a left row arriving matched.
        assert!(both(&mut semi, 1, row(RowKind::Insert, 1, "y"), 3).is_empty());
        assert!(both(&mut anti, 1, row(RowKind::Insert, 1, "y"), 3).is_empty());
        assert_eq!(
            both(&mut semi, 0, row(RowKind::Insert, 1, "b"), 4),
            ["+I1,b"]
        );
        assert!(both(&mut anti, 0, row(RowKind::Insert, 1, "b"), 4).is_empty());
        // Both matches go: the left rows change sides.
        assert!(both(&mut semi, 1, row(RowKind::Delete, 1, "x"), 5).is_empty());
        assert_eq!(
            both(&mut semi, 1, row(RowKind::Delete, 1, "y"), 6),
            ["-D1,a", "-D1,b"]
        );
        assert!(both(&mut anti, 1, row(RowKind::Delete, 1, "x"), 5).is_empty());
        assert_eq!(
            both(&mut anti, 1, row(RowKind::Delete, 1, "y"), 6),
            ["+I1,a", "+I1,b"]
        );
        // A NULL key never matches: the anti-join keeps its row.
        let null = Row::new(RowKind::Insert, vec![Value::Null, Value::from("n")]);
        assert!(both(&mut semi, 0, null.clone(), 7).is_empty());
        assert_eq!(both(&mut anti, 0, null, 7), ["+I_,n"]);
    }

    #[test]
    fn a_row_held_twice_matches_twice() {
        let mut h = harness(spec(JoinKind::Inner));
        h.record(0, row(RowKind::Insert, 1, "a"), 1).unwrap();
        h.record(0, row(RowKind::Insert, 1, "a"), 2).unwrap();
        assert_eq!(
            shown(h.record(1, row(RowKind::Insert, 1, "x"), 3).unwrap()),
            ["+I1,a,1,x", "+I1,a,1,x"]
        );
        h.record(0, row(RowKind::Delete, 1, "a"), 4).unwrap();
        assert_eq!(
            shown(h.record(1, row(RowKind::Insert, 1, "y"), 5).unwrap()),
            ["+I1,a,1,y"]
        );
    }

    #[test]
    fn a_left_join_pads_until_the_first_match_and_again_after_the_last() {
        let mut h = harness(spec(JoinKind::Left));
        assert_eq!(
            shown(h.record(0, row(RowKind::Insert, 1, "a"), 1).unwrap()),
            ["+I1,a,_,_"]
        );
        assert_eq!(
            shown(h.record(1, row(RowKind::Insert, 1, "x"), 2).unwrap()),
            ["-D1,a,_,_", "+I1,a,1,x"]
        );
        assert_eq!(
            shown(h.record(1, row(RowKind::Insert, 1, "y"), 3).unwrap()),
            ["+I1,a,1,y"]
        );
        assert_eq!(
            shown(h.record(1, row(RowKind::Delete, 1, "x"), 4).unwrap()),
            ["-D1,a,1,x"]
        );
        assert_eq!(
            shown(h.record(1, row(RowKind::Delete, 1, "y"), 5).unwrap()),
            ["-D1,a,1,y", "+I1,a,_,_"]
        );
        assert_eq!(
            shown(h.record(0, row(RowKind::Delete, 1, "a"), 6).unwrap()),
            ["-D1,a,_,_"]
        );
        // A right row alone is not kept by a left join.
        assert!(h
            .record(1, row(RowKind::Insert, 2, "z"), 7)
            .unwrap()
            .is_empty());
    }

    #[test]
    fn a_full_join_pads_both_sides_and_null_keys_never_match() {
        let mut h = harness(spec(JoinKind::Full));
        assert_eq!(
            shown(h.record(1, row(RowKind::Insert, 1, "x"), 1).unwrap()),
            ["+I_,_,1,x"]
        );
        assert_eq!(
            shown(h.record(0, row(RowKind::Insert, 1, "a"), 2).unwrap()),
            ["-D_,_,1,x", "+I1,a,1,x"]
        );
        let null = Row::new(RowKind::Insert, vec![Value::Null, Value::from("n")]);
        assert_eq!(shown(h.record(0, null.clone(), 3).unwrap()), ["+I_,n,_,_"]);
        assert_eq!(shown(h.record(1, null, 3).unwrap()), ["+I_,_,_,n"]);
    }

    #[test]
    fn the_residual_condition_decides_a_match_and_the_padding() {
        let mut s = spec(JoinKind::Left);
        // left.v < right.v
        s.condition = Some(Arc::new(|v: &[Value]| v[1].as_str() < v[3].as_str()));
        let mut h = harness(s);
        h.record(0, row(RowKind::Insert, 1, "m"), 1).unwrap();
        assert!(h
            .record(1, row(RowKind::Insert, 1, "a"), 2)
            .unwrap()
            .is_empty());
        assert_eq!(
            shown(h.record(1, row(RowKind::Insert, 1, "z"), 3).unwrap()),
            ["-D1,m,_,_", "+I1,m,1,z"]
        );
    }

    #[test]
    fn a_bounded_outer_join_pads_a_row_once_when_it_expires_unmatched() {
        let mut s = spec(JoinKind::Left);
        s.expiry = [
            Some(Expiry {
                column: 1,
                offset: 10,
            }),
            Some(Expiry {
                column: 1,
                offset: 10,
            }),
        ];
        let mut h = harness(s);
        let at = |k: i64, t: i64| Row::insert(vec![Value::Int(k), Value::Timestamp(t)]);
        assert!(h.record(0, at(1, 100), 100).unwrap().is_empty(), "not yet");
        assert!(h.record(0, at(2, 101), 101).unwrap().is_empty());
        assert_eq!(
            shown(h.record(1, at(2, 103), 103).unwrap()),
            ["+I2,Timestamp(101),2,Timestamp(103)"],
            "a match: no padding to take back"
        );
        assert_eq!(
            shown(h.watermark(120).unwrap()),
            ["+I1,Timestamp(100),_,_"],
            "the unmatched row, once, when no match can come"
        );
        assert!(h.watermark(200).unwrap().is_empty());
    }

    #[test]
    fn a_bounded_join_frees_rows_at_the_watermark_and_drops_late_ones() {
        let mut s = spec(JoinKind::Inner);
        // Columns 1 are timestamps here: a row expires 10 ms after it.
        s.expiry = [
            Some(Expiry {
                column: 1,
                offset: 10,
            }),
            Some(Expiry {
                column: 1,
                offset: 10,
            }),
        ];
        let mut h = harness(s);
        let at = |t: i64| Row::insert(vec![Value::Int(1), Value::Timestamp(t)]);
        h.record(0, at(100), 100).unwrap();
        assert_eq!(h.record(1, at(105), 105).unwrap().len(), 1);
        h.watermark(110).unwrap();
        assert_eq!(h.ctx.take_expired(), 1, "the left row's time passed");
        assert_eq!(h.record(1, at(111), 111).unwrap().len(), 0);
        h.record(0, at(109), 109).unwrap();
        assert_eq!(h.ctx.take_late(), 1, "behind the watermark: late");
        assert_eq!(
            h.record(0, at(112), 112).unwrap().len(),
            2,
            "matches the right rows still held (105, 111)"
        );
    }

    #[test]
    fn ttl_drops_rows_after_their_time_and_counts_them() {
        let mut s = spec(JoinKind::Inner);
        s.ttl = Some(1_000);
        let mut h = harness(s);
        h.record(0, row(RowKind::Insert, 1, "a"), 0).unwrap();
        let far = h.record(1, row(RowKind::Insert, 1, "far"), 1001).unwrap();
        assert!(far.is_empty(), "more than the TTL apart, though a is held");
        h.watermark(999).unwrap();
        let x = h.record(1, row(RowKind::Insert, 1, "x"), 1000).unwrap();
        assert_eq!(x.len(), 1, "within the TTL");
        h.watermark(1000).unwrap();
        assert_eq!(h.ctx.take_expired(), 1, "a went at 0 + 1000");
        let b = h.record(0, row(RowKind::Insert, 1, "b"), 1600).unwrap();
        assert_eq!(b.len(), 2, "b meets far and x");
    }

    #[test]
    fn a_retraction_stamped_later_than_the_ttl_still_takes_back_what_its_row_joined() {
        let mut s = spec(JoinKind::Inner);
        s.ttl = Some(3_000);
        let mut h = harness(s);
        h.record(1, row(RowKind::Insert, 1, "p10"), 0).unwrap();
        let joined = h.record(0, row(RowKind::Insert, 1, "c"), 1_000).unwrap();
        assert_eq!(shown(joined), ["+I1,c,1,p10"]);
        // The table's row is replaced 4 s after the stream row joined it;
        // the update-before carries the new change's time.
        let before = h
            .record(1, row(RowKind::UpdateBefore, 1, "p10"), 5_000)
            .unwrap();
        assert_eq!(
            shown(before),
            ["-D1,c,1,p10"],
            "the joined row is taken back"
        );
        let after = h
            .record(1, row(RowKind::UpdateAfter, 1, "p11"), 5_000)
            .unwrap();
        assert!(after.is_empty(), "the new version is 4 s from c");
    }

    #[test]
    fn expired_rows_stop_matching_at_once_and_are_swept_together() {
        let mut s = spec(JoinKind::Inner);
        s.ttl = Some(100);
        s.sweep_every = 1_000;
        let mut h = harness(s);
        for t in [0, 10, 20] {
            h.record(0, row(RowKind::Insert, 1, &format!("a{t}")), t)
                .unwrap();
        }
        h.watermark(115).unwrap();
        assert_eq!(h.ctx.take_expired(), 0, "the sweep is at 1000");
        let late_enough = h.record(1, row(RowKind::Insert, 1, "x"), 116).unwrap();
        assert_eq!(
            shown(late_enough),
            ["+I1,a20,1,x"],
            "a0 and a10 are past the TTL and expired, though still held"
        );
        h.watermark(1_000).unwrap();
        assert_eq!(h.ctx.take_expired(), 4, "one sweep takes all four");
    }

    #[test]
    fn an_entry_round_trips() {
        let e = JoinEntry {
            count: 3,
            matches: 300,
            time: -5,
            expires: i64::MAX,
        };
        let mut b = Vec::new();
        e.encode(&mut b);
        assert_eq!(JoinEntry::decode(&b).unwrap(), e);
        assert!(JoinEntry::decode(&b[..b.len() - 1]).is_err());
    }
}
