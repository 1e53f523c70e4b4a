//! Reading: scalars, plans (a writer message against the table's columns,
//! built once per schema id), the wire format walked against a plan, and
//! the decoder.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use prost::encoding::{
    check_wire_type, decode_key, decode_varint, skip_field, DecodeContext, WireType,
};
use prost_reflect::{FieldDescriptor, Kind, MessageDescriptor};

use super::{
    field_type, join, message_indexes, CompiledSchema, ProtoSchemas, ProtoSource, WellKnown,
};
use crate::dataflow::row::{DataType, Decimal, Field, RowKind, Value};
use crate::format::confluent;
use crate::format::registry::Patience;
use crate::format::{BytesDecoder, DecodeError, Decoded};

// ---------------------------------------------------------------------------
// Scalars: how each protobuf scalar is read, and what it can become.
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Scalar {
    Bool,
    Int32,
    Sint32,
    Sfixed32,
    Uint32,
    Fixed32,
    Int64,
    Sint64,
    Sfixed64,
    Uint64,
    Fixed64,
    Float,
    Double,
    String,
    Bytes,
    Enum,
}

/// A scalar as read from the wire, before it becomes a column's value.
#[derive(Debug, Clone, Copy)]
pub(super) enum Raw<'a> {
    Bool(bool),
    Int(i64),
    Uint(u64),
    Float(f64),
    Text(&'a [u8]),
    Bytes(&'a [u8]),
    Enum(i32),
}

impl Scalar {
    pub(super) fn of(kind: &Kind) -> Option<Self> {
        Some(match kind {
            Kind::Bool => Scalar::Bool,
            Kind::Int32 => Scalar::Int32,
            Kind::Sint32 => Scalar::Sint32,
            Kind::Sfixed32 => Scalar::Sfixed32,
            Kind::Uint32 => Scalar::Uint32,
            Kind::Fixed32 => Scalar::Fixed32,
            Kind::Int64 => Scalar::Int64,
            Kind::Sint64 => Scalar::Sint64,
            Kind::Sfixed64 => Scalar::Sfixed64,
            Kind::Uint64 => Scalar::Uint64,
            Kind::Fixed64 => Scalar::Fixed64,
            Kind::Float => Scalar::Float,
            Kind::Double => Scalar::Double,
            Kind::String => Scalar::String,
            Kind::Bytes => Scalar::Bytes,
            Kind::Enum(_) => Scalar::Enum,
            Kind::Message(_) => return None,
        })
    }

    /// The column type [`columns`] gives it: INT only where every value fits.
    pub(super) fn natural_type(self) -> DataType {
        match self {
            Scalar::Bool => DataType::Boolean,
            Scalar::Int32 | Scalar::Sint32 | Scalar::Sfixed32 => DataType::Int,
            Scalar::Uint32
            | Scalar::Fixed32
            | Scalar::Int64
            | Scalar::Sint64
            | Scalar::Sfixed64
            | Scalar::Uint64
            | Scalar::Fixed64 => DataType::BigInt,
            Scalar::Float | Scalar::Double => DataType::Double,
            Scalar::String | Scalar::Enum => DataType::String,
            Scalar::Bytes => DataType::Bytes,
        }
    }

    fn is_integer(self) -> bool {
        matches!(
            self,
            Scalar::Int32
                | Scalar::Sint32
                | Scalar::Sfixed32
                | Scalar::Uint32
                | Scalar::Fixed32
                | Scalar::Int64
                | Scalar::Sint64
                | Scalar::Sfixed64
                | Scalar::Uint64
                | Scalar::Fixed64
        )
    }

    fn wire_type(self) -> WireType {
        match self {
            Scalar::Fixed32 | Scalar::Sfixed32 | Scalar::Float => WireType::ThirtyTwoBit,
            Scalar::Fixed64 | Scalar::Sfixed64 | Scalar::Double => WireType::SixtyFourBit,
            Scalar::String | Scalar::Bytes => WireType::LengthDelimited,
            _ => WireType::Varint,
        }
    }

    /// Repeated numbers may come packed (one length-delimited run).
    fn packable(self) -> bool {
        self.wire_type() != WireType::LengthDelimited
    }

    fn default_raw(self, enum_default: i32) -> Raw<'static> {
        match self {
            Scalar::Bool => Raw::Bool(false),
            Scalar::Uint32 | Scalar::Fixed32 | Scalar::Uint64 | Scalar::Fixed64 => Raw::Uint(0),
            Scalar::Float | Scalar::Double => Raw::Float(0.0),
            Scalar::String => Raw::Text(b""),
            Scalar::Bytes => Raw::Bytes(b""),
            Scalar::Enum => Raw::Enum(enum_default),
            _ => Raw::Int(0),
        }
    }

    /// Reads one value (its wire type already checked).
    fn read<'a>(self, buf: &mut &'a [u8]) -> Result<Raw<'a>, String> {
        let varint = |buf: &mut &'a [u8]| decode_varint(buf).map_err(|e| e.to_string());
        Ok(match self {
            Scalar::Bool => Raw::Bool(varint(buf)? != 0),
            // A negative int32 is sign-extended to ten bytes; the low 32 bits are its value.
            Scalar::Int32 => Raw::Int(i64::from(varint(buf)? as i32)),
            Scalar::Sint32 => {
                let v = varint(buf)? as u32;
                Raw::Int(i64::from(((v >> 1) as i32) ^ -((v & 1) as i32)))
            }
            Scalar::Uint32 => Raw::Uint(u64::from(varint(buf)? as u32)),
            Scalar::Int64 => Raw::Int(varint(buf)? as i64),
            Scalar::Sint64 => {
                let v = varint(buf)?;
                Raw::Int(((v >> 1) as i64) ^ -((v & 1) as i64))
            }
            Scalar::Uint64 => Raw::Uint(varint(buf)?),
            Scalar::Enum => Raw::Enum(varint(buf)? as i32),
            Scalar::Fixed32 => Raw::Uint(u64::from(u32::from_le_bytes(take_array(buf)?))),
            Scalar::Sfixed32 => Raw::Int(i64::from(i32::from_le_bytes(take_array(buf)?))),
            Scalar::Float => Raw::Float(f64::from(f32::from_le_bytes(take_array(buf)?))),
            Scalar::Fixed64 => Raw::Uint(u64::from_le_bytes(take_array(buf)?)),
            Scalar::Sfixed64 => Raw::Int(i64::from_le_bytes(take_array(buf)?)),
            Scalar::Double => Raw::Float(f64::from_le_bytes(take_array(buf)?)),
            Scalar::String => Raw::Text(take_delimited(buf)?),
            Scalar::Bytes => Raw::Bytes(take_delimited(buf)?),
        })
    }
}

pub(super) fn cut_short() -> String {
    "failed to decode Protobuf message: buffer underflow (the payload is cut short)".into()
}

pub(super) fn take_array<const N: usize>(buf: &mut &[u8]) -> Result<[u8; N], String> {
    if buf.len() < N {
        return Err(cut_short());
    }
    let (head, rest) = buf.split_at(N);
    *buf = rest;
    Ok(head.try_into().expect("N bytes"))
}

/// A length-delimited value: its bytes, taken off `buf`.
pub(super) fn take_delimited<'a>(buf: &mut &'a [u8]) -> Result<&'a [u8], String> {
    let len = decode_varint(buf).map_err(|e| e.to_string())?;
    if len > buf.len() as u64 {
        return Err(cut_short());
    }
    let (head, rest) = buf.split_at(len as usize);
    *buf = rest;
    Ok(head)
}

/// What a scalar becomes: the column's type, checked against the scalar
/// once per plan; per value only ranges (and UTF-8) can fail.
#[derive(Debug, Clone)]
pub(super) enum Target {
    Bool,
    /// INT: a value outside i32 is an error.
    Int,
    BigInt,
    Double,
    Decimal {
        precision: u8,
        scale: u8,
    },
    String,
    Bytes,
    /// An enum's value names, by number, sorted (VARCHAR).
    EnumName(Vec<(i32, String)>),
}

impl Target {
    /// How `scalar` becomes a column of type `ty`; None if it cannot.
    pub(super) fn of(scalar: Scalar, kind: &Kind, ty: &DataType) -> Option<Self> {
        Some(match (scalar, ty) {
            (Scalar::Bool, DataType::Boolean) => Target::Bool,
            (Scalar::Enum, DataType::String) => {
                let Kind::Enum(e) = kind else { return None };
                let mut names: Vec<(i32, String)> = e
                    .values()
                    .map(|v| (v.number(), v.name().to_string()))
                    .collect();
                names.sort_by_key(|(n, _)| *n);
                names.dedup_by_key(|(n, _)| *n);
                Target::EnumName(names)
            }
            (Scalar::Enum, DataType::Int | DataType::BigInt) => Target::BigInt,
            (s, DataType::Int) if s.is_integer() => Target::Int,
            (s, DataType::BigInt) if s.is_integer() => Target::BigInt,
            (s, DataType::Double) if s.is_integer() => Target::Double,
            (Scalar::Float | Scalar::Double, DataType::Double) => Target::Double,
            (s, DataType::Decimal { precision, scale })
                if s.is_integer() || s == Scalar::String =>
            {
                Target::Decimal {
                    precision: *precision,
                    scale: *scale,
                }
            }
            (Scalar::String, DataType::String) => Target::String,
            (Scalar::String | Scalar::Bytes, DataType::Bytes) => Target::Bytes,
            _ => return None,
        })
    }

    /// The column's value of a scalar; Err says why it does not fit.
    fn convert(&self, raw: Raw<'_>) -> Result<Value, String> {
        Ok(match (raw, self) {
            (Raw::Bool(b), Target::Bool) => Value::Bool(b),
            (Raw::Int(i), Target::Int) => Value::Int(fit_int(i128::from(i))?),
            (Raw::Uint(u), Target::Int) => Value::Int(fit_int(i128::from(u))?),
            (Raw::Int(i), Target::BigInt) => Value::Int(i),
            (Raw::Enum(n), Target::BigInt) => Value::Int(i64::from(n)),
            (Raw::Uint(u), Target::BigInt) => Value::Int(
                i64::try_from(u)
                    .map_err(|_| format!("value {u} is above BIGINT's maximum {}", i64::MAX))?,
            ),
            (Raw::Int(i), Target::Double) => Value::Double(i as f64),
            (Raw::Uint(u), Target::Double) => Value::Double(u as f64),
            (Raw::Float(f), Target::Double) => Value::Double(f),
            (Raw::Int(i), Target::Decimal { precision, scale }) => {
                Value::Decimal(decimal_of_int(i128::from(i), *precision, *scale)?)
            }
            (Raw::Uint(u), Target::Decimal { precision, scale }) => {
                Value::Decimal(decimal_of_int(i128::from(u), *precision, *scale)?)
            }
            // proto3's absent string: no number, and what a sink writes for NULL.
            (Raw::Text(b""), Target::Decimal { .. }) => Value::Null,
            (Raw::Text(t), Target::Decimal { precision, scale }) => {
                let d = Decimal::parse(utf8(t)?, *scale)?;
                check_precision(d, *precision)?;
                Value::Decimal(d)
            }
            (Raw::Text(t), Target::String) => Value::String(utf8(t)?.to_string()),
            (Raw::Text(b) | Raw::Bytes(b), Target::Bytes) => Value::Bytes(b.to_vec()),
            (Raw::Enum(n), Target::EnumName(names)) => {
                match names.binary_search_by_key(&n, |(k, _)| *k) {
                    Ok(i) => Value::String(names[i].1.clone()),
                    Err(_) => Value::String(n.to_string()),
                }
            }
            (raw, target) => {
                return Err(format!(
                    "internal: a {raw:?} where the plan reads {target:?}"
                ))
            }
        })
    }
}

pub(super) fn fit_int(v: i128) -> Result<i64, String> {
    i32::try_from(v)
        .map(i64::from)
        .map_err(|_| format!("value {v} does not fit INT (32 bits)"))
}

pub(super) fn utf8(bytes: &[u8]) -> Result<&str, String> {
    std::str::from_utf8(bytes).map_err(|e| format!("a string that is not valid UTF-8: {e}"))
}

pub(super) fn decimal_of_int(v: i128, precision: u8, scale: u8) -> Result<Decimal, String> {
    let unscaled = 10i128
        .checked_pow(u32::from(scale))
        .and_then(|p| v.checked_mul(p))
        .ok_or_else(|| format!("value {v} does not fit DECIMAL({precision}, {scale})"))?;
    let d = Decimal { unscaled, scale };
    check_precision(d, precision)?;
    Ok(d)
}

pub(super) fn check_precision(d: Decimal, precision: u8) -> Result<(), String> {
    let limit = 10u128
        .checked_pow(u32::from(precision))
        .unwrap_or(u128::MAX);
    if { d.unscaled }.unsigned_abs() >= limit {
        return Err(format!(
            "value {d} does not fit DECIMAL({precision}, {})",
            { d.scale }
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Plans: a writer message against the table's columns, built once per id.
// ---------------------------------------------------------------------------

/// How one message's fields fill a ROW's values (the table's columns at
/// the top).
#[derive(Debug)]
pub(super) struct MessagePlan {
    /// By field number, for a binary search per field on the wire.
    fields: Vec<FieldPlan>,
    /// Each value before any field is read: NULL, a proto3 default, or [].
    defaults: Vec<Value>,
}

impl MessagePlan {
    fn field(&self, number: u32) -> Option<&FieldPlan> {
        self.fields
            .binary_search_by_key(&number, |f| f.number)
            .ok()
            .map(|i| &self.fields[i])
    }
}

#[derive(Debug)]
pub(super) struct FieldPlan {
    number: u32,
    slot: usize,
    /// The field's path from the top message, for errors.
    path: String,
    repeated: bool,
    reader: Reader,
    /// Slots of the other members of its oneof: the last member set wins.
    clears: Vec<usize>,
}

#[derive(Debug)]
pub(super) enum Reader {
    /// A oneof member that no column reads: skipped, but it clears the
    /// columns of the members before it.
    Skip,
    Scalar {
        scalar: Scalar,
        target: Target,
    },
    Message(Box<MessagePlan>),
    Timestamp,
    Duration,
    Wrapper {
        scalar: Scalar,
        target: Target,
        /// A wrapper present without its field 1 holds the default.
        default: Value,
    },
}

/// Plans `desc` against `columns` by name (ASCII case-insensitive, an
/// exact match first). Err names the field (by its path) and why.
pub(super) fn plan_message(
    desc: &MessageDescriptor,
    columns: &[Field],
    path: &str,
) -> Result<MessagePlan, String> {
    let writer: Vec<FieldDescriptor> = desc.fields().collect();
    let mut fields = Vec::new();
    let mut defaults = Vec::with_capacity(columns.len());
    let mut slot_of: HashMap<u32, usize> = HashMap::new();
    for (slot, column) in columns.iter().enumerate() {
        let Some(f) = find_field(&writer, &column.name) else {
            defaults.push(Value::Null);
            continue;
        };
        let fpath = join(path, f.name());
        if let Some(other) = slot_of.insert(f.number(), slot) {
            return Err(format!(
                "columns {:?} and {:?} both read field `{fpath}`",
                columns[other].name, column.name
            ));
        }
        let (reader, default) = plan_field(&f, &column.data_type, &fpath)?;
        defaults.push(default);
        fields.push(FieldPlan {
            number: f.number(),
            slot,
            path: fpath,
            repeated: f.is_list() || f.is_map(),
            reader,
            clears: Vec::new(),
        });
    }
    add_oneof_clears(&writer, &slot_of, path, &mut fields);
    fields.sort_by_key(|f| f.number);
    Ok(MessagePlan { fields, defaults })
}

pub(super) fn find_field(writer: &[FieldDescriptor], name: &str) -> Option<FieldDescriptor> {
    writer
        .iter()
        .find(|f| f.name() == name)
        .or_else(|| writer.iter().find(|f| f.name().eq_ignore_ascii_case(name)))
        .cloned()
}

/// Gives each member of a (real) oneof the slots of its read siblings to
/// clear, adding a [`Reader::Skip`] plan for members no column reads.
pub(super) fn add_oneof_clears(
    writer: &[FieldDescriptor],
    slot_of: &HashMap<u32, usize>,
    path: &str,
    fields: &mut Vec<FieldPlan>,
) {
    for f in writer {
        let Some(oneof) = f.containing_oneof().filter(|o| !o.is_synthetic()) else {
            continue;
        };
        let clears: Vec<usize> = oneof
            .fields()
            .filter(|s| s.number() != f.number())
            .filter_map(|s| slot_of.get(&s.number()).copied())
            .collect();
        if clears.is_empty() {
            continue;
        }
        match fields.iter_mut().find(|p| p.number == f.number()) {
            Some(p) => p.clears = clears,
            None => fields.push(FieldPlan {
                number: f.number(),
                slot: usize::MAX,
                path: join(path, f.name()),
                repeated: false,
                reader: Reader::Skip,
                clears,
            }),
        }
    }
}

/// A field's reader and its value when absent.
pub(super) fn plan_field(
    f: &FieldDescriptor,
    ty: &DataType,
    path: &str,
) -> Result<(Reader, Value), String> {
    if f.is_list() || f.is_map() {
        let DataType::List(element) = ty else {
            return Err(mismatch(f, ty, path));
        };
        let (reader, _) = plan_value(f, element, path)?;
        return Ok((reader, Value::List(Vec::new())));
    }
    let (reader, default) = plan_value(f, ty, path)?;
    let default = if f.supports_presence() {
        Value::Null
    } else {
        default
    };
    Ok((reader, default))
}

/// The reader of one value of `f` (an element, if repeated) as `ty`, and
/// its default without presence.
pub(super) fn plan_value(
    f: &FieldDescriptor,
    ty: &DataType,
    path: &str,
) -> Result<(Reader, Value), String> {
    let kind = f.kind();
    if let Kind::Message(m) = &kind {
        if let DataType::Struct(columns) = ty {
            let plan = plan_message(m, columns, path)?;
            return Ok((Reader::Message(Box::new(plan)), Value::Null));
        }
        let reader = match (WellKnown::of(m), ty) {
            (Some(WellKnown::Timestamp), DataType::Timestamp | DataType::TimestampLtz) => {
                Reader::Timestamp
            }
            (Some(WellKnown::Duration), DataType::BigInt) => Reader::Duration,
            (Some(WellKnown::Wrapper(scalar)), ty) => {
                let inner = m.get_field(1).expect("a wrapper has field 1").kind();
                let target = Target::of(scalar, &inner, ty).ok_or_else(|| mismatch(f, ty, path))?;
                let default = target.convert(scalar.default_raw(0))?;
                Reader::Wrapper {
                    scalar,
                    target,
                    default,
                }
            }
            _ => return Err(mismatch(f, ty, path)),
        };
        return Ok((reader, Value::Null));
    }
    let scalar = Scalar::of(&kind).expect("a non-message kind is a scalar");
    let target = Target::of(scalar, &kind, ty).ok_or_else(|| mismatch(f, ty, path))?;
    let enum_default = match &kind {
        Kind::Enum(e) => e.default_value().number(),
        _ => 0,
    };
    let default = target
        .convert(scalar.default_raw(enum_default))
        .map_err(|e| format!("field `{path}`: its default {e}"))?;
    Ok((Reader::Scalar { scalar, target }, default))
}

/// Why field `f` cannot fill a column of type `ty`, with the column type
/// it would fit.
pub(super) fn mismatch(f: &FieldDescriptor, ty: &DataType, path: &str) -> String {
    let proto = proto_type_name(f);
    match field_type(f, path, &mut Vec::new()) {
        Ok(natural) => format!(
            "field `{path}` ({proto}) cannot become a column of type {ty}; it reads as {natural}"
        ),
        Err(_) => format!("field `{path}` ({proto}) cannot become a column of type {ty}"),
    }
}

pub(super) fn proto_type_name(f: &FieldDescriptor) -> String {
    let one = |k: &Kind| match k {
        Kind::Message(m) => m.full_name().to_string(),
        Kind::Enum(e) => e.full_name().to_string(),
        k => format!("{k:?}").to_lowercase(),
    };
    match f.kind() {
        Kind::Message(entry) if f.is_map() => format!(
            "map<{}, {}>",
            one(&entry.map_entry_key_field().kind()),
            one(&entry.map_entry_value_field().kind())
        ),
        k if f.is_list() => format!("repeated {}", one(&k)),
        k => one(&k),
    }
}

// ---------------------------------------------------------------------------
// Decoding: the wire format walked against a plan.
// ---------------------------------------------------------------------------

/// Reads the fields of one message into `slots` (which hold the plan's
/// defaults, or a previous occurrence's values: protobuf merges repeated
/// occurrences of a message). `group` is the field number of a proto2
/// group, which ends with its end-group key rather than its length.
pub(super) fn decode_message(
    plan: &MessagePlan,
    buf: &mut &[u8],
    slots: &mut [Value],
    group: Option<u32>,
) -> Result<(), String> {
    walk(
        buf,
        group,
        &mut |number, wire, buf| match plan.field(number) {
            Some(field) => read_field(field, wire, buf, slots),
            None => skip(wire, number, buf),
        },
    )
}

/// What [`walk`] calls per field: its number, its wire type, and the
/// buffer positioned at its value.
pub(super) type FieldVisitor<'a> = dyn FnMut(u32, WireType, &mut &[u8]) -> Result<(), String> + 'a;

/// Calls `each` for every field key of a message body, positioned at the
/// field's value (which `each` must consume).
pub(super) fn walk(
    buf: &mut &[u8],
    group: Option<u32>,
    each: &mut FieldVisitor<'_>,
) -> Result<(), String> {
    loop {
        if buf.is_empty() {
            return match group {
                None => Ok(()),
                Some(_) => Err(cut_short()),
            };
        }
        let (number, wire) = decode_key(buf).map_err(|e| e.to_string())?;
        if wire == WireType::EndGroup {
            return match group {
                Some(g) if g == number => Ok(()),
                _ => Err("failed to decode Protobuf message: unexpected end group tag".into()),
            };
        }
        each(number, wire, buf)?;
    }
}

/// Walks an embedded message: length-delimited, or a group.
pub(super) fn walk_embedded(
    wire: WireType,
    number: u32,
    buf: &mut &[u8],
    each: &mut FieldVisitor<'_>,
) -> Result<(), String> {
    match wire {
        WireType::LengthDelimited => walk(&mut take_delimited(buf)?, None, each),
        WireType::StartGroup => walk(buf, Some(number), each),
        other => Err(format!(
            "failed to decode Protobuf message: invalid wire type: {other:?} (expected LengthDelimited)"
        )),
    }
}

pub(super) fn skip(wire: WireType, number: u32, buf: &mut &[u8]) -> Result<(), String> {
    skip_field(wire, number, buf, DecodeContext::default()).map_err(|e| e.to_string())
}

pub(super) fn read_field(
    field: &FieldPlan,
    wire: WireType,
    buf: &mut &[u8],
    slots: &mut [Value],
) -> Result<(), String> {
    let mut read = || -> Result<(), String> {
        if let Reader::Skip = field.reader {
            return skip(wire, field.number, buf);
        }
        let slot = &mut slots[field.slot];
        if !field.repeated {
            return read_one(&field.reader, wire, field.number, buf, slot);
        }
        if !matches!(slot, Value::List(_)) {
            *slot = Value::List(Vec::new());
        }
        let Value::List(items) = slot else {
            unreachable!("made a list above")
        };
        match &field.reader {
            Reader::Scalar { scalar, target }
                if scalar.packable() && wire == WireType::LengthDelimited =>
            {
                let mut run = take_delimited(buf)?;
                while !run.is_empty() {
                    items.push(target.convert(scalar.read(&mut run)?)?);
                }
                Ok(())
            }
            reader => {
                items.push(Value::Null);
                let last = items.last_mut().expect("pushed");
                read_one(reader, wire, field.number, buf, last)
            }
        }
    };
    read().map_err(|e| prefix_path(&field.path, e))?;
    for &c in &field.clears {
        slots[c] = Value::Null;
    }
    Ok(())
}

/// Names the outermost field in an error (an inner one has named itself).
pub(super) fn prefix_path(path: &str, e: String) -> String {
    if e.starts_with("field `") {
        e
    } else {
        format!("field `{path}`: {e}")
    }
}

/// Reads one value into `slot`, merging into an embedded message already
/// there.
pub(super) fn read_one(
    reader: &Reader,
    wire: WireType,
    number: u32,
    buf: &mut &[u8],
    slot: &mut Value,
) -> Result<(), String> {
    match reader {
        Reader::Skip => skip(wire, number, buf),
        Reader::Scalar { scalar, target } => {
            check_wire_type(scalar.wire_type(), wire).map_err(|e| e.to_string())?;
            *slot = target.convert(scalar.read(buf)?)?;
            Ok(())
        }
        Reader::Message(plan) => {
            if !matches!(slot, Value::Struct(_)) {
                *slot = Value::Struct(plan.defaults.clone());
            }
            let Value::Struct(inner) = slot else {
                unreachable!("made a struct above")
            };
            match wire {
                WireType::LengthDelimited => decode_message(plan, &mut take_delimited(buf)?, inner, None),
                WireType::StartGroup => decode_message(plan, buf, inner, Some(number)),
                other => Err(format!(
                    "failed to decode Protobuf message: invalid wire type: {other:?} (expected LengthDelimited)"
                )),
            }
        }
        Reader::Timestamp => read_timestamp(wire, number, buf, slot),
        Reader::Duration => read_duration(wire, number, buf, slot),
        Reader::Wrapper {
            scalar,
            target,
            default,
        } => {
            let mut value = None;
            walk_embedded(wire, number, buf, &mut |n, w, buf| {
                if n != 1 {
                    return skip(w, n, buf);
                }
                check_wire_type(scalar.wire_type(), w).map_err(|e| e.to_string())?;
                value = Some(target.convert(scalar.read(buf)?)?);
                Ok(())
            })?;
            match value {
                Some(v) => *slot = v,
                None if slot.is_null() => *slot = default.clone(),
                None => {}
            }
            Ok(())
        }
    }
}

/// Reads `seconds` (field 1, int64) and `nanos` (field 2, int32) of a
/// Timestamp or Duration into `s` and `n`, which hold the previous
/// occurrence's (a merge keeps what the new one does not set).
pub(super) fn read_seconds_nanos(
    wire: WireType,
    number: u32,
    buf: &mut &[u8],
    s: &mut i64,
    n: &mut i64,
) -> Result<(), String> {
    walk_embedded(wire, number, buf, &mut |f, w, buf| match f {
        1 | 2 => {
            check_wire_type(WireType::Varint, w).map_err(|e| e.to_string())?;
            let v = decode_varint(buf).map_err(|e| e.to_string())?;
            if f == 1 {
                *s = v as i64;
            } else {
                *n = i64::from(v as i32);
            }
            Ok(())
        }
        _ => skip(w, f, buf),
    })
}

/// A Timestamp as milliseconds, nanos truncated toward negative infinity
/// (so that a merge from milliseconds keeps the truncated value exact).
pub(super) fn read_timestamp(
    wire: WireType,
    number: u32,
    buf: &mut &[u8],
    slot: &mut Value,
) -> Result<(), String> {
    let (mut s, mut n) = match slot {
        Value::Timestamp(ms) => (ms.div_euclid(1000), ms.rem_euclid(1000) * 1_000_000),
        _ => (0, 0),
    };
    read_seconds_nanos(wire, number, buf, &mut s, &mut n)?;
    let ms = s
        .checked_mul(1000)
        .and_then(|ms| ms.checked_add(n.div_euclid(1_000_000)))
        .ok_or_else(|| format!("timestamp {s} s {n} ns is out of TIMESTAMP(3)'s range"))?;
    *slot = Value::Timestamp(ms);
    Ok(())
}

/// A Duration as milliseconds, truncated toward zero (seconds and nanos
/// have one sign).
pub(super) fn read_duration(
    wire: WireType,
    number: u32,
    buf: &mut &[u8],
    slot: &mut Value,
) -> Result<(), String> {
    let (mut s, mut n) = match slot {
        Value::Int(ms) => (*ms / 1000, (*ms % 1000) * 1_000_000),
        _ => (0, 0),
    };
    read_seconds_nanos(wire, number, buf, &mut s, &mut n)?;
    let ms = s
        .checked_mul(1000)
        .and_then(|ms| ms.checked_add(n / 1_000_000))
        .ok_or_else(|| format!("duration {s} s {n} ns is out of BIGINT milliseconds' range"))?;
    *slot = Value::Int(ms);
    Ok(())
}

// ---------------------------------------------------------------------------
// The decoder.
// ---------------------------------------------------------------------------

/// The plan of one writer schema: its message, where that message is in
/// the file (the message indexes its records must carry), and the plan.
#[derive(Debug)]
pub(super) struct WriterPlan {
    schema: Arc<CompiledSchema>,
    message: MessageDescriptor,
    indexes: Vec<usize>,
    root: MessagePlan,
}

/// Decodes Protobuf records into a table's columns.
#[derive(Debug)]
pub struct ProtobufDecoder {
    schemas: ProtoSchemas,
    message: Option<String>,
    columns: Vec<Field>,
    framed: bool,
    /// A registry's plans, by schema id; a schema id that cannot be read
    /// (unknown to the registry, not compiling, not fitting the columns)
    /// keeps its error, so that its records do not each ask again.
    plans: RwLock<HashMap<u32, Result<Arc<WriterPlan>, String>>>,
    /// A file's plan, for every record.
    fixed: Option<Arc<WriterPlan>>,
}

impl ProtobufDecoder {
    /// A decoder of `message` (a full name like `shop.Order`; None is the
    /// first message of the writer's file) into `columns`. `framed`: the
    /// records carry a registry's framing (magic byte, schema id, message
    /// indexes), which a registry source needs; a file source may read
    /// either. A file source is compiled and planned here, so that its
    /// errors are the configuration's.
    pub fn new(
        source: ProtoSource,
        message: Option<&str>,
        columns: &[Field],
        framed: bool,
    ) -> Result<Self, String> {
        if let (ProtoSource::Registry { subject, .. }, false) = (&source, framed) {
            return Err(format!(
                "a Protobuf source on registry subject {subject:?} reads records framed by the \
                 registry's serializers (magic byte, schema id, message indexes)"
            ));
        }
        let schemas = ProtoSchemas::new(source)?;
        let mut decoder = Self {
            schemas,
            message: message.map(str::to_string),
            columns: columns.to_vec(),
            framed,
            plans: RwLock::new(HashMap::new()),
            fixed: None,
        };
        if let ProtoSource::File(_) = decoder.schemas.source() {
            let schema = decoder
                .schemas
                .latest(Patience::Forever)
                .map_err(|e| e.message().to_string())?;
            decoder.fixed = Some(Arc::new(decoder.plan(schema)?));
        }
        Ok(decoder)
    }

    /// Fetches the subject's latest schema and plans it, so that `weir
    /// validate` sees a column the writer cannot fill before any record.
    pub fn check_latest(&self, patience: Patience) -> Result<(), DecodeError> {
        if self.fixed.is_some() {
            return Ok(());
        }
        let schema = self.schemas.latest(patience)?;
        let id = schema.id.expect("a registry schema has an id");
        let plan = Arc::new(self.plan(schema)?);
        self.plans
            .write()
            .expect("protobuf plans")
            .insert(id, Ok(plan));
        Ok(())
    }

    fn plan(&self, schema: Arc<CompiledSchema>) -> Result<WriterPlan, String> {
        let message = schema.message(self.message.as_deref())?;
        let context = || format!("{}, message {}", schema.what, message.full_name());
        if self.framed && message.parent_file().name() != schema.file.name() {
            return Err(format!(
                "{}: the message is imported from {}, and framed records can only name \
                 messages of the schema's own file",
                context(),
                message.parent_file().name()
            ));
        }
        let root =
            plan_message(&message, &self.columns, "").map_err(|e| format!("{}: {e}", context()))?;
        Ok(WriterPlan {
            indexes: message_indexes(&message),
            schema,
            message,
            root,
        })
    }

    /// The plan of schema `id`: cached, else compiled and planned once.
    fn plan_for(&self, id: u32) -> Result<Arc<WriterPlan>, DecodeError> {
        if let Some(plan) = self.plans.read().expect("protobuf plans").get(&id) {
            return plan.clone().map_err(DecodeError::Bad);
        }
        let planned = self
            .schemas
            .by_id(id, Patience::Forever)
            .and_then(|schema| Ok(Arc::new(self.plan(schema)?)));
        let planned = match planned {
            // The registry could not be reached: the next record asks again.
            Err(e @ DecodeError::Unavailable(_)) => return Err(e),
            Err(DecodeError::Bad(m)) => Err(m),
            Ok(plan) => Ok(plan),
        };
        self.plans
            .write()
            .expect("protobuf plans")
            .entry(id)
            .or_insert(planned)
            .clone()
            .map_err(DecodeError::Bad)
    }

    /// Reads the message indexes off a framed payload: they must name the
    /// message this source reads.
    fn check_indexes(plan: &WriterPlan, id: u32, rest: &mut &[u8]) -> Result<(), DecodeError> {
        // `[0]` is one 0 byte: the common case, without an allocation.
        if rest.first() == Some(&0) && plan.indexes == [0] {
            *rest = &rest[1..];
            return Ok(());
        }
        let indexes = confluent::read_message_indexes(rest)
            .map_err(|e| DecodeError::bad(format!("schema id {id}: the message indexes: {e}")))?;
        if indexes == plan.indexes {
            return Ok(());
        }
        let found = match plan.schema.message_at(&indexes) {
            Some(m) => format!("a Protobuf message of type {}", m.full_name()),
            None => format!("message indexes {indexes:?}, which name no message of its file,"),
        };
        Err(DecodeError::bad(format!(
            "the record holds {found} where the source reads {} (schema id {id}{})",
            plan.message.full_name(),
            match plan.schema.id {
                Some(_) => String::new(),
                None => format!(", read with {}", plan.schema.what),
            }
        )))
    }
}

impl BytesDecoder for ProtobufDecoder {
    fn decode(&self, bytes: &[u8], out: &mut Vec<Value>) -> Result<Decoded, DecodeError> {
        let (plan, mut payload) = if self.framed {
            let framed = confluent::unframe(bytes)?;
            let plan = match &self.fixed {
                Some(p) => p.clone(),
                None => self.plan_for(framed.schema_id)?,
            };
            let mut rest = framed.payload;
            Self::check_indexes(&plan, framed.schema_id, &mut rest)?;
            (plan, rest)
        } else {
            let plan = self.fixed.clone().expect("an unframed source has a file");
            (plan, bytes)
        };
        let start = out.len();
        out.extend_from_slice(&plan.root.defaults);
        decode_message(&plan.root, &mut payload, &mut out[start..], None).map_err(|e| {
            DecodeError::bad(format!(
                "{}, message {}: {e}",
                plan.schema.what,
                plan.message.full_name()
            ))
        })?;
        Ok(Decoded::Row(RowKind::Insert))
    }
}
