//! The TOML pipelines (`[pipeline] kind = "word-count" | "aggregate"`,
//! with or without `[pipeline.window]`) as SQL, compiled onto job graphs
//! by the same planner as `[pipeline] sql` ([`sql_job`]), so they run on
//! the one engine in both modes.
//!
//! ```text
//! word-count: source (text or JSON strings) → UNNEST(WORDS(LOWER(line))) → hash(key) → COUNT(*) → sink
//! aggregate:  source (key and field by JSON pointer) → hash(key) → f(value) → sink
//! windowed:   ... → hash(key) → window aggregate (late records: dead letters) → sink
//! ```
//!
//! What a user of these pipelines relies on is kept: the output
//! (`{"key":"hello","count":3}` keyed by the word, or with
//! `window_start`/`window_end`), the messages for bad records, the
//! operator's uid (`[pipeline] uid`, default `word-count` or
//! `aggregate-<function>`), and the emission (`[sink] emit`, a window's
//! `emit`).

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value as Json;

use crate::config::{
    AggregateFunction, BadRecordPolicy, BuiltinJob, Config, EmitMode, JobKind, LatePolicy,
    PipelineConfig, RecordFormat, SqlJob, SqlPipelineConfig, WindowEmit, SOURCE_UID,
};
use crate::dataflow::graph::RecordDecoder;
use crate::dataflow::ops::aggregate::AggregateEmit;
use crate::dataflow::prelude::*;
use crate::error::{Result, WeirError};
use crate::sql::bind::{AggregateSettings, Catalog, CatalogSink, CatalogSource};
use crate::time::timestamp::{normalize_pointer, TimestampExtractor};
use crate::time::NO_TIMESTAMP;
use crate::window::assign::WindowSpec;

/// The sink's uid in every TOML pipeline's graph.
pub const SINK_UID: &str = "sink";

/// The job graph of `c`'s `[source]`, `[pipeline]` and `[sink]`, or of
/// its SQL job.
pub fn graph(c: &Config) -> Result<Graph> {
    plan(c).map(|p| p.graph)
}

/// `c`'s job planned: a SQL job's statements, or a TOML pipeline's SQL
/// ([`sql_job`]) over its catalog.
pub fn plan(c: &Config) -> Result<crate::sql::Plan> {
    let (job, catalog) = match &c.kind {
        JobKind::Sql(sql) => (sql.as_ref().clone(), Catalog::default()),
        JobKind::Builtin(b) => sql_job(c, b),
        JobKind::Graph => {
            return Err(WeirError::Graph {
                job: c.job.name.clone(),
                problems: vec![
                    "a job built with the Rust API has its graph in code, not in its configuration"
                        .into(),
                ],
            })
        }
    };
    crate::sql::bind::plan_with(c, &job, catalog).map_err(|errors| WeirError::Graph {
        job: c.job.name.clone(),
        problems: errors
            .iter()
            .map(|e| e.render(&job.origin, &job.text))
            .collect(),
    })
}

/// The name a TOML pipeline's SQL gives its sink.
const OUTPUT: &str = "output";

/// A TOML pipeline as SQL, compiled by the same planner as `[pipeline]
/// sql`. The catalog holds what its users know and SQL would write
/// differently: its table's decoder (a text or JSON-string `line`, or a key
/// and a number by JSON pointers, with their error messages), its sink
/// (`{"key":"hello","count":3}` keyed by the word itself, a row per
/// update), its operator's uid and checkpoint kind, and its emission.
pub fn sql_job(c: &Config, b: &BuiltinJob) -> (SqlJob, Catalog) {
    let window = b.pipeline.window();
    let event_time =
        b.source.event_time.as_ref().map(|et| {
            TimestampExtractor::new(et.field.as_deref().map(normalize_pointer), et.format)
        });
    let topics: Vec<&str> = b.source.topics.iter().map(String::as_str).collect();
    // Late records go to the dead-letter topic as they were read: the
    // record travels with its rows, only then.
    let late_to = late_topic(b);
    let columns = Columns {
        time: window.is_some(),
        record: late_to.is_some(),
    };
    let function = match &b.pipeline {
        PipelineConfig::WordCount { .. } => AggregateFunction::Count,
        PipelineConfig::Aggregate { function, .. } => *function,
    };
    let (table, decoder, fields): (&str, Arc<dyn RecordDecoder>, _) = match &b.pipeline {
        PipelineConfig::WordCount { .. } => (
            "lines",
            Arc::new(Words {
                json: b.source.format == RecordFormat::Json,
                event_time,
                columns,
            }),
            vec![("line", DataType::String)],
        ),
        PipelineConfig::Aggregate { key, field, .. } => (
            "records",
            Arc::new(Fields {
                key: normalize_pointer(key),
                field: field.as_deref().map(normalize_pointer),
                function,
                event_time,
                columns,
            }),
            vec![("key", DataType::String), ("value", DataType::Double)],
        ),
    };
    let schema = columns.schema(fields);
    let mut catalog = Catalog::default();
    catalog.sources.insert(
        table.into(),
        CatalogSource {
            uid: SOURCE_UID.into(),
            source: source(b, &topics, schema, decoder),
            time: columns.time.then(|| TIME.into()),
            dead_letter_topic: late_to.clone(),
        },
    );
    let sink = KafkaSink::results(&b.sink.topic, &["key"]).raw_key();
    // A window's result carries its last millisecond as its timestamp, as
    // it always has; a running aggregate's results are stamped by the
    // producer (in batch calls).
    let sink = match window {
        Some(_) => sink,
        None => sink.without_timestamps(),
    };
    let sink = match (b.source.on_bad_record, &b.source.dead_letter_topic) {
        (BadRecordPolicy::Skip, _) => sink.skip_too_large(),
        (BadRecordPolicy::DeadLetter, Some(topic)) => sink.too_large_to(topic),
        _ => sink,
    };
    catalog.sinks.insert(
        OUTPUT.into(),
        CatalogSink {
            uid: SINK_UID.into(),
            topic: b.sink.topic.clone(),
            sink,
            mode: "each new result, keyed by the key as text (update-befores and deletions are not written)"
                .into(),
        },
    );
    let kind = match (&b.pipeline, window) {
        (PipelineConfig::WordCount { .. }, None) => "word-count".to_string(),
        (PipelineConfig::Aggregate { .. }, None) => format!("aggregate/{}", function.name()),
        (PipelineConfig::WordCount { .. }, Some(_)) => "word-count/window".to_string(),
        (PipelineConfig::Aggregate { .. }, Some(_)) => {
            format!("aggregate/{}/window", function.name())
        }
    };
    // The uids the graphs had before they were compiled from SQL, so that
    // their checkpoints restore.
    let planned = |node: &str| format!("{OUTPUT}.{node}");
    catalog.uids.insert(
        planned(if window.is_some() {
            "window-aggregate"
        } else {
            "aggregate"
        }),
        b.keyed_uid(),
    );
    let unnest = match window {
        Some(_) => format!("{WORDS}.unnest"),
        None => planned("unnest"),
    };
    catalog.uids.insert(unnest, "split-words".into());
    catalog.aggregate = AggregateSettings {
        kind: Some(format!("{KIND_PREFIX}{kind}")),
        emit: match b.sink.emit {
            EmitMode::EveryUpdate => AggregateEmit::EveryRow,
            EmitMode::OnCheckpoint => AggregateEmit::OnCheckpoint {
                max_changed: c.state.cache_entries,
            },
        },
        window_every_update: window.is_some_and(|w| w.emit == WindowEmit::EveryUpdate),
        late_record: late_to.as_ref().map(|_| (RECORD.into(), ORIGIN.into())),
    };
    let job = SqlJob {
        registries: Default::default(),
        sources: Default::default(),
        sinks: Default::default(),
        pipeline: SqlPipelineConfig {
            sql: None,
            sql_file: None,
            time_zone: None,
            allowed_lateness: window.map_or(Duration::ZERO, |w| w.allowed_lateness),
            on_late: if late_to.is_some() {
                LatePolicy::DeadLetter
            } else {
                LatePolicy::Drop
            },
            state_ttl: None,
        },
        text: sql_text(b, table, function, columns),
        origin: format!(
            "the SQL of [pipeline] kind = {:?}",
            match b.pipeline {
                PipelineConfig::WordCount { .. } => "word-count",
                PipelineConfig::Aggregate { .. } => "aggregate",
            }
        ),
        functions: Default::default(),
    };
    (job, catalog)
}

/// The statements of a TOML pipeline over its table `table`:
///
/// ```sql
/// INSERT INTO output
/// SELECT key, COUNT(*) AS "count"
/// FROM lines CROSS JOIN UNNEST(WORDS(LOWER(line))) AS t(key)
/// GROUP BY key
/// ```
///
/// for word count; `SELECT key, SUM(value) AS "sum" FROM records GROUP BY
/// key` for an aggregate; with a window, the same grouped by a window
/// function's `window_start, window_end` over the table's `event_time`.
fn sql_text(b: &BuiltinJob, table: &str, function: AggregateFunction, columns: Columns) -> String {
    let name = function.name();
    let agg = match function {
        AggregateFunction::Count => format!("COUNT(*) AS \"{name}\""),
        _ => format!("{}(value) AS \"{name}\"", name.to_uppercase()),
    };
    let words = "CROSS JOIN UNNEST(WORDS(LOWER(line))) AS t(key)";
    let word_count = matches!(b.pipeline, PipelineConfig::WordCount { .. });
    let Some(w) = b.pipeline.window() else {
        let from = if word_count {
            format!("{table} {words}")
        } else {
            table.to_string()
        };
        return format!("INSERT INTO {OUTPUT}\nSELECT key, {agg}\nFROM {from}\nGROUP BY key\n");
    };
    let mut text = String::new();
    let windowed = if word_count {
        // The view's columns in the order UNNEST gives them: no map.
        let mut kept = vec![TIME];
        if columns.record {
            kept.extend([RECORD, ORIGIN]);
        }
        text.push_str(&format!(
            "CREATE VIEW {WORDS} AS\nSELECT {}, key\nFROM {table} {words};\n",
            kept.join(", ")
        ));
        WORDS
    } else {
        table
    };
    let iv = |ms: i64| format!("INTERVAL '{ms}' MILLISECOND");
    let offset = |ms: i64| {
        if ms == 0 {
            String::new()
        } else {
            format!(", {}", iv(ms))
        }
    };
    let tvf = match w.spec() {
        WindowSpec::Tumbling { size, offset: o } => format!(
            "TUMBLE(TABLE {windowed}, DESCRIPTOR({TIME}), {}{})",
            iv(size),
            offset(o)
        ),
        WindowSpec::Hopping {
            size,
            slide,
            offset: o,
        } => format!(
            "HOP(TABLE {windowed}, DESCRIPTOR({TIME}), {}, {}{})",
            iv(slide),
            iv(size),
            offset(o)
        ),
        WindowSpec::Cumulate {
            step,
            size,
            offset: o,
        } => format!(
            "CUMULATE(TABLE {windowed}, DESCRIPTOR({TIME}), {}, {}{})",
            iv(step),
            iv(size),
            offset(o)
        ),
        WindowSpec::Session { gap } => format!(
            "SESSION(TABLE {windowed} PARTITION BY key, DESCRIPTOR({TIME}), {})",
            iv(gap)
        ),
    };
    text.push_str(&format!(
        "INSERT INTO {OUTPUT}\nSELECT key, window_start, window_end, {agg}\nFROM TABLE({tvf})\nGROUP BY key, window_start, window_end\n"
    ));
    text
}

/// Windowed word count's view of the words.
const WORDS: &str = "words";
/// A windowed pipeline's event-time column (the decoder's time).
const TIME: &str = "event_time";
/// The record as read, for late records' dead letters.
const RECORD: &str = "record";
/// The record's origin (`KafkaSource::with_origin`), likewise.
const ORIGIN: &str = "origin";

/// The columns a TOML pipeline's decoder adds after its own.
#[derive(Debug, Clone, Copy)]
struct Columns {
    /// `event_time`: windows read it.
    time: bool,
    /// `record`: the value as read.
    record: bool,
}

impl Columns {
    fn schema(self, mut fields: Vec<(&str, DataType)>) -> Schema {
        if self.time {
            fields.push((TIME, DataType::Timestamp));
        }
        if self.record {
            fields.push((RECORD, DataType::Bytes));
        }
        Schema::of(&fields)
    }

    /// A decoded row: `values`, then the time and the record as asked.
    fn row(self, mut values: Vec<Value>, time: i64, payload: &[u8]) -> Row {
        if self.time {
            values.push(Value::Timestamp(time));
        }
        if self.record {
            values.push(Value::Bytes(payload.to_vec()));
        }
        Row::insert(values)
    }
}

/// How checkpoints name a TOML pipeline's keyed node: `pipeline:` and
/// `word-count`, `aggregate/<function>`, each with `/window` when windowed.
pub const KIND_PREFIX: &str = "pipeline:";

/// A TOML pipeline's keyed node, by the kind its checkpoint recorded: the
/// function its output shows, and whether it is windowed.
pub fn parse_kind(kind: &str) -> Option<(AggregateFunction, bool)> {
    let rest = kind.strip_prefix(KIND_PREFIX)?;
    let (rest, windowed) = match rest.strip_suffix("/window") {
        Some(r) => (r, true),
        None => (rest, false),
    };
    if rest == "word-count" {
        return Some((AggregateFunction::Count, windowed));
    }
    let name = rest.strip_prefix("aggregate/")?;
    use AggregateFunction::*;
    [Count, Sum, Min, Max, Avg]
        .into_iter()
        .find(|f| f.name() == name)
        .map(|f| (f, windowed))
}

fn source(
    b: &BuiltinJob,
    topics: &[&str],
    schema: Schema,
    decoder: Arc<dyn RecordDecoder>,
) -> KafkaSource {
    let mut s = KafkaSource::custom(topics, schema, decoder).start(b.source.start);
    s = match (b.source.on_bad_record, &b.source.dead_letter_topic) {
        (BadRecordPolicy::Skip, _) => s.skip_bad_records(),
        (BadRecordPolicy::DeadLetter, Some(topic)) => s.dead_letter(topic),
        _ => s,
    };
    if let Some(et) = &b.source.event_time {
        // The decoder reads the time; this sets the watermarks.
        s = s
            .kafka_time(et.max_out_of_orderness)
            .idle_timeout(et.idle_timeout);
    }
    if late_topic(b).is_some() {
        // Late records' dead letters name the record they came from.
        s = s.with_origin("origin");
    }
    s
}

/// Where late records go, if anywhere but dropped: then each row carries
/// its record as read (`record`) and its origin (`origin`).
fn late_topic(b: &BuiltinJob) -> Option<String> {
    b.pipeline.window().and_then(|w| match w.on_late {
        LatePolicy::DeadLetter => b.source.dead_letter_topic.clone(),
        LatePolicy::Drop => None,
    })
}

/// Event time of a record: from the JSON value's field, or the Kafka
/// timestamp; [`NO_TIMESTAMP`] without `[source.event_time]`.
fn event_time(
    et: Option<&TimestampExtractor>,
    value: Option<&Json>,
    kafka_ts: Option<i64>,
) -> std::result::Result<i64, String> {
    match et {
        None => Ok(NO_TIMESTAMP),
        Some(et) => et.extract(value, kafka_ts),
    }
}

/// `word-count`: a text value, or a JSON string, as one `line`.
struct Words {
    json: bool,
    event_time: Option<TimestampExtractor>,
    columns: Columns,
}

impl RecordDecoder for Words {
    fn name(&self) -> String {
        format!("word-count {}", if self.json { "json" } else { "text" })
    }

    fn decode(
        &self,
        payload: Option<&[u8]>,
        kafka_ts: Option<i64>,
    ) -> std::result::Result<(Row, i64), String> {
        let payload = payload.ok_or("record has no value (null)")?;
        let (line, ts) = if self.json {
            let v = serde_json::from_slice::<Json>(payload)
                .map_err(|e| format!("value is not valid JSON: {e}"))?;
            let ts = event_time(self.event_time.as_ref(), Some(&v), kafka_ts)?;
            match v {
                Json::String(s) => (s, ts),
                _ => return Err("value is JSON but not a string".into()),
            }
        } else {
            let text = std::str::from_utf8(payload)
                .map_err(|e| format!("value is not valid UTF-8: {e}"))?;
            (
                text.to_string(),
                event_time(self.event_time.as_ref(), None, kafka_ts)?,
            )
        };
        Ok((self.columns.row(vec![Value::String(line)], ts, payload), ts))
    }
}

/// `aggregate`: the key (a string, number or boolean, as text) and the
/// number to aggregate, by RFC 6901 pointers into a JSON object.
struct Fields {
    key: String,
    field: Option<String>,
    function: AggregateFunction,
    event_time: Option<TimestampExtractor>,
    columns: Columns,
}

impl RecordDecoder for Fields {
    fn name(&self) -> String {
        format!(
            "aggregate {} of {:?} by {:?}",
            self.function.name(),
            self.field,
            self.key
        )
    }

    fn decode(
        &self,
        payload: Option<&[u8]>,
        kafka_ts: Option<i64>,
    ) -> std::result::Result<(Row, i64), String> {
        let payload = payload.ok_or("record has no value (null)")?;
        let v: Json =
            serde_json::from_slice(payload).map_err(|e| format!("value is not valid JSON: {e}"))?;
        if !v.is_object() {
            return Err("value is JSON but not an object".into());
        }
        let key = &self.key;
        let k = match v.pointer(key) {
            Some(Json::String(s)) => s.clone(),
            Some(Json::Number(n)) => n.to_string(),
            Some(Json::Bool(b)) => b.to_string(),
            Some(other) => {
                return Err(format!(
                    "key field {key:?} is {other}, not a string or number"
                ))
            }
            None => return Err(format!("key field {key:?} is missing")),
        };
        let value = match (self.function, &self.field) {
            (AggregateFunction::Count, _) | (_, None) => 1.0,
            (_, Some(field)) => match v.pointer(field) {
                Some(Json::Number(n)) => n
                    .as_f64()
                    .ok_or_else(|| format!("field {field:?} is not a finite number"))?,
                Some(other) => return Err(format!("field {field:?} is {other}, not a number")),
                None => return Err(format!("field {field:?} is missing")),
            },
        };
        let ts = event_time(self.event_time.as_ref(), Some(&v), kafka_ts)?;
        Ok((
            self.columns
                .row(vec![Value::String(k), Value::Double(value)], ts, payload),
            ts,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(function: AggregateFunction) -> Fields {
        Fields {
            key: "/user".into(),
            field: Some("/amount".into()),
            function,
            event_time: None,
            columns: NO_COLUMNS,
        }
    }

    const NO_COLUMNS: Columns = Columns {
        time: false,
        record: false,
    };

    #[test]
    fn aggregate_records_decode_by_pointer_with_the_messages_users_know() {
        let f = fields(AggregateFunction::Sum);
        let (row, _) = f
            .decode(Some(br#"{"user":"u1","amount":2.5}"#), None)
            .unwrap();
        assert_eq!(row.values, vec![Value::from("u1"), Value::Double(2.5)]);
        let (row, _) = f.decode(Some(br#"{"user":7,"amount":1}"#), None).unwrap();
        assert_eq!(row.values[0], Value::from("7"));
        let err = |v: &[u8]| f.decode(Some(v), None).unwrap_err();
        assert!(err(br#"{"amount":1}"#).contains("\"/user\" is missing"));
        assert!(err(br#"{"user":"u","amount":"x"}"#).contains("not a number"));
        assert!(err(b"{not json").contains("not valid JSON"));
        assert!(err(b"[1]").contains("not an object"));
        assert!(f.decode(None, None).unwrap_err().contains("null"));
        // A count needs no field.
        let (row, _) = fields(AggregateFunction::Count)
            .decode(Some(br#"{"user":"u"}"#), None)
            .unwrap();
        assert_eq!(row.values[1], Value::Double(1.0));
    }

    #[test]
    fn word_count_records_are_text_or_json_strings() {
        let text = Words {
            json: false,
            event_time: None,
            columns: NO_COLUMNS,
        };
        let (row, ts) = text.decode(Some(b"Hello world"), Some(5)).unwrap();
        assert_eq!(
            (row.values[0].as_str(), ts),
            (Some("Hello world"), NO_TIMESTAMP)
        );
        assert!(text
            .decode(Some(&[0xff, 0xfe]), None)
            .unwrap_err()
            .contains("UTF-8"));
        let json = Words {
            json: true,
            event_time: None,
            columns: Columns {
                time: false,
                record: true,
            },
        };
        assert_eq!(
            json.decode(Some(br#""a b""#), None).unwrap().0.values[0].as_str(),
            Some("a b")
        );
        assert!(json
            .decode(Some(b"{}"), None)
            .unwrap_err()
            .contains("not a string"));
    }

    fn load(pipeline: &str, source: &str) -> Config {
        let text = format!(
            "[job]\nname = \"p\"\n[kafka]\nbootstrap_servers = \"127.0.0.1:9092\"\ngroup_id = \"p\"\n\
             [checkpoint]\ndir = \"/tmp/weir-p/c\"\n[state]\ndir = \"/tmp/weir-p/s\"\n\
             [source]\ntopics = [\"in\"]\n{source}\n[pipeline]\n{pipeline}\n[sink]\ntopic = \"out\"\n"
        );
        let mut f = tempfile::NamedTempFile::new().unwrap();
        std::io::Write::write_all(&mut f, text.as_bytes()).unwrap();
        Config::load_with_env(f.path(), Some(Default::default())).unwrap()
    }

    /// Each node's uid and kind, in order.
    fn nodes(c: &Config) -> Vec<(String, String)> {
        graph(c)
            .unwrap()
            .nodes
            .iter()
            .map(|n| (n.uid.clone(), n.kind.clone()))
            .collect()
    }

    #[test]
    fn toml_pipelines_compile_from_sql_onto_the_nodes_their_checkpoints_name() {
        let n = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs
                .iter()
                .map(|(u, k)| (u.to_string(), k.to_string()))
                .collect()
        };
        let wc = load("kind = \"word-count\"", "");
        assert!(sql_job(&wc, wc.builtin().unwrap())
            .0
            .text
            .contains("FROM lines CROSS JOIN UNNEST(WORDS(LOWER(line))) AS t(key)"));
        assert_eq!(
            nodes(&wc),
            n(&[
                ("kafka-source", "kafka-source"),
                ("split-words", "flat-map"),
                ("word-count", "pipeline:word-count"),
                ("sink", "kafka-sink"),
            ])
        );
        // A windowed word count with late records to the dead-letter
        // topic: the words carry the record and its origin, not the line.
        let windowed = load(
            "kind = \"word-count\"\n[pipeline.window]\nkind = \"tumbling\"\nsize = \"10s\"\non_late = \"dead-letter\"",
            "on_bad_record = \"dead-letter\"\ndead_letter_topic = \"dlq\"\n[source.event_time]\nmax_out_of_orderness = \"1s\"",
        );
        let g = graph(&windowed).unwrap();
        let words = &g.nodes[1];
        assert_eq!(words.uid, "split-words");
        let names: Vec<&str> = words
            .schema
            .fields
            .iter()
            .map(|f| f.name.as_str())
            .collect();
        assert_eq!(names, ["event_time", "record", "origin", "key"]);
        assert_eq!(
            (g.nodes[2].uid.as_str(), g.nodes[2].kind.as_str()),
            ("word-count-tumbling-10s", "pipeline:word-count/window")
        );
        let sum = load(
            "kind = \"aggregate\"\nkey = \"/user\"\nfield = \"/amount\"\nfunction = \"sum\"",
            "format = \"json\"",
        );
        assert!(sql_job(&sum, sum.builtin().unwrap())
            .0
            .text
            .contains("SELECT key, SUM(value) AS \"sum\"\nFROM records\nGROUP BY key"));
        assert_eq!(
            nodes(&sum),
            n(&[
                ("kafka-source", "kafka-source"),
                ("aggregate-sum-amount-by-user", "pipeline:aggregate/sum"),
                ("sink", "kafka-sink"),
            ])
        );
    }
}
