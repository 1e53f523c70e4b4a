//! Writes one repartition record value of each type group mode writes
//! (`engine::group::wire`), as this build encodes them, into the folder
//! given as the first argument: the fixtures of `tests/compat.rs`, which
//! check that later builds still read them (rolling upgrades,
//! docs/operations.md). The committed files under
//! `tests/fixtures/group-v1/` were written by the build at commit 7bee8c8
//! (wire format 1); running this with a later build writes what that
//! build writes.
//!
//! ```text
//! cargo run --example group_wire_fixtures -- tests/fixtures/group-v1
//! ```

use std::path::PathBuf;

use weir::dataflow::row::{Row, RowKind, Value};
use weir::engine::group::wire;

fn main() {
    let dir = PathBuf::from(std::env::args().nth(1).expect("a folder"));
    std::fs::create_dir_all(&dir).unwrap();
    let mut buf = Vec::new();
    // A run of rows for port 1: a word count's row, a retraction with
    // every scalar type, an empty key and an empty row.
    let mut run = wire::RowsWriter::default();
    run.begin(1, &mut buf);
    run.push(
        b"hello",
        1_700_000_000_123,
        &Row::insert(vec![Value::String("hello".into())]),
        &mut buf,
    );
    run.push(
        &[0, 1, 2, 255],
        -7,
        &Row {
            kind: RowKind::UpdateBefore,
            values: vec![
                Value::Null,
                Value::Bool(true),
                Value::Int(-3),
                Value::Double(2.5),
                Value::String("ünïcode".into()),
                Value::Bytes(vec![0, 9]),
                Value::Timestamp(1_700_000_000_000),
                Value::List(vec![Value::Int(1), Value::Null]),
                Value::Struct(vec![Value::String("a".into()), Value::Int(2)]),
            ],
        },
        &mut buf,
    );
    run.push(
        b"",
        i64::MIN,
        &Row {
            kind: RowKind::Delete,
            values: vec![],
        },
        &mut buf,
    );
    run.finish(&mut buf);
    std::fs::write(dir.join("rows.bin"), &buf).unwrap();
    wire::encode_watermark("clicks/3", 1_700_000_000_000, false, &mut buf);
    std::fs::write(dir.join("watermark.bin"), &buf).unwrap();
    wire::encode_watermark("word-count/7", i64::MIN, true, &mut buf);
    std::fs::write(dir.join("watermark-idle.bin"), &buf).unwrap();
    wire::encode_shape(
        "i2",
        wire::Shape {
            max_parallelism: 128,
            tasks: 8,
        },
        &mut buf,
    );
    std::fs::write(dir.join("shape.bin"), &buf).unwrap();
}
