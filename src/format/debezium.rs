//! Debezium change streams (Flink's `debezium-json` and
//! `debezium-avro-confluent`): each record is an envelope `{before, after,
//! op}` (in JSON, bare or inside Debezium's `{"schema", "payload"}`; in
//! Avro, a registry-framed `Envelope` record). A table read from one is
//! keyed by its `primary_key`: a create (`c`), a snapshot read (`r`) and an
//! update (`u`) upsert the `after` row, a delete (`d`) deletes the `before`
//! row's key; the table's normalize step turns them into inserts,
//! update-before/update-after pairs and deletes, so that a change
//! delivered twice (Debezium delivers at least once) changes nothing. A
//! tombstone (the null value after a delete, for log compaction) is
//! skipped by the table.

use std::sync::Arc;

use super::{BytesDecoder, DecodeError, Decoded};
use crate::dataflow::row::{DataType, Field, RowKind, Value};

/// The columns an envelope decoder reads: `before` and `after` as ROWs of
/// the table's columns, then `op`.
pub fn envelope_columns(columns: &[Field]) -> Vec<Field> {
    vec![
        Field::new("before", DataType::Struct(columns.to_vec())),
        Field::new("after", DataType::Struct(columns.to_vec())),
        Field::new("op", DataType::String),
    ]
}

/// Reads the envelope through `inner` (which decodes [`envelope_columns`])
/// and emits the row the change makes.
pub struct DebeziumDecoder {
    inner: Arc<dyn BytesDecoder>,
    /// JSON only: the envelope may sit in Debezium's `payload`.
    json_columns: Option<Vec<Field>>,
}

impl DebeziumDecoder {
    /// Over an Avro (or other registry format) envelope decoder.
    pub fn over(inner: Arc<dyn BytesDecoder>) -> Self {
        Self {
            inner,
            json_columns: None,
        }
    }

    /// `debezium-json`, with or without the schema envelope.
    pub fn json(columns: &[Field]) -> Self {
        let envelope = envelope_columns(columns);
        Self {
            inner: Arc::new(super::json::JsonDecoder::new(envelope.clone(), None)),
            json_columns: Some(envelope),
        }
    }
}

impl BytesDecoder for DebeziumDecoder {
    fn decode(&self, bytes: &[u8], out: &mut Vec<Value>) -> Result<Decoded, DecodeError> {
        let mut envelope = Vec::with_capacity(3);
        match &self.json_columns {
            Some(columns) => {
                let json: serde_json::Value = serde_json::from_slice(bytes)
                    .map_err(|e| DecodeError::Bad(format!("value is not valid JSON: {e}")))?;
                // Debezium's JSON converter with schemas on wraps the
                // change in {"schema": ..., "payload": ...}.
                let change = match json.get("payload") {
                    Some(payload) if json.get("schema").is_some() => payload,
                    _ => &json,
                };
                if change.is_null() {
                    return Ok(Decoded::Skip);
                }
                super::json::decode_object(change, columns, &mut envelope)?;
            }
            None => {
                self.inner.decode(bytes, &mut envelope)?;
            }
        }
        let [before, after, op] = <[Value; 3]>::try_from(envelope)
            .map_err(|_| DecodeError::bad("a Debezium envelope without before, after and op"))?;
        let op = match &op {
            Value::String(s) => s.as_str(),
            _ => return Err(DecodeError::bad("a Debezium change without \"op\"")),
        };
        let (kind, row) = match op {
            "c" | "r" | "u" => (RowKind::Insert, after),
            "d" => (RowKind::Delete, before),
            other => {
                return Err(DecodeError::Bad(format!(
                    "Debezium op {other:?} is not a row change (c, r, u or d)"
                )))
            }
        };
        match row {
            Value::Struct(values) => {
                out.extend(values);
                Ok(Decoded::Row(kind))
            }
            _ => Err(DecodeError::Bad(format!(
                "a Debezium {op:?} change without its {} row",
                if kind == RowKind::Delete {
                    "before"
                } else {
                    "after"
                }
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn columns() -> Vec<Field> {
        vec![
            Field::new("id", DataType::BigInt),
            Field::new("name", DataType::String),
        ]
    }

    #[test]
    fn changes_become_upserts_and_deletes_with_or_without_the_schema_envelope() {
        let d = DebeziumDecoder::json(&columns());
        let cases: [(&str, Decoded, Vec<Value>); 5] = [
            (
                r#"{"before":null,"after":{"id":1,"name":"a"},"op":"c"}"#,
                Decoded::Row(RowKind::Insert),
                vec![Value::Int(1), Value::String("a".into())],
            ),
            (
                r#"{"before":null,"after":{"id":2,"name":"s"},"op":"r","source":{}}"#,
                Decoded::Row(RowKind::Insert),
                vec![Value::Int(2), Value::String("s".into())],
            ),
            (
                r#"{"schema":{"type":"struct"},"payload":{"before":{"id":1,"name":"a"},"after":{"id":1,"name":"b"},"op":"u"}}"#,
                Decoded::Row(RowKind::Insert),
                vec![Value::Int(1), Value::String("b".into())],
            ),
            (
                r#"{"before":{"id":1,"name":"b"},"after":null,"op":"d"}"#,
                Decoded::Row(RowKind::Delete),
                vec![Value::Int(1), Value::String("b".into())],
            ),
            (r#"{"schema":{},"payload":null}"#, Decoded::Skip, vec![]),
        ];
        for (json, want, row) in cases {
            let mut out = Vec::new();
            assert_eq!(d.decode(json.as_bytes(), &mut out).unwrap(), want, "{json}");
            assert_eq!(out, row, "{json}");
        }
        let e = d
            .decode(br#"{"before":null,"after":null,"op":"t"}"#, &mut Vec::new())
            .unwrap_err();
        assert!(e.message().contains("\"t\""), "{e:?}");
        let e = d
            .decode(br#"{"before":null,"after":null,"op":"d"}"#, &mut Vec::new())
            .unwrap_err();
        assert!(e.message().contains("before"), "{e:?}");
    }
}
