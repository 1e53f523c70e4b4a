//! Writing: rows as a generated proto3 message.

use std::collections::HashSet;

use prost::encoding::{encode_key, encode_varint, WireType};

use super::join;
use crate::dataflow::row::{DataType, Field, Value};
use crate::format::confluent;
use crate::format::BytesEncoder;

// ---------------------------------------------------------------------------
// The encoder: rows as a generated proto3 message.
// ---------------------------------------------------------------------------

/// Encodes a sink's rows as one proto3 message generated from its columns.
///
/// Every scalar is `optional`, so that NULL is an absent field and a
/// present zero is kept. Registries resolve the well-known import
/// `google/protobuf/timestamp.proto` themselves (Apicurio 2.4 and
/// Confluent): the text is registered without references.
#[derive(Debug, Clone)]
pub struct ProtobufEncoder {
    text: String,
    full_name: String,
    fields: Vec<EncField>,
    schema_id: Option<u32>,
}

#[derive(Debug, Clone)]
pub(super) struct EncField {
    number: u32,
    /// The proto field name (the column's, made a valid identifier).
    name: String,
    /// The column's path, for errors.
    column: String,
    repeated: bool,
    kind: EncKind,
}

#[derive(Debug, Clone)]
pub(super) enum EncKind {
    Bool,
    Int32,
    Int64,
    Double,
    /// DECIMAL as a string of its exact digits.
    Decimal,
    String,
    Bytes,
    Timestamp,
    /// A ROW: a nested message type of this name.
    Message(String, Vec<EncField>),
}

impl EncKind {
    fn proto_type(&self) -> &str {
        match self {
            EncKind::Bool => "bool",
            EncKind::Int32 => "int32",
            EncKind::Int64 => "int64",
            EncKind::Double => "double",
            EncKind::Decimal | EncKind::String => "string",
            EncKind::Bytes => "bytes",
            EncKind::Timestamp => "google.protobuf.Timestamp",
            EncKind::Message(name, _) => name,
        }
    }

    fn packable(&self) -> bool {
        matches!(
            self,
            EncKind::Bool | EncKind::Int32 | EncKind::Int64 | EncKind::Double
        )
    }
}

impl ProtobufEncoder {
    /// An encoder of `columns` as message `message`: `weir.sink.Totals` is
    /// message `Totals` in package `weir.sink`; a name without a package
    /// goes in package `weir`. Err names a column Protobuf cannot hold.
    pub fn new(columns: &[Field], message: &str) -> Result<Self, String> {
        let (package, name) = match message.rsplit_once('.') {
            Some((p, n)) => (p, n),
            None => ("weir", message),
        };
        let package: Vec<String> = package
            .split('.')
            .filter(|p| !p.is_empty())
            .map(identifier)
            .collect();
        let package = if package.is_empty() {
            "weir".to_string()
        } else {
            package.join(".")
        };
        let name = identifier(name);
        let fields = enc_fields(columns, "", std::slice::from_ref(&name))?;
        let text = schema_text(&package, &name, &fields);
        Ok(Self {
            text,
            full_name: format!("{package}.{name}"),
            fields,
            schema_id: None,
        })
    }

    /// Frames every record for the registry: magic byte, `id` (the one the
    /// registry gave [`Self::schema_text`]) and message index `[0]`.
    /// Without it, records are bare payloads.
    pub fn with_schema_id(mut self, id: u32) -> Self {
        self.schema_id = Some(id);
        self
    }

    /// The generated `.proto` text, to register (schemaType PROTOBUF).
    pub fn schema_text(&self) -> &str {
        &self.text
    }

    /// The message's full name (`weir.sink.Totals`).
    pub fn message_name(&self) -> &str {
        &self.full_name
    }

    /// The proto field name of each column, in column order (a column
    /// name that is not a proto identifier is renamed).
    pub fn field_names(&self) -> Vec<&str> {
        self.fields.iter().map(|f| f.name.as_str()).collect()
    }
}

/// The fields of a message for `columns`, numbered 1..n in order, with
/// names made unique proto identifiers. `outer` are the names of the
/// enclosing message types, which nested types do not reuse.
pub(super) fn enc_fields(
    columns: &[Field],
    path: &str,
    outer: &[String],
) -> Result<Vec<EncField>, String> {
    let mut names = Unique::default();
    let mut types = Unique::default();
    for o in outer {
        types.taken.insert(o.to_ascii_lowercase());
    }
    columns
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let column = join(path, &c.name);
            let name = names.take(identifier(&c.name));
            let (repeated, ty) = match &c.data_type {
                DataType::List(element) => (true, element.as_ref()),
                ty => (false, ty),
            };
            let kind = match ty {
                DataType::List(_) => {
                    return Err(format!(
                        "column `{column}` is {}: Protobuf cannot write an array of arrays",
                        c.data_type
                    ))
                }
                DataType::Time => {
                    return Err(format!(
                        "column `{column}` is TIME: Protobuf's well-known types have no time \
                         of day; write it as text (CAST(t AS VARCHAR))"
                    ))
                }
                DataType::Map(..) => {
                    return Err(format!(
                        "column `{column}` is {}: weir does not write Protobuf maps yet; \
                         write MAP_KEYS and MAP_VALUES as two arrays",
                        c.data_type
                    ))
                }
                DataType::Boolean => EncKind::Bool,
                DataType::Int => EncKind::Int32,
                DataType::BigInt => EncKind::Int64,
                DataType::Double => EncKind::Double,
                DataType::Decimal { .. } => EncKind::Decimal,
                DataType::String => EncKind::String,
                DataType::Bytes => EncKind::Bytes,
                // A DATE as the Timestamp of its midnight (UTC): Protobuf's
                // well-known types have no date.
                DataType::Timestamp | DataType::TimestampLtz | DataType::Date => EncKind::Timestamp,
                DataType::Struct(fields) => {
                    let type_name = types.take(camel(&name));
                    let mut inner_outer = outer.to_vec();
                    inner_outer.push(type_name.clone());
                    EncKind::Message(type_name, enc_fields(fields, &column, &inner_outer)?)
                }
            };
            Ok(EncField {
                number: i as u32 + 1,
                name,
                column,
                repeated,
                kind,
            })
        })
        .collect()
}

/// Names made unique within a message. protoc refuses two fields whose
/// JSON names (underscores dropped) clash, so the check ignores case and
/// underscores.
#[derive(Default)]
pub(super) struct Unique {
    taken: HashSet<String>,
}

impl Unique {
    fn take(&mut self, name: String) -> String {
        let key = |n: &str| n.replace('_', "").to_ascii_lowercase();
        let mut candidate = name.clone();
        let mut i = 2;
        while !self.taken.insert(key(&candidate)) {
            candidate = format!("{name}_{i}");
            i += 1;
        }
        candidate
    }
}

/// A valid proto identifier: letters, digits and `_`, not starting with a
/// digit (other characters become `_`).
pub(super) fn identifier(name: &str) -> String {
    let mut id = crate::format::identifier_chars(name);
    if !id.starts_with(|c: char| c.is_ascii_alphabetic()) {
        id.insert_str(0, "f_");
    }
    id
}

/// `line_items` → `LineItems`, for a ROW column's message type.
pub(super) fn camel(name: &str) -> String {
    let mut out = String::new();
    for part in name.split('_').filter(|p| !p.is_empty()) {
        let mut chars = part.chars();
        if let Some(first) = chars.next() {
            out.push(first.to_ascii_uppercase());
            out.extend(chars);
        }
    }
    if !out.starts_with(|c: char| c.is_ascii_alphabetic()) {
        out.insert_str(0, "Row");
    }
    out
}

pub(super) fn schema_text(package: &str, name: &str, fields: &[EncField]) -> String {
    let mut text = format!("syntax = \"proto3\";\n\npackage {package};\n\n");
    if uses_timestamp(fields) {
        text.push_str("import \"google/protobuf/timestamp.proto\";\n\n");
    }
    message_text(name, fields, 0, &mut text);
    // A package with a `google` part would capture `google.protobuf...`:
    // the well-known name is then written fully qualified.
    if package.split('.').any(|p| p == "google") {
        text = text.replace(
            " google.protobuf.Timestamp ",
            " .google.protobuf.Timestamp ",
        );
    }
    text
}

pub(super) fn uses_timestamp(fields: &[EncField]) -> bool {
    fields.iter().any(|f| match &f.kind {
        EncKind::Timestamp => true,
        EncKind::Message(_, inner) => uses_timestamp(inner),
        _ => false,
    })
}

pub(super) fn message_text(name: &str, fields: &[EncField], depth: usize, out: &mut String) {
    let pad = "  ".repeat(depth);
    out.push_str(&format!("{pad}message {name} {{\n"));
    for f in fields {
        if let EncKind::Message(type_name, inner) = &f.kind {
            message_text(type_name, inner, depth + 1, out);
        }
    }
    for f in fields {
        let label = match (&f.kind, f.repeated) {
            (_, true) => "repeated ",
            (EncKind::Message(..) | EncKind::Timestamp, false) => "",
            (_, false) => "optional ",
        };
        out.push_str(&format!(
            "{pad}  {label}{} {} = {};\n",
            f.kind.proto_type(),
            f.name,
            f.number
        ));
    }
    out.push_str(&format!("{pad}}}\n"));
}

impl ProtobufEncoder {
    /// Encodes framed with `schema_id` (a sink's, registered when it
    /// writes its first record).
    pub fn encode_framed(
        &self,
        schema_id: u32,
        values: &[&Value],
        out: &mut Vec<u8>,
    ) -> Result<(), String> {
        out.clear();
        confluent::frame(schema_id, out);
        confluent::write_message_indexes(&[0], out);
        self.encode_payload(values, out)
    }
}

impl BytesEncoder for ProtobufEncoder {
    fn encode(&self, values: &[&Value], out: &mut Vec<u8>) -> Result<(), String> {
        out.clear();
        if let Some(id) = self.schema_id {
            return self.encode_framed(id, values, out);
        }
        self.encode_payload(values, out)
    }
}

impl ProtobufEncoder {
    fn encode_payload(&self, values: &[&Value], out: &mut Vec<u8>) -> Result<(), String> {
        if values.len() != self.fields.len() {
            return Err(format!(
                "{} values for the {} columns of Protobuf message {}",
                values.len(),
                self.fields.len(),
                self.full_name
            ));
        }
        for (f, v) in self.fields.iter().zip(values) {
            encode_field(f, v, out)?;
        }
        Ok(())
    }
}

pub(super) fn encode_field(f: &EncField, v: &Value, out: &mut Vec<u8>) -> Result<(), String> {
    match (v, f.repeated) {
        (Value::Null, _) => Ok(()),
        (Value::List(items), true) => {
            if items.iter().any(Value::is_null) {
                return Err(format!(
                    "column `{}`: Protobuf cannot write a NULL element of an array",
                    f.column
                ));
            }
            if f.kind.packable() && !items.is_empty() {
                return nested(f.number, out, |out| {
                    items.iter().try_for_each(|item| encode_bare(f, item, out))
                });
            }
            items.iter().try_for_each(|item| encode_one(f, item, out))
        }
        (v, true) => Err(wrong_value(f, v)),
        (v, false) => encode_one(f, v, out),
    }
}

/// One value with its key.
pub(super) fn encode_one(f: &EncField, v: &Value, out: &mut Vec<u8>) -> Result<(), String> {
    let wire = match f.kind {
        EncKind::Bool | EncKind::Int32 | EncKind::Int64 => WireType::Varint,
        EncKind::Double => WireType::SixtyFourBit,
        _ => WireType::LengthDelimited,
    };
    if wire != WireType::LengthDelimited {
        encode_key(f.number, wire, out);
        return encode_bare(f, v, out);
    }
    match (&f.kind, v) {
        (EncKind::String, Value::String(s)) => delimited(f.number, s.as_bytes(), out),
        (EncKind::Bytes, Value::Bytes(b)) => delimited(f.number, b, out),
        (EncKind::Decimal, Value::Decimal(d)) => delimited(f.number, d.to_string().as_bytes(), out),
        (EncKind::Decimal, Value::Int(i)) => delimited(f.number, i.to_string().as_bytes(), out),
        (EncKind::Timestamp, Value::Timestamp(ms)) => nested(f.number, out, |out| {
            let (seconds, nanos) = (ms.div_euclid(1000), ms.rem_euclid(1000) * 1_000_000);
            if seconds != 0 {
                encode_key(1, WireType::Varint, out);
                encode_varint(seconds as u64, out);
            }
            if nanos != 0 {
                encode_key(2, WireType::Varint, out);
                encode_varint(nanos as u64, out);
            }
            Ok(())
        })?,
        (EncKind::Message(_, fields), Value::Struct(values)) if values.len() == fields.len() => {
            nested(f.number, out, |out| {
                fields
                    .iter()
                    .zip(values)
                    .try_for_each(|(inner, v)| encode_field(inner, v, out))
            })?
        }
        (_, v) => return Err(wrong_value(f, v)),
    }
    Ok(())
}

/// A number without its key (alone, or in a packed run).
pub(super) fn encode_bare(f: &EncField, v: &Value, out: &mut Vec<u8>) -> Result<(), String> {
    match (&f.kind, v) {
        (EncKind::Bool, Value::Bool(b)) => encode_varint(u64::from(*b), out),
        (EncKind::Int32, Value::Int(i)) => {
            let i = i32::try_from(*i).map_err(|_| {
                format!(
                    "column `{}`: value {i} does not fit INT (32 bits)",
                    f.column
                )
            })?;
            // Negative int32s are sign-extended to ten bytes, as protobuf says.
            encode_varint(i64::from(i) as u64, out)
        }
        (EncKind::Int64, Value::Int(i)) => encode_varint(*i as u64, out),
        (EncKind::Double, Value::Double(d)) => out.extend_from_slice(&d.to_le_bytes()),
        (EncKind::Double, Value::Int(i)) => out.extend_from_slice(&(*i as f64).to_le_bytes()),
        (_, v) => return Err(wrong_value(f, v)),
    }
    Ok(())
}

pub(super) fn delimited(number: u32, bytes: &[u8], out: &mut Vec<u8>) {
    encode_key(number, WireType::LengthDelimited, out);
    encode_varint(bytes.len() as u64, out);
    out.extend_from_slice(bytes);
}

/// A length-delimited field written in place: its body first, then its
/// length inserted before it (no buffer per nested message).
pub(super) fn nested(
    number: u32,
    out: &mut Vec<u8>,
    body: impl FnOnce(&mut Vec<u8>) -> Result<(), String>,
) -> Result<(), String> {
    encode_key(number, WireType::LengthDelimited, out);
    let start = out.len();
    body(out)?;
    let mut len = [0u8; 10];
    let written = {
        let mut rest = &mut len[..];
        encode_varint((out.len() - start) as u64, &mut rest);
        10 - rest.len()
    };
    out.splice(start..start, len[..written].iter().copied());
    Ok(())
}

pub(super) fn wrong_value(f: &EncField, v: &Value) -> String {
    let what = match v {
        Value::Null => "NULL",
        Value::Bool(_) => "BOOLEAN",
        Value::Int(_) => "integer",
        Value::Double(_) => "DOUBLE",
        Value::Decimal(_) => "DECIMAL",
        Value::String(_) => "VARCHAR",
        Value::Bytes(_) => "BYTES",
        Value::Timestamp(_) => "TIMESTAMP",
        Value::List(_) => "ARRAY",
        Value::Struct(_) => "ROW",
    };
    format!(
        "column `{}`: a {what} value where the Protobuf field is {}{}",
        f.column,
        if f.repeated { "repeated " } else { "" },
        f.kind.proto_type()
    )
}
