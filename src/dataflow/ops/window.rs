//! A keyed aggregate per window of event time: tumbling, hopping or
//! session windows, fired by the watermark.
//!
//! - A window's result is emitted once, as an insert, when the watermark
//!   reaches its last millisecond (`end - 1`).
//! - With allowed lateness, the window's state stays until the watermark
//!   reaches `end - 1 + allowed_lateness`; a record within that time
//!   updates the result (update-before the old row, update-after the new).
//!   A session that a late record merges into a fired one retracts the
//!   fired result (delete) and emits the merged one when it is due.
//! - A record that no open window takes is late: counted, and sent to the
//!   node's dead-letter topic (as JSON, with the window, its event time and
//!   the watermark in headers) when the job gives one (`late_to`).
//!
//! State: one map per key, window `(start, end)` → accumulators, and two
//! timers per window (fire, and with lateness, clean-up). Whether a window
//! has fired is `watermark >= end - 1`, so a restore needs nothing more.

use crate::dataflow::json::{encode_row, format_timestamp, value_json};
use crate::dataflow::operator::{
    Collector, Context, LateRecord, Operator, Queried, Record, RecordOrigin,
};
use crate::dataflow::ops::aggregate::{Accumulators, Agg};
use crate::dataflow::row::{Row, RowKind, Schema, Value};
use crate::dataflow::tables::{Table, TableSpec};
use crate::error::Result;
use crate::window::assign::{assign, Window, WindowSpec};
use crate::window::session;

/// Timer kinds, the first byte of a timer's tag.
const FIRE: u8 = 0;
const CLEANUP: u8 = 1;

pub struct WindowAggregate {
    pub spec: WindowSpec,
    pub aggs: Vec<Agg>,
    /// Milliseconds a window takes records after its end.
    pub allowed_lateness: i64,
    /// The input's schema: late records are written as JSON by it.
    pub input: Schema,
    /// After every record, the window's result so far (an insert, then
    /// update-afters) instead of once when it closes.
    pub every_update: bool,
    /// The column whose bytes a late record's dead letter carries (the
    /// record as it was read), instead of the row as JSON.
    pub late_value: Option<usize>,
    /// The origin column (`KafkaSource::with_origin`) that names a late
    /// record's Kafka record in its dead letter.
    pub late_origin: Option<usize>,
    /// The window of each row is given by two TIMESTAMP columns of its own
    /// (start, end), not assigned by `spec`: a window aggregate over a
    /// window aggregate's result keeps its windows (SQL's windows of
    /// windows).
    pub given: Option<(usize, usize)>,
}

impl WindowAggregate {
    pub const WINDOWS: Table = Table(0);

    pub fn tables() -> Vec<TableSpec> {
        vec![TableSpec::map::<Accumulators>("windows")]
    }

    /// Whether `w` still takes records at `watermark`.
    fn accepts(&self, w: &Window, watermark: i64) -> bool {
        watermark < (w.end - 1).saturating_add(self.allowed_lateness)
    }

    fn result(&self, ctx: &Context, w: &Window, acc: &Accumulators, kind: RowKind) -> Result<Row> {
        let mut values = ctx.key_values()?;
        values.push(Value::Timestamp(w.start));
        values.push(Value::Timestamp(w.end));
        acc.results(&self.aggs, &mut values);
        Ok(Row::new(kind, values))
    }

    /// The window's timers: fire (unless its result went out already) and,
    /// with lateness, clean-up.
    fn register(&self, ctx: &mut Context, w: &Window, fire: bool) -> Result<()> {
        if fire {
            ctx.register_timer(w.end - 1, &timer_tag(FIRE, w))?;
        }
        if self.allowed_lateness > 0 {
            let at = (w.end - 1).saturating_add(self.allowed_lateness);
            ctx.register_timer(at, &timer_tag(CLEANUP, w))?;
        }
        Ok(())
    }

    fn unregister(&self, ctx: &mut Context, w: &Window) -> Result<()> {
        ctx.delete_timer(w.end - 1, &timer_tag(FIRE, w))?;
        if self.allowed_lateness > 0 {
            let at = (w.end - 1).saturating_add(self.allowed_lateness);
            ctx.delete_timer(at, &timer_tag(CLEANUP, w))?;
        }
        Ok(())
    }

    /// Adds `r` to window `w` (one of its tumbling or hopping windows).
    fn add(&self, r: &Record, w: &Window, ctx: &mut Context, out: &mut Collector) -> Result<()> {
        let tag = window_key(w);
        let old: Option<Accumulators> = ctx.map_get(Self::WINDOWS, &tag)?;
        let fired = ctx.watermark() >= w.end - 1;
        let mut acc = old.clone().unwrap_or_else(|| Accumulators::new(&self.aggs));
        acc.apply(&self.aggs, &r.row, false)
            .map_err(|e| ctx.failure(e))?;
        ctx.map_put(Self::WINDOWS, &tag, &acc)?;
        if old.is_none() {
            ctx.count_open_windows(1);
        }
        match (&old, fired) {
            (None, false) => {
                // With every update the fire timer only cleans up.
                self.register(ctx, w, true)?;
                if self.every_update {
                    out.emit(self.result(ctx, w, &acc, RowKind::Insert)?, w.end - 1);
                }
            }
            (Some(old), false) if self.every_update => {
                if ctx.update_before_needed() {
                    out.emit(self.result(ctx, w, old, RowKind::UpdateBefore)?, w.end - 1);
                }
                out.emit(self.result(ctx, w, &acc, RowKind::UpdateAfter)?, w.end - 1);
            }
            (Some(_), false) => {}
            // Within allowed lateness, after the result went out.
            (Some(old), true) => {
                if ctx.update_before_needed() {
                    out.emit(self.result(ctx, w, old, RowKind::UpdateBefore)?, w.end - 1);
                }
                out.emit(self.result(ctx, w, &acc, RowKind::UpdateAfter)?, w.end - 1);
            }
            // Fired and cleaned up would be late; a window that never had a
            // record fires now and is cleaned up by its timer.
            (None, true) => {
                out.emit(self.result(ctx, w, &acc, RowKind::Insert)?, w.end - 1);
                self.register(ctx, w, false)?;
            }
        }
        Ok(())
    }

    /// Adds `r` to its session, merging the sessions it bridges.
    fn add_to_session(
        &self,
        r: &Record,
        proto: Window,
        ctx: &mut Context,
        out: &mut Collector,
    ) -> Result<bool> {
        let existing: Vec<(Window, Accumulators)> = ctx
            .map_entries::<Accumulators>(Self::WINDOWS)?
            .into_iter()
            .filter_map(|(k, acc)| Some((window_of_key(&k)?, acc)))
            .collect();
        let windows: Vec<Window> = existing.iter().map(|(w, _)| *w).collect();
        let (merged, absorbed) = session::merge(&windows, proto);
        let watermark = ctx.watermark();
        if !self.accepts(&merged, watermark) {
            return Ok(false);
        }
        if let [i] = absorbed[..] {
            if windows[i] == merged {
                self.add(r, &merged, ctx, out)?;
                return Ok(true);
            }
        }
        let mut acc = Accumulators::new(&self.aggs);
        for &i in &absorbed {
            let (w, old) = &existing[i];
            acc.merge(&self.aggs, old).map_err(|e| ctx.failure(e))?;
            if watermark >= w.end - 1 || self.every_update {
                // Its result is out: the merged session replaces it.
                out.emit(self.result(ctx, w, old, RowKind::Delete)?, w.end - 1);
            }
            ctx.map_delete(Self::WINDOWS, &window_key(w))?;
            ctx.count_open_windows(-1);
            self.unregister(ctx, w)?;
        }
        acc.apply(&self.aggs, &r.row, false)
            .map_err(|e| ctx.failure(e))?;
        ctx.map_put(Self::WINDOWS, &window_key(&merged), &acc)?;
        ctx.count_open_windows(1);
        self.register(ctx, &merged, watermark < merged.end - 1)?;
        if watermark >= merged.end - 1 || self.every_update {
            out.emit(
                self.result(ctx, &merged, &acc, RowKind::Insert)?,
                merged.end - 1,
            );
        }
        Ok(true)
    }

    fn late(&self, r: &Record, windows: &[Window], ctx: &mut Context) {
        let mut value = Vec::new();
        match self.late_value.map(|c| r.row.get(c)) {
            Some(Value::Bytes(b)) => value.extend_from_slice(b),
            Some(Value::String(s)) => value.extend_from_slice(s.as_bytes()),
            _ => encode_row(&r.row, &self.input, &mut value),
        }
        let (first, last) = match (windows.first(), windows.last()) {
            (Some(f), Some(l)) => (*f, *l),
            _ => {
                let w = Window {
                    start: r.timestamp,
                    end: r.timestamp,
                };
                (w, w)
            }
        };
        let watermark = ctx.watermark();
        ctx.late(LateRecord {
            value,
            error: format!(
                "late record: event time {} is behind the watermark {} for every window it \
                 belongs to",
                format_timestamp(r.timestamp),
                format_timestamp(watermark)
            ),
            headers: vec![
                (
                    "weir.late.window_start".into(),
                    format_timestamp(first.start),
                ),
                ("weir.late.window_end".into(), format_timestamp(last.end)),
                ("weir.late.event_time".into(), format_timestamp(r.timestamp)),
                ("weir.late.watermark".into(), format_timestamp(watermark)),
            ],
            origin: self
                .late_origin
                .and_then(|c| RecordOrigin::from_value(r.row.get(c))),
            failed: false,
        });
    }
}

/// A window as a map key: start and end, big endian.
fn window_key(w: &Window) -> [u8; 16] {
    let mut key = [0u8; 16];
    key[..8].copy_from_slice(&w.start.to_be_bytes());
    key[8..].copy_from_slice(&w.end.to_be_bytes());
    key
}

fn window_of_key(key: &[u8]) -> Option<Window> {
    let start = i64::from_be_bytes(key.get(..8)?.try_into().ok()?);
    let end = i64::from_be_bytes(key.get(8..16)?.try_into().ok()?);
    Some(Window { start, end })
}

fn timer_tag(kind: u8, w: &Window) -> [u8; 17] {
    let mut tag = [0u8; 17];
    tag[0] = kind;
    tag[1..].copy_from_slice(&window_key(w));
    tag
}

impl Operator for WindowAggregate {
    fn on_record(
        &mut self,
        _: usize,
        r: Record,
        ctx: &mut Context,
        out: &mut Collector,
    ) -> Result<()> {
        if r.row.kind != RowKind::Insert {
            return Err(ctx.failure(format!(
                "a window aggregate takes append-only input, not a {} row",
                r.row.kind.short()
            )));
        }
        if r.timestamp == crate::time::NO_TIMESTAMP {
            return Err(ctx.failure(
                "a window aggregate needs event time: give the source an event-time column",
            ));
        }
        let watermark = ctx.watermark();
        if let WindowSpec::Session { gap } = self.spec {
            let proto = Window {
                start: r.timestamp,
                end: r.timestamp.saturating_add(gap),
            };
            if !self.add_to_session(&r, proto, ctx, out)? {
                self.late(&r, &[proto], ctx);
            }
            return Ok(());
        }
        let windows = match self.given {
            None => assign(&self.spec, r.timestamp),
            Some((s, e)) => match (r.row.get(s), r.row.get(e)) {
                (Value::Timestamp(start), Value::Timestamp(end)) if start < end => vec![Window {
                    start: *start,
                    end: *end,
                }],
                _ => {
                    return Err(ctx.failure(
                        "a window aggregate over windows needs each row's window_start before its window_end",
                    ))
                }
            },
        };
        let mut taken = false;
        for w in &windows {
            if self.accepts(w, watermark) {
                self.add(&r, w, ctx, out)?;
                taken = true;
            }
        }
        if !taken {
            self.late(&r, &windows, ctx);
        }
        Ok(())
    }

    fn on_timer(
        &mut self,
        _time: i64,
        tag: &[u8],
        ctx: &mut Context,
        out: &mut Collector,
    ) -> Result<()> {
        let (kind, w) = match tag.split_first() {
            Some((kind, key)) => (*kind, window_of_key(key)),
            None => (FIRE, None),
        };
        let Some(w) = w else {
            return Err(ctx.failure(format!(
                "a window timer's tag of {} bytes does not decode",
                tag.len()
            )));
        };
        let key = window_key(&w);
        let Some(acc) = ctx.map_get::<Accumulators>(Self::WINDOWS, &key)? else {
            return Ok(());
        };
        if kind == FIRE && !self.every_update {
            out.emit(self.result(ctx, &w, &acc, RowKind::Insert)?, w.end - 1);
        }
        if kind == CLEANUP || self.allowed_lateness <= 0 {
            ctx.map_delete(Self::WINDOWS, &key)?;
            ctx.count_open_windows(-1);
        }
        Ok(())
    }

    /// Counts the windows held (for `weir_open_windows`) by their timers,
    /// which a restore holds in memory anyway: every window has a fire or
    /// a clean-up timer, or both.
    fn on_restore(&mut self, ctx: &mut Context) -> Result<()> {
        let windows: std::collections::HashSet<(Vec<u8>, Vec<u8>)> = ctx
            .timer_tags()
            .into_iter()
            .filter_map(|(key, tag)| Some((key, tag.get(1..)?.to_vec())))
            .collect();
        ctx.count_open_windows(windows.len() as i64);
        Ok(())
    }

    /// The key's windows in state, by start, each with its results so far
    /// (`{"count": 3}`).
    fn query(&mut self, ctx: &mut Context) -> Result<Queried> {
        let mut windows: Vec<(Window, Accumulators)> = ctx
            .map_entries::<Accumulators>(Self::WINDOWS)?
            .into_iter()
            .filter_map(|(k, acc)| Some((window_of_key(&k)?, acc)))
            .collect();
        windows.sort_by_key(|(w, _)| (w.start, w.end));
        Ok(Queried::Windows(
            windows
                .iter()
                .map(|(w, acc)| {
                    let mut results = Vec::with_capacity(self.aggs.len());
                    acc.results(&self.aggs, &mut results);
                    let value = self
                        .aggs
                        .iter()
                        .zip(&results)
                        .map(|(a, v)| (a.name.clone(), value_json(v)))
                        .collect::<serde_json::Map<_, _>>();
                    (w.start, w.end, serde_json::Value::Object(value))
                })
                .collect(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataflow::operator::testing::Harness;
    use crate::dataflow::ops::aggregate::AggFunction;
    use crate::dataflow::row::{DataType, Field};

    fn row(k: &str, v: i64) -> Row {
        Row::insert(vec![Value::from(k), Value::Int(v)])
    }

    fn op(spec: WindowSpec, allowed_lateness: i64) -> Harness<WindowAggregate> {
        let aggs = vec![
            Agg::count("n"),
            Agg {
                function: AggFunction::Max,
                column: Some(1),
                name: "hi".into(),
                distinct: false,
                user: None,
            },
        ];
        let input = Schema::new(vec![
            Field::new("k", DataType::String),
            Field::new("v", DataType::BigInt),
        ]);
        Harness::keyed(
            WindowAggregate {
                given: None,
                every_update: false,
                late_value: None,
                late_origin: None,
                spec,
                aggs,
                allowed_lateness,
                input,
            },
            WindowAggregate::tables(),
            vec![0],
        )
    }

    fn result(kind: RowKind, start: i64, end: i64, n: i64, hi: i64) -> Row {
        Row::new(
            kind,
            vec![
                "a".into(),
                Value::Timestamp(start),
                Value::Timestamp(end),
                n.into(),
                hi.into(),
            ],
        )
    }

    #[test]
    fn every_update_emits_each_result_so_far_nothing_at_the_close_and_cleans_up() {
        let mut h = op(
            WindowSpec::Tumbling {
                size: 10,
                offset: 0,
            },
            0,
        );
        h.op.every_update = true;
        let rows = |got: Vec<(Row, i64)>| got.into_iter().map(|(r, _)| r).collect::<Vec<_>>();
        assert_eq!(
            rows(h.record(0, row("a", 4), 1).unwrap()),
            vec![result(RowKind::Insert, 0, 10, 1, 4)]
        );
        assert_eq!(
            rows(h.record(0, row("a", 6), 2).unwrap()),
            vec![
                result(RowKind::UpdateBefore, 0, 10, 1, 4),
                result(RowKind::UpdateAfter, 0, 10, 2, 6),
            ]
        );
        assert!(
            h.watermark(9).unwrap().is_empty(),
            "nothing more at the close"
        );
        assert_eq!(h.op.query(&mut h.ctx).unwrap(), Queried::Windows(vec![]));
    }

    #[test]
    fn a_late_records_dead_letter_carries_the_record_as_read_when_told() {
        let mut h = op(
            WindowSpec::Tumbling {
                size: 10,
                offset: 0,
            },
            0,
        );
        h.op.late_value = Some(0);
        h.watermark(20).unwrap();
        h.record(0, row("raw bytes", 1), 3).unwrap();
        let late = h.ctx.take_late_records();
        assert_eq!(late.len(), 1);
        assert_eq!(late[0].value, b"raw bytes");
        assert_eq!(late[0].origin, None, "no origin column");
    }

    #[test]
    fn a_late_records_dead_letter_names_its_kafka_record_from_the_origin_column() {
        let mut h = op(
            WindowSpec::Tumbling {
                size: 10,
                offset: 0,
            },
            0,
        );
        h.op.late_value = Some(0);
        h.op.late_origin = Some(1);
        h.watermark(20).unwrap();
        let origin = RecordOrigin::value(Some(b"k1"), "clicks", 3, 41);
        let late_row = Row::insert(vec!["a".into(), origin]);
        h.record(0, late_row, 3).unwrap();
        let late = h.ctx.take_late_records();
        assert_eq!(
            late[0].origin,
            Some(RecordOrigin {
                key: Some(b"k1".to_vec()),
                topic: "clicks".into(),
                partition: 3,
                offset: 41,
            })
        );
    }

    #[test]
    fn windows_fire_once_at_the_watermark_and_late_records_go_to_the_side() {
        let mut h = op(
            WindowSpec::Tumbling {
                size: 10,
                offset: 0,
            },
            0,
        );
        for (v, ts) in [(1, 1), (7, 9), (3, 12)] {
            assert!(h.record(0, row("a", v), ts).unwrap().is_empty());
        }
        assert!(h.watermark(8).unwrap().is_empty());
        let fired = h.watermark(9).unwrap();
        assert_eq!(fired, vec![(result(RowKind::Insert, 0, 10, 2, 7), 9)]);
        // Late for [0, 10): set aside with its window, never a second result.
        h.record(0, row("a", 100), 5).unwrap();
        let late = h.ctx.take_late_records();
        assert_eq!(late.len(), 1);
        assert_eq!(late[0].value, br#"{"k":"a","v":100}"#);
        assert!(late[0]
            .headers
            .contains(&("weir.late.window_end".into(), format_timestamp(10))));
        assert!(h.watermark(15).unwrap().is_empty());
        let fired = h.watermark(19).unwrap();
        assert_eq!(fired, vec![(result(RowKind::Insert, 10, 20, 1, 3), 19)]);
        let e = h
            .record(0, Row::new(RowKind::Delete, vec!["a".into(), 1.into()]), 30)
            .unwrap_err()
            .to_string();
        assert!(e.contains("append-only"), "{e}");
    }

    #[test]
    fn a_query_lists_the_keys_open_windows_with_their_results() {
        let mut h = op(
            WindowSpec::Hopping {
                size: 10,
                slide: 5,
                offset: 0,
            },
            0,
        );
        assert_eq!(h.op.query(&mut h.ctx).unwrap(), Queried::Windows(vec![]));
        h.record(0, row("a", 4), 7).unwrap();
        h.record(0, row("a", 9), 8).unwrap();
        assert_eq!(
            h.op.query(&mut h.ctx).unwrap(),
            Queried::Windows(vec![
                (0, 10, serde_json::json!({"n": 2, "hi": 9})),
                (5, 15, serde_json::json!({"n": 2, "hi": 9})),
            ])
        );
    }

    #[test]
    fn allowed_lateness_updates_a_fired_result_until_clean_up() {
        let mut h = op(
            WindowSpec::Tumbling {
                size: 10,
                offset: 0,
            },
            5,
        );
        h.record(0, row("a", 1), 1).unwrap();
        assert_eq!(
            h.watermark(9).unwrap(),
            vec![(result(RowKind::Insert, 0, 10, 1, 1), 9)]
        );
        // Within lateness: retract and re-emit.
        assert_eq!(
            h.record(0, row("a", 4), 3).unwrap(),
            vec![
                (result(RowKind::UpdateBefore, 0, 10, 1, 1), 9),
                (result(RowKind::UpdateAfter, 0, 10, 2, 4), 9)
            ]
        );
        assert!(
            h.watermark(14).unwrap().is_empty(),
            "clean-up emits nothing"
        );
        h.record(0, row("a", 9), 2).unwrap();
        assert_eq!(h.ctx.take_late_records().len(), 1, "past the lateness");
    }

    #[test]
    fn sessions_merge_and_fire_once_the_gap_has_passed() {
        let mut h = op(WindowSpec::Session { gap: 10 }, 0);
        h.record(0, row("a", 1), 0).unwrap();
        h.record(0, row("a", 5), 25).unwrap();
        // Meets [0, 10) end to start: [0, 20).
        h.record(0, row("a", 2), 10).unwrap();
        // Bridges [0, 20) and [25, 35) into [0, 35).
        h.record(0, row("a", 3), 18).unwrap();
        assert!(h.watermark(33).unwrap().is_empty());
        assert_eq!(
            h.watermark(34).unwrap(),
            vec![(result(RowKind::Insert, 0, 35, 4, 5), 34)]
        );
        // A record that would open a session already over is late.
        h.record(0, row("a", 7), 20).unwrap();
        assert_eq!(h.ctx.take_late_records().len(), 1);
        h.record(0, row("a", 7), 40).unwrap();
        assert_eq!(
            h.watermark(60).unwrap(),
            vec![(result(RowKind::Insert, 40, 50, 1, 7), 49)]
        );
    }
}
