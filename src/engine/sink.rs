//! The Kafka sink operator: encodes rows as JSON by its changelog mode and
//! writes them through an [`Output`], which holds epoch N+1's records back
//! until checkpoint N committed (the epoch gate) and writes into the
//! job's transaction.

use crate::dataflow::graph::{KeyFormat, SinkMode, SinkSpec};
use crate::dataflow::json::{encode_columns, write_value, RowEncoder};
use crate::dataflow::row::{RowKind, Schema, Value};
use crate::dataflow::Record;
use crate::engine::upsert_fold::{UpsertFold, UpsertWrite};
use crate::error::{Result, WeirError};
use crate::runtime::output::Output;

pub struct SinkWriter {
    pub uid: String,
    pub spec: SinkSpec,
    pub schema: Schema,
    pub output: Output,
    encoder: RowEncoder,
    key: Vec<u8>,
    /// A row's value before it goes elsewhere: into an envelope
    /// (Debezium), or, for an upsert sink's update-before, into the fold
    /// to compare with the row that follows.
    scratch: Vec<u8>,
    /// Upsert: the update-befores held until their key's next row.
    upserts: UpsertFold,
}

impl SinkWriter {
    pub fn new(uid: &str, spec: SinkSpec, schema: Schema, output: Output) -> Self {
        Self {
            uid: uid.into(),
            spec,
            encoder: RowEncoder::new(&schema),
            schema,
            output,
            key: Vec::with_capacity(64),
            scratch: Vec::new(),
            upserts: UpsertFold::default(),
        }
    }

    /// Before the epoch's snapshot: an upsert sink writes a tombstone for
    /// each key whose update-before no row followed ([`UpsertFold`]).
    pub fn end_epoch(&mut self) -> Result<()> {
        for key in self.upserts.end_epoch() {
            self.output.send_tombstone(&key)?;
        }
        Ok(())
    }

    /// The row's value as the sink writes it, into `out`.
    fn encode_value(&self, r: &Record, out: &mut Vec<u8>) -> Result<()> {
        match &self.spec.encoding.value {
            None => self.encoder.encode(&r.row, out),
            Some(encoder) => {
                let values: Vec<&Value> = r.row.values.iter().collect();
                if let Err(e) = encoder.encode(&values, out) {
                    return Err(self.encode_error("value", e));
                }
            }
        }
        Ok(())
    }

    /// An encoder's error as the job's: the sink cannot write this row.
    fn encode_error(&self, what: &str, e: String) -> WeirError {
        WeirError::Operator {
            uid: self.uid.clone(),
            subtask: self.output.subtask,
            reason: format!(
                "sink to {}: the {what} cannot be encoded: {e}",
                self.spec.topic
            ),
        }
    }

    pub fn write(&mut self, r: &Record) -> Result<()> {
        if let Some(encoder) = &self.spec.encoding.key {
            if !self.spec.key.is_empty() {
                let values: Vec<&Value> = self.spec.key.iter().map(|c| r.row.get(*c)).collect();
                if let Err(e) = encoder.encode(&values, &mut self.key) {
                    return Err(self.encode_error("key", e));
                }
            }
        }
        match (self.spec.key_format, &self.spec.key[..]) {
            _ if self.spec.encoding.key.is_some() => {}
            (_, []) => self.key.clear(),
            (KeyFormat::Raw, [c]) => {
                self.key.clear();
                match r.row.get(*c) {
                    Value::String(s) => self.key.extend_from_slice(s.as_bytes()),
                    Value::Bytes(b) => self.key.extend_from_slice(b),
                    other => write_value(other, &self.schema.fields[*c].data_type, &mut self.key),
                }
            }
            _ => encode_columns(&r.row, &self.schema, &self.spec.key, &mut self.key),
        }
        match (self.spec.mode, r.row.kind) {
            (SinkMode::Append, RowKind::Insert)
            | (SinkMode::Results, RowKind::Insert | RowKind::UpdateAfter) => {
                let mut buf = std::mem::take(&mut self.output.buf);
                let encoded = self.encode_value(r, &mut buf);
                self.output.buf = buf;
                encoded?;
            }
            (SinkMode::Results, RowKind::UpdateBefore | RowKind::Delete) => return Ok(()),
            (SinkMode::Append, kind) => {
                return Err(WeirError::Operator {
                    uid: self.uid.clone(),
                    subtask: self.output.subtask,
                    reason: format!(
                        "an append sink received a {} row: its input is an updating result; write it with an upsert or changelog sink",
                        kind.short()
                    ),
                })
            }
            (SinkMode::Upsert, _) => return self.write_upsert(r),
            (SinkMode::Debezium, kind) => {
                self.encoder.encode(&r.row, &mut self.scratch);
                let buf = &mut self.output.buf;
                buf.clear();
                if matches!(kind, RowKind::Insert | RowKind::UpdateAfter) {
                    buf.extend_from_slice(b"{\"before\":null,\"after\":");
                    buf.extend_from_slice(&self.scratch);
                    buf.extend_from_slice(b",\"op\":\"c\"}");
                } else {
                    buf.extend_from_slice(b"{\"before\":");
                    buf.extend_from_slice(&self.scratch);
                    buf.extend_from_slice(b",\"after\":null,\"op\":\"d\"}");
                }
            }
            (SinkMode::Changelog, kind) => {
                self.encoder.encode(&r.row, &mut self.output.buf);
                // `{"op":"+I",` in front of the row's own fields.
                let op = format!("{{\"op\":\"{}\"", kind.short());
                let rest = self.output.buf.split_off(1);
                self.output.buf.clear();
                self.output.buf.extend_from_slice(op.as_bytes());
                if rest.len() > 1 {
                    self.output.buf.push(b',');
                }
                self.output.buf.extend_from_slice(&rest);
            }
        }
        self.send(r)
    }

    /// An upsert sink's row: what [`UpsertFold`] says to write for it.
    fn write_upsert(&mut self, r: &Record) -> Result<()> {
        let mut buf = std::mem::take(&mut self.output.buf);
        let write = match r.row.kind {
            RowKind::UpdateBefore => {
                let mut before = std::mem::take(&mut self.scratch);
                let encoded = self.encode_value(r, &mut before);
                if encoded.is_ok() {
                    self.upserts.before(&self.key, &before);
                }
                self.scratch = before;
                encoded.map(|()| UpsertWrite::Nothing)
            }
            RowKind::Delete => Ok(self.upserts.delete(&self.key)),
            RowKind::Insert | RowKind::UpdateAfter => self
                .encode_value(r, &mut buf)
                .map(|()| self.upserts.row(&self.key, &buf)),
        };
        self.output.buf = buf;
        match write? {
            UpsertWrite::Nothing => Ok(()),
            UpsertWrite::Tombstone => self.output.send_tombstone(&self.key),
            UpsertWrite::Row => self.send(r),
        }
    }

    /// Sends the value in the output's buffer under the key in `self.key`.
    fn send(&mut self, r: &Record) -> Result<()> {
        let key = std::mem::take(&mut self.key);
        // A row's event time is its record's Kafka timestamp (a window's
        // result: its last millisecond), as Flink's Kafka sink writes it.
        let ts = (self.spec.timestamps && r.timestamp != crate::time::NO_TIMESTAMP)
            .then_some(r.timestamp);
        let sent = self.output.send_buf(&key, ts);
        self.key = key;
        sent
    }
}
