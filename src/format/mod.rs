//! Record formats: how a source turns a Kafka record's key and value into
//! a row, and how a sink writes one (docs/formats.md).
//!
//! Every decoder is built once per source from the table's columns, and
//! per writer schema (a registry id) it compiles a plan once: records are
//! decoded straight into [`Value`]s, with no intermediate JSON or Avro
//! value and no lookup of a field by name per record.
//!
//! - [`registry`]: the schema registry client (Confluent's API).
//! - [`confluent`]: the registry's wire framing.
//! - [`avro`], [`protobuf`], [`csv`], [`json`]: one module per format.
//! - [`debezium`]: change streams, Debezium's envelope over JSON or Avro.
//! - [`metadata`]: Kafka's record metadata as columns (Flink's `METADATA`).

pub mod avro;
pub mod confluent;
pub mod csv;
pub mod debezium;
pub mod json;
pub mod metadata;
pub mod protobuf;
pub mod registry;

use crate::dataflow::row::{RowKind, Value};

pub use crate::config::FormatName;

/// What became of one record's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decoded {
    /// A row of this kind was appended to the output (Insert for every
    /// format but a change stream's).
    Row(RowKind),
    /// Nothing to emit: a Debezium tombstone after its delete.
    Skip,
}

/// Why a record was not decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// The record is bad (its bytes, or a schema id the registry does not
    /// have): the source's `on_bad_record` decides what becomes of it.
    Bad(String),
    /// The registry could not be reached and the process is stopping: the
    /// task fails without skipping the record (a restart reads it again).
    Unavailable(String),
}

impl DecodeError {
    pub fn bad(m: impl Into<String>) -> Self {
        DecodeError::Bad(m.into())
    }

    /// The same error with `context: ` in front of its message.
    pub fn context(self, context: &str) -> Self {
        match self {
            DecodeError::Bad(m) => DecodeError::Bad(format!("{context}: {m}")),
            DecodeError::Unavailable(m) => DecodeError::Unavailable(format!("{context}: {m}")),
        }
    }

    pub fn message(&self) -> &str {
        match self {
            DecodeError::Bad(m) | DecodeError::Unavailable(m) => m,
        }
    }
}

impl From<String> for DecodeError {
    fn from(m: String) -> Self {
        DecodeError::Bad(m)
    }
}

impl From<registry::RegistryError> for DecodeError {
    fn from(e: registry::RegistryError) -> Self {
        match e {
            registry::RegistryError::Unreachable(m) => DecodeError::Unavailable(m),
            other => DecodeError::Bad(other.to_string()),
        }
    }
}

/// Decodes the bytes of a Kafka key or value into columns.
pub trait BytesDecoder: Send + Sync {
    /// Appends one value per column of the decoder (in its column order)
    /// to `out`; on Err, `out` may hold some of them (the caller clears).
    fn decode(&self, bytes: &[u8], out: &mut Vec<Value>) -> Result<Decoded, DecodeError>;
}

/// Encodes a row's columns as the bytes of a Kafka key or value.
pub trait BytesEncoder: Send + Sync {
    /// Writes the encoding of `values` (the encoder's columns, in order)
    /// into `out`, which is cleared first.
    fn encode(&self, values: &[&Value], out: &mut Vec<u8>) -> Result<(), String>;
}

/// `name` with every character but ASCII letters, digits and `_` made `_`:
/// the body of an Avro name or a Protobuf identifier (each format then
/// says how one may start).
pub(crate) fn identifier_chars(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}
