//! The calendar of TIMESTAMP(3) values: milliseconds since 1970 at UTC
//! as `jiff`'s civil date and time, and back; and TIMESTAMP_LTZ's
//! instants as the wall-clock times a time zone shows, and back.

use jiff::civil::DateTime;
use jiff::tz::{Offset, TimeZone};

use super::super::compiled::{Compiled, Ty};
use super::compose::fold_if;
use crate::dataflow::row::{DataType, Value};

/// A UTC instant's calendar date and time; Err outside jiff's years
/// (-9999 to 9999).
pub fn civil(ms: i64) -> Result<DateTime, String> {
    let t = jiff::Timestamp::from_millisecond(ms)
        .map_err(|_| format!("{ms} ms since 1970 is outside the years -9999 to 9999"))?;
    Ok(Offset::UTC.to_datetime(t))
}

/// A calendar date and time at UTC, in milliseconds since 1970.
pub fn instant(dt: DateTime) -> Result<i64, String> {
    Offset::UTC
        .to_timestamp(dt)
        .map(|t| t.as_millisecond())
        .map_err(|e| e.to_string())
}

/// `ms` moved by `months` on the calendar, the day clamped to the month's
/// last (java.time's plusMonths, and Flink's).
pub fn add_months(ms: i64, months: i64) -> Result<i64, String> {
    let overflow = || format!("{months} months from {ms} ms overflows");
    let span = jiff::Span::new()
        .try_months(months)
        .map_err(|_| overflow())?;
    let moved = civil(ms)?.checked_add(span).map_err(|_| overflow())?;
    instant(moved)
}

/// The wall-clock time in `zone` of the instant `ms` (a TIMESTAMP_LTZ's
/// milliseconds), as a TIMESTAMP's milliseconds: what a TIMESTAMP_LTZ
/// shows in the session time zone.
pub fn local_ms(zone: &TimeZone, ms: i64) -> Result<i64, String> {
    let t = jiff::Timestamp::from_millisecond(ms)
        .map_err(|_| format!("{ms} ms since 1970 is outside the years -9999 to 9999"))?;
    instant(zone.to_datetime(t))
}

/// The instant at which `zone`'s clocks show the wall-clock time `ms` (a
/// TIMESTAMP's milliseconds). A time the clocks skip (a spring-forward
/// gap) or show twice (a fall-back fold) is resolved as Java's
/// `ZonedDateTime.of` and Flink do: the later offset in a gap, the earlier
/// in a fold.
pub fn zoned_ms(zone: &TimeZone, ms: i64) -> Result<i64, String> {
    let dt = civil(ms)?;
    zone.to_ambiguous_timestamp(dt)
        .compatible()
        .map(|t| t.as_millisecond())
        .map_err(|e| e.to_string())
}

/// As [`zoned_ms`], keeping the offset `zone` had at the instant `at`
/// where the wall-clock time `ms` is shown twice (java.time's rule for a
/// `ZonedDateTime` moved on its wall clock: `FLOOR(ltz TO HOUR)` in the
/// second 01:30 of a fall-back night is its second 01:00).
pub fn zoned_ms_near(zone: &TimeZone, ms: i64, at: i64) -> Result<i64, String> {
    use jiff::tz::AmbiguousOffset;
    let dt = civil(ms)?;
    let ambiguous = zone.to_ambiguous_timestamp(dt);
    if let AmbiguousOffset::Fold { before, after } = ambiguous.offset() {
        let then = jiff::Timestamp::from_millisecond(at).map_err(|e| e.to_string())?;
        let kept = zone.to_offset(then);
        if kept == before || kept == after {
            return kept
                .to_timestamp(dt)
                .map(|t| t.as_millisecond())
                .map_err(|e| e.to_string());
        }
    }
    ambiguous
        .compatible()
        .map(|t| t.as_millisecond())
        .map_err(|e| e.to_string())
}

/// `result`, a TIMESTAMP computed from the wall-clock time of the
/// TIMESTAMP_LTZ `from` (a function over TIMESTAMPs called with one), as
/// the TIMESTAMP_LTZ at which `zone` shows it, near `from`'s offset.
pub fn back_to_zoned(result: Compiled, from: &Compiled, zone: &TimeZone) -> Compiled {
    let (eval, at, zone) = (result.eval, from.eval.clone(), zone.clone());
    let constant = result.constant.is_some();
    fold_if(
        constant,
        Compiled::new(Ty::Data(DataType::TimestampLtz), move |row| {
            match (eval(row)?, at(row)?) {
                (Value::Timestamp(ms), Value::Timestamp(at)) => {
                    zoned_ms_near(&zone, ms, at).map(Value::Timestamp)
                }
                (Value::Timestamp(ms), _) => zoned_ms(&zone, ms).map(Value::Timestamp),
                (other, _) => Ok(other),
            }
        }),
    )
}

/// `c`, a TIMESTAMP_LTZ, as the TIMESTAMP `zone` shows.
pub fn to_local(c: Compiled, zone: &TimeZone) -> Compiled {
    convert(c, zone, DataType::Timestamp, local_ms)
}

/// `c`, a TIMESTAMP, as the TIMESTAMP_LTZ at which `zone` shows it.
pub fn to_zoned(c: Compiled, zone: &TimeZone) -> Compiled {
    convert(c, zone, DataType::TimestampLtz, zoned_ms)
}

fn convert(
    c: Compiled,
    zone: &TimeZone,
    to: DataType,
    f: fn(&TimeZone, i64) -> Result<i64, String>,
) -> Compiled {
    let (eval, zone, constant) = (c.eval, zone.clone(), c.constant.is_some());
    fold_if(
        constant,
        Compiled::new(Ty::Data(to), move |row| match eval(row)? {
            Value::Timestamp(ms) => f(&zone, ms).map(Value::Timestamp),
            other => Ok(other),
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instants_and_wall_clocks_in_a_zone_with_daylight_saving() {
        let ny = TimeZone::get("America/New_York").unwrap();
        let ms = |s: &str| instant(s.parse().unwrap()).unwrap();
        // Winter: UTC-5.
        assert_eq!(
            local_ms(&ny, ms("2026-12-07T12:00")),
            Ok(ms("2026-12-07T07:00"))
        );
        assert_eq!(
            zoned_ms(&ny, ms("2026-12-07T07:00")),
            Ok(ms("2026-12-07T12:00"))
        );
        // 2026-03-08 02:30 does not exist in New York: the later offset
        // (EDT, UTC-4) applies, as java.time's does.
        assert_eq!(
            zoned_ms(&ny, ms("2026-03-08T02:30")),
            Ok(ms("2026-03-08T07:30"))
        );
        // 2026-11-01 01:30 happens twice: the earlier (EDT) is taken.
        assert_eq!(
            zoned_ms(&ny, ms("2026-11-01T01:30")),
            Ok(ms("2026-11-01T05:30"))
        );
        // The second 01:30 of that night (EST) keeps its offset.
        assert_eq!(
            zoned_ms_near(&ny, ms("2026-11-01T01:00"), ms("2026-11-01T06:30")),
            Ok(ms("2026-11-01T06:00"))
        );
        assert_eq!(
            zoned_ms_near(&ny, ms("2026-11-01T01:00"), ms("2026-11-01T05:30")),
            Ok(ms("2026-11-01T05:00"))
        );
        let kolkata = TimeZone::get("Asia/Kolkata").unwrap();
        assert_eq!(
            local_ms(&kolkata, ms("2026-12-07T00:00")),
            Ok(ms("2026-12-07T05:30"))
        );
    }
}
