//! Records on a graph's repartition topics. Each is a run of rows for one
//! input port of the stage that reads the topic, or a writer's watermark:
//!
//! ```text
//! rows:       0x05 | port (varint) | count (u32 LE) | count × row
//!             row: key (varint length, bytes) | event time (i64 LE) | row (kind, values)
//! watermark:  0x02 | writer (varint length, UTF-8) | watermark (i64 LE) | idle (0/1)
//! shape:      0x04 | instance (varint length, UTF-8) | max_parallelism (varint) | tasks (varint)
//! row (old):  0x01 | port (varint) | event time (i64 LE) | row (kind, values)
//! ```
//!
//! A row's key is its key columns' encoding (`codec::encode_key`), which
//! the reading task routes state by. Many rows share one Kafka record
//! (with an empty Kafka key): librdkafka, the broker and the reading
//! consumer each pay per record, and one record per row cost a group-mode
//! instance more than its operators did. The rows of a record are applied
//! together, between two snapshots, so the record's offset stays the
//! task's position. A record of the old single-row type, written by a
//! version before runs of rows, is still read: its Kafka key is the row's
//! key.
//!
//! # Versions
//!
//! The record types above are wire format [`FORMAT`] 1. The rule that
//! keeps rolling upgrades safe (docs/operations.md): a record type's
//! number and layout never change once released, and a new type (or a
//! new layout, under a new number) makes a new format. A build reads
//! every format up to its own; it writes a newer format only once every
//! member of the group announces that it reads it ([`agreed_format`],
//! `manifest::Presence`), and a member that announces nothing is a build
//! of format 1. A record of an unknown type is refused with a message
//! that names the format and says to upgrade the instance that meets it.
//! Fixtures of format 1, written by the build that introduced this rule,
//! are in `tests/fixtures/group-v1/` (`tests/compat.rs`).
//!
//! A writer's first write to a partition in each epoch (transaction) is
//! its [`Shape`]: the `job.max_parallelism` and `scale.tasks` its rows'
//! partitions were chosen by. A reading task refuses a shape other than
//! its own before any row of that transaction, whatever the rows' keys:
//! the rows' key groups would not be the task's.

use crate::dataflow::codec::{get_varint, put_varint, StateCodec};
use crate::dataflow::row::Row;

/// The newest repartition wire format this build reads and writes (see
/// the module's "Versions").
pub const FORMAT: u32 = 1;

/// The format the group's writers use: the newest every member reads.
/// `own` is this build's; `members` what each other member announced,
/// `None` for one that announced nothing (a build before formats were
/// announced reads format 1 only).
pub fn agreed_format(own: u32, members: impl IntoIterator<Item = Option<u32>>) -> u32 {
    members
        .into_iter()
        .map(|f| f.unwrap_or(1))
        .fold(own, u32::min)
        .max(1)
}

const ROW: u8 = 1;
const WATERMARK: u8 = 2;
const SHAPE: u8 = 4;
const ROWS: u8 = 5;

/// A run of rows is closed before it would pass this many bytes, well
/// under Kafka's default `message.max.bytes` (1 MB); a row over it on its
/// own is a record alone (`exchange::RepartitionOut`).
pub const ROWS_BYTES: usize = 256 * 1024;

/// What a writer's rows' partitions mean: key group `kg` (of
/// `max_parallelism`) goes to partition `kg * tasks / max_parallelism`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub max_parallelism: u32,
    pub tasks: u32,
}

/// One repartition record's value, decoded.
#[derive(Debug, Clone, PartialEq)]
pub enum Wire<'a> {
    /// One row, written by a version before [`Wire::Rows`]; its key is
    /// the Kafka record's.
    Row {
        port: usize,
        timestamp: i64,
        row: Row,
    },
    /// Rows for input `port`, decoded as they are read.
    Rows { port: usize, rows: Rows<'a> },
    /// `writer` has seen everything up to `watermark`, or is idle.
    Watermark {
        writer: String,
        watermark: i64,
        idle: bool,
    },
    /// The settings `instance` routes its rows by (see the module).
    Shape { instance: String, shape: Shape },
}

/// The single-row record of earlier versions; kept to test that they are
/// still read.
#[cfg(test)]
pub fn encode_row(port: usize, timestamp: i64, row: &Row, out: &mut Vec<u8>) {
    out.clear();
    out.push(ROW);
    put_varint(port as u64, out);
    out.extend_from_slice(&timestamp.to_le_bytes());
    row.encode(out);
}

/// Writes a run of rows into `out`: [`RowsWriter::begin`], a
/// [`RowsWriter::push`] per row, [`RowsWriter::finish`].
#[derive(Debug, Default)]
pub struct RowsWriter {
    count: u32,
    count_at: usize,
}

impl RowsWriter {
    pub fn begin(&mut self, port: usize, out: &mut Vec<u8>) {
        out.clear();
        out.push(ROWS);
        put_varint(port as u64, out);
        self.count_at = out.len();
        out.extend_from_slice(&0u32.to_le_bytes());
        self.count = 0;
    }

    pub fn push(&mut self, key: &[u8], timestamp: i64, row: &Row, out: &mut Vec<u8>) {
        put_varint(key.len() as u64, out);
        out.extend_from_slice(key);
        out.extend_from_slice(&timestamp.to_le_bytes());
        row.encode(out);
        self.count += 1;
    }

    pub fn count(&self) -> u32 {
        self.count
    }

    /// Forgets the last row pushed (its bytes are the caller's to cut).
    pub fn pop(&mut self) {
        self.count -= 1;
    }

    /// A row as [`RowsWriter::push`] encoded it.
    pub fn push_encoded(&mut self, row: &[u8], out: &mut Vec<u8>) {
        out.extend_from_slice(row);
        self.count += 1;
    }

    pub fn finish(&mut self, out: &mut [u8]) {
        out[self.count_at..self.count_at + 4].copy_from_slice(&self.count.to_le_bytes());
    }
}

/// The rows of a [`Wire::Rows`] record: `(key, event time, row)` each.
#[derive(Debug, Clone, PartialEq)]
pub struct Rows<'a> {
    input: &'a [u8],
    left: u32,
}

impl<'a> Rows<'a> {
    pub fn len(&self) -> u32 {
        self.left
    }

    pub fn is_empty(&self) -> bool {
        self.left == 0
    }

    fn next_row(&mut self) -> Result<(&'a [u8], i64, Row), String> {
        let len = get_varint(&mut self.input)? as usize;
        let key = take(&mut self.input, len, "a row's key")?;
        let timestamp = i64_le(&mut self.input, "a row's event time")?;
        let row = Row::decode_prefix(&mut self.input)?;
        self.left -= 1;
        if self.left == 0 && !self.input.is_empty() {
            return Err(format!("{} bytes after the last row", self.input.len()));
        }
        Ok((key, timestamp, row))
    }
}

impl<'a> Iterator for Rows<'a> {
    type Item = Result<(&'a [u8], i64, Row), String>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        let next = self.next_row();
        if next.is_err() {
            // Nothing after a damaged row can be found.
            self.left = 0;
        }
        Some(next)
    }
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
pub fn decode(bytes: &[u8]) -> Result<Wire<'_>, String> {
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
        ROWS => {
            let port = get_varint(&mut input)? as usize;
            let count = take(&mut input, 4, "the row count")?;
            let left = u32::from_le_bytes(count.try_into().expect("four bytes"));
            if left == 0 && !input.is_empty() {
                return Err(format!("{} bytes after zero rows", input.len()));
            }
            Ok(Wire::Rows {
                port,
                rows: Rows { input, left },
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
        t => Err(format!(
            "unknown repartition record type {t}: written by a newer weir build (this build \
             reads repartition wire format {FORMAT}); upgrade this instance to the build the \
             job's other instances run (docs/operations.md, \"Rolling upgrades\")"
        )),
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

    fn rows_record(port: usize, rows: &[(&[u8], i64, Row)]) -> Vec<u8> {
        let mut buf = Vec::new();
        let mut w = RowsWriter::default();
        w.begin(port, &mut buf);
        for (key, ts, row) in rows {
            w.push(key, *ts, row, &mut buf);
        }
        w.finish(&mut buf);
        buf
    }

    #[test]
    fn runs_of_rows_round_trip_with_their_keys_and_times() {
        let rows: Vec<(&[u8], i64, Row)> = vec![
            (b"k1", 5, Row::insert(vec![Value::String("a".into())])),
            (
                b"",
                i64::MIN,
                Row {
                    kind: RowKind::Delete,
                    values: vec![Value::Null, Value::Int(-1)],
                },
            ),
            (&[0u8; 300], -7, Row::insert(vec![])),
        ];
        let buf = rows_record(3, &rows);
        let Ok(Wire::Rows { port, rows: read }) = decode(&buf) else {
            panic!("not a run of rows: {:?}", decode(&buf));
        };
        assert_eq!(port, 3);
        assert_eq!(read.len(), 3);
        let read: Vec<_> = read.map(Result::unwrap).collect();
        let want: Vec<_> = rows.iter().map(|(k, t, r)| (*k, *t, r.clone())).collect();
        assert_eq!(read, want);
        let empty = rows_record(0, &[]);
        let Ok(Wire::Rows { rows, .. }) = decode(&empty) else {
            panic!("an empty run is a run");
        };
        assert_eq!(rows.count(), 0);
    }

    /// A damaged run is an error at the row where it breaks, never rows
    /// made up from the bytes after it.
    #[test]
    fn a_damaged_run_of_rows_is_an_error() {
        let row = Row::insert(vec![Value::Int(1), Value::String("xy".into())]);
        let buf = rows_record(0, &[(b"a", 1, row.clone()), (b"b", 2, row)]);
        for n in 0..buf.len() {
            let ok = match decode(&buf[..n]) {
                Err(_) => false,
                Ok(Wire::Rows { rows, .. }) => rows.into_iter().all(|r| r.is_ok()),
                Ok(other) => panic!("prefix of {n} bytes read as {other:?}"),
            };
            assert!(!ok, "prefix of {n} bytes decoded");
        }
        let mut longer = buf.clone();
        longer.push(0);
        let Ok(Wire::Rows { rows, .. }) = decode(&longer) else {
            panic!("the header is whole");
        };
        let last = rows.last().expect("two rows");
        assert!(last.unwrap_err().contains("1 bytes after the last row"));
    }

    #[test]
    fn the_agreed_format_is_the_oldest_any_member_reads() {
        assert_eq!(agreed_format(FORMAT, []), FORMAT);
        assert_eq!(agreed_format(3, [Some(3), None]), 1);
        assert_eq!(agreed_format(3, [Some(2), Some(3)]), 2);
        assert_eq!(agreed_format(2, [Some(5)]), 2);
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
