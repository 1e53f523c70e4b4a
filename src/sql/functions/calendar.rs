//! The calendar of TIMESTAMP(3) values: milliseconds since 1970 at UTC
//! as `jiff`'s civil date and time, and back.

use jiff::civil::DateTime;
use jiff::tz::Offset;

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
