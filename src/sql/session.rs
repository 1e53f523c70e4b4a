//! What a job's SQL is planned with beyond its statements: the
//! user-defined functions it may call (those the binary registered in
//! Rust, [`crate::udf::register`], and those `[functions.NAME]` names in
//! WebAssembly), and the session time zone TIMESTAMP_LTZ is shown in.

use std::sync::Arc;

use jiff::tz::TimeZone;

pub use crate::config::time_zone::time_zone;

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
