//! Avro, framed for a schema registry (Flink's `avro-confluent`): each
//! record names its writer's schema by id; the table's columns are the
//! reader. Per writer id a plan is compiled once ([`Read`]): which writer
//! field becomes which column (by name, case-insensitive), what is
//! skipped, how a type is converted (Avro's promotions: int to long to
//! double, string and bytes; and into weir's types), and the reader's
//! defaults for columns the writer lacks. Records are then decoded
//! straight from Avro's binary encoding into [`Value`]s.
//!
//! Type mapping (docs/formats.md): boolean BOOLEAN, int INT, long BIGINT,
//! float and double DOUBLE, string, enum and uuid VARCHAR, bytes and fixed
//! BYTES, decimal DECIMAL(p, s), timestamp-millis/micros/nanos (and the
//! local ones) TIMESTAMP(3), date TIMESTAMP(3) at midnight UTC, time-millis
//! and time-micros INT (milliseconds of the day), array ARRAY, map
//! ARRAY<ROW<key VARCHAR, value T>>, record ROW, a union with null the
//! nullable type. Other unions are refused where columns are derived.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use apache_avro::schema::{Name, RecordSchema, ResolvedSchema, Schema as Avro};

use super::confluent::{frame, read_zigzag, unframe, write_zigzag};
use super::registry::{Patience, Registration, Registry, SchemaKind};
use super::{BytesDecoder, BytesEncoder, DecodeError, Decoded};
use crate::dataflow::row::{DataType, Decimal, Field, RowKind, Value};

/// Parses an Avro schema's JSON text.
pub fn parse(text: &str) -> Result<Avro, String> {
    Avro::parse_str(text).map_err(|e| format!("not a valid Avro schema: {e}"))
}

type Names<'a> = HashMap<Name, &'a Avro>;

fn names(schema: &Avro) -> Result<Names<'_>, String> {
    let resolved =
        ResolvedSchema::try_from(schema).map_err(|e| format!("an Avro schema's names: {e}"))?;
    Ok(resolved.get_names().clone())
}

fn deref<'a>(schema: &'a Avro, names: &Names<'a>) -> Result<&'a Avro, String> {
    match schema {
        Avro::Ref { name } => names
            .get(name)
            .copied()
            .ok_or_else(|| format!("the Avro schema names type {name:?} but never defines it")),
        other => Ok(other),
    }
}

/// The columns of a record schema (a table without a column list takes
/// them from its subject's latest schema), each with the reader's default.
pub fn columns(schema: &Avro) -> Result<Vec<(Field, Option<Value>)>, String> {
    let names = names(schema)?;
    let Avro::Record(record) = deref(schema, &names)? else {
        return Err(format!(
            "the schema is {}, not a record: there are no columns to read",
            kind_name(schema)
        ));
    };
    record
        .fields
        .iter()
        .map(|f| {
            let t = column_type(&f.schema, &names, &f.name)?;
            let default = f.default.as_ref().and_then(|d| default_value(d, &t));
            Ok((Field::new(f.name.clone(), t), default))
        })
        .collect()
}

/// weir's type for an Avro type; `path` names the field in errors.
fn column_type(schema: &Avro, names: &Names<'_>, path: &str) -> Result<DataType, String> {
    Ok(match deref(schema, names)? {
        Avro::Null => {
            return Err(format!(
                "field {path} is always null: it has no type to make a column of"
            ))
        }
        Avro::Boolean => DataType::Boolean,
        Avro::Int => DataType::Int,
        Avro::Long => DataType::BigInt,
        Avro::Float | Avro::Double => DataType::Double,
        Avro::String | Avro::Enum(_) | Avro::Uuid => DataType::String,
        Avro::Bytes | Avro::Fixed(_) | Avro::Duration | Avro::BigDecimal => DataType::Bytes,
        Avro::Decimal(d) => {
            if d.precision > 38 {
                return Err(format!(
                    "field {path} is decimal({}, {}): weir's DECIMAL holds 38 digits",
                    d.precision, d.scale
                ));
            }
            DataType::Decimal {
                precision: d.precision as u8,
                scale: d.scale as u8,
            }
        }
        Avro::Date
        | Avro::TimestampMillis
        | Avro::TimestampMicros
        | Avro::TimestampNanos
        | Avro::LocalTimestampMillis
        | Avro::LocalTimestampMicros
        | Avro::LocalTimestampNanos => DataType::Timestamp,
        Avro::TimeMillis | Avro::TimeMicros => DataType::Int,
        Avro::Array(a) => DataType::List(Box::new(column_type(
            &a.items,
            names,
            &format!("{path}[]"),
        )?)),
        Avro::Map(m) => DataType::List(Box::new(DataType::Struct(vec![
            Field::new("key", DataType::String),
            Field::new(
                "value",
                column_type(&m.types, names, &format!("{path}{{}}"))?,
            ),
        ]))),
        Avro::Record(r) => DataType::Struct(
            r.fields
                .iter()
                .map(|f| {
                    Ok(Field::new(
                        f.name.clone(),
                        column_type(&f.schema, names, &format!("{path}.{}", f.name))?,
                    ))
                })
                .collect::<Result<_, String>>()?,
        ),
        Avro::Union(u) => {
            let others: Vec<&Avro> = u
                .variants()
                .iter()
                .filter(|v| !matches!(v, Avro::Null))
                .collect();
            match others[..] {
                [only] => column_type(only, names, path)?,
                _ => {
                    return Err(format!(
                    "field {path} is a union of {} types: weir reads a union of null and one type",
                    others.len()
                ))
                }
            }
        }
        Avro::Ref { .. } => unreachable!("dereferenced above"),
    })
}

fn kind_name(schema: &Avro) -> String {
    match schema {
        Avro::Record(r) => format!("record {}", r.name),
        Avro::Enum(e) => format!("enum {}", e.name),
        Avro::Fixed(f) => format!("fixed {}", f.name),
        Avro::Union(_) => "a union".into(),
        Avro::Array(_) => "an array".into(),
        Avro::Map(_) => "a map".into(),
        Avro::Ref { name } => name.to_string(),
        other => format!("{:?}", apache_avro::schema::SchemaKind::from(other)).to_lowercase(),
    }
}

/// A reader default (Avro's JSON form) as a value of the column's type;
/// None for what a column keeps as NULL.
fn default_value(d: &serde_json::Value, t: &DataType) -> Option<Value> {
    match (d, t) {
        (serde_json::Value::Null, _) => None,
        (serde_json::Value::Bool(b), DataType::Boolean) => Some(Value::Bool(*b)),
        (serde_json::Value::Number(n), DataType::Int | DataType::BigInt) => {
            n.as_i64().map(Value::Int)
        }
        (serde_json::Value::Number(n), DataType::Double) => n.as_f64().map(Value::Double),
        (serde_json::Value::Number(n), DataType::Timestamp) => n.as_i64().map(Value::Timestamp),
        (serde_json::Value::String(s), DataType::String) => Some(Value::String(s.clone())),
        (serde_json::Value::String(s), DataType::Bytes) => {
            // Avro's JSON for bytes: one code point per byte.
            Some(Value::Bytes(s.chars().map(|c| c as u32 as u8).collect()))
        }
        _ => None,
    }
}

/// How one writer value is read into a value of the column's type.
#[derive(Debug, Clone)]
enum Read {
    Null,
    Bool(BoolTo),
    /// int or long (zigzag varint).
    Long(LongTo),
    Float(FloatTo),
    Double(FloatTo),
    /// bytes or string, length-prefixed.
    Bytes(BytesTo),
    Fixed(usize, BytesTo),
    Enum(Arc<[String]>),
    /// A decimal's unscaled bytes (length-prefixed, or fixed), at the
    /// writer's scale.
    Decimal {
        fixed: Option<usize>,
        scale: u8,
        to: DecimalTo,
    },
    /// Per writer branch.
    Union(Vec<Read>),
    Array(Box<Read>),
    Map(Box<Read>),
    Record(Arc<RecordPlan>),
    /// A writer branch the column cannot take: an error when data uses it.
    Fail(Arc<str>),
}

#[derive(Debug, Clone, Copy)]
enum BoolTo {
    Bool,
    Text,
}

/// What an Avro int or long becomes; the logical types scale first.
#[derive(Debug, Clone, Copy)]
enum LongTo {
    Int,
    BigInt,
    Double,
    Decimal(u8),
    Text,
    /// Epoch milliseconds from this many units per millisecond (1 for
    /// millis, 1000 micros, 1,000,000 nanos), or days (date).
    Timestamp(TimeUnit),
    TimestampText(TimeUnit),
    /// time-millis / time-micros as milliseconds of the day.
    TimeOfDay(i64),
    TimeOfDayText(i64),
}

#[derive(Debug, Clone, Copy)]
enum TimeUnit {
    PerMilli(i64),
    Day,
}

impl TimeUnit {
    fn millis(self, v: i64) -> Result<i64, String> {
        match self {
            TimeUnit::PerMilli(n) => Ok(v.div_euclid(n)),
            TimeUnit::Day => v
                .checked_mul(86_400_000)
                .ok_or_else(|| format!("date {v} days is out of range")),
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum FloatTo {
    Double,
    Text,
}

#[derive(Debug, Clone, Copy)]
enum BytesTo {
    Bytes,
    Text,
    Decimal(u8),
    Timestamp,
}

#[derive(Debug, Clone, Copy)]
enum DecimalTo {
    Decimal(u8),
    Double,
    Text,
}

/// A writer record read into columns (the table's, or a ROW's fields).
#[derive(Debug)]
struct RecordPlan {
    /// Per writer field, in writer order.
    steps: Vec<Step>,
    width: usize,
    /// Columns the writer lacks, with the reader's default (or NULL).
    defaults: Vec<(usize, Value)>,
}

#[derive(Debug)]
enum Step {
    Read(usize, Read),
    Skip(Skip),
}

/// How a writer value no column reads is skipped.
#[derive(Debug, Clone)]
enum Skip {
    Nothing,
    Bytes(usize),
    Varint,
    Prefixed,
    Union(Vec<Skip>),
    Array(Box<Skip>),
    Map(Box<Skip>),
    Record(Vec<Skip>),
}

struct Compiler<'a> {
    names: Names<'a>,
}

impl<'a> Compiler<'a> {
    fn skip(&self, schema: &'a Avro) -> Result<Skip, String> {
        Ok(match deref(schema, &self.names)? {
            Avro::Null => Skip::Nothing,
            Avro::Boolean => Skip::Bytes(1),
            Avro::Int
            | Avro::Long
            | Avro::Date
            | Avro::TimeMillis
            | Avro::TimeMicros
            | Avro::TimestampMillis
            | Avro::TimestampMicros
            | Avro::TimestampNanos
            | Avro::LocalTimestampMillis
            | Avro::LocalTimestampMicros
            | Avro::LocalTimestampNanos
            | Avro::Enum(_) => Skip::Varint,
            Avro::Float => Skip::Bytes(4),
            Avro::Double => Skip::Bytes(8),
            Avro::Bytes | Avro::String | Avro::Uuid | Avro::BigDecimal => Skip::Prefixed,
            Avro::Fixed(f) => Skip::Bytes(f.size),
            Avro::Duration => Skip::Bytes(12),
            Avro::Decimal(d) => match deref(&d.inner, &self.names)? {
                Avro::Fixed(f) => Skip::Bytes(f.size),
                _ => Skip::Prefixed,
            },
            Avro::Union(u) => Skip::Union(
                u.variants()
                    .iter()
                    .map(|v| self.skip(v))
                    .collect::<Result<_, _>>()?,
            ),
            Avro::Array(a) => Skip::Array(Box::new(self.skip(&a.items)?)),
            Avro::Map(m) => Skip::Map(Box::new(self.skip(&m.types)?)),
            Avro::Record(r) => Skip::Record(
                r.fields
                    .iter()
                    .map(|f| self.skip(&f.schema))
                    .collect::<Result<_, _>>()?,
            ),
            Avro::Ref { .. } => unreachable!("dereferenced"),
        })
    }

    fn record(
        &self,
        record: &'a RecordSchema,
        columns: &[Field],
        defaults: &[Option<Value>],
        path: &str,
    ) -> Result<RecordPlan, String> {
        let mut read = vec![false; columns.len()];
        let mut steps = Vec::with_capacity(record.fields.len());
        for f in &record.fields {
            let column = columns.iter().position(|c| {
                c.name.eq_ignore_ascii_case(&f.name)
                    || f.aliases
                        .iter()
                        .flatten()
                        .any(|a| a.eq_ignore_ascii_case(&c.name))
            });
            let field_path = if path.is_empty() {
                f.name.clone()
            } else {
                format!("{path}.{}", f.name)
            };
            match column {
                Some(i) if !read[i] => {
                    read[i] = true;
                    steps.push(Step::Read(
                        i,
                        self.read(&f.schema, &columns[i].data_type, &field_path)?,
                    ));
                }
                _ => steps.push(Step::Skip(self.skip(&f.schema)?)),
            }
        }
        let defaults = (0..columns.len())
            .filter(|i| !read[*i])
            .filter_map(|i| defaults.get(i).cloned().flatten().map(|d| (i, d)))
            .collect();
        Ok(RecordPlan {
            steps,
            width: columns.len(),
            defaults,
        })
    }

    /// How the writer's `schema` is read into a value of type `to`.
    fn read(&self, schema: &'a Avro, to: &DataType, path: &str) -> Result<Read, String> {
        let schema = deref(schema, &self.names)?;
        let refuse = || {
            format!(
                "writer field {path} is {}, which cannot be read as the column's {to}",
                kind_name(schema)
            )
        };
        use DataType as T;
        Ok(match schema {
            Avro::Null => Read::Null,
            Avro::Boolean => Read::Bool(match to {
                T::Boolean => BoolTo::Bool,
                T::String => BoolTo::Text,
                _ => return Err(refuse()),
            }),
            Avro::Int | Avro::Long => Read::Long(match to {
                T::Int => LongTo::Int,
                T::BigInt => LongTo::BigInt,
                T::Double => LongTo::Double,
                T::Decimal { scale, .. } => LongTo::Decimal(*scale),
                T::String => LongTo::Text,
                T::Timestamp => LongTo::Timestamp(TimeUnit::PerMilli(1)),
                _ => return Err(refuse()),
            }),
            Avro::Float | Avro::Double => {
                let f = match to {
                    T::Double => FloatTo::Double,
                    T::String => FloatTo::Text,
                    _ => return Err(refuse()),
                };
                if matches!(schema, Avro::Float) {
                    Read::Float(f)
                } else {
                    Read::Double(f)
                }
            }
            Avro::String | Avro::Uuid | Avro::Bytes | Avro::BigDecimal => Read::Bytes(match to {
                T::String => BytesTo::Text,
                T::Bytes => BytesTo::Bytes,
                T::Decimal { scale, .. } if !matches!(schema, Avro::Bytes) => {
                    BytesTo::Decimal(*scale)
                }
                T::Timestamp if !matches!(schema, Avro::Bytes) => BytesTo::Timestamp,
                _ => return Err(refuse()),
            }),
            Avro::Fixed(f) => Read::Fixed(
                f.size,
                match to {
                    T::Bytes => BytesTo::Bytes,
                    _ => return Err(refuse()),
                },
            ),
            Avro::Duration => Read::Fixed(
                12,
                match to {
                    T::Bytes => BytesTo::Bytes,
                    _ => return Err(refuse()),
                },
            ),
            Avro::Enum(e) => match to {
                T::String => Read::Enum(e.symbols.clone().into()),
                _ => return Err(refuse()),
            },
            Avro::Decimal(d) => {
                let fixed = match deref(&d.inner, &self.names)? {
                    Avro::Fixed(f) => Some(f.size),
                    _ => None,
                };
                Read::Decimal {
                    fixed,
                    scale: d.scale as u8,
                    to: match to {
                        T::Decimal { scale, .. } => DecimalTo::Decimal(*scale),
                        T::Double => DecimalTo::Double,
                        T::String => DecimalTo::Text,
                        _ => return Err(refuse()),
                    },
                }
            }
            Avro::Date
            | Avro::TimestampMillis
            | Avro::TimestampMicros
            | Avro::TimestampNanos
            | Avro::LocalTimestampMillis
            | Avro::LocalTimestampMicros
            | Avro::LocalTimestampNanos => {
                let unit = match schema {
                    Avro::Date => TimeUnit::Day,
                    Avro::TimestampMicros | Avro::LocalTimestampMicros => TimeUnit::PerMilli(1000),
                    Avro::TimestampNanos | Avro::LocalTimestampNanos => {
                        TimeUnit::PerMilli(1_000_000)
                    }
                    _ => TimeUnit::PerMilli(1),
                };
                Read::Long(match to {
                    T::Timestamp => LongTo::Timestamp(unit),
                    T::String => LongTo::TimestampText(unit),
                    T::BigInt if !matches!(unit, TimeUnit::Day) => LongTo::BigInt,
                    T::Int if matches!(unit, TimeUnit::Day) => LongTo::Int,
                    _ => return Err(refuse()),
                })
            }
            Avro::TimeMillis | Avro::TimeMicros => {
                let per_milli = if matches!(schema, Avro::TimeMicros) {
                    1000
                } else {
                    1
                };
                Read::Long(match to {
                    T::Int | T::BigInt => LongTo::TimeOfDay(per_milli),
                    T::String => LongTo::TimeOfDayText(per_milli),
                    _ => return Err(refuse()),
                })
            }
            Avro::Union(u) => {
                let branches: Vec<Read> = u
                    .variants()
                    .iter()
                    .map(|v| {
                        self.read(v, to, path)
                            .unwrap_or_else(|e| Read::Fail(e.into()))
                    })
                    .collect();
                if let Some(Read::Fail(e)) = branches
                    .iter()
                    .find(|b| matches!(b, Read::Fail(_)))
                    .filter(|_| {
                        branches
                            .iter()
                            .all(|b| matches!(b, Read::Fail(_) | Read::Null))
                    })
                {
                    return Err(e.to_string());
                }
                Read::Union(branches)
            }
            Avro::Array(a) => match to {
                T::List(item) => {
                    Read::Array(Box::new(self.read(&a.items, item, &format!("{path}[]"))?))
                }
                _ => return Err(refuse()),
            },
            Avro::Map(m) => match to {
                T::List(entry) => match entry.as_ref() {
                    T::Struct(fields) if fields.len() == 2 && fields[0].data_type == T::String => {
                        Read::Map(Box::new(self.read(
                            &m.types,
                            &fields[1].data_type,
                            &format!("{path}{{}}"),
                        )?))
                    }
                    _ => return Err(refuse()),
                },
                _ => return Err(refuse()),
            },
            Avro::Record(r) => match to {
                T::Struct(fields) => Read::Record(Arc::new(self.record(r, fields, &[], path)?)),
                _ => return Err(refuse()),
            },
            Avro::Ref { .. } => unreachable!("dereferenced"),
        })
    }
}

/// The plan that reads records of `writer` into `columns`.
fn compile_top(
    writer: &Avro,
    columns: &[Field],
    defaults: &[Option<Value>],
) -> Result<Read, String> {
    let c = Compiler {
        names: names(writer)?,
    };
    match deref(writer, &c.names)? {
        Avro::Record(r) => Ok(Read::Record(Arc::new(c.record(r, columns, defaults, "")?))),
        // A primitive (a Kafka key written as a bare Avro string or long)
        // is the one column's value.
        other => match columns {
            [only] => c.read(other, &only.data_type, &only.name),
            _ => Err(format!(
                "the writer's schema is {}, not a record, and the table reads {} columns",
                kind_name(other),
                columns.len()
            )),
        },
    }
}

/// Whether records written with `writer` (an Avro schema's text) can be
/// read into `columns`; Err names the field that cannot.
pub fn check_fits(writer: &str, columns: &[Field]) -> Result<(), String> {
    let writer = parse(writer)?;
    compile_top(&writer, columns, &vec![None; columns.len()]).map(|_| ())
}

/// A record's bytes, consumed as they are read.
struct Input<'b> {
    bytes: &'b [u8],
}

impl<'b> Input<'b> {
    fn long(&mut self) -> Result<i64, String> {
        read_zigzag(&mut self.bytes)
    }

    fn take(&mut self, n: usize) -> Result<&'b [u8], String> {
        if self.bytes.len() < n {
            return Err(format!(
                "the record is cut short: {n} bytes expected, {} left",
                self.bytes.len()
            ));
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    fn prefixed(&mut self) -> Result<&'b [u8], String> {
        let n = self.long()?;
        let n = usize::try_from(n).map_err(|_| format!("a negative length {n}"))?;
        self.take(n)
    }

    fn text(&mut self) -> Result<&'b str, String> {
        std::str::from_utf8(self.prefixed()?).map_err(|e| format!("a string is not UTF-8: {e}"))
    }

    /// Reads an array's or map's blocks, calling `each` with each block's
    /// item count (a negative count is followed by the block's size in
    /// bytes; a count of 0 ends them).
    fn blocks(
        &mut self,
        mut each: impl FnMut(&mut Self, usize) -> Result<(), String>,
    ) -> Result<(), String> {
        loop {
            let n = self.long()?;
            if n < 0 {
                self.long()?;
            }
            if n == 0 {
                return Ok(());
            }
            each(self, n.unsigned_abs() as usize)?;
        }
    }

    fn skip(&mut self, s: &Skip) -> Result<(), String> {
        match s {
            Skip::Nothing => {}
            Skip::Bytes(n) => {
                self.take(*n)?;
            }
            Skip::Varint => {
                self.long()?;
            }
            Skip::Prefixed => {
                self.prefixed()?;
            }
            Skip::Union(branches) => {
                let b = self.branch(branches.len())?;
                self.skip(&branches[b])?;
            }
            Skip::Array(item) => self.blocks(|input, n| {
                for _ in 0..n {
                    input.skip(item)?;
                }
                Ok(())
            })?,
            Skip::Map(value) => self.blocks(|input, n| {
                for _ in 0..n {
                    input.prefixed()?;
                    input.skip(value)?;
                }
                Ok(())
            })?,
            Skip::Record(fields) => {
                for f in fields {
                    self.skip(f)?;
                }
            }
        }
        Ok(())
    }

    fn branch(&mut self, count: usize) -> Result<usize, String> {
        let b = self.long()?;
        usize::try_from(b)
            .ok()
            .filter(|b| *b < count)
            .ok_or_else(|| format!("union branch {b} of {count}"))
    }

    fn value(&mut self, r: &Read) -> Result<Value, String> {
        Ok(match r {
            Read::Null => Value::Null,
            Read::Bool(to) => {
                let b = self.take(1)?[0] != 0;
                match to {
                    BoolTo::Bool => Value::Bool(b),
                    BoolTo::Text => Value::String(b.to_string()),
                }
            }
            Read::Long(to) => long_to(self.long()?, *to)?,
            Read::Float(to) => {
                let f = f32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes"));
                float_to(f64::from(f), *to)
            }
            Read::Double(to) => {
                let f = f64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes"));
                float_to(f, *to)
            }
            Read::Bytes(to) => {
                let b = self.prefixed()?;
                bytes_to(b, *to)?
            }
            Read::Fixed(n, to) => bytes_to(self.take(*n)?, *to)?,
            Read::Enum(symbols) => {
                let i = self.long()?;
                match usize::try_from(i).ok().and_then(|i| symbols.get(i)) {
                    Some(s) => Value::String(s.clone()),
                    None => return Err(format!("enum symbol {i} of {}", symbols.len())),
                }
            }
            Read::Decimal { fixed, scale, to } => {
                let b = match fixed {
                    Some(n) => self.take(*n)?,
                    None => self.prefixed()?,
                };
                let unscaled = twos_complement(b)?;
                rescale(unscaled, *scale, *to)?
            }
            Read::Union(branches) => {
                let b = self.branch(branches.len())?;
                self.value(&branches[b])?
            }
            Read::Array(item) => {
                let mut items = Vec::new();
                self.blocks(|input, n| {
                    items.reserve(n.min(input.bytes.len() + 1));
                    for _ in 0..n {
                        items.push(input.value(item)?);
                    }
                    Ok(())
                })?;
                Value::List(items)
            }
            Read::Map(value) => {
                let mut entries = Vec::new();
                self.blocks(|input, n| {
                    entries.reserve(n.min(input.bytes.len() + 1));
                    for _ in 0..n {
                        let k = Value::String(input.text()?.to_string());
                        let v = input.value(value)?;
                        entries.push(Value::Struct(vec![k, v]));
                    }
                    Ok(())
                })?;
                Value::List(entries)
            }
            Read::Record(plan) => {
                let mut values = Vec::with_capacity(plan.width);
                self.record(plan, &mut values)?;
                Value::Struct(values)
            }
            Read::Fail(e) => return Err(e.to_string()),
        })
    }

    /// Appends the plan's columns to `out`.
    fn record(&mut self, plan: &RecordPlan, out: &mut Vec<Value>) -> Result<(), String> {
        let base = out.len();
        out.resize(base + plan.width, Value::Null);
        for (i, d) in &plan.defaults {
            out[base + i] = d.clone();
        }
        for step in &plan.steps {
            match step {
                Step::Read(i, r) => out[base + i] = self.value(r)?,
                Step::Skip(s) => self.skip(s)?,
            }
        }
        Ok(())
    }
}

fn long_to(v: i64, to: LongTo) -> Result<Value, String> {
    Ok(match to {
        LongTo::Int => {
            if i32::try_from(v).is_err() {
                return Err(format!("{v} is out of INT's range"));
            }
            Value::Int(v)
        }
        LongTo::BigInt => Value::Int(v),
        LongTo::Double => Value::Double(v as f64),
        LongTo::Decimal(scale) => Value::Decimal(Decimal {
            unscaled: i128::from(v)
                .checked_mul(10i128.pow(u32::from(scale)))
                .ok_or_else(|| format!("{v} does not fit DECIMAL(38, {scale})"))?,
            scale,
        }),
        LongTo::Text => Value::String(v.to_string()),
        LongTo::Timestamp(unit) => Value::Timestamp(unit.millis(v)?),
        LongTo::TimestampText(TimeUnit::Day) => Value::String(
            crate::dataflow::json::format_timestamp(TimeUnit::Day.millis(v)?)[..10].to_string(),
        ),
        LongTo::TimestampText(unit) => {
            Value::String(crate::dataflow::json::format_timestamp(unit.millis(v)?))
        }
        LongTo::TimeOfDay(per_milli) => Value::Int(v.div_euclid(per_milli)),
        LongTo::TimeOfDayText(per_milli) => {
            let ms = v.div_euclid(per_milli);
            Value::String(format!(
                "{:02}:{:02}:{:02}.{:03}",
                ms / 3_600_000,
                ms / 60_000 % 60,
                ms / 1000 % 60,
                ms % 1000
            ))
        }
    })
}

fn float_to(f: f64, to: FloatTo) -> Value {
    match to {
        FloatTo::Double => Value::Double(f),
        FloatTo::Text => Value::String(f.to_string()),
    }
}

fn bytes_to(b: &[u8], to: BytesTo) -> Result<Value, String> {
    let text = || std::str::from_utf8(b).map_err(|e| format!("a string is not UTF-8: {e}"));
    Ok(match to {
        BytesTo::Bytes => Value::Bytes(b.to_vec()),
        BytesTo::Text => Value::String(text()?.to_string()),
        BytesTo::Decimal(scale) => Value::Decimal(Decimal::parse(text()?, scale)?),
        BytesTo::Timestamp => Value::Timestamp(crate::dataflow::json::parse_timestamp(text()?)?),
    })
}

/// A big-endian two's-complement integer (a decimal's unscaled value).
fn twos_complement(b: &[u8]) -> Result<i128, String> {
    if b.len() > 16 {
        return Err(format!(
            "a decimal of {} bytes does not fit 38 digits",
            b.len()
        ));
    }
    if b.is_empty() {
        return Ok(0);
    }
    let fill = if b[0] & 0x80 != 0 { 0xff } else { 0 };
    let mut buf = [fill; 16];
    buf[16 - b.len()..].copy_from_slice(b);
    Ok(i128::from_be_bytes(buf))
}

/// The minimal big-endian two's-complement bytes of `v`.
fn twos_complement_bytes(v: i128) -> Vec<u8> {
    let bytes = v.to_be_bytes();
    let mut start = 0;
    while start < 15 {
        let (b, next) = (bytes[start], bytes[start + 1]);
        if (b == 0 && next & 0x80 == 0) || (b == 0xff && next & 0x80 != 0) {
            start += 1;
        } else {
            break;
        }
    }
    bytes[start..].to_vec()
}

fn rescale(unscaled: i128, from: u8, to: DecimalTo) -> Result<Value, String> {
    let d = Decimal {
        unscaled,
        scale: from,
    };
    Ok(match to {
        DecimalTo::Double => Value::Double(d.to_f64()),
        DecimalTo::Text => Value::String(d.to_string()),
        DecimalTo::Decimal(scale) if scale == from => Value::Decimal(d),
        DecimalTo::Decimal(scale) => Value::Decimal(Decimal::parse(&d.to_string(), scale)?),
    })
}

/// Decodes registry-framed Avro into the table's columns.
pub struct AvroDecoder {
    registry: Arc<Registry>,
    columns: Vec<Field>,
    defaults: Vec<Option<Value>>,
    plans: RwLock<HashMap<u32, Arc<Result<Read, String>>>>,
}

impl AvroDecoder {
    /// `defaults` per column: the reader schema's defaults for fields a
    /// writer lacks (None: NULL).
    pub fn new(registry: Arc<Registry>, columns: Vec<Field>, defaults: Vec<Option<Value>>) -> Self {
        Self {
            registry,
            columns,
            defaults,
            plans: RwLock::new(HashMap::new()),
        }
    }

    fn plan(&self, id: u32) -> Result<Arc<Result<Read, String>>, DecodeError> {
        if let Some(p) = self.plans.read().expect("avro plans").get(&id) {
            return Ok(p.clone());
        }
        let schema = match self.registry.schema_by_id(id, Patience::Forever) {
            Ok(schema) => schema,
            // An id the registry does not have stays a bad record: every
            // record naming it is refused without asking again.
            Err(e @ super::registry::RegistryError::NotFound(_)) => {
                let plan = Arc::new(Err(format!("schema id {id}: {e}")));
                self.plans
                    .write()
                    .expect("avro plans")
                    .insert(id, plan.clone());
                return Ok(plan);
            }
            Err(e) => return Err(DecodeError::from(e).context(&format!("schema id {id}"))),
        };
        let plan = if schema.kind != SchemaKind::Avro {
            Err(format!(
                "schema id {id} is a {} schema, not Avro",
                schema.kind.api_name()
            ))
        } else {
            parse(&schema.text)
                .and_then(|writer| compile_top(&writer, &self.columns, &self.defaults))
                .map_err(|e| format!("schema id {id} does not fit the table's columns: {e}"))
        };
        if let Err(e) = &plan {
            tracing::warn!(registry = %self.registry.name, schema_id = id, error = %e,
                "an Avro writer schema the table cannot read; its records are bad records");
        }
        let plan = Arc::new(plan);
        self.plans
            .write()
            .expect("avro plans")
            .insert(id, plan.clone());
        Ok(plan)
    }
}

impl BytesDecoder for AvroDecoder {
    fn decode(&self, bytes: &[u8], out: &mut Vec<Value>) -> Result<Decoded, DecodeError> {
        let framed = unframe(bytes)?;
        let plan = self.plan(framed.schema_id)?;
        let read = plan
            .as_ref()
            .as_ref()
            .map_err(|e| DecodeError::Bad(e.clone()))?;
        let mut input = Input {
            bytes: framed.payload,
        };
        let with_id =
            |e: String| DecodeError::Bad(format!("Avro (schema id {}): {e}", framed.schema_id));
        match read {
            Read::Record(plan) => input.record(plan, out).map_err(with_id)?,
            other => out.push(input.value(other).map_err(with_id)?),
        }
        if !input.bytes.is_empty() {
            return Err(with_id(format!(
                "{} bytes left after the record: the writer's schema does not describe these bytes",
                input.bytes.len()
            )));
        }
        Ok(Decoded::Row(RowKind::Insert))
    }
}

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
        DataType::Timestamp => json!({"type": "long", "logicalType": "timestamp-millis"}),
        DataType::List(item) => {
            json!({"type": "array", "items": ["null", type_json(item, name, counter)]})
        }
        DataType::Struct(fields) => {
            *counter += 1;
            record_json(fields, name, counter)
        }
    }
}

/// A column name as an Avro name (`[A-Za-z_][A-Za-z0-9_]*`).
fn avro_name(name: &str) -> String {
    let mut s = super::identifier_chars(name);
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
struct FieldWrite {
    column: Option<usize>,
    write: Write,
    name: String,
}

#[derive(Debug, Clone)]
enum Write {
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

fn compile_writes(writer: &Avro, columns: &[Field]) -> Result<Vec<FieldWrite>, String> {
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
        (Avro::TimestampMillis | Avro::LocalTimestampMillis, T::Timestamp) => Write::Timestamp(1),
        (Avro::TimestampMicros | Avro::LocalTimestampMicros, T::Timestamp) => {
            Write::Timestamp(1000)
        }
        (Avro::TimestampNanos | Avro::LocalTimestampNanos, T::Timestamp) => {
            Write::Timestamp(1_000_000)
        }
        (Avro::Date, T::Timestamp) => Write::Date,
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

fn write_given(w: &Write, v: &Value, out: &mut Vec<u8>, path: &str) -> Result<(), String> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use apache_avro::types::Value as A;

    fn decode_with(writer: &str, columns: &[Field], bytes: &[u8]) -> Result<Vec<Value>, String> {
        let w = parse(writer).unwrap();
        let read = compile_top(&w, columns, &vec![None; columns.len()])?;
        let mut input = Input { bytes };
        let mut out = Vec::new();
        match &read {
            Read::Record(p) => input.record(p, &mut out)?,
            r => out.push(input.value(r)?),
        }
        assert!(input.bytes.is_empty(), "bytes left");
        Ok(out)
    }

    const ORDER: &str = r#"{"type":"record","name":"Order","namespace":"shop","fields":[
        {"name":"id","type":"long"},
        {"name":"note","type":["null","string"],"default":null},
        {"name":"status","type":{"type":"enum","name":"Status","symbols":["NEW","PAID"]}},
        {"name":"tags","type":{"type":"array","items":"string"}},
        {"name":"attrs","type":{"type":"map","values":"int"}},
        {"name":"price","type":{"type":"bytes","logicalType":"decimal","precision":10,"scale":2}},
        {"name":"at","type":{"type":"long","logicalType":"timestamp-micros"}},
        {"name":"day","type":{"type":"int","logicalType":"date"}},
        {"name":"hash","type":{"type":"fixed","name":"Hash","size":2}},
        {"name":"who","type":{"type":"record","name":"Who","fields":[{"name":"name","type":"string"},{"name":"age","type":"int"}]}},
        {"name":"ratio","type":"float"}
    ]}"#;

    fn order_bytes() -> Vec<u8> {
        let schema = parse(ORDER).unwrap();
        let value = A::Record(vec![
            ("id".into(), A::Long(7)),
            ("note".into(), A::Union(1, Box::new(A::String("hi".into())))),
            ("status".into(), A::Enum(1, "PAID".into())),
            (
                "tags".into(),
                A::Array(vec![A::String("a".into()), A::String("b".into())]),
            ),
            (
                "attrs".into(),
                A::Map([("k".to_string(), A::Int(3))].into_iter().collect()),
            ),
            (
                "price".into(),
                A::Decimal(apache_avro::Decimal::from(vec![0xfb, 0x2e])),
            ),
            ("at".into(), A::TimestampMicros(1_764_000_000_123_456)),
            ("day".into(), A::Date(20_000)),
            ("hash".into(), A::Fixed(2, vec![1, 2])),
            (
                "who".into(),
                A::Record(vec![
                    ("name".into(), A::String("ann".into())),
                    ("age".into(), A::Int(41)),
                ]),
            ),
            ("ratio".into(), A::Float(0.5)),
        ]);
        apache_avro::to_avro_datum(&schema, value).unwrap()
    }

    #[test]
    fn every_avro_type_decodes_into_its_column_type() {
        let columns: Vec<Field> = columns(&parse(ORDER).unwrap())
            .unwrap()
            .into_iter()
            .map(|(f, _)| f)
            .collect();
        let got = decode_with(ORDER, &columns, &order_bytes()).unwrap();
        assert_eq!(
            got,
            vec![
                Value::Int(7),
                Value::String("hi".into()),
                Value::String("PAID".into()),
                Value::List(vec![Value::String("a".into()), Value::String("b".into())]),
                Value::List(vec![Value::Struct(vec![
                    Value::String("k".into()),
                    Value::Int(3)
                ])]),
                // 0xfb2e = -1234 at scale 2.
                Value::Decimal(Decimal {
                    unscaled: -1234,
                    scale: 2
                }),
                Value::Timestamp(1_764_000_000_123),
                Value::Timestamp(20_000 * 86_400_000),
                Value::Bytes(vec![1, 2]),
                Value::Struct(vec![Value::String("ann".into()), Value::Int(41)]),
                Value::Double(0.5),
            ]
        );
        let types: Vec<String> = columns.iter().map(|c| c.data_type.to_string()).collect();
        assert_eq!(types[5], "DECIMAL(10, 2)");
        assert_eq!(types[4], "ARRAY<ROW<key VARCHAR, value INT>>");
    }

    #[test]
    fn a_projection_skips_what_it_does_not_read_and_converts_what_it_does() {
        let columns = vec![
            Field::new(
                "WHO",
                DataType::Struct(vec![Field::new("age", DataType::BigInt)]),
            ),
            Field::new("id", DataType::String),
            Field::new("missing", DataType::Boolean),
            Field::new("ratio", DataType::Double),
            Field::new(
                "price",
                DataType::Decimal {
                    precision: 12,
                    scale: 4,
                },
            ),
        ];
        let got = decode_with(ORDER, &columns, &order_bytes()).unwrap();
        assert_eq!(
            got,
            vec![
                Value::Struct(vec![Value::Int(41)]),
                Value::String("7".into()),
                Value::Null,
                Value::Double(0.5),
                Value::Decimal(Decimal {
                    unscaled: -123_400,
                    scale: 4
                }),
            ]
        );
    }

    #[test]
    fn evolution_reads_old_and_new_writers_with_the_readers_defaults() {
        let v1 = r#"{"type":"record","name":"R","fields":[{"name":"a","type":"int"},{"name":"gone","type":"string"}]}"#;
        let v2 = r#"{"type":"record","name":"R","fields":[{"name":"a","type":"long"},{"name":"added","type":"string","default":"none"}]}"#;
        let reader = columns(&parse(v2).unwrap()).unwrap();
        let (cols, defaults): (Vec<Field>, Vec<Option<Value>>) = reader.into_iter().unzip();
        let old = apache_avro::to_avro_datum(
            &parse(v1).unwrap(),
            A::Record(vec![
                ("a".into(), A::Int(5)),
                ("gone".into(), A::String("x".into())),
            ]),
        )
        .unwrap();
        let plan = compile_top(&parse(v1).unwrap(), &cols, &defaults).unwrap();
        let Read::Record(p) = plan else { panic!() };
        let mut out = Vec::new();
        Input { bytes: &old }.record(&p, &mut out).unwrap();
        assert_eq!(out, vec![Value::Int(5), Value::String("none".into())]);
        // An incompatible change is refused, naming the field.
        let v3 = r#"{"type":"record","name":"R","fields":[{"name":"a","type":"string"}]}"#;
        let e = compile_top(
            &parse(v3).unwrap(),
            &[Field::new("a", DataType::BigInt)],
            &[None],
        )
        .unwrap_err();
        assert!(
            e.contains("writer field a is string") && e.contains("BIGINT"),
            "{e}"
        );
    }

    #[test]
    fn truncated_records_and_out_of_range_values_are_refused() {
        let columns: Vec<Field> = columns(&parse(ORDER).unwrap())
            .unwrap()
            .into_iter()
            .map(|(f, _)| f)
            .collect();
        let bytes = order_bytes();
        for n in [0, 1, 5, bytes.len() - 1] {
            let e = decode_with(ORDER, &columns, &bytes[..n]).unwrap_err();
            assert!(e.contains("cut short"), "{n}: {e}");
        }
        let long = r#"{"type":"record","name":"R","fields":[{"name":"a","type":"long"}]}"#;
        let mut b = Vec::new();
        write_zigzag(1 << 40, &mut b);
        let e = decode_with(long, &[Field::new("a", DataType::Int)], &b).unwrap_err();
        assert!(e.contains("INT's range"), "{e}");
    }

    #[test]
    fn the_encoder_writes_what_apache_avro_reads() {
        let columns = vec![
            Field::new("k", DataType::String),
            Field::new("n", DataType::BigInt),
            Field::new("i", DataType::Int),
            Field::new("d", DataType::Double),
            Field::new(
                "p",
                DataType::Decimal {
                    precision: 10,
                    scale: 2,
                },
            ),
            Field::new("t", DataType::Timestamp),
            Field::new("l", DataType::List(Box::new(DataType::BigInt))),
            Field::new(
                "r",
                DataType::Struct(vec![Field::new("x", DataType::Boolean)]),
            ),
            Field::new("b", DataType::Bytes),
        ];
        let text = schema_of(&columns, "record");
        let schema = parse(&text).unwrap();
        let row = vec![
            Value::String("a".into()),
            Value::Int(-3),
            Value::Null,
            Value::Double(1.5),
            Value::Decimal(Decimal {
                unscaled: -12_345,
                scale: 2,
            }),
            Value::Timestamp(1_764_000_000_123),
            Value::List(vec![Value::Int(1), Value::Null]),
            Value::Struct(vec![Value::Bool(true)]),
            Value::Bytes(vec![0, 255]),
        ];
        let refs: Vec<&Value> = row.iter().collect();
        let mut out = Vec::new();
        AvroEncoder::new(
            &columns,
            Registration::known(9, SchemaKind::Avro, text.clone()),
        )
        .encode(&refs, &mut out)
        .unwrap();
        assert_eq!(&out[..5], &[0, 0, 0, 0, 9]);
        let read = apache_avro::from_avro_datum(&schema, &mut &out[5..], None).unwrap();
        let A::Record(fields) = read else {
            panic!("{read:?}")
        };
        let u = |v: &A| match v {
            A::Union(_, x) => (**x).clone(),
            other => other.clone(),
        };
        assert_eq!(u(&fields[0].1), A::String("a".into()));
        assert_eq!(u(&fields[1].1), A::Long(-3));
        assert_eq!(fields[2].1, A::Union(0, Box::new(A::Null)));
        assert_eq!(u(&fields[5].1), A::TimestampMillis(1_764_000_000_123));
        match u(&fields[4].1) {
            A::Decimal(d) => {
                let b: Vec<u8> = d.try_into().unwrap();
                assert_eq!(twos_complement(&b).unwrap(), -12_345);
            }
            other => panic!("{other:?}"),
        }
        // And weir's decoder reads its own encoder's bytes back.
        let back = decode_with(&text, &columns, &out[5..]).unwrap();
        assert_eq!(back, row);
    }

    #[test]
    fn a_given_schema_is_written_in_its_order_and_types() {
        let given = r#"{"type":"record","name":"Out","fields":[
            {"name":"total","type":{"type":"bytes","logicalType":"decimal","precision":9,"scale":3}},
            {"name":"status","type":{"type":"enum","name":"S","symbols":["OK","BAD"]}},
            {"name":"at","type":{"type":"long","logicalType":"timestamp-micros"}},
            {"name":"note","type":["null","string"],"default":null},
            {"name":"id","type":"long"}
        ]}"#;
        let columns = vec![
            Field::new("id", DataType::BigInt),
            Field::new("status", DataType::String),
            Field::new(
                "total",
                DataType::Decimal {
                    precision: 10,
                    scale: 2,
                },
            ),
            Field::new("at", DataType::Timestamp),
        ];
        let plan = compile_writes(&parse(given).unwrap(), &columns).unwrap();
        let row = [
            Value::Int(7),
            Value::String("BAD".into()),
            Value::Decimal(Decimal {
                unscaled: 1234,
                scale: 2,
            }),
            Value::Timestamp(1_764_000_000_123),
        ];
        let mut out = Vec::new();
        for f in &plan {
            let v = f.column.map_or(&Value::Null, |i| &row[i]);
            write_given(&f.write, v, &mut out, &f.name).unwrap();
        }
        let read =
            apache_avro::from_avro_datum(&parse(given).unwrap(), &mut &out[..], None).unwrap();
        let A::Record(fields) = read else {
            panic!("{read:?}")
        };
        assert_eq!(fields[1].1, A::Enum(1, "BAD".into()));
        assert_eq!(fields[2].1, A::TimestampMicros(1_764_000_000_123_000));
        assert_eq!(fields[3].1, A::Union(0, Box::new(A::Null)));
        assert_eq!(fields[4].1, A::Long(7));
        match &fields[0].1 {
            A::Decimal(d) => {
                let b: Vec<u8> = d.clone().try_into().unwrap();
                assert_eq!(twos_complement(&b).unwrap(), 12_340);
            }
            other => panic!("{other:?}"),
        }
        let e = compile_writes(&parse(given).unwrap(), &columns[..2]).unwrap_err();
        assert!(e.contains("field total is not a column"), "{e}");
        let mut out = Vec::new();
        let e = write_given(
            &plan[1].write,
            &Value::String("MAYBE".into()),
            &mut out,
            "status",
        )
        .unwrap_err();
        assert!(e.contains("not a symbol"), "{e}");
    }

    #[test]
    fn twos_complement_round_trips() {
        for v in [0i128, 1, -1, 127, 128, -128, -129, 255, 1 << 70, -(1 << 90)] {
            assert_eq!(
                twos_complement(&twos_complement_bytes(v)).unwrap(),
                v,
                "{v}"
            );
        }
    }
}
