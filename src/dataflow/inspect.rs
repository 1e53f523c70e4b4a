//! State as people read it: values as JSON, stored entries decoded by
//! their table's codec, keys parsed from what a user types. `weir state`
//! (offline, from a checkpoint) and `GET /state/<uid>/<key>` (live, from
//! the running task) share it.

use serde_json::{json, Value as Json};

use super::codec::{get_varint, StateCodec};
pub use super::json::value_json;
use super::ops::aggregate::Accumulators;
use super::ops::join::JoinEntry;
use super::row::{Decimal, Row, Value};
use super::tables::{KeyedStore, TableKind};
use crate::checkpoint::metadata::KeyColumn;

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// One stored value by its codec's name; an unknown codec (an operator's
/// own) shows its bytes in hex.
pub fn decode_by_codec(codec: &str, bytes: &[u8]) -> std::result::Result<Json, String> {
    Ok(match codec {
        "row" => {
            let r = Row::decode(bytes)?;
            json!({"kind": r.kind.short(), "values": r.values.iter().map(value_json).collect::<Vec<_>>()})
        }
        "value" => value_json(&Value::decode(bytes)?),
        "values" => Json::Array(
            Vec::<Value>::decode(bytes)?
                .iter()
                .map(value_json)
                .collect(),
        ),
        "i64" => json!(i64::decode(bytes)?),
        "join-entry" => {
            let e = JoinEntry::decode(bytes)?;
            let time = |t: i64| (t != i64::MIN && t != i64::MAX).then_some(t);
            json!({"count": e.count, "matches": e.matches, "time": time(e.time),
                   "expires": time(e.expires)})
        }
        "accumulators" => {
            let acc = Accumulators::decode(bytes)?;
            let parts: Vec<Json> = acc
                .parts()
                .map(|(n, v)| json!({"n": n, "value": value_json(v)}))
                .collect();
            json!({"rows": acc.rows(), "parts": parts})
        }
        other => json!({"codec": other, "hex": hex(bytes)}),
    })
}

pub fn decode_list(codec: &str, bytes: &[u8]) -> std::result::Result<Json, String> {
    let mut input = bytes;
    let n = get_varint(&mut input)? as usize;
    let mut items = Vec::new();
    for _ in 0..n {
        let len = get_varint(&mut input)? as usize;
        if input.len() < len {
            return Err("a list item is cut short".into());
        }
        let (item, rest) = input.split_at(len);
        items.push(decode_by_codec(codec, item)?);
        input = rest;
    }
    Ok(Json::Array(items))
}

/// A key as a user types it (`weir state --key`, `GET /state/<uid>/<key>`),
/// as the operator's key values: the value itself for a one-column key,
/// or a JSON array for several. Err says why, naming the key columns.
pub fn parse_key(text: &str, columns: &[KeyColumn]) -> std::result::Result<Vec<Value>, String> {
    let bad = |why: String| {
        let cols: Vec<String> = columns
            .iter()
            .map(|c| format!("{} {}", c.name, c.data_type))
            .collect();
        format!("{why} (the key columns are: {})", cols.join(", "))
    };
    let parts: Vec<Json> = if columns.len() == 1 {
        vec![match serde_json::from_str::<Json>(text) {
            Ok(j) if !matches!(j, Json::String(_)) && columns[0].data_type != "VARCHAR" => j,
            _ => Json::String(text.to_string()),
        }]
    } else {
        match serde_json::from_str::<Json>(text) {
            Ok(Json::Array(items)) if items.len() == columns.len() => items,
            _ => {
                return Err(bad(format!(
                    "give a JSON array of {} values",
                    columns.len()
                )))
            }
        }
    };
    parts
        .iter()
        .zip(columns)
        .map(|(j, c)| {
            let t = c.data_type.as_str();
            Ok(match (t, j) {
                (_, Json::Null) => Value::Null,
                ("VARCHAR", Json::String(s)) => Value::String(s.clone()),
                ("VARCHAR", other) => Value::String(other.to_string()),
                ("BIGINT" | "INT", Json::Number(n)) if n.is_i64() => {
                    Value::Int(n.as_i64().expect("i64"))
                }
                ("DOUBLE", Json::Number(n)) => Value::Double(n.as_f64().unwrap_or(f64::NAN)),
                ("BOOLEAN", Json::Bool(b)) => Value::Bool(*b),
                ("TIMESTAMP(3)", Json::String(s)) => {
                    Value::Timestamp(crate::dataflow::json::parse_timestamp(s).map_err(bad)?)
                }
                ("TIMESTAMP(3)", Json::Number(n)) if n.is_i64() => {
                    Value::Timestamp(n.as_i64().expect("i64"))
                }
                ("BYTES", Json::String(s)) => Value::Bytes(s.as_bytes().to_vec()),
                (t, j) if t.starts_with("DECIMAL(") => {
                    let scale = t
                        .trim_end_matches(')')
                        .rsplit(',')
                        .next()
                        .and_then(|s| s.trim().parse::<u8>().ok())
                        .unwrap_or(0);
                    let text = match j {
                        Json::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    Value::Decimal(Decimal::parse(&text, scale).map_err(bad)?)
                }
                (t, j) => return Err(bad(format!("{j} is not a {t} for column {:?}", c.name))),
            })
        })
        .collect()
}

/// Everything `store` holds for one key, by table name (`{"acc": ...}`),
/// each entry decoded by its table's codec; None when it holds nothing.
pub fn key_tables(
    store: &mut KeyedStore,
    key_group: u32,
    key: &[u8],
) -> crate::error::Result<Option<Json>> {
    let mut out = serde_json::Map::new();
    let tables = store.tables.clone();
    for (i, t) in tables.iter().enumerate() {
        let mut prefix = Vec::new();
        super::tables::key_prefix(key_group, super::tables::Table(i as u8), key, &mut prefix);
        let entries = store.scan(&prefix)?;
        if entries.is_empty() {
            continue;
        }
        let decode = |bytes: &[u8]| match t.kind {
            TableKind::List => decode_list(t.codec, bytes),
            _ => decode_by_codec(t.codec, bytes),
        };
        let corrupt = |full: &[u8], e: String| {
            store.corrupt(full, format!("table {:?} ({}): {e}", t.name, t.codec))
        };
        let value = match t.kind {
            TableKind::Map => Json::Array(
                entries
                    .iter()
                    .map(|(k, v)| {
                        let map_key = &k[prefix.len()..];
                        Ok(json!({"map_key": hex(map_key), "value": decode(v).map_err(|e| corrupt(k, e))?}))
                    })
                    .collect::<crate::error::Result<_>>()?,
            ),
            _ => {
                let (k, v) = &entries[0];
                decode(v).map_err(|e| corrupt(k, e))?
            }
        };
        out.insert(t.name.clone(), value);
    }
    Ok((!out.is_empty()).then_some(Json::Object(out)))
}
