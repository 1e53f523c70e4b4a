//! CSV (Flink's `csv`): one row per Kafka record, fields in column order
//! or in the order a header names (`csv_header`), with quoting as RFC 4180
//! has it. An empty field is NULL for every type but VARCHAR; a record
//! that is the header line itself is skipped.

use super::{BytesDecoder, BytesEncoder, DecodeError, Decoded};
use crate::dataflow::row::{DataType, Decimal, Field, RowKind, Value};

pub struct CsvOptions {
    pub delimiter: u8,
    pub quote: u8,
    /// The names of the fields, in record order (None: the columns' order).
    pub header: Option<Vec<String>>,
}

pub struct CsvDecoder {
    columns: Vec<Field>,
    /// Per record field: the column it fills, if any.
    positions: Vec<Option<usize>>,
    header: Vec<String>,
    delimiter: u8,
    quote: u8,
}

impl CsvDecoder {
    /// Err names the column whose type CSV cannot carry, or a header name
    /// that is not a column.
    pub fn new(columns: Vec<Field>, options: CsvOptions) -> Result<Self, String> {
        for c in &columns {
            if matches!(
                c.data_type,
                DataType::List(_) | DataType::Struct(_) | DataType::Map(..)
            ) {
                return Err(format!(
                    "column {} is {}: CSV has flat fields only",
                    c.name, c.data_type
                ));
            }
        }
        let header = options
            .header
            .unwrap_or_else(|| columns.iter().map(|c| c.name.clone()).collect());
        let mut positions = Vec::new();
        for h in &header {
            let p = columns.iter().position(|c| c.name.eq_ignore_ascii_case(h));
            if p.is_none() {
                tracing::debug!(field = %h, "a CSV field no column reads");
            }
            positions.push(p);
        }
        Ok(Self {
            columns,
            positions,
            header,
            delimiter: options.delimiter,
            quote: options.quote,
        })
    }
}

impl BytesDecoder for CsvDecoder {
    fn decode(&self, bytes: &[u8], out: &mut Vec<Value>) -> Result<Decoded, DecodeError> {
        let mut reader = csv::ReaderBuilder::new()
            .has_headers(false)
            .delimiter(self.delimiter)
            .quote(self.quote)
            .flexible(true)
            .from_reader(bytes);
        let mut record = csv::ByteRecord::new();
        let read = reader
            .read_byte_record(&mut record)
            .map_err(|e| DecodeError::Bad(format!("not a CSV record: {e}")))?;
        if !read {
            return Err(DecodeError::bad("the CSV record is empty"));
        }
        if record.len() != self.header.len() {
            return Err(DecodeError::Bad(format!(
                "{} CSV fields where the table reads {}",
                record.len(),
                self.header.len()
            )));
        }
        if record
            .iter()
            .zip(&self.header)
            .all(|(f, h)| f.eq_ignore_ascii_case(h.as_bytes()))
        {
            return Ok(Decoded::Skip);
        }
        let base = out.len();
        out.resize(base + self.columns.len(), Value::Null);
        for (field, p) in record.iter().zip(&self.positions) {
            let Some(p) = p else { continue };
            let c = &self.columns[*p];
            out[base + p] = parse_field(field, &c.data_type)
                .map_err(|e| DecodeError::Bad(format!("CSV field {:?}: {e}", c.name)))?;
        }
        Ok(Decoded::Row(RowKind::Insert))
    }
}

fn parse_field(field: &[u8], t: &DataType) -> Result<Value, String> {
    let text = std::str::from_utf8(field).map_err(|e| format!("not UTF-8: {e}"))?;
    if text.is_empty() && *t != DataType::String {
        return Ok(Value::Null);
    }
    let wrong = || format!("{text:?} is not {t}");
    Ok(match t {
        DataType::Boolean => match text.to_ascii_lowercase().as_str() {
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            _ => return Err(wrong()),
        },
        DataType::Int | DataType::BigInt => {
            let i: i64 = text.trim().parse().map_err(|_| wrong())?;
            if *t == DataType::Int && i32::try_from(i).is_err() {
                return Err(format!("{i} is out of INT's range"));
            }
            Value::Int(i)
        }
        DataType::Double => Value::Double(text.trim().parse().map_err(|_| wrong())?),
        DataType::Decimal { scale, .. } => Value::Decimal(Decimal::parse(text, *scale)?),
        DataType::String => Value::String(text.to_string()),
        DataType::Bytes => Value::Bytes(field.to_vec()),
        DataType::Timestamp | DataType::TimestampLtz => {
            Value::Timestamp(match text.trim().parse::<i64>() {
                Ok(ms) => ms,
                Err(_) => crate::dataflow::json::parse_timestamp(text)?,
            })
        }
        DataType::Date => Value::Timestamp(crate::dataflow::json::parse_date(text)?),
        DataType::Time => Value::Timestamp(crate::dataflow::json::parse_time(text)?),
        DataType::List(_) | DataType::Struct(_) | DataType::Map(..) => return Err(wrong()),
    })
}

/// Writes rows as one CSV line each (no line terminator), as Flink does.
pub struct CsvEncoder {
    delimiter: u8,
    quote: u8,
}

impl CsvEncoder {
    pub fn new(columns: &[Field], delimiter: u8, quote: u8) -> Result<Self, String> {
        for c in columns {
            if matches!(
                c.data_type,
                DataType::List(_) | DataType::Struct(_) | DataType::Map(..)
            ) {
                return Err(format!(
                    "column {} is {}: CSV has flat fields only",
                    c.name, c.data_type
                ));
            }
        }
        Ok(Self { delimiter, quote })
    }
}

impl BytesEncoder for CsvEncoder {
    fn encode(&self, values: &[&Value], out: &mut Vec<u8>) -> Result<(), String> {
        out.clear();
        let mut writer = csv::WriterBuilder::new()
            .delimiter(self.delimiter)
            .quote(self.quote)
            .terminator(csv::Terminator::Any(b'\n'))
            .from_writer(std::mem::take(out));
        let fields: Vec<Vec<u8>> = values.iter().map(|v| field_text(v)).collect();
        writer
            .write_record(&fields)
            .map_err(|e| format!("CSV: {e}"))?;
        *out = writer.into_inner().map_err(|e| format!("CSV: {e}"))?;
        if out.last() == Some(&b'\n') {
            out.pop();
        }
        Ok(())
    }
}

fn field_text(v: &Value) -> Vec<u8> {
    match v {
        Value::Null => Vec::new(),
        Value::Bool(b) => b.to_string().into_bytes(),
        Value::Int(i) => i.to_string().into_bytes(),
        Value::Double(d) => d.to_string().into_bytes(),
        Value::Decimal(d) => d.to_string().into_bytes(),
        Value::String(s) => s.clone().into_bytes(),
        Value::Bytes(b) => b.clone(),
        Value::Timestamp(ms) => crate::dataflow::json::format_timestamp(*ms).into_bytes(),
        Value::List(_) | Value::Struct(_) => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn columns() -> Vec<Field> {
        vec![
            Field::new("id", DataType::BigInt),
            Field::new("name", DataType::String),
            Field::new(
                "price",
                DataType::Decimal {
                    precision: 10,
                    scale: 2,
                },
            ),
        ]
    }

    #[test]
    fn fields_by_column_order_or_by_header_with_quoting() {
        let d = CsvDecoder::new(
            columns(),
            CsvOptions {
                delimiter: b',',
                quote: b'"',
                header: None,
            },
        )
        .unwrap();
        let mut out = Vec::new();
        d.decode(br#"7,"a, ""quoted"" name",12.5"#, &mut out)
            .unwrap();
        assert_eq!(
            out,
            vec![
                Value::Int(7),
                Value::String(r#"a, "quoted" name"#.into()),
                Value::Decimal(Decimal {
                    unscaled: 1250,
                    scale: 2
                })
            ]
        );
        assert_eq!(
            d.decode(b"id,name,price", &mut Vec::new()).unwrap(),
            Decoded::Skip
        );
        let e = d.decode(b"x,y,1", &mut Vec::new()).unwrap_err();
        assert!(e.message().contains("\"id\""), "{e:?}");
        let e = d.decode(b"1,2", &mut Vec::new()).unwrap_err();
        assert!(
            e.message().contains("2 CSV fields where the table reads 3"),
            "{e:?}"
        );
        let h = CsvDecoder::new(
            columns(),
            CsvOptions {
                delimiter: b';',
                quote: b'"',
                header: Some(vec!["price".into(), "other".into(), "id".into()]),
            },
        )
        .unwrap();
        let mut out = Vec::new();
        h.decode(b"1.5;zzz;9", &mut out).unwrap();
        assert_eq!(
            out,
            vec![
                Value::Int(9),
                Value::Null,
                Value::Decimal(Decimal {
                    unscaled: 150,
                    scale: 2
                })
            ]
        );
        let enc = CsvEncoder::new(&columns(), b',', b'"').unwrap();
        let mut bytes = Vec::new();
        let row = [Value::Int(1), Value::String("a,b".into()), Value::Null];
        enc.encode(&row.iter().collect::<Vec<_>>(), &mut bytes)
            .unwrap();
        assert_eq!(bytes, br#"1,"a,b","#);
    }
}
