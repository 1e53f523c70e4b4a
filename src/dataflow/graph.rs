//! The job graph: nodes are sources, operators and sinks with stable uids;
//! edges are `forward` or `hash(key columns)`. The runtime cuts the graph
//! into stages where rows change hands (a hash edge, or a node with several
//! inputs); everything joined by forward edges inside a stage chains into
//! one task, as Flink chains operators.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::operator::Operator;
use super::row::{Field, Schema};
use super::tables::TableSpec;
use crate::checkpoint::metadata::{KeyColumn, OperatorInfo, StateInfo, TableInfo};
use crate::checkpoint::Topology;
use crate::config::{BadRecordPolicy, StartPosition};

pub type NodeId = usize;

/// How rows cross an edge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exchange {
    /// Subtask i to subtask i; chained when it can be.
    Forward,
    /// By the key group of these columns (of the upstream schema).
    Hash(Vec<usize>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edge {
    pub from: NodeId,
    pub to: NodeId,
    /// 0, or 1 for the second input of a two-input operator.
    pub port: usize,
    pub exchange: Exchange,
}

/// How a source decodes Kafka record values.
#[derive(Clone)]
pub enum SourceFormat {
    /// UTF-8 text: one VARCHAR column, `line`.
    Text,
    /// A JSON object per record, decoded by the schema ([`super::json`]).
    Json,
    /// The source's own decoding (the TOML pipelines': JSON pointers,
    /// their timestamp formats and their messages for bad records).
    Custom(Arc<dyn RecordDecoder>),
}

/// One Kafka record value (and its Kafka timestamp) as a row of the
/// source's schema with its event time ([`crate::time::NO_TIMESTAMP`]
/// without event time); Err says why the record is bad, and the source's
/// `on_bad_record` decides what becomes of it.
pub trait RecordDecoder: Send + Sync {
    /// What it decodes, for `describe` and logs ("word-count text").
    fn name(&self) -> String;

    fn decode(
        &self,
        payload: Option<&[u8]>,
        kafka_ts: Option<i64>,
    ) -> std::result::Result<(super::row::Row, i64), String>;

    /// As [`RecordDecoder::decode`], with the record's Kafka key: a table
    /// read from an upsert topic takes a tombstone's key from it.
    fn decode_keyed(
        &self,
        _key: Option<&[u8]>,
        payload: Option<&[u8]>,
        kafka_ts: Option<i64>,
    ) -> std::result::Result<(super::row::Row, i64), String> {
        self.decode(payload, kafka_ts)
    }

    /// The whole record: key, value, and where and when it was written
    /// (a table's metadata columns read them). `Ok(None)`: the record
    /// holds no row (a change stream's tombstone); the source moves past it.
    fn decode_record(
        &self,
        record: &KafkaRecord<'_>,
    ) -> std::result::Result<Option<(super::row::Row, i64)>, RecordError> {
        self.decode_keyed(record.key, record.payload, record.timestamp)
            .map(Some)
            .map_err(RecordError::Bad)
    }
}

/// One Kafka record as a source read it.
#[derive(Clone, Copy)]
pub struct KafkaRecord<'a> {
    pub key: Option<&'a [u8]>,
    pub payload: Option<&'a [u8]>,
    pub topic: &'a str,
    pub partition: i32,
    pub offset: i64,
    /// The record's Kafka timestamp in milliseconds.
    pub timestamp: Option<i64>,
    /// Whether the producer (`CreateTime`) or the broker (`LogAppendTime`) stamped it.
    pub log_append_time: bool,
    pub headers: Option<&'a rdkafka::message::BorrowedHeaders>,
}

/// Why a record gave no row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordError {
    /// The record is bad: the source's `on_bad_record` decides.
    Bad(String),
    /// Something the record needs (its schema, from a registry) cannot be
    /// had now: the task fails without moving past the record, and reads
    /// it again from the last checkpoint.
    Unavailable(String),
}

impl std::fmt::Debug for SourceFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Text => f.write_str("Text"),
            Self::Json => f.write_str("Json"),
            Self::Custom(d) => write!(f, "Custom({})", d.name()),
        }
    }
}

impl PartialEq for SourceFormat {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Text, Self::Text) | (Self::Json, Self::Json) => true,
            (Self::Custom(a), Self::Custom(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl Eq for SourceFormat {}

/// Event time at a source: which column holds it (None: the Kafka record
/// timestamp) and how far records may be out of order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventTimeSpec {
    pub column: Option<usize>,
    pub max_out_of_orderness_ms: i64,
    pub idle_timeout_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceSpec {
    pub topics: Vec<String>,
    pub format: SourceFormat,
    pub start: StartPosition,
    pub on_bad_record: BadRecordPolicy,
    pub dead_letter_topic: Option<String>,
    pub event_time: Option<EventTimeSpec>,
    /// Each row ends with its Kafka record's origin (key, topic,
    /// partition, offset: `RecordOrigin`), added after decoding.
    pub origin: bool,
}

/// What a sink writes for each change kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SinkMode {
    /// Inserts only; any other kind stops the job, naming the sink.
    Append,
    /// By the key columns: inserts and update-afters as values, deletes as
    /// tombstones, update-befores dropped (the next value replaces them).
    Upsert,
    /// Every change, with an `"op"` field (`+I`, `-U`, `+U`, `-D`).
    Changelog,
    /// Every change as Debezium's JSON envelope, as Flink's `debezium-json`
    /// writes it: an insert or update-after is `{"before":null,"after":row,"op":"c"}`,
    /// an update-before or delete `{"before":row,"after":null,"op":"d"}`.
    Debezium,
    /// Inserts and update-afters as values by the key columns;
    /// update-befores and deletes are not written (results whose key alone
    /// does not name them, as a window's).
    Results,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SinkSpec {
    pub topic: String,
    pub mode: SinkMode,
    /// The Kafka key's columns (none: no key).
    pub key: Vec<usize>,
    /// How the key is written.
    pub key_format: KeyFormat,
    /// What happens to a result Kafka refuses for its size
    /// (`message.max.bytes`): the job stops (fail), it is counted and
    /// skipped, or described in `dead_letter_topic`. A replay would make
    /// the same result again, so a restart cannot help.
    pub on_too_large: BadRecordPolicy,
    pub dead_letter_topic: Option<String>,
    /// Whether a row's event time becomes its record's Kafka timestamp.
    /// Records with their own timestamp are produced one by one (the batch
    /// call stamps the current time), so a job that does not need them can
    /// turn them off.
    pub timestamps: bool,
    /// The value's and key's encoders for formats other than JSON
    /// (Avro, Protobuf, CSV, ...); None: JSON as `key_format` says.
    pub encoding: SinkEncoding,
}

/// A sink's encoders (docs/formats.md); compared by identity.
#[derive(Clone, Default)]
pub struct SinkEncoding {
    pub value: Option<Arc<dyn crate::format::BytesEncoder>>,
    pub key: Option<Arc<dyn crate::format::BytesEncoder>>,
}

impl std::fmt::Debug for SinkEncoding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SinkEncoding")
            .field("value", &self.value.is_some())
            .field("key", &self.key.is_some())
            .finish()
    }
}

impl PartialEq for SinkEncoding {
    fn eq(&self, other: &Self) -> bool {
        fn same(
            a: &Option<Arc<dyn crate::format::BytesEncoder>>,
            b: &Option<Arc<dyn crate::format::BytesEncoder>>,
        ) -> bool {
            match (a, b) {
                (None, None) => true,
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                _ => false,
            }
        }
        same(&self.value, &other.value) && same(&self.key, &other.key)
    }
}

impl Eq for SinkEncoding {}

/// How a sink writes its Kafka key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyFormat {
    /// The key columns as a JSON object, `{"user":"u1"}`.
    Json,
    /// One key column's value as text (a string's bytes as they are), as
    /// Kafka Streams' string serde writes it.
    Raw,
}

/// Makes one instance of an operator per subtask.
pub type OperatorFactory = Arc<dyn Fn() -> Box<dyn Operator> + Send + Sync>;

#[derive(Clone)]
pub struct OperatorSpec {
    pub factory: OperatorFactory,
    /// 1, or 2 for a two-input operator.
    pub inputs: usize,
    /// Keyed operators have state (their tables and timers) and need hash inputs.
    pub keyed: bool,
    pub tables: Vec<TableSpec>,
    /// Where records that arrive too late go (a window's `late_to`);
    /// without it they are dropped and counted.
    pub late_topic: Option<String>,
}

#[derive(Clone)]
pub enum NodeBody {
    Source(SourceSpec),
    Operator(OperatorSpec),
    Sink(SinkSpec),
}

#[derive(Clone)]
pub struct Node {
    /// Stable across versions of the job: state and checkpoints are found by it.
    pub uid: String,
    /// What it is, as checkpoints record it ("window-aggregate", "filter").
    pub kind: String,
    /// The schema of its output (a sink's: its input's).
    pub schema: Schema,
    pub body: NodeBody,
}

impl Node {
    pub fn is_keyed(&self) -> bool {
        matches!(&self.body, NodeBody::Operator(o) if o.keyed)
    }
}

/// A stage: the nodes that run chained in one task, head first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stage {
    pub nodes: Vec<NodeId>,
}

impl Stage {
    pub fn head(&self) -> NodeId {
        self.nodes[0]
    }
}

#[derive(Clone)]
pub struct Graph {
    pub name: String,
    pub nodes: Vec<Node>,
    pub edges: Vec<Edge>,
}

impl Graph {
    pub fn inputs(&self, node: NodeId) -> impl Iterator<Item = &Edge> {
        self.edges.iter().filter(move |e| e.to == node)
    }

    pub fn outputs(&self, node: NodeId) -> impl Iterator<Item = &Edge> {
        self.edges.iter().filter(move |e| e.from == node)
    }

    /// Whether `node` chains into the task of its single input.
    pub fn is_chained(&self, node: NodeId) -> bool {
        let inputs: Vec<_> = self.inputs(node).collect();
        matches!(inputs[..], [e] if e.exchange == Exchange::Forward)
    }

    /// The operator a node's Kafka output is counted for
    /// (`weir_records_out_total{operator}`): a sink writes the results of
    /// the node before it, and counts under its uid; any other node under
    /// its own.
    pub fn output_label(&self, node: NodeId) -> &str {
        match &self.nodes[node].body {
            NodeBody::Sink(_) => self
                .inputs(node)
                .next()
                .map_or(&self.nodes[node].uid, |e| &self.nodes[e.from].uid),
            _ => &self.nodes[node].uid,
        }
    }

    /// Whether a consumer of `node` uses update-before rows: false when
    /// every output goes straight to an upsert sink, which replaces a key's
    /// row by the next update-after and drops update-befores.
    pub fn update_before_needed(&self, node: NodeId) -> bool {
        !self.outputs(node).all(
            |e| matches!(&self.nodes[e.to].body, NodeBody::Sink(s) if matches!(s.mode, SinkMode::Upsert | SinkMode::Results)),
        )
    }

    /// Every problem with the graph, each naming the node.
    pub fn validate(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let mut uids = BTreeMap::new();
        for (i, n) in self.nodes.iter().enumerate() {
            if n.uid.is_empty()
                || !n
                    .uid
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            {
                problems.push(format!(
                    "node {i}: uid {:?} must be non-empty ASCII letters, digits, '-', '_' or '.'",
                    n.uid
                ));
            }
            if let Some(j) = uids.insert(n.uid.as_str(), i) {
                problems.push(format!(
                    "uid {:?} is used by nodes {j} and {i}: uids name state and must be unique",
                    n.uid
                ));
            }
        }
        for e in &self.edges {
            if e.from >= self.nodes.len() || e.to >= self.nodes.len() || e.from >= e.to {
                problems.push(format!(
                    "edge {} -> {}: edges go from an earlier node to a later one",
                    e.from, e.to
                ));
                return problems;
            }
            if let Exchange::Hash(cols) = &e.exchange {
                let schema = &self.nodes[e.from].schema;
                if cols.is_empty() || cols.iter().any(|c| *c >= schema.len()) {
                    problems.push(format!(
                        "edge {} -> {}: key columns {cols:?} are not columns of {:?} ({schema})",
                        self.nodes[e.from].uid, self.nodes[e.to].uid, self.nodes[e.from].uid
                    ));
                }
            }
        }
        let mut topics: BTreeMap<&str, &str> = BTreeMap::new();
        for (i, n) in self.nodes.iter().enumerate() {
            let inputs: Vec<&Edge> = self.inputs(i).collect();
            let uid = &n.uid;
            match &n.body {
                NodeBody::Source(s) => {
                    if !inputs.is_empty() {
                        problems.push(format!("source {uid:?} has inputs"));
                    }
                    if s.topics.is_empty() {
                        problems.push(format!("source {uid:?} reads no topic"));
                    }
                    for t in &s.topics {
                        if let Some(other) = topics.insert(t, uid) {
                            problems.push(format!("topic {t:?} is read by sources {other:?} and {uid:?}; one source per topic (offsets are kept per partition)"));
                        }
                    }
                    if s.on_bad_record == BadRecordPolicy::DeadLetter
                        && s.dead_letter_topic.is_none()
                    {
                        problems.push(format!(
                            "source {uid:?}: on_bad_record dead-letter needs a dead-letter topic"
                        ));
                    }
                }
                NodeBody::Operator(o) => {
                    for port in 0..o.inputs {
                        if !inputs.iter().any(|e| e.port == port) {
                            problems.push(format!("operator {uid:?} has nothing on input {port}"));
                        }
                    }
                    if inputs.iter().any(|e| e.port >= o.inputs) {
                        problems.push(format!("operator {uid:?} takes {} input(s)", o.inputs));
                    }
                    if o.keyed && inputs.iter().any(|e| e.exchange == Exchange::Forward) {
                        problems.push(format!("keyed operator {uid:?} needs its inputs keyed (key_by) so that each key's state lives in one subtask"));
                    }
                    if o.tables.len() > usize::from(u8::MAX) {
                        problems.push(format!("operator {uid:?} declares more than 255 tables"));
                    }
                }
                NodeBody::Sink(s) => {
                    if inputs.len() != 1 {
                        problems.push(format!("sink {uid:?} must have one input"));
                    }
                    if self.outputs(i).next().is_some() {
                        problems.push(format!("sink {uid:?} has outputs"));
                    }
                    if s.mode == SinkMode::Upsert && s.key.is_empty() {
                        problems.push(format!("upsert sink {uid:?} needs key columns"));
                    }
                    if s.key_format == KeyFormat::Raw && s.key.len() != 1 {
                        problems.push(format!(
                            "sink {uid:?}: a raw key is one column, not {}",
                            s.key.len()
                        ));
                    }
                    if s.topic.is_empty() {
                        problems.push(format!("sink {uid:?} has no topic"));
                    }
                }
            }
        }
        if !self
            .nodes
            .iter()
            .any(|n| matches!(n.body, NodeBody::Sink(_)))
        {
            problems.push("the job has no sink".into());
        }
        problems
    }

    /// The stages, in node order: a node heads a stage unless it is
    /// chained into its input's.
    pub fn stages(&self) -> Vec<Stage> {
        let mut stage_of: Vec<usize> = vec![usize::MAX; self.nodes.len()];
        let mut stages: Vec<Stage> = Vec::new();
        for n in 0..self.nodes.len() {
            let chained = self
                .is_chained(n)
                .then(|| self.inputs(n).next().expect("one input").from);
            match chained {
                Some(up) => {
                    stage_of[n] = stage_of[up];
                    stages[stage_of[up]].nodes.push(n);
                }
                None => {
                    stage_of[n] = stages.len();
                    stages.push(Stage { nodes: vec![n] });
                }
            }
        }
        stages
    }

    /// The key columns (name and type) a keyed node's state is kept under:
    /// those of its first input's hash edge.
    pub fn key_columns(&self, node: NodeId) -> Vec<Field> {
        self.inputs(node)
            .find_map(|e| match &e.exchange {
                Exchange::Hash(cols) => Some(
                    cols.iter()
                        .filter_map(|c| self.nodes[e.from].schema.fields.get(*c).cloned())
                        .collect(),
                ),
                Exchange::Forward => None,
            })
            .unwrap_or_default()
    }

    /// [`Graph::key_columns`] as checkpoints record them (and queries parse
    /// keys by).
    pub fn key_column_info(&self, node: NodeId) -> Vec<KeyColumn> {
        self.key_columns(node)
            .into_iter()
            .map(|f| KeyColumn {
                name: f.name,
                data_type: f.data_type.to_string(),
            })
            .collect()
    }

    /// The shape checkpoints record and restores compare, with each keyed
    /// node's key and tables.
    pub fn topology(&self, parallelism: u32, max_parallelism: u32) -> Topology {
        Topology {
            max_parallelism,
            operators: self
                .nodes
                .iter()
                .enumerate()
                .map(|(i, n)| OperatorInfo {
                    uid: n.uid.clone(),
                    kind: n.kind.clone(),
                    parallelism,
                    state: match &n.body {
                        NodeBody::Operator(o) if o.keyed => Some(StateInfo {
                            key: self.key_column_info(i),
                            tables: o
                                .tables
                                .iter()
                                .map(|t| TableInfo {
                                    name: t.name.clone(),
                                    kind: format!("{:?}", t.kind).to_lowercase(),
                                    codec: t.codec.to_string(),
                                })
                                .collect(),
                        }),
                        _ => None,
                    },
                })
                .collect(),
        }
    }

    /// The graph as text: one line per node with its stage, its inputs and
    /// its schema (`weir explain`, logs).
    pub fn describe(&self) -> String {
        let mut out = String::new();
        for (s, stage) in self.stages().iter().enumerate() {
            out.push_str(&format!("stage {s}\n"));
            for n in &stage.nodes {
                let node = &self.nodes[*n];
                let inputs: Vec<String> = self
                    .inputs(*n)
                    .map(|e| {
                        let from = &self.nodes[e.from];
                        match &e.exchange {
                            Exchange::Forward => format!("{}[{}] forward", from.uid, e.port),
                            Exchange::Hash(cols) => {
                                let names: Vec<&str> = cols
                                    .iter()
                                    .map(|c| from.schema.fields[*c].name.as_str())
                                    .collect();
                                format!("{}[{}] hash({})", from.uid, e.port, names.join(", "))
                            }
                        }
                    })
                    .collect();
                out.push_str(&format!(
                    "  {} ({}){}: {}\n",
                    node.uid,
                    node.kind,
                    if inputs.is_empty() {
                        String::new()
                    } else {
                        format!(" <- {}", inputs.join(", "))
                    },
                    node.schema
                ));
            }
        }
        out
    }
}
