//! The window operator: a keyed aggregate per window of event time
//! (tumbling, hopping, session), fired by the watermark
//! (docs/event-time.md).
//!
//! State, per subtask, in its RocksDB instance:
//! - window contents in the values family, keyed
//!   `key_group | key | window start (sign-flipped, big endian)`, holding
//!   the accumulator and the window's end (sessions grow);
//! - one timer per window in the timer family: `fire` at `end − 1`, then,
//!   with allowed lateness, `cleanup` at `end − 1 + allowed_lateness`;
//! - the watermark each key group had reached, under `key_group | 0xFF`
//!   (never a key prefix: keys are UTF-8), so that after a restore — at any
//!   parallelism — a replayed record is late exactly when it was before
//!   the checkpoint, and a fired window is never fired twice.
//!
//! Firing a window, deleting it and its output happen in one epoch, so
//! with exactly-once delivery each final result is in exactly one committed
//! transaction.

use std::path::Path;

use rustc_hash::FxHashMap;
use serde_json::Value;

use super::aggregate::name_corrupt_state;
use super::Pipeline;
use crate::config::{LatePolicy, WindowEmit};
use crate::error::{Result, WeirError};
use crate::observe::metrics::Metrics;
use crate::runtime::operator::Operator;
use crate::runtime::output::Output;
use crate::runtime::query::{KeyState, WindowState};
use crate::runtime::{DeadLetter, Update};
use crate::state::backend::VALUES;
use crate::state::{split_key, Accumulator, KeyedState, Snapshot, StateValue};
use crate::time::watermark::MIN_WATERMARK;
use crate::window::assign::{assign, Window, WindowSpec};
use crate::window::session;

/// A window's accumulator and its end (`[start, end)`, ms).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct WindowAcc {
    pub acc: Accumulator,
    pub end: i64,
}

impl StateValue for WindowAcc {
    const NAME: &'static str = "40 bytes";

    fn encode(&self, out: &mut Vec<u8>) {
        self.acc.encode(out);
        out.extend_from_slice(&self.end.to_le_bytes());
    }

    fn decode(b: &[u8]) -> Option<Self> {
        if b.len() != 40 {
            return None;
        }
        Some(Self {
            acc: Accumulator::decode(&b[..32])?,
            end: i64::from_le_bytes(b[32..40].try_into().ok()?),
        })
    }
}

const FIRE: u8 = 1;
const CLEANUP: u8 = 2;
/// Second byte of a key group's watermark entry.
pub(crate) const WATERMARK_TAG: u8 = 0xFF;

fn flip(t: i64) -> [u8; 8] {
    ((t as u64) ^ (1 << 63)).to_be_bytes()
}

pub(crate) fn unflip(b: &[u8]) -> Option<i64> {
    Some((u64::from_be_bytes(b.try_into().ok()?) ^ (1 << 63)) as i64)
}

/// `key_group | key | flip(start)`
fn window_key(kg: u32, key: &[u8], start: i64) -> Vec<u8> {
    let mut k = Vec::with_capacity(2 + key.len() + 8);
    k.extend_from_slice(&(kg as u16).to_be_bytes());
    k.extend_from_slice(key);
    k.extend_from_slice(&flip(start));
    k
}

/// `key_group | kind | flip(start) | key`: what a timer is for.
fn timer_payload(kg: u32, kind: u8, start: i64, key: &[u8]) -> Vec<u8> {
    let mut p = Vec::with_capacity(2 + 1 + 8 + key.len());
    p.extend_from_slice(&(kg as u16).to_be_bytes());
    p.push(kind);
    p.extend_from_slice(&flip(start));
    p.extend_from_slice(key);
    p
}

fn parse_timer_payload(p: &[u8]) -> Option<(u32, u8, i64, &[u8])> {
    let (kg, rest) = split_key(p)?;
    let kind = *rest.first()?;
    let start = unflip(rest.get(1..9)?)?;
    Some((kg, kind, start, &rest[9..]))
}

fn watermark_key(kg: u32) -> [u8; 3] {
    let b = (kg as u16).to_be_bytes();
    [b[0], b[1], WATERMARK_TAG]
}

/// RFC 3339, UTC, milliseconds: `2026-11-30T10:00:00.000Z`.
pub fn rfc3339_millis(ms: i64) -> String {
    match jiff::Timestamp::from_millisecond(ms) {
        Ok(t) => format!("{t:.3}"),
        Err(_) => ms.to_string(),
    }
}

/// One open window of a key, for queries.
#[derive(Debug, Clone, PartialEq)]
pub struct OpenWindow {
    pub window: Window,
    pub acc: Accumulator,
}

pub struct WindowOperator {
    pub uid: String,
    pub subtask: u32,
    pub key_groups: (u32, u32),
    pub pipeline: Pipeline,
    pub spec: WindowSpec,
    pub allowed_lateness: i64,
    pub on_late: LatePolicy,
    pub emit: WindowEmit,
    pub state: KeyedState<WindowAcc>,
    pub metrics: std::sync::Arc<Metrics>,
    /// The subtask's live watermark.
    watermark: i64,
    /// Per key group, the watermark reached before the restore.
    restored: FxHashMap<u32, i64>,
    open_windows: prometheus::IntGauge,
    /// Formatted window bounds.
    bounds: FxHashMap<i64, String>,
}

impl WindowOperator {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        uid: String,
        subtask: u32,
        key_groups: (u32, u32),
        pipeline: Pipeline,
        spec: WindowSpec,
        allowed_lateness: i64,
        on_late: LatePolicy,
        emit: WindowEmit,
        state: KeyedState<WindowAcc>,
        metrics: std::sync::Arc<Metrics>,
    ) -> Result<Self> {
        let mut restored = FxHashMap::default();
        for kg in key_groups.0..key_groups.1 {
            let k = watermark_key(kg);
            if let Some(v) = state
                .backend
                .db()
                .get_pinned_cf(state.backend.cf(VALUES), k)
                .map_err(|e| WeirError::state("read a key group's watermark", e))?
            {
                let w = v.as_ref().try_into().map(i64::from_le_bytes).map_err(|_| {
                    WeirError::CorruptState {
                        uid: uid.clone(),
                        key_group: kg,
                        key: "(watermark)".into(),
                        location: state.backend.path().display().to_string(),
                        reason: format!("{} bytes, expected 8", v.len()),
                    }
                })?;
                restored.insert(kg, w);
            }
        }
        let open_windows = metrics
            .open_windows
            .with_label_values(&[uid.as_str(), &subtask.to_string()]);
        open_windows.set(state.timers.len() as i64);
        Ok(Self {
            uid,
            subtask,
            key_groups,
            pipeline,
            spec,
            allowed_lateness,
            on_late,
            emit,
            state,
            metrics,
            watermark: MIN_WATERMARK,
            restored,
            open_windows,
            bounds: FxHashMap::default(),
        })
    }

    /// The watermark that decides lateness in key group `kg`.
    fn watermark_of(&self, kg: u32) -> i64 {
        self.restored
            .get(&kg)
            .map_or(self.watermark, |r| (*r).max(self.watermark))
    }

    /// The windows a record at `ts` joins (tumbling, hopping), or the
    /// session it makes with the key's sessions, and which of those it
    /// absorbs.
    fn targets(&self, kg: u32, key: &[u8], ts: i64) -> Result<Targets> {
        match self.spec {
            WindowSpec::Session { .. } => {
                let proto = assign(&self.spec, ts);
                let Some(proto) = proto.first().copied() else {
                    return Ok(Targets::Windows(Vec::new()));
                };
                let sessions = self.sessions(kg, key)?;
                let windows: Vec<Window> = sessions.iter().map(|(w, _)| *w).collect();
                let (merged, absorbed) = session::merge(&windows, proto);
                Ok(Targets::Session {
                    merged,
                    absorbed: absorbed.into_iter().map(|i| sessions[i]).collect(),
                })
            }
            _ => Ok(Targets::Windows(assign(&self.spec, ts))),
        }
    }

    /// A key's sessions (open, or fired and within lateness), by start.
    fn sessions(&self, kg: u32, key: &[u8]) -> Result<Vec<(Window, Accumulator)>> {
        Ok(self
            .open_windows_of(kg, key)?
            .into_iter()
            .map(|o| (o.window, o.acc))
            .collect())
    }

    /// The windows of `key` held in state, by start (cache included).
    pub fn open_windows_of(&self, kg: u32, key: &[u8]) -> Result<Vec<OpenWindow>> {
        let mut prefix = (kg as u16).to_be_bytes().to_vec();
        prefix.extend_from_slice(key);
        let len = prefix.len() + 8;
        let mut out = Vec::new();
        for (k, v) in self
            .state
            .values
            .scan_prefix(&self.state.backend, &prefix, len)?
        {
            let start = unflip(&k[len - 8..]).expect("8 bytes");
            out.push(OpenWindow {
                window: Window { start, end: v.end },
                acc: v.acc,
            });
        }
        out.sort_by_key(|o| o.window.start);
        Ok(out)
    }

    /// RFC 3339 of a window bound, formatted once per bound: many keys
    /// share each window.
    fn bound(&mut self, ms: i64) -> &str {
        if self.bounds.len() > 4096 {
            self.bounds.clear();
        }
        self.bounds
            .entry(ms)
            .or_insert_with(|| rfc3339_millis(ms))
            .as_str()
    }

    fn emit_result(
        &mut self,
        key: &str,
        w: Window,
        acc: &Accumulator,
        out: &mut Output,
    ) -> Result<()> {
        let buf = &mut out.buf;
        buf.clear();
        buf.extend_from_slice(b"{\"key\":");
        serde_json::to_writer(&mut *buf, key).expect("a string serializes");
        buf.extend_from_slice(b",\"window_start\":\"");
        buf.extend_from_slice(self.bound(w.start).as_bytes());
        buf.extend_from_slice(b"\",\"window_end\":\"");
        buf.extend_from_slice(self.bound(w.end).as_bytes());
        buf.extend_from_slice(b"\",\"");
        buf.extend_from_slice(self.pipeline.result_name().as_bytes());
        buf.extend_from_slice(b"\":");
        let value: Value = self.pipeline.result_value(acc);
        serde_json::to_writer(&mut *buf, &value).expect("a number serializes");
        buf.push(b'}');
        out.send_buf(key.as_bytes(), Some(w.end - 1))
    }

    /// A record no window takes any more.
    fn late(&self, u: Update, windows: &[Window], watermark: i64, out: &mut Output) -> Result<()> {
        match self.on_late {
            LatePolicy::Drop => {
                self.metrics.late_records.with_label_values(&["drop"]).inc();
                Ok(())
            }
            LatePolicy::DeadLetter => {
                self.metrics
                    .late_records
                    .with_label_values(&["dead-letter"])
                    .inc();
                let mut dl = u.origin.unwrap_or_else(|| {
                    Box::new(DeadLetter {
                        key: Some(u.key.clone().into_bytes()),
                        value: None,
                        error: String::new(),
                        topic: String::new(),
                        partition: 0,
                        offset: 0,
                        headers: Vec::new(),
                    })
                });
                let first = windows.first().copied().unwrap_or(Window {
                    start: u.timestamp,
                    end: u.timestamp,
                });
                let last = windows.last().copied().unwrap_or(first);
                dl.error = format!(
                    "late record: event time {} is behind the watermark {} for every window it belongs to",
                    rfc3339_millis(u.timestamp),
                    rfc3339_millis(watermark)
                );
                dl.headers = vec![
                    ("weir.late.window_start".into(), rfc3339_millis(first.start)),
                    ("weir.late.window_end".into(), rfc3339_millis(last.end)),
                    ("weir.late.event_time".into(), rfc3339_millis(u.timestamp)),
                    ("weir.late.watermark".into(), rfc3339_millis(watermark)),
                ];
                out.dead_letter(dl)
            }
        }
    }

    /// Whether window `w` still takes records at `watermark`.
    fn accepts(&self, w: Window, watermark: i64) -> bool {
        watermark < (w.end - 1).saturating_add(self.allowed_lateness)
    }

    fn fired(&self, w: Window, watermark: i64) -> bool {
        watermark >= w.end - 1
    }

    /// Adds a record to window `w` (new or existing) and emits what the
    /// emit mode and lateness call for.
    fn add(
        &mut self,
        u: &Update,
        w: Window,
        base: Option<Accumulator>,
        out: &mut Output,
    ) -> Result<()> {
        let kg = u.key_group;
        let key = u.key.as_bytes();
        let wk = window_key(kg, key, w.start);
        let value = u.value;
        let (updated, existed) =
            self.state
                .values
                .update_existed(&self.state.backend, &wk, |v| {
                    if let Some(b) = base {
                        v.acc = b;
                    }
                    v.end = w.end;
                    v.acc.add(value);
                })?;
        // A merged session is new: the sessions it absorbed were removed
        // with their timers, even one that had the same start.
        let existed = existed && base.is_none();
        let watermark = self.watermark_of(kg);
        let fired = self.fired(w, watermark);
        if !existed {
            if fired {
                // A late record within allowed lateness made a window that
                // had fired empty: it lives until its cleanup time.
                self.state.timers.register(
                    (w.end - 1).saturating_add(self.allowed_lateness),
                    timer_payload(kg, CLEANUP, w.start, key),
                );
            } else {
                self.state
                    .timers
                    .register(w.end - 1, timer_payload(kg, FIRE, w.start, key));
            }
            self.open_windows.inc();
        }
        if fired || self.emit == WindowEmit::EveryUpdate {
            // A late firing (within lateness) updates the result.
            self.emit_result(&u.key, w, &updated.acc, out)?;
        }
        Ok(())
    }

    fn on_timer(&mut self, payload: &[u8], out: &mut Output) -> Result<()> {
        let Some((kg, kind, start, key)) = parse_timer_payload(payload) else {
            return Err(WeirError::CorruptState {
                uid: self.uid.clone(),
                key_group: 0,
                key: String::from_utf8_lossy(payload).into_owned(),
                location: self.state.backend.path().display().to_string(),
                reason: "timer payload too short".into(),
            });
        };
        let key = key.to_vec();
        let wk = window_key(kg, &key, start);
        let Some(v) = self.state.get(&wk)? else {
            return Ok(()); // merged into another session meanwhile
        };
        let w = Window { start, end: v.end };
        match kind {
            FIRE => {
                if self.emit == WindowEmit::OnClose {
                    let key = String::from_utf8_lossy(&key).into_owned();
                    self.emit_result(&key, w, &v.acc, out)?;
                }
                if self.allowed_lateness > 0 {
                    self.state.timers.register(
                        (w.end - 1).saturating_add(self.allowed_lateness),
                        timer_payload(kg, CLEANUP, start, &key),
                    );
                } else {
                    self.state.values.remove(&self.state.backend, &wk)?;
                    self.open_windows.dec();
                }
            }
            _ => {
                self.state.values.remove(&self.state.backend, &wk)?;
                self.open_windows.dec();
            }
        }
        Ok(())
    }
}

enum Targets {
    Windows(Vec<Window>),
    Session {
        merged: Window,
        absorbed: Vec<(Window, Accumulator)>,
    },
}

impl Operator for WindowOperator {
    fn on_update(&mut self, u: Update, out: &mut Output) -> Result<()> {
        let kg = u.key_group;
        let watermark = self.watermark_of(kg);
        match self.targets(kg, u.key.as_bytes(), u.timestamp)? {
            Targets::Windows(windows) => {
                let accepting: Vec<Window> = windows
                    .iter()
                    .copied()
                    .filter(|w| self.accepts(*w, watermark))
                    .collect();
                if accepting.is_empty() {
                    return self.late(u, &windows, watermark, out);
                }
                for w in accepting {
                    self.add(&u, w, None, out)?;
                }
                Ok(())
            }
            Targets::Session { merged, absorbed } => {
                if !self.accepts(merged, watermark) {
                    return self.late(u, &[merged], watermark, out);
                }
                // The absorbed sessions fold into the merged one, which
                // lives under its own start.
                let key = u.key.as_bytes().to_vec();
                let mut base: Option<Accumulator> = None;
                for (w, acc) in &absorbed {
                    let wk = window_key(kg, &key, w.start);
                    match &mut base {
                        None => base = Some(*acc),
                        Some(b) => b.merge(acc),
                    }
                    self.state.values.remove(&self.state.backend, &wk)?;
                    let fired = self.fired(*w, watermark);
                    let (time, kind) = if fired {
                        ((w.end - 1).saturating_add(self.allowed_lateness), CLEANUP)
                    } else {
                        (w.end - 1, FIRE)
                    };
                    self.state
                        .timers
                        .delete(time, &timer_payload(kg, kind, w.start, &key));
                    self.open_windows.dec();
                }
                self.add(&u, merged, base, out)
            }
        }
    }

    fn on_watermark(&mut self, watermark: i64, out: &mut Output) -> Result<()> {
        if watermark <= self.watermark {
            return Ok(());
        }
        self.watermark = watermark;
        self.restored.retain(|_, w| *w > watermark);
        // Timers of key groups restored ahead of the live watermark wait
        // for it; they were due before the checkpoint and fired then.
        for (_, payload) in self.state.timers.pop_due(watermark) {
            self.on_timer(&payload, out)?;
        }
        Ok(())
    }

    fn snapshot(&mut self, target: &Path) -> Result<Snapshot> {
        let mut batch = rocksdb::WriteBatch::default();
        let cf = self.state.backend.cf(VALUES);
        for kg in self.key_groups.0..self.key_groups.1 {
            let w = self.watermark_of(kg);
            if w > MIN_WATERMARK {
                batch.put_cf(cf, watermark_key(kg), w.to_le_bytes());
            }
        }
        self.state.backend.write(batch)?;
        self.state.snapshot(target)
    }

    fn query(&mut self, key_group: u32, key: &str) -> Result<KeyState> {
        let windows = self
            .open_windows_of(key_group, key.as_bytes())?
            .into_iter()
            .map(|o| WindowState {
                start_ms: o.window.start,
                end_ms: o.window.end,
                start: rfc3339_millis(o.window.start),
                end: rfc3339_millis(o.window.end),
                value: self.pipeline.result_object(&o.acc),
            })
            .collect();
        Ok(KeyState {
            value: None,
            windows: Some(windows),
            task: None,
        })
    }

    fn name_error(&self, e: WeirError) -> WeirError {
        name_corrupt_state(&self.uid, e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_results_are_rfc3339_utc_with_milliseconds() {
        assert_eq!(rfc3339_millis(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            rfc3339_millis(1_764_496_800_123),
            "2025-11-30T10:00:00.123Z"
        );
        assert_eq!(rfc3339_millis(-1), "1969-12-31T23:59:59.999Z");
    }

    #[test]
    fn keys_and_payloads_round_trip_and_sort_by_start() {
        let p = timer_payload(7, FIRE, -5, b"user");
        assert_eq!(parse_timer_payload(&p), Some((7, FIRE, -5, &b"user"[..])));
        assert!(window_key(1, b"a", -1) < window_key(1, b"a", 0));
        assert!(window_key(1, b"a", 0) < window_key(1, b"a", 1));
        // A key group's watermark entry never prefixes a UTF-8 key.
        assert_eq!(watermark_key(3), [0, 3, 0xFF]);
    }
}
