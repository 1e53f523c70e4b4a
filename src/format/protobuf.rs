//! Protobuf records: Confluent-framed (magic byte, schema id, message
//! indexes, payload) or bare payloads described by a `.proto` file, read
//! into rows; and rows written as Protobuf for sinks.
//!
//! The writer's schema (from the registry, with the files it references,
//! or a `.proto` file on disk) is compiled at run time with `protox`, once
//! per schema id. A registry serves `.proto` text, or a base64-encoded
//! `FileDescriptorProto` (Apicurio does, for schemas a Java serializer
//! registered): both are read. Imports of the well-known
//! `google/protobuf/*.proto` files need no reference (registries often
//! omit them): protox has them. Against the compiled message, the decoder builds a plan once
//! per schema id: which field number fills which column, and how its wire
//! value becomes the column's type. A record is then decoded by walking the
//! wire format with `prost::encoding` straight into [`Value`]s: no
//! `DynamicMessage`, no field looked up by name per record, and map entries
//! kept in wire order (a `DynamicMessage` keeps them in a hash map).
//!
//! Types (weir has no MAP, DATE or FLOAT yet), as [`columns`] derives them:
//! bool → BOOLEAN; int32, sint32, sfixed32 → INT; uint32, fixed32, the
//! 64-bit integers → BIGINT (a uint64 above `i64::MAX` is a bad record);
//! float, double → DOUBLE; string → VARCHAR; bytes → BYTES; an enum →
//! VARCHAR (its value's name, or the number as text for a number the enum
//! does not know); a message → ROW; `repeated T` → ARRAY<T>; `map<K, V>` →
//! ARRAY<ROW<key K, value V>>; `google.protobuf.Timestamp` → TIMESTAMP(3);
//! `google.protobuf.Duration` → BIGINT milliseconds; the wrappers
//! (`Int64Value`, ...) → their scalar.
//!
//! Absent fields follow protobuf: a proto3 scalar without presence is its
//! default (0, "", false, the enum's first value); a field with presence
//! (messages, `optional`, oneof members, wrappers, proto2 fields) is NULL;
//! a repeated field or map is an empty array.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};

use prost::encoding::{
    check_wire_type, decode_key, decode_varint, encode_key, encode_varint, skip_field,
    DecodeContext, WireType,
};
use prost_reflect::{FieldDescriptor, FileDescriptor, Kind, MessageDescriptor};

use crate::dataflow::row::{DataType, Decimal, Field, RowKind, Value};
use crate::format::confluent;
use crate::format::registry::{Patience, Registry, SchemaKind};
use crate::format::{BytesDecoder, BytesEncoder, DecodeError, Decoded};

// ---------------------------------------------------------------------------
// Where the writer's schema comes from, compiled once.
// ---------------------------------------------------------------------------

/// Where a Protobuf source finds the writer's schema.
#[derive(Debug, Clone)]
pub enum ProtoSource {
    /// The registry, by the schema id of each framed record; `subject`
    /// (`orders-value`) names the latest version, for columns and checks.
    Registry {
        registry: Arc<Registry>,
        subject: String,
    },
    /// A `.proto` file on disk; its directory is the include path.
    File(PathBuf),
}

/// A writer's schema, compiled: its own file (the one whose messages the
/// message indexes count), with everything it imports in its pool.
#[derive(Debug, Clone)]
pub struct CompiledSchema {
    /// The registry's id; None for a file on disk.
    pub id: Option<u32>,
    pub file: FileDescriptor,
    /// How errors name the schema: `schema id 7` or `file orders.proto`.
    pub what: String,
}

impl CompiledSchema {
    /// The message `name` (a full name such as `shop.Order`), or the first
    /// message of the schema's own file; Err lists the file's messages.
    pub fn message(&self, name: Option<&str>) -> Result<MessageDescriptor, String> {
        let found = match name {
            Some(n) => self
                .file
                .parent_pool()
                .get_message_by_name(n.trim_start_matches('.')),
            None => self.file.messages().next(),
        };
        found.ok_or_else(|| {
            let known: Vec<String> = self
                .file
                .messages()
                .map(|m| m.full_name().to_string())
                .collect();
            match name {
                Some(n) => format!(
                    "{} has no message {n:?} (its messages: {})",
                    self.what,
                    if known.is_empty() {
                        "none".into()
                    } else {
                        known.join(", ")
                    }
                ),
                None => format!("{} defines no message", self.what),
            }
        })
    }

    /// The message at Confluent's message indexes in the schema's own
    /// file (`[0]` is its first top-level message, `[1, 0]` the first
    /// message nested in the second).
    pub fn message_at(&self, indexes: &[usize]) -> Option<MessageDescriptor> {
        let (first, rest) = indexes.split_first()?;
        let mut m = self.file.messages().nth(*first)?;
        for i in rest {
            let child = m.child_messages().nth(*i)?;
            m = child;
        }
        Some(m)
    }
}

/// The message indexes of `message` in its file (the inverse of
/// [`CompiledSchema::message_at`]).
pub fn message_indexes(message: &MessageDescriptor) -> Vec<usize> {
    let mut path = Vec::new();
    let mut m = message.clone();
    loop {
        match m.parent_message() {
            Some(parent) => {
                path.push(position(parent.child_messages(), &m));
                m = parent;
            }
            None => {
                path.push(position(m.parent_file().messages(), &m));
                break;
            }
        }
    }
    path.reverse();
    path
}

fn position(mut siblings: impl Iterator<Item = MessageDescriptor>, m: &MessageDescriptor) -> usize {
    siblings
        .position(|s| s.full_name() == m.full_name())
        .expect("a message is among its parent's messages")
}

/// The writer schemas of one source, each compiled once: a registry's by
/// schema id (held under the lock while it compiles, so that two threads
/// do not fetch and compile the same id), a file's at construction.
#[derive(Debug)]
pub struct ProtoSchemas {
    source: ProtoSource,
    file: Option<Arc<CompiledSchema>>,
    by_id: Mutex<HashMap<u32, Arc<CompiledSchema>>>,
}

impl ProtoSchemas {
    /// Compiles a file source now (its errors are configuration errors);
    /// a registry source compiles each schema id when it is first asked.
    pub fn new(source: ProtoSource) -> Result<Self, String> {
        let file = match &source {
            ProtoSource::File(path) => Some(Arc::new(compile_file(path)?)),
            ProtoSource::Registry { .. } => None,
        };
        Ok(Self {
            source,
            file,
            by_id: Mutex::new(HashMap::new()),
        })
    }

    pub fn source(&self) -> &ProtoSource {
        &self.source
    }

    /// The writer schema of a record framed with `id` (a file source's
    /// file, whatever the id).
    pub fn by_id(&self, id: u32, patience: Patience) -> Result<Arc<CompiledSchema>, DecodeError> {
        let registry = match (&self.source, &self.file) {
            (_, Some(file)) => return Ok(file.clone()),
            (ProtoSource::Registry { registry, .. }, None) => registry,
            (ProtoSource::File(_), None) => unreachable!("a file source is compiled in new"),
        };
        let mut by_id = self.by_id.lock().expect("protobuf schema cache");
        if let Some(s) = by_id.get(&id) {
            return Ok(s.clone());
        }
        let compiled = Arc::new(compile_registry_schema(registry, id, patience)?);
        by_id.insert(id, compiled.clone());
        Ok(compiled)
    }

    /// The subject's latest schema (a file source's file): what a table
    /// without declared columns is derived from, and what `weir validate`
    /// checks the columns against.
    pub fn latest(&self, patience: Patience) -> Result<Arc<CompiledSchema>, DecodeError> {
        match (&self.source, &self.file) {
            (_, Some(file)) => Ok(file.clone()),
            (ProtoSource::Registry { registry, subject }, None) => {
                let latest = registry.latest(subject, patience)?;
                self.by_id(latest.id, patience)
            }
            (ProtoSource::File(_), None) => unreachable!("a file source is compiled in new"),
        }
    }
}

/// Compiles a `.proto` file, its directory the include path (well-known
/// `google/protobuf/*.proto` imports come with protox).
pub fn compile_file(path: &Path) -> Result<CompiledSchema, String> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let what = format!("file {}", path.display());
    let mut compiler = protox::Compiler::new([dir]).map_err(|e| format!("{what}: {e}"))?;
    compiler
        .open_file(path)
        .map_err(|e| format!("{what} does not compile: {e}"))?;
    let name = compiler
        .file_descriptor_set()
        .file
        .first()
        .map(|f| f.name().to_string())
        .ok_or_else(|| format!("{what}: protox compiled no file"))?;
    let file = compiler
        .descriptor_pool()
        .get_file_by_name(&name)
        .ok_or_else(|| format!("{what}: the compiled pool lacks {name}"))?;
    Ok(CompiledSchema {
        id: None,
        file,
        what,
    })
}

/// Fetches the schema `id`, and every schema it references (recursively,
/// by subject and version), and compiles them. Registries often omit
/// references to the well-known `google/protobuf/*.proto` files (Apicurio
/// and Confluent resolve them themselves): those come with protox, and
/// take precedence over a registry's copy.
pub fn compile_registry_schema(
    registry: &Registry,
    id: u32,
    patience: Patience,
) -> Result<CompiledSchema, DecodeError> {
    let what = format!("schema id {id}");
    let root = registry.schema_by_id(id, patience)?;
    if root.kind != SchemaKind::Protobuf {
        return Err(DecodeError::bad(format!(
            "{what} is a {} schema where a Protobuf one is read",
            root.kind.api_name()
        )));
    }
    let mut files = HashMap::new();
    let mut pending: Vec<_> = root.references.clone();
    while let Some(r) = pending.pop() {
        if files.contains_key(&r.name) || is_builtin_import(&r.name) {
            continue;
        }
        let s = registry
            .version(&r.subject, &r.version.to_string(), patience)
            .map_err(|e| {
                DecodeError::from(e).context(&format!(
                    "{what} imports {:?} (subject {:?} version {})",
                    r.name, r.subject, r.version
                ))
            })?;
        pending.extend(s.references.iter().cloned());
        files.insert(r.name.clone(), s.text.clone());
    }
    let mut root_name = format!("schema-{id}.proto");
    while files.contains_key(&root_name) {
        root_name.insert(0, '_');
    }
    files.insert(root_name.clone(), root.text.clone());
    let file = compile_files(&root_name, files)
        .map_err(|e| DecodeError::bad(format!("{what}: its .proto does not compile: {e}")))?;
    Ok(CompiledSchema {
        id: Some(id),
        file,
        what,
    })
}

/// Compiles `root` from `files` (by import name: `.proto` text or base64
/// descriptors), the well-known google files coming with protox.
fn compile_files(root: &str, files: HashMap<String, String>) -> Result<FileDescriptor, String> {
    let mut resolver = protox::file::ChainFileResolver::new();
    resolver.add(protox::file::GoogleFileResolver::new());
    resolver.add(RegistryFiles(files));
    let mut compiler = protox::Compiler::with_file_resolver(resolver);
    compiler.open_file(root).map_err(|e| e.to_string())?;
    compiler
        .descriptor_pool()
        .get_file_by_name(root)
        .ok_or_else(|| format!("the compiled pool lacks {root}"))
}

fn is_builtin_import(name: &str) -> bool {
    use protox::file::FileResolver;
    name.starts_with("google/protobuf/")
        && protox::file::GoogleFileResolver::new()
            .open_file(name)
            .is_ok()
}

/// The `.proto` texts of a registry schema and its references, by the
/// names they are imported by.
struct RegistryFiles(HashMap<String, String>);

impl protox::file::FileResolver for RegistryFiles {
    fn open_file(&self, name: &str) -> Result<protox::file::File, protox::Error> {
        match self.0.get(name) {
            Some(text) => schema_file(name, text),
            None => Err(protox::Error::file_not_found(name)),
        }
    }
}

/// A registry's schema as a file: `.proto` source, or a base64-encoded
/// `FileDescriptorProto` (what Apicurio serves for a schema that a Java
/// serializer registered). The descriptor is renamed to the name it is
/// imported by, which is what protox resolves imports with.
fn schema_file(name: &str, text: &str) -> Result<protox::file::File, protox::Error> {
    if let Some(mut descriptor) = as_descriptor(text) {
        descriptor.name = Some(name.to_string());
        return Ok(protox::file::File::from_file_descriptor_proto(descriptor));
    }
    protox::file::File::from_source(name, text)
}

/// Base64 text has no space, `;` or `{`, which any `.proto` with a
/// message has: text of base64 characters alone that decodes to a
/// descriptor is one.
fn as_descriptor(text: &str) -> Option<prost_reflect::prost_types::FileDescriptorProto> {
    use base64::Engine;
    use prost::Message;
    let t = text.trim();
    if t.is_empty()
        || !t
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='))
    {
        return None;
    }
    let bytes = base64::engine::general_purpose::STANDARD.decode(t).ok()?;
    prost_reflect::prost_types::FileDescriptorProto::decode(bytes.as_slice()).ok()
}

// ---------------------------------------------------------------------------
// SQL columns of a message.
// ---------------------------------------------------------------------------

/// The SQL columns of a message (for a table declared without columns).
/// A message type that contains itself has no finite column type: it is
/// refused, naming the path to the field where it recurs.
pub fn columns(descriptor: &MessageDescriptor) -> Result<Vec<Field>, String> {
    let mut stack = vec![descriptor.full_name().to_string()];
    message_columns(descriptor, "", &mut stack)
        .map_err(|e| format!("message {}: {e}", descriptor.full_name()))
}

fn message_columns(
    m: &MessageDescriptor,
    path: &str,
    stack: &mut Vec<String>,
) -> Result<Vec<Field>, String> {
    m.fields()
        .map(|f| {
            let path = join(path, f.name());
            Ok(Field::new(f.name(), field_type(&f, &path, stack)?))
        })
        .collect()
}

/// The column type of a field, repeated and map fields included.
fn field_type(
    f: &FieldDescriptor,
    path: &str,
    stack: &mut Vec<String>,
) -> Result<DataType, String> {
    let value = value_type(&f.kind(), path, stack)?;
    Ok(if f.is_list() || f.is_map() {
        DataType::List(Box::new(value))
    } else {
        value
    })
}

/// The column type of one value of a field (an element of a repeated one).
fn value_type(kind: &Kind, path: &str, stack: &mut Vec<String>) -> Result<DataType, String> {
    let Kind::Message(m) = kind else {
        let scalar = Scalar::of(kind).expect("a non-message kind is a scalar");
        return Ok(scalar.natural_type());
    };
    match WellKnown::of(m) {
        Some(WellKnown::Timestamp) => return Ok(DataType::Timestamp),
        Some(WellKnown::Duration) => return Ok(DataType::BigInt),
        Some(WellKnown::Wrapper(scalar)) => return Ok(scalar.natural_type()),
        None => {}
    }
    if stack.iter().any(|s| s == m.full_name()) {
        return Err(format!(
            "field `{path}` is of type {} again: a recursive message has no SQL column type \
             (declare the table's columns without it)",
            m.full_name()
        ));
    }
    stack.push(m.full_name().to_string());
    let fields = message_columns(m, path, stack);
    stack.pop();
    Ok(DataType::Struct(fields?))
}

fn join(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}.{name}")
    }
}

/// Messages read as a value rather than a ROW.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WellKnown {
    Timestamp,
    Duration,
    /// `google.protobuf.Int64Value` and the like: their field 1.
    Wrapper(Scalar),
}

impl WellKnown {
    fn of(m: &MessageDescriptor) -> Option<Self> {
        let wrapped = || {
            m.get_field(1)
                .and_then(|f| Scalar::of(&f.kind()))
                .map(WellKnown::Wrapper)
        };
        match m.full_name() {
            "google.protobuf.Timestamp" => Some(WellKnown::Timestamp),
            "google.protobuf.Duration" => Some(WellKnown::Duration),
            "google.protobuf.BoolValue"
            | "google.protobuf.Int32Value"
            | "google.protobuf.Int64Value"
            | "google.protobuf.UInt32Value"
            | "google.protobuf.UInt64Value"
            | "google.protobuf.FloatValue"
            | "google.protobuf.DoubleValue"
            | "google.protobuf.StringValue"
            | "google.protobuf.BytesValue" => wrapped(),
            _ => None,
        }
    }
}

// ---------------------------------------------------------------------------
// Scalars: how each protobuf scalar is read, and what it can become.
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scalar {
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
enum Raw<'a> {
    Bool(bool),
    Int(i64),
    Uint(u64),
    Float(f64),
    Text(&'a [u8]),
    Bytes(&'a [u8]),
    Enum(i32),
}

impl Scalar {
    fn of(kind: &Kind) -> Option<Self> {
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
    fn natural_type(self) -> DataType {
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

fn cut_short() -> String {
    "failed to decode Protobuf message: buffer underflow (the payload is cut short)".into()
}

fn take_array<const N: usize>(buf: &mut &[u8]) -> Result<[u8; N], String> {
    if buf.len() < N {
        return Err(cut_short());
    }
    let (head, rest) = buf.split_at(N);
    *buf = rest;
    Ok(head.try_into().expect("N bytes"))
}

/// A length-delimited value: its bytes, taken off `buf`.
fn take_delimited<'a>(buf: &mut &'a [u8]) -> Result<&'a [u8], String> {
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
enum Target {
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
    fn of(scalar: Scalar, kind: &Kind, ty: &DataType) -> Option<Self> {
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

fn fit_int(v: i128) -> Result<i64, String> {
    i32::try_from(v)
        .map(i64::from)
        .map_err(|_| format!("value {v} does not fit INT (32 bits)"))
}

fn utf8(bytes: &[u8]) -> Result<&str, String> {
    std::str::from_utf8(bytes).map_err(|e| format!("a string that is not valid UTF-8: {e}"))
}

fn decimal_of_int(v: i128, precision: u8, scale: u8) -> Result<Decimal, String> {
    let unscaled = 10i128
        .checked_pow(u32::from(scale))
        .and_then(|p| v.checked_mul(p))
        .ok_or_else(|| format!("value {v} does not fit DECIMAL({precision}, {scale})"))?;
    let d = Decimal { unscaled, scale };
    check_precision(d, precision)?;
    Ok(d)
}

fn check_precision(d: Decimal, precision: u8) -> Result<(), String> {
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
struct MessagePlan {
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
struct FieldPlan {
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
enum Reader {
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
fn plan_message(
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

fn find_field(writer: &[FieldDescriptor], name: &str) -> Option<FieldDescriptor> {
    writer
        .iter()
        .find(|f| f.name() == name)
        .or_else(|| writer.iter().find(|f| f.name().eq_ignore_ascii_case(name)))
        .cloned()
}

/// Gives each member of a (real) oneof the slots of its read siblings to
/// clear, adding a [`Reader::Skip`] plan for members no column reads.
fn add_oneof_clears(
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
fn plan_field(f: &FieldDescriptor, ty: &DataType, path: &str) -> Result<(Reader, Value), String> {
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
fn plan_value(f: &FieldDescriptor, ty: &DataType, path: &str) -> Result<(Reader, Value), String> {
    let kind = f.kind();
    if let Kind::Message(m) = &kind {
        if let DataType::Struct(columns) = ty {
            let plan = plan_message(m, columns, path)?;
            return Ok((Reader::Message(Box::new(plan)), Value::Null));
        }
        let reader = match (WellKnown::of(m), ty) {
            (Some(WellKnown::Timestamp), DataType::Timestamp) => Reader::Timestamp,
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
fn mismatch(f: &FieldDescriptor, ty: &DataType, path: &str) -> String {
    let proto = proto_type_name(f);
    match field_type(f, path, &mut Vec::new()) {
        Ok(natural) => format!(
            "field `{path}` ({proto}) cannot become a column of type {ty}; it reads as {natural}"
        ),
        Err(_) => format!("field `{path}` ({proto}) cannot become a column of type {ty}"),
    }
}

fn proto_type_name(f: &FieldDescriptor) -> String {
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
fn decode_message(
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
type FieldVisitor<'a> = dyn FnMut(u32, WireType, &mut &[u8]) -> Result<(), String> + 'a;

/// Calls `each` for every field key of a message body, positioned at the
/// field's value (which `each` must consume).
fn walk(buf: &mut &[u8], group: Option<u32>, each: &mut FieldVisitor<'_>) -> Result<(), String> {
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
fn walk_embedded(
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

fn skip(wire: WireType, number: u32, buf: &mut &[u8]) -> Result<(), String> {
    skip_field(wire, number, buf, DecodeContext::default()).map_err(|e| e.to_string())
}

fn read_field(
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
fn prefix_path(path: &str, e: String) -> String {
    if e.starts_with("field `") {
        e
    } else {
        format!("field `{path}`: {e}")
    }
}

/// Reads one value into `slot`, merging into an embedded message already
/// there.
fn read_one(
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
fn read_seconds_nanos(
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
fn read_timestamp(
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
fn read_duration(
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
struct WriterPlan {
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
struct EncField {
    number: u32,
    /// The proto field name (the column's, made a valid identifier).
    name: String,
    /// The column's path, for errors.
    column: String,
    repeated: bool,
    kind: EncKind,
}

#[derive(Debug, Clone)]
enum EncKind {
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
fn enc_fields(columns: &[Field], path: &str, outer: &[String]) -> Result<Vec<EncField>, String> {
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
                DataType::Boolean => EncKind::Bool,
                DataType::Int => EncKind::Int32,
                DataType::BigInt => EncKind::Int64,
                DataType::Double => EncKind::Double,
                DataType::Decimal { .. } => EncKind::Decimal,
                DataType::String => EncKind::String,
                DataType::Bytes => EncKind::Bytes,
                DataType::Timestamp => EncKind::Timestamp,
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
struct Unique {
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
fn identifier(name: &str) -> String {
    let mut id = super::identifier_chars(name);
    if !id.starts_with(|c: char| c.is_ascii_alphabetic()) {
        id.insert_str(0, "f_");
    }
    id
}

/// `line_items` → `LineItems`, for a ROW column's message type.
fn camel(name: &str) -> String {
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

fn schema_text(package: &str, name: &str, fields: &[EncField]) -> String {
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

fn uses_timestamp(fields: &[EncField]) -> bool {
    fields.iter().any(|f| match &f.kind {
        EncKind::Timestamp => true,
        EncKind::Message(_, inner) => uses_timestamp(inner),
        _ => false,
    })
}

fn message_text(name: &str, fields: &[EncField], depth: usize, out: &mut String) {
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

fn encode_field(f: &EncField, v: &Value, out: &mut Vec<u8>) -> Result<(), String> {
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
fn encode_one(f: &EncField, v: &Value, out: &mut Vec<u8>) -> Result<(), String> {
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
fn encode_bare(f: &EncField, v: &Value, out: &mut Vec<u8>) -> Result<(), String> {
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

fn delimited(number: u32, bytes: &[u8], out: &mut Vec<u8>) {
    encode_key(number, WireType::LengthDelimited, out);
    encode_varint(bytes.len() as u64, out);
    out.extend_from_slice(bytes);
}

/// A length-delimited field written in place: its body first, then its
/// length inserted before it (no buffer per nested message).
fn nested(
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

fn wrong_value(f: &EncField, v: &Value) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;
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
        let d =
            ProtobufDecoder::new(ProtoSource::File(path), Some("shop.Tree"), &cols, false).unwrap();
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
        let d = ProtobufDecoder::new(ProtoSource::File(path), Some("shop.Order"), &cols, false)
            .unwrap();
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
        let e =
            bad(decode(&order_decoder(&path), &framed(5, &[2], &m.encode_to_vec())).unwrap_err());
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
        let e =
            bad(decode(&order_decoder(&path), &framed(12, &[3], &m.encode_to_vec())).unwrap_err());
        assert!(
            e.contains("a Protobuf message of type shop.Other where the source reads shop.Order (schema id 12"),
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
        let d =
            ProtobufDecoder::new(ProtoSource::File(path), Some("shop.Order"), &int, false).unwrap();
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
        let root = "syntax = \"proto3\";\nimport \"shop.proto\";\nmessage Wrap { shop.Order order = 1; }\n";
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
        assert!(
            enc.schema_text().contains("package weir;") && !enc.schema_text().contains("import")
        );
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
}
