//! The Rust API for jobs, in the style of Kafka Streams' DSL and Flink's
//! DataStream API: streams are built from sources with `map`, `filter`,
//! `flat_map`, `key_by`, `window`, `aggregate`, `process`, `union`,
//! `connect` and `sink`, and [`JobBuilder::build`] yields the [`Graph`]
//! that `weir::run` runs.
//!
//! ```no_run
//! use weir::dataflow::prelude::*;
//! let job = JobBuilder::new("word-count");
//! job.source("lines", KafkaSource::text(&["lines"]))
//!     .flat_map("split", Schema::of(&[("word", DataType::String)]), |v, emit| {
//!         for w in v[0].as_str().unwrap_or("").split_whitespace() {
//!             emit(vec![Value::from(w.to_lowercase())]);
//!         }
//!     })
//!     .key_by(&["word"])
//!     .aggregate("counts", vec![Agg::count("count")])
//!     .sink("out", KafkaSink::upsert("counts", &["word"]));
//! let graph = job.build().unwrap();
//! ```
//!
//! Mistakes (a column that is not there, a uid used twice) are collected
//! and reported together by `build`, each naming the node.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use super::expr::Expr;
use super::graph::{
    Edge, EventTimeSpec, Exchange, Graph, KeyFormat, Node, NodeBody, NodeId, OperatorSpec,
    SinkMode, SinkSpec, SourceFormat, SourceSpec,
};
use super::operator::Operator;
use super::operator::RecordOrigin;
use super::ops::aggregate::{output_schema, Agg, AggregateEmit, GroupAggregate};
use super::ops::changelog_normalize::ChangelogNormalize;
use super::ops::deduplicate::Deduplicate;
use super::ops::join::{Join, JoinSpec};
use super::ops::over::{OverAggregate, OverCall, OverSpec};
use super::ops::over_table::{OverTable, OverTableSpec};
use super::ops::state_ttl::StateTtl;
use super::ops::stateless::{ChangeMap, Filter, FlatMap, Map, Union};
use super::ops::temporal_join::{TemporalJoin, TemporalJoinSpec};
use super::ops::top_n::{TopN, TopNSpec};
use super::ops::where_filter::WhereFilter;
use super::ops::window::WindowAggregate;
use super::ops::words::SplitWords;
use super::row::{DataType, Field, Schema, Value};
use super::tables::TableSpec;
use crate::config::{BadRecordPolicy, StartPosition};
use crate::error::{Result, WeirError};
use crate::window::assign::WindowSpec;

/// A Kafka source: its topics, how values decode, where to start, what to
/// do with bad records, and its event time.
#[derive(Debug, Clone)]
pub struct KafkaSource {
    topics: Vec<String>,
    format: SourceFormat,
    schema: Schema,
    start: StartPosition,
    on_bad_record: BadRecordPolicy,
    dead_letter_topic: Option<String>,
    event_time: Option<(Option<String>, Duration, Duration)>,
    /// The name of the origin column, if rows carry one.
    origin: Option<String>,
}

impl KafkaSource {
    /// UTF-8 text records: one column, `line`.
    pub fn text(topics: &[&str]) -> Self {
        Self::new(
            topics,
            SourceFormat::Text,
            Schema::of(&[("line", DataType::String)]),
        )
    }

    /// JSON objects decoded by `schema` (fields by name, missing ones NULL).
    pub fn json(topics: &[&str], schema: Schema) -> Self {
        Self::new(topics, SourceFormat::Json, schema)
    }

    /// Records decoded by `decoder` into rows of `schema`, each with the
    /// event time the decoder gives (it reads the time itself: the source's
    /// `event_time` then only sets the watermarks' bound and idleness).
    pub fn custom(
        topics: &[&str],
        schema: Schema,
        decoder: std::sync::Arc<dyn super::graph::RecordDecoder>,
    ) -> Self {
        Self::new(topics, SourceFormat::Custom(decoder), schema)
    }

    fn new(topics: &[&str], format: SourceFormat, schema: Schema) -> Self {
        Self {
            topics: topics.iter().map(|t| t.to_string()).collect(),
            format,
            schema,
            start: StartPosition::Earliest,
            on_bad_record: BadRecordPolicy::Fail,
            dead_letter_topic: None,
            event_time: None,
            origin: None,
        }
    }

    /// Each row gets a last column `column`, `ROW<key BYTES, topic
    /// VARCHAR, partition BIGINT, offset BIGINT>`: the Kafka record it was
    /// read from. Later operators pass it on like any column; a window's
    /// late records' dead letters name it (`WindowedStream::late_origin`).
    pub fn with_origin(mut self, column: &str) -> Self {
        self.origin = Some(column.into());
        self
    }

    /// The columns of its rows: the schema, then the origin column if any.
    pub fn columns(&self) -> Schema {
        let mut schema = self.schema.clone();
        if let Some(column) = &self.origin {
            let mut fields = schema.fields.clone();
            fields.push(Field::new(column, RecordOrigin::data_type()));
            schema = Schema::new(fields);
        }
        schema
    }

    pub fn start(mut self, start: StartPosition) -> Self {
        self.start = start;
        self
    }

    /// Bad records are skipped (counted and logged).
    pub fn skip_bad_records(mut self) -> Self {
        self.on_bad_record = BadRecordPolicy::Skip;
        self
    }

    /// Bad records go to `topic`, in the transaction of their epoch.
    pub fn dead_letter(mut self, topic: &str) -> Self {
        self.on_bad_record = BadRecordPolicy::DeadLetter;
        self.dead_letter_topic = Some(topic.into());
        self
    }

    /// Event time from the TIMESTAMP column `column`, with watermarks
    /// `max_out_of_orderness` behind the highest time seen per partition.
    pub fn event_time(mut self, column: &str, max_out_of_orderness: Duration) -> Self {
        self.event_time = Some((Some(column.into()), max_out_of_orderness, Duration::ZERO));
        self
    }

    /// Event time from the Kafka record timestamp.
    pub fn kafka_time(mut self, max_out_of_orderness: Duration) -> Self {
        self.event_time = Some((None, max_out_of_orderness, Duration::ZERO));
        self
    }

    /// A partition without records for this long stops holding the watermark back.
    pub fn idle_timeout(mut self, timeout: Duration) -> Self {
        if let Some(et) = &mut self.event_time {
            et.2 = timeout;
        }
        self
    }
}

/// A Kafka sink: its topic, changelog mode and key columns. Rows are
/// written as JSON objects of the input's columns.
#[derive(Debug, Clone)]
pub struct KafkaSink {
    topic: String,
    mode: SinkMode,
    key: Vec<String>,
    key_format: KeyFormat,
    on_too_large: BadRecordPolicy,
    dead_letter_topic: Option<String>,
    timestamps: bool,
    encoding: crate::dataflow::graph::SinkEncoding,
}

impl KafkaSink {
    /// Inserts only, keyed by `key` (may be empty: no Kafka key).
    pub fn append(topic: &str, key: &[&str]) -> Self {
        Self::new(topic, SinkMode::Append, key)
    }

    /// The latest row per `key`; deletes are tombstones.
    pub fn upsert(topic: &str, key: &[&str]) -> Self {
        Self::new(topic, SinkMode::Upsert, key)
    }

    /// Every change with an `"op"` field.
    pub fn changelog(topic: &str, key: &[&str]) -> Self {
        Self::new(topic, SinkMode::Changelog, key)
    }

    /// Every change in Debezium's `{"before","after","op"}` envelope.
    pub fn debezium(topic: &str, key: &[&str]) -> Self {
        Self::new(topic, SinkMode::Debezium, key)
    }

    /// Each new result (insert or update-after) as a value keyed by
    /// `key`; update-befores and deletes are not written. The TOML
    /// pipelines' output: a window's result names its window in the value,
    /// so a tombstone for the key alone would delete every window's.
    pub fn results(topic: &str, key: &[&str]) -> Self {
        Self::new(topic, SinkMode::Results, key)
    }

    fn new(topic: &str, mode: SinkMode, key: &[&str]) -> Self {
        Self {
            topic: topic.into(),
            mode,
            key: key.iter().map(|k| k.to_string()).collect(),
            key_format: KeyFormat::Json,
            on_too_large: BadRecordPolicy::Fail,
            dead_letter_topic: None,
            timestamps: true,
            encoding: Default::default(),
        }
    }

    /// Values (and keys) in another format than JSON: encoders from
    /// [`crate::format`] (Avro, Protobuf, CSV, ...), each given the
    /// value's columns (the key's: the key columns).
    pub fn encoded(mut self, encoding: crate::dataflow::graph::SinkEncoding) -> Self {
        self.encoding = encoding;
        self
    }

    /// Without the rows' event times as the records' Kafka timestamps
    /// (the producer stamps them): results go out in batch calls, which
    /// costs less per record.
    pub fn without_timestamps(mut self) -> Self {
        self.timestamps = false;
        self
    }

    /// A result over the broker's `message.max.bytes` is counted and
    /// skipped, with a warning naming its key, instead of stopping the job.
    pub fn skip_too_large(mut self) -> Self {
        self.on_too_large = BadRecordPolicy::Skip;
        self
    }

    /// A result over the broker's `message.max.bytes` is described (its
    /// key, its size, the sink's topic) in `topic`, instead of stopping
    /// the job.
    pub fn too_large_to(mut self, topic: &str) -> Self {
        self.on_too_large = BadRecordPolicy::DeadLetter;
        self.dead_letter_topic = Some(topic.into());
        self
    }

    /// The Kafka key is the one key column's value as text (`hello`), not
    /// a JSON object (`{"word":"hello"}`).
    pub fn raw_key(mut self) -> Self {
        self.key_format = KeyFormat::Raw;
        self
    }
}

#[derive(Default)]
struct Inner {
    nodes: Vec<Node>,
    edges: Vec<Edge>,
    problems: Vec<String>,
}

/// Builds one job's graph.
#[derive(Clone)]
pub struct JobBuilder {
    name: String,
    inner: Rc<RefCell<Inner>>,
}

/// A stream of rows out of one node.
#[derive(Clone)]
pub struct Stream {
    job: JobBuilder,
    node: NodeId,
}

/// A stream partitioned by key columns: what keyed operators consume.
#[derive(Clone)]
pub struct KeyedStream {
    stream: Stream,
    key: Vec<usize>,
    /// How long a key's state outlives its last write, in event time
    /// ([`KeyedStream::with_state_ttl`]).
    state_ttl: Option<StateTtl>,
}

/// A keyed stream cut into windows of event time.
#[derive(Clone)]
pub struct WindowedStream {
    keyed: KeyedStream,
    spec: WindowSpec,
    allowed_lateness: i64,
    late_topic: Option<String>,
    every_update: bool,
    late_value: Option<usize>,
    late_origin: Option<usize>,
    given: Option<(usize, usize)>,
}

/// Two keyed streams into one two-input operator (joins, co-processing).
pub struct ConnectedStreams {
    first: KeyedStream,
    second: KeyedStream,
}

impl JobBuilder {
    pub fn new(name: &str) -> Self {
        Self {
            name: name.into(),
            inner: Default::default(),
        }
    }

    fn add(
        &self,
        uid: &str,
        kind: &str,
        schema: Schema,
        body: NodeBody,
        inputs: &[(NodeId, usize, Exchange)],
    ) -> NodeId {
        let mut inner = self.inner.borrow_mut();
        let id = inner.nodes.len();
        inner.nodes.push(Node {
            uid: uid.into(),
            kind: kind.into(),
            schema,
            body,
        });
        for (from, port, exchange) in inputs {
            inner.edges.push(Edge {
                from: *from,
                to: id,
                port: *port,
                exchange: exchange.clone(),
            });
        }
        id
    }

    fn problem(&self, p: String) {
        self.inner.borrow_mut().problems.push(p);
    }

    fn schema(&self, node: NodeId) -> Schema {
        self.inner.borrow().nodes[node].schema.clone()
    }

    /// A source node reading `source`'s topics.
    pub fn source(&self, uid: &str, source: KafkaSource) -> Stream {
        let event_time = source.event_time.as_ref().and_then(|(column, ooo, idle)| {
            let column = match column {
                None => None,
                Some(c) => match source.schema.index_of(c) {
                    Some(i) if source.schema.fields[i].data_type.is_timestamp() => Some(i),
                    Some(_) => {
                        self.problem(format!(
                            "source {uid:?}: event-time column {c:?} is not TIMESTAMP(3)"
                        ));
                        return None;
                    }
                    None => {
                        self.problem(format!(
                            "source {uid:?}: event-time column {c:?} is not in its schema ({})",
                            source.schema
                        ));
                        return None;
                    }
                },
            };
            Some(EventTimeSpec {
                column,
                max_out_of_orderness_ms: ooo.as_millis() as i64,
                idle_timeout_ms: idle.as_millis() as u64,
            })
        });
        let schema = source.columns();
        let spec = SourceSpec {
            topics: source.topics,
            format: source.format,
            start: source.start,
            on_bad_record: source.on_bad_record,
            dead_letter_topic: source.dead_letter_topic,
            event_time,
            origin: source.origin.is_some(),
        };
        let node = self.add(uid, "kafka-source", schema, NodeBody::Source(spec), &[]);
        Stream {
            job: self.clone(),
            node,
        }
    }

    /// The graph, or every problem found while building it.
    pub fn build(self) -> Result<Graph> {
        let inner = self.inner.borrow();
        let graph = Graph {
            name: self.name.clone(),
            nodes: inner.nodes.clone(),
            edges: inner.edges.clone(),
        };
        let mut problems = inner.problems.clone();
        problems.extend(graph.validate());
        if problems.is_empty() {
            Ok(graph)
        } else {
            Err(WeirError::Graph {
                job: self.name.clone(),
                problems,
            })
        }
    }
}

fn stateless(op: impl Operator + Clone + Sync + 'static) -> NodeBody {
    NodeBody::Operator(OperatorSpec {
        factory: Arc::new(move || Box::new(op.clone())),
        inputs: 1,
        keyed: false,
        tables: Vec::new(),
        late_topic: None,
    })
}

impl Clone for Map {
    fn clone(&self) -> Self {
        Map(self.0.clone())
    }
}
impl Clone for Filter {
    fn clone(&self) -> Self {
        Filter(self.0.clone())
    }
}
impl Clone for FlatMap {
    fn clone(&self) -> Self {
        FlatMap(self.0.clone())
    }
}
impl Clone for Union {
    fn clone(&self) -> Self {
        Union
    }
}

impl Stream {
    pub fn schema(&self) -> Schema {
        self.job.schema(self.node)
    }

    fn then(&self, uid: &str, kind: &str, schema: Schema, body: NodeBody) -> Stream {
        let node = self.job.add(
            uid,
            kind,
            schema,
            body,
            &[(self.node, 0, Exchange::Forward)],
        );
        Stream {
            job: self.job.clone(),
            node,
        }
    }

    /// New values per row, of `schema` (the row's kind is kept).
    pub fn map(
        &self,
        uid: &str,
        schema: Schema,
        f: impl Fn(&[Value]) -> Vec<Value> + Send + Sync + 'static,
    ) -> Stream {
        self.then(uid, "map", schema, stateless(Map(Arc::new(f))))
    }

    /// A stateless operator of your own, of `kind`, whose output rows
    /// have `schema`; the records it sets aside
    /// ([`super::operator::Context::late`]) go to
    /// `dead_letters` (or are dropped and counted without it).
    pub fn stateless(
        &self,
        uid: &str,
        kind: &str,
        schema: Schema,
        op: impl Operator + Clone + Sync + 'static,
        dead_letters: Option<String>,
    ) -> Stream {
        let mut body = stateless(op);
        if let NodeBody::Operator(spec) = &mut body {
            spec.late_topic = dead_letters;
        }
        self.then(uid, kind, schema, body)
    }

    /// [`Stream::map`] over an updating stream: an update that maps to
    /// the row its old row mapped to is dropped ([`ChangeMap`]).
    pub fn map_changes(
        &self,
        uid: &str,
        schema: Schema,
        f: impl Fn(&[Value]) -> Vec<Value> + Send + Sync + 'static,
    ) -> Stream {
        self.then(uid, "map", schema, stateless(ChangeMap::new(Arc::new(f))))
    }

    /// The rows `f` holds for.
    pub fn filter(
        &self,
        uid: &str,
        f: impl Fn(&[Value]) -> bool + Send + Sync + 'static,
    ) -> Stream {
        let schema = self.schema();
        self.then(uid, "filter", schema, stateless(Filter(Arc::new(f))))
    }

    /// The rows for which `predicate` is TRUE (SQL's `WHERE`: NULL and
    /// FALSE drop a row). Its columns and types are checked now.
    pub fn filter_where(&self, uid: &str, predicate: Expr) -> Stream {
        let schema = self.schema();
        let predicate = match predicate.compile(&schema) {
            Ok((p, Some(DataType::Boolean) | None)) => p,
            Ok((_, Some(t))) => {
                self.job
                    .problem(format!("filter {uid:?}: the predicate is {t}, not BOOLEAN"));
                Arc::new(|_: &[Value]| Ok(Value::Bool(false)))
            }
            Err(e) => {
                self.job.problem(format!("filter {uid:?}: {e}"));
                Arc::new(|_: &[Value]| Ok(Value::Bool(false)))
            }
        };
        self.then(uid, "filter", schema, stateless(WhereFilter { predicate }))
    }

    /// One row per word of the text column `column`, lower-cased, in a
    /// column named `as_name`, then the row's other columns (what the TOML
    /// word count splits by).
    pub fn split_words(&self, uid: &str, column: &str, as_name: &str) -> Stream {
        let column = match self.schema().index_of(column) {
            Some(c) => c,
            None => {
                self.job.problem(format!(
                    "split_words {uid:?}: column {column:?} is not in {}",
                    self.schema()
                ));
                0
            }
        };
        let input = self.schema();
        let mut fields = vec![Field::new(as_name, DataType::String)];
        fields.extend(
            (0..input.len())
                .filter(|i| *i != column)
                .map(|i| input.fields[i].clone()),
        );
        self.then(
            uid,
            "split-words",
            Schema::new(fields),
            stateless(SplitWords { column }),
        )
    }

    /// Any number of rows of `schema` per row.
    pub fn flat_map(
        &self,
        uid: &str,
        schema: Schema,
        f: impl Fn(&[Value], &mut dyn FnMut(Vec<Value>)) + Send + Sync + 'static,
    ) -> Stream {
        self.then(uid, "flat-map", schema, stateless(FlatMap(Arc::new(f))))
    }

    /// Partitions the stream by `columns`: each key's rows go to one subtask.
    pub fn key_by(&self, columns: &[&str]) -> KeyedStream {
        let schema = self.schema();
        let key = match schema.indexes_of(columns) {
            Ok(k) => k,
            Err(e) => {
                self.job.problem(format!(
                    "key_by after {:?}: {e}",
                    self.job.inner.borrow().nodes[self.node].uid
                ));
                Vec::new()
            }
        };
        KeyedStream {
            stream: self.clone(),
            key,
            state_ttl: None,
        }
    }

    /// Keyed by the columns at `columns` (names can be ambiguous after a
    /// join; the planner knows the positions).
    pub(crate) fn key_by_indexes(&self, columns: Vec<usize>) -> KeyedStream {
        let len = self.schema().len();
        if columns.is_empty() || columns.iter().any(|c| *c >= len) {
            self.job.problem(format!(
                "key_by: columns {columns:?} are not all in the stream"
            ));
        }
        KeyedStream {
            stream: self.clone(),
            key: columns,
            state_ttl: None,
        }
    }

    /// This stream and `others` (of the same schema) as one.
    pub fn union(&self, uid: &str, others: &[Stream]) -> Stream {
        let schema = self.schema();
        let mut inputs = vec![(self.node, 0, Exchange::Forward)];
        for o in others {
            if o.schema() != schema {
                self.job.problem(format!(
                    "union {uid:?}: schemas differ ({schema} and {})",
                    o.schema()
                ));
            }
            inputs.push((o.node, 0, Exchange::Forward));
        }
        let node = self
            .job
            .add(uid, "union", schema, stateless(Union), &inputs);
        Stream {
            job: self.job.clone(),
            node,
        }
    }

    /// Two keyed streams into one two-input operator.
    pub fn connect(first: KeyedStream, second: KeyedStream) -> ConnectedStreams {
        ConnectedStreams { first, second }
    }

    /// Names what this stream's node is, as checkpoints record it (the
    /// TOML pipelines mark their keyed node, which `weir state` then shows
    /// as the pipeline's output).
    pub(crate) fn with_kind(self, kind: &str) -> Self {
        self.job.inner.borrow_mut().nodes[self.node].kind = kind.into();
        self
    }

    /// Writes the stream to Kafka.
    pub fn sink(&self, uid: &str, sink: KafkaSink) {
        let schema = self.schema();
        let key = match schema.indexes_of(&sink.key.iter().map(String::as_str).collect::<Vec<_>>())
        {
            Ok(k) => k,
            Err(e) => {
                self.job.problem(format!("sink {uid:?} key: {e}"));
                Vec::new()
            }
        };
        let spec = SinkSpec {
            topic: sink.topic,
            mode: sink.mode,
            key,
            key_format: sink.key_format,
            on_too_large: sink.on_too_large,
            dead_letter_topic: sink.dead_letter_topic,
            timestamps: sink.timestamps,
            encoding: sink.encoding,
        };
        self.then(uid, "kafka-sink", schema, NodeBody::Sink(spec));
    }
}

impl KeyedStream {
    /// The state of the operator after this goes per key once the
    /// watermark passes the key's last write plus `ttl` ([`StateTtl`]):
    /// for running aggregates, running top-N, deduplication, normalized
    /// upserts and OVER kept current. Nothing is emitted when a key's
    /// state goes; its next row starts from nothing.
    pub fn with_state_ttl(mut self, ttl: Option<StateTtl>) -> Self {
        self.state_ttl = ttl;
        self
    }

    /// `tables`, and the TTL's table after them when there is a TTL.
    fn with_ttl_table(&self, mut tables: Vec<TableSpec>) -> Vec<TableSpec> {
        if self.state_ttl.is_some() {
            tables.push(StateTtl::table());
        }
        tables
    }

    fn keyed(&self, uid: &str, kind: &str, schema: Schema, op: OperatorSpec) -> Stream {
        let job = &self.stream.job;
        let node = job.add(
            uid,
            kind,
            schema,
            NodeBody::Operator(op),
            &[(self.stream.node, 0, Exchange::Hash(self.key.clone()))],
        );
        Stream {
            job: job.clone(),
            node,
        }
    }

    fn check_aggs(&self, uid: &str, aggs: &[Agg]) {
        let schema = self.stream.schema();
        for a in aggs {
            if a.column.is_some_and(|c| c >= schema.len()) {
                self.stream.job.problem(format!(
                    "aggregate {uid:?}: {} reads column {:?}, which is not in {schema}",
                    a.name, a.column
                ));
            }
        }
    }

    /// A running aggregate per key: an updating result of the key columns
    /// and one column per aggregate.
    pub fn aggregate(&self, uid: &str, aggs: Vec<Agg>) -> Stream {
        self.aggregate_emitting(uid, aggs, AggregateEmit::default())
    }

    /// As [`KeyedStream::aggregate`], emitting as `emit` says (after every
    /// row, or per checkpoint for each changed key).
    pub fn aggregate_emitting(&self, uid: &str, aggs: Vec<Agg>, emit: AggregateEmit) -> Stream {
        self.check_aggs(uid, &aggs);
        let schema = output_schema(&self.stream.schema(), &self.key, false, &aggs);
        let kind = format!(
            "aggregate/{}",
            aggs.iter()
                .map(|a| a.function.name())
                .collect::<Vec<_>>()
                .join(",")
        );
        let key = self.key.clone();
        let ttl = self.state_ttl;
        let op = OperatorSpec {
            factory: Arc::new(move || {
                Box::new(
                    GroupAggregate::with_emit(aggs.clone(), key.clone(), emit).with_state_ttl(ttl),
                )
            }),
            inputs: 1,
            keyed: true,
            tables: self.with_ttl_table(GroupAggregate::tables()),
            late_topic: None,
        };
        self.keyed(uid, &kind, schema, op)
    }

    /// The first row of each key; later ones are dropped.
    pub fn deduplicate(&self, uid: &str) -> Stream {
        let ttl = self.state_ttl;
        let op = OperatorSpec {
            factory: Arc::new(move || Box::new(Deduplicate::new(ttl))),
            inputs: 1,
            keyed: true,
            tables: Deduplicate::tables(),
            late_topic: None,
        };
        self.keyed(uid, "deduplicate", self.stream.schema(), op)
    }

    /// The rows of an upsert stream (each row replaces its key's, a
    /// delete removes it) as whole changes: inserts, update-before and
    /// update-after pairs, deletes of the row the key had.
    pub fn normalize_upserts(&self, uid: &str) -> Stream {
        let ttl = self.state_ttl;
        let op = OperatorSpec {
            factory: Arc::new(move || Box::new(ChangelogNormalize::new(ttl))),
            inputs: 1,
            keyed: true,
            tables: self.with_ttl_table(ChangelogNormalize::tables()),
            late_topic: None,
        };
        self.keyed(uid, "changelog-normalize", self.stream.schema(), op)
    }

    /// The best `spec.limit` rows per key by `spec.order` ([`TopN`]), each
    /// with its rank (BIGINT, from 1) as a last column named `rank_as`.
    pub fn top_n(&self, uid: &str, spec: TopNSpec, rank_as: &str) -> Stream {
        let mut schema = self.stream.schema();
        if spec.order.iter().any(|k| k.column >= schema.len()) || spec.limit == 0 {
            self.stream.job.problem(format!(
                "top_n {uid:?}: order columns must be in {schema} and the limit at least 1"
            ));
        }
        let kind = if spec.window_end.is_some() {
            "window-top-n"
        } else {
            "top-n"
        };
        schema.fields.push(Field::new(rank_as, DataType::BigInt));
        // Per window, state goes when the window fires.
        let ttl = self.state_ttl.filter(|_| spec.window_end.is_none());
        let mut tables = TopN::tables(spec.retract);
        if ttl.is_some() {
            tables.push(StateTtl::table());
        }
        let op = OperatorSpec {
            factory: Arc::new(move || Box::new(TopN::new(spec.clone()).with_state_ttl(ttl))),
            inputs: 1,
            keyed: true,
            tables,
            late_topic: None,
        };
        self.keyed(uid, kind, schema, op)
    }

    /// OVER aggregations per key ([`OverAggregate`]): each row once, in
    /// event-time order, with one more column per call, of `schema`.
    pub fn over_aggregate(&self, uid: &str, spec: OverSpec, schema: Schema) -> Stream {
        if spec
            .calls
            .iter()
            .any(|c| matches!(c, OverCall::Lead { .. }))
        {
            self.stream.job.problem(format!(
                "over_aggregate {uid:?}: LEAD reads rows after the current one, which this operator emits once: use over_table"
            ));
        }
        let op = OperatorSpec {
            factory: Arc::new(move || Box::new(OverAggregate::new(spec.clone()))),
            inputs: 1,
            keyed: true,
            tables: OverAggregate::tables(),
            late_topic: None,
        };
        self.keyed(uid, "over-aggregate", schema, op)
    }

    /// OVER aggregations per key kept current over an input that takes
    /// rows back, or with LEAD ([`OverTable`]): each row with one more
    /// column per call, of `schema`, updated when a row its calls reach
    /// comes or goes. The output takes rows back.
    pub fn over_table(&self, uid: &str, spec: OverTableSpec, schema: Schema) -> Stream {
        let width = self.stream.schema().len();
        let ttl = self.state_ttl;
        let op = OperatorSpec {
            factory: Arc::new(move || {
                Box::new(OverTable::new(spec.clone(), width).with_state_ttl(ttl))
            }),
            inputs: 1,
            keyed: true,
            tables: self.with_ttl_table(OverTable::tables()),
            late_topic: None,
        };
        self.keyed(uid, "over-table", schema, op)
    }

    /// Windows of event time per key.
    pub fn window(&self, spec: WindowSpec) -> WindowedStream {
        if let Err(e) = spec.validate() {
            self.stream.job.problem(format!("window: {e}"));
        }
        WindowedStream {
            keyed: self.clone(),
            spec,
            allowed_lateness: 0,
            late_topic: None,
            every_update: false,
            late_value: None,
            late_origin: None,
            given: None,
        }
    }

    /// Windows given by each row's own `start` and `end` TIMESTAMP
    /// columns (a window aggregate's result): a window aggregate over
    /// them keeps those windows and emits when the watermark passes each
    /// window's end.
    pub fn window_by_columns(&self, start: &str, end: &str) -> WindowedStream {
        let schema = self.stream.schema();
        let given = match (schema.index_of(start), schema.index_of(end)) {
            (Some(s), Some(e))
                if schema.fields[s].data_type.is_timestamp()
                    && schema.fields[e].data_type.is_timestamp() =>
            {
                Some((s, e))
            }
            _ => {
                self.stream.job.problem(format!(
                    "window_by_columns: {start:?} and {end:?} must be TIMESTAMP(3) columns of {schema}"
                ));
                None
            }
        };
        let mut w = self.window(WindowSpec::Tumbling { size: 1, offset: 0 });
        w.given = given;
        w
    }

    /// A keyed operator of your own, with `tables` for its state and
    /// timers; its output rows have `schema`.
    pub fn process<O: Operator + 'static>(
        &self,
        uid: &str,
        schema: Schema,
        tables: Vec<TableSpec>,
        factory: impl Fn() -> O + Send + Sync + 'static,
    ) -> Stream {
        let op = OperatorSpec {
            factory: Arc::new(move || Box::new(factory())),
            inputs: 1,
            keyed: true,
            tables,
            late_topic: None,
        };
        self.keyed(uid, "process", schema, op)
    }
}

impl WindowedStream {
    /// Windows take records for `lateness` after their end: each such
    /// record updates the window's result (update-before, update-after).
    pub fn allowed_lateness(mut self, lateness: Duration) -> Self {
        self.allowed_lateness = lateness.as_millis() as i64;
        self
    }

    /// Records no window takes any more go to `topic` (as JSON, with the
    /// window, event time and watermark in `weir.late.*` headers), in the
    /// transaction of their epoch; without it they are dropped and counted.
    pub fn late_to(mut self, topic: &str) -> Self {
        self.late_topic = Some(topic.to_string());
        self
    }

    /// With `every_update`, each record emits its window's result so far
    /// (an insert, then update-afters), not one result when it closes.
    pub fn every_update(mut self, every_update: bool) -> Self {
        self.every_update = every_update;
        self
    }

    /// A late record's dead letter carries the bytes of `column` (the
    /// record as it was read) instead of the row as JSON.
    pub fn late_value(mut self, column: &str) -> Self {
        match self.keyed.stream.schema().index_of(column) {
            Some(c) => self.late_value = Some(c),
            None => self.keyed.stream.job.problem(format!(
                "late_value: column {column:?} is not in {}",
                self.keyed.stream.schema()
            )),
        }
        self
    }

    /// A late record's dead letter carries the Kafka key of the record in
    /// origin column `column` (`KafkaSource::with_origin`) and names its
    /// topic, partition and offset in `weir.source.*` headers.
    pub fn late_origin(mut self, column: &str) -> Self {
        let schema = self.keyed.stream.schema();
        match schema.index_of(column) {
            Some(c) if schema.fields[c].data_type == RecordOrigin::data_type() => {
                self.late_origin = Some(c)
            }
            Some(_) => self.keyed.stream.job.problem(format!(
                "late_origin: column {column:?} is not a source's origin column (with_origin)"
            )),
            None => self
                .keyed
                .stream
                .job
                .problem(format!("late_origin: column {column:?} is not in {schema}")),
        }
        self
    }

    /// One row per key and window when the watermark passes its end: key
    /// columns, `window_start`, `window_end`, then the aggregates.
    pub fn aggregate(&self, uid: &str, aggs: Vec<Agg>) -> Stream {
        self.keyed.check_aggs(uid, &aggs);
        let input = self.keyed.stream.schema();
        let schema = output_schema(&input, &self.keyed.key, true, &aggs);
        let (spec, allowed_lateness) = (self.spec, self.allowed_lateness);
        let (every_update, late_value, late_origin, given) = (
            self.every_update,
            self.late_value,
            self.late_origin,
            self.given,
        );
        let op = OperatorSpec {
            factory: Arc::new(move || {
                Box::new(WindowAggregate {
                    spec,
                    aggs: aggs.clone(),
                    allowed_lateness,
                    input: input.clone(),
                    every_update,
                    late_value,
                    late_origin,
                    given,
                })
            }),
            inputs: 1,
            keyed: true,
            tables: WindowAggregate::tables(),
            late_topic: self.late_topic.clone(),
        };
        self.keyed.keyed(uid, "window-aggregate", schema, op)
    }
}

impl ConnectedStreams {
    /// The first stream's rows joined with the second's, a table's
    /// changelog keyed by its primary key, as the table was at each row's
    /// event time, or at its arrival ([`TemporalJoin`]): the first
    /// stream's columns, then the table's.
    pub fn temporal_join(self, uid: &str, mut spec: TemporalJoinSpec) -> Stream {
        let (a, b) = (self.first.stream.schema(), self.second.stream.schema());
        spec.keys = [self.first.key.clone(), self.second.key.clone()];
        spec.widths = [a.len(), b.len()];
        let kind = if spec.event_time {
            "temporal-join"
        } else {
            "lookup-join"
        };
        let schema = joined_schema(&a, &b);
        self.process(uid, schema, TemporalJoin::tables(), move || {
            TemporalJoin::new(spec.clone())
        })
        .with_kind(kind)
    }

    /// The equi-join of the two streams on their keys ([`Join`]): rows of
    /// the first stream's columns, then the second's. `spec`'s keys are
    /// taken from the two keyed streams.
    pub fn join(self, uid: &str, mut spec: JoinSpec) -> Stream {
        let (a, b) = (self.first.stream.schema(), self.second.stream.schema());
        spec.keys = [self.first.key.clone(), self.second.key.clone()];
        spec.widths = [a.len(), b.len()];
        // A semi- or anti-join gives the left rows alone.
        let schema = if spec.kind.filters_left() {
            a.clone()
        } else {
            joined_schema(&a, &b)
        };
        // A join whose rows expire by the watermark is an interval join
        // (a window join is one whose bounds are the windows).
        let kind = format!(
            "{}join/{}",
            if spec.bounded() { "interval-" } else { "" },
            spec.kind.name().replace(' ', "-")
        );
        let tables = Join::tables();
        self.process(uid, schema, tables, move || Join::new(spec.clone()))
            .with_kind(&kind)
    }

    /// A keyed two-input operator: `on_record`'s `input` is 0 for the first
    /// stream and 1 for the second. Both keys must have the same types, so
    /// that equal keys meet in one subtask.
    pub fn process<O: Operator + 'static>(
        self,
        uid: &str,
        schema: Schema,
        tables: Vec<TableSpec>,
        factory: impl Fn() -> O + Send + Sync + 'static,
    ) -> Stream {
        let (a, b) = (self.first.stream.schema(), self.second.stream.schema());
        let types = |s: &Schema, k: &[usize]| {
            k.iter()
                .map(|c| s.fields[*c].data_type.clone())
                .collect::<Vec<_>>()
        };
        if types(&a, &self.first.key) != types(&b, &self.second.key) {
            self.first.stream.job.problem(format!(
                "connect {uid:?}: the two keys have different types"
            ));
        }
        let job = self.first.stream.job.clone();
        let op = OperatorSpec {
            factory: Arc::new(move || Box::new(factory())),
            inputs: 2,
            keyed: true,
            tables,
            late_topic: None,
        };
        let node = job.add(
            uid,
            "co-process",
            schema,
            NodeBody::Operator(op),
            &[
                (
                    self.first.stream.node,
                    0,
                    Exchange::Hash(self.first.key.clone()),
                ),
                (
                    self.second.stream.node,
                    1,
                    Exchange::Hash(self.second.key.clone()),
                ),
            ],
        );
        Stream { job, node }
    }
}

/// The columns of `a`, then `b`'s; a name both have is told apart by a
/// suffix on the second (`date_time_2`).
fn joined_schema(a: &Schema, b: &Schema) -> Schema {
    let mut fields = a.fields.clone();
    for f in &b.fields {
        let mut f = f.clone();
        let base = f.name.clone();
        let mut n = 2;
        while fields.iter().any(|x| x.name == f.name) {
            f.name = format!("{base}_{n}");
            n += 1;
        }
        fields.push(f);
    }
    Schema::new(fields)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataflow::ops::aggregate::AggFunction;

    fn words(job: &JobBuilder) -> Stream {
        job.source("lines", KafkaSource::text(&["lines"])).flat_map(
            "split",
            Schema::of(&[("word", DataType::String)]),
            |v, emit| {
                for w in v[0].as_str().unwrap_or("").split_whitespace() {
                    emit(vec![Value::from(w)]);
                }
            },
        )
    }

    #[test]
    fn a_two_stage_job_has_three_stages_with_chained_steps() {
        let job = JobBuilder::new("j");
        let counts = words(&job)
            .key_by(&["word"])
            .window(WindowSpec::Tumbling {
                size: 1000,
                offset: 0,
            })
            .aggregate("counts", vec![Agg::count("n")]);
        counts
            .key_by(&["window_start", "n"])
            .aggregate("dist", vec![Agg::count("keys")])
            .sink("out", KafkaSink::upsert("out", &["window_start", "n"]));
        let g = job.build().unwrap();
        let stages: Vec<Vec<&str>> = g
            .stages()
            .iter()
            .map(|s| s.nodes.iter().map(|n| g.nodes[*n].uid.as_str()).collect())
            .collect();
        assert_eq!(
            stages,
            vec![vec!["lines", "split"], vec!["counts"], vec!["dist", "out"]]
        );
        assert_eq!(
            g.nodes[3].schema.to_string(),
            "window_start TIMESTAMP(3), n BIGINT, keys BIGINT"
        );
        let text = g.describe();
        assert!(
            text.contains("counts (window-aggregate) <- split[0] hash(word)"),
            "{text}"
        );
    }

    #[test]
    fn mistakes_are_reported_together_by_node() {
        let job = JobBuilder::new("j");
        let w = words(&job);
        w.key_by(&["nope"]).aggregate(
            "a",
            vec![Agg {
                function: AggFunction::Sum,
                column: Some(9),
                name: "s".into(),
                distinct: false,
                user: None,
            }],
        );
        w.sink("split", KafkaSink::upsert("out", &[]));
        let e = job.build().err().expect("refused").to_string();
        assert!(e.contains("no column \"nope\""), "{e}");
        assert!(e.contains("column Some(9)"), "{e}");
        assert!(e.contains("uid \"split\" is used by nodes"), "{e}");
        assert!(e.contains("upsert sink \"split\" needs key columns"), "{e}");
    }

    #[test]
    fn a_keyed_operator_on_a_forward_edge_is_refused() {
        let job = JobBuilder::new("j");
        let w = words(&job);
        // Built by hand: the API never makes this edge.
        let spec = OperatorSpec {
            factory: Arc::new(|| Box::new(GroupAggregate::new(vec![], vec![]))),
            inputs: 1,
            keyed: true,
            tables: vec![],
            late_topic: None,
        };
        let s = w.then("agg", "aggregate", w.schema(), NodeBody::Operator(spec));
        s.sink("out", KafkaSink::append("o", &[]));
        let e = job.build().err().unwrap().to_string();
        assert!(
            e.contains("keyed operator \"agg\" needs its inputs keyed"),
            "{e}"
        );
    }
}
