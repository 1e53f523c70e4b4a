//! Rolling upgrades (issue #38 item 7, docs/operations.md): what an
//! earlier build wrote is read by this one. The fixtures under
//! `tests/fixtures/group-v1/` were written by the build at commit 7bee8c8,
//! before formats were versioned (repartition wire format 1, task manifest
//! format 1): the repartition record values by
//! `examples/group_wire_fixtures.rs`, the task manifest by a group-mode
//! word count of that build (copied from its checkpoint storage).

use std::path::PathBuf;

use weir::dataflow::row::{Row, RowKind, Value};
use weir::engine::group::manifest;
use weir::engine::group::wire::{self, Shape, Wire};

fn fixture(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/group-v1")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn a_run_of_rows_of_format_1_is_read() {
    let bytes = fixture("rows.bin");
    let Ok(Wire::Rows { port, rows }) = wire::decode(&bytes) else {
        panic!("not a run of rows: {:?}", wire::decode(&bytes));
    };
    assert_eq!(port, 1);
    let rows: Vec<(Vec<u8>, i64, Row)> = rows
        .map(|r| {
            let (k, t, row) = r.unwrap();
            (k.to_vec(), t, row)
        })
        .collect();
    let want = vec![
        (
            b"hello".to_vec(),
            1_700_000_000_123,
            Row::insert(vec![Value::String("hello".into())]),
        ),
        (
            vec![0, 1, 2, 255],
            -7,
            Row {
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
        ),
        (
            Vec::new(),
            i64::MIN,
            Row {
                kind: RowKind::Delete,
                values: vec![],
            },
        ),
    ];
    assert_eq!(rows, want);
}

#[test]
fn watermarks_and_shapes_of_format_1_are_read() {
    assert_eq!(
        wire::decode(&fixture("watermark.bin")),
        Ok(Wire::Watermark {
            writer: "clicks/3".into(),
            watermark: 1_700_000_000_000,
            idle: false
        })
    );
    assert_eq!(
        wire::decode(&fixture("watermark-idle.bin")),
        Ok(Wire::Watermark {
            writer: "word-count/7".into(),
            watermark: i64::MIN,
            idle: true
        })
    );
    assert_eq!(
        wire::decode(&fixture("shape.bin")),
        Ok(Wire::Shape {
            instance: "i2".into(),
            shape: Shape {
                max_parallelism: 128,
                tasks: 8
            }
        })
    );
}

/// This build writes format 1 byte for byte as the earlier one did, so
/// that an earlier build reads it during a rolling upgrade.
#[test]
fn this_build_writes_format_1_as_the_earlier_build_did() {
    assert_eq!(wire::FORMAT, 1);
    let mut buf = Vec::new();
    wire::encode_watermark("clicks/3", 1_700_000_000_000, false, &mut buf);
    assert_eq!(buf, fixture("watermark.bin"));
    wire::encode_shape(
        "i2",
        Shape {
            max_parallelism: 128,
            tasks: 8,
        },
        &mut buf,
    );
    assert_eq!(buf, fixture("shape.bin"));
    let mut run = wire::RowsWriter::default();
    run.begin(1, &mut buf);
    run.push(
        b"hello",
        1_700_000_000_123,
        &Row::insert(vec![Value::String("hello".into())]),
        &mut buf,
    );
    run.finish(&mut buf);
    let earlier = fixture("rows.bin");
    // The earlier run holds three rows; its first row's bytes are these.
    assert_eq!(buf[..2], earlier[..2]);
    assert_eq!(buf[6..], earlier[6..buf.len()]);
}

#[test]
fn a_task_manifest_of_format_1_is_read() {
    let bytes = fixture("manifest.json");
    let m = manifest::parse_manifest(&bytes).unwrap();
    assert_eq!(m.format, 1);
    assert!(!m.files.is_empty());
    let g = m.graph.as_ref().expect("a job graph's task");
    assert_eq!(g.stage, m.operator_uid);
    assert!(!g.operators.is_empty());
    assert_eq!(
        manifest::manifest_file_keys(&bytes).unwrap(),
        m.files.iter().map(|f| f.key.clone()).collect::<Vec<_>>()
    );
    // Where it is stored, and the pointer to it, as the earlier build named them.
    let key = "stages/word-count/0000/manifests/\
               1796522926798-i1-71c904831081c2782006a8b772fb3e8c-1-00000021.json";
    assert_eq!(m.key(), key);
    let pointer = format!("weir-task={key}");
    assert_eq!(manifest::parse_pointer(&pointer), Some(key));
    assert_eq!(manifest::manifest_instance(key), Some("i1"));
    // It round-trips: this build writes what the earlier one read.
    let again = serde_json::to_vec(&m).unwrap();
    assert_eq!(manifest::parse_manifest(&again).unwrap(), m);
    let earlier: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    let now: serde_json::Value = serde_json::from_slice(&again).unwrap();
    assert_eq!(earlier, now);
}

/// What a newer build wrote is refused with what to do, never misread.
#[test]
fn newer_formats_are_refused_saying_how_to_upgrade() {
    let bytes = fixture("manifest.json");
    let mut v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    v["format"] = serde_json::json!(manifest::FORMAT + 1);
    let newer = serde_json::to_vec(&v).unwrap();
    let e = manifest::parse_manifest(&newer).unwrap_err();
    assert!(
        e.contains("newer weir build") && e.contains("Rolling upgrades"),
        "{e}"
    );
    // Its files are still protected from garbage collection.
    assert_eq!(
        manifest::manifest_file_keys(&newer),
        manifest::manifest_file_keys(&bytes)
    );
    let e = wire::decode(&[9, 0]).unwrap_err();
    assert!(
        e.contains("unknown repartition record type 9")
            && e.contains("newer weir build")
            && e.contains("Rolling upgrades"),
        "{e}"
    );
}
