//! The Kafka sink operator: encodes rows as JSON by its changelog mode and
//! writes them through an [`Output`], which holds epoch N+1's records back
//! until checkpoint N committed (the epoch gate) and writes into the
//! job's transaction.

use crate::dataflow::graph::{KeyFormat, SinkMode, SinkSpec};
use crate::dataflow::json::{encode_columns, write_value, RowEncoder};
use crate::dataflow::row::{RowKind, Schema, Value};
use crate::dataflow::Record;
use crate::error::{Result, WeirError};
use crate::runtime::output::Output;

pub struct SinkWriter {
    pub uid: String,
    pub spec: SinkSpec,
    pub schema: Schema,
    pub output: Output,
    encoder: RowEncoder,
    key: Vec<u8>,
    /// A row's JSON before it goes into an envelope (Debezium).
    scratch: Vec<u8>,
    /// Upsert: the key of the last update-before, whose update-after
    /// (the next record, nearly always) replaces the key's row; its
    /// buffer is reused.
    pending_before: Vec<u8>,
    has_pending_before: bool,
    /// Upsert: keys whose update-before no update-after has followed yet.
    /// A filter over an updating result drops the update-after of a row
    /// that stops passing; what is left at the epoch's end is a deletion
    /// ([`SinkWriter::end_epoch`]).
    lone_befores: std::collections::HashSet<Vec<u8>>,
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
            pending_before: Vec::new(),
            has_pending_before: false,
            lone_befores: Default::default(),
        }
    }

    /// Before the epoch's snapshot: an upsert sink writes a tombstone for
    /// each key whose update-before no update-after followed (Flink's
    /// upsert-kafka writes every update-before so; weir writes only those
    /// not replaced, so an update is one record).
    pub fn end_epoch(&mut self) -> Result<()> {
        if std::mem::take(&mut self.has_pending_before) {
            self.lone_befores.insert(self.pending_before.clone());
        }
        let lone: Vec<Vec<u8>> = self.lone_befores.drain().collect();
        for key in lone {
            self.output.send_tombstone(&key)?;
        }
        Ok(())
    }

    /// An upsert sink's update-before for the key in `self.key`.
    fn before(&mut self) {
        if self.has_pending_before && self.pending_before != self.key {
            self.lone_befores.insert(self.pending_before.clone());
        }
        self.pending_before.clear();
        self.pending_before.extend_from_slice(&self.key);
        self.has_pending_before = true;
    }

    /// An upsert sink's row for the key in `self.key`: an update-before
    /// it followed at once is not lone. One that other rows came between
    /// is written now, as the tombstone it is, before the row: the key left
    /// the result and came back, maybe as the very row it left as (a
    /// filter's row that stopped passing and passes again), and a reader
    /// must see it go, not that row twice in a row.
    /// (A deletion's own tombstone follows: nothing more is written then.)
    fn replaced(&mut self, kind: RowKind) -> Result<()> {
        if self.has_pending_before && self.pending_before == self.key {
            self.has_pending_before = false;
        } else if !self.lone_befores.is_empty()
            && self.lone_befores.remove(&self.key[..])
            && kind != RowKind::Delete
        {
            self.output.send_tombstone(&self.key)?;
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
        if self.spec.mode == SinkMode::Upsert {
            match r.row.kind {
                RowKind::UpdateBefore => {
                    // The update-after that follows replaces it.
                    self.before();
                    return Ok(());
                }
                kind => self.replaced(kind)?,
            }
        }
        match (self.spec.mode, r.row.kind) {
            (SinkMode::Append, RowKind::Insert)
            | (
                SinkMode::Upsert | SinkMode::Results,
                RowKind::Insert | RowKind::UpdateAfter,
            ) => match &self.spec.encoding.value {
                None => self.encoder.encode(&r.row, &mut self.output.buf),
                Some(encoder) => {
                    let values: Vec<&Value> = r.row.values.iter().collect();
                    if let Err(e) = encoder.encode(&values, &mut self.output.buf) {
                        return Err(self.encode_error("value", e));
                    }
                }
            },
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
            (SinkMode::Upsert, RowKind::UpdateBefore) => return Ok(()),
            (SinkMode::Upsert, RowKind::Delete) => return self.output.send_tombstone(&self.key),
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
