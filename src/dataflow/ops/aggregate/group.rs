//! The running group aggregate: an updating result per key, its hot map
//! of accumulators in front of RocksDB, and its emit policy.

use super::accumulators::Accumulators;
use super::function::Agg;
use crate::dataflow::operator::{Collector, Context, Operator, Queried, Record, RecordKey};
use crate::dataflow::ops::state_ttl::StateTtl;
use crate::dataflow::row::{Row, RowKind, Value};
use crate::dataflow::tables::{Table, TableSpec};
use crate::error::Result;

/// When a group aggregate emits a key's result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AggregateEmit {
    /// After every input row that changes the key's result (Flink SQL's
    /// group aggregate).
    #[default]
    OnChange,
    /// After every input row, changed or not: one output per input, as
    /// weir's TOML pipelines have always written (`emit = "every-update"`).
    EveryRow,
    /// Once per checkpoint for each key changed since the last one, and
    /// early, in the same epoch, once `max_changed` keys have changed, so
    /// that what is held stays bounded (`emit = "on-checkpoint"`; Kafka
    /// Streams' record cache does the same per commit).
    OnCheckpoint { max_changed: usize },
}

/// A running aggregate per key: an updating result.
pub struct GroupAggregate {
    pub aggs: Vec<Agg>,
    /// The key columns of its input (its output starts with them).
    pub key: Vec<usize>,
    pub emit: AggregateEmit,
    /// The current key's accumulators, decoded in place, and its results
    /// before and after a row: buffers reused from record to record.
    acc: Accumulators,
    was: Vec<Value>,
    now: Vec<Value>,
    /// On checkpoint: the keys changed since the last emission (key group,
    /// big endian, then the key's encoding), each with the result it had
    /// before its first change (None: the key is new).
    changed: rustc_hash::FxHashMap<Vec<u8>, Option<Vec<Value>>>,
    scratch: Vec<u8>,
    /// The accumulators of the keys updated lately, held decoded, so that
    /// a hot key's update decodes and encodes nothing (the state store
    /// holds values as bytes of their codec). By the key's encoding, looked
    /// up as a slice (a hit builds no key); the key group, which follows
    /// from the key, is kept beside the accumulators. None: deleted. What
    /// is `dirty` is staged into every snapshot (`before_snapshot`, which
    /// every snapshot follows in both modes; the store takes it right
    /// after the snapshot's copy) and written into the store before the
    /// map is cleared at the store's cache size
    /// (`state.cache_entries`: a smaller map thrashes on a working set the
    /// cache holds, and costs more than it saves); a live query reads the
    /// map first. A restore starts with a new operator, so the map never
    /// outlives its store's state.
    hot: HotMap,
    /// Keys whose last write is older than this go ([`StateTtl`]).
    ttl: Option<StateTtl>,
}

/// The hot map: by the key's encoding (inline up to 24 bytes, a word's).
/// hashbrown's, for its raw entries (a lookup by a borrowed key).
type HotMap = hashbrown::HashMap<RecordKey, Hot, rustc_hash::FxBuildHasher>;

#[derive(Debug)]
struct Hot {
    key_group: u32,
    acc: Option<Accumulators>,
    /// Changed since it was last written into the store.
    dirty: bool,
}

impl GroupAggregate {
    pub const ACC: Table = Table(0);

    pub fn new(aggs: Vec<Agg>, key: Vec<usize>) -> Self {
        Self::with_emit(aggs, key, AggregateEmit::default())
    }

    pub fn with_emit(aggs: Vec<Agg>, key: Vec<usize>, emit: AggregateEmit) -> Self {
        Self {
            acc: Accumulators::new(&aggs),
            aggs,
            key,
            emit,
            was: Vec::new(),
            now: Vec::new(),
            changed: rustc_hash::FxHashMap::default(),
            scratch: Vec::new(),
            hot: HotMap::default(),
            ttl: None,
        }
    }

    /// Keys whose state was last written more than `ttl` before the
    /// watermark go (its table is [`StateTtl::table`], after `acc`).
    pub fn with_state_ttl(mut self, ttl: Option<StateTtl>) -> Self {
        self.ttl = ttl;
        self
    }

    /// Each key's last write time, with a TTL.
    pub const TTL: Table = Table(1);

    /// Writes every dirty accumulator of the hot map into the store (and
    /// with `clear`, empties the map).
    fn flush_hot(&mut self, ctx: &mut Context, clear: bool) -> Result<()> {
        self.write_dirty_hot(ctx, |ctx, acc| match acc {
            Some(acc) => ctx.put(Self::ACC, acc),
            None => ctx.delete(Self::ACC),
        })?;
        if clear {
            self.hot.clear();
        }
        Ok(())
    }

    /// At a barrier: every dirty accumulator of the hot map into the coming
    /// snapshot directly (`Context::put_for_snapshot`), the map kept. The
    /// pause then encodes each once instead of writing it into the store's
    /// cache and copying it out again; the store takes them right after
    /// the snapshot's copy.
    fn stage_hot(&mut self, ctx: &mut Context) -> Result<()> {
        self.write_dirty_hot(ctx, |ctx, acc| ctx.put_for_snapshot(Self::ACC, acc))
    }

    /// `write` of each dirty accumulator (None: deleted), which is then
    /// clean. The context's current key is set to each in turn: the caller
    /// sets its own again if it needs it.
    fn write_dirty_hot(
        &mut self,
        ctx: &mut Context,
        mut write: impl FnMut(&mut Context, Option<&Accumulators>) -> Result<()>,
    ) -> Result<()> {
        for (k, h) in self.hot.iter_mut().filter(|(_, h)| h.dirty) {
            ctx.set_key(h.key_group, k);
            write(ctx, h.acc.as_ref())?;
            h.dirty = false;
        }
        Ok(())
    }

    /// On checkpoint: notes that the current key changed, with its result
    /// before this row if this is its first change since the last emission.
    fn note_changed(
        &mut self,
        ctx: &mut Context,
        existed: bool,
        out: &mut Collector,
    ) -> Result<()> {
        let AggregateEmit::OnCheckpoint { max_changed } = self.emit else {
            return Ok(());
        };
        self.scratch.clear();
        self.scratch
            .extend_from_slice(&(ctx.key_group() as u16).to_be_bytes());
        self.scratch.extend_from_slice(ctx.key());
        if !self.changed.contains_key(self.scratch.as_slice()) {
            let was = existed.then(|| self.was.clone());
            self.changed.insert(self.scratch.clone(), was);
            if self.changed.len() >= max_changed.max(1) {
                // Emitted now, in this epoch: what the barrier would have
                // emitted, only earlier.
                self.emit_changed(ctx, out)?;
            }
        }
        Ok(())
    }

    /// Emits the current result of every key changed since the last
    /// emission, in key order, against the result it had before.
    fn emit_changed(&mut self, ctx: &mut Context, out: &mut Collector) -> Result<()> {
        // The current results are read from the store.
        self.flush_hot(ctx, false)?;
        let mut changed: Vec<(Vec<u8>, Option<Vec<Value>>)> = self.changed.drain().collect();
        changed.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let ts = crate::time::NO_TIMESTAMP;
        for (k, was) in changed {
            let kg = u32::from(u16::from_be_bytes([k[0], k[1]]));
            ctx.set_key(kg, &k[2..]);
            let key = ctx.key_values()?;
            let row = |results: &[Value], kind| {
                let mut values = key.clone();
                values.extend_from_slice(results);
                Row::new(kind, values)
            };
            let exists = ctx.get_into(Self::ACC, &mut self.acc)?;
            self.now.clear();
            if exists {
                self.acc.results(&self.aggs, &mut self.now);
            }
            match (was, exists) {
                (None, true) => out.emit(row(&self.now, RowKind::Insert), ts),
                (Some(was), true) => {
                    if ctx.update_before_needed() {
                        out.emit(row(&was, RowKind::UpdateBefore), ts);
                    }
                    out.emit(row(&self.now, RowKind::UpdateAfter), ts);
                }
                (Some(was), false) => out.emit(row(&was, RowKind::Delete), ts),
                (None, false) => {}
            }
        }
        Ok(())
    }

    pub fn tables() -> Vec<TableSpec> {
        vec![TableSpec::value::<Accumulators>("acc")]
    }

    /// The key columns of `input` followed by `results`.
    fn row(&self, input: &Row, results: &[Value], kind: RowKind) -> Row {
        let mut values = Vec::with_capacity(self.key.len() + results.len());
        values.extend(self.key.iter().map(|c| input.get(*c).clone()));
        values.extend_from_slice(results);
        Row::new(kind, values)
    }

    /// As [`Self::row`] with the current results, moving the key columns
    /// out of `input` (whose buffer it reuses when the key leads the row).
    fn row_from(&self, input: Row, kind: RowKind) -> Row {
        let mut values = key_columns(&self.key, input, self.now.len());
        values.extend_from_slice(&self.now);
        Row::new(kind, values)
    }
}

/// The key columns of `input`, moved out of it: its own buffer, truncated,
/// when the key leads the row (a word count's), else a new one with room
/// for `results` more values.
fn key_columns(key: &[usize], input: Row, results: usize) -> Vec<Value> {
    let mut values = input.values;
    if key.iter().enumerate().all(|(i, c)| i == *c) {
        values.truncate(key.len());
        values
    } else {
        let mut taken = Vec::with_capacity(key.len() + results);
        taken.extend(
            key.iter()
                .map(|c| std::mem::replace(&mut values[*c], Value::Null)),
        );
        taken
    }
}

/// The output row of `input`'s key with `acc`'s results, written into it
/// directly (no copy of the results through a buffer).
fn output_row(key: &[usize], input: Row, acc: &Accumulators, aggs: &[Agg], kind: RowKind) -> Row {
    let mut values = key_columns(key, input, aggs.len());
    acc.results(aggs, &mut values);
    Row::new(kind, values)
}

impl Operator for GroupAggregate {
    fn on_record(
        &mut self,
        _: usize,
        r: Record,
        ctx: &mut Context,
        out: &mut Collector,
    ) -> Result<()> {
        if self.hot.len() >= ctx.cache_limit() {
            let (kg, key) = (ctx.key_group(), ctx.key().to_vec());
            self.flush_hot(ctx, true)?;
            ctx.set_key(kg, &key);
        }
        if let Some(ttl) = self.ttl {
            ttl.touch(ctx, Self::TTL, r.timestamp)?;
        }
        let retract = !r.row.kind.is_addition();
        // The results before this row are needed to retract them, to see
        // whether they changed, to remember them for the checkpoint, or
        // for a delete (only a retraction can delete); not for a row that
        // is emitted whatever it changed into a sink without retractions.
        let need_was =
            retract || self.emit != AggregateEmit::EveryRow || ctx.update_before_needed();
        let Self {
            aggs,
            was,
            now,
            hot,
            ..
        } = self;
        // A raw entry borrows the key only to find it: a miss reads the
        // store through `ctx` and builds the map's key; a hit builds none.
        let hot = match hot.raw_entry_mut().from_key(ctx.key()) {
            hashbrown::hash_map::RawEntryMut::Occupied(o) => o.into_mut(),
            hashbrown::hash_map::RawEntryMut::Vacant(v) => {
                let mut acc = Accumulators::new(aggs);
                let existed = ctx.get_into(Self::ACC, &mut acc)?;
                let hot = Hot {
                    key_group: ctx.key_group(),
                    acc: existed.then_some(acc),
                    dirty: false,
                };
                v.insert(RecordKey::from_slice(ctx.key()), hot).1
            }
        };
        was.clear();
        let existed = match &hot.acc {
            Some(acc) => {
                if need_was {
                    acc.results(aggs, was);
                }
                true
            }
            // Flink does the same: a retraction of what is not there
            // (state expired, or never added) changes nothing.
            None if retract => return Ok(()),
            None => false,
        };
        let acc = hot.acc.get_or_insert_with(|| Accumulators::new(aggs));
        acc.apply(aggs, &r.row, retract)
            .map_err(|e| ctx.failure(e))?;
        hot.dirty = true;
        let ts = r.timestamp;
        if acc.rows() <= 0 {
            hot.acc = None;
            if let Some(ttl) = self.ttl {
                ttl.forget(ctx, Self::TTL)?;
            }
            if let AggregateEmit::OnCheckpoint { .. } = self.emit {
                return self.note_changed(ctx, existed, out);
            }
            if existed {
                out.emit(self.row(&r.row, &self.was, RowKind::Delete), ts);
            }
            return Ok(());
        }
        match self.emit {
            AggregateEmit::OnCheckpoint { .. } => self.note_changed(ctx, existed, out),
            // The common path: the results go straight into the output row
            // (the input's buffer), with nothing to compare them against.
            AggregateEmit::EveryRow if !need_was => {
                let kind = if existed {
                    RowKind::UpdateAfter
                } else {
                    RowKind::Insert
                };
                out.emit(output_row(&self.key, r.row, acc, aggs, kind), ts);
                Ok(())
            }
            _ => {
                now.clear();
                acc.results(aggs, now);
                if !existed {
                    out.emit(self.row_from(r.row, RowKind::Insert), ts);
                    return Ok(());
                }
                if self.emit == AggregateEmit::OnChange && self.was == self.now {
                    return Ok(());
                }
                // Consumers that replace a key's row (upsert sinks) have no
                // use for the old one.
                if ctx.update_before_needed() {
                    out.emit(self.row(&r.row, &self.was, RowKind::UpdateBefore), ts);
                }
                out.emit(self.row_from(r.row, RowKind::UpdateAfter), ts);
                Ok(())
            }
        }
    }

    /// A key that went quiet for the TTL: its accumulators go, in the hot
    /// map and in the store. On checkpoint, what waits to be emitted is
    /// emitted first (early, in this epoch), so that the key's last change
    /// is not lost with it.
    fn on_timer(
        &mut self,
        time: i64,
        tag: &[u8],
        ctx: &mut Context,
        out: &mut Collector,
    ) -> Result<()> {
        if !StateTtl::fired(self.ttl, ctx, Self::TTL, tag, time)? {
            return Ok(());
        }
        if !self.changed.is_empty() {
            let (kg, key) = (ctx.key_group(), ctx.key().to_vec());
            self.emit_changed(ctx, out)?;
            ctx.set_key(kg, &key);
        }
        self.hot.remove(ctx.key());
        ctx.delete(Self::ACC)
    }

    fn before_snapshot(&mut self, ctx: &mut Context, out: &mut Collector) -> Result<()> {
        if self.changed.is_empty() {
            // Every snapshot follows this: it sees what the map holds,
            // staged straight into the snapshot (the map answers for those
            // keys until the store has them).
            return self.stage_hot(ctx);
        }
        self.emit_changed(ctx, out)
    }

    /// The key's current results by aggregate name (`{"count": 3}`).
    fn query(&mut self, ctx: &mut Context) -> Result<Queried> {
        self.now.clear();
        match self.hot.get(ctx.key()) {
            Some(Hot { acc: None, .. }) => return Ok(Queried::Value(None)),
            Some(Hot { acc: Some(acc), .. }) => acc.results(&self.aggs, &mut self.now),
            None => {
                if !ctx.get_into(Self::ACC, &mut self.acc)? {
                    return Ok(Queried::Value(None));
                }
                self.acc.results(&self.aggs, &mut self.now);
            }
        }
        Ok(Queried::Value(Some(serde_json::Value::Object(
            self.aggs
                .iter()
                .zip(&self.now)
                .map(|(a, v)| (a.name.clone(), crate::dataflow::json::value_json(v)))
                .collect(),
        ))))
    }
}

#[cfg(test)]
mod tests {
    use super::super::function::AggFunction;
    use super::*;
    use crate::dataflow::operator::testing::Harness;

    fn row(kind: RowKind, k: &str, v: i64) -> Row {
        Row::new(kind, vec![Value::from(k), Value::Int(v)])
    }

    #[test]
    fn a_key_quiet_for_the_ttl_goes_and_its_next_row_counts_from_nothing() {
        let ttl = StateTtl {
            ttl: 1_000,
            sweep_every: 100,
        };
        let mut tables = GroupAggregate::tables();
        tables.push(StateTtl::table());
        let op = GroupAggregate::new(vec![Agg::count("n")], vec![0]).with_state_ttl(Some(ttl));
        let mut h = Harness::keyed(op, tables, vec![0]);
        h.record(0, row(RowKind::Insert, "a", 1), 0).unwrap();
        h.record(0, row(RowKind::Insert, "b", 1), 500).unwrap();
        h.record(0, row(RowKind::Insert, "a", 1), 900).unwrap();
        // c's only row is taken back: its state went by itself.
        h.record(0, row(RowKind::Insert, "c", 1), 100).unwrap();
        h.record(0, row(RowKind::Delete, "c", 1), 200).unwrap();
        // a was last written at 900: due at 2000; b at 500: due at 1600.
        assert!(h.watermark(1_700).unwrap().is_empty(), "nothing is emitted");
        assert_eq!(h.ctx.take_expired(), 1, "b went (c is not counted)");
        let out = h.record(0, row(RowKind::Insert, "b", 1), 1_800).unwrap();
        assert_eq!(
            out,
            vec![(Row::insert(vec![Value::from("b"), Value::Int(1)]), 1_800)]
        );
        let out = h.record(0, row(RowKind::Insert, "a", 1), 1_800).unwrap();
        assert_eq!(
            out.last().unwrap().0,
            Row::new(RowKind::UpdateAfter, vec![Value::from("a"), Value::Int(3)]),
            "a is still held"
        );
        h.watermark(2_900).unwrap();
        assert_eq!(
            h.ctx.take_expired(),
            2,
            "a and b went; the hot map with them"
        );
        let out = h.record(0, row(RowKind::Insert, "a", 1), 3_000).unwrap();
        assert_eq!(
            out,
            vec![(Row::insert(vec![Value::from("a"), Value::Int(1)]), 3_000)]
        );
    }

    #[test]
    fn group_aggregate_emits_updates_and_retracts() {
        let aggs = vec![
            Agg::count("n"),
            Agg {
                function: AggFunction::Sum,
                column: Some(1),
                name: "s".into(),
                distinct: false,
                user: None,
            },
        ];
        let mut h = Harness::keyed(
            GroupAggregate::new(aggs, vec![0]),
            GroupAggregate::tables(),
            vec![0],
        );
        let got = h.record(0, row(RowKind::Insert, "a", 5), 1).unwrap();
        assert_eq!(
            got,
            vec![(Row::insert(vec!["a".into(), 1.into(), 5.into()]), 1)]
        );
        let got = h.record(0, row(RowKind::Insert, "a", 2), 2).unwrap();
        assert_eq!(
            got.into_iter().map(|(r, _)| r).collect::<Vec<_>>(),
            vec![
                Row::new(RowKind::UpdateBefore, vec!["a".into(), 1.into(), 5.into()]),
                Row::new(RowKind::UpdateAfter, vec!["a".into(), 2.into(), 7.into()]),
            ]
        );
        // Retract both: an update, then the delete of the key's last row.
        h.record(0, row(RowKind::UpdateBefore, "a", 5), 3).unwrap();
        let got = h.record(0, row(RowKind::Delete, "a", 2), 4).unwrap();
        assert_eq!(
            got,
            vec![(
                Row::new(RowKind::Delete, vec!["a".into(), 1.into(), 2.into()]),
                4
            )]
        );
        // A retraction of a key that is not there changes nothing.
        assert!(h
            .record(0, row(RowKind::Delete, "b", 1), 5)
            .unwrap()
            .is_empty());
    }

    /// The store's value of `key` (a one-string-column key).
    fn stored(h: &mut Harness<GroupAggregate>, key: &str) -> Option<i64> {
        let mut k = Vec::new();
        crate::dataflow::codec::encode_key(&Row::insert(vec![key.into()]), &[0], &mut k);
        h.ctx
            .set_key(crate::state::key_groups::key_group(&k, 128), &k);
        h.ctx
            .get::<Accumulators>(GroupAggregate::ACC)
            .unwrap()
            .map(|a| a.rows())
    }

    #[test]
    fn hot_accumulators_reach_the_store_before_each_snapshot_and_past_the_limit() {
        let mut h = Harness::keyed(
            GroupAggregate::new(vec![Agg::count("n")], vec![0]),
            GroupAggregate::tables(),
            vec![0],
        );
        for _ in 0..3 {
            h.record(0, row(RowKind::Insert, "a", 1), 1).unwrap();
        }
        h.record(0, row(RowKind::Insert, "b", 1), 1).unwrap();
        // Held decoded: the store has not seen an update yet, a live
        // query has.
        assert_eq!(stored(&mut h, "a"), None);
        h.record(0, row(RowKind::Insert, "a", 1), 1).unwrap();
        assert_eq!(
            h.op.query(&mut h.ctx).unwrap(),
            Queried::Value(Some(serde_json::json!({"n": 4})))
        );
        assert!(h.before_snapshot().unwrap().is_empty());
        assert_eq!(stored(&mut h, "a"), Some(4));
        assert_eq!(stored(&mut h, "b"), Some(1));
        // A key retracted to nothing is deleted from the store too.
        h.record(0, row(RowKind::Delete, "b", 1), 2).unwrap();
        h.before_snapshot().unwrap();
        assert_eq!(stored(&mut h, "b"), None);
        // Past the store's cache size, the map goes to the store and starts
        // over; the counts go on from the store.
        for i in 0..h.ctx.cache_limit() + 10 {
            h.record(0, row(RowKind::Insert, &format!("k{i}"), 1), 3)
                .unwrap();
        }
        assert_eq!(stored(&mut h, "k0"), Some(1));
        assert_eq!(stored(&mut h, "a"), Some(4));
        let got = h.record(0, row(RowKind::Insert, "k0", 1), 4).unwrap();
        assert_eq!(
            got.last().map(|(r, _)| r.values.clone()),
            Some(vec!["k0".into(), 2.into()])
        );
        // A new operator over the same store (a restore) sees what was
        // written before the snapshot.
        h.before_snapshot().unwrap();
        h.op = GroupAggregate::new(vec![Agg::count("n")], vec![0]);
        let got = h.record(0, row(RowKind::Insert, "a", 1), 5).unwrap();
        assert_eq!(
            got.last().map(|(r, _)| r.values.clone()),
            Some(vec!["a".into(), 5.into()])
        );
    }

    #[test]
    fn on_checkpoint_emits_each_changed_key_once_against_its_last_emitted_result() {
        let mut h = Harness::keyed(
            GroupAggregate::with_emit(
                vec![Agg::count("n")],
                vec![0],
                AggregateEmit::OnCheckpoint { max_changed: 3 },
            ),
            GroupAggregate::tables(),
            vec![0],
        );
        let rows = |got: Vec<(Row, i64)>| got.into_iter().map(|(r, _)| r).collect::<Vec<_>>();
        for k in ["a", "b", "a"] {
            assert!(h
                .record(0, row(RowKind::Insert, k, 1), 1)
                .unwrap()
                .is_empty());
        }
        let mut got = rows(h.before_snapshot().unwrap());
        got.sort_by(|x, y| x.values[0].as_str().cmp(&y.values[0].as_str()));
        assert_eq!(
            got,
            vec![
                Row::insert(vec!["a".into(), 2.into()]),
                Row::insert(vec!["b".into(), 1.into()]),
            ]
        );
        assert!(
            h.before_snapshot().unwrap().is_empty(),
            "nothing changed since"
        );
        // Next epoch: `a` changes, `b` is retracted away.
        h.record(0, row(RowKind::Insert, "a", 1), 2).unwrap();
        h.record(0, row(RowKind::Delete, "b", 1), 2).unwrap();
        let mut got = rows(h.before_snapshot().unwrap());
        got.sort_by(|x, y| x.values[0].as_str().cmp(&y.values[0].as_str()));
        assert_eq!(
            got,
            vec![
                Row::new(RowKind::UpdateBefore, vec!["a".into(), 2.into()]),
                Row::new(RowKind::UpdateAfter, vec!["a".into(), 3.into()]),
                Row::new(RowKind::Delete, vec!["b".into(), 1.into()]),
            ]
        );
        // The third changed key emits everything held, in the same epoch.
        for k in ["x", "y"] {
            assert!(h
                .record(0, row(RowKind::Insert, k, 1), 3)
                .unwrap()
                .is_empty());
        }
        assert_eq!(
            rows(h.record(0, row(RowKind::Insert, "z", 1), 3).unwrap()).len(),
            3
        );
        assert!(h.before_snapshot().unwrap().is_empty());
    }

    #[test]
    fn every_row_emits_unchanged_results_too() {
        let aggs = vec![Agg {
            function: AggFunction::Max,
            column: Some(1),
            name: "m".into(),
            distinct: false,
            user: None,
        }];
        let mut on_change = Harness::keyed(
            GroupAggregate::new(aggs.clone(), vec![0]),
            GroupAggregate::tables(),
            vec![0],
        );
        let mut every = Harness::keyed(
            GroupAggregate::with_emit(aggs, vec![0], AggregateEmit::EveryRow),
            GroupAggregate::tables(),
            vec![0],
        );
        for v in [5, 3] {
            on_change
                .record(0, row(RowKind::Insert, "a", v), 1)
                .unwrap();
            every.record(0, row(RowKind::Insert, "a", v), 1).unwrap();
        }
        assert!(on_change
            .record(0, row(RowKind::Insert, "a", 1), 1)
            .unwrap()
            .is_empty());
        let got = every.record(0, row(RowKind::Insert, "a", 1), 1).unwrap();
        assert_eq!(
            got.last().unwrap().0.values,
            vec![Value::from("a"), 5.into()]
        );
    }

    #[test]
    fn without_a_consumer_of_update_befores_only_the_new_row_goes_out() {
        let mut h = Harness::keyed(
            GroupAggregate::new(vec![Agg::count("n")], vec![0]),
            GroupAggregate::tables(),
            vec![0],
        );
        h.ctx.set_update_before(false);
        h.record(0, row(RowKind::Insert, "a", 1), 1).unwrap();
        let got = h.record(0, row(RowKind::Insert, "a", 1), 2).unwrap();
        assert_eq!(
            got,
            vec![(
                Row::new(RowKind::UpdateAfter, vec!["a".into(), 2.into()]),
                2
            )]
        );
    }

    #[test]
    fn min_over_retractions_is_refused_by_name() {
        let aggs = vec![Agg {
            function: AggFunction::Min,
            column: Some(1),
            name: "lo".into(),
            distinct: false,
            user: None,
        }];
        let mut h = Harness::keyed(
            GroupAggregate::new(aggs, vec![0]),
            GroupAggregate::tables(),
            vec![0],
        );
        h.record(0, row(RowKind::Insert, "a", 5), 1).unwrap();
        let e = h
            .record(0, row(RowKind::Delete, "a", 5), 1)
            .unwrap_err()
            .to_string();
        assert!(e.contains("MIN(lo)") && e.contains("updating input"), "{e}");
    }
}
