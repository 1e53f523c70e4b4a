//! What a job's SQL is planned with beyond its statements: the
//! user-defined functions it may call (those the binary registered in
//! Rust, [`crate::udf::register`], and those `[functions.NAME]` names in
//! WebAssembly), and the session time zone TIMESTAMP_LTZ is shown in.

use std::sync::Arc;

use jiff::tz::{Offset, TimeZone};

use super::SqlError;
use crate::config::SqlJob;
use crate::udf::wasm::{self, Declared, Returns, WasmSpec};
use crate::udf::Functions;

/// The planning context of one job.
#[derive(Debug, Clone)]
pub struct Session {
    pub functions: Arc<Functions>,
    /// `[pipeline] time_zone`: where a TIMESTAMP_LTZ is shown, cast to a
    /// TIMESTAMP and its fields read (Flink's `table.local-time-zone`).
    pub time_zone: TimeZone,
}

impl Default for Session {
    fn default() -> Self {
        Self {
            functions: Arc::default(),
            time_zone: TimeZone::UTC,
        }
    }
}

/// A time zone by the name `[pipeline] time_zone` gives: an IANA name
/// (`America/New_York`), `UTC`/`Z`, or a fixed offset (`+05:30`, `-08`,
/// `GMT+08:00`, `UTC-3`). Err says what is wrong, for the key's problem.
pub fn time_zone(name: &str) -> Result<TimeZone, String> {
    let trimmed = name.trim();
    if trimmed.eq_ignore_ascii_case("UTC") || trimmed == "Z" {
        return Ok(TimeZone::UTC);
    }
    let offset = ["GMT", "UTC"]
        .iter()
        .find_map(|p| trimmed.strip_prefix(p).filter(|r| !r.is_empty()))
        .unwrap_or(trimmed);
    if offset.starts_with(['+', '-']) {
        return fixed_offset(offset).map(TimeZone::fixed).ok_or_else(|| {
            format!("{name:?} is not an offset: write +HH:MM or -HH:MM (at most 18 hours)")
        });
    }
    TimeZone::get(trimmed).map_err(|e| {
        format!("unknown time zone {name:?} ({e}); give an IANA name such as \"Europe/Berlin\", \"UTC\" or an offset such as \"+05:30\"")
    })
}

/// `+HH`, `+HH:MM` or `+HHMM`.
fn fixed_offset(text: &str) -> Option<Offset> {
    let (sign, rest) = text.split_at(1);
    let (h, m) = match rest.split_once(':') {
        Some((h, m)) => (h, m),
        None if rest.len() == 4 => rest.split_at(2),
        None => (rest, "0"),
    };
    if h.is_empty() || h.len() > 2 || m.len() > 2 {
        return None;
    }
    let (h, m): (i32, i32) = (h.parse().ok()?, m.parse().ok()?);
    if h > 18 || m > 59 {
        return None;
    }
    let seconds = (h * 3600 + m * 60) * if sign == "-" { -1 } else { 1 };
    Offset::from_seconds(seconds).ok()
}

impl Session {
    /// `job`'s session: the registered functions and its WebAssembly ones
    /// (each module compiled and checked against its declaration).
    pub fn of(job: &SqlJob) -> Result<Self, Vec<SqlError>> {
        let mut errors = Vec::new();
        let mut declared = Functions::new();
        for (name, f) in &job.functions {
            match wasm_function(name, f) {
                Ok(Declared::Scalar(s)) => declared = declared.scalar(s),
                Ok(Declared::Table(t)) => declared = declared.table(t),
                Err(m) => errors.push(SqlError::general(format!("functions.{name}: {m}"))),
            }
        }
        let functions = crate::udf::registered()
            .merge(declared)
            .map_err(|m| vec![SqlError::general(m)])?;
        if !errors.is_empty() {
            return Err(errors);
        }
        let time_zone = match &job.pipeline.time_zone {
            Some(name) => time_zone(name)
                .map_err(|m| vec![SqlError::general(format!("pipeline.time_zone: {m}"))])?,
            None => TimeZone::UTC,
        };
        Ok(Self {
            functions: Arc::new(functions),
            time_zone,
        })
    }
}

/// `[functions.NAME]` compiled.
fn wasm_function(name: &str, f: &crate::config::FunctionConfig) -> Result<Declared, String> {
    use super::types::parse_type;
    let params = f
        .params
        .iter()
        .map(|t| parse_type(t))
        .collect::<Result<Vec<_>, _>>()?;
    let returns = match (&f.returns, &f.columns) {
        (Some(t), _) => Returns::Scalar(parse_type(t)?),
        (None, Some(columns)) => Returns::Table(
            columns
                .iter()
                .map(|c| {
                    let (n, t) = c
                        .trim()
                        .split_once(char::is_whitespace)
                        .ok_or_else(|| format!("{c:?} is not \"name TYPE\""))?;
                    Ok((n.to_string(), parse_type(t.trim())?))
                })
                .collect::<Result<Vec<_>, String>>()?,
        ),
        (None, None) => return Err("give returns or columns".into()),
    };
    wasm::function(
        WasmSpec {
            name: name.to_string(),
            file: f.wasm.clone(),
            export: f.export.clone().unwrap_or_else(|| name.to_string()),
            params,
            returns,
            fuel: f.fuel.unwrap_or(wasm::DEFAULT_FUEL),
        },
        std::path::Path::new("."),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_zones_by_name_or_offset() {
        let at = jiff::Timestamp::from_second(1_796_626_624).unwrap();
        let offset = |name: &str| time_zone(name).unwrap().to_offset(at).seconds();
        assert_eq!(offset("UTC"), 0);
        assert_eq!(offset("Asia/Kolkata"), 19_800);
        assert_eq!(offset("America/New_York"), -5 * 3600);
        assert_eq!(offset("+05:30"), 19_800);
        assert_eq!(offset("GMT-08:00"), -8 * 3600);
        assert_eq!(offset("UTC+8"), 8 * 3600);
        assert_eq!(offset("-0330"), -(3 * 3600 + 1800));
        for bad in ["Mars/Olympus", "+25:00", "GMT+", "+5:99"] {
            let e = time_zone(bad).unwrap_err();
            assert!(e.contains(bad), "{bad}: {e}");
        }
    }
}
