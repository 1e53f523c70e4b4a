//! Avro decoding: a plan per writer schema id, compiled against the
//! table's columns, then records read straight into values.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use apache_avro::schema::{RecordSchema, Schema as Avro};

use super::{deref, kind_name, names, parse, twos_complement, Names};
use crate::dataflow::row::{DataType, Decimal, Field, RowKind, Value};
use crate::format::confluent::{read_zigzag, unframe};
use crate::format::registry::{Patience, Registry, SchemaKind};
use crate::format::{BytesDecoder, DecodeError, Decoded};

/// How one writer value is read into a value of the column's type.
#[derive(Debug, Clone)]
pub(super) enum Read {
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
pub(super) enum BoolTo {
    Bool,
    Text,
}

/// What an Avro int or long becomes; the logical types scale first.
#[derive(Debug, Clone, Copy)]
pub(super) enum LongTo {
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
pub(super) enum TimeUnit {
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
pub(super) enum FloatTo {
    Double,
    Text,
}

#[derive(Debug, Clone, Copy)]
pub(super) enum BytesTo {
    Bytes,
    Text,
    Decimal(u8),
    Timestamp,
}

#[derive(Debug, Clone, Copy)]
pub(super) enum DecimalTo {
    Decimal(u8),
    Double,
    Text,
}

/// A writer record read into columns (the table's, or a ROW's fields).
#[derive(Debug)]
pub(super) struct RecordPlan {
    /// Per writer field, in writer order.
    steps: Vec<Step>,
    width: usize,
    /// Columns the writer lacks, with the reader's default (or NULL).
    defaults: Vec<(usize, Value)>,
}

#[derive(Debug)]
pub(super) enum Step {
    Read(usize, Read),
    Skip(Skip),
}

/// How a writer value no column reads is skipped.
#[derive(Debug, Clone)]
pub(super) enum Skip {
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
pub(super) fn compile_top(
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

/// A record's bytes, consumed as they are read.
pub(super) struct Input<'b> {
    pub(super) bytes: &'b [u8],
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

    pub(super) fn value(&mut self, r: &Read) -> Result<Value, String> {
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
    pub(super) fn record(&mut self, plan: &RecordPlan, out: &mut Vec<Value>) -> Result<(), String> {
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
            Err(e @ crate::format::registry::RegistryError::NotFound(_)) => {
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
