//! The configuration tree: one typed value loaded from TOML plus `WEIR__*`
//! environment overrides, validated as a whole so that an operator sees every
//! problem at once, each with its key path.
//!
//! Loading happens in two passes. The first deserializes each top-level
//! section on its own, so that a type error in `[checkpoint]` does not hide
//! one in `[source]`; the second checks meanings across keys (a dead-letter
//! policy needs a dead-letter topic, a transaction must outlive a checkpoint).

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// The whole configuration of one weir job.
#[derive(Debug, Clone)]
pub struct Config {
    pub job: JobConfig,
    pub kafka: KafkaConfig,
    pub checkpoint: CheckpointConfig,
    pub state: StateConfig,
    pub restart: RestartConfig,
    pub source: SourceConfig,
    pub pipeline: PipelineConfig,
    pub sink: SinkConfig,
    pub admin: AdminConfig,
    pub log: LogConfig,
}

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
                        "<redacted>"
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
    /// Consecutive failed checkpoints tolerated before the job restarts.
    #[serde(default = "defaults::tolerable_failures")]
    pub tolerable_failures: u32,
}

/// `[admin]`: the HTTP endpoint for health, metrics, checkpoint history and
/// savepoints.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminConfig {
    /// Address to listen on; loopback unless changed. "" disables it.
    #[serde(default = "defaults::admin_listen")]
    pub listen: String,
    /// Name of an environment variable holding a bearer token that
    /// `/metrics`, `/checkpoints` and `/savepoints` then require.
    pub token_env: Option<String>,
}

impl Default for AdminConfig {
    fn default() -> Self {
        Self {
            listen: defaults::admin_listen(),
            token_env: None,
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

/// `[pipeline]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineConfig {
    pub kind: PipelineKind,
    /// JSON field holding the group key (aggregate).
    pub key: Option<String>,
    /// JSON field holding the number to aggregate (aggregate; not needed for count).
    pub field: Option<String>,
    pub function: Option<AggregateFunction>,
    /// Stable operator id of the keyed operator; defaults to one derived
    /// from the pipeline so that changing it is detected on restore.
    pub uid: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PipelineKind {
    WordCount,
    Aggregate,
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

/// `[sink]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SinkConfig {
    pub topic: String,
    #[serde(default)]
    pub delivery: Delivery,
    #[serde(default)]
    pub emit: EmitMode,
    /// Prefix of the transactional id (exactly-once); defaults to the job name.
    pub transactional_id_prefix: Option<String>,
    /// Stable suffix that makes the transactional id of this weir instance.
    #[serde(default = "defaults::instance")]
    pub instance: String,
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

mod defaults {
    use std::time::Duration;
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
const RESERVED_PROPERTIES: &[&str] = &[
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

/// One problem in a configuration, with the key it is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigProblem {
    pub key: String,
    pub message: String,
}

impl fmt::Display for ConfigProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.key, self.message)
    }
}

/// Every problem found in a configuration file, reported together.
#[derive(Debug, thiserror::Error)]
pub struct ConfigError {
    pub file: PathBuf,
    pub problems: Vec<ConfigProblem>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} problem(s) in configuration {}:",
            self.problems.len(),
            self.file.display()
        )?;
        for p in &self.problems {
            writeln!(f, "  - {p}")?;
        }
        Ok(())
    }
}

const SECTIONS: &[&str] = &[
    "job",
    "kafka",
    "checkpoint",
    "state",
    "restart",
    "source",
    "pipeline",
    "sink",
    "admin",
    "log",
];

impl Config {
    /// Loads `file`, applies `WEIR__SECTION__KEY` environment overrides and
    /// validates the result.
    pub fn load(file: &Path) -> Result<Config, ConfigError> {
        Self::load_with_env(file, None)
    }

    /// As [`Config::load`], with the environment given explicitly (tests).
    pub fn load_with_env(
        file: &Path,
        env: Option<BTreeMap<String, String>>,
    ) -> Result<Config, ConfigError> {
        let fail = |problems| ConfigError {
            file: file.to_path_buf(),
            problems,
        };
        if !file.exists() {
            return Err(fail(vec![ConfigProblem {
                key: "(file)".into(),
                message: "file not found".into(),
            }]));
        }
        let mut environment = config::Environment::with_prefix("WEIR")
            .prefix_separator("__")
            .separator("__")
            .try_parsing(true)
            .list_separator(",")
            .with_list_parse_key("source.topics");
        let env_map = env.clone();
        if let Some(env) = env {
            environment = environment.source(Some(env.into_iter().collect()));
        }
        let raw = config::Config::builder()
            .add_source(config::File::from(file).format(config::FileFormat::Toml))
            .add_source(environment)
            .build()
            .map_err(|e| {
                fail(vec![ConfigProblem {
                    key: "(file)".into(),
                    message: e.to_string(),
                }])
            })?;
        let mut problems = Vec::new();
        let mut tree = raw
            .try_deserialize::<BTreeMap<String, serde_json::Value>>()
            .map_err(|e| {
                fail(vec![ConfigProblem {
                    key: "(file)".into(),
                    message: e.to_string(),
                }])
            })?;
        let lookup = |name: &str| match &env_map {
            Some(m) => m.get(name).cloned(),
            None => std::env::var(name).ok(),
        };
        for (key, value) in tree.iter_mut() {
            interpolate(value, key, &lookup, &mut problems);
        }
        {
            for key in tree.keys() {
                if !SECTIONS.contains(&key.as_str()) {
                    problems.push(ConfigProblem {
                        key: key.clone(),
                        message: format!(
                            "unknown section; expected one of {}",
                            SECTIONS.join(", ")
                        ),
                    });
                }
            }
        }
        let job = section::<JobConfig>(&tree, "job", &mut problems);
        let kafka = section::<KafkaConfig>(&tree, "kafka", &mut problems);
        let checkpoint = section::<CheckpointConfig>(&tree, "checkpoint", &mut problems);
        let state = section::<StateConfig>(&tree, "state", &mut problems);
        let restart = optional_section::<RestartConfig>(&tree, "restart", &mut problems);
        let source = section::<SourceConfig>(&tree, "source", &mut problems);
        let pipeline = section::<PipelineConfig>(&tree, "pipeline", &mut problems);
        let sink = section::<SinkConfig>(&tree, "sink", &mut problems);
        let admin = optional_section::<AdminConfig>(&tree, "admin", &mut problems);
        let log = optional_section::<LogConfig>(&tree, "log", &mut problems);
        let (
            Some(job),
            Some(kafka),
            Some(checkpoint),
            Some(state),
            Some(restart),
            Some(source),
            Some(pipeline),
            Some(sink),
            Some(admin),
            Some(log),
        ) = (
            job, kafka, checkpoint, state, restart, source, pipeline, sink, admin, log,
        )
        else {
            return Err(fail(problems));
        };
        let config = Config {
            job,
            kafka,
            checkpoint,
            state,
            restart,
            source,
            pipeline,
            sink,
            admin,
            log,
        };
        problems.extend(config.validate());
        if problems.is_empty() {
            Ok(config)
        } else {
            Err(fail(problems))
        }
    }

    /// Checks meanings across keys; returns every problem found.
    pub fn validate(&self) -> Vec<ConfigProblem> {
        let mut p = Vec::new();
        let mut bad = |key: &str, message: String| {
            p.push(ConfigProblem {
                key: key.into(),
                message,
            })
        };
        if self.job.name.is_empty()
            || !self
                .job
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
        {
            bad(
                "job.name",
                format!(
                    "{:?} is not allowed: use 1 or more of A-Z a-z 0-9 - _ . (it names a folder)",
                    self.job.name
                ),
            );
        }
        if self.job.parallelism == 0 || self.job.parallelism > 256 {
            bad(
                "job.parallelism",
                format!("{} is out of range 1..=256", self.job.parallelism),
            );
        }
        if self.job.max_parallelism == 0 || self.job.max_parallelism > 32_768 {
            bad(
                "job.max_parallelism",
                format!("{} is out of range 1..=32768", self.job.max_parallelism),
            );
        } else if self.job.parallelism > self.job.max_parallelism {
            bad(
                "job.parallelism",
                format!(
                    "{} exceeds job.max_parallelism ({}): each subtask needs at least one key group",
                    self.job.parallelism, self.job.max_parallelism
                ),
            );
        }
        if self.kafka.bootstrap_servers.trim().is_empty() {
            bad("kafka.bootstrap_servers", "must not be empty".into());
        }
        if self.kafka.group_id.trim().is_empty() {
            bad("kafka.group_id", "must not be empty".into());
        }
        for key in self.kafka.properties.keys() {
            if RESERVED_PROPERTIES.contains(&key.as_str()) {
                bad(
                    &format!("kafka.properties.\"{key}\""),
                    "is set by weir itself and may not be overridden".into(),
                );
            }
        }
        if self.checkpoint.interval < Duration::from_millis(10) {
            bad(
                "checkpoint.interval",
                format!(
                    "{} is too short; the minimum is 10ms",
                    humantime::format_duration(self.checkpoint.interval)
                ),
            );
        }
        if self.checkpoint.timeout < Duration::from_millis(100) {
            bad("checkpoint.timeout", "must be at least 100ms".to_string());
        }
        if self.checkpoint.retained == 0 {
            bad(
                "checkpoint.retained",
                "must be at least 1: recovery needs a checkpoint".into(),
            );
        }
        if self.checkpoint.dir.as_os_str().is_empty() {
            bad("checkpoint.dir", "must not be empty".into());
        }
        if self.state.dir.as_os_str().is_empty() {
            bad("state.dir", "must not be empty".into());
        }
        if self.state.cache_entries == 0 {
            bad("state.cache_entries", "must be at least 1".into());
        }
        if self.restart.backoff.is_zero() {
            bad("restart.backoff", "must be greater than 0".into());
        }
        if self.source.topics.is_empty() {
            bad("source.topics", "needs at least one topic".into());
        }
        for (i, t) in self.source.topics.iter().enumerate() {
            if t.trim().is_empty() {
                bad(&format!("source.topics[{i}]"), "empty topic name".into());
            }
        }
        match (&self.source.on_bad_record, &self.source.dead_letter_topic) {
            (BadRecordPolicy::DeadLetter, None) => bad(
                "source.dead_letter_topic",
                "is required when source.on_bad_record = \"dead-letter\"".into(),
            ),
            (_, Some(t)) if self.source.topics.contains(t) || *t == self.sink.topic => bad(
                "source.dead_letter_topic",
                format!("{t:?} must differ from the source and sink topics"),
            ),
            _ => {}
        }
        match self.pipeline.kind {
            PipelineKind::WordCount => {
                for (key, v) in [
                    ("pipeline.key", self.pipeline.key.is_some()),
                    ("pipeline.field", self.pipeline.field.is_some()),
                    ("pipeline.function", self.pipeline.function.is_some()),
                ] {
                    if v {
                        bad(key, "only applies to pipeline.kind = \"aggregate\"".into());
                    }
                }
            }
            PipelineKind::Aggregate => {
                if self.source.format != RecordFormat::Json {
                    bad(
                        "source.format",
                        "must be \"json\" for pipeline.kind = \"aggregate\"".into(),
                    );
                }
                if self.pipeline.key.as_deref().is_none_or(str::is_empty) {
                    bad(
                        "pipeline.key",
                        "is required for pipeline.kind = \"aggregate\" (the JSON field to group by)"
                            .into(),
                    );
                }
                match self.pipeline.function {
                    None => bad(
                        "pipeline.function",
                        "is required for pipeline.kind = \"aggregate\": one of count, sum, min, max, avg"
                            .into(),
                    ),
                    Some(AggregateFunction::Count) => {}
                    Some(f) => {
                        if self.pipeline.field.as_deref().is_none_or(str::is_empty) {
                            bad(
                                "pipeline.field",
                                format!("is required for function {:?} (the JSON number field)", f.name()),
                            );
                        }
                    }
                }
            }
        }
        if let Some(uid) = &self.pipeline.uid {
            if uid.is_empty() || uid == SOURCE_UID || uid.contains('/') {
                bad(
                    "pipeline.uid",
                    format!("{uid:?} is not allowed (empty, contains '/', or is reserved)"),
                );
            }
        }
        if self.sink.topic.trim().is_empty() {
            bad("sink.topic", "must not be empty".into());
        } else if self.source.topics.contains(&self.sink.topic) {
            bad(
                "sink.topic",
                format!(
                    "{:?} is also a source topic: the job would read its own output",
                    self.sink.topic
                ),
            );
        }
        if !self.admin.listen.is_empty()
            && self.admin.listen.parse::<std::net::SocketAddr>().is_err()
        {
            bad(
                "admin.listen",
                format!(
                    "{:?} is not an address like 127.0.0.1:9249",
                    self.admin.listen
                ),
            );
        }
        if let Some(var) = &self.admin.token_env {
            if std::env::var(var).map_or(true, |t| t.is_empty()) {
                bad(
                    "admin.token_env",
                    format!("environment variable {var} is not set or empty"),
                );
            }
        }
        if let Some(level) = &self.log.level {
            if tracing_subscriber::EnvFilter::try_new(level).is_err() {
                bad(
                    "log.level",
                    format!("{level:?} is not a valid filter such as \"info\""),
                );
            }
        }
        if self.sink.instance.is_empty() {
            bad("sink.instance", "must not be empty".into());
        }
        if self.sink.delivery == Delivery::ExactlyOnce
            && self.checkpoint.mode == CheckpointMode::AtLeastOnce
        {
            // Without alignment, records after barrier N reach the state and
            // transaction N while their offsets are not in checkpoint N: a
            // replay would count them twice, inside committed output.
            bad(
                "checkpoint.mode",
                "\"at-least-once\" cannot be combined with sink.delivery = \"exactly-once\": \
                 unaligned checkpoints put records of epoch N+1 into transaction N, so a replay \
                 would commit them twice. Use checkpoint.mode = \"exactly-once\" (the default) or \
                 sink.delivery = \"at-least-once\""
                    .into(),
            );
        }
        if self.sink.delivery == Delivery::ExactlyOnce {
            match self.transaction_timeout_ms() {
                Err(msg) => bad("kafka.properties.\"transaction.timeout.ms\"", msg),
                Ok(ms) => {
                    let needed = self.checkpoint.interval + self.checkpoint.timeout;
                    if Duration::from_millis(ms) <= needed {
                        bad(
                            "kafka.properties.\"transaction.timeout.ms\"",
                            format!(
                                "{ms} ms must exceed checkpoint.interval + checkpoint.timeout ({} ms), \
                                 or the broker aborts a transaction before its checkpoint can commit it",
                                needed.as_millis()
                            ),
                        );
                    }
                }
            }
        }
        p
    }

    /// The transaction timeout the producer will use.
    pub fn transaction_timeout_ms(&self) -> Result<u64, String> {
        match self.kafka.properties.get("transaction.timeout.ms") {
            None => Ok(DEFAULT_TRANSACTION_TIMEOUT_MS),
            Some(v) => v
                .parse()
                .map_err(|_| format!("{v:?} is not a whole number of milliseconds")),
        }
    }

    /// The uid of the keyed operator, stable across restarts.
    pub fn keyed_uid(&self) -> String {
        if let Some(uid) = &self.pipeline.uid {
            return uid.clone();
        }
        match self.pipeline.kind {
            PipelineKind::WordCount => "word-count".into(),
            PipelineKind::Aggregate => {
                let f = self.pipeline.function.map(|f| f.name()).unwrap_or("?");
                let key = self.pipeline.key.as_deref().unwrap_or("?");
                match self.pipeline.field.as_deref() {
                    Some(field) if self.pipeline.function != Some(AggregateFunction::Count) => {
                        format!("aggregate-{f}-{field}-by-{key}")
                    }
                    _ => format!("aggregate-{f}-by-{key}"),
                }
            }
        }
    }

    /// The transactional id of this instance's producer.
    pub fn transactional_id(&self) -> String {
        let prefix = self
            .sink
            .transactional_id_prefix
            .clone()
            .unwrap_or_else(|| self.job.name.clone());
        format!("{prefix}-{}", self.sink.instance)
    }

    /// `<checkpoint.dir>/<job name>`
    pub fn job_checkpoint_dir(&self) -> PathBuf {
        self.checkpoint.dir.join(&self.job.name)
    }

    /// Where savepoints go.
    pub fn savepoint_dir(&self) -> PathBuf {
        self.checkpoint.savepoint_dir.clone().unwrap_or_else(|| {
            self.checkpoint
                .dir
                .join(format!("{}-savepoints", self.job.name))
        })
    }

    /// `<state.dir>/<job name>`
    pub fn job_state_dir(&self) -> PathBuf {
        self.state.dir.join(&self.job.name)
    }
}

/// The uid of the source operator.
pub const SOURCE_UID: &str = "kafka-source";

fn section<T: DeserializeOwned>(
    tree: &BTreeMap<String, serde_json::Value>,
    name: &str,
    problems: &mut Vec<ConfigProblem>,
) -> Option<T> {
    match tree.get(name) {
        Some(v) => parse_section(v, name, problems),
        None => {
            problems.push(ConfigProblem {
                key: name.into(),
                message: "missing section".into(),
            });
            None
        }
    }
}

fn optional_section<T: DeserializeOwned + Default>(
    tree: &BTreeMap<String, serde_json::Value>,
    name: &str,
    problems: &mut Vec<ConfigProblem>,
) -> Option<T> {
    match tree.get(name) {
        Some(v) => parse_section(v, name, problems),
        None => Some(T::default()),
    }
}

/// Replaces `${NAME}` in every string value with the environment
/// variable's value (`$${` is a literal `${`). An unset variable is a
/// problem naming the key.
fn interpolate(
    value: &mut serde_json::Value,
    path: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
    problems: &mut Vec<ConfigProblem>,
) {
    match value {
        serde_json::Value::String(s) if s.contains('$') => {
            let mut out = String::with_capacity(s.len());
            let mut rest = s.as_str();
            while let Some(i) = rest.find('$') {
                out.push_str(&rest[..i]);
                let after = &rest[i..];
                if let Some(r) = after.strip_prefix("$${") {
                    out.push_str("${");
                    rest = r;
                } else if let Some(r) = after.strip_prefix("${") {
                    let Some(end) = r.find('}') else {
                        problems.push(ConfigProblem {
                            key: path.to_string(),
                            message: "unterminated ${...}".into(),
                        });
                        return;
                    };
                    let name = &r[..end];
                    match lookup(name) {
                        Some(v) => out.push_str(&v),
                        None => problems.push(ConfigProblem {
                            key: path.to_string(),
                            message: format!("environment variable {name} is not set"),
                        }),
                    }
                    rest = &r[end + 1..];
                } else {
                    out.push('$');
                    rest = &after[1..];
                }
            }
            out.push_str(rest);
            *s = out;
        }
        serde_json::Value::Array(items) => {
            for (i, v) in items.iter_mut().enumerate() {
                interpolate(v, &format!("{path}[{i}]"), lookup, problems);
            }
        }
        serde_json::Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                let key = if k.contains('.') {
                    format!("{path}.\"{k}\"")
                } else {
                    format!("{path}.{k}")
                };
                interpolate(v, &key, lookup, problems);
            }
        }
        _ => {}
    }
}

/// Deserializes one section, naming the full key path of every failure.
///
/// serde stops at the first error, so a bad enum would hide a bad value
/// next to it. After each error the offending key is taken out and the
/// section deserialized again, until it succeeds or an error can no longer
/// be attributed to a key of its own (a required key that was taken out).
fn parse_section<T: DeserializeOwned>(
    value: &serde_json::Value,
    name: &str,
    problems: &mut Vec<ConfigProblem>,
) -> Option<T> {
    let mut value = value.clone();
    let mut removed: Vec<Vec<String>> = Vec::new();
    let mut failed = false;
    // Bounded: every round removes one key.
    for _ in 0..64 {
        match serde_path_to_error::deserialize::<_, T>(value.clone()) {
            Ok(v) => return if failed { None } else { Some(v) },
            Err(e) => {
                let segments: Vec<String> = e
                    .path()
                    .iter()
                    .filter_map(|s| match s {
                        serde_path_to_error::Segment::Map { key } => Some(key.clone()),
                        serde_path_to_error::Segment::Seq { index } => Some(index.to_string()),
                        _ => None,
                    })
                    .collect();
                let path = e.path().to_string();
                let inner = e.into_inner().to_string();
                // serde names an unknown or missing field in the message, not the path.
                let field = ["unknown field `", "missing field `"].iter().find_map(|m| {
                    let rest = &inner[inner.find(m)? + m.len()..];
                    Some(rest[..rest.find('`')?].to_string())
                });
                let mut full = segments.clone();
                if let Some(f) = field.as_ref().filter(|f| segments.last() != Some(*f)) {
                    full.push(f.clone());
                }
                if inner.starts_with("missing field") && removed.contains(&full) {
                    // Reported already, as the bad value that was taken out.
                    return None;
                }
                let mut key = name.to_string();
                if path != "." {
                    key = format!("{key}.{path}");
                }
                if let Some(f) = field.filter(|f| !key.ends_with(&format!(".{f}"))) {
                    key = format!("{key}.{f}");
                }
                problems.push(ConfigProblem {
                    key,
                    message: inner,
                });
                failed = true;
                if full.is_empty() || !remove_path(&mut value, &full) {
                    return None;
                }
                removed.push(full);
            }
        }
    }
    None
}

/// Removes the value at `path` (object keys and array indexes); false when
/// there is nothing there to remove.
fn remove_path(value: &mut serde_json::Value, path: &[String]) -> bool {
    let Some((last, parents)) = path.split_last() else {
        return false;
    };
    let mut v = value;
    for seg in parents {
        v = match v {
            serde_json::Value::Object(m) => match m.get_mut(seg) {
                Some(x) => x,
                None => return false,
            },
            serde_json::Value::Array(a) => {
                match seg.parse::<usize>().ok().and_then(|i| a.get_mut(i)) {
                    Some(x) => x,
                    None => return false,
                }
            }
            _ => return false,
        };
    }
    match v {
        serde_json::Value::Object(m) => m.remove(last).is_some(),
        serde_json::Value::Array(a) => match last.parse::<usize>() {
            Ok(i) if i < a.len() => {
                a.remove(i);
                true
            }
            _ => false,
        },
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    const VALID: &str = r#"
[job]
name = "wc"
parallelism = 2
[kafka]
bootstrap_servers = "127.0.0.1:9092"
group_id = "weir-wc"
[kafka.properties]
"socket.timeout.ms" = "30000"
[checkpoint]
interval = "1s"
dir = "/tmp/weir-test/chk"
[state]
dir = "/tmp/weir-test/state"
[source]
topics = ["words"]
[pipeline]
kind = "word-count"
[sink]
topic = "word-counts"
"#;

    fn load(text: &str, env: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(text.as_bytes()).unwrap();
        let env = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::load_with_env(f.path(), Some(env))
    }

    fn keys(e: &ConfigError) -> Vec<&str> {
        e.problems.iter().map(|p| p.key.as_str()).collect()
    }

    #[test]
    fn valid_config_loads_with_defaults() {
        let c = load(VALID, &[]).unwrap();
        assert_eq!(c.job.parallelism, 2);
        assert_eq!(c.job.max_parallelism, 128);
        assert_eq!(c.checkpoint.mode, CheckpointMode::ExactlyOnce);
        assert_eq!(c.checkpoint.retained, 2);
        assert_eq!(c.kafka.properties["socket.timeout.ms"], "30000");
        assert_eq!(c.keyed_uid(), "word-count");
        assert_eq!(c.transactional_id(), "wc-0");
    }

    #[test]
    fn environment_overrides_keys() {
        let c = load(
            VALID,
            &[
                ("WEIR__CHECKPOINT__INTERVAL", "500ms"),
                ("WEIR__JOB__PARALLELISM", "3"),
                ("WEIR__SOURCE__TOPICS", "a,b"),
            ],
        )
        .unwrap();
        assert_eq!(c.checkpoint.interval, Duration::from_millis(500));
        assert_eq!(c.job.parallelism, 3);
        assert_eq!(c.source.topics, vec!["a", "b"]);
    }

    #[test]
    fn unknown_keys_are_errors_with_their_path() {
        let text = VALID.replace("[sink]", "[sink]\ntopci = \"x\"");
        let e = load(&text, &[]).unwrap_err();
        assert!(keys(&e).contains(&"sink.topci"), "{e}");
        let e = load(&format!("{VALID}\n[extra]\na = 1\n"), &[]).unwrap_err();
        assert!(keys(&e).contains(&"extra"), "{e}");
    }

    #[test]
    fn several_errors_are_reported_together_each_with_its_key() {
        let text = VALID
            .replace("parallelism = 2", "parallelism = 0")
            .replace("kind = \"word-count\"", "kind = \"aggregate\"")
            .replace("topic = \"word-counts\"", "topic = \"words\"");
        let e = load(&text, &[]).unwrap_err();
        let k = keys(&e);
        for expected in [
            "job.parallelism",
            "source.format",
            "pipeline.key",
            "pipeline.function",
            "sink.topic",
        ] {
            assert!(k.contains(&expected), "missing {expected} in {e}");
        }
    }

    #[test]
    fn wrong_types_name_the_key() {
        let text = VALID.replace("parallelism = 2", "parallelism = \"two\"");
        let e = load(&text, &[]).unwrap_err();
        assert_eq!(keys(&e), vec!["job.parallelism"], "{e}");
        let text = VALID.replace("[sink]\ntopic", "[sink]\nemit = \"sometimes\"\ntopic");
        let e = load(&text, &[]).unwrap_err();
        assert_eq!(keys(&e), vec!["sink.emit"], "{e}");
    }

    #[test]
    fn dead_letter_needs_a_topic() {
        let text = VALID.replace(
            "topics = [\"words\"]",
            "topics = [\"words\"]\non_bad_record = \"dead-letter\"",
        );
        let e = load(&text, &[]).unwrap_err();
        assert_eq!(keys(&e), vec!["source.dead_letter_topic"], "{e}");
    }

    #[test]
    fn reserved_kafka_properties_are_refused() {
        let text = VALID.replace("\"socket.timeout.ms\"", "\"isolation.level\"");
        let e = load(&text, &[]).unwrap_err();
        assert_eq!(
            keys(&e),
            vec!["kafka.properties.\"isolation.level\""],
            "{e}"
        );
    }

    #[test]
    fn transaction_timeout_must_exceed_interval_plus_checkpoint_timeout() {
        let text = VALID
            .replace(
                "topic = \"word-counts\"",
                "topic = \"word-counts\"\ndelivery = \"exactly-once\"",
            )
            .replace(
                "\"socket.timeout.ms\" = \"30000\"",
                "\"transaction.timeout.ms\" = \"10000\"",
            )
            .replace("interval = \"1s\"", "interval = \"1s\"\ntimeout = \"10s\"");
        let e = load(&text, &[]).unwrap_err();
        assert_eq!(
            keys(&e),
            vec!["kafka.properties.\"transaction.timeout.ms\""],
            "{e}"
        );
        assert!(e.to_string().contains("11000 ms"), "{e}");
        let ok = text.replace("\"10000\"", "\"20000\"");
        load(&ok, &[]).unwrap();
    }

    #[test]
    fn environment_variables_are_interpolated_and_secrets_redacted() {
        let text = VALID.replace(
            "\"socket.timeout.ms\" = \"30000\"",
            "\"sasl.password\" = \"${WEIR_TEST_SECRET}\"\n\"client.id\" = \"weir-$${literal}\"",
        );
        let c = load(&text, &[("WEIR_TEST_SECRET", "hunter2")]).unwrap();
        assert_eq!(c.kafka.properties["sasl.password"], "hunter2");
        assert_eq!(c.kafka.properties["client.id"], "weir-${literal}");
        let debug = format!("{c:?}");
        assert!(!debug.contains("hunter2"), "{debug}");
        assert!(debug.contains("<redacted>"), "{debug}");
        let e = load(&text, &[]).unwrap_err();
        assert_eq!(keys(&e), vec!["kafka.properties.\"sasl.password\""], "{e}");
        assert!(e.to_string().contains("WEIR_TEST_SECRET is not set"), "{e}");
    }

    #[test]
    fn aggregate_uid_names_function_field_and_key() {
        let text = VALID
            .replace(
                "topics = [\"words\"]",
                "topics = [\"words\"]\nformat = \"json\"",
            )
            .replace(
                "kind = \"word-count\"",
                "kind = \"aggregate\"\nkey = \"user\"\nfield = \"amount\"\nfunction = \"sum\"",
            );
        let c = load(&text, &[]).unwrap();
        assert_eq!(c.keyed_uid(), "aggregate-sum-amount-by-user");
    }

    #[test]
    fn every_bad_value_in_one_section_is_reported() {
        // A bad enum used to hide the bad duration next to it.
        let text = VALID.replace(
            "interval = \"1s\"",
            "interval = \"soon\"\nmode = \"sometimes\"\nretained = \"two\"",
        );
        let e = load(&text, &[]).unwrap_err();
        let mut k = keys(&e);
        k.sort();
        assert_eq!(
            k,
            vec![
                "checkpoint.interval",
                "checkpoint.mode",
                "checkpoint.retained"
            ],
            "{e}"
        );
        // A bad required value: reported once, not again as missing.
        let text = VALID.replace("topics = [\"words\"]", "topics = 3\nformat = \"xml\"");
        let e = load(&text, &[]).unwrap_err();
        let mut k = keys(&e);
        k.sort();
        assert_eq!(k, vec!["source.format", "source.topics"], "{e}");
    }

    #[test]
    fn unaligned_checkpoints_with_transactions_are_refused_naming_both_keys() {
        let text = VALID
            .replace(
                "interval = \"1s\"",
                "interval = \"1s\"\nmode = \"at-least-once\"",
            )
            .replace(
                "topic = \"word-counts\"",
                "topic = \"word-counts\"\ndelivery = \"exactly-once\"",
            );
        let e = load(&text, &[]).unwrap_err();
        assert_eq!(keys(&e), vec!["checkpoint.mode"], "{e}");
        assert!(e.to_string().contains("sink.delivery"), "{e}");
        // Each alone is fine.
        let alo = VALID.replace(
            "interval = \"1s\"",
            "interval = \"1s\"\nmode = \"at-least-once\"",
        );
        assert!(load(&alo, &[]).is_ok());
    }

    #[test]
    fn properties_weir_owns_are_refused() {
        let text = VALID.replace(
            "\"socket.timeout.ms\" = \"30000\"",
            "\"auto.offset.reset\" = \"latest\"\n\"linger.ms\" = \"50\"",
        );
        let e = load(&text, &[]).unwrap_err();
        assert_eq!(
            keys(&e),
            vec!["kafka.properties.\"auto.offset.reset\""],
            "{e}"
        );
    }
}
