//! JSON, plain or framed for a schema registry (`json-schema`: a magic
//! byte and the writer's JSON Schema id before the object). Fields map to
//! columns by name ([`crate::dataflow::json`]); the registry's schema is
//! fetched once per id, so an id it does not have is a bad record.

use std::sync::Arc;

use super::confluent::{frame, unframe};
use super::registry::{Patience, Registration, Registry, SchemaKind};
use super::{BytesDecoder, BytesEncoder, DecodeError, Decoded};
use crate::dataflow::json::write_value;
use crate::dataflow::row::{DataType, Field, RowKind, Schema, Value};

/// Decodes a JSON object (after the registry's frame, with one) into columns.
pub struct JsonDecoder {
    schema: Schema,
    registry: Option<Arc<Registry>>,
}

impl JsonDecoder {
    pub fn new(columns: Vec<Field>, registry: Option<Arc<Registry>>) -> Self {
        Self {
            schema: Schema::new(columns),
            registry,
        }
    }
}

impl BytesDecoder for JsonDecoder {
    fn decode(&self, bytes: &[u8], out: &mut Vec<Value>) -> Result<Decoded, DecodeError> {
        let payload = match &self.registry {
            None => bytes,
            Some(registry) => {
                let framed = unframe(bytes)?;
                let schema = registry
                    .schema_by_id(framed.schema_id, Patience::Forever)
                    .map_err(|e| {
                        DecodeError::from(e).context(&format!("schema id {}", framed.schema_id))
                    })?;
                if schema.kind != SchemaKind::Json {
                    return Err(DecodeError::Bad(format!(
                        "schema id {} is a {} schema, not a JSON Schema",
                        framed.schema_id,
                        schema.kind.api_name()
                    )));
                }
                framed.payload
            }
        };
        let json: serde_json::Value = serde_json::from_slice(payload)
            .map_err(|e| DecodeError::Bad(format!("value is not valid JSON: {e}")))?;
        decode_object(&json, &self.schema.fields, out)?;
        Ok(Decoded::Row(RowKind::Insert))
    }
}

/// The columns of a JSON object, appended to `out` (a missing field is NULL).
pub fn decode_object(
    json: &serde_json::Value,
    columns: &[Field],
    out: &mut Vec<Value>,
) -> Result<(), DecodeError> {
    crate::dataflow::json::object_columns(json, columns, out).map_err(DecodeError::Bad)
}

/// A JSON object of the columns, framed with a registered JSON Schema's
/// id for `json-schema`.
pub struct JsonEncoder {
    columns: Vec<Field>,
    registration: Option<Registration>,
}

impl JsonEncoder {
    pub fn plain(columns: &[Field]) -> Self {
        Self {
            columns: columns.to_vec(),
            registration: None,
        }
    }

    /// Framed with the id of the columns' [`json_schema`], registered
    /// under `subject` when the first record is written.
    pub fn registered(registry: Arc<Registry>, subject: &str, columns: &[Field]) -> Self {
        let text = json_schema(columns).to_string();
        Self {
            columns: columns.to_vec(),
            registration: Some(Registration::new(registry, subject, SchemaKind::Json, text)),
        }
    }
}

impl BytesEncoder for JsonEncoder {
    fn encode(&self, values: &[&Value], out: &mut Vec<u8>) -> Result<(), String> {
        out.clear();
        if let Some(r) = &self.registration {
            frame(r.id()?, out);
        }
        out.push(b'{');
        for (i, (f, v)) in self.columns.iter().zip(values).enumerate() {
            if i > 0 {
                out.push(b',');
            }
            serde_json::to_writer(&mut *out, &f.name).expect("a string serializes");
            out.push(b':');
            write_value(v, &f.data_type, out);
        }
        out.push(b'}');
        Ok(())
    }
}

/// The JSON Schema (draft 7) of rows of these columns, as weir writes them.
pub fn json_schema(columns: &[Field]) -> serde_json::Value {
    serde_json::json!({
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": properties(columns),
    })
}

fn properties(columns: &[Field]) -> serde_json::Value {
    serde_json::Value::Object(
        columns
            .iter()
            .map(|c| (c.name.clone(), type_schema(&c.data_type)))
            .collect(),
    )
}

fn type_schema(t: &DataType) -> serde_json::Value {
    use serde_json::json;
    match t {
        DataType::Boolean => json!({"type": ["boolean", "null"]}),
        DataType::Int | DataType::BigInt => json!({"type": ["integer", "null"]}),
        DataType::Double | DataType::Decimal { .. } => json!({"type": ["number", "null"]}),
        DataType::String | DataType::Bytes => json!({"type": ["string", "null"]}),
        DataType::Timestamp | DataType::TimestampLtz => {
            json!({"type": ["string", "null"], "format": "date-time"})
        }
        DataType::Date => json!({"type": ["string", "null"], "format": "date"}),
        DataType::Time => json!({"type": ["string", "null"], "format": "time"}),
        DataType::List(item) => json!({"type": ["array", "null"], "items": type_schema(item)}),
        DataType::Map(_, value) => {
            json!({"type": ["object", "null"], "additionalProperties": type_schema(value)})
        }
        DataType::Struct(fields) => {
            json!({"type": ["object", "null"], "properties": properties(fields)})
        }
    }
}
