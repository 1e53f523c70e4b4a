//! Per-partition watermarks at a source subtask, as Flink's
//! `WatermarkStrategy.forBoundedOutOfOrderness(..).withIdleness(..)` with
//! per-split watermarks.
//!
//! Each Kafka partition has its own clock, because partitions are read at
//! different speeds: one watermark over all records of the subtask would run
//! ahead with the fastest partition and make the slower partitions' records
//! late. The subtask's watermark is the minimum over its active partitions.
//! A partition without records for `idle_timeout` leaves the minimum, so a
//! silent partition cannot stall event time for ever.

use std::collections::BTreeMap;

/// The watermark before any record: nothing is known yet.
pub const MIN_WATERMARK: i64 = i64::MIN;

/// What the subtask sends downstream after [`SourceWatermarks::poll`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatermarkUpdate {
    /// Event time has advanced to this watermark: no record with a time at
    /// or below it is expected any more.
    Watermark(i64),
    /// Every partition is idle: downstream should not wait for this input.
    Idle,
    /// A partition became active again after `Idle` was reported: this
    /// input holds downstream back again (once it catches up).
    Active,
}

/// The clock of one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PartitionClock {
    /// The highest event time seen (or restored); `None` before any.
    max_ts: Option<i64>,
    /// Wall-clock time of the last record (or of registration).
    last_activity_ms: u64,
    idle: bool,
}

/// The watermarks of the partitions one source subtask reads.
///
/// Call [`on_record`](Self::on_record) for every record, then
/// [`poll`](Self::poll) before sending the record downstream (so that an
/// `Active` status precedes it; the watermark that poll returns is always
/// below the record's time unless the record is late already), and call
/// `poll` periodically (e.g. every 200 ms) so that idleness is noticed when
/// no records come. `poll` is cheap when nothing changed: it does not look
/// at every partition for every record.
#[derive(Debug, Clone)]
pub struct SourceWatermarks {
    /// topic → partition → clock. Nested so that the per-record lookup by
    /// `&str` needs no allocation; iteration is in (topic, partition) order.
    partitions: BTreeMap<String, BTreeMap<i32, PartitionClock>>,
    max_out_of_orderness_ms: i64,
    /// 0 = never idle.
    idle_timeout_ms: u64,
    last_emitted: i64,
    all_idle_reported: bool,
    /// The number of partitions that are not idle.
    active: usize,
    /// Something happened since the last poll that may move the minimum.
    dirty: bool,
    /// No partition can become idle before this wall-clock time (a lower
    /// bound: records only push the true deadline later).
    next_idle_check_ms: u64,
}

impl SourceWatermarks {
    /// A negative `max_out_of_orderness_ms` is treated as 0: a watermark
    /// above the highest time seen would make in-order records late.
    pub fn new(max_out_of_orderness_ms: i64, idle_timeout_ms: u64) -> Self {
        Self {
            partitions: BTreeMap::new(),
            max_out_of_orderness_ms: max_out_of_orderness_ms.max(0),
            idle_timeout_ms,
            last_emitted: MIN_WATERMARK,
            all_idle_reported: false,
            active: 0,
            dirty: true,
            next_idle_check_ms: u64::MAX,
        }
    }

    /// Registers a partition at start/restore (every assigned partition is
    /// registered before its first record), optionally with its checkpointed
    /// max timestamp. `now_ms` = wall clock. The partition is active: until
    /// it has a record it holds the watermark at [`MIN_WATERMARK`] (or at its
    /// restored one) until `idle_timeout` passes. Registering a partition
    /// twice keeps the higher max timestamp, so its watermark never goes back.
    pub fn register(&mut self, topic: &str, partition: i32, max_ts: Option<i64>, now_ms: u64) {
        let clock = self.clock_mut(topic, partition, now_ms);
        clock.max_ts = clock.max_ts.max(max_ts);
        clock.last_activity_ms = now_ms;
        let was_idle = std::mem::replace(&mut clock.idle, false);
        if was_idle {
            self.active += 1;
        }
        self.dirty = true;
        self.idle_deadline_from(now_ms);
    }

    /// A record with event time `ts` arrived on the partition. An unknown
    /// partition is registered first (no panic on a caller's slip).
    pub fn on_record(&mut self, topic: &str, partition: i32, ts: i64, now_ms: u64) {
        let ooo = self.max_out_of_orderness_ms;
        let last_emitted = self.last_emitted;
        let clock = self.clock_mut(topic, partition, now_ms);
        let before = watermark_of(clock.max_ts, ooo);
        clock.max_ts = clock.max_ts.max(Some(ts));
        clock.last_activity_ms = now_ms;
        let was_idle = std::mem::replace(&mut clock.idle, false);
        let after = watermark_of(clock.max_ts, ooo);
        if was_idle {
            self.active += 1;
            self.dirty = true;
            self.idle_deadline_from(now_ms);
        } else if after != before && before <= last_emitted {
            // An active partition whose watermark was above the last emitted
            // one is counted and is not the minimum (the minimum equals the
            // last emitted watermark after each poll), so raising it cannot
            // move the minimum. Only a partition at or below it can.
            self.dirty = true;
        }
    }

    /// Per-partition watermark `W_p = max_ts_p - max_out_of_orderness - 1`
    /// (ms), [`MIN_WATERMARK`] before the first record (and for a partition
    /// that is not registered); never decreases.
    pub fn partition_watermark(&self, topic: &str, partition: i32) -> i64 {
        self.partitions
            .get(topic)
            .and_then(|t| t.get(&partition))
            .map_or(MIN_WATERMARK, |c| {
                watermark_of(c.max_ts, self.max_out_of_orderness_ms)
            })
    }

    /// The last watermark returned by [`poll`](Self::poll) (or
    /// [`MIN_WATERMARK`]).
    pub fn current(&self) -> i64 {
        self.last_emitted
    }

    /// Whether `Idle` was the last status reported.
    pub fn is_idle(&self) -> bool {
        self.all_idle_reported
    }

    /// Marks partitions idle after `idle_timeout` without records, and
    /// returns what to send downstream, in order, if anything changed:
    /// nothing; `[Watermark(w)]`; `[Idle]` when every partition is idle (or
    /// there are none), reported once; `[Active]` or `[Active, Watermark(w)]`
    /// when a partition becomes active after `Idle` was reported.
    ///
    /// The watermark is the minimum of `W_p` over the partitions that are
    /// active and have caught up (`W_p >=` the last emitted watermark): a
    /// partition that comes back from idleness behind the others does not
    /// pull the watermark back, and rejoins the minimum once it catches up
    /// (Flink's valve rule). Only increases are emitted.
    pub fn poll(&mut self, now_ms: u64) -> Vec<WatermarkUpdate> {
        let mut out = Vec::new();
        if self.idle_timeout_ms > 0 && now_ms >= self.next_idle_check_ms {
            self.mark_idle(now_ms);
        }
        if !self.dirty {
            return out;
        }
        self.dirty = false;
        if self.active == 0 {
            if !self.all_idle_reported {
                self.all_idle_reported = true;
                out.push(WatermarkUpdate::Idle);
            }
            return out;
        }
        if self.all_idle_reported {
            self.all_idle_reported = false;
            out.push(WatermarkUpdate::Active);
        }
        let ooo = self.max_out_of_orderness_ms;
        let min = self
            .partitions
            .values()
            .flat_map(|t| t.values())
            .filter(|c| !c.idle)
            .map(|c| watermark_of(c.max_ts, ooo))
            .filter(|&w| w >= self.last_emitted)
            .min();
        if let Some(w) = min.filter(|&w| w > self.last_emitted) {
            self.last_emitted = w;
            out.push(WatermarkUpdate::Watermark(w));
        }
        out
    }

    /// The max timestamp per partition, for checkpoints, in (topic,
    /// partition) order. [`register`](Self::register) takes them back.
    pub fn snapshot(&self) -> Vec<((String, i32), Option<i64>)> {
        self.partitions
            .iter()
            .flat_map(|(topic, t)| t.iter().map(move |(&p, c)| ((topic.clone(), p), c.max_ts)))
            .collect()
    }

    /// The clock of a partition, created (active, as of `now_ms`) if it is
    /// not known yet.
    fn clock_mut(&mut self, topic: &str, partition: i32, now_ms: u64) -> &mut PartitionClock {
        let known = self
            .partitions
            .get(topic)
            .is_some_and(|t| t.contains_key(&partition));
        if !known {
            self.active += 1;
            self.dirty = true;
            self.idle_deadline_from(now_ms);
            self.partitions.entry(topic.to_owned()).or_default().insert(
                partition,
                PartitionClock {
                    max_ts: None,
                    last_activity_ms: now_ms,
                    idle: false,
                },
            );
        }
        self.partitions
            .get_mut(topic)
            .and_then(|t| t.get_mut(&partition))
            .expect("the partition is known or was inserted above")
    }

    /// A partition became active at `now_ms`: it may become idle at
    /// `now_ms + idle_timeout`.
    fn idle_deadline_from(&mut self, now_ms: u64) {
        if self.idle_timeout_ms > 0 {
            let deadline = now_ms.saturating_add(self.idle_timeout_ms);
            self.next_idle_check_ms = self.next_idle_check_ms.min(deadline);
        }
    }

    /// Marks the partitions idle whose last activity is `idle_timeout` ago,
    /// and computes when the next one can be.
    fn mark_idle(&mut self, now_ms: u64) {
        let timeout = self.idle_timeout_ms;
        let mut next = u64::MAX;
        for clock in self.partitions.values_mut().flat_map(|t| t.values_mut()) {
            if clock.idle {
                continue;
            }
            // A wall clock that steps back counts as no time passing.
            if now_ms.saturating_sub(clock.last_activity_ms) >= timeout {
                clock.idle = true;
                self.active -= 1;
                self.dirty = true;
            } else {
                next = next.min(clock.last_activity_ms.saturating_add(timeout));
            }
        }
        self.next_idle_check_ms = next;
    }
}

/// `max_ts - max_out_of_orderness - 1`, saturating at [`MIN_WATERMARK`].
fn watermark_of(max_ts: Option<i64>, max_out_of_orderness_ms: i64) -> i64 {
    max_ts.map_or(MIN_WATERMARK, |m| {
        m.saturating_sub(max_out_of_orderness_ms).saturating_sub(1)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use WatermarkUpdate::{Active, Idle, Watermark};

    const T: &str = "t";

    #[test]
    fn partition_watermark_formula() {
        let mut s = SourceWatermarks::new(100, 0);
        s.register(T, 0, None, 0);
        assert_eq!(s.partition_watermark(T, 0), MIN_WATERMARK);
        s.on_record(T, 0, 1000, 0);
        assert_eq!(s.partition_watermark(T, 0), 899);
        // An older record does not move it back.
        s.on_record(T, 0, 500, 0);
        assert_eq!(s.partition_watermark(T, 0), 899);
        s.on_record(T, 0, -50, 0);
        assert_eq!(s.partition_watermark(T, 0), 899);
        s.on_record(T, 0, 1001, 0);
        assert_eq!(s.partition_watermark(T, 0), 900);
        assert_eq!(s.partition_watermark(T, 9), MIN_WATERMARK);
        assert_eq!(s.partition_watermark("other", 0), MIN_WATERMARK);
        // Negative times and no out-of-orderness.
        let mut z = SourceWatermarks::new(0, 0);
        z.on_record(T, 0, -10, 0);
        assert_eq!(z.partition_watermark(T, 0), -11);
        // Saturates instead of overflowing.
        z.on_record(T, 1, i64::MIN, 0);
        assert_eq!(z.partition_watermark(T, 1), MIN_WATERMARK);
        // A negative bound is treated as 0.
        let mut n = SourceWatermarks::new(-5, 0);
        n.on_record(T, 0, 10, 0);
        assert_eq!(n.partition_watermark(T, 0), 9);
    }

    #[test]
    fn minimum_over_partitions() {
        let mut s = SourceWatermarks::new(0, 0);
        s.register(T, 0, None, 0);
        s.register(T, 1, None, 0);
        assert_eq!(s.poll(0), vec![]);
        s.on_record(T, 0, 100, 1);
        // Partition 1 has no record yet: it holds the watermark back.
        assert_eq!(s.poll(1), vec![]);
        s.on_record(T, 1, 50, 2);
        assert_eq!(s.poll(2), vec![Watermark(49)]);
        s.on_record(T, 1, 200, 3);
        assert_eq!(s.poll(3), vec![Watermark(99)]);
        // Nothing changed, nothing to say.
        assert_eq!(s.poll(4), vec![]);
        s.on_record(T, 1, 300, 5);
        assert_eq!(s.poll(5), vec![]);
        s.on_record(T, 0, 400, 6);
        assert_eq!(s.poll(6), vec![Watermark(299)]);
        assert_eq!(s.current(), 299);
    }

    #[test]
    fn idle_partition_leaves_the_minimum_and_rejoins_when_caught_up() {
        let mut s = SourceWatermarks::new(0, 1000);
        s.register(T, 0, None, 0);
        s.register(T, 1, None, 0);
        s.on_record(T, 0, 100, 0);
        s.on_record(T, 1, 50, 0);
        assert_eq!(s.poll(0), vec![Watermark(49)]);
        s.on_record(T, 0, 500, 600);
        assert_eq!(s.poll(600), vec![]);
        // Partition 1 is silent for the timeout: it leaves the minimum.
        assert_eq!(s.poll(999), vec![]);
        assert_eq!(s.poll(1000), vec![Watermark(499)]);
        // It comes back behind: active, but not counted, no regress.
        s.on_record(T, 1, 300, 1100);
        assert_eq!(s.poll(1100), vec![]);
        assert_eq!(s.current(), 499);
        s.on_record(T, 0, 900, 1200);
        assert_eq!(s.poll(1200), vec![Watermark(899)]);
        // Partition 1 catches up: it rejoins and now holds the minimum.
        s.on_record(T, 1, 950, 1300);
        assert_eq!(s.poll(1300), vec![]);
        s.on_record(T, 0, 2000, 1400);
        assert_eq!(s.poll(1400), vec![Watermark(949)]);
        s.on_record(T, 1, 3000, 1500);
        assert_eq!(s.poll(1500), vec![Watermark(1999)]);
    }

    #[test]
    fn all_idle_then_active() {
        let mut s = SourceWatermarks::new(10, 100);
        s.register(T, 0, None, 0);
        s.register(T, 1, None, 0);
        s.on_record(T, 0, 1000, 0);
        s.on_record(T, 1, 2000, 50);
        assert_eq!(s.poll(50), vec![Watermark(989)]);
        assert_eq!(s.poll(100), vec![Watermark(1989)]);
        assert_eq!(s.poll(150), vec![Idle]);
        assert!(s.is_idle());
        // Reported once.
        assert_eq!(s.poll(500), vec![]);
        // A record behind the emitted watermark: active again, no watermark.
        s.on_record(T, 0, 1500, 600);
        assert_eq!(s.poll(600), vec![Active]);
        assert_eq!(s.poll(650), vec![]);
        assert_eq!(s.poll(700), vec![Idle]);
        // A record ahead: active and a watermark in the same poll.
        s.on_record(T, 1, 5000, 800);
        assert_eq!(s.poll(800), vec![Active, Watermark(4989)]);
    }

    #[test]
    fn silent_partition_holds_back_until_idle() {
        let mut s = SourceWatermarks::new(0, 1000);
        s.register(T, 0, None, 0);
        s.register(T, 1, None, 0);
        s.on_record(T, 0, 100, 10);
        assert_eq!(s.poll(10), vec![]);
        assert_eq!(s.poll(999), vec![]);
        assert_eq!(s.poll(1000), vec![Watermark(99)]);
        // Partition 0 keeps going; partition 0's own timeout counts from its
        // last record.
        assert_eq!(s.poll(1009), vec![]);
        assert_eq!(s.poll(1010), vec![Idle]);
    }

    #[test]
    fn no_partitions_is_idle() {
        let mut s = SourceWatermarks::new(0, 0);
        assert_eq!(s.poll(0), vec![Idle]);
        assert_eq!(s.poll(1), vec![]);
        s.register(T, 0, Some(10), 2);
        assert_eq!(s.poll(2), vec![Active, Watermark(9)]);
    }

    #[test]
    fn never_idle_with_zero_timeout() {
        let mut s = SourceWatermarks::new(0, 0);
        s.register(T, 0, None, 0);
        s.register(T, 1, None, 0);
        s.on_record(T, 0, 100, 0);
        assert_eq!(s.poll(u64::MAX), vec![]);
        assert!(!s.is_idle());
    }

    #[test]
    fn wall_clock_stepping_back() {
        let mut s = SourceWatermarks::new(0, 100);
        s.register(T, 0, None, 1000);
        assert_eq!(s.poll(500), vec![]);
        assert_eq!(s.poll(1099), vec![]);
        assert_eq!(s.poll(1100), vec![Idle]);
    }

    #[test]
    fn unregistered_partition_is_registered_by_its_record() {
        let mut s = SourceWatermarks::new(0, 0);
        s.on_record("x", 3, 10, 0);
        assert_eq!(s.poll(0), vec![Watermark(9)]);
        assert_eq!(s.snapshot(), vec![(("x".to_string(), 3), Some(10))]);
    }

    #[test]
    fn snapshot_and_register_round_trip() {
        let mut s = SourceWatermarks::new(5, 1000);
        s.register("b", 1, None, 0);
        s.register("a", 2, None, 0);
        s.register("a", 0, None, 0);
        s.on_record("a", 2, 700, 0);
        s.on_record("a", 0, -300, 0);
        assert_eq!(s.poll(0), vec![]);
        let snap = s.snapshot();
        assert_eq!(
            snap,
            vec![
                (("a".to_string(), 0), Some(-300)),
                (("a".to_string(), 2), Some(700)),
                (("b".to_string(), 1), None),
            ]
        );
        let mut r = SourceWatermarks::new(5, 1000);
        for ((topic, p), max_ts) in &snap {
            r.register(topic, *p, *max_ts, 50);
        }
        assert_eq!(r.snapshot(), snap);
        for ((topic, p), _) in &snap {
            assert_eq!(
                r.partition_watermark(topic, *p),
                s.partition_watermark(topic, *p)
            );
        }
        // b/1 never had a record: it holds back until it is idle.
        assert_eq!(r.poll(50), vec![]);
        assert_eq!(r.poll(1050), vec![Idle]);
        // Registering again with an older max keeps the higher one.
        r.register("a", 2, Some(100), 2000);
        assert_eq!(r.partition_watermark("a", 2), 694);
        assert_eq!(r.poll(2000), vec![Active, Watermark(694)]);
    }

    /// A plain restatement of the rules that recomputes everything on every
    /// poll, to check the incremental bookkeeping against.
    #[derive(Default)]
    struct Model {
        parts: BTreeMap<i32, (Option<i64>, u64, bool)>,
        ooo: i64,
        timeout: u64,
        last: i64,
        idle_reported: bool,
    }

    impl Model {
        fn touch(&mut self, p: i32, ts: Option<i64>, now: u64) {
            let e = self.parts.entry(p).or_insert((None, now, false));
            e.0 = e.0.max(ts);
            e.1 = now;
            e.2 = false;
        }
        fn poll(&mut self, now: u64) -> Vec<WatermarkUpdate> {
            for e in self.parts.values_mut() {
                if self.timeout > 0 && now.saturating_sub(e.1) >= self.timeout {
                    e.2 = true;
                }
            }
            let mut out = vec![];
            if self.parts.values().all(|e| e.2) {
                if !self.idle_reported {
                    self.idle_reported = true;
                    out.push(Idle);
                }
                return out;
            }
            if self.idle_reported {
                self.idle_reported = false;
                out.push(Active);
            }
            let min = self
                .parts
                .values()
                .filter(|e| !e.2)
                .map(|e| watermark_of(e.0, self.ooo))
                .filter(|&w| w >= self.last)
                .min();
            if let Some(w) = min {
                if w > self.last {
                    self.last = w;
                    out.push(Watermark(w));
                }
            }
            out
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Register(i32, Option<i64>),
        Record(i32, i64),
        Poll,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            1 => (0..4i32, proptest::option::of(-50..50i64)).prop_map(|(p, m)| Op::Register(p, m)),
            6 => (0..4i32, -100..100i64).prop_map(|(p, t)| Op::Record(p, t)),
            4 => Just(Op::Poll),
        ]
    }

    proptest! {
        #[test]
        fn incremental_matches_model(
            ooo in 0..20i64,
            timeout in prop_oneof![Just(0u64), 1..30u64],
            ops in proptest::collection::vec((op(), 0..10u64), 0..120),
        ) {
            let mut s = SourceWatermarks::new(ooo, timeout);
            let mut m = Model { ooo, timeout, last: MIN_WATERMARK, ..Model::default() };
            let mut now = 0;
            for (op, dt) in ops {
                now += dt;
                match op {
                    Op::Register(p, max) => {
                        s.register(T, p, max, now);
                        m.touch(p, max, now);
                    }
                    Op::Record(p, ts) => {
                        s.on_record(T, p, ts, now);
                        m.touch(p, Some(ts), now);
                    }
                    Op::Poll => {
                        let got = s.poll(now);
                        prop_assert_eq!(&got, &m.poll(now));
                    }
                }
                for (&p, e) in &m.parts {
                    prop_assert_eq!(s.partition_watermark(T, p), watermark_of(e.0, ooo));
                }
            }
            prop_assert_eq!(s.poll(now), m.poll(now));
        }
    }
}
