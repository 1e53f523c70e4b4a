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

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use prost_reflect::{FieldDescriptor, FileDescriptor, Kind, MessageDescriptor};

use crate::dataflow::row::{DataType, Field};
use crate::format::registry::{Patience, Registry, SchemaKind};
use crate::format::DecodeError;

mod read;
#[cfg(test)]
mod tests;
mod write;

pub use self::read::ProtobufDecoder;
use self::read::Scalar;
pub use self::write::ProtobufEncoder;

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
