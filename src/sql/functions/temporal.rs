//! Temporal functions over TIMESTAMP(3) (milliseconds, UTC). Calendar
//! arithmetic (months of different lengths, ISO weeks, leap years) is
//! `jiff`'s; date patterns are Java's letters, as Flink's.

use jiff::civil::DateTime;

use super::super::compiled::{Compiled, Ty};
use super::calendar::{add_months, civil, instant, local_ms, zoned_ms};
use super::compose::{constant_text, int, strict, text, Outcome};
use super::definition::{Call, Function};
use super::patterns::{format_pattern, java_pattern, parse_pattern};
use super::signature::{constant, optional, p, Kind::*};
use crate::dataflow::json::parse_timestamp;
use crate::dataflow::row::{DataType as T, Value};

pub const FUNCTIONS: &[Function] = &[
    Function::new("YEAR", &[p("t", Timestamp)], "BIGINT", part).doc(
        "the year of `t`; also `EXTRACT(YEAR FROM t)`",
        "YEAR(TIMESTAMP '2026-12-07 10:30:00')",
        "2026",
    ),
    Function::new("QUARTER", &[p("t", Timestamp)], "BIGINT", part).doc(
        "the quarter of the year of `t`, 1 to 4",
        "QUARTER(TIMESTAMP '2026-12-07 10:30:00')",
        "4",
    ),
    Function::new("MONTH", &[p("t", Timestamp)], "BIGINT", part).doc(
        "the month of `t`, 1 to 12",
        "MONTH(TIMESTAMP '2026-12-07 10:30:00')",
        "12",
    ),
    Function::new("WEEK", &[p("t", Timestamp)], "BIGINT", part).doc(
        "the ISO 8601 week of the year of `t`, 1 to 53 (weeks start on Monday; week 1 holds \
         the year's first Thursday)",
        "WEEK(TIMESTAMP '2026-12-07 10:30:00')",
        "50",
    ),
    Function::new("DAYOFYEAR", &[p("t", Timestamp)], "BIGINT", part).doc(
        "the day of the year of `t`, 1 to 366",
        "DAYOFYEAR(TIMESTAMP '2026-02-01 00:00:00')",
        "32",
    ),
    Function::new("DAYOFMONTH", &[p("t", Timestamp)], "BIGINT", part).doc(
        "the day of the month of `t`, 1 to 31",
        "DAYOFMONTH(TIMESTAMP '2026-12-07 10:30:00')",
        "7",
    ),
    Function::new("DAYOFWEEK", &[p("t", Timestamp)], "BIGINT", part).doc(
        "the day of the week of `t`, 1 (Sunday) to 7 (Saturday)",
        "DAYOFWEEK(TIMESTAMP '2026-12-07 10:30:00')",
        "2",
    ),
    Function::new("HOUR", &[p("t", Timestamp)], "BIGINT", part).doc(
        "the hour of `t`, 0 to 23",
        "HOUR(TIMESTAMP '2026-12-07 10:30:00')",
        "10",
    ),
    Function::new("MINUTE", &[p("t", Timestamp)], "BIGINT", part).doc(
        "the minute of `t`, 0 to 59",
        "MINUTE(TIMESTAMP '2026-12-07 10:30:00')",
        "30",
    ),
    Function::new("SECOND", &[p("t", Timestamp)], "BIGINT", part).doc(
        "the second of `t`, 0 to 59",
        "SECOND(TIMESTAMP '2026-12-07 10:30:09')",
        "9",
    ),
    Function::new(
        "FLOOR",
        &[p("t", Timestamp), constant("unit", Unit)],
        "TIMESTAMP(3)",
        floor_ceil,
    )
    .doc(
        "`t` rounded down to a whole `unit`: YEAR, QUARTER, MONTH, DAY, HOUR, MINUTE, SECOND \
         or MILLISECOND; written `FLOOR(t TO unit)`",
        "FLOOR(TIMESTAMP '2026-12-07 10:30:00' TO MONTH)",
        "TIMESTAMP '2026-12-01 00:00:00'",
    ),
    Function::new(
        "CEIL",
        &[p("t", Timestamp), constant("unit", Unit)],
        "TIMESTAMP(3)",
        floor_ceil,
    )
    .doc(
        "`t` rounded up to a whole `unit`; written `CEIL(t TO unit)`",
        "CEIL(TIMESTAMP '2026-12-07 10:30:00' TO HOUR)",
        "TIMESTAMP '2026-12-07 11:00:00'",
    ),
    Function::new(
        "TIMESTAMPADD",
        &[constant("unit", Unit), p("n", Integer), p("t", Timestamp)],
        "TIMESTAMP(3)",
        timestamp_add,
    )
    .doc(
        "`t` plus `n` `unit`s: YEAR, QUARTER, MONTH, WEEK, DAY, HOUR, MINUTE, SECOND or \
         MILLISECOND; a month added to the 31st ends on the month's last day",
        "TIMESTAMPADD(MONTH, 1, TIMESTAMP '2026-01-31 08:00:00')",
        "TIMESTAMP '2026-02-28 08:00:00'",
    ),
    Function::new(
        "TIMESTAMPDIFF",
        &[
            constant("unit", Unit),
            p("from", Timestamp),
            p("to", Timestamp),
        ],
        "BIGINT",
        timestamp_diff,
    )
    .doc(
        "the number of whole `unit`s from `from` to `to` (negative when `to` is earlier)",
        "TIMESTAMPDIFF(DAY, TIMESTAMP '2026-12-01 10:00:00', TIMESTAMP '2026-12-07 09:00:00')",
        "5",
    ),
    Function::new(
        "DATE_FORMAT",
        &[p("t", Timestamp), constant("format", Text)],
        "VARCHAR",
        date_format,
    )
    .doc(
        "`t` written by a Java date pattern (`yyyy-MM-dd HH:mm:ss.SSS`, `a` for AM/PM)",
        "DATE_FORMAT(TIMESTAMP '2026-12-07 10:30:00', 'yyyy-MM-dd HH')",
        "'2026-12-07 10'",
    ),
    Function::new(
        "DATE_FORMAT",
        &[p("s", Text), constant("format", Text)],
        "VARCHAR",
        date_format,
    )
    .doc(
        "the timestamp text `s` (ISO 8601 or `yyyy-MM-dd HH:mm:ss`) rewritten by a pattern",
        "DATE_FORMAT('2026-12-07 10:30:00', 'MM/dd')",
        "'12/07'",
    ),
    Function::new(
        "TO_TIMESTAMP",
        &[p("s", Text), optional(constant("format", Text))],
        "TIMESTAMP(3)",
        to_timestamp,
    )
    .doc(
        "the timestamp `s` writes, by `format` (ISO 8601 or `yyyy-MM-dd HH:mm:ss[.SSS]` if \
         left out); an error when it does not match",
        "TO_TIMESTAMP('07/12/2026 10', 'dd/MM/yyyy HH')",
        "TIMESTAMP '2026-12-07 10:00:00'",
    ),
    Function::new(
        "UNIX_TIMESTAMP",
        &[p("s", Text), optional(constant("format", Text))],
        "BIGINT",
        unix_timestamp,
    )
    .doc(
        "the seconds since 1970-01-01 00:00:00 UTC of the time `s` writes in the session time \
         zone, by `format` (`yyyy-MM-dd HH:mm:ss` if left out); without an argument it is \
         refused (the wall clock)",
        "UNIX_TIMESTAMP('1970-01-01 00:01:40')",
        "100",
    ),
    Function::new(
        "UNIX_TIMESTAMP",
        &[p("t", Instant)],
        "BIGINT",
        unix_timestamp,
    )
    .doc(
        "the seconds since 1970-01-01 00:00:00 UTC of the instant `t`",
        "UNIX_TIMESTAMP(TO_TIMESTAMP_LTZ(100, 0))",
        "100",
    ),
    Function::new(
        "UNIX_TIMESTAMP",
        &[p("t", Timestamp)],
        "BIGINT",
        unix_timestamp,
    )
    .doc(
        "the seconds since 1970-01-01 00:00:00 UTC of `t`",
        "UNIX_TIMESTAMP(TIMESTAMP '1970-01-01 00:01:40')",
        "100",
    ),
    Function::new(
        "TO_DATE",
        &[p("s", Text), optional(constant("format", Text))],
        "DATE",
        to_date,
    )
    .doc(
        "the date `s` writes, by `format` (`yyyy-MM-dd` if left out); an error when it does \
         not match",
        "TO_DATE('07/12/2026', 'dd/MM/yyyy')",
        "DATE '2026-12-07'",
    ),
    Function::new(
        "DATE_ADD",
        &[p("d", Timestamp), p("days", Integer)],
        "DATE",
        date_add,
    )
    .doc(
        "the day of `d` (a DATE, or a timestamp's day) plus `days` days",
        "DATE_ADD(DATE '2026-02-27', 2)",
        "DATE '2026-03-01'",
    ),
    Function::new(
        "DATE_ADD",
        &[p("s", Text), p("days", Integer)],
        "DATE",
        date_add,
    )
    .doc(
        "the date text `s` (`yyyy-MM-dd`, or a timestamp's text) plus `days` days",
        "DATE_ADD('2026-12-31', 1)",
        "DATE '2027-01-01'",
    ),
    Function::new(
        "DATE_SUB",
        &[p("d", Timestamp), p("days", Integer)],
        "DATE",
        date_add,
    )
    .doc(
        "the day of `d` less `days` days",
        "DATE_SUB(DATE '2024-03-01', 1)",
        "DATE '2024-02-29'",
    ),
    Function::new(
        "DATE_SUB",
        &[p("s", Text), p("days", Integer)],
        "DATE",
        date_add,
    )
    .doc(
        "the date text `s` less `days` days",
        "DATE_SUB('2026-01-01', 1)",
        "DATE '2025-12-31'",
    ),
    Function::new(
        "TO_TIMESTAMP_LTZ",
        &[p("n", Integer), optional(constant("precision", Integer))],
        "TIMESTAMP_LTZ(3)",
        to_timestamp_ltz,
    )
    .doc(
        "the instant `n` seconds (`precision` 0) or milliseconds (`precision` 3, the default) \
         after 1970-01-01 00:00:00 UTC",
        "CAST(TO_TIMESTAMP_LTZ(1796626624000, 3) AS VARCHAR)",
        "'2026-12-07 06:57:04'",
    ),
    Function::new(
        "TO_TIMESTAMP_LTZ",
        &[
            p("s", Text),
            optional(constant("format", Text)),
            optional(constant("zone", Text)),
        ],
        "TIMESTAMP_LTZ(3)",
        to_timestamp_ltz,
    )
    .doc(
        "the instant at which the clocks of `zone` (the session time zone if left out) show \
         the time `s` writes by `format` (`yyyy-MM-dd HH:mm:ss[.SSS]` if left out)",
        "UNIX_TIMESTAMP(TO_TIMESTAMP_LTZ('2026-12-07 12:27:04', 'yyyy-MM-dd HH:mm:ss', \
         'Asia/Kolkata'))",
        "1796626624",
    ),
    Function::new(
        "CONVERT_TZ",
        &[p("s", Text), p("from", Text), p("to", Text)],
        "VARCHAR",
        convert_tz,
    )
    .doc(
        "the time `s` (`yyyy-MM-dd HH:mm:ss`) on the clocks of time zone `from`, as the \
         clocks of `to` show it at that instant",
        "CONVERT_TZ('2026-12-07 06:57:04', 'UTC', 'Asia/Kolkata')",
        "'2026-12-07 12:27:04'",
    ),
    Function::new(
        "FROM_UNIXTIME",
        &[p("seconds", Integer), optional(constant("format", Text))],
        "VARCHAR",
        from_unixtime,
    )
    .doc(
        "`seconds` since 1970-01-01 00:00:00 UTC written by `format` (`yyyy-MM-dd HH:mm:ss` \
         if left out) as the session time zone's clocks show it",
        "FROM_UNIXTIME(44)",
        "'1970-01-01 00:00:44'",
    ),
    Function::new(
        "CURRENT_WATERMARK",
        &[p("rowtime", Timestamp)],
        "TIMESTAMP(3)",
        current_watermark,
    )
    .doc(
        "the watermark of the operator evaluating the row, NULL before its first; its argument \
         names the time column (Flink's rowtime attribute)",
        "CURRENT_WATERMARK(NULL) IS NULL",
        "TRUE",
    ),
];

/// A part of a timestamp as BIGINT: also `EXTRACT(part FROM t)`'s.
pub fn extract(x: Compiled, part: &'static str) -> Compiled {
    strict(T::BigInt, vec![x], move |v| {
        let Value::Timestamp(ms) = v[0] else {
            return Ok(Value::Null);
        };
        if part == "EPOCH" {
            return Ok(Value::Int(ms.div_euclid(1000)));
        }
        let c = civil(ms)?;
        Ok(Value::Int(match part {
            "YEAR" => c.year().into(),
            "QUARTER" => ((c.month() - 1) / 3 + 1).into(),
            "MONTH" => c.month().into(),
            "WEEK" => c.date().iso_week_date().week().into(),
            "DAY" => c.day().into(),
            "HOUR" => c.hour().into(),
            "MINUTE" => c.minute().into(),
            "SECOND" => c.second().into(),
            "MILLISECOND" => i64::from(c.second()) * 1000 + i64::from(c.millisecond()),
            // 0 = Sunday (PostgreSQL, DuckDB).
            "DOW" => c.weekday().to_sunday_zero_offset().into(),
            // 1 = Sunday (Flink's DAYOFWEEK).
            "DOW1" => c.weekday().to_sunday_one_offset().into(),
            "DOY" => c.day_of_year().into(),
            other => return Err(format!("no part {other} of a timestamp")),
        }))
    })
}

fn part(call: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    let name = call.name;
    let part = match name {
        "DAYOFMONTH" => "DAY",
        "DAYOFYEAR" => "DOY",
        "DAYOFWEEK" => "DOW1",
        "YEAR" => "YEAR",
        "QUARTER" => "QUARTER",
        "MONTH" => "MONTH",
        "WEEK" => "WEEK",
        "HOUR" => "HOUR",
        "MINUTE" => "MINUTE",
        _ => "SECOND",
    };
    Ok(extract(args.into_iter().next().expect("1"), part))
}

/// A unit of time, as TIMESTAMPADD, TIMESTAMPDIFF and FLOOR take it.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Unit {
    Millisecond,
    Second,
    Minute,
    Hour,
    Day,
    Week,
    /// Months: a month, a quarter (3) or a year (12).
    Months(i64),
}

impl Unit {
    fn parse(name: &str, function: &str) -> Result<Self, String> {
        let upper = name.to_ascii_uppercase();
        let bare = upper.strip_prefix("SQL_TSI_").unwrap_or(&upper);
        Ok(match bare.strip_suffix('S').unwrap_or(bare) {
            "MILLISECOND" => Unit::Millisecond,
            "SECOND" => Unit::Second,
            "MINUTE" => Unit::Minute,
            "HOUR" => Unit::Hour,
            "DAY" => Unit::Day,
            "WEEK" => Unit::Week,
            "MONTH" => Unit::Months(1),
            "QUARTER" => Unit::Months(3),
            "YEAR" => Unit::Months(12),
            _ => {
                return Err(format!(
                    "{function} takes a unit of YEAR, QUARTER, MONTH, WEEK, DAY, HOUR, MINUTE, \
                     SECOND or MILLISECOND, not {name}"
                ))
            }
        })
    }

    /// Its length in milliseconds, when it has one.
    fn millis(self) -> Option<i64> {
        Some(match self {
            Unit::Millisecond => 1,
            Unit::Second => 1_000,
            Unit::Minute => 60_000,
            Unit::Hour => 3_600_000,
            Unit::Day => 86_400_000,
            Unit::Week => 7 * 86_400_000,
            Unit::Months(_) => return None,
        })
    }
}

/// The unit argument at `i` (a constant the signature checked).
fn unit_at(args: &[Compiled], i: usize, function: &str) -> Result<Unit, String> {
    Unit::parse(&constant_text(args, i).unwrap_or_default(), function)
}

fn floor_ceil(call: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    let name = call.name;
    let unit = unit_at(&args, 1, name)?;
    if unit == Unit::Week {
        return Err(format!(
            "{name}(... TO WEEK) is not supported: engines start weeks on different days; \
             use TIMESTAMPADD with DAYOFWEEK to choose one"
        ));
    }
    let up = name != "FLOOR";
    let first = args.into_iter().take(1).collect();
    Ok(strict(T::Timestamp, first, move |v| {
        let ms = v[0].as_timestamp().unwrap_or(0);
        let down = match unit.millis() {
            Some(step) => ms.div_euclid(step) * step,
            None => {
                let Unit::Months(n) = unit else {
                    unreachable!("only month units have no fixed length")
                };
                let c = civil(ms)?;
                let month = (i64::from(c.month()) - 1) / n * n + 1;
                let first = jiff::civil::date(c.year(), month as i8, 1).at(0, 0, 0, 0);
                instant(first)?
            }
        };
        if !up || down == ms {
            return Ok(Value::Timestamp(down));
        }
        shift(down, unit, 1).map(Value::Timestamp)
    }))
}

/// `ms` plus `n` units.
fn shift(ms: i64, unit: Unit, n: i64) -> Result<i64, String> {
    let overflow = || format!("{n} {unit:?} from {ms} ms overflows");
    match unit.millis() {
        Some(step) => n
            .checked_mul(step)
            .and_then(|d| ms.checked_add(d))
            .ok_or_else(overflow),
        None => {
            let Unit::Months(k) = unit else {
                unreachable!("only month units have no fixed length")
            };
            add_months(ms, n.checked_mul(k).ok_or_else(overflow)?)
        }
    }
}

fn timestamp_add(call: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    let name = call.name;
    let unit = unit_at(&args, 0, name)?;
    let rest = args.into_iter().skip(1).collect();
    Ok(strict(T::Timestamp, rest, move |v| {
        let ms = v[1].as_timestamp().unwrap_or(0);
        shift(ms, unit, int(&v[0])).map(Value::Timestamp)
    }))
}

/// Whole months from `a` to `b`, toward zero: the most months that,
/// added to `a` (a month added to the 31st ends on the month's last
/// day), do not pass `b`. So the 31st of January to the 29th of February
/// is a month, as in Calcite and DuckDB.
fn months_between(a: DateTime, b: DateTime) -> Result<i64, String> {
    if b < a {
        return months_between(b, a).map(|m| -m);
    }
    let index = |d: DateTime| i64::from(d.year()) * 12 + i64::from(d.month());
    let m = index(b) - index(a);
    let span = jiff::Span::new().try_months(m).map_err(|e| e.to_string())?;
    let reached = a.checked_add(span).map_err(|e| e.to_string())?;
    Ok(if reached > b { m - 1 } else { m })
}

fn timestamp_diff(call: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    let name = call.name;
    let unit = unit_at(&args, 0, name)?;
    let rest = args.into_iter().skip(1).collect();
    Ok(strict(T::BigInt, rest, move |v| {
        let (a, b) = (
            v[0].as_timestamp().unwrap_or(0),
            v[1].as_timestamp().unwrap_or(0),
        );
        Ok(Value::Int(match unit {
            Unit::Months(k) => months_between(civil(a)?, civil(b)?)? / k,
            fixed => (b - a) / fixed.millis().unwrap_or(1),
        }))
    }))
}

fn date_format(_: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    let pattern = java_pattern(&constant_text(&args, 1).unwrap_or_default());
    let first = args.into_iter().take(1).collect();
    Ok(strict(T::String, first, move |v| {
        let ms = match &v[0] {
            Value::Timestamp(ms) => *ms,
            s => parse_timestamp(text(s))?,
        };
        Ok(Value::String(format_pattern(ms, &pattern)?))
    }))
}

fn to_timestamp(_: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    let pattern = constant_text(&args, 1).map(|p| java_pattern(&p));
    let first = args.into_iter().take(1).collect();
    Ok(strict(T::Timestamp, first, move |v| {
        let s = text(&v[0]);
        Ok(Value::Timestamp(match &pattern {
            None => parse_timestamp(s)?,
            Some(p) => parse_pattern(s, p)?,
        }))
    }))
}

fn unix_timestamp(call: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    let pattern =
        java_pattern(&constant_text(&args, 1).unwrap_or_else(|| "yyyy-MM-dd HH:mm:ss".to_string()));
    let zone = call.zone.clone();
    let first = args.into_iter().take(1).collect();
    Ok(strict(T::BigInt, first, move |v| {
        let ms = match &v[0] {
            Value::Timestamp(ms) => *ms,
            s => {
                let local =
                    parse_pattern(text(s), &pattern).or_else(|_| parse_timestamp(text(s)))?;
                zoned_ms(&zone, local)?
            }
        };
        Ok(Value::Int(ms.div_euclid(1000)))
    }))
}

fn from_unixtime(call: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    let pattern =
        java_pattern(&constant_text(&args, 1).unwrap_or_else(|| "yyyy-MM-dd HH:mm:ss".to_string()));
    let zone = call.zone.clone();
    let first = args.into_iter().take(1).collect();
    Ok(strict(T::String, first, move |v| -> Outcome {
        let ms = int(&v[0])
            .checked_mul(1000)
            .ok_or("FROM_UNIXTIME: seconds out of range")?;
        Ok(Value::String(format_pattern(
            local_ms(&zone, ms)?,
            &pattern,
        )?))
    }))
}

fn to_timestamp_ltz(call: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    if args[0].ty == Ty::Data(T::String) {
        let pattern = constant_text(&args, 1).map(|p| java_pattern(&p));
        let zone = match constant_text(&args, 2) {
            Some(name) => crate::sql::session::time_zone(&name)?,
            None => call.zone.clone(),
        };
        let first = args.into_iter().take(1).collect();
        return Ok(strict(T::TimestampLtz, first, move |v| {
            let s = text(&v[0]);
            let local = match &pattern {
                None => parse_timestamp(s)?,
                Some(p) => parse_pattern(s, p)?,
            };
            Ok(Value::Timestamp(zoned_ms(&zone, local)?))
        }));
    }
    let scale = match args.get(1).and_then(|a| a.constant.as_ref()) {
        None => 1,
        Some(Value::Int(3)) => 1,
        Some(Value::Int(0)) => 1000,
        Some(other) => {
            return Err(format!(
                "TO_TIMESTAMP_LTZ's precision is 0 (seconds) or 3 (milliseconds), not {other:?}"
            ))
        }
    };
    let first = args.into_iter().take(1).collect();
    Ok(strict(T::TimestampLtz, first, move |v| {
        int(&v[0])
            .checked_mul(scale)
            .map(Value::Timestamp)
            .ok_or_else(|| "TO_TIMESTAMP_LTZ: out of range".to_string())
    }))
}

fn to_date(_: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    let pattern = constant_text(&args, 1).map(|p| java_pattern(&p));
    let first = args.into_iter().take(1).collect();
    Ok(strict(T::Date, first, move |v| {
        let s = text(&v[0]);
        Ok(Value::Timestamp(match &pattern {
            None => crate::dataflow::json::parse_date(s)?,
            Some(p) => crate::sql::cast::day(parse_pattern(s, p)?),
        }))
    }))
}

/// DATE_ADD and DATE_SUB (Hive's, which Flink's Hive dialect has): whole
/// days on the calendar of the day given.
fn date_add(call: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    let sign = if call.name == "DATE_SUB" { -1 } else { 1 };
    let name = call.name.to_string();
    Ok(strict(T::Date, args, move |v| {
        let day = match &v[0] {
            Value::Timestamp(ms) => crate::sql::cast::day(*ms),
            s => crate::dataflow::json::parse_date(text(s))
                .or_else(|_| parse_timestamp(text(s)).map(crate::sql::cast::day))?,
        };
        let days = int(&v[1])
            .checked_mul(sign)
            .ok_or("DATE_ADD: days out of range")?;
        let d = civil(day)?
            .date()
            .checked_add(jiff::Span::new().days(days))
            .map_err(|e| format!("{name}: {e}"))?;
        instant(d.to_datetime(jiff::civil::Time::midnight())).map(Value::Timestamp)
    }))
}

fn convert_tz(_: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    // Zones that are constants are looked up once.
    let fixed = |i: usize| constant_text(&args, i).map(|z| crate::sql::session::time_zone(&z));
    let (from, to) = (fixed(1).transpose()?, fixed(2).transpose()?);
    let pattern = java_pattern("yyyy-MM-dd HH:mm:ss");
    Ok(strict(T::String, args, move |v| {
        let zone = |given: &Option<jiff::tz::TimeZone>, i: usize| match given {
            Some(z) => Ok(z.clone()),
            None => crate::sql::session::time_zone(text(&v[i])),
        };
        let local = parse_timestamp(text(&v[0]))?;
        let instant = zoned_ms(&zone(&from, 1)?, local)?;
        let there = local_ms(&zone(&to, 2)?, instant)?;
        Ok(Value::String(format_pattern(there, &pattern)?))
    }))
}

fn current_watermark(_: &Call, _: Vec<Compiled>) -> Result<Compiled, String> {
    Ok(Compiled::new(Ty::Data(T::Timestamp), |_| {
        let w = crate::dataflow::operator::task_watermark();
        Ok(if w == crate::time::MIN_WATERMARK {
            Value::Null
        } else {
            Value::Timestamp(w)
        })
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_months_count_toward_zero_and_a_month_ends_at_the_shorter_months_end() {
        let at = |s: &str| s.parse::<DateTime>().unwrap();
        let m = |a: &str, b: &str| months_between(at(a), at(b)).unwrap();
        assert_eq!(m("2024-01-31T00:00", "2024-02-29T00:00"), 1);
        assert_eq!(m("2024-01-31T00:00", "2024-02-28T00:00"), 0);
        assert_eq!(m("2024-01-15T10:00", "2024-03-15T09:00"), 1);
        assert_eq!(m("2024-03-15T10:00", "2024-01-15T09:00"), -2);
        assert_eq!(m("2024-03-31T00:00", "2024-02-29T00:00"), -1);
        assert_eq!(m("2024-02-29T00:00", "2025-02-28T00:00"), 12);
    }

    #[test]
    fn a_month_added_to_the_31st_ends_on_the_last_day() {
        let ms = parse_timestamp("2024-01-31T08:00:00Z").unwrap();
        let moved = shift(ms, Unit::Months(1), 1).unwrap();
        assert_eq!(
            crate::dataflow::json::format_timestamp(moved),
            "2024-02-29T08:00:00.000Z"
        );
    }
}
