//! The sections of the configuration file, as typed values with their
//! defaults. Cross-key rules live in `validate`.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// `[job]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobConfig {
    /// Names the checkpoint folder and, by default, the transactional id.
    pub name: String,
    /// Subtasks per operator.
    #[serde(default = "defaults::parallelism")]
    pub parallelism: u32,
    /// Number of key groups; fixed for the life of the job because state is
    /// partitioned by it.
    #[serde(default = "defaults::max_parallelism")]
    pub max_parallelism: u32,
}

/// `[kafka]`. Its `Debug` hides the values of sensitive properties.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaConfig {
    pub bootstrap_servers: String,
    pub group_id: String,
    /// Passed to librdkafka as is (security.protocol, sasl.*, ssl.*, ...).
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
}

impl fmt::Debug for KafkaConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let props: BTreeMap<&str, &str> = self
            .properties
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str(),
                    if is_sensitive(k) {
                        REDACTED
                    } else {
                        v.as_str()
                    },
                )
            })
            .collect();
        f.debug_struct("KafkaConfig")
            .field("bootstrap_servers", &self.bootstrap_servers)
            .field("group_id", &self.group_id)
            .field("properties", &props)
            .finish()
    }
}

/// librdkafka properties whose values are secrets: never logged, served or
/// printed.
pub fn is_sensitive(property: &str) -> bool {
    let p = property.to_ascii_lowercase();
    p.contains("password")
        || p.contains("secret")
        || p.contains("user.info")
        || p == "sasl.oauthbearer.config"
        || p == "ssl.key.pem"
        || p == "ssl_key"
        || p == "ssl.keystore.location"
}

/// `[checkpoint]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointConfig {
    #[serde(with = "humantime_serde", default = "defaults::interval")]
    pub interval: Duration,
    pub dir: PathBuf,
    #[serde(default)]
    pub mode: CheckpointMode,
    #[serde(with = "humantime_serde", default = "defaults::checkpoint_timeout")]
    pub timeout: Duration,
    #[serde(with = "humantime_serde", default)]
    pub min_pause: Duration,
    #[serde(default = "defaults::retained")]
    pub retained: u32,
    /// Where `POST /savepoints` writes; retention never deletes savepoints.
    /// Defaults to `<dir>/<job name>-savepoints`.
    pub savepoint_dir: Option<PathBuf>,
    /// Savepoints `savepoint_dir` may hold: each pins its state files on
    /// disk. `POST /savepoints` is refused (409) once this many are there;
    /// weir never deletes a savepoint (the operator does). 0 turns
    /// savepoints off.
    #[serde(default = "defaults::max_savepoints")]
    pub max_savepoints: u32,
    /// Consecutive failed checkpoints tolerated before the job restarts.
    #[serde(default = "defaults::tolerable_failures")]
    pub tolerable_failures: u32,
    /// `[checkpoint.s3]`: how to reach an `s3://` checkpoint location.
    pub s3: Option<S3Config>,
}

/// `[checkpoint.s3]`: endpoint, region and credentials of an `s3://`
/// checkpoint location. What is left out comes from the usual `AWS_*`
/// environment variables. Its `Debug` hides the keys.
#[derive(Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct S3Config {
    /// An S3-compatible endpoint (MinIO, moto, ...); AWS when absent.
    pub endpoint: Option<String>,
    pub region: Option<String>,
    pub access_key_id: Option<String>,
    pub secret_access_key: Option<String>,
    /// Permits an `http://` endpoint (an emulator or a private store).
    #[serde(default)]
    pub allow_http: bool,
}

/// What `Debug` prints for a secret that is set.
pub const REDACTED: &str = "<redacted>";

impl fmt::Debug for S3Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hide = |v: &Option<String>| v.as_ref().map(|_| REDACTED);
        f.debug_struct("S3Config")
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("access_key_id", &hide(&self.access_key_id))
            .field("secret_access_key", &hide(&self.secret_access_key))
            .field("allow_http", &self.allow_http)
            .finish()
    }
}

/// `[scale]`: one process, or several instances sharing the job through a
/// Kafka consumer group (docs/scale-out.md).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScaleConfig {
    #[serde(default)]
    pub mode: ScaleMode,
    /// Keyed tasks = partitions of the repartition topic; fixed for the
    /// life of the job.
    #[serde(default = "defaults::tasks")]
    pub tasks: u32,
    /// This instance's stable id (`${HOSTNAME}` works); `sink.instance`
    /// is its older name.
    pub instance: Option<String>,
    /// The consumer group protocol: "consumer" (KIP-848, the broker
    /// assigns) or "classic" with cooperative-sticky assignment.
    #[serde(default)]
    pub group_protocol: GroupProtocol,
}

impl Default for ScaleConfig {
    fn default() -> Self {
        Self {
            mode: ScaleMode::Single,
            tasks: defaults::tasks(),
            instance: None,
            group_protocol: GroupProtocol::default(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum ScaleMode {
    /// One process; the exchange between operators is in memory.
    #[default]
    Single,
    /// Instances join one consumer group; a repartition topic carries the
    /// exchange.
    Group,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum GroupProtocol {
    #[default]
    Consumer,
    Classic,
}

/// `[admin]`: the HTTP endpoint for health, metrics, checkpoint history and
/// savepoints.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminConfig {
    /// Address to listen on; loopback unless changed. "" disables it.
    #[serde(default = "defaults::admin_listen")]
    pub listen: String,
    /// Name of an environment variable holding a bearer token that every
    /// route but `/`, `/health` and `/ready` then requires. Required when
    /// `listen` is not a loopback address.
    pub token_env: Option<String>,
    /// Serves a non-loopback `listen` without a token: anyone who reaches
    /// the port reads keyed state and takes savepoints. Off by default.
    #[serde(default)]
    pub allow_unauthenticated: bool,
}

impl Default for AdminConfig {
    fn default() -> Self {
        Self {
            listen: defaults::admin_listen(),
            token_env: None,
            allow_unauthenticated: false,
        }
    }
}

/// `[log]`
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct LogConfig {
    /// A tracing filter such as "info" or "warn,weir=debug"; `RUST_LOG`
    /// wins when set.
    pub level: Option<String>,
}

/// Whether barriers are aligned (exactly-once state) or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum CheckpointMode {
    #[default]
    ExactlyOnce,
    AtLeastOnce,
}

/// `[state]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StateConfig {
    pub dir: PathBuf,
    /// Entries of the write-back cache in front of RocksDB, per keyed subtask.
    #[serde(default = "defaults::cache_entries")]
    pub cache_entries: usize,
}

/// `[restart]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RestartConfig {
    #[serde(default = "defaults::max_attempts")]
    pub max_attempts: u32,
    #[serde(with = "humantime_serde", default = "defaults::backoff")]
    pub backoff: Duration,
    #[serde(with = "humantime_serde", default = "defaults::max_backoff")]
    pub max_backoff: Duration,
}

impl Default for RestartConfig {
    fn default() -> Self {
        Self {
            max_attempts: defaults::max_attempts(),
            backoff: defaults::backoff(),
            max_backoff: defaults::max_backoff(),
        }
    }
}

/// `[source]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceConfig {
    pub topics: Vec<String>,
    #[serde(default)]
    pub start: StartPosition,
    #[serde(default)]
    pub format: RecordFormat,
    #[serde(default)]
    pub on_bad_record: BadRecordPolicy,
    pub dead_letter_topic: Option<String>,
    pub event_time: Option<EventTimeConfig>,
}

/// Where a partition without a checkpointed offset starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum StartPosition {
    #[default]
    Earliest,
    Latest,
}

/// How input record values are decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum RecordFormat {
    #[default]
    Text,
    Json,
}

/// What happens to a record that cannot be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum BadRecordPolicy {
    #[default]
    Fail,
    Skip,
    DeadLetter,
}

/// `[pipeline]`: a tagged enum on `kind`, so that keys of one kind cannot
/// be written for another (they are unknown keys there).
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum PipelineConfig {
    /// Split text on whitespace, count per lower-cased word.
    WordCount {
        /// Stable operator id of the keyed operator.
        uid: Option<String>,
        window: Option<WindowConfig>,
    },
    /// A function of a JSON number field, per value of a JSON key field.
    Aggregate {
        /// RFC 6901 pointer to the group key (a bare name is a top-level field).
        key: String,
        /// Pointer to the number to aggregate (not needed for count).
        field: Option<String>,
        function: AggregateFunction,
        uid: Option<String>,
        window: Option<WindowConfig>,
    },
}

impl PipelineConfig {
    pub fn kind_name(&self) -> &'static str {
        match self {
            Self::WordCount { .. } => "word-count",
            Self::Aggregate { .. } => "aggregate",
        }
    }

    pub fn uid(&self) -> Option<&str> {
        match self {
            Self::WordCount { uid, .. } | Self::Aggregate { uid, .. } => uid.as_deref(),
        }
    }

    pub fn window(&self) -> Option<&WindowConfig> {
        match self {
            Self::WordCount { window, .. } | Self::Aggregate { window, .. } => window.as_ref(),
        }
    }
}

/// `[pipeline.window]`: windows over event time (docs/event-time.md).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WindowConfig {
    pub kind: WindowKind,
    #[serde(with = "humantime_serde", default)]
    pub size: Option<Duration>,
    #[serde(with = "humantime_serde", default)]
    pub slide: Option<Duration>,
    #[serde(with = "humantime_serde", default)]
    pub offset: Option<Duration>,
    #[serde(with = "humantime_serde", default)]
    pub gap: Option<Duration>,
    /// How long after its end a fired window still takes late records
    /// (each produces an updated result).
    #[serde(with = "humantime_serde", default)]
    pub allowed_lateness: Duration,
    #[serde(default)]
    pub on_late: LatePolicy,
    #[serde(default)]
    pub emit: WindowEmit,
}

impl WindowConfig {
    /// The windows this section describes, in milliseconds.
    pub fn spec(&self) -> crate::window::assign::WindowSpec {
        use crate::window::assign::WindowSpec;
        let ms = |d: Option<Duration>| d.unwrap_or_default().as_millis() as i64;
        match self.kind {
            WindowKind::Tumbling => WindowSpec::Tumbling {
                size: ms(self.size),
                offset: ms(self.offset),
            },
            WindowKind::Hopping => WindowSpec::Hopping {
                size: ms(self.size),
                slide: ms(self.slide),
                offset: ms(self.offset),
            },
            WindowKind::Session => WindowSpec::Session { gap: ms(self.gap) },
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WindowKind {
    Tumbling,
    Hopping,
    Session,
}

/// What happens to a record no window accepts any more.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum LatePolicy {
    /// Counted in `weir_late_records_total` and dropped.
    #[default]
    Drop,
    /// Written to `source.dead_letter_topic` with headers naming the window
    /// and the watermark.
    DeadLetter,
}

/// When a window's result is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum WindowEmit {
    /// Once, when the watermark passes the window's end (the final result).
    #[default]
    OnClose,
    /// After every record: a stream of updated results per key and window
    /// (the Kafka key is the group key; the value names the window).
    EveryUpdate,
}

/// `[source.event_time]`: where a record's event time comes from and how
/// watermarks follow it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventTimeConfig {
    /// RFC 6901 pointer into the JSON value; none: the Kafka record timestamp.
    pub field: Option<String>,
    #[serde(default = "defaults::timestamp_format")]
    pub format: crate::time::timestamp::TimestampFormat,
    #[serde(with = "humantime_serde", default)]
    pub max_out_of_orderness: Duration,
    /// A partition without records this long stops holding the watermark
    /// back; "0s" = never.
    #[serde(with = "humantime_serde", default)]
    pub idle_timeout: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AggregateFunction {
    Count,
    Sum,
    Min,
    Max,
    Avg,
}

impl AggregateFunction {
    pub fn name(self) -> &'static str {
        match self {
            Self::Count => "count",
            Self::Sum => "sum",
            Self::Min => "min",
            Self::Max => "max",
            Self::Avg => "avg",
        }
    }
}

/// `[sink]` as written: a built-in pipeline's sink and the delivery keys
/// every job has. [`Config`](super::Config) splits it into
/// [`SinkConfig`] and [`OutputConfig`].
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SinkSection {
    pub topic: Option<String>,
    #[serde(default)]
    pub delivery: Delivery,
    pub emit: Option<EmitMode>,
    pub transactional_id_prefix: Option<String>,
    #[serde(default = "defaults::instance")]
    pub instance: String,
}

/// A built-in pipeline's `[sink]`: where its results go and when.
#[derive(Debug, Clone)]
pub struct SinkConfig {
    pub topic: String,
    pub emit: EmitMode,
}

/// `[sink]`'s keys that every job has, whatever computes it: how its
/// sinks deliver, and the transactional id they commit under.
#[derive(Debug, Clone)]
pub struct OutputConfig {
    /// `sink.delivery`: every sink of a job commits in its one
    /// transaction per checkpoint, so the job has one delivery.
    pub delivery: Delivery,
    /// Prefix of the transactional id (exactly-once); defaults to the job name.
    pub transactional_id_prefix: Option<String>,
    /// Stable suffix that makes the transactional id of this weir instance
    /// (`scale.instance` is its newer name).
    pub instance: String,
}

impl Default for OutputConfig {
    fn default() -> Self {
        Self {
            delivery: Delivery::default(),
            transactional_id_prefix: None,
            instance: defaults::instance(),
        }
    }
}

/// What a job computes, by where it is written.
#[derive(Debug, Clone)]
pub enum JobKind {
    /// `[source]`, `[pipeline] kind` and `[sink]`: a built-in pipeline.
    Builtin(Box<BuiltinJob>),
    /// `[sources.*]`, `[sinks.*]` and `[pipeline] sql`.
    Sql(Box<SqlJob>),
    /// A job built with the Rust API: its graph is given in code, with
    /// its sources and sinks.
    Graph,
}

/// A built-in pipeline: `[source]`, `[pipeline]` and `[sink]`'s topic.
#[derive(Debug, Clone)]
pub struct BuiltinJob {
    pub source: SourceConfig,
    pub pipeline: PipelineConfig,
    pub sink: SinkConfig,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Delivery {
    #[default]
    AtLeastOnce,
    ExactlyOnce,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum EmitMode {
    #[default]
    EveryUpdate,
    OnCheckpoint,
}

pub(crate) mod defaults {
    pub fn timestamp_format() -> crate::time::timestamp::TimestampFormat {
        crate::time::timestamp::TimestampFormat::EpochMillis
    }
    use std::time::Duration;
    pub fn registry_timeout() -> Duration {
        Duration::from_secs(10)
    }
    pub fn parallelism() -> u32 {
        1
    }
    pub fn max_parallelism() -> u32 {
        128
    }
    pub fn interval() -> Duration {
        Duration::from_secs(1)
    }
    pub fn checkpoint_timeout() -> Duration {
        Duration::from_secs(60)
    }
    pub fn retained() -> u32 {
        2
    }
    pub fn max_savepoints() -> u32 {
        10
    }
    pub fn cache_entries() -> usize {
        200_000
    }
    pub fn max_attempts() -> u32 {
        10
    }
    pub fn backoff() -> Duration {
        Duration::from_secs(1)
    }
    pub fn max_backoff() -> Duration {
        Duration::from_secs(60)
    }
    pub fn instance() -> String {
        "0".to_string()
    }
    pub fn tolerable_failures() -> u32 {
        3
    }
    pub fn tasks() -> u32 {
        8
    }
    pub fn admin_listen() -> String {
        "127.0.0.1:9249".to_string()
    }
}

/// librdkafka's default `transaction.timeout.ms` is 60 s, which the default
/// checkpoint timeout alone reaches; weir sets this instead unless the
/// operator does.
pub const DEFAULT_TRANSACTION_TIMEOUT_MS: u64 = 120_000;

/// Properties weir sets itself; setting them in `[kafka.properties]` would
/// break the protocol, so validation refuses them.
pub(crate) const RESERVED_PROPERTIES: &[&str] = &[
    "bootstrap.servers",
    "group.id",
    "enable.auto.commit",
    "enable.auto.offset.store",
    "isolation.level",
    "transactional.id",
    "enable.idempotence",
    // `source.start` owns where a partition without a checkpoint starts.
    "auto.offset.reset",
    "enable.partition.eof",
];

/// The uid of the source operator.
pub const SOURCE_UID: &str = "kafka-source";

/// What a record's bytes are, as a source or sink names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum FormatName {
    #[default]
    Json,
    Text,
    Csv,
    Raw,
    Avro,
    Protobuf,
    JsonSchema,
    DebeziumJson,
    DebeziumAvro,
}

impl FormatName {
    pub fn name(self) -> &'static str {
        match self {
            Self::Json => "json",
            Self::Text => "text",
            Self::Csv => "csv",
            Self::Raw => "raw",
            Self::Avro => "avro",
            Self::Protobuf => "protobuf",
            Self::JsonSchema => "json-schema",
            Self::DebeziumJson => "debezium-json",
            Self::DebeziumAvro => "debezium-avro",
        }
    }

    /// Whether records are framed for a schema registry (and need one).
    pub fn needs_registry(self) -> bool {
        matches!(self, Self::Avro | Self::JsonSchema | Self::DebeziumAvro)
    }

    /// Whether the format carries changes (a change stream).
    pub fn is_changelog(self) -> bool {
        matches!(self, Self::DebeziumJson | Self::DebeziumAvro)
    }
}

impl std::fmt::Display for FormatName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// `[registries.NAME]`: a schema registry (Confluent's API: Confluent,
/// Apicurio's `/apis/ccompat/v7`, Karapace, Redpanda) that sources and
/// sinks name with `registry = "NAME"`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegistryConfig {
    /// `http://host:port` (with the API's path prefix, if any).
    pub url: String,
    pub basic_auth_user: Option<String>,
    /// The environment variable holding the password (never the password).
    pub basic_auth_password_env: Option<String>,
    /// A PEM file of the CA that signed an `https://` registry's certificate.
    pub ssl_ca_location: Option<std::path::PathBuf>,
    /// How long one request may take before it counts as unanswered.
    #[serde(with = "humantime_serde", default = "defaults::registry_timeout")]
    pub timeout: Duration,
}

/// `[sources.NAME]` of a SQL job: a table read from Kafka topics.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SqlSourceConfig {
    pub topics: Vec<String>,
    /// How a record's value is read (docs/formats.md): `json` (columns by
    /// field name), `text` (one VARCHAR column `line`), `csv`, `raw`,
    /// `avro`, `protobuf`, `json-schema`, `debezium-json`, `debezium-avro`.
    #[serde(default)]
    pub format: FormatName,
    /// The `[registries.NAME]` whose ids the records carry.
    pub registry: Option<String>,
    /// A SQL column list: `name TYPE, ...`, computed columns `name AS
    /// expr`, and `WATERMARK FOR col AS col - INTERVAL '..' SECOND`. With a
    /// registry the physical columns may be left out: they are the
    /// subject's latest schema's.
    pub schema: Option<String>,
    /// The subject whose latest schema gives the columns (default
    /// `<first topic>-value`).
    pub subject: Option<String>,
    /// Protobuf: the message's full name (`shop.Order`).
    pub message: Option<String>,
    /// Protobuf without a registry: the `.proto` file that defines `message`.
    pub proto_file: Option<std::path::PathBuf>,
    /// How the Kafka key is read into `key_fields` (Flink's `key.format`).
    pub key_format: Option<FormatName>,
    /// The columns the key holds (default: the primary key's).
    pub key_fields: Option<Vec<String>>,
    /// Protobuf keys: the key message's full name.
    pub key_message: Option<String>,
    /// Kafka metadata as columns after the physical ones:
    /// `["timestamp AS kafka_ts", "partition", "offset", "headers"]`.
    #[serde(default)]
    pub metadata: Vec<String>,
    /// CSV: the field names in record order (default: the columns').
    pub csv_header: Option<Vec<String>>,
    /// CSV: one ASCII character (default `,`).
    pub csv_delimiter: Option<String>,
    /// CSV: one ASCII character (default `"`).
    pub csv_quote: Option<String>,
    #[serde(default)]
    pub start: StartPosition,
    #[serde(default)]
    pub on_bad_record: BadRecordPolicy,
    pub dead_letter_topic: Option<String>,
    /// A partition without records for this long stops holding the
    /// watermark back.
    #[serde(with = "humantime_serde", default)]
    pub idle_timeout: Option<Duration>,
    /// The table's key: the topic is an upsert stream (each record
    /// replaces its key's row, a tombstone deletes it), or a change
    /// stream's key.
    pub primary_key: Option<Vec<String>>,
}

/// `[sinks.NAME]` of a SQL job: a topic an `INSERT INTO NAME` writes.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SqlSinkConfig {
    pub topic: String,
    /// How values are written: `json`, `avro`, `protobuf`, `json-schema`,
    /// `csv`, `raw`, or `debezium-json` (as `changelog = "debezium"`).
    #[serde(default)]
    pub format: FormatName,
    /// The `[registries.NAME]` the value's (and key's) schema is registered in.
    pub registry: Option<String>,
    /// How the Kafka key is written (default: JSON).
    pub key_format: Option<FormatName>,
    /// Protobuf: the generated message's full name (default `weir.<Sink>`).
    pub message: Option<String>,
    /// The subject the value's schema is registered under (default `<topic>-value`).
    pub subject: Option<String>,
    /// Avro: write with this registered schema (its id) instead of
    /// registering the one derived from the result's columns.
    pub schema_id: Option<u32>,
    /// CSV: one ASCII character (default `,`).
    pub csv_delimiter: Option<String>,
    /// Unset: `[sink] delivery`, else at-least-once. Every sink of a job
    /// has the same (they commit in one transaction per checkpoint).
    pub delivery: Option<Delivery>,
    /// Kafka key columns; default: the result's unique key (its GROUP BY
    /// columns), else none.
    pub key: Option<Vec<String>>,
    /// How changes are written. Unset: `append` for an append-only
    /// result, `upsert` for an updating one.
    pub changelog: Option<SinkChangelog>,
}

/// `[sinks.NAME] changelog`: what a sink writes for each kind of change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SinkChangelog {
    /// Each row once; an updating result is refused.
    Append,
    /// The latest row per key: a change is the key's new row, a deletion a
    /// tombstone.
    Upsert,
    /// Every change in Debezium's `{"before","after","op"}` JSON.
    Debezium,
}

/// `[pipeline]` of a SQL job: the statements, and what applies to every
/// windowed aggregate in them.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SqlPipelineConfig {
    pub sql: Option<String>,
    pub sql_file: Option<std::path::PathBuf>,
    /// The session time zone (Flink's `table.local-time-zone`): where a
    /// TIMESTAMP_LTZ is shown and its fields read. An IANA name
    /// (`Europe/Berlin`), `UTC`, or an offset (`+05:30`, `GMT-08:00`);
    /// UTC when absent.
    pub time_zone: Option<String>,
    /// How long after its end a window still takes late records.
    #[serde(with = "humantime_serde", default)]
    pub allowed_lateness: Duration,
    /// Records no window takes any more: dropped (counted) or written to
    /// the dead-letter topic of the window's source.
    #[serde(default)]
    pub on_late: LatePolicy,
    /// How long a join keeps a row after its event time (Flink's
    /// `table.exec.state.ttl`, on event time here): once the watermark
    /// passes, the row is dropped and later rows no longer match it.
    #[serde(with = "humantime_serde", default)]
    pub state_ttl: Option<Duration>,
}

/// A SQL job: its tables, its sinks and its statements (the text is read
/// from `sql_file` when the configuration loads).
#[derive(Debug, Clone)]
pub struct SqlJob {
    /// `[registries.NAME]`.
    pub registries: std::collections::BTreeMap<String, RegistryConfig>,
    pub sources: std::collections::BTreeMap<String, SqlSourceConfig>,
    pub sinks: std::collections::BTreeMap<String, SqlSinkConfig>,
    pub pipeline: SqlPipelineConfig,
    /// The statements.
    pub text: String,
    /// Where they came from, for error messages: `pipeline.sql` or the file.
    pub origin: String,
    /// `[functions.NAME]`: user-defined functions in WebAssembly, with
    /// their module paths made absolute.
    pub functions: std::collections::BTreeMap<String, FunctionConfig>,
}

/// `[functions.NAME]`: a user-defined function in a WebAssembly module
/// (docs/sql.md, "User-defined functions"). `returns` makes a scalar
/// function, `columns` a table function.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FunctionConfig {
    /// The module: a `.wasm` file or WebAssembly text (`.wat`), relative
    /// to the configuration file.
    pub wasm: std::path::PathBuf,
    /// The function the module exports (default: the SQL name).
    pub export: Option<String>,
    /// The SQL types of its parameters, in order.
    #[serde(default)]
    pub params: Vec<String>,
    /// A scalar function's result type.
    pub returns: Option<String>,
    /// A table function's columns, each `"name TYPE"`.
    pub columns: Option<Vec<String>>,
    /// The fuel (about one per instruction) a call may burn before it
    /// traps as a runaway.
    pub fuel: Option<u64>,
}
