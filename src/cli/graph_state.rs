//! `weir state get|scan` for the keyed operators of a job graph: entries
//! are decoded with each table's codec, as the checkpoint recorded it
//! (`StateInfo` in `_metadata`), never guessed from their length.
//!
//! A key is given as the operator's key columns: the value itself for a
//! one-column key (`--key u1`, `--key 42`, `--key 2026-11-30T10:00:00Z`),
//! or a JSON array for several (`--key '["2026-11-30T10:00:00Z", 3]'`).

use std::io::Write;
use std::path::Path;

use serde_json::{json, Value as Json};

use super::OutputFormat;
use crate::checkpoint::metadata::{KeyColumn, StateInfo};
use crate::checkpoint::reader::CheckpointReader;
use crate::config::AggregateFunction;
use crate::dataflow::codec::StateCodec;
use crate::dataflow::codec::{self, get_varint, put_varint};
use crate::dataflow::inspect::{self, decode_by_codec, decode_list, hex, value_json};
use crate::dataflow::json::format_timestamp;
use crate::dataflow::ops::aggregate::Accumulators;
use crate::dataflow::row::Value;
use crate::error::{Result, WeirError};
use crate::state::key_groups::key_group;

/// The recorded state of `uid`, if it is a job graph's keyed operator.
pub fn state_info<'a>(reader: &'a CheckpointReader, uid: &str) -> Option<&'a StateInfo> {
    reader
        .metadata()
        .topology
        .operators
        .iter()
        .find(|o| o.uid == uid)
        .and_then(|o| o.state.as_ref())
}

/// A TOML pipeline's keyed node (by its recorded kind): entries are shown
/// as its output shows them, `{"key":"w","count":3}` and `w\t3` (with
/// `window_start`, `window_end` for windows), as `weir state` always has.
fn pipeline_view(reader: &CheckpointReader, uid: &str) -> Option<AggregateFunction> {
    let kind = &reader
        .metadata()
        .topology
        .operators
        .iter()
        .find(|o| o.uid == uid)?
        .kind;
    crate::pipelines::parse_kind(kind).map(|(f, _)| f)
}

/// One entry of a pipeline's accumulators (a value, or a window's map
/// entry) as its output line.
fn pipeline_line(
    f: AggregateFunction,
    full: &[u8],
    value: &[u8],
    dir: &Path,
    format: OutputFormat,
) -> Result<String> {
    let corrupt = |why: String| {
        WeirError::Recovery(format!(
            "state in {} has an entry it cannot decode ({} key bytes): {why}",
            dir.display(),
            full.len()
        ))
    };
    let (_, _, key, map_key) = split(full).ok_or_else(|| corrupt("the key is cut short".into()))?;
    let key = codec::decode_key(key).map_err(corrupt)?;
    let key = match key.first() {
        Some(Value::String(s)) => s.clone(),
        Some(other) => value_json(other).to_string(),
        None => String::new(),
    };
    let acc = Accumulators::decode(value).map_err(|e| corrupt(format!("accumulators: {e}")))?;
    let part = acc.parts().next();
    let result: Json = match f {
        AggregateFunction::Count => json!(acc.rows()),
        AggregateFunction::Sum | AggregateFunction::Min | AggregateFunction::Max => {
            part.map_or(Json::Null, |(_, v)| value_json(v))
        }
        AggregateFunction::Avg => part.map_or(Json::Null, |(n, v)| {
            serde_json::Number::from_f64(v.as_f64().unwrap_or(f64::NAN) / n as f64)
                .map_or(Json::Null, Json::Number)
        }),
    };
    let window = match map_key {
        [] => None,
        mk if mk.len() == 16 => {
            let start = i64::from_be_bytes(mk[..8].try_into().expect("8 bytes"));
            let end = i64::from_be_bytes(mk[8..].try_into().expect("8 bytes"));
            Some((format_timestamp(start), format_timestamp(end)))
        }
        mk => return Err(corrupt(format!("a window of {} bytes, not 16", mk.len()))),
    };
    Ok(match (format, window) {
        (OutputFormat::Json, None) => json!({"key": key, f.name(): result}).to_string(),
        (OutputFormat::Json, Some((start, end))) => json!({
            "key": key,
            "window_start": start,
            "window_end": end,
            f.name(): result,
        })
        .to_string(),
        (OutputFormat::Text, None) => format!("{key}\t{result}"),
        (OutputFormat::Text, Some((start, end))) => format!("{key}\t{start}\t{end}\t{result}"),
    })
}

fn write_line(out: &mut dyn Write, line: &str) -> Result<()> {
    writeln!(out, "{line}").map_err(|e| WeirError::io(Path::new("stdout"), e))
}

/// The key the user typed, as the operator's key values.
fn parse_key(text: &str, columns: &[KeyColumn]) -> Result<Vec<Value>> {
    inspect::parse_key(text, columns)
        .map_err(|e| WeirError::Recovery(format!("--key {text:?}: {e}")))
}

/// One entry's parts: key group, table index, key bytes, map key.
fn split(full: &[u8]) -> Option<(u32, u8, &[u8], &[u8])> {
    let (kg, rest) = full.split_first_chunk::<2>()?;
    let (&table, mut rest) = rest.split_first()?;
    let n = get_varint(&mut rest).ok()? as usize;
    if rest.len() < n {
        return None;
    }
    let (key, map_key) = rest.split_at(n);
    Some((u32::from(u16::from_be_bytes(*kg)), table, key, map_key))
}

fn entry(info: &StateInfo, full: &[u8], value: &[u8], dir: &Path) -> Result<Json> {
    let corrupt = |why: String| {
        WeirError::Recovery(format!(
            "state in {} has an entry it cannot decode ({} key bytes): {why}",
            dir.display(),
            full.len()
        ))
    };
    let (_, table, key, map_key) =
        split(full).ok_or_else(|| corrupt("the key is cut short".into()))?;
    let t = info
        .tables
        .get(usize::from(table))
        .ok_or_else(|| corrupt(format!("table {table} is not declared")))?;
    let key = codec::decode_key(key).map_err(corrupt)?;
    let decoded = match t.kind.as_str() {
        "list" => decode_list(&t.codec, value),
        _ => decode_by_codec(&t.codec, value),
    }
    .map_err(|e| corrupt(format!("table {:?} ({}): {e}", t.name, t.codec)))?;
    let mut out = json!({"table": t.name, "key": key.iter().map(value_json).collect::<Vec<_>>()});
    if t.kind == "map" {
        out["map_key"] = Json::String(hex(map_key));
    }
    out["value"] = decoded;
    Ok(out)
}

fn write(out: &mut dyn Write, e: &Json, format: OutputFormat) -> Result<()> {
    let line = match format {
        OutputFormat::Json => e.to_string(),
        OutputFormat::Text => {
            let mut parts = vec![
                e["table"].as_str().unwrap_or("").to_string(),
                e["key"].to_string(),
            ];
            if let Some(m) = e.get("map_key") {
                parts.push(m.as_str().unwrap_or("").to_string());
            }
            parts.push(e["value"].to_string());
            parts.join("\t")
        }
    };
    writeln!(out, "{line}").map_err(|e| WeirError::io(Path::new("stdout"), e))
}

fn table_index(info: &StateInfo, uid: &str, table: Option<&str>) -> Result<Option<u8>> {
    let Some(name) = table else {
        return Ok(None);
    };
    match info.tables.iter().position(|t| t.name == name) {
        Some(i) => Ok(Some(i as u8)),
        None => {
            let names: Vec<&str> = info.tables.iter().map(|t| t.name.as_str()).collect();
            Err(WeirError::Recovery(format!(
                "operator {uid:?} has no table {name:?}; its tables: {}",
                names.join(", ")
            )))
        }
    }
}

/// `weir state get` for a graph operator: every table's entries of `key`
/// (or of `table` only); false when there are none.
pub fn get(
    reader: &CheckpointReader,
    uid: &str,
    info: &StateInfo,
    key: &str,
    table: Option<&str>,
    format: OutputFormat,
    out: &mut dyn Write,
) -> Result<bool> {
    let only = table_index(info, uid, table)?;
    let view = pipeline_view(reader, uid);
    let values = parse_key(key, &info.key)?;
    let mut encoded = Vec::new();
    for v in &values {
        codec::encode_value(v, &mut encoded);
    }
    let kg = key_group(&encoded, reader.metadata().topology.max_parallelism);
    let Some(h) = reader
        .snapshots(uid)?
        .into_iter()
        .find(|h| h.key_groups.0 <= kg && kg < h.key_groups.1)
    else {
        return Ok(false);
    };
    let dir = reader.folder().join(&h.path);
    let mut found = false;
    for t in 0..info.tables.len() as u8 {
        if only.is_some_and(|o| o != t) {
            continue;
        }
        let mut prefix = Vec::new();
        prefix.extend_from_slice(&(kg as u16).to_be_bytes());
        prefix.push(t);
        put_varint(encoded.len() as u64, &mut prefix);
        prefix.extend_from_slice(&encoded);
        reader.for_each_raw(h, Some(&prefix), &mut |k, v| {
            found = true;
            match view {
                Some(f) => write_line(out, &pipeline_line(f, k, v, &dir, format)?),
                None => write(out, &entry(info, k, v, &dir)?, format),
            }
        })?;
    }
    Ok(found)
}

/// `weir state scan` for a graph operator: every entry (of `table`) whose
/// first key column, as text, starts with `prefix`. Returns how many.
pub fn scan(
    reader: &CheckpointReader,
    uid: &str,
    info: &StateInfo,
    prefix: &str,
    table: Option<&str>,
    format: OutputFormat,
    out: &mut dyn Write,
) -> Result<u64> {
    let only = table_index(info, uid, table)?;
    let view = pipeline_view(reader, uid);
    let mut n = 0u64;
    for h in reader.snapshots(uid)? {
        let dir = reader.folder().join(&h.path);
        reader.for_each_raw(h, None, &mut |k, v| {
            match split(k) {
                // The runtime's own entries, not a declared table's.
                Some((_, t, _, _)) if t == WATERMARK_TABLE.0 => return Ok(()),
                Some((_, t, _, _)) if only.is_some_and(|o| o != t) => return Ok(()),
                _ => {}
            }
            if let Some(f) = view {
                let line = pipeline_line(f, k, v, &dir, format)?;
                let key = match split(k).map(|(_, _, key, _)| codec::decode_key(key)) {
                    Some(Ok(values)) => match values.first() {
                        Some(Value::String(s)) => s.clone(),
                        Some(other) => value_json(other).to_string(),
                        None => String::new(),
                    },
                    _ => String::new(),
                };
                if key.starts_with(prefix) {
                    n += 1;
                    write_line(out, &line)?;
                }
                return Ok(());
            }
            let e = entry(info, k, v, &dir)?;
            let first = match &e["key"][0] {
                Json::String(s) => s.clone(),
                other => other.to_string(),
            };
            if first.starts_with(prefix) {
                n += 1;
                write(out, &e, format)?;
            }
            Ok(())
        })?;
    }
    Ok(n)
}

use crate::dataflow::tables::WATERMARK_TABLE;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_parse_by_their_column_types() {
        let col = |name: &str, t: &str| KeyColumn {
            name: name.into(),
            data_type: t.into(),
        };
        assert_eq!(
            parse_key("u1", &[col("user", "VARCHAR")]).unwrap(),
            vec![Value::from("u1")]
        );
        assert_eq!(
            parse_key("42", &[col("user", "VARCHAR")]).unwrap(),
            vec![Value::from("42")]
        );
        assert_eq!(
            parse_key("42", &[col("n", "BIGINT")]).unwrap(),
            vec![Value::Int(42)]
        );
        let two = [col("window_start", "TIMESTAMP(3)"), col("n", "BIGINT")];
        assert_eq!(
            parse_key(r#"["2025-11-30T10:00:00Z", 3]"#, &two).unwrap(),
            vec![Value::Timestamp(1_764_496_800_000), Value::Int(3)]
        );
        let e = parse_key("x", &two).unwrap_err().to_string();
        assert!(
            e.contains("JSON array of 2") && e.contains("window_start TIMESTAMP(3)"),
            "{e}"
        );
        let e = parse_key("x", &[col("n", "BIGINT")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a BIGINT"), "{e}");
    }
}
