//! The operator model. An operator sees rows, watermarks, timers and
//! checkpoints through this small trait; the task runner (`crate::engine`)
//! owns everything else (inputs, alignment, the watermark valve, timers'
//! storage, exchanges, sinks, the snapshot protocol), so an operator is
//! unit-tested with a [`Context`] over a temporary store and a
//! [`Collector`], with no broker and no producer.

use super::codec::StateCodec;
use super::row::{Row, Value};
use super::tables::{
    key_prefix, split_timer_payload, timer_payload, KeyedStore, Table, UpdateFailed, Write,
};
use crate::error::Result;

/// A row in flight with its event time and, after a hash exchange, the
/// key it was routed by.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub row: Row,
    /// Event time (ms); [`crate::time::NO_TIMESTAMP`] without event time.
    pub timestamp: i64,
    /// The key group of `key` (0 on a forward edge).
    pub key_group: u32,
    /// The key columns' encoding ([`super::codec::encode_key`]), set by a
    /// hash exchange; empty on a forward edge.
    pub key: RecordKey,
}

/// A record's key encoding. A short key (a word, an id) is held inline,
/// so the exchange hands the keyed task the bytes it routed by, without an
/// allocation, instead of the task encoding the key from the row again.
pub type RecordKey = smallvec::SmallVec<[u8; 24]>;

/// A late record as it goes to a dead-letter topic: the row as JSON, why,
/// and headers (the window, the event time, the watermark).
#[derive(Debug, Clone, PartialEq)]
pub struct LateRecord {
    pub value: Vec<u8>,
    pub error: String,
    pub headers: Vec<(String, String)>,
    /// The Kafka record it came from, where the row carries its origin
    /// (`KafkaSource::with_origin`): the dead letter gets its key and the
    /// `weir.source.*` headers, as a bad record's does.
    pub origin: Option<RecordOrigin>,
    /// Set aside because a user-defined function failed on it, not for
    /// being late: counted as such (`weir_function_failures_total`), not
    /// as a late record.
    pub failed: bool,
}

/// Where a row was read: its Kafka record's key, topic, partition and
/// offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordOrigin {
    pub key: Option<Vec<u8>>,
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
}

impl RecordOrigin {
    /// The origin column's type (`KafkaSource::with_origin`).
    pub fn data_type() -> super::row::DataType {
        use super::row::{DataType, Field};
        DataType::Struct(vec![
            Field::new("key", DataType::Bytes),
            Field::new("topic", DataType::String),
            Field::new("partition", DataType::BigInt),
            Field::new("offset", DataType::BigInt),
        ])
    }

    /// As an origin column's value.
    pub fn value(key: Option<&[u8]>, topic: &str, partition: i32, offset: i64) -> Value {
        Value::Struct(vec![
            key.map_or(Value::Null, |k| Value::Bytes(k.to_vec())),
            Value::String(topic.to_string()),
            Value::Int(i64::from(partition)),
            Value::Int(offset),
        ])
    }

    /// An origin column's value read back; None for anything else.
    pub fn from_value(v: &Value) -> Option<Self> {
        let Value::Struct(parts) = v else {
            return None;
        };
        match parts.as_slice() {
            [key, Value::String(topic), Value::Int(partition), Value::Int(offset)] => Some(Self {
                key: match key {
                    Value::Bytes(k) => Some(k.clone()),
                    _ => None,
                },
                topic: topic.clone(),
                partition: i32::try_from(*partition).ok()?,
                offset: *offset,
            }),
            _ => None,
        }
    }
}

/// Where an operator emits its rows; the runtime passes them on to the
/// next operator of the chain, an exchange or a sink.
///
/// Rows are gathered as records, so that the runtime hands the batch on to
/// the next operator or exchange as it is, without copying it again.
#[derive(Debug, Default)]
pub struct Collector {
    pub(crate) out: Vec<Record>,
}

impl Collector {
    pub fn new() -> Self {
        Self::default()
    }

    /// Room for `n` rows (a batch of records that each emit about one).
    pub fn with_capacity(n: usize) -> Self {
        Self {
            out: Vec::with_capacity(n),
        }
    }

    /// Emits `row` with event time `timestamp`.
    pub fn emit(&mut self, row: Row, timestamp: i64) {
        self.out.push(Record {
            row,
            timestamp,
            key_group: 0,
            key: RecordKey::new(),
        });
    }

    /// What was emitted so far, taken, as rows and their event times.
    pub fn take(&mut self) -> Vec<(Row, i64)> {
        std::mem::take(&mut self.out)
            .into_iter()
            .map(|r| (r.row, r.timestamp))
            .collect()
    }

    /// What was emitted so far, taken, as records (the runtime).
    pub(crate) fn take_records(&mut self) -> Vec<Record> {
        std::mem::take(&mut self.out)
    }

    pub fn is_empty(&self) -> bool {
        self.out.is_empty()
    }
}

/// What an operator can reach while it handles one record or timer: the
/// current key, the watermark, and its tables and timers (keyed
/// operators only; a stateless operator has no store).
pub struct Context {
    pub uid: String,
    pub subtask: u32,
    store: Option<KeyedStore>,
    key_group: u32,
    key: Vec<u8>,
    watermark: i64,
    scratch: Vec<u8>,
    value: Vec<u8>,
    /// Records dropped for arriving after their window closed.
    late: u64,
    /// Rows dropped from state by a time-to-live or the watermark.
    expired: u64,
    /// Late records for the node's dead-letter topic, if it has one.
    late_records: Vec<LateRecord>,
    /// Whether a consumer of this node's output needs update-before rows.
    update_before: bool,
    /// Per input port, the key columns its hash edge routes by (keyed
    /// nodes): the key of a record from an in-process exchange is encoded
    /// here from its row, into the one buffer, instead of travelling.
    key_columns: Vec<Vec<usize>>,
    /// The watermark each key group had reached at the restored snapshot
    /// ([`super::tables::WATERMARK_TABLE`]), and the highest of them: below
    /// it, [`Context::watermark`] is the current key group's.
    restored: rustc_hash::FxHashMap<u32, i64>,
    restored_max: i64,
    /// Windows opened less windows closed since the runtime last looked
    /// (`weir_open_windows`).
    open_windows: i64,
}

impl Context {
    pub fn new(uid: &str, subtask: u32, store: Option<KeyedStore>) -> Self {
        Self {
            uid: uid.into(),
            subtask,
            store,
            key_group: 0,
            key: Vec::new(),
            watermark: crate::time::MIN_WATERMARK,
            scratch: Vec::with_capacity(64),
            value: Vec::with_capacity(64),
            late: 0,
            expired: 0,
            late_records: Vec::new(),
            update_before: true,
            key_columns: Vec::new(),
            restored: rustc_hash::FxHashMap::default(),
            restored_max: crate::time::MIN_WATERMARK,
            open_windows: 0,
        }
    }

    /// `n` windows were opened (negative: closed), for `weir_open_windows`.
    pub fn count_open_windows(&mut self, n: i64) {
        self.open_windows += n;
    }

    pub(crate) fn take_open_windows(&mut self) -> i64 {
        std::mem::take(&mut self.open_windows)
    }

    /// The tags of every pending timer of this operator's store, with the
    /// key each is for (restores count what they hold by them).
    pub fn timer_tags(&mut self) -> Vec<(Vec<u8>, Vec<u8>)> {
        let Some(store) = self.store.as_mut() else {
            return Vec::new();
        };
        store
            .timers()
            .iter()
            .filter_map(|(_, payload)| {
                let (_, key, tag) = split_timer_payload(payload)?;
                Some((key.to_vec(), tag.to_vec()))
            })
            .collect()
    }

    /// Reads the watermarks saved per key group in `range` from the store
    /// (after a restore; an empty store has none).
    pub(crate) fn load_watermarks(&mut self, range: (u32, u32)) -> Result<()> {
        if let Some(store) = self.store.as_mut() {
            self.restored = store.saved_watermarks(range)?;
            self.restored_max = self
                .restored
                .values()
                .copied()
                .max()
                .unwrap_or(crate::time::MIN_WATERMARK);
        }
        Ok(())
    }

    /// Saves, per key group in `range`, the watermark it has reached (the
    /// live one, or the restored one while that is higher), so that the
    /// next restore judges lateness as this attempt did. Nothing while no
    /// watermark has been seen (jobs without event time).
    pub(crate) fn save_watermarks(&mut self, range: (u32, u32)) -> Result<()> {
        let live = self.watermark;
        if live == crate::time::MIN_WATERMARK && self.restored.is_empty() {
            return Ok(());
        }
        let Some(store) = self.store.as_mut() else {
            return Ok(());
        };
        for kg in range.0..range.1 {
            let w = self.restored.get(&kg).map_or(live, |r| (*r).max(live));
            if w > crate::time::MIN_WATERMARK {
                store.save_watermark(kg, w)?;
            }
        }
        if live >= self.restored_max {
            // The live watermark passed everything restored.
            self.restored.clear();
        }
        Ok(())
    }

    /// Set by the runtime when every consumer of the node replaces a key's
    /// row by the next one (upsert sinks), which makes update-before rows
    /// dead weight ([`crate::dataflow::Graph::update_before_needed`]).
    pub(crate) fn set_update_before(&mut self, needed: bool) {
        self.update_before = needed;
    }

    /// Whether to emit update-before rows ahead of update-afters: true
    /// unless every consumer of this node's output ignores them.
    pub fn update_before_needed(&self) -> bool {
        self.update_before
    }

    pub(crate) fn set_key_columns(&mut self, columns: Vec<Vec<usize>>) {
        self.key_columns = columns;
    }

    /// Sets the current key to `row`'s key columns for input `port` (in
    /// `key_group`, which the exchange computed from the same encoding).
    pub(crate) fn set_key_from_row(&mut self, port: usize, row: &Row, key_group: u32) {
        self.key_group = key_group;
        self.key.clear();
        if let Some(columns) = self.key_columns.get(port) {
            super::codec::encode_key(row, columns, &mut self.key);
        }
    }

    /// The current key, its key group and the store (for the runtime's
    /// view of a key's tables).
    pub(crate) fn key_and_store(&mut self) -> Option<(u32, &[u8], &mut KeyedStore)> {
        let store = self.store.as_mut()?;
        Some((self.key_group, &self.key, store))
    }

    pub(crate) fn set_key(&mut self, key_group: u32, key: &[u8]) {
        self.key_group = key_group;
        self.key.clear();
        self.key.extend_from_slice(key);
    }

    pub(crate) fn set_watermark(&mut self, watermark: i64) {
        self.watermark = watermark;
    }

    /// The watermark this operator last saw, whatever the key (see
    /// [`task_watermark`]).
    pub(crate) fn live_watermark(&self) -> i64 {
        self.watermark
    }

    /// Entries the state store's cache holds at most (`state.cache_entries`;
    /// 0 without a store): what an operator may hold of its own state in
    /// memory besides.
    pub fn cache_limit(&self) -> usize {
        self.store.as_ref().map_or(0, KeyedStore::cache_limit)
    }

    pub(crate) fn store_mut(&mut self) -> Option<&mut KeyedStore> {
        self.store.as_mut()
    }

    /// Timers due at `watermark`, with the key each is for set in turn.
    pub(crate) fn pop_due_timers(&mut self, watermark: i64) -> Vec<(i64, Vec<u8>)> {
        match &mut self.store {
            Some(s) => s.timers().pop_due(watermark),
            None => Vec::new(),
        }
    }

    /// Sets the current key from a fired timer; returns its tag.
    pub(crate) fn enter_timer(&mut self, payload: &[u8]) -> Option<Vec<u8>> {
        let (kg, key, tag) = split_timer_payload(payload)?;
        let tag = tag.to_vec();
        let key = key.to_vec();
        self.set_key(kg, &key);
        Some(tag)
    }

    /// The current key's encoding.
    pub fn key(&self) -> &[u8] {
        &self.key
    }

    pub fn key_group(&self) -> u32 {
        self.key_group
    }

    /// The current key's values (the key columns, in order).
    pub fn key_values(&self) -> Result<Vec<Value>> {
        super::codec::decode_key(&self.key).map_err(|e| crate::WeirError::Task {
            task: self.uid.clone(),
            reason: format!("key of {} bytes does not decode: {e}", self.key.len()),
        })
    }

    /// The operator's current event-time watermark for the current key:
    /// the live one, or after a restore the one its key group had reached
    /// while that is higher (a restored job judges lateness as before the
    /// crash, even before every input sent its first watermark).
    pub fn watermark(&self) -> i64 {
        if self.watermark >= self.restored_max {
            return self.watermark;
        }
        self.restored
            .get(&self.key_group)
            .map_or(self.watermark, |r| (*r).max(self.watermark))
    }

    /// An error of this operator (its uid and subtask) for `reason`: what
    /// an operator returns when a record or its own state cannot go on.
    pub fn failure(&self, reason: impl Into<String>) -> crate::WeirError {
        crate::WeirError::Operator {
            uid: self.uid.clone(),
            subtask: self.subtask,
            reason: reason.into(),
        }
    }

    /// Counts a record dropped as late (`weir_late_records_total`).
    pub fn count_late(&mut self) {
        self.late += 1;
    }

    pub(crate) fn take_late(&mut self) -> u64 {
        std::mem::take(&mut self.late)
    }

    /// Counts `n` rows dropped from state because their time ran out
    /// (`weir_state_expired_total`).
    pub fn count_expired(&mut self, n: u64) {
        self.expired += n;
    }

    pub(crate) fn take_expired(&mut self) -> u64 {
        std::mem::take(&mut self.expired)
    }

    /// A record no window takes any more, for the node's dead-letter topic
    /// (`late_to` in the job API); counted as dropped without one.
    pub fn late(&mut self, record: LateRecord) {
        self.late_records.push(record);
    }

    pub(crate) fn take_late_records(&mut self) -> Vec<LateRecord> {
        std::mem::take(&mut self.late_records)
    }

    fn store(&mut self) -> Result<&mut KeyedStore> {
        let uid = &self.uid;
        self.store.as_mut().ok_or_else(|| crate::WeirError::Task {
            task: uid.clone(),
            reason: "a stateless operator used keyed state (state needs a key_by before it)".into(),
        })
    }

    fn full_key(&mut self, table: Table, map_key: Option<&[u8]>) {
        key_prefix(self.key_group, table, &self.key, &mut self.scratch);
        if let Some(mk) = map_key {
            self.scratch.extend_from_slice(mk);
        }
    }

    fn get_at<T: StateCodec>(&mut self, table: Table, map_key: Option<&[u8]>) -> Result<Option<T>> {
        self.full_key(table, map_key);
        let key = std::mem::take(&mut self.scratch);
        let result = self
            .store()
            .and_then(|store| store.read_with(&key, |store, bytes| store.decode::<T>(&key, bytes)));
        self.scratch = key;
        result
    }

    fn put_at<T: StateCodec>(
        &mut self,
        table: Table,
        map_key: Option<&[u8]>,
        value: Option<&T>,
    ) -> Result<()> {
        self.encode_at(table, map_key, value, KeyedStore::write_slice)
    }

    /// The full key and `value`'s bytes (None: a delete), in the context's
    /// reused buffers, handed to `write` on the store.
    fn encode_at<T: StateCodec>(
        &mut self,
        table: Table,
        map_key: Option<&[u8]>,
        value: Option<&T>,
        write: impl FnOnce(&mut KeyedStore, &[u8], Option<&[u8]>) -> Result<()>,
    ) -> Result<()> {
        self.full_key(table, map_key);
        let key = std::mem::take(&mut self.scratch);
        let mut encoded = std::mem::take(&mut self.value);
        encoded.clear();
        if let Some(v) = value {
            v.encode(&mut encoded);
        }
        let bytes = value.map(|_| encoded.as_slice());
        let result = self.store().and_then(|s| write(s, &key, bytes));
        self.value = encoded;
        self.scratch = key;
        result
    }

    /// At a barrier, in `Operator::before_snapshot`: the current key's
    /// value in a value table (None: deleted), put straight into the
    /// coming snapshot and into the store only after the snapshot's copy
    /// (`KeyedStore::stage_for_snapshot`). For state an operator holds in
    /// memory and writes at every barrier; a read of the key before the
    /// snapshot does not see it, so the operator must answer for it from
    /// its memory until then.
    pub fn put_for_snapshot<T: StateCodec>(
        &mut self,
        table: Table,
        value: Option<&T>,
    ) -> Result<()> {
        self.encode_at(table, None, value, |store, key, bytes| {
            store.stage_for_snapshot(key, bytes);
            Ok(())
        })
    }

    /// The current key's value in a value table.
    pub fn get<T: StateCodec>(&mut self, table: Table) -> Result<Option<T>> {
        self.get_at(table, None)
    }

    /// The current key's value in a value table, decoded into `value`
    /// (reusing its buffers); false, with `value` untouched, if there is none.
    pub fn get_into<T: StateCodec>(&mut self, table: Table, value: &mut T) -> Result<bool> {
        self.full_key(table, None);
        let key = std::mem::take(&mut self.scratch);
        let result = self.store().and_then(|store| {
            store.read_with(&key, |store, bytes| {
                value
                    .decode_into(bytes)
                    .map_err(|e| store.corrupt(&key, format!("not a {}: {e}", T::NAME)))
            })
        });
        self.scratch = key;
        Ok(result?.is_some())
    }

    /// A read-modify-write of the current key's value in a value table,
    /// with one cache lookup: the value is decoded into `value` (reusing
    /// its buffers), `f` is told whether there was one and changes it, and
    /// what `f` returns decides the write ([`Write::Put`] encodes `value`).
    /// An `Err` from `f` is this operator's failure, the entry untouched.
    pub fn update<T: StateCodec, R>(
        &mut self,
        table: Table,
        value: &mut T,
        f: impl FnOnce(bool, &mut T) -> std::result::Result<(Write, R), String>,
    ) -> Result<R> {
        // A stateless operator's mistake, said as `store` says it.
        self.store()?;
        self.full_key(table, None);
        let key = std::mem::take(&mut self.scratch);
        let mut encoded = std::mem::take(&mut self.value);
        let mut result = None;
        let store = self.store.as_mut().expect("checked above");
        let outcome = store.update_slice(&key, &mut encoded, |bytes, buf| {
            let existed = match bytes {
                Some(b) => {
                    value
                        .decode_into(b)
                        .map_err(|e| UpdateFailed::Corrupt(format!("not a {}: {e}", T::NAME)))?;
                    true
                }
                None => false,
            };
            let (write, r) = f(existed, value).map_err(UpdateFailed::Failed)?;
            if write == Write::Put {
                value.encode(buf);
            }
            result = Some(r);
            Ok(write)
        });
        self.value = encoded;
        self.scratch = key;
        match outcome {
            Ok(_) => Ok(result.expect("set when the update succeeds")),
            // (The store reports a corrupt value as `Other`, naming the key.)
            Err(UpdateFailed::Failed(reason) | UpdateFailed::Corrupt(reason)) => {
                Err(self.failure(reason))
            }
            Err(UpdateFailed::Other(e)) => Err(e),
        }
    }

    pub fn put<T: StateCodec>(&mut self, table: Table, value: &T) -> Result<()> {
        self.put_at(table, None, Some(value))
    }

    pub fn delete(&mut self, table: Table) -> Result<()> {
        self.put_at::<Value>(table, None, None)
    }

    /// The current key's list in a list table (empty if none).
    pub fn list<T: StateCodec>(&mut self, table: Table) -> Result<Vec<T>> {
        Ok(self
            .get_at::<ListOf<T>>(table, None)?
            .map_or_else(Vec::new, |l| l.0))
    }

    pub fn set_list<T: StateCodec + Clone>(&mut self, table: Table, items: &[T]) -> Result<()> {
        if items.is_empty() {
            return self.delete(table);
        }
        self.put_at(table, None, Some(&ListOf(items.to_vec())))
    }

    /// One entry of the current key's map in a map table.
    pub fn map_get<T: StateCodec>(&mut self, table: Table, map_key: &[u8]) -> Result<Option<T>> {
        self.get_at(table, Some(map_key))
    }

    pub fn map_put<T: StateCodec>(
        &mut self,
        table: Table,
        map_key: &[u8],
        value: &T,
    ) -> Result<()> {
        self.put_at(table, Some(map_key), Some(value))
    }

    pub fn map_delete(&mut self, table: Table, map_key: &[u8]) -> Result<()> {
        self.put_at::<Value>(table, Some(map_key), None)
    }

    /// Every entry of the current key's map, in map-key byte order.
    pub fn map_entries<T: StateCodec>(&mut self, table: Table) -> Result<Vec<(Vec<u8>, T)>> {
        self.full_key(table, None);
        let prefix = self.scratch.clone();
        let store = self.store()?;
        let mut out = Vec::new();
        for (k, v) in store.scan(&prefix)? {
            let value = store.decode::<T>(&k, &v)?;
            out.push((k[prefix.len()..].to_vec(), value));
        }
        Ok(out)
    }

    /// The first `limit` entries of the current key's map whose map key is
    /// below `below` (all, with none), in map-key byte order: a range of
    /// an ordered map ([`crate::dataflow::ordered`]) without the rest.
    pub fn map_range<T: StateCodec>(
        &mut self,
        table: Table,
        below: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, T)>> {
        self.full_key(table, None);
        let prefix = self.scratch.clone();
        let bound = below.map(|b| [prefix.as_slice(), b].concat());
        let store = self.store()?;
        let mut out = Vec::new();
        for (k, v) in store.scan_range(&prefix, bound.as_deref(), limit)? {
            let value = store.decode::<T>(&k, &v)?;
            out.push((k[prefix.len()..].to_vec(), value));
        }
        Ok(out)
    }

    /// A timer for the current key at event time `time`; `tag` says what
    /// it is for (it comes back to [`Operator::on_timer`]).
    pub fn register_timer(&mut self, time: i64, tag: &[u8]) -> Result<()> {
        let payload = timer_payload(self.key_group, &self.key, tag);
        self.store()?.timers().register(time, payload);
        Ok(())
    }

    pub fn delete_timer(&mut self, time: i64, tag: &[u8]) -> Result<()> {
        let payload = timer_payload(self.key_group, &self.key, tag);
        self.store()?.timers().delete(time, &payload);
        Ok(())
    }
}

/// A list table's value: its items, each with its own codec's bytes.
struct ListOf<T>(Vec<T>);

impl<T: StateCodec> StateCodec for ListOf<T> {
    const NAME: &'static str = "list";

    fn encode(&self, out: &mut Vec<u8>) {
        super::codec::put_varint(self.0.len() as u64, out);
        let mut item = Vec::new();
        for x in &self.0 {
            item.clear();
            x.encode(&mut item);
            super::codec::put_varint(item.len() as u64, out);
            out.extend_from_slice(&item);
        }
    }

    fn decode(bytes: &[u8]) -> std::result::Result<Self, String> {
        let mut input = bytes;
        let n = super::codec::get_varint(&mut input)? as usize;
        let mut items = Vec::with_capacity(n.min(input.len()));
        for _ in 0..n {
            let len = super::codec::get_varint(&mut input)? as usize;
            if input.len() < len {
                return Err("a list item is cut short".into());
            }
            let (item, rest) = input.split_at(len);
            items.push(T::decode(item)?);
            input = rest;
        }
        Ok(ListOf(items))
    }
}

thread_local! {
    static TASK_WATERMARK: std::cell::Cell<i64> =
        const { std::cell::Cell::new(crate::time::MIN_WATERMARK) };
}

/// The watermark of the operator whose records this thread is running,
/// as the task runner set it before handing the operator a batch: what
/// SQL's `CURRENT_WATERMARK` reads. A task runs on one thread, so this is
/// the running operator's; [`crate::time::MIN_WATERMARK`] before its first
/// watermark (and outside a task, in a source's decoder).
pub fn task_watermark() -> i64 {
    TASK_WATERMARK.with(|w| w.get())
}

/// Sets what [`task_watermark`] returns on this thread.
pub(crate) fn set_task_watermark(watermark: i64) {
    TASK_WATERMARK.with(|w| w.set(watermark));
}

/// A node's logic. Every hook but `on_record` has a no-op default.
pub trait Operator: Send {
    /// One record on input `input` (0, or 1 for the second input of a
    /// two-input operator), in order. A keyed operator's context has the
    /// record's key set.
    fn on_record(
        &mut self,
        input: usize,
        record: Record,
        ctx: &mut Context,
        out: &mut Collector,
    ) -> Result<()>;

    /// A timer of the current key fired (the watermark passed `time`).
    fn on_timer(
        &mut self,
        _time: i64,
        _tag: &[u8],
        _ctx: &mut Context,
        _out: &mut Collector,
    ) -> Result<()> {
        Ok(())
    }

    /// The watermark advanced to `watermark`, after the timers it made due.
    fn on_watermark(
        &mut self,
        _watermark: i64,
        _ctx: &mut Context,
        _out: &mut Collector,
    ) -> Result<()> {
        Ok(())
    }

    /// After a restore, before the first record: what the operator keeps
    /// outside its tables (counts for metrics) it rebuilds here.
    fn on_restore(&mut self, _ctx: &mut Context) -> Result<()> {
        Ok(())
    }

    /// The checkpoint barrier is aligned: emit what belongs to this epoch.
    fn before_snapshot(&mut self, _ctx: &mut Context, _out: &mut Collector) -> Result<()> {
        Ok(())
    }

    /// What `GET /state/<uid>/<key>` shows for the current key. By
    /// default every table's entries, each decoded by its codec
    /// (`{"acc": ...}`).
    fn query(&mut self, _ctx: &mut Context) -> Result<Queried> {
        Ok(Queried::Tables)
    }
}

/// An operator's answer to an interactive query.
#[derive(Debug, Clone, PartialEq)]
pub enum Queried {
    /// Show the key's entries in every table.
    Tables,
    /// Show this (None: the operator holds nothing for the key).
    Value(Option<serde_json::Value>),
    /// The key's windows held in state, by start: `[start, end)` in ms and
    /// the results so far (`{"count": 3}`).
    Windows(Vec<(i64, i64, serde_json::Value)>),
}

/// Test support: drives an operator the way the task runner does, over a
/// store in a temporary directory, with no broker.
#[cfg(test)]
pub mod testing {
    use super::*;
    use crate::dataflow::codec::encode_key;
    use crate::dataflow::tables::TableSpec;

    /// Emitted rows as `+I1,a,_` (kind, then the values: `_` for NULL),
    /// for tests to compare at a glance.
    pub fn shown(rows: Vec<(Row, i64)>) -> Vec<String> {
        rows.into_iter()
            .map(|(r, _)| {
                let v: Vec<String> = r
                    .values
                    .iter()
                    .map(|v| match v {
                        Value::Null => "_".to_string(),
                        Value::Int(i) => i.to_string(),
                        Value::String(s) => s.clone(),
                        other => format!("{other:?}"),
                    })
                    .collect();
                format!("{}{}", r.kind.short(), v.join(","))
            })
            .collect()
    }

    pub struct Harness<O> {
        pub op: O,
        pub ctx: Context,
        pub key_columns: Vec<usize>,
        _dir: tempfile::TempDir,
    }

    impl<O: Operator> Harness<O> {
        /// A keyed operator with `tables`, keyed by `key_columns` of its input.
        pub fn keyed(op: O, tables: Vec<TableSpec>, key_columns: Vec<usize>) -> Self {
            let dir = tempfile::tempdir().expect("temp dir");
            let store = KeyedStore::open_empty("test", tables, &dir.path().join("db"), 10_000)
                .expect("open store");
            Self {
                op,
                ctx: Context::new("test", 0, Some(store)),
                key_columns,
                _dir: dir,
            }
        }

        /// One record on `input`; returns what was emitted.
        pub fn record(
            &mut self,
            input: usize,
            row: Row,
            timestamp: i64,
        ) -> Result<Vec<(Row, i64)>> {
            let mut key = Vec::new();
            encode_key(&row, &self.key_columns, &mut key);
            let kg = crate::state::key_groups::key_group(&key, 128);
            self.ctx.set_key(kg, &key);
            let mut out = Collector::new();
            self.op.on_record(
                input,
                Record {
                    row,
                    timestamp,
                    key_group: kg,
                    key: RecordKey::from_slice(&key),
                },
                &mut self.ctx,
                &mut out,
            )?;
            Ok(out.take())
        }

        /// A checkpoint's barrier: what the operator emits before its snapshot.
        /// `before_snapshot`, then the store takes what the operator staged
        /// for the snapshot, as the engine has it take it once the
        /// snapshot's copy is made.
        pub fn before_snapshot(&mut self) -> Result<Vec<(Row, i64)>> {
            let mut out = Collector::new();
            self.op.before_snapshot(&mut self.ctx, &mut out)?;
            if let Some(store) = self.ctx.store_mut() {
                store.apply_staged()?;
            }
            Ok(out.take())
        }

        /// The watermark moves to `watermark`: due timers fire, then `on_watermark`.
        pub fn watermark(&mut self, watermark: i64) -> Result<Vec<(Row, i64)>> {
            let mut out = Collector::new();
            self.ctx.set_watermark(watermark);
            for (time, payload) in self.ctx.pop_due_timers(watermark) {
                let tag = self.ctx.enter_timer(&payload).expect("timer payload");
                self.op.on_timer(time, &tag, &mut self.ctx, &mut out)?;
            }
            self.op.on_watermark(watermark, &mut self.ctx, &mut out)?;
            Ok(out.take())
        }
    }
}
