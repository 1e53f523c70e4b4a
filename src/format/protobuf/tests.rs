//! The Protobuf reader and writer against hand-written and protox-compiled
//! schemas.

use super::read::*;
use super::write::*;
use super::*;
use crate::dataflow::row::{DataType, Decimal, Field, RowKind, Value};
use crate::format::{confluent, BytesDecoder, BytesEncoder, DecodeError, Decoded};
use prost::Message as _;
use prost_reflect::{DynamicMessage, MapKey, Value as Pv};

const SHOP: &str = r#"
syntax = "proto3";
package shop;

import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";
import "google/protobuf/duration.proto";

enum Status { STATUS_UNKNOWN = 0; PAID = 1; SHIPPED = 2; }

message Item { string sku = 1; int32 qty = 2; double price = 3; }
message Address { string city = 1; string zip = 2; }

message Order {
  int64 id = 1;
  string customer = 2;
  repeated Item items = 3;
  map<string, int32> counts = 4;
  oneof payment { string card = 5; int64 voucher = 6; }
  Status status = 7;
  google.protobuf.Timestamp created = 8;
  google.protobuf.Int64Value discount = 9;
  optional int32 priority = 10;
  uint64 big = 11;
  Address address = 12;
  bool gift = 13;
  bytes blob = 14;
  float ratio = 15;
  repeated int64 tags = 16;
  uint32 small = 17;
  sint64 delta = 18;
  google.protobuf.Duration ttl = 19;
  google.protobuf.StringValue note = 20;
}

message Other { string x = 1; }

message Tree { string name = 1; repeated Tree children = 2; }
"#;

/// `shop.proto` in a temp dir (kept alive by the returned guard).
fn shop() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shop.proto");
    std::fs::write(&path, SHOP).unwrap();
    (dir, path)
}

fn order_desc(path: &Path) -> MessageDescriptor {
    compile_file(path)
        .unwrap()
        .message(Some("shop.Order"))
        .unwrap()
}

fn t(name: &str, ty: DataType) -> Field {
    Field::new(name, ty)
}

fn row(fields: Vec<Field>) -> DataType {
    DataType::Struct(fields)
}

fn list(ty: DataType) -> DataType {
    DataType::List(Box::new(ty))
}

/// A message of `desc` with fields set by name (the independent encoder).
fn dynamic(desc: &MessageDescriptor, fields: Vec<(&str, Pv)>) -> DynamicMessage {
    let mut m = DynamicMessage::new(desc.clone());
    for (name, v) in fields {
        m.set_field_by_name(name, v);
    }
    m
}

/// A nested message of the type of `desc`'s field `field`.
fn sub(desc: &MessageDescriptor, field: &str, fields: Vec<(&str, Pv)>) -> Pv {
    let f = desc.get_field_by_name(field).unwrap();
    let Kind::Message(m) = f.kind() else {
        panic!("{field} is no message")
    };
    Pv::Message(dynamic(&m, fields))
}

fn framed(id: u32, indexes: &[usize], payload: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    confluent::frame(id, &mut b);
    confluent::write_message_indexes(indexes, &mut b);
    b.extend_from_slice(payload);
    b
}

fn decode(d: &ProtobufDecoder, bytes: &[u8]) -> Result<Vec<Value>, DecodeError> {
    let mut out = Vec::new();
    assert_eq!(d.decode(bytes, &mut out)?, Decoded::Row(RowKind::Insert));
    Ok(out)
}

fn order_decoder(path: &Path) -> ProtobufDecoder {
    let columns = columns(&order_desc(path)).unwrap();
    ProtobufDecoder::new(
        ProtoSource::File(path.into()),
        Some("shop.Order"),
        &columns,
        true,
    )
    .unwrap()
}

fn s(v: &str) -> Value {
    Value::String(v.into())
}

fn bad(e: DecodeError) -> String {
    match e {
        DecodeError::Bad(m) => m,
        other => panic!("not Bad: {other:?}"),
    }
}

#[test]
fn columns_map_every_type() {
    let (_dir, path) = shop();
    let item = row(vec![
        t("sku", DataType::String),
        t("qty", DataType::Int),
        t("price", DataType::Double),
    ]);
    let entry = row(vec![t("key", DataType::String), t("value", DataType::Int)]);
    let expected = vec![
        t("id", DataType::BigInt),
        t("customer", DataType::String),
        t("items", list(item)),
        t("counts", list(entry)),
        t("card", DataType::String),
        t("voucher", DataType::BigInt),
        t("status", DataType::String),
        t("created", DataType::Timestamp),
        t("discount", DataType::BigInt),
        t("priority", DataType::Int),
        t("big", DataType::BigInt),
        t(
            "address",
            row(vec![
                t("city", DataType::String),
                t("zip", DataType::String),
            ]),
        ),
        t("gift", DataType::Boolean),
        t("blob", DataType::Bytes),
        t("ratio", DataType::Double),
        t("tags", list(DataType::BigInt)),
        t("small", DataType::BigInt),
        t("delta", DataType::BigInt),
        t("ttl", DataType::BigInt),
        t("note", DataType::String),
    ];
    assert_eq!(columns(&order_desc(&path)).unwrap(), expected);
}

#[test]
fn a_recursive_message_is_refused_with_its_path() {
    let (_dir, path) = shop();
    let tree = compile_file(&path)
        .unwrap()
        .message(Some("shop.Tree"))
        .unwrap();
    let e = columns(&tree).unwrap_err();
    assert!(e.contains("shop.Tree") && e.contains("`children`"), "{e}");
    // Declared columns that stop short of the recursion decode fine.
    let cols = [
        t("name", DataType::String),
        t("children", list(row(vec![t("name", DataType::String)]))),
    ];
    let d = ProtobufDecoder::new(ProtoSource::File(path), Some("shop.Tree"), &cols, false).unwrap();
    let child = sub(&tree, "children", vec![("name", Pv::String("leaf".into()))]);
    let m = dynamic(
        &tree,
        vec![
            ("name", Pv::String("root".into())),
            ("children", Pv::List(vec![child])),
        ],
    );
    assert_eq!(
        decode(&d, &m.encode_to_vec()).unwrap(),
        vec![s("root"), Value::List(vec![Value::Struct(vec![s("leaf")])])]
    );
}

#[test]
fn every_type_decodes_from_prost_bytes() {
    let (_dir, path) = shop();
    let o = order_desc(&path);
    let item = |sku: &str, qty: i32, price: f64| {
        sub(
            &o,
            "items",
            vec![
                ("sku", Pv::String(sku.into())),
                ("qty", Pv::I32(qty)),
                ("price", Pv::F64(price)),
            ],
        )
    };
    let mut counts = std::collections::HashMap::new();
    counts.insert(MapKey::String("x".into()), Pv::I32(1));
    let m = dynamic(
        &o,
        vec![
            ("id", Pv::I64(-7)),
            ("customer", Pv::String("ann".into())),
            (
                "items",
                Pv::List(vec![item("a", 2, 1.5), item("b", -3, 0.0)]),
            ),
            ("counts", Pv::Map(counts)),
            ("card", Pv::String("4242".into())),
            ("status", Pv::EnumNumber(2)),
            (
                "created",
                sub(
                    &o,
                    "created",
                    vec![
                        ("seconds", Pv::I64(1_700_000_000)),
                        ("nanos", Pv::I32(123_999_999)),
                    ],
                ),
            ),
            ("discount", sub(&o, "discount", vec![("value", Pv::I64(0))])),
            ("priority", Pv::I32(0)),
            ("big", Pv::U64(i64::MAX as u64)),
            (
                "address",
                sub(&o, "address", vec![("city", Pv::String("Oslo".into()))]),
            ),
            ("gift", Pv::Bool(true)),
            (
                "blob",
                Pv::Bytes(prost::bytes::Bytes::from_static(&[0, 1, 255])),
            ),
            ("ratio", Pv::F32(0.25)),
            ("tags", Pv::List(vec![Pv::I64(1), Pv::I64(-2), Pv::I64(3)])),
            ("small", Pv::U32(u32::MAX)),
            ("delta", Pv::I64(-5)),
            (
                "ttl",
                sub(
                    &o,
                    "ttl",
                    vec![("seconds", Pv::I64(2)), ("nanos", Pv::I32(500_000_000))],
                ),
            ),
            (
                "note",
                sub(&o, "note", vec![("value", Pv::String("hi".into()))]),
            ),
        ],
    );
    let values = decode(&order_decoder(&path), &framed(1, &[2], &m.encode_to_vec())).unwrap();
    let item = |sku: &str, qty: i64, price: f64| {
        Value::Struct(vec![s(sku), Value::Int(qty), Value::Double(price)])
    };
    assert_eq!(
        values,
        vec![
            Value::Int(-7),
            s("ann"),
            Value::List(vec![item("a", 2, 1.5), item("b", -3, 0.0)]),
            Value::List(vec![Value::Struct(vec![s("x"), Value::Int(1)])]),
            s("4242"),
            Value::Null,
            s("SHIPPED"),
            Value::Timestamp(1_700_000_000_123),
            Value::Int(0),
            Value::Int(0),
            Value::Int(i64::MAX),
            Value::Struct(vec![s("Oslo"), s("")]),
            Value::Bool(true),
            Value::Bytes(vec![0, 1, 255]),
            Value::Double(0.25),
            Value::List(vec![Value::Int(1), Value::Int(-2), Value::Int(3)]),
            Value::Int(i64::from(u32::MAX)),
            Value::Int(-5),
            Value::Int(2500),
            s("hi"),
        ]
    );
}

#[test]
fn absent_fields_are_defaults_without_presence_and_null_with_it() {
    let (_dir, path) = shop();
    let values = decode(&order_decoder(&path), &framed(1, &[2], &[])).unwrap();
    let null = Value::Null;
    let empty = Value::List(vec![]);
    assert_eq!(
        values,
        vec![
            Value::Int(0),
            s(""),
            empty.clone(),
            empty.clone(),
            null.clone(),
            null.clone(),
            s("STATUS_UNKNOWN"),
            null.clone(),
            null.clone(),
            null.clone(),
            Value::Int(0),
            null.clone(),
            Value::Bool(false),
            Value::Bytes(vec![]),
            Value::Double(0.0),
            empty,
            Value::Int(0),
            Value::Int(0),
            null.clone(),
            null,
        ]
    );
}

#[test]
fn timestamps_floor_to_milliseconds_and_unknown_enum_numbers_are_text() {
    let (_dir, path) = shop();
    let o = order_desc(&path);
    let cols = [
        t("created", DataType::Timestamp),
        t("status", DataType::String),
    ];
    let d =
        ProtobufDecoder::new(ProtoSource::File(path), Some("shop.Order"), &cols, false).unwrap();
    for (seconds, nanos, ms) in [
        (-1i64, 500_000_001i32, -500i64),
        (-1, 0, -1000),
        (0, 999_999, 0),
        (-2, 999_999, -2000),
        (-2, 1_000_000, -1999),
    ] {
        let m = dynamic(
            &o,
            vec![
                (
                    "created",
                    sub(
                        &o,
                        "created",
                        vec![("seconds", Pv::I64(seconds)), ("nanos", Pv::I32(nanos))],
                    ),
                ),
                ("status", Pv::EnumNumber(9)),
            ],
        );
        assert_eq!(
            decode(&d, &m.encode_to_vec()).unwrap(),
            vec![Value::Timestamp(ms), s("9")],
            "{seconds} s {nanos} ns"
        );
    }
}

#[test]
fn uint64_above_bigint_is_a_bad_record_naming_the_field() {
    let (_dir, path) = shop();
    let o = order_desc(&path);
    let m = dynamic(&o, vec![("big", Pv::U64(u64::MAX))]);
    let e = bad(decode(&order_decoder(&path), &framed(5, &[2], &m.encode_to_vec())).unwrap_err());
    assert!(
        e.contains("shop.Order")
            && e.contains("`big`")
            && e.contains("18446744073709551615")
            && e.contains("BIGINT"),
        "{e}"
    );
}

#[test]
fn a_record_of_another_message_is_refused_with_both_names() {
    let (_dir, path) = shop();
    let other = compile_file(&path)
        .unwrap()
        .message(Some("shop.Other"))
        .unwrap();
    let m = dynamic(&other, vec![("x", Pv::String("?".into()))]);
    let e = bad(decode(&order_decoder(&path), &framed(12, &[3], &m.encode_to_vec())).unwrap_err());
    assert!(
        e.contains(
            "a Protobuf message of type shop.Other where the source reads shop.Order (schema id 12"
        ),
        "{e}"
    );
    let e = bad(decode(&order_decoder(&path), &framed(12, &[9, 1], &[])).unwrap_err());
    assert!(e.contains("[9, 1]") && e.contains("shop.Order"), "{e}");
    // The default message is the file's first (shop.Item): [0] matches it.
    let cols = [t("sku", DataType::String)];
    let d = ProtobufDecoder::new(ProtoSource::File(path), None, &cols, true).unwrap();
    assert_eq!(
        decode(&d, &framed(1, &[0], &[10, 1, b'k'])).unwrap(),
        vec![s("k")]
    );
}

#[test]
fn a_truncated_or_malformed_payload_is_refused() {
    let (_dir, path) = shop();
    let o = order_desc(&path);
    let m = dynamic(
        &o,
        vec![
            ("customer", Pv::String("a long enough name".into())),
            ("id", Pv::I64(1)),
        ],
    );
    let bytes = framed(1, &[2], &m.encode_to_vec());
    let d = order_decoder(&path);
    // The header is 7 bytes (magic, id, indexes [2]); cut inside a
    // string, after a key, and inside a varint.
    for cut in [bytes.len() - 3, 10, 8] {
        let e = bad(decode(&d, &bytes[..cut]).unwrap_err());
        assert!(
            e.contains("shop.Order") && e.contains("failed to decode Protobuf message"),
            "{cut}: {e}"
        );
    }
    // Field 2 (a string) with a varint's wire type.
    let e = bad(decode(&d, &framed(1, &[2], &[0x10, 1])).unwrap_err());
    assert!(e.contains("`customer`") && e.contains("wire type"), "{e}");
    assert!(bad(decode(&d, &[1, 0, 0, 0, 1, 0]).unwrap_err()).contains("magic byte"));
}

#[test]
fn occurrences_merge_the_last_oneof_member_wins_and_maps_keep_wire_order() {
    let (_dir, path) = shop();
    let o = order_desc(&path);
    let mut first_counts = std::collections::HashMap::new();
    first_counts.insert(MapKey::String("b".into()), Pv::I32(2));
    let mut second_counts = std::collections::HashMap::new();
    second_counts.insert(MapKey::String("a".into()), Pv::I32(1));
    let first = dynamic(
        &o,
        vec![
            ("card", Pv::String("4242".into())),
            (
                "address",
                sub(&o, "address", vec![("city", Pv::String("Oslo".into()))]),
            ),
            (
                "created",
                sub(
                    &o,
                    "created",
                    vec![("seconds", Pv::I64(10)), ("nanos", Pv::I32(7_000_000))],
                ),
            ),
            ("tags", Pv::List(vec![Pv::I64(1)])),
            ("counts", Pv::Map(first_counts)),
            ("customer", Pv::String("old".into())),
        ],
    );
    let second = dynamic(
        &o,
        vec![
            ("voucher", Pv::I64(5)),
            (
                "address",
                sub(&o, "address", vec![("zip", Pv::String("0150".into()))]),
            ),
            (
                "created",
                sub(&o, "created", vec![("seconds", Pv::I64(20))]),
            ),
            ("tags", Pv::List(vec![Pv::I64(2)])),
            ("counts", Pv::Map(second_counts)),
            ("customer", Pv::String("new".into())),
        ],
    );
    // Concatenated messages are one merged message, as protobuf says.
    let mut payload = first.encode_to_vec();
    payload.extend(second.encode_to_vec());
    let cols = [
        t("CARD", DataType::String),
        t("voucher", DataType::BigInt),
        t(
            "address",
            row(vec![
                t("city", DataType::String),
                t("zip", DataType::String),
            ]),
        ),
        t("created", DataType::Timestamp),
        t("tags", list(DataType::BigInt)),
        t(
            "counts",
            list(row(vec![
                t("key", DataType::String),
                t("value", DataType::Int),
            ])),
        ),
        t("customer", DataType::String),
    ];
    let d = ProtobufDecoder::new(
        ProtoSource::File(path.clone()),
        Some("shop.Order"),
        &cols,
        false,
    )
    .unwrap();
    let entry = |k: &str, v: i64| Value::Struct(vec![s(k), Value::Int(v)]);
    assert_eq!(
        decode(&d, &payload).unwrap(),
        vec![
            Value::Null,
            Value::Int(5),
            Value::Struct(vec![s("Oslo"), s("0150")]),
            Value::Timestamp(20_007),
            Value::List(vec![Value::Int(1), Value::Int(2)]),
            Value::List(vec![entry("b", 2), entry("a", 1)]),
            s("new"),
        ]
    );
    // The oracle agrees on the merge.
    let merged = DynamicMessage::decode(o.clone(), payload.as_slice()).unwrap();
    assert!(!merged.has_field_by_name("card"));
    // A member no column reads still clears the one before it.
    let only_card = [t("card", DataType::String)];
    let d = ProtobufDecoder::new(
        ProtoSource::File(path),
        Some("shop.Order"),
        &only_card,
        false,
    )
    .unwrap();
    assert_eq!(decode(&d, &payload).unwrap(), vec![Value::Null]);
    assert_eq!(decode(&d, &first.encode_to_vec()).unwrap(), vec![s("4242")]);
}

#[test]
fn columns_match_by_name_and_a_field_that_cannot_fill_its_column_is_named() {
    let (_dir, path) = shop();
    let o = order_desc(&path);
    let cols = [
        t(
            "ID",
            DataType::Decimal {
                precision: 10,
                scale: 2,
            },
        ),
        t("missing", DataType::String),
        t(
            "Address",
            row(vec![t("CITY", DataType::String), t("nope", DataType::Int)]),
        ),
        t("small", DataType::Double),
        t("status", DataType::Int),
        t("discount", DataType::BigInt),
    ];
    let d = ProtobufDecoder::new(
        ProtoSource::File(path.clone()),
        Some(".shop.Order"),
        &cols,
        false,
    )
    .unwrap();
    let m = dynamic(
        &o,
        vec![
            ("id", Pv::I64(12)),
            (
                "address",
                sub(&o, "address", vec![("city", Pv::String("Rome".into()))]),
            ),
            ("small", Pv::U32(3)),
            ("status", Pv::EnumNumber(1)),
            ("discount", sub(&o, "discount", vec![])),
        ],
    );
    assert_eq!(
        decode(&d, &m.encode_to_vec()).unwrap(),
        vec![
            Value::Decimal(Decimal {
                unscaled: 1200,
                scale: 2
            }),
            Value::Null,
            Value::Struct(vec![s("Rome"), Value::Null]),
            Value::Double(3.0),
            Value::Int(1),
            // A wrapper present without its value holds the default.
            Value::Int(0),
        ]
    );
    let wrong = [t("items", DataType::String)];
    let e = ProtobufDecoder::new(
        ProtoSource::File(path.clone()),
        Some("shop.Order"),
        &wrong,
        false,
    )
    .unwrap_err();
    assert!(
        e.contains("shop.proto")
            && e.contains("message shop.Order")
            && e.contains("field `items` (repeated shop.Item)")
            && e.contains("VARCHAR")
            && e.contains("ARRAY<ROW<sku VARCHAR"),
        "{e}"
    );
    let nested = [t("address", row(vec![t("zip", DataType::Timestamp)]))];
    let e = ProtobufDecoder::new(
        ProtoSource::File(path.clone()),
        Some("shop.Order"),
        &nested,
        false,
    )
    .unwrap_err();
    assert!(
        e.contains("field `address.zip` (string)") && e.contains("TIMESTAMP(3)"),
        "{e}"
    );
    let e = ProtobufDecoder::new(
        ProtoSource::File(path.clone()),
        Some("shop.Nope"),
        &nested,
        false,
    )
    .unwrap_err();
    assert!(
        e.contains("no message \"shop.Nope\"") && e.contains("shop.Order"),
        "{e}"
    );
    let int = [t("priority", DataType::Int), t("small", DataType::Int)];
    let d = ProtobufDecoder::new(ProtoSource::File(path), Some("shop.Order"), &int, false).unwrap();
    let m = dynamic(&o, vec![("small", Pv::U32(u32::MAX))]);
    let e = bad(decode(&d, &m.encode_to_vec()).unwrap_err());
    assert!(
        e.contains("`small`") && e.contains("does not fit INT"),
        "{e}"
    );
}

#[test]
fn message_indexes_name_nested_messages() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("n.proto");
    std::fs::write(&path, "syntax = \"proto3\"; package n;\nmessage A { message B { int32 x = 1; } message C { map<string, int32> m = 1; message D {} } }\nmessage E {}\n").unwrap();
    let schema = compile_file(&path).unwrap();
    for (name, indexes) in [
        ("n.A", vec![0]),
        ("n.A.B", vec![0, 0]),
        ("n.A.C", vec![0, 1]),
        ("n.E", vec![1]),
    ] {
        let m = schema.message(Some(name)).unwrap();
        assert_eq!(message_indexes(&m), indexes, "{name}");
        assert_eq!(schema.message_at(&indexes).unwrap().full_name(), name);
    }
    let d = schema.message(Some("n.A.C.D")).unwrap();
    assert_eq!(
        schema.message_at(&message_indexes(&d)).unwrap().full_name(),
        "n.A.C.D"
    );
    assert!(schema.message_at(&[5]).is_none());
}

#[test]
fn proto2_presence_groups_unpacked_repeats_and_fixed_width_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("legacy.proto");
    std::fs::write(
        &path,
        r#"syntax = "proto2";
package legacy;
import "google/protobuf/wrappers.proto";
message Rec {
  required int32 a = 1;
  optional string b = 2;
  repeated int32 xs = 3;
  optional group G = 4 { optional int64 y = 5; }
  optional fixed32 f32 = 6;
  optional sfixed64 s64 = 7;
  optional fixed64 f64 = 8;
  optional sint32 z = 9;
  repeated google.protobuf.Int32Value ws = 10;
  optional double d = 11 [default = 2.5];
}
"#,
    )
    .unwrap();
    let rec = compile_file(&path)
        .unwrap()
        .message(Some("legacy.Rec"))
        .unwrap();
    let cols = columns(&rec).unwrap();
    assert_eq!(cols[3], t("g", row(vec![t("y", DataType::BigInt)])));
    let d = ProtobufDecoder::new(ProtoSource::File(path), None, &cols, false).unwrap();
    let g = sub(&rec, "g", vec![("y", Pv::I64(-9))]);
    let w = |v: Option<i32>| {
        let fields = v.map(|v| vec![("value", Pv::I32(v))]).unwrap_or_default();
        sub(&rec, "ws", fields)
    };
    let m = dynamic(
        &rec,
        vec![
            ("a", Pv::I32(0)),
            ("xs", Pv::List(vec![Pv::I32(-1), Pv::I32(2)])),
            ("g", g),
            ("f32", Pv::U32(u32::MAX)),
            ("s64", Pv::I64(i64::MIN)),
            ("f64", Pv::U64(8)),
            ("z", Pv::I32(i32::MIN)),
            ("ws", Pv::List(vec![w(Some(4)), w(None)])),
        ],
    );
    let bytes = m.encode_to_vec();
    assert!(
        bytes.windows(2).any(|p| p == [0x23, 0x28]),
        "G is a group on the wire: {bytes:?}"
    );
    assert_eq!(
        decode(&d, &bytes).unwrap(),
        vec![
            Value::Int(0),
            Value::Null,
            Value::List(vec![Value::Int(-1), Value::Int(2)]),
            Value::Struct(vec![Value::Int(-9)]),
            Value::Int(i64::from(u32::MAX)),
            Value::Int(i64::MIN),
            Value::Int(8),
            Value::Int(i64::from(i32::MIN)),
            Value::List(vec![Value::Int(4), Value::Int(0)]),
            // proto2 fields have presence: an absent one is NULL, whatever its default.
            Value::Null,
        ]
    );
}

#[test]
fn registry_files_compile_from_text_or_base64_descriptors() {
    use base64::Engine;
    let (_dir, path) = shop();
    let shop = compile_file(&path).unwrap();
    let descriptor = shop.file.file_descriptor_proto().encode_to_vec();
    let encoded = base64::engine::general_purpose::STANDARD.encode(descriptor);
    assert!(as_descriptor(&encoded).is_some() && as_descriptor(SHOP).is_none());
    // A root that imports a descriptor (and well-known files it does not list).
    let root =
        "syntax = \"proto3\";\nimport \"shop.proto\";\nmessage Wrap { shop.Order order = 1; }\n";
    let files = HashMap::from([
        ("shop.proto".to_string(), encoded.clone()),
        ("root.proto".to_string(), root.to_string()),
    ]);
    let file = compile_files("root.proto", files).unwrap();
    let wrap = file.parent_pool().get_message_by_name("Wrap").unwrap();
    assert_eq!(
        columns(&wrap).unwrap()[0].data_type,
        DataType::Struct(columns(&order_desc(&path)).unwrap())
    );
    // A descriptor as the root, renamed to the name it is compiled as.
    let files = HashMap::from([("schema-7.proto".to_string(), encoded)]);
    let file = compile_files("schema-7.proto", files).unwrap();
    assert_eq!(file.messages().nth(2).unwrap().full_name(), "shop.Order");
    let broken = HashMap::from([(
        "r.proto".to_string(),
        "syntax = \"proto3\"; message X { Missing m = 1; }".to_string(),
    )]);
    let e = compile_files("r.proto", broken).unwrap_err();
    assert!(e.contains("Missing"), "{e}");
}

fn sink_columns() -> Vec<Field> {
    vec![
        t("region", DataType::String),
        t("total", DataType::BigInt),
        t("cnt", DataType::Int),
        t("avg", DataType::Double),
        t(
            "amount",
            DataType::Decimal {
                precision: 10,
                scale: 2,
            },
        ),
        t("ok", DataType::Boolean),
        t("raw", DataType::Bytes),
        t("window_end", DataType::Timestamp),
        t("ids", list(DataType::BigInt)),
        t("names", list(DataType::String)),
        t(
            "loc",
            row(vec![
                t("city", DataType::String),
                t("n", DataType::Int),
                t("at", DataType::Timestamp),
            ]),
        ),
        t("rows", list(row(vec![t("a", DataType::BigInt)]))),
        t("weird name!", DataType::String),
        t("1st", DataType::Int),
        t("Region", DataType::String),
        t("missing", DataType::BigInt),
    ]
}

fn sink_values() -> Vec<Value> {
    vec![
        s("eu"),
        Value::Int(0),
        Value::Int(-3),
        Value::Double(2.5),
        Value::Decimal(Decimal {
            unscaled: -1205,
            scale: 2,
        }),
        Value::Bool(false),
        Value::Bytes(vec![9, 8]),
        Value::Timestamp(-1_500),
        Value::List(vec![Value::Int(1), Value::Int(-1)]),
        Value::List(vec![s("x"), s("")]),
        Value::Struct(vec![
            s("Oslo"),
            Value::Null,
            Value::Timestamp(1_700_000_000_123),
        ]),
        Value::List(vec![
            Value::Struct(vec![Value::Int(7)]),
            Value::Struct(vec![Value::Null]),
        ]),
        s("w"),
        Value::Int(1),
        s("EU"),
        Value::Null,
    ]
}

#[test]
fn the_encoder_writes_what_prost_reflect_and_the_decoder_read() {
    let columns = sink_columns();
    let enc = ProtobufEncoder::new(&columns, "weir.sink.Totals")
        .unwrap()
        .with_schema_id(42);
    let text = enc.schema_text();
    assert!(
        text.contains("package weir.sink;")
            && text.contains("import \"google/protobuf/timestamp.proto\";"),
        "{text}"
    );
    assert!(
        text.contains("optional int64 total = 2;") && text.contains("repeated int64 ids = 9;"),
        "{text}"
    );
    assert_eq!(enc.message_name(), "weir.sink.Totals");
    let names = enc.field_names();
    assert_eq!(&names[12..15], ["weird_name_", "f_1st", "Region_2"]);

    let values = sink_values();
    let refs: Vec<&Value> = values.iter().collect();
    let mut bytes = Vec::new();
    enc.encode(&refs, &mut bytes).unwrap();
    assert_eq!(&bytes[..6], &[0, 0, 0, 0, 42, 0]);

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("totals.proto");
    std::fs::write(&path, text).unwrap();
    let schema = compile_file(&path).unwrap();
    let desc = schema.message(Some("weir.sink.Totals")).unwrap();
    let m = DynamicMessage::decode(desc.clone(), &bytes[6..]).unwrap();
    let get = |name: &str| m.get_field_by_name(name).unwrap().into_owned();
    assert_eq!(get("region"), Pv::String("eu".into()));
    assert!(
        m.has_field_by_name("total") && m.has_field_by_name("ok"),
        "a present zero is kept"
    );
    assert_eq!(get("total"), Pv::I64(0));
    assert_eq!(get("cnt"), Pv::I32(-3));
    assert_eq!(get("avg"), Pv::F64(2.5));
    assert_eq!(get("amount"), Pv::String("-12.05".into()));
    assert_eq!(get("ok"), Pv::Bool(false));
    assert_eq!(
        get("raw"),
        Pv::Bytes(prost::bytes::Bytes::from_static(&[9, 8]))
    );
    let Pv::Message(ts) = get("window_end") else {
        panic!()
    };
    assert_eq!(ts.get_field_by_name("seconds").unwrap().as_i64(), Some(-2));
    assert_eq!(
        ts.get_field_by_name("nanos").unwrap().as_i32(),
        Some(500_000_000)
    );
    assert_eq!(get("ids"), Pv::List(vec![Pv::I64(1), Pv::I64(-1)]));
    assert_eq!(
        get("names"),
        Pv::List(vec![Pv::String("x".into()), Pv::String("".into())])
    );
    let Pv::Message(loc) = get("loc") else {
        panic!()
    };
    assert_eq!(
        loc.get_field_by_name("city").unwrap().as_str(),
        Some("Oslo")
    );
    assert!(!loc.has_field_by_name("n"), "NULL is absent");
    let Pv::List(rows) = get("rows") else {
        panic!()
    };
    assert_eq!(rows.len(), 2);
    assert_eq!(get("weird_name_"), Pv::String("w".into()));
    assert_eq!(get("f_1st"), Pv::I32(1));
    assert_eq!(get("Region_2"), Pv::String("EU".into()));
    assert!(!m.has_field_by_name("missing"), "NULL is absent");

    // And back into rows (columns matched by the sanitized names).
    let mut back_cols = columns.clone();
    for (c, n) in back_cols.iter_mut().zip(&names) {
        c.name = n.to_string();
    }
    let d = ProtobufDecoder::new(ProtoSource::File(path), None, &back_cols, true).unwrap();
    let mut expected = values.clone();
    expected[4] = Value::Decimal(Decimal {
        unscaled: -1205,
        scale: 2,
    });
    assert_eq!(decode(&d, &bytes).unwrap(), expected);
}

#[test]
fn the_encoder_refuses_what_protobuf_cannot_hold() {
    let nested = [t("m", list(list(DataType::Int)))];
    let e = ProtobufEncoder::new(&nested, "T").unwrap_err();
    assert!(e.contains("`m`") && e.contains("array of arrays"), "{e}");
    let enc = ProtobufEncoder::new(
        &[t("xs", list(DataType::BigInt)), t("i", DataType::Int)],
        "T",
    )
    .unwrap();
    assert!(enc.schema_text().contains("package weir;") && !enc.schema_text().contains("import"));
    let mut out = Vec::new();
    let xs = Value::List(vec![Value::Int(1), Value::Null]);
    let e = enc.encode(&[&xs, &Value::Null], &mut out).unwrap_err();
    assert!(e.contains("`xs`") && e.contains("NULL element"), "{e}");
    let e = enc
        .encode(&[&Value::Null, &Value::Int(1 << 40)], &mut out)
        .unwrap_err();
    assert!(e.contains("`i`") && e.contains("INT"), "{e}");
    let e = enc.encode(&[&Value::Null, &s("x")], &mut out).unwrap_err();
    assert!(e.contains("`i`") && e.contains("VARCHAR"), "{e}");
    enc.encode(&[&Value::Null, &Value::Null], &mut out).unwrap();
    assert!(out.is_empty(), "unframed, all absent");
}

#[test]
fn keywords_and_clashing_names_still_compile() {
    let cols = [
        t("message", DataType::String),
        t("optional", DataType::Int),
        t("syntax", row(vec![t("package", DataType::Boolean)])),
        t("a_b", DataType::Int),
        t("aB", DataType::Int),
        t("T", row(vec![t("x", DataType::Int)])),
        t("at", DataType::Timestamp),
    ];
    let enc = ProtobufEncoder::new(&cols, "google.things.T").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("k.proto");
    std::fs::write(&path, enc.schema_text()).unwrap();
    let schema = compile_file(&path).unwrap_or_else(|e| panic!("{e}\n{}", enc.schema_text()));
    let m = schema.message(Some("google.things.T")).unwrap();
    assert_eq!(m.fields().len(), 7);
}

// -- Against a real registry (Apicurio's ccompat API): run with
// `cargo test -- --ignored` while one listens (scripts/registry.sh).

fn registry() -> Arc<Registry> {
    let url = std::env::var("WEIR_TEST_REGISTRY")
        .unwrap_or_else(|_| "http://127.0.0.1:8081/apis/ccompat/v7".into());
    let config = crate::config::RegistryConfig {
        url,
        basic_auth_user: None,
        basic_auth_password_env: None,
        ssl_ca_location: None,
        timeout: std::time::Duration::from_secs(5),
    };
    Arc::new(Registry::new("test", &config).unwrap())
}

fn unique(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("weir-pb-test-{name}-{nanos}")
}

const PATIENCE: Patience = Patience::For(std::time::Duration::from_secs(10));

#[test]
#[ignore = "needs a schema registry at WEIR_TEST_REGISTRY or 127.0.0.1:8081"]
fn a_registry_schema_with_a_well_known_import_and_a_reference_decodes() {
    let registry = registry();
    let common_subject = unique("common");
    let common = "syntax = \"proto3\";\npackage shop.common;\nmessage Money { string currency = 1; int64 cents = 2; }\n";
    registry
        .register(&common_subject, SchemaKind::Protobuf, common, &[], PATIENCE)
        .unwrap();
    let text = "syntax = \"proto3\";\npackage shop;\n\nimport \"google/protobuf/timestamp.proto\";\nimport \"shop/common.proto\";\n\n\
                message Header { string source = 1; }\n\
                message Payment {\n  string id = 1;\n  google.protobuf.Timestamp at = 2;\n  shop.common.Money amount = 3;\n}\n";
    // Only the user's import is a reference: the registry resolves the
    // well-known one itself.
    let references = [crate::format::registry::Reference {
        name: "shop/common.proto".into(),
        subject: common_subject.clone(),
        version: 1,
    }];
    let subject = unique("payments-value");
    let id = registry
        .register(&subject, SchemaKind::Protobuf, text, &references, PATIENCE)
        .unwrap();
    let stored = registry.schema_by_id(id, PATIENCE).unwrap();
    assert_eq!(stored.kind, SchemaKind::Protobuf);

    let schemas = ProtoSchemas::new(ProtoSource::Registry {
        registry: registry.clone(),
        subject: subject.clone(),
    })
    .unwrap();
    let compiled = schemas.latest(PATIENCE).unwrap();
    assert_eq!(compiled.id, Some(id));
    let payment = compiled.message(Some("shop.Payment")).unwrap();
    let cols = columns(&payment).unwrap();
    assert_eq!(
        cols,
        vec![
            t("id", DataType::String),
            t("at", DataType::Timestamp),
            t(
                "amount",
                row(vec![
                    t("currency", DataType::String),
                    t("cents", DataType::BigInt)
                ])
            ),
        ]
    );
    let m = dynamic(
        &payment,
        vec![
            ("id", Pv::String("p1".into())),
            (
                "at",
                sub(
                    &payment,
                    "at",
                    vec![
                        ("seconds", Pv::I64(1_700_000_000)),
                        ("nanos", Pv::I32(5_000_000)),
                    ],
                ),
            ),
            (
                "amount",
                sub(
                    &payment,
                    "amount",
                    vec![
                        ("currency", Pv::String("EUR".into())),
                        ("cents", Pv::I64(1999)),
                    ],
                ),
            ),
        ],
    );
    let source = ProtoSource::Registry {
        registry: registry.clone(),
        subject,
    };
    let d = ProtobufDecoder::new(source, Some("shop.Payment"), &cols, true).unwrap();
    d.check_latest(PATIENCE).unwrap();
    assert_eq!(
        decode(&d, &framed(id, &[1], &m.encode_to_vec())).unwrap(),
        vec![
            s("p1"),
            Value::Timestamp(1_700_000_000_005),
            Value::Struct(vec![s("EUR"), Value::Int(1999)]),
        ]
    );
    let e = bad(decode(&d, &framed(id, &[0], &[])).unwrap_err());
    assert!(
        e.contains(&format!(
            "shop.Header where the source reads shop.Payment (schema id {id})"
        )),
        "{e}"
    );
    for _ in 0..2 {
        // The second answer comes from the decoder's cache.
        let e = bad(decode(&d, &framed(999_999_999, &[0], &[])).unwrap_err());
        assert!(e.contains("schema id 999999999"), "{e}");
    }
}

#[test]
#[ignore = "needs a schema registry at WEIR_TEST_REGISTRY or 127.0.0.1:8081"]
fn a_registry_schema_stored_as_a_base64_descriptor_decodes() {
    // What Apicurio serves for a schema a Java serializer registered.
    use base64::Engine;
    let (_dir, path) = shop();
    let shop = compile_file(&path).unwrap();
    let encoded = base64::engine::general_purpose::STANDARD
        .encode(shop.file.file_descriptor_proto().encode_to_vec());
    let registry = registry();
    let subject = unique("orders-b64-value");
    let id = registry
        .register(&subject, SchemaKind::Protobuf, &encoded, &[], PATIENCE)
        .unwrap();
    let source = ProtoSource::Registry { registry, subject };
    let o = order_desc(&path);
    let cols = [
        t("id", DataType::BigInt),
        t("created", DataType::Timestamp),
        t("note", DataType::String),
    ];
    let d = ProtobufDecoder::new(source, Some("shop.Order"), &cols, true).unwrap();
    let m = dynamic(
        &o,
        vec![
            ("id", Pv::I64(3)),
            ("created", sub(&o, "created", vec![("seconds", Pv::I64(1))])),
            (
                "note",
                sub(&o, "note", vec![("value", Pv::String("n".into()))]),
            ),
        ],
    );
    assert_eq!(
        decode(&d, &framed(id, &[2], &m.encode_to_vec())).unwrap(),
        vec![Value::Int(3), Value::Timestamp(1000), s("n")]
    );
}

#[test]
#[ignore = "needs a schema registry at WEIR_TEST_REGISTRY or 127.0.0.1:8081"]
fn a_sink_schema_registers_without_references_and_reads_back() {
    let registry = registry();
    let columns = sink_columns();
    let subject = unique("totals-value");
    let enc = ProtobufEncoder::new(&columns, "weir.sink.Totals").unwrap();
    let id = registry
        .register(
            &subject,
            SchemaKind::Protobuf,
            enc.schema_text(),
            &[],
            PATIENCE,
        )
        .unwrap();
    let enc = enc.with_schema_id(id);
    let values = sink_values();
    let refs: Vec<&Value> = values.iter().collect();
    let mut bytes = Vec::new();
    enc.encode(&refs, &mut bytes).unwrap();
    let mut back = columns.clone();
    for (c, n) in back.iter_mut().zip(enc.field_names()) {
        c.name = n.to_string();
    }
    let source = ProtoSource::Registry { registry, subject };
    let d = ProtobufDecoder::new(source, Some("weir.sink.Totals"), &back, true).unwrap();
    assert_eq!(decode(&d, &bytes).unwrap(), values);
}
