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

mod formats;
mod sections;
mod sql;
pub mod time_zone;
mod validate;

pub use sections::*;

/// The whole configuration of one weir job.
#[derive(Debug, Clone)]
pub struct Config {
    pub job: JobConfig,
    pub kafka: KafkaConfig,
    pub checkpoint: CheckpointConfig,
    pub state: StateConfig,
    pub restart: RestartConfig,
    /// What the job computes: a built-in pipeline, SQL, or a graph built
    /// in Rust.
    pub kind: JobKind,
    /// `[sink]`'s delivery and transactional id, for every sink of the job.
    pub output: OutputConfig,
    pub admin: AdminConfig,
    pub log: LogConfig,
    pub scale: ScaleConfig,
}

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
    "scale",
    "sources",
    "sinks",
    "registries",
    "functions",
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
        Self::load_inner(file, env, false)
    }

    /// The configuration of a job built in Rust (`weir::run`): the same
    /// file, without `[source]` and `[pipeline]` (the graph defines its
    /// sources and operators, and refuses them here so that nobody edits
    /// a section that does nothing). `[sink]` is optional: its `delivery`,
    /// `transactional_id_prefix` and `instance` apply to every sink of the
    /// graph; a `topic` or `emit` there is refused (the graph names its
    /// sinks).
    pub fn load_for_graph(file: &Path) -> Result<Config, ConfigError> {
        Self::load_inner(file, None, true)
    }

    fn load_inner(
        file: &Path,
        env: Option<BTreeMap<String, String>>,
        graph: bool,
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
        if graph {
            for name in ["source", "pipeline"] {
                if tree.contains_key(name) {
                    problems.push(ConfigProblem {
                        key: name.into(),
                        message: "a job built with the Rust API defines its sources and operators \
                                  in code; remove this section"
                            .into(),
                    });
                }
            }
        }
        let sql = if graph {
            None
        } else {
            sql::sql_job(file, &tree, &mut problems)
        };
        let job = section::<JobConfig>(&tree, "job", &mut problems);
        let kafka = section::<KafkaConfig>(&tree, "kafka", &mut problems);
        let checkpoint = section::<CheckpointConfig>(&tree, "checkpoint", &mut problems);
        let state = section::<StateConfig>(&tree, "state", &mut problems);
        let restart = optional_section::<RestartConfig>(&tree, "restart", &mut problems);
        let admin = optional_section::<AdminConfig>(&tree, "admin", &mut problems);
        let log = optional_section::<LogConfig>(&tree, "log", &mut problems);
        let scale = optional_section::<ScaleConfig>(&tree, "scale", &mut problems);
        let sink = match tree.get("sink") {
            Some(v) => parse_section::<SinkSection>(v, "sink", &mut problems),
            None => None,
        };
        let mut output = sink
            .as_ref()
            .map_or_else(OutputConfig::default, |s| OutputConfig {
                delivery: s.delivery,
                transactional_id_prefix: s.transactional_id_prefix.clone(),
                instance: s.instance.clone(),
            });
        if let Some(sql) = &sql {
            // The sinks' agreed delivery ([sink]'s, when it gives one, is
            // among them).
            output.delivery = sql.delivery;
        }
        // `[sink] topic` and `emit` belong to a built-in pipeline's sink.
        let foreign = match (graph, &sql) {
            (true, _) => Some("a job built with the Rust API writes to the sinks its graph names"),
            (false, Some(_)) => Some("a SQL job writes to the topics of its [sinks.NAME]"),
            (false, None) => None,
        };
        if let (Some(why), Some(s)) = (foreign, &sink) {
            for (key, given) in [("topic", s.topic.is_some()), ("emit", s.emit.is_some())] {
                if given {
                    problems.push(ConfigProblem {
                        key: format!("sink.{key}"),
                        message: format!("{why}; remove sink.{key}"),
                    });
                }
            }
        }
        let mut pipeline_ok = true;
        let kind = match (graph, sql) {
            (true, _) => Some(JobKind::Graph),
            (false, Some(sql)) => Some(JobKind::Sql(Box::new(sql.job))),
            // A SQL job whose sections did not parse: their problems are
            // reported, and a built-in pipeline's sections are not looked for.
            (false, None) if sql::is_sql_job(&tree) => None,
            (false, None) => {
                let source = section::<SourceConfig>(&tree, "source", &mut problems);
                let pipeline = pipeline_section(&mut tree, &mut problems);
                let sink = match (&sink, tree.contains_key("sink")) {
                    (Some(s), _) => match &s.topic {
                        Some(topic) => Some(SinkConfig {
                            topic: topic.clone(),
                            emit: s.emit.unwrap_or_default(),
                        }),
                        None => {
                            problems.push(ConfigProblem {
                                key: "sink.topic".into(),
                                message: "missing field `topic`".into(),
                            });
                            None
                        }
                    },
                    // Not parsed: its problems are reported.
                    (None, true) => None,
                    (None, false) => {
                        problems.push(ConfigProblem {
                            key: "sink".into(),
                            message: "missing section".into(),
                        });
                        None
                    }
                };
                match (source, pipeline, sink) {
                    (Some(source), Some((pipeline, ok)), Some(sink)) => {
                        pipeline_ok = ok;
                        Some(JobKind::Builtin(Box::new(BuiltinJob {
                            source,
                            pipeline,
                            sink,
                        })))
                    }
                    _ => None,
                }
            }
        };
        // `[functions.NAME]` are called by a SQL job's statements: another
        // job would load them and never call them.
        if tree.contains_key("functions")
            && !matches!(kind, Some(JobKind::Sql(_)))
            && !sql::is_sql_job(&tree)
        {
            problems.push(ConfigProblem {
                key: "functions".into(),
                message: if graph {
                    "[functions.NAME] are WebAssembly functions for a SQL job's statements; a \
                     job built with the Rust API calls Rust functions itself (or registers them \
                     with weir::udf for its SQL); remove [functions]"
                        .into()
                } else {
                    "[functions.NAME] are WebAssembly functions for a SQL job's statements \
                     ([pipeline] sql); a built-in pipeline calls none; remove [functions]"
                        .into()
                },
            });
        }
        let sink_ok = sink.is_some() || !tree.contains_key("sink");
        let (
            Some(job),
            Some(kafka),
            Some(checkpoint),
            Some(state),
            Some(restart),
            Some(kind),
            true,
            Some(admin),
            Some(log),
            Some(scale),
        ) = (
            job, kafka, checkpoint, state, restart, kind, sink_ok, admin, log, scale,
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
            kind,
            output,
            admin,
            log,
            scale,
        };
        // A pipeline section that did not parse was replaced by a stand-in
        // so the other sections are still checked; what validation says
        // about the stand-in is not the user's problem.
        problems.extend(
            config
                .validate()
                .into_iter()
                .filter(|p| pipeline_ok || !p.key.starts_with("pipeline")),
        );
        if problems.is_empty() && pipeline_ok {
            Ok(config)
        } else {
            Err(fail(problems))
        }
    }
}

impl Config {
    /// The built-in pipeline, when the job is one.
    pub fn builtin(&self) -> Option<&BuiltinJob> {
        match &self.kind {
            JobKind::Builtin(b) => Some(b),
            _ => None,
        }
    }

    /// The SQL job, when the job is one.
    pub fn sql(&self) -> Option<&SqlJob> {
        match &self.kind {
            JobKind::Sql(sql) => Some(sql),
            _ => None,
        }
    }
}

impl BuiltinJob {
    /// The uid of the keyed operator, stable across restarts.
    pub fn keyed_uid(&self) -> String {
        if let Some(uid) = self.pipeline.uid() {
            return uid.to_string();
        }
        let base = match &self.pipeline {
            PipelineConfig::WordCount { .. } => "word-count".to_string(),
            PipelineConfig::Aggregate {
                key,
                field,
                function,
                ..
            } => {
                // Pointers as uid parts: "/user/id" → "user.id" (a uid names
                // a folder); a bare name stays as it always was.
                let part = |p: &str| p.trim_start_matches('/').replace('/', ".");
                let key = part(key);
                match field.as_deref() {
                    Some(field) if *function != AggregateFunction::Count => {
                        format!("aggregate-{}-{}-by-{key}", function.name(), part(field))
                    }
                    _ => format!("aggregate-{}-by-{key}", function.name()),
                }
            }
        };
        match self.pipeline.window() {
            None => base,
            Some(w) => {
                let d = |d: Option<Duration>| {
                    humantime::format_duration(d.unwrap_or_default())
                        .to_string()
                        .replace(' ', "")
                };
                match w.kind {
                    WindowKind::Tumbling => format!("{base}-tumbling-{}", d(w.size)),
                    WindowKind::Hopping => format!("{base}-hopping-{}-{}", d(w.size), d(w.slide)),
                    WindowKind::Session => format!("{base}-session-{}", d(w.gap)),
                }
            }
        }
    }
}

impl Config {
    /// The transactional id of this instance's producer.
    pub fn transactional_id(&self) -> String {
        self.transactional_id_of(self.instance())
    }

    /// The transactional id of this instance's producer `slot`: single
    /// mode's exactly-once jobs alternate two producers per epoch
    /// (`runtime::transactions`). Slot 0's is [`Self::transactional_id`],
    /// the id weir always used (so an upgrade fences the old process);
    /// slot 1's adds `.1`.
    pub fn transactional_id_of_slot(&self, slot: usize) -> String {
        match slot {
            0 => self.transactional_id(),
            n => format!("{}.{n}", self.transactional_id()),
        }
    }

    /// The transactional id of instance `instance` of this job (group mode:
    /// every instance's is the same prefix and its own id).
    pub fn transactional_id_of(&self, instance: &str) -> String {
        let prefix = self
            .output
            .transactional_id_prefix
            .as_deref()
            .unwrap_or(&self.job.name);
        format!("{prefix}-{instance}")
    }

    /// This instance's stable id: `scale.instance`, else its older name
    /// `sink.instance`.
    pub fn instance(&self) -> &str {
        self.scale
            .instance
            .as_deref()
            .unwrap_or(&self.output.instance)
    }

    /// True when several instances share the job (`scale.mode = "group"`).
    pub fn is_group(&self) -> bool {
        self.scale.mode == ScaleMode::Group
    }

    /// The checkpoint location as written, for `s3://` detection.
    pub fn checkpoint_url(&self) -> Option<&str> {
        self.checkpoint
            .dir
            .to_str()
            .filter(|d| d.starts_with("s3://"))
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

/// `[pipeline]`, a tagged enum. serde reports one missing field of a
/// variant at a time, so the fields each kind requires are checked first
/// (all reported), then filled with stand-ins so the remaining keys are
/// checked too. Returns the pipeline and whether it is the user's (true)
/// or a stand-in after errors (false).
fn pipeline_section(
    tree: &mut BTreeMap<String, serde_json::Value>,
    problems: &mut Vec<ConfigProblem>,
) -> Option<(PipelineConfig, bool)> {
    let before = problems.len();
    if let Some(serde_json::Value::Object(p)) = tree.get_mut("pipeline") {
        if p.get("kind").and_then(|k| k.as_str()) == Some("aggregate") {
            for (field, stand_in) in [("key", "/"), ("function", "count")] {
                if !p.contains_key(field) {
                    problems.push(ConfigProblem {
                        key: format!("pipeline.{field}"),
                        message: format!(
                            "missing field `{field}`, required for kind = \"aggregate\""
                        ),
                    });
                    p.insert(field.into(), stand_in.into());
                }
            }
        }
    }
    let parsed = section::<PipelineConfig>(tree, "pipeline", problems);
    let ok = problems.len() == before;
    match parsed {
        Some(p) => Some((p, ok)),
        // Still check the other sections against a stand-in.
        None if tree.contains_key("pipeline") => Some((
            PipelineConfig::WordCount {
                uid: None,
                window: None,
            },
            false,
        )),
        None => None,
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

    /// [`VALID`]'s shared sections, without a job.
    fn common() -> &'static str {
        VALID.split("[source]").next().unwrap()
    }

    #[test]
    fn a_sql_job_has_no_builtin_sections_and_its_sinks_give_the_delivery() {
        let sql = format!(
            "{}[sources.lines]\ntopics = [\"words\"]\nformat = \"text\"\n\
             [sinks.out]\ntopic = \"out\"\ndelivery = \"exactly-once\"\n\
             [sink]\ninstance = \"b\"\n\
             [pipeline]\nsql = \"INSERT INTO out SELECT line FROM lines\"\n",
            common()
        );
        let c = load(&sql, &[]).unwrap();
        assert!(c.builtin().is_none());
        assert_eq!(c.sql().unwrap().sinks["out"].topic, "out");
        assert_eq!(c.output.delivery, Delivery::ExactlyOnce);
        assert_eq!(c.transactional_id(), "wc-b");
        // A built-in sink's keys in a SQL job are refused, by key.
        let e = load(
            &sql.replace(
                "[sink]\ninstance = \"b\"\n",
                "[sink]\ninstance = \"b\"\ntopic = \"x\"\nemit = \"on-checkpoint\"\n",
            ),
            &[],
        )
        .unwrap_err();
        assert_eq!(keys(&e), ["sink.topic", "sink.emit"], "{e}");
        assert!(e.to_string().contains("[sinks.NAME]"), "{e}");
        // [sink] delivery is one of the job's, and must agree.
        let e = load(
            &sql.replace(
                "[sink]\ninstance = \"b\"\n",
                "[sink]\ndelivery = \"at-least-once\"\n",
            ),
            &[],
        )
        .unwrap_err();
        assert_eq!(keys(&e), ["sinks.out.delivery"], "{e}");
        // A statements file that cannot be read is the one problem: no
        // built-in [source], [pipeline] kind or [sink] is asked for.
        let e = load(
            &sql.replace(
                "sql = \"INSERT INTO out SELECT line FROM lines\"",
                "sql_file = \"/nonexistent/weir.sql\"",
            ),
            &[],
        )
        .unwrap_err();
        assert_eq!(keys(&e), ["pipeline.sql_file"], "{e}");
    }

    #[test]
    fn a_graph_job_takes_only_the_delivery_keys_of_sink() {
        let load_graph = |text: &str| {
            let mut f = tempfile::NamedTempFile::new().unwrap();
            f.write_all(text.as_bytes()).unwrap();
            Config::load_for_graph(f.path())
        };
        let c = load_graph(common()).unwrap();
        assert!(matches!(c.kind, JobKind::Graph));
        assert_eq!(c.output.delivery, Delivery::AtLeastOnce);
        let c = load_graph(&format!(
            "{}[sink]\ndelivery = \"exactly-once\"\n",
            common()
        ))
        .unwrap();
        assert_eq!(c.output.delivery, Delivery::ExactlyOnce);
        let e = load_graph(&format!("{}[sink]\ntopic = \"out\"\n", common())).unwrap_err();
        assert_eq!(keys(&e), ["sink.topic"], "{e}");
        assert!(e.to_string().contains("graph names"), "{e}");
    }

    #[test]
    fn functions_outside_a_sql_job_are_refused_by_their_key() {
        let functions = "\n[functions.f]\nwasm = \"f.wasm\"\nreturns = \"BIGINT\"\n";
        let e = load(&format!("{VALID}{functions}"), &[]).unwrap_err();
        assert_eq!(keys(&e), ["functions"], "{e}");
        assert!(e.to_string().contains("built-in pipeline"), "{e}");
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(format!("{}{functions}", common()).as_bytes())
            .unwrap();
        let e = Config::load_for_graph(f.path()).unwrap_err();
        assert_eq!(keys(&e), ["functions"], "{e}");
        assert!(e.to_string().contains("Rust API"), "{e}");
    }

    #[test]
    fn a_builtin_pipeline_needs_its_sink_topic() {
        let e = load(
            &VALID.replace("topic = \"word-counts\"", "delivery = \"at-least-once\""),
            &[],
        )
        .unwrap_err();
        assert_eq!(keys(&e), ["sink.topic"], "{e}");
        let e = load(VALID.split("[sink]").next().unwrap(), &[]).unwrap_err();
        assert_eq!(keys(&e), ["sink"], "{e}");
    }

    #[test]
    fn valid_config_loads_with_defaults() {
        let c = load(VALID, &[]).unwrap();
        assert_eq!(c.job.parallelism, 2);
        assert_eq!(c.job.max_parallelism, 128);
        assert_eq!(c.checkpoint.mode, CheckpointMode::ExactlyOnce);
        assert_eq!(c.checkpoint.retained, 2);
        assert_eq!(c.kafka.properties["socket.timeout.ms"], "30000");
        assert_eq!(c.builtin().unwrap().keyed_uid(), "word-count");
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
        assert_eq!(c.builtin().unwrap().source.topics, vec!["a", "b"]);
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
    fn debug_of_the_config_redacts_every_kafka_and_s3_secret() {
        let props = [
            ("sasl.password", "kafka-sasl-pw"),
            ("ssl.key.password", "kafka-key-pw"),
            ("ssl.keystore.password", "kafka-keystore-pw"),
            ("ssl.truststore.password", "kafka-truststore-pw"),
            ("sasl.oauthbearer.client.secret", "kafka-oauth-secret"),
            ("sasl.oauthbearer.config", "principal=kafka-oauth-config"),
            ("ssl.key.pem", "kafka-key-pem"),
            ("basic.auth.user.info", "user:kafka-basic-pw"),
        ];
        let lines: String = props
            .iter()
            .map(|(k, v)| format!("\"{k}\" = \"{v}\"\n"))
            .collect();
        let text = VALID
            .replace("\"socket.timeout.ms\" = \"30000\"", &lines)
            .replace("dir = \"/tmp/weir-test/chk\"", "dir = \"s3://bucket/prod\"")
            .replace(
                "topic = \"word-counts\"",
                "topic = \"word-counts\"\ndelivery = \"exactly-once\"",
            )
            + "[checkpoint.s3]\nendpoint = \"http://127.0.0.1:9300\"\nregion = \"eu-west-1\"\n\
               access_key_id = \"AKIDEXAMPLEKEYID\"\nsecret_access_key = \"s3-secret-key\"\n\
               [scale]\nmode = \"group\"\ninstance = \"a\"\n";
        let c = load(&text, &[]).unwrap();
        let debug = format!("{c:?}");
        let pretty = format!("{c:#?}");
        for secret in props
            .iter()
            .map(|(_, v)| *v)
            .chain(["AKIDEXAMPLEKEYID", "s3-secret-key"])
        {
            assert!(!debug.contains(secret), "{secret} in {debug}");
            assert!(!pretty.contains(secret), "{secret} in {pretty}");
        }
        let s3 = format!("{:?}", c.checkpoint.s3.as_ref().unwrap());
        assert!(
            !s3.contains("s3-secret-key") && !s3.contains("AKIDEXAMPLEKEYID"),
            "{s3}"
        );
        assert!(
            s3.contains("secret_access_key: Some(\"<redacted>\")"),
            "{s3}"
        );
        assert!(s3.contains("eu-west-1"), "what is not secret stays: {s3}");
        let kafka = format!("{:?}", c.kafka);
        assert!(
            kafka.contains("\"ssl.key.password\": \"<redacted>\""),
            "{kafka}"
        );
        // An unset secret prints as unset, not as a redacted value.
        let none = format!("{:?}", S3Config::default());
        assert!(none.contains("secret_access_key: None"), "{none}");
    }

    #[test]
    fn an_admin_endpoint_beyond_loopback_needs_a_token_or_an_explicit_opt_out() {
        let with_admin = |admin: &str| VALID.to_string() + "[admin]\n" + admin + "\n";
        for open in ["0.0.0.0:9249", "[::]:9249", "10.1.2.3:9249"] {
            let e = load(&with_admin(&format!("listen = \"{open}\"")), &[]).unwrap_err();
            assert_eq!(keys(&e), vec!["admin.token_env"], "{open}: {e}");
            let message = e.to_string();
            assert!(message.contains("allow_unauthenticated"), "{message}");
            assert!(message.contains("beyond loopback"), "{message}");
        }
        for loopback in [
            "127.0.0.1:9249",
            "127.0.0.2:0",
            "[::1]:9249",
            "localhost:9249",
            "",
        ] {
            load(&with_admin(&format!("listen = \"{loopback}\"")), &[])
                .unwrap_or_else(|e| panic!("{loopback}: {e}"));
        }
        let opted_out = load(
            &with_admin("listen = \"0.0.0.0:9249\"\nallow_unauthenticated = true"),
            &[],
        )
        .unwrap();
        assert!(opted_out.admin.allow_unauthenticated);
        // SAFETY (of the test): a variable no other test reads or writes.
        std::env::set_var("WEIR_TEST_ADMIN_TOKEN_7f3a", "t0ken");
        load(
            &with_admin("listen = \"0.0.0.0:9249\"\ntoken_env = \"WEIR_TEST_ADMIN_TOKEN_7f3a\""),
            &[],
        )
        .unwrap();
        let both = load(
            &with_admin(
                "listen = \"0.0.0.0:9249\"\ntoken_env = \"WEIR_TEST_ADMIN_TOKEN_7f3a\"\n\
                 allow_unauthenticated = true",
            ),
            &[],
        )
        .unwrap_err();
        assert_eq!(keys(&both), vec!["admin.allow_unauthenticated"], "{both}");
        let unset = load(
            &with_admin("listen = \"0.0.0.0:9249\"\ntoken_env = \"WEIR_TEST_ADMIN_TOKEN_UNSET\""),
            &[],
        )
        .unwrap_err();
        assert_eq!(keys(&unset), vec!["admin.token_env"], "{unset}");
    }

    #[test]
    fn savepoints_are_bounded_by_default() {
        let c = load(VALID, &[]).unwrap();
        assert_eq!(c.checkpoint.max_savepoints, 10);
        let text = VALID.replace("interval = \"1s\"", "interval = \"1s\"\nmax_savepoints = 3");
        assert_eq!(load(&text, &[]).unwrap().checkpoint.max_savepoints, 3);
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
        assert_eq!(
            c.builtin().unwrap().keyed_uid(),
            "aggregate-sum-amount-by-user"
        );
        // Pointers into nested objects name a folder, so no '/'.
        let nested = text.replace("key = \"user\"", "key = \"/user/id\"")
            + "[pipeline.window]\nkind = \"tumbling\"\nsize = \"1m\"\n[source.event_time]\n";
        let c = load(&nested, &[]).unwrap();
        assert_eq!(
            c.builtin().unwrap().keyed_uid(),
            "aggregate-sum-amount-by-user.id-tumbling-1m"
        );
    }

    #[test]
    fn group_mode_reads_scale_and_s3_settings_with_secrets_from_the_environment() {
        let text = VALID.replace("dir = \"/tmp/weir-test/chk\"", "dir = \"s3://bucket/prod\"")
            .replace("topic = \"word-counts\"", "topic = \"word-counts\"\ndelivery = \"exactly-once\"")
            + "[checkpoint.s3]\nendpoint = \"http://127.0.0.1:9300\"\nsecret_access_key = \"${WEIR_TEST_S3_SECRET}\"\nallow_http = true\n"
            + "[scale]\nmode = \"group\"\ntasks = 16\ninstance = \"${WEIR_TEST_HOST}\"\n";
        let env = [
            ("WEIR_TEST_S3_SECRET", "s3cret"),
            ("WEIR_TEST_HOST", "weir-2"),
        ];
        let c = load(&text, &env).unwrap();
        assert!(c.is_group());
        assert_eq!(c.scale.tasks, 16);
        assert_eq!(c.instance(), "weir-2");
        assert_eq!(c.transactional_id(), "wc-weir-2");
        assert_eq!(c.checkpoint_url(), Some("s3://bucket/prod"));
        let s3 = c.checkpoint.s3.as_ref().unwrap();
        assert_eq!(s3.secret_access_key.as_deref(), Some("s3cret"));
        assert!(s3.allow_http);
        // `sink.instance` stays accepted as the older name.
        let old = VALID.replace(
            "topic = \"word-counts\"",
            "topic = \"word-counts\"\ninstance = \"b\"",
        );
        assert_eq!(load(&old, &[]).unwrap().transactional_id(), "wc-b");
    }

    #[test]
    fn group_mode_refuses_what_it_cannot_do_naming_each_key() {
        let text =
            VALID.to_string() + "[scale]\nmode = \"group\"\ntasks = 200\ninstance = \"a/b\"\n";
        let e = load(&text, &[]).unwrap_err();
        let mut k = keys(&e);
        k.sort();
        // At-least-once (the default delivery), too many tasks for 128 key
        // groups, an instance id that cannot name objects.
        assert_eq!(
            k,
            vec!["scale.instance", "scale.tasks", "sink.delivery"],
            "{e}"
        );
        // Instances left on the default id would fence each other.
        let text = VALID.replace(
            "topic = \"word-counts\"",
            "topic = \"word-counts\"\ndelivery = \"exactly-once\"",
        ) + "[scale]\nmode = \"group\"\n";
        let e = load(&text, &[]).unwrap_err();
        assert_eq!(keys(&e), vec!["scale.instance"], "{e}");
        // s3:// needs group mode; [checkpoint.s3] needs s3://.
        let text = VALID.replace("dir = \"/tmp/weir-test/chk\"", "dir = \"s3://bucket\"");
        assert_eq!(keys(&load(&text, &[]).unwrap_err()), vec!["checkpoint.dir"]);
        let text = VALID.to_string() + "[checkpoint.s3]\nregion = \"eu-west-1\"\n";
        let e = load(&text, &[]).unwrap_err();
        assert_eq!(keys(&e), vec!["checkpoint.s3"], "{e}");
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

    #[test]
    fn window_keys_are_checked_against_the_kind() {
        let windowed = |window: &str| {
            VALID.replace(
                "topics = [\"words\"]",
                "topics = [\"words\"]\nformat = \"json\"",
            ) + "[source.event_time]\n[pipeline.window]\n"
                + window
        };
        assert!(load(&windowed("kind = \"tumbling\"\nsize = \"1m\"\n"), &[]).is_ok());
        let e = load(
            &windowed("kind = \"hopping\"\nsize = \"1h\"\nslide = \"1ms\"\n"),
            &[],
        )
        .unwrap_err();
        assert_eq!(keys(&e), vec!["pipeline.window.slide"], "{e}");
        let e = load(&windowed("kind = \"session\"\nsize = \"1m\"\n"), &[]).unwrap_err();
        let mut k = keys(&e);
        k.sort();
        assert_eq!(
            k,
            vec!["pipeline.window.gap", "pipeline.window.size"],
            "{e}"
        );
        let e = load(
            &windowed("kind = \"tumbling\"\nsize = \"1m\"\n").replace(
                "[source.event_time]\n",
                "[source.event_time]\nfield = \"/ts\"\n",
            ),
            &[],
        )
        .unwrap_err();
        assert_eq!(keys(&e), vec!["source.event_time.field"], "{e}");
    }
}
