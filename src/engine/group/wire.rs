//! Records on a graph's repartition topics. Each is a row for one input
//! port of the stage that reads the topic, or a writer's watermark:
//!
//! ```text
//! row:        0x01 | port (varint) | event time (i64 LE) | row (kind, values)
//! watermark:  0x02 | writer (varint length, UTF-8) | watermark (i64 LE) | idle (0/1)
//! shape:      0x04 | instance (varint length, UTF-8) | max_parallelism (varint) | tasks (varint)
//! ```
//!
//! A row's Kafka key is its key columns' encoding (`codec::encode_key`),
//! which the reading task routes state by; a watermark and a shape have
//! an empty key.
//!
//! A writer's first write to a partition in each epoch (transaction) is
//! its [`Shape`]: the `job.max_parallelism` and `scale.tasks` its rows'
//! partitions were chosen by. A reading task refuses a shape other than
//! its own before any row of that transaction, whatever the rows' keys:
//! the rows' key groups would not be the task's.

use crate::dataflow::codec::{get_varint, put_varint, StateCodec};
use crate::dataflow::row::Row;

const ROW: u8 = 1;
const WATERMARK: u8 = 2;
const SHAPE: u8 = 4;

/// What a writer's rows' partitions mean: key group `kg` (of
/// `max_parallelism`) goes to partition `kg * tasks / max_parallelism`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub max_parallelism: u32,
    pub tasks: u32,
}

/// One repartition record's value, decoded.
#[derive(Debug, Clone, PartialEq)]
pub enum Wire {
    Row {
        port: usize,
        timestamp: i64,
        row: Row,
    },
    /// `writer` has seen everything up to `watermark`, or is idle.
    Watermark {
        writer: String,
        watermark: i64,
        idle: bool,
    },
    /// The settings `instance` routes its rows by (see the module).
    Shape { instance: String, shape: Shape },
}

pub fn encode_row(port: usize, timestamp: i64, row: &Row, out: &mut Vec<u8>) {
    out.clear();
    out.push(ROW);
    put_varint(port as u64, out);
    out.extend_from_slice(&timestamp.to_le_bytes());
    row.encode(out);
}

pub fn encode_watermark(writer: &str, watermark: i64, idle: bool, out: &mut Vec<u8>) {
    out.clear();
    out.push(WATERMARK);
    put_varint(writer.len() as u64, out);
    out.extend_from_slice(writer.as_bytes());
    out.extend_from_slice(&watermark.to_le_bytes());
    out.push(u8::from(idle));
}

pub fn encode_shape(instance: &str, shape: Shape, out: &mut Vec<u8>) {
    out.clear();
    out.push(SHAPE);
    put_varint(instance.len() as u64, out);
    out.extend_from_slice(instance.as_bytes());
    put_varint(u64::from(shape.max_parallelism), out);
    put_varint(u64::from(shape.tasks), out);
}

fn take<'a>(input: &mut &'a [u8], n: usize, what: &str) -> Result<&'a [u8], String> {
    if input.len() < n {
        return Err(format!(
            "truncated: {what} needs {n} bytes, {} left",
            input.len()
        ));
    }
    let (head, rest) = input.split_at(n);
    *input = rest;
    Ok(head)
}

fn utf8(input: &mut &[u8], what: &str) -> Result<String, String> {
    let len = get_varint(input)? as usize;
    std::str::from_utf8(take(input, len, what)?)
        .map(str::to_string)
        .map_err(|e| format!("{what} is not UTF-8: {e}"))
}

fn u32_varint(input: &mut &[u8], what: &str) -> Result<u32, String> {
    u32::try_from(get_varint(input)?).map_err(|_| format!("{what} out of range"))
}

fn i64_le(input: &mut &[u8], what: &str) -> Result<i64, String> {
    let b = take(input, 8, what)?;
    Ok(i64::from_le_bytes(b.try_into().expect("eight bytes")))
}

/// The record's value, or why it is not a repartition record of weir's.
pub fn decode(bytes: &[u8]) -> Result<Wire, String> {
    let mut input = bytes;
    let tag = *take(&mut input, 1, "the record type")?
        .first()
        .expect("one byte");
    match tag {
        ROW => {
            let port = get_varint(&mut input)? as usize;
            let timestamp = i64_le(&mut input, "the event time")?;
            let row = Row::decode(input)?;
            Ok(Wire::Row {
                port,
                timestamp,
                row,
            })
        }
        WATERMARK => {
            let writer = utf8(&mut input, "the writer")?;
            let watermark = i64_le(&mut input, "the watermark")?;
            let idle = match take(&mut input, 1, "the idle flag")?[0] {
                0 => false,
                1 => true,
                b => return Err(format!("idle flag {b} is neither 0 nor 1")),
            };
            if !input.is_empty() {
                return Err(format!("{} bytes after the watermark", input.len()));
            }
            Ok(Wire::Watermark {
                writer,
                watermark,
                idle,
            })
        }
        SHAPE => {
            let instance = utf8(&mut input, "the instance")?;
            let shape = Shape {
                max_parallelism: u32_varint(&mut input, "max_parallelism")?,
                tasks: u32_varint(&mut input, "tasks")?,
            };
            if !input.is_empty() {
                return Err(format!("{} bytes after the shape", input.len()));
            }
            Ok(Wire::Shape { instance, shape })
        }
        t => Err(format!("unknown repartition record type {t}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataflow::row::{RowKind, Value};

    #[test]
    fn rows_and_watermarks_round_trip() {
        let mut buf = Vec::new();
        let row = Row {
            kind: RowKind::UpdateBefore,
            values: vec![Value::String("a".into()), Value::Int(-3), Value::Null],
        };
        encode_row(1, -7, &row, &mut buf);
        assert_eq!(
            decode(&buf),
            Ok(Wire::Row {
                port: 1,
                timestamp: -7,
                row
            })
        );
        encode_watermark("clicks/3", i64::MIN, true, &mut buf);
        assert_eq!(
            decode(&buf),
            Ok(Wire::Watermark {
                writer: "clicks/3".into(),
                watermark: i64::MIN,
                idle: true
            })
        );
        let shape = Shape {
            max_parallelism: 300,
            tasks: 3,
        };
        encode_shape("i2", shape, &mut buf);
        assert_eq!(
            decode(&buf),
            Ok(Wire::Shape {
                instance: "i2".into(),
                shape
            })
        );
    }

    #[test]
    fn damaged_records_are_errors_not_panics() {
        let mut buf = Vec::new();
        encode_watermark("w", 5, false, &mut buf);
        for n in 0..buf.len() {
            assert!(decode(&buf[..n]).is_err(), "prefix of {n} bytes decoded");
        }
        assert!(decode(&[9])
            .unwrap_err()
            .contains("unknown repartition record type 9"));
        let row = Row::insert(vec![Value::Int(1)]);
        encode_row(0, 1, &row, &mut buf);
        for n in 0..buf.len() {
            assert!(decode(&buf[..n]).is_err(), "prefix of {n} bytes decoded");
        }
        let shape = Shape {
            max_parallelism: 128,
            tasks: 8,
        };
        encode_shape("i0", shape, &mut buf);
        for n in 0..buf.len() {
            assert!(decode(&buf[..n]).is_err(), "prefix of {n} bytes decoded");
        }
    }
}
