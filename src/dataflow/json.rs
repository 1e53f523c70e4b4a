//! JSON records under a schema: how a source decodes a Kafka value into a
//! row and how a sink writes one. Fields map to columns by name; fields
//! not in the schema are ignored, a missing field is NULL, nested objects
//! are ROWs. A TIMESTAMP column reads RFC 3339 strings,
//! `yyyy-MM-dd HH:mm:ss[.SSS]` strings (UTC) and epoch milliseconds, and
//! is written as RFC 3339 UTC with milliseconds.

use serde_json::Value as Json;

use super::row::{DataType, Decimal, Field, Row, Schema, Value};

/// Decodes one JSON object into an insert row of `schema`.
pub fn decode_row(payload: &[u8], schema: &Schema) -> Result<Row, String> {
    let json: Json =
        serde_json::from_slice(payload).map_err(|e| format!("value is not valid JSON: {e}"))?;
    let mut values = Vec::with_capacity(schema.len());
    object_columns(&json, &schema.fields, &mut values)?;
    Ok(Row::insert(values))
}

/// The columns `fields` of a JSON object, appended to `out`: by name, a
/// missing field NULL.
pub fn object_columns(json: &Json, fields: &[Field], out: &mut Vec<Value>) -> Result<(), String> {
    let Json::Object(object) = json else {
        return Err("value is JSON but not an object".into());
    };
    for field in fields {
        out.push(match object.get(&field.name) {
            None => Value::Null,
            Some(j) => from_json(j, &field.data_type)
                .map_err(|e| format!("field {:?}: {e}", field.name))?,
        });
    }
    Ok(())
}

/// One JSON value as a value of type `t`.
pub fn from_json(j: &Json, t: &DataType) -> Result<Value, String> {
    if j.is_null() {
        return Ok(Value::Null);
    }
    let wrong = || format!("{j} is not {t}");
    Ok(match t {
        DataType::Boolean => Value::Bool(j.as_bool().ok_or_else(wrong)?),
        DataType::Int | DataType::BigInt => {
            let i = j.as_i64().ok_or_else(wrong)?;
            if *t == DataType::Int && i32::try_from(i).is_err() {
                return Err(format!("{i} is out of INT's range"));
            }
            Value::Int(i)
        }
        DataType::Double => Value::Double(j.as_f64().ok_or_else(wrong)?),
        DataType::Decimal { scale, .. } => match j {
            Json::Number(n) => Value::Decimal(Decimal::parse(&n.to_string(), *scale)?),
            Json::String(s) => Value::Decimal(Decimal::parse(s, *scale)?),
            _ => return Err(wrong()),
        },
        DataType::String => match j {
            Json::String(s) => Value::String(s.clone()),
            // A number or an object where text is expected keeps its JSON text.
            other => Value::String(other.to_string()),
        },
        DataType::Bytes => Value::Bytes(j.as_str().ok_or_else(wrong)?.as_bytes().to_vec()),
        DataType::Timestamp | DataType::TimestampLtz => Value::Timestamp(match j {
            Json::Number(n) => n.as_i64().ok_or_else(wrong)?,
            Json::String(s) => parse_timestamp(s)?,
            _ => return Err(wrong()),
        }),
        // `"2026-12-07"`, or a day count since 1970-01-01 (Avro's).
        DataType::Date => Value::Timestamp(match j {
            Json::Number(n) => n
                .as_i64()
                .and_then(|d| d.checked_mul(MS_PER_DAY))
                .ok_or_else(wrong)?,
            Json::String(s) => parse_date(s)?,
            _ => return Err(wrong()),
        }),
        // An object: its keys read as the key type, in the object's order.
        DataType::Map(key, value) => {
            let object = j.as_object().ok_or_else(wrong)?;
            let mut entries = Vec::with_capacity(object.len());
            for (k, v) in object {
                let k = match key.as_ref() {
                    DataType::String => Value::String(k.clone()),
                    DataType::Int | DataType::BigInt => {
                        Value::Int(k.parse().map_err(|_| format!("key {k:?} is not {key}"))?)
                    }
                    other => from_json(&Json::String(k.clone()), other)?,
                };
                let v = from_json(v, value).map_err(|e| format!("{k:?}: {e}"))?;
                entries.push(Value::Struct(vec![k, v]));
            }
            Value::List(entries)
        }
        // `"10:30:00"`, `"10:30:00.250"`, or milliseconds of the day.
        DataType::Time => Value::Timestamp(match j {
            Json::Number(n) => n
                .as_i64()
                .filter(|ms| (0..MS_PER_DAY).contains(ms))
                .ok_or_else(wrong)?,
            Json::String(s) => parse_time(s)?,
            _ => return Err(wrong()),
        }),
        DataType::List(item) => Value::List(
            j.as_array()
                .ok_or_else(wrong)?
                .iter()
                .map(|x| from_json(x, item))
                .collect::<Result<_, _>>()?,
        ),
        DataType::Struct(fields) => {
            let object = j.as_object().ok_or_else(wrong)?;
            Value::Struct(
                fields
                    .iter()
                    .map(|f| match object.get(&f.name) {
                        None => Ok(Value::Null),
                        Some(x) => {
                            from_json(x, &f.data_type).map_err(|e| format!("{}: {e}", f.name))
                        }
                    })
                    .collect::<Result<_, _>>()?,
            )
        }
    })
}

/// Milliseconds since the epoch of an RFC 3339 / ISO-8601 timestamp, or
/// of `yyyy-MM-dd HH:mm:ss[.SSS]` read as UTC.
pub fn parse_timestamp(s: &str) -> Result<i64, String> {
    if let Ok(ts) = s.parse::<jiff::Timestamp>() {
        return Ok(ts.as_millisecond());
    }
    let civil = s.parse::<jiff::civil::DateTime>().map_err(|_| {
        format!("{s:?} is not a timestamp (RFC 3339, or yyyy-MM-dd HH:mm:ss[.SSS])")
    })?;
    civil
        .to_zoned(jiff::tz::TimeZone::UTC)
        .map(|z| z.timestamp().as_millisecond())
        .map_err(|e| format!("{s:?}: {e}"))
}

/// A map key as a JSON object's key: text as it is, anything else as its
/// JSON text.
pub fn key_text(k: &Value, t: &DataType) -> String {
    match k {
        Value::String(s) => s.clone(),
        Value::Timestamp(ms) if *t == DataType::Date => format_date(*ms),
        other => value_json(other).to_string(),
    }
}

/// Milliseconds in a day: a DATE is carried as its midnight's.
pub const MS_PER_DAY: i64 = 86_400_000;

/// The milliseconds of the midnight (UTC) of `yyyy-MM-dd`.
pub fn parse_date(s: &str) -> Result<i64, String> {
    let d = s
        .trim()
        .parse::<jiff::civil::Date>()
        .map_err(|_| format!("{s:?} is not a date (yyyy-MM-dd)"))?;
    d.to_zoned(jiff::tz::TimeZone::UTC)
        .map(|z| z.timestamp().as_millisecond())
        .map_err(|e| format!("{s:?}: {e}"))
}

/// The milliseconds of the day of `HH:mm:ss[.SSS]`.
pub fn parse_time(s: &str) -> Result<i64, String> {
    let t = s
        .trim()
        .parse::<jiff::civil::Time>()
        .map_err(|_| format!("{s:?} is not a time (HH:mm:ss[.SSS])"))?;
    Ok(i64::from(t.hour()) * 3_600_000
        + i64::from(t.minute()) * 60_000
        + i64::from(t.second()) * 1000
        + i64::from(t.millisecond()))
}

/// `10:30:00`, or `10:30:00.250` when it has milliseconds: a TIME's
/// milliseconds (of its day).
pub fn format_time(ms: i64) -> String {
    let ms = ms.rem_euclid(MS_PER_DAY);
    let (h, m, s, f) = (ms / 3_600_000, ms / 60_000 % 60, ms / 1000 % 60, ms % 1000);
    if f == 0 {
        format!("{h:02}:{m:02}:{s:02}")
    } else {
        format!("{h:02}:{m:02}:{s:02}.{f:03}")
    }
}

/// `2026-11-30`: the day of a DATE's milliseconds.
pub fn format_date(ms: i64) -> String {
    match jiff::Timestamp::from_millisecond(ms) {
        Ok(ts) => {
            let z = ts.to_zoned(jiff::tz::TimeZone::UTC);
            format!("{:04}-{:02}-{:02}", z.year(), z.month(), z.day())
        }
        Err(_) => ms.to_string(),
    }
}

/// `2026-11-30T10:00:00.000Z`.
pub fn format_timestamp(ms: i64) -> String {
    match jiff::Timestamp::from_millisecond(ms) {
        Ok(ts) => {
            let z = ts.to_zoned(jiff::tz::TimeZone::UTC);
            format!(
                "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
                z.year(),
                z.month(),
                z.day(),
                z.hour(),
                z.minute(),
                z.second(),
                z.millisecond()
            )
        }
        Err(_) => ms.to_string(),
    }
}

/// Writes a JSON string.
fn write_str(s: &str, out: &mut Vec<u8>) {
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    } else {
        serde_json::to_writer(&mut *out, s).expect("a string serializes");
    }
}

/// Writes a value of a column of type `t` as JSON. Written directly, not
/// through `serde_json::Value`: fields stay in schema order and a decimal
/// keeps its exact digits (`12.50`).
pub fn write_value(v: &Value, t: &DataType, out: &mut Vec<u8>) {
    use std::io::Write;
    match v {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Int(i) => out.extend_from_slice(itoa::Buffer::new().format(*i).as_bytes()),
        Value::Double(d) if d.is_finite() => {
            serde_json::to_writer(&mut *out, d).expect("a finite double serializes");
        }
        // JSON has no NaN or infinity.
        Value::Double(_) => out.extend_from_slice(b"null"),
        Value::Decimal(d) => {
            let _ = write!(out, "{d}");
        }
        Value::String(s) => write_str(s, out),
        Value::Bytes(b) => write_str(&String::from_utf8_lossy(b), out),
        Value::Timestamp(ms) if *t == DataType::Date => write_str(&format_date(*ms), out),
        Value::Timestamp(ms) if *t == DataType::Time => write_str(&format_time(*ms), out),
        Value::Timestamp(ms) => write_str(&format_timestamp(*ms), out),
        Value::List(entries) if matches!(t, DataType::Map(..)) => {
            let DataType::Map(key, value) = t else {
                unreachable!("matched")
            };
            out.push(b'{');
            for (i, e) in entries.iter().enumerate() {
                let Value::Struct(kv) = e else { continue };
                if i > 0 {
                    out.push(b',');
                }
                write_str(&key_text(&kv[0], key), out);
                out.push(b':');
                write_value(&kv[1], value, out);
            }
            out.push(b'}');
        }
        Value::List(items) => {
            let item = match t {
                DataType::List(item) => item.as_ref(),
                _ => &DataType::String,
            };
            out.push(b'[');
            for (i, x) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_value(x, item, out);
            }
            out.push(b']');
        }
        Value::Struct(items) => match t {
            DataType::Struct(fields) => write_object(items, fields, out),
            _ => write_value(&Value::List(items.clone()), &DataType::String, out),
        },
    }
}

fn write_object(values: &[Value], fields: &[Field], out: &mut Vec<u8>) {
    out.push(b'{');
    for (i, (f, v)) in fields.iter().zip(values).enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_str(&f.name, out);
        out.push(b':');
        write_value(v, &f.data_type, out);
    }
    out.push(b'}');
}

/// A row as a JSON object of its schema's columns, in schema order.
pub fn encode_row(row: &Row, schema: &Schema, out: &mut Vec<u8>) {
    out.clear();
    write_object(&row.values, &schema.fields, out);
}

/// [`encode_row`] for one schema, row after row (a sink's): each field's
/// name is escaped once, when the encoder is made, not once per row.
#[derive(Debug, Clone)]
pub struct RowEncoder {
    /// Per column: `{"name":` for the first, `,"name":` for the others.
    prefixes: Vec<Vec<u8>>,
    types: Vec<DataType>,
}

impl RowEncoder {
    pub fn new(schema: &Schema) -> Self {
        let prefixes = schema
            .fields
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let mut p = vec![if i == 0 { b'{' } else { b',' }];
                write_str(&f.name, &mut p);
                p.push(b':');
                p
            })
            .collect();
        Self {
            prefixes,
            types: schema.fields.iter().map(|f| f.data_type.clone()).collect(),
        }
    }

    /// The same bytes as [`encode_row`].
    pub fn encode(&self, row: &Row, out: &mut Vec<u8>) {
        out.clear();
        if self.prefixes.is_empty() {
            out.extend_from_slice(b"{}");
            return;
        }
        for ((prefix, t), v) in self.prefixes.iter().zip(&self.types).zip(&row.values) {
            out.extend_from_slice(prefix);
            write_value(v, t, out);
        }
        out.push(b'}');
    }
}

/// The columns `columns` of a row as a JSON object: a sink's Kafka key.
pub fn encode_columns(row: &Row, schema: &Schema, columns: &[usize], out: &mut Vec<u8>) {
    out.clear();
    out.push(b'{');
    for (i, c) in columns.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        let f = &schema.fields[*c];
        write_str(&f.name, out);
        out.push(b':');
        write_value(row.get(*c), &f.data_type, out);
    }
    out.push(b'}');
}

/// A value as JSON without its column's type: timestamps as RFC 3339,
/// decimals with their digits, structs as arrays.
pub fn value_json(v: &Value) -> Json {
    match v {
        Value::Null => Json::Null,
        Value::Bool(b) => Json::Bool(*b),
        Value::Int(i) => Json::from(*i),
        Value::Double(d) => serde_json::Number::from_f64(*d).map_or(Json::Null, Json::Number),
        Value::Decimal(d) => {
            serde_json::from_str(&d.to_string()).unwrap_or_else(|_| Json::String(d.to_string()))
        }
        Value::String(s) => Json::String(s.clone()),
        Value::Bytes(b) => Json::String(String::from_utf8_lossy(b).into_owned()),
        Value::Timestamp(ms) => Json::String(format_timestamp(*ms)),
        Value::List(items) | Value::Struct(items) => {
            Json::Array(items.iter().map(value_json).collect())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema() -> Schema {
        Schema::of(&[
            ("auction", DataType::BigInt),
            (
                "price",
                DataType::Decimal {
                    precision: 10,
                    scale: 2,
                },
            ),
            ("at", DataType::Timestamp),
            (
                "who",
                DataType::Struct(vec![
                    Field::new("name", DataType::String),
                    Field::new("tags", DataType::List(Box::new(DataType::String))),
                ]),
            ),
            ("missing", DataType::Boolean),
        ])
    }

    #[test]
    fn a_map_reads_an_object_and_writes_it_back_in_order() {
        let t = DataType::Map(Box::new(DataType::String), Box::new(DataType::BigInt));
        let v = from_json(&serde_json::json!({"b": 2, "a": null}), &t).unwrap();
        let entry = |k: &str, v: Value| Value::Struct(vec![Value::from(k), v]);
        // serde_json's objects keep their keys sorted here.
        assert_eq!(
            v,
            Value::List(vec![entry("a", Value::Null), entry("b", Value::Int(2))])
        );
        let mut out = Vec::new();
        write_value(&v, &t, &mut out);
        assert_eq!(out, br#"{"a":null,"b":2}"#);
        let ints = DataType::Map(Box::new(DataType::Int), Box::new(DataType::String));
        let e = from_json(&serde_json::json!({"x": "y"}), &ints).unwrap_err();
        assert!(e.contains("key \"x\" is not INT"), "{e}");
    }

    #[test]
    fn a_date_and_a_time_read_and_write_back() {
        let date = DataType::Date;
        let v = from_json(&serde_json::json!("2024-02-29"), &date).unwrap();
        assert_eq!(v, Value::Timestamp(1_709_164_800_000));
        assert_eq!(from_json(&serde_json::json!(19_782), &date).unwrap(), v);
        let mut out = Vec::new();
        write_value(&v, &date, &mut out);
        assert_eq!(out, b"\"2024-02-29\"");
        let e = from_json(&serde_json::json!("2024-02-30"), &date).unwrap_err();
        assert!(e.contains("is not a date"), "{e}");
        let time = DataType::Time;
        let v = from_json(&serde_json::json!("10:30:00.250"), &time).unwrap();
        assert_eq!(v, Value::Timestamp(37_800_250));
        write_value(&v, &time, &mut out);
        assert!(out.ends_with(b"\"10:30:00.250\""));
        assert!(from_json(&serde_json::json!(86_400_000), &time).is_err());
    }

    #[test]
    fn the_row_encoder_writes_what_encode_row_writes() {
        let schema = Schema::of(&[
            ("k\"ey", DataType::String),
            ("n", DataType::BigInt),
            ("d", DataType::Double),
            ("t", DataType::Timestamp),
        ]);
        let rows = [
            Row::insert(vec![
                Value::from("a\"b\n"),
                Value::Int(i64::MIN),
                Value::Double(0.5),
                Value::Timestamp(1_764_000_000_123),
            ]),
            Row::insert(vec![
                Value::from("plain"),
                Value::Int(-7),
                Value::Double(f64::NAN),
                Value::Null,
            ]),
        ];
        let encoder = RowEncoder::new(&schema);
        for row in &rows {
            let (mut a, mut b) = (Vec::new(), vec![b'x']);
            encode_row(row, &schema, &mut a);
            encoder.encode(row, &mut b);
            assert_eq!(String::from_utf8(b).unwrap(), String::from_utf8(a).unwrap());
        }
        let mut out = Vec::new();
        RowEncoder::new(&Schema::of(&[])).encode(&Row::insert(vec![]), &mut out);
        assert_eq!(out, b"{}");
    }

    #[test]
    fn objects_decode_by_name_and_ignore_other_fields() {
        let row = decode_row(
            br#"{"auction":7,"price":12.5,"at":"2026-11-30 10:00:00.250","who":{"name":"ann","tags":["a"]},"extra":1}"#,
            &schema(),
        )
        .unwrap();
        assert_eq!(row.values[0], Value::Int(7));
        assert_eq!(
            row.values[1].clone(),
            Value::Decimal(Decimal {
                unscaled: 1250,
                scale: 2
            })
        );
        assert_eq!(
            format_timestamp(row.values[2].as_timestamp().unwrap()),
            "2026-11-30T10:00:00.250Z"
        );
        assert_eq!(
            row.values[3],
            Value::Struct(vec![
                Value::String("ann".into()),
                Value::List(vec![Value::String("a".into())])
            ])
        );
        assert_eq!(row.values[4], Value::Null);
        let mut out = Vec::new();
        encode_row(&row, &schema(), &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"auction":7,"price":12.50,"at":"2026-11-30T10:00:00.250Z","who":{"name":"ann","tags":["a"]},"missing":null}"#
        );
    }

    #[test]
    fn timestamps_read_three_ways() {
        let want = parse_timestamp("2026-11-30T10:00:00Z").unwrap();
        assert_eq!(parse_timestamp("2026-11-30T11:00:00+01:00").unwrap(), want);
        assert_eq!(parse_timestamp("2026-11-30 10:00:00").unwrap(), want);
        let s = Schema::of(&[("t", DataType::Timestamp)]);
        let row = decode_row(format!("{{\"t\":{want}}}").as_bytes(), &s).unwrap();
        assert_eq!(row.values[0], Value::Timestamp(want));
        assert!(parse_timestamp("yesterday")
            .unwrap_err()
            .contains("not a timestamp"));
    }

    #[test]
    fn bad_fields_are_named() {
        let e = decode_row(br#"{"auction":"x"}"#, &schema()).unwrap_err();
        assert!(e.contains("\"auction\"") && e.contains("BIGINT"), "{e}");
        let s = Schema::of(&[("n", DataType::Int)]);
        assert!(decode_row(br#"{"n":3000000000}"#, &s)
            .unwrap_err()
            .contains("INT's range"));
        assert!(decode_row(b"[1]", &s)
            .unwrap_err()
            .contains("not an object"));
    }
}
