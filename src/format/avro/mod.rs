//! Avro, framed for a schema registry (Flink's `avro-confluent`): each
//! record names its writer's schema by id; the table's columns are the
//! reader. Per writer id a plan is compiled once (`read::Read`): which writer
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
//!
//! - [`read`]: the decoder, a plan per writer id.
//! - [`write`]: the encoders, with the schema derived from the columns or
//!   with a registered schema the sink is given.

use std::collections::HashMap;

use apache_avro::schema::{Name, ResolvedSchema, Schema as Avro};

use crate::dataflow::row::{DataType, Field, Value};

mod read;
mod write;

pub use read::AvroDecoder;
pub use write::{schema_of, AvroEncoder, GivenSchemaEncoder};

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
        (serde_json::Value::Number(n), DataType::Timestamp | DataType::TimestampLtz) => {
            n.as_i64().map(Value::Timestamp)
        }
        (serde_json::Value::String(s), DataType::String) => Some(Value::String(s.clone())),
        (serde_json::Value::String(s), DataType::Bytes) => {
            // Avro's JSON for bytes: one code point per byte.
            Some(Value::Bytes(s.chars().map(|c| c as u32 as u8).collect()))
        }
        _ => None,
    }
}

/// Whether records written with `writer` (an Avro schema's text) can be
/// read into `columns`; Err names the field that cannot.
pub fn check_fits(writer: &str, columns: &[Field]) -> Result<(), String> {
    let writer = parse(writer)?;
    read::compile_top(&writer, columns, &vec![None; columns.len()]).map(|_| ())
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

#[cfg(test)]
mod tests {
    use super::read::{compile_top, Input, Read};
    use super::write::{compile_writes, write_given};
    use super::*;
    use crate::dataflow::row::Decimal;
    use crate::format::confluent::write_zigzag;
    use crate::format::registry::{Registration, SchemaKind};
    use crate::format::BytesEncoder;
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
