//! Which windows a record belongs to.
//!
//! Windows are half-open intervals `[start, end)` of event time in
//! milliseconds. Tumbling and hopping windows are aligned to
//! `offset + k * slide` for whole `k`, also before 1970: the start is computed
//! with a Euclidean remainder, because Java's `%` (which Flink and Kafka
//! Streams use) puts a negative time in the window after the right one.

/// A window of event time: `[start, end)`, in ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Window {
    pub start: i64,
    pub end: i64,
}

impl Window {
    /// Whether `ts` lies in `[start, end)`.
    pub fn contains(&self, ts: i64) -> bool {
        self.start <= ts && ts < self.end
    }

    /// The last millisecond in the window, `end - 1`: the window is complete
    /// when the watermark reaches it (a watermark `w` promises no more
    /// records at or below `w`).
    pub fn max_timestamp(&self) -> i64 {
        self.end.saturating_sub(1)
    }
}

/// The most windows one record may belong to (`ceil(size / slide)` of a
/// hopping window): more would multiply every record into a flood of state
/// updates, and is surely a slip in the configuration.
pub const MAX_WINDOWS_PER_RECORD: i64 = 10_000;

/// How records are grouped into windows. All lengths are in ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowSpec {
    /// Fixed-size, non-overlapping windows starting at `offset + k * size`.
    Tumbling { size: i64, offset: i64 },
    /// Fixed-size windows starting every `slide` ms at `offset + k * slide`;
    /// they overlap when `slide < size` and leave gaps when `slide > size`.
    Hopping { size: i64, slide: i64, offset: i64 },
    /// Per-key windows that grow while records arrive less than `gap` apart
    /// (see [`super::session`]).
    Session { gap: i64 },
    /// Windows that grow by `step` from the start of each `size` period
    /// (`offset + k * size`): `[start, start + step)`, `[start, start + 2 step)`,
    /// ... up to `[start, start + size)` (SQL's CUMULATE). `size` is a
    /// multiple of `step`.
    Cumulate { size: i64, step: i64, offset: i64 },
}

impl WindowSpec {
    /// Checks the spec when the job is configured, so that [`assign`] has
    /// nothing to complain about per record. `offset` may be any value
    /// (only its remainder modulo the slide matters).
    pub fn validate(&self) -> Result<(), String> {
        match *self {
            Self::Tumbling { size, .. } if size <= 0 => {
                Err(format!("the window size must be positive, not {size} ms"))
            }
            Self::Tumbling { .. } => Ok(()),
            Self::Hopping { size, .. } if size <= 0 => {
                Err(format!("the window size must be positive, not {size} ms"))
            }
            Self::Hopping { slide, .. } if slide <= 0 => {
                Err(format!("the window slide must be positive, not {slide} ms"))
            }
            Self::Hopping { size, slide, .. } => {
                let per_record = ceil_div(size, slide);
                if per_record > MAX_WINDOWS_PER_RECORD {
                    Err(format!(
                        "a window of {size} ms every {slide} ms puts each record in \
                         {per_record} windows; at most {MAX_WINDOWS_PER_RECORD} are allowed"
                    ))
                } else {
                    Ok(())
                }
            }
            Self::Session { gap } if gap <= 0 => {
                Err(format!("the session gap must be positive, not {gap} ms"))
            }
            Self::Session { .. } => Ok(()),
            Self::Cumulate { size, step, .. } if size <= 0 || step <= 0 || size % step != 0 => {
                Err(format!(
                    "a cumulating window's step and size must be positive and the size a multiple \
                     of the step, not a step of {step} ms and a size of {size} ms"
                ))
            }
            Self::Cumulate { size, step, .. } if size / step > MAX_WINDOWS_PER_RECORD => {
                Err(format!(
                    "a window of {size} ms growing by {step} ms puts a record in up to {} \
                     windows; at most {MAX_WINDOWS_PER_RECORD} are allowed",
                    size / step
                ))
            }
            Self::Cumulate { .. } => Ok(()),
        }
    }
}

/// The start of the window of `slide` ms aligned to `offset` that holds
/// `ts`: `ts - rem_euclid(ts - offset, slide)`, computed without overflow.
/// `None` if `slide <= 0` or the start would lie below `i64::MIN`.
pub fn checked_window_start(ts: i64, offset: i64, slide: i64) -> Option<i64> {
    if slide <= 0 {
        return None;
    }
    i64::try_from(start_i128(ts, offset, slide)).ok()
}

/// As [`checked_window_start`], for callers that know their inputs are sane
/// (a validated spec and an extracted event time, which lies within ±year
/// 9999): instead of failing it saturates at `i64::MIN`, and returns `ts`
/// itself when `slide <= 0`, rather than panicking.
pub fn window_start(ts: i64, offset: i64, slide: i64) -> i64 {
    if slide <= 0 {
        return ts;
    }
    start_i128(ts, offset, slide).max(i128::from(i64::MIN)) as i64
}

/// `ceil(a / b)` for `a >= 0`, `b > 0` (`i64::div_ceil` is not stable).
fn ceil_div(a: i64, b: i64) -> i64 {
    a / b + i64::from(a % b != 0)
}

fn start_i128(ts: i64, offset: i64, slide: i64) -> i128 {
    let ts = i128::from(ts);
    ts - (ts - i128::from(offset)).rem_euclid(i128::from(slide))
}

/// Every window a record at `ts` belongs to, ordered by start: tumbling
/// exactly one; hopping every window with `start <= ts < start + size`, i.e.
/// `ceil(size / slide)` windows or fewer (none in the gaps when
/// `slide > size`); session the proto-window `[ts, ts + gap)`, which
/// [`super::session::merge`] then merges with the key's sessions.
///
/// No panics and no overflow: a window whose start or end does not fit in an
/// `i64` is left out (so a record within one window length of `i64::MIN` or
/// `i64::MAX` gets fewer windows, possibly none; extracted event times are
/// nowhere near), and a spec that [`WindowSpec::validate`] rejects yields no
/// windows.
pub fn assign(spec: &WindowSpec, ts: i64) -> Vec<Window> {
    if spec.validate().is_err() {
        return Vec::new();
    }
    match *spec {
        WindowSpec::Tumbling { size, offset } => sliding(ts, size, size, offset),
        WindowSpec::Hopping {
            size,
            slide,
            offset,
        } => sliding(ts, size, slide, offset),
        WindowSpec::Session { gap } => ts
            .checked_add(gap)
            .map(|end| vec![Window { start: ts, end }])
            .unwrap_or_default(),
        WindowSpec::Cumulate { size, step, offset } => {
            let Some(start) = checked_window_start(ts, offset, size) else {
                return Vec::new();
            };
            (1..=size / step)
                .filter_map(|k| start.checked_add(k * step))
                .filter(|end| *end > ts)
                .map(|end| Window { start, end })
                .collect()
        }
    }
}

/// The windows of `size` starting every `slide` at `offset` that hold `ts`.
/// `size` and `slide` are positive; the arithmetic is in i128, where none of
/// it can overflow.
fn sliding(ts: i64, size: i64, slide: i64, offset: i64) -> Vec<Window> {
    let (ts, size, slide) = (i128::from(ts), i128::from(size), i128::from(slide));
    let last = ts - (ts - i128::from(offset)).rem_euclid(slide);
    // Starts are last, last - slide, ... while start > ts - size.
    let span = last - (ts - size) - 1;
    if span < 0 {
        return Vec::new(); // ts falls in a gap between windows
    }
    let mut start = last - span / slide * slide;
    let mut out = Vec::with_capacity((span / slide + 1) as usize);
    while start <= last {
        if let (Ok(s), Ok(e)) = (i64::try_from(start), i64::try_from(start + size)) {
            out.push(Window { start: s, end: e });
        }
        start += slide;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Every aligned start in a range around `ts`, tested for membership
    /// the slow way. Alignment uses `%` only to test divisibility, where its
    /// sign does not matter.
    fn brute_force(ts: i64, size: i64, slide: i64, offset: i64) -> Vec<Window> {
        (ts - size - 2 * slide..=ts + 2 * slide)
            .filter(|s| (s - offset) % slide == 0)
            .map(|s| Window {
                start: s,
                end: s + size,
            })
            .filter(|w| w.start <= ts && ts < w.end)
            .collect()
    }

    /// Timestamps anywhere, at 0, and at and around window boundaries.
    fn pick_ts(choice: u8, raw: i64, k: i64, which: u8, size: i64, slide: i64, offset: i64) -> i64 {
        let start = offset + k * slide;
        match choice {
            0 => raw,
            1 => 0,
            _ => match which {
                0 => start,
                1 => start - 1,
                2 => start + size - 1,
                _ => start + size,
            },
        }
    }

    proptest! {
        #[test]
        fn tumbling_matches_brute_force(
            size in 1..10_000i64, offset in 1..10_000i64,
            choice in 0..4u8, raw in -1_000_000..1_000_000i64, k in -1000..1000i64, which in 0..4u8,
        ) {
            let ts = pick_ts(choice, raw, k, which, size, size, offset);
            let got = assign(&WindowSpec::Tumbling { size, offset }, ts);
            prop_assert_eq!(got.len(), 1);
            prop_assert!(got[0].contains(ts));
            prop_assert_eq!(&got, &brute_force(ts, size, size, offset));
            prop_assert_eq!(got[0].start, window_start(ts, offset, size));
            prop_assert_eq!(Some(got[0].start), checked_window_start(ts, offset, size));
            // Negative offsets and offsets beyond the size align the same.
            prop_assert_eq!(window_start(ts, offset - 3 * size, size), got[0].start);
        }

        #[test]
        fn hopping_matches_brute_force(
            size in 1..10_000i64, slide in 1..10_000i64, offset in 1..10_000i64,
            choice in 0..4u8, raw in -1_000_000..1_000_000i64, k in -1000..1000i64, which in 0..4u8,
        ) {
            let ts = pick_ts(choice, raw, k, which, size, slide, offset);
            let got = assign(&WindowSpec::Hopping { size, slide, offset }, ts);
            prop_assert_eq!(&got, &brute_force(ts, size, slide, offset));
            for w in &got {
                prop_assert!(w.contains(ts));
                prop_assert_eq!(w.end - w.start, size);
                prop_assert_eq!((w.start - offset).rem_euclid(slide), 0);
            }
            prop_assert!(got.windows(2).all(|p| p[1].start - p[0].start == slide));
            // ceil(size/slide) windows when alignment allows: with ts at
            // distance r past the latest start, ceil((size - r) / slide).
            let ceil = ceil_div(size, slide);
            let r = (ts - offset).rem_euclid(slide);
            let expected = if r >= size { 0 } else { ceil_div(size - r, slide) };
            prop_assert_eq!(got.len() as i64, expected);
            prop_assert!(got.len() as i64 <= ceil);
            if r == 0 || size % slide == 0 {
                prop_assert_eq!(got.len() as i64, ceil);
            }
        }

        #[test]
        fn session_proto_window(gap in 1..10_000i64, ts in -1_000_000..1_000_000i64) {
            prop_assert_eq!(
                assign(&WindowSpec::Session { gap }, ts),
                vec![Window { start: ts, end: ts + gap }]
            );
        }

        /// Near the bounds of i64 nothing panics, every window returned is
        /// right, and exactly the unrepresentable ones are left out.
        #[test]
        fn extremes(
            size in prop_oneof![1..100i64, Just(i64::MAX)],
            slide in prop_oneof![1..100i64, Just(i64::MAX)],
            offset in prop_oneof![Just(0i64), Just(i64::MIN), Just(i64::MAX), -100..100i64],
            near in 0..50i64, low in any::<bool>(),
        ) {
            let ts = if low { i64::MIN + near } else { i64::MAX - near };
            for spec in [
                WindowSpec::Tumbling { size, offset },
                WindowSpec::Hopping { size, slide, offset },
                WindowSpec::Session { gap: size },
            ] {
                let got = assign(&spec, ts);
                if spec.validate().is_err() {
                    // Too many windows per record: refused, not computed.
                    prop_assert!(ceil_div(size, slide) > MAX_WINDOWS_PER_RECORD);
                    prop_assert_eq!(got, vec![]);
                    continue;
                }
                for w in &got {
                    prop_assert!(w.contains(ts));
                }
                prop_assert!(got.windows(2).all(|p| (p[0].start, p[0].end) < (p[1].start, p[1].end)));
                let (size, slide, offset) = match spec {
                    WindowSpec::Tumbling { size, offset } => (size, size, offset),
                    WindowSpec::Hopping { size, slide, offset } => (size, slide, offset),
                    WindowSpec::Session { gap } => {
                        prop_assert_eq!(got.len(), usize::from(ts.checked_add(gap).is_some()));
                        continue;
                    }
                    WindowSpec::Cumulate { .. } => continue,
                };
                // The windows that exist mathematically, in i128.
                let (t, sz, sl) = (i128::from(ts), i128::from(size), i128::from(slide));
                let last = t - (t - i128::from(offset)).rem_euclid(sl);
                let mut want = vec![];
                let mut s = last;
                while s > t - sz {
                    if s >= i128::from(i64::MIN) && s + sz <= i128::from(i64::MAX) {
                        want.push(Window { start: s as i64, end: (s + sz) as i64 });
                    }
                    s -= sl;
                }
                want.reverse();
                prop_assert_eq!(got, want);
            }
        }
    }

    #[test]
    fn negative_times_use_the_euclidean_remainder() {
        // Java's % would give -1000 + 1 = ... the window [0, 1000) for -1.
        assert_eq!(window_start(-1, 0, 1000), -1000);
        assert_eq!(window_start(-1000, 0, 1000), -1000);
        assert_eq!(window_start(-1001, 0, 1000), -2000);
        assert_eq!(window_start(999, 0, 1000), 0);
        assert_eq!(window_start(5, 3, 10), 3);
        assert_eq!(window_start(2, 3, 10), -7);
        assert_eq!(
            assign(
                &WindowSpec::Tumbling {
                    size: 1000,
                    offset: 0
                },
                -1
            ),
            vec![Window {
                start: -1000,
                end: 0
            }]
        );
    }

    #[test]
    fn hopping_literal() {
        let spec = WindowSpec::Hopping {
            size: 10,
            slide: 5,
            offset: 0,
        };
        assert_eq!(
            assign(&spec, 7),
            vec![Window { start: 0, end: 10 }, Window { start: 5, end: 15 }]
        );
        assert_eq!(
            assign(&spec, -1),
            vec![Window { start: -10, end: 0 }, Window { start: -5, end: 5 }]
        );
        // Gaps when the slide is longer than the size.
        let sampling = WindowSpec::Hopping {
            size: 3,
            slide: 10,
            offset: 0,
        };
        assert_eq!(assign(&sampling, 2), vec![Window { start: 0, end: 3 }]);
        assert_eq!(assign(&sampling, 3), vec![]);
        // Size not a multiple of the slide: 3 or 2 windows.
        let uneven = WindowSpec::Hopping {
            size: 10,
            slide: 4,
            offset: 0,
        };
        assert_eq!(assign(&uneven, 8).len(), 3);
        assert_eq!(assign(&uneven, 11).len(), 2);
    }

    #[test]
    fn edge_helpers() {
        assert_eq!(checked_window_start(i64::MIN, 1, 10), None);
        assert_eq!(window_start(i64::MIN, 1, 10), i64::MIN);
        assert_eq!(checked_window_start(5, 0, 0), None);
        assert_eq!(window_start(5, 0, 0), 5);
        assert_eq!(window_start(5, 0, -3), 5);
        assert_eq!(checked_window_start(i64::MAX, 0, i64::MAX), Some(i64::MAX));
        assert_eq!(checked_window_start(i64::MIN, i64::MIN, 10), Some(i64::MIN));
        // Aligned to ..., -MAX, 0, MAX: the start for MIN is -2 * MAX.
        assert_eq!(checked_window_start(i64::MIN, i64::MAX, i64::MAX), None);
        let w = Window { start: 0, end: 10 };
        assert!(w.contains(0) && w.contains(9) && !w.contains(10) && !w.contains(-1));
        assert_eq!(w.max_timestamp(), 9);
        // Tumbling at the top: [MAX - rem, ...) would end beyond i64::MAX.
        assert_eq!(
            assign(
                &WindowSpec::Tumbling {
                    size: 10,
                    offset: 0
                },
                i64::MAX
            ),
            vec![]
        );
        assert_eq!(assign(&WindowSpec::Session { gap: 1 }, i64::MAX), vec![]);
    }

    #[test]
    fn invalid_specs() {
        let bad = [
            WindowSpec::Tumbling { size: 0, offset: 0 },
            WindowSpec::Tumbling {
                size: -5,
                offset: 0,
            },
            WindowSpec::Hopping {
                size: 10,
                slide: 0,
                offset: 0,
            },
            WindowSpec::Hopping {
                size: 0,
                slide: 1,
                offset: 0,
            },
            WindowSpec::Hopping {
                size: i64::MAX,
                slide: 1,
                offset: 0,
            },
            WindowSpec::Session { gap: 0 },
        ];
        for spec in bad {
            assert!(spec.validate().is_err(), "{spec:?}");
            assert_eq!(assign(&spec, 0), vec![], "{spec:?}");
        }
        assert_eq!(
            WindowSpec::Hopping {
                size: 100_000,
                slide: 1,
                offset: 0
            }
            .validate()
            .unwrap_err(),
            "a window of 100000 ms every 1 ms puts each record in 100000 windows; \
             at most 10000 are allowed"
        );
        assert!(WindowSpec::Hopping {
            size: 10_000,
            slide: 1,
            offset: -7
        }
        .validate()
        .is_ok());
    }

    #[test]
    fn cumulating_windows_grow_by_their_step_within_their_size() {
        let spec = WindowSpec::Cumulate {
            size: 10,
            step: 2,
            offset: 0,
        };
        assert_eq!(spec.validate(), Ok(()));
        let ends: Vec<i64> = assign(&spec, 13).iter().map(|w| w.end).collect();
        assert_eq!(ends, vec![14, 16, 18, 20]);
        assert!(assign(&spec, 13).iter().all(|w| w.start == 10));
        assert_eq!(assign(&spec, 10).len(), 5);
        assert!(WindowSpec::Cumulate {
            size: 10,
            step: 3,
            offset: 0
        }
        .validate()
        .is_err());
    }
}
