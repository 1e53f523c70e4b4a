//! Avro encoding for sinks: the schema derived from the columns, or a
//! registered schema the sink is given.

use std::sync::Arc;

use apache_avro::schema::Schema as Avro;

use super::{deref, kind_name, names, parse, twos_complement_bytes, Names};
use crate::dataflow::row::{DataType, Decimal, Field, Value};
use crate::format::confluent::{frame, write_zigzag};
use crate::format::registry::{Patience, Registration, Registry, SchemaKind};
use crate::format::BytesEncoder;

/// The Avro schema (JSON) of a sink's columns, as Flink's `avro` format
/// derives it: a record `org.apache.flink.avro.generated.record`, every
/// field a union with null (default null).
pub fn schema_of(columns: &[Field], name: &str) -> String {
    let mut names = 0usize;
    let record = record_json(columns, name, &mut names);
    let mut top = record;
    top["namespace"] = serde_json::json!("org.apache.flink.avro.generated");
    top.to_string()
}

fn record_json(columns: &[Field], name: &str, counter: &mut usize) -> serde_json::Value {
    let fields: Vec<serde_json::Value> = columns
        .iter()
        .map(|c| {
            serde_json::json!({
                "name": avro_name(&c.name),
                "type": ["null", type_json(&c.data_type, &format!("{name}_{}", avro_name(&c.name)), counter)],
                "default": null,
            })
        })
        .collect();
    serde_json::json!({"type": "record", "name": avro_name(name), "fields": fields})
}

fn type_json(t: &DataType, name: &str, counter: &mut usize) -> serde_json::Value {
    use serde_json::json;
    match t {
        DataType::Boolean => json!("boolean"),
        DataType::Int => json!("int"),
        DataType::BigInt => json!("long"),
        DataType::Double => json!("double"),
        DataType::Decimal { precision, scale } => {
            json!({"type": "bytes", "logicalType": "decimal", "precision": precision, "scale": scale})
        }
        DataType::String => json!("string"),
        DataType::Bytes => json!("bytes"),
        DataType::Timestamp | DataType::TimestampLtz => {
            json!({"type": "long", "logicalType": "timestamp-millis"})
        }
        DataType::Date => json!({"type": "int", "logicalType": "date"}),
        DataType::Time => json!({"type": "int", "logicalType": "time-millis"}),
        DataType::List(item) => {
            json!({"type": "array", "items": ["null", type_json(item, name, counter)]})
        }
        // Avro's maps have string keys: another key is written as its text.
        DataType::Map(_, value) => {
            json!({"type": "map", "values": ["null", type_json(value, name, counter)]})
        }
        DataType::Struct(fields) => {
            *counter += 1;
            record_json(fields, name, counter)
        }
    }
}

/// A column name as an Avro name (`[A-Za-z_][A-Za-z0-9_]*`).
fn avro_name(name: &str) -> String {
    let mut s = crate::format::identifier_chars(name);
    if s.is_empty() || s.starts_with(|c: char| c.is_ascii_digit()) {
        s.insert(0, '_');
    }
    s
}

/// Writes rows as registry-framed Avro of [`schema_of`] their columns.
pub struct AvroEncoder {
    registration: Registration,
    types: Vec<DataType>,
}

impl AvroEncoder {
    /// `registration` holds [`schema_of`] the columns (or a schema the
    /// registry already has for them).
    pub fn new(columns: &[Field], registration: Registration) -> Self {
        Self {
            registration,
            types: columns.iter().map(|c| c.data_type.clone()).collect(),
        }
    }
}

impl BytesEncoder for AvroEncoder {
    fn encode(&self, values: &[&Value], out: &mut Vec<u8>) -> Result<(), String> {
        out.clear();
        frame(self.registration.id()?, out);
        for (v, t) in values.iter().zip(&self.types) {
            write_nullable(v, t, out)?;
        }
        Ok(())
    }
}

fn write_nullable(v: &Value, t: &DataType, out: &mut Vec<u8>) -> Result<(), String> {
    if v.is_null() {
        out.push(0);
        return Ok(());
    }
    out.push(2); // zigzag(1): the union's second branch
    write_value(v, t, out)
}

fn write_bytes(b: &[u8], out: &mut Vec<u8>) {
    write_zigzag(b.len() as i64, out);
    out.extend_from_slice(b);
}

fn write_value(v: &Value, t: &DataType, out: &mut Vec<u8>) -> Result<(), String> {
    match (v, t) {
        (Value::Bool(b), _) => out.push(u8::from(*b)),
        (Value::Int(i), DataType::Double) => out.extend_from_slice(&(*i as f64).to_le_bytes()),
        (Value::Timestamp(ms), DataType::Date) => {
            write_zigzag(ms.div_euclid(crate::dataflow::json::MS_PER_DAY), out)
        }
        (Value::Int(i), _) | (Value::Timestamp(i), _) => write_zigzag(*i, out),
        (Value::Double(d), _) => out.extend_from_slice(&d.to_le_bytes()),
        (Value::Decimal(d), DataType::Decimal { scale, .. }) => {
            let d = if d.scale == *scale {
                *d
            } else {
                Decimal::parse(&d.to_string(), *scale)?
            };
            write_bytes(&twos_complement_bytes(d.unscaled), out);
        }
        (Value::String(s), _) => write_bytes(s.as_bytes(), out),
        (Value::Bytes(b), _) => write_bytes(b, out),
        (Value::List(entries), DataType::Map(key, value)) => {
            if !entries.is_empty() {
                write_zigzag(entries.len() as i64, out);
                for e in entries {
                    let Value::Struct(kv) = e else {
                        return Err("a map entry is not a (key, value) pair".into());
                    };
                    write_bytes(crate::dataflow::json::key_text(&kv[0], key).as_bytes(), out);
                    write_nullable(&kv[1], value, out)?;
                }
            }
            out.push(0);
        }
        (Value::List(items), DataType::List(item)) => {
            if !items.is_empty() {
                write_zigzag(items.len() as i64, out);
                for x in items {
                    write_nullable(x, item, out)?;
                }
            }
            out.push(0);
        }
        (Value::Struct(values), DataType::Struct(fields)) => {
            for (x, f) in values.iter().zip(fields) {
                write_nullable(x, &f.data_type, out)?;
            }
        }
        (v, t) => return Err(format!("{v:?} is not a value of the column's type {t}")),
    }
    Ok(())
}

/// Writes rows with a schema the registry already holds (a sink's
/// `schema_id`): the writer's fields in its order, each from the column of
/// its name, as that schema's types say (a union's branch by the value,
/// an enum's symbol by name, a decimal at its scale, timestamps in their
/// unit). Compiled once, when the sink writes its first record.
pub struct GivenSchemaEncoder {
    registry: Arc<Registry>,
    schema_id: u32,
    columns: Vec<Field>,
    plan: std::sync::OnceLock<Result<Vec<FieldWrite>, String>>,
}

/// A writer field: the column it takes (None: the writer's default, null).
#[derive(Debug)]
pub(super) struct FieldWrite {
    pub(super) column: Option<usize>,
    pub(super) write: Write,
    pub(super) name: String,
}

#[derive(Debug, Clone)]
pub(super) enum Write {
    Null,
    Bool,
    Int,
    Long,
    Float,
    Double,
    Text,
    Bytes,
    Enum(Vec<String>),
    Fixed(usize),
    Decimal {
        scale: u8,
        fixed: Option<usize>,
    },
    /// Epoch milliseconds times this (1 millis, 1000 micros, 1e6 nanos).
    Timestamp(i64),
    /// Days since the epoch.
    Date,
    /// Per branch; NULL takes the null branch.
    Union(Vec<Write>),
    Array(Box<Write>),
    /// From ARRAY<ROW<key, value>>.
    Map(Box<Write>),
    Record(Vec<(Option<usize>, Write)>),
}

impl GivenSchemaEncoder {
    pub fn new(registry: Arc<Registry>, schema_id: u32, columns: &[Field]) -> Self {
        Self {
            registry,
            schema_id,
            columns: columns.to_vec(),
            plan: std::sync::OnceLock::new(),
        }
    }

    /// Fetches the schema and compiles the plan (once); Err names the
    /// field the columns cannot fill.
    pub fn check(&self, patience: Patience) -> Result<(), String> {
        self.plan(patience).map(|_| ())
    }

    fn plan(&self, patience: Patience) -> Result<&Vec<FieldWrite>, String> {
        if let Some(p) = self.plan.get() {
            return p.as_ref().map_err(Clone::clone);
        }
        let schema = self
            .registry
            .schema_by_id(self.schema_id, patience)
            .map_err(|e| e.to_string())?;
        let plan = if schema.kind != SchemaKind::Avro {
            Err(format!(
                "schema id {} is a {} schema, not Avro",
                self.schema_id,
                schema.kind.api_name()
            ))
        } else {
            parse(&schema.text)
                .and_then(|w| compile_writes(&w, &self.columns))
                .map_err(|e| format!("schema id {}: {e}", self.schema_id))
        };
        self.plan
            .get_or_init(|| plan)
            .as_ref()
            .map_err(Clone::clone)
    }
}

pub(super) fn compile_writes(writer: &Avro, columns: &[Field]) -> Result<Vec<FieldWrite>, String> {
    let names = names(writer)?;
    let Avro::Record(r) = deref(writer, &names)? else {
        return Err("the schema is not a record".into());
    };
    r.fields
        .iter()
        .map(|f| {
            let column = columns
                .iter()
                .position(|c| c.name.eq_ignore_ascii_case(&f.name));
            let write = match column {
                Some(i) => write_for(&f.schema, &columns[i].data_type, &names, &f.name)?,
                None => {
                    let nullable = matches!(&f.schema, Avro::Union(u) if u.variants().iter().any(|v| matches!(v, Avro::Null)))
                        || matches!(f.schema, Avro::Null);
                    if !nullable {
                        return Err(format!(
                            "field {} is not a column of the result ({}) and cannot be null",
                            f.name,
                            columns.iter().map(|c| c.name.as_str()).collect::<Vec<_>>().join(", ")
                        ));
                    }
                    write_for(&f.schema, &DataType::String, &names, &f.name)?
                }
            };
            Ok(FieldWrite {
                column,
                write,
                name: f.name.clone(),
            })
        })
        .collect()
}

fn write_for(schema: &Avro, t: &DataType, names: &Names<'_>, path: &str) -> Result<Write, String> {
    let schema = deref(schema, names)?;
    let refuse = || {
        format!(
            "field {path} is {}, which the column's {t} cannot be written as",
            kind_name(schema)
        )
    };
    use DataType as T;
    Ok(match (schema, t) {
        (Avro::Null, _) => Write::Null,
        (Avro::Union(u), _) => Write::Union(
            u.variants()
                .iter()
                .map(|v| write_for(v, t, names, path).unwrap_or(Write::Null))
                .collect(),
        ),
        (Avro::Boolean, T::Boolean) => Write::Bool,
        (Avro::Int, T::Int) => Write::Int,
        (Avro::Long, T::Int | T::BigInt) => Write::Long,
        (Avro::Float, T::Double | T::Int | T::BigInt) => Write::Float,
        (Avro::Double, T::Double | T::Int | T::BigInt | T::Decimal { .. }) => Write::Double,
        (Avro::String | Avro::Uuid, T::String) => Write::Text,
        (Avro::Bytes, T::Bytes | T::String) => Write::Bytes,
        (Avro::Fixed(f), T::Bytes) => Write::Fixed(f.size),
        (Avro::Enum(e), T::String) => Write::Enum(e.symbols.clone()),
        (Avro::Decimal(d), T::Decimal { .. } | T::Int | T::BigInt) => Write::Decimal {
            scale: d.scale as u8,
            fixed: match deref(&d.inner, names)? {
                Avro::Fixed(f) => Some(f.size),
                _ => None,
            },
        },
        (Avro::TimestampMillis | Avro::LocalTimestampMillis, T::Timestamp | T::TimestampLtz) => {
            Write::Timestamp(1)
        }
        (Avro::TimestampMicros | Avro::LocalTimestampMicros, T::Timestamp | T::TimestampLtz) => {
            Write::Timestamp(1000)
        }
        (Avro::TimestampNanos | Avro::LocalTimestampNanos, T::Timestamp | T::TimestampLtz) => {
            Write::Timestamp(1_000_000)
        }
        (Avro::Date, T::Timestamp | T::Date) => Write::Date,
        (Avro::Array(a), T::List(item)) => Write::Array(Box::new(write_for(
            &a.items,
            item,
            names,
            &format!("{path}[]"),
        )?)),
        (Avro::Map(m), T::List(entry)) => match entry.as_ref() {
            T::Struct(fields) if fields.len() == 2 => Write::Map(Box::new(write_for(
                &m.types,
                &fields[1].data_type,
                names,
                &format!("{path}{{}}"),
            )?)),
            _ => return Err(refuse()),
        },
        (Avro::Record(r), T::Struct(fields)) => Write::Record(
            r.fields
                .iter()
                .map(|f| {
                    let column = fields
                        .iter()
                        .position(|c| c.name.eq_ignore_ascii_case(&f.name));
                    let t = column.map_or(&T::String, |i| &fields[i].data_type);
                    Ok((
                        column,
                        write_for(&f.schema, t, names, &format!("{path}.{}", f.name))?,
                    ))
                })
                .collect::<Result<_, String>>()?,
        ),
        _ => return Err(refuse()),
    })
}

/// Whether `w` can write `v` (a union picks the first branch that can).
fn can_write(w: &Write, v: &Value) -> bool {
    match (w, v) {
        (Write::Null, Value::Null) => true,
        (Write::Null, _) | (_, Value::Null) => false,
        (Write::Union(_), _) => false,
        (Write::Bool, Value::Bool(_)) => true,
        (Write::Int | Write::Long, Value::Int(_)) => true,
        (Write::Float | Write::Double, Value::Double(_) | Value::Int(_) | Value::Decimal(_)) => {
            true
        }
        (Write::Text | Write::Enum(_), Value::String(_)) => true,
        (Write::Bytes, Value::Bytes(_) | Value::String(_)) => true,
        (Write::Fixed(n), Value::Bytes(b)) => b.len() == *n,
        (Write::Decimal { .. }, Value::Decimal(_) | Value::Int(_)) => true,
        (Write::Timestamp(_) | Write::Date, Value::Timestamp(_)) => true,
        (Write::Array(_) | Write::Map(_), Value::List(_)) => true,
        (Write::Record(_), Value::Struct(_)) => true,
        _ => false,
    }
}

pub(super) fn write_given(
    w: &Write,
    v: &Value,
    out: &mut Vec<u8>,
    path: &str,
) -> Result<(), String> {
    let wrong = || format!("field {path}: {v:?} does not fit the schema's type");
    match (w, v) {
        (Write::Union(branches), v) => {
            let b = branches
                .iter()
                .position(|b| can_write(b, v))
                .ok_or_else(|| match v {
                    Value::Null => {
                        format!("field {path} is NULL and the schema's union has no null")
                    }
                    _ => wrong(),
                })?;
            write_zigzag(b as i64, out);
            write_given(&branches[b], v, out, path)?;
        }
        (Write::Null, Value::Null) => {}
        (_, Value::Null) => {
            return Err(format!(
                "field {path} is NULL and the schema's type is not nullable"
            ))
        }
        (Write::Bool, Value::Bool(b)) => out.push(u8::from(*b)),
        (Write::Int, Value::Int(i)) => {
            i32::try_from(*i).map_err(|_| format!("field {path}: {i} does not fit an Avro int"))?;
            write_zigzag(*i, out)
        }
        (Write::Long, Value::Int(i)) => write_zigzag(*i, out),
        (Write::Float, v) => {
            let f = v.as_f64().ok_or_else(wrong)? as f32;
            out.extend_from_slice(&f.to_le_bytes())
        }
        (Write::Double, v) => out.extend_from_slice(&v.as_f64().ok_or_else(wrong)?.to_le_bytes()),
        (Write::Text | Write::Bytes, Value::String(s)) => write_bytes(s.as_bytes(), out),
        (Write::Bytes, Value::Bytes(b)) => write_bytes(b, out),
        (Write::Fixed(_), Value::Bytes(b)) => out.extend_from_slice(b),
        (Write::Enum(symbols), Value::String(s)) => {
            let i = symbols.iter().position(|x| x == s).ok_or_else(|| {
                format!(
                    "field {path}: {s:?} is not a symbol of the enum ({})",
                    symbols.join(", ")
                )
            })?;
            write_zigzag(i as i64, out)
        }
        (Write::Decimal { scale, fixed }, v) => {
            let d = match v {
                Value::Decimal(d) if d.scale == *scale => *d,
                Value::Decimal(d) => Decimal::parse(&d.to_string(), *scale)?,
                Value::Int(i) => Decimal::parse(&i.to_string(), *scale)?,
                _ => return Err(wrong()),
            };
            let mut bytes = twos_complement_bytes(d.unscaled);
            match fixed {
                None => write_bytes(&bytes, out),
                Some(n) if bytes.len() <= *n => {
                    let fill = if d.unscaled < 0 { 0xff } else { 0 };
                    let mut padded = vec![fill; n - bytes.len()];
                    padded.append(&mut bytes);
                    out.extend_from_slice(&padded)
                }
                Some(n) => return Err(format!("field {path}: {d} does not fit fixed({n})")),
            }
        }
        (Write::Timestamp(per_milli), Value::Timestamp(ms)) => write_zigzag(
            ms.checked_mul(*per_milli)
                .ok_or_else(|| format!("field {path}: {ms} ms is out of range"))?,
            out,
        ),
        (Write::Date, Value::Timestamp(ms)) => write_zigzag(ms.div_euclid(86_400_000), out),
        (Write::Array(item), Value::List(items)) => {
            if !items.is_empty() {
                write_zigzag(items.len() as i64, out);
                for x in items {
                    write_given(item, x, out, path)?;
                }
            }
            out.push(0)
        }
        (Write::Map(value), Value::List(entries)) => {
            if !entries.is_empty() {
                write_zigzag(entries.len() as i64, out);
                for e in entries {
                    let Value::Struct(kv) = e else {
                        return Err(wrong());
                    };
                    let key = match kv.first() {
                        Some(Value::String(k)) => k.as_str(),
                        _ => return Err(format!("field {path}: a map key is not a string")),
                    };
                    write_bytes(key.as_bytes(), out);
                    write_given(value, kv.get(1).unwrap_or(&Value::Null), out, path)?;
                }
            }
            out.push(0)
        }
        (Write::Record(fields), Value::Struct(values)) => {
            for (column, w) in fields {
                let v = column.and_then(|i| values.get(i)).unwrap_or(&Value::Null);
                write_given(w, v, out, path)?;
            }
        }
        _ => return Err(wrong()),
    }
    Ok(())
}

impl BytesEncoder for GivenSchemaEncoder {
    fn encode(&self, values: &[&Value], out: &mut Vec<u8>) -> Result<(), String> {
        let plan = self.plan(Patience::Forever)?;
        out.clear();
        frame(self.schema_id, out);
        for f in plan {
            let v = f.column.map_or(&Value::Null, |i| values[i]);
            write_given(&f.write, v, out, &f.name)?;
        }
        Ok(())
    }
}
