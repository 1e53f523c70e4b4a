//! The TOML pipelines (`[pipeline] kind = "word-count" | "aggregate"`,
//! with or without `[pipeline.window]`) as job graphs, built through the
//! same API a Rust job uses ([`crate::dataflow::builder`]), so they run on
//! the one engine in both modes.
//!
//! ```text
//! word-count: source (text or JSON strings) → split-words → hash(key) → count → sink
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

use serde_json::Value as Json;

use crate::config::{
    AggregateFunction, BadRecordPolicy, Config, EmitMode, LatePolicy, PipelineConfig, RecordFormat,
    WindowEmit, SOURCE_UID,
};
use crate::dataflow::graph::RecordDecoder;
use crate::dataflow::ops::aggregate::{Agg, AggFunction, AggregateEmit};
use crate::dataflow::prelude::*;
use crate::error::Result;
use crate::time::timestamp::{normalize_pointer, TimestampExtractor};
use crate::time::NO_TIMESTAMP;

/// The sink's uid in every TOML pipeline's graph.
pub const SINK_UID: &str = "sink";

/// The job graph of `c`'s `[source]`, `[pipeline]` and `[sink]`.
pub fn graph(c: &Config) -> Result<Graph> {
    if let Some(sql) = &c.sql {
        return crate::sql::plan(c).map(|p| p.graph).map_err(|errors| {
            crate::error::WeirError::Graph {
                job: c.job.name.clone(),
                problems: errors
                    .iter()
                    .map(|e| e.render(&sql.origin, &sql.text))
                    .collect(),
            }
        });
    }
    let job = JobBuilder::new(&c.job.name);
    let event_time =
        c.source.event_time.as_ref().map(|et| {
            TimestampExtractor::new(et.field.as_deref().map(normalize_pointer), et.format)
        });
    let topics: Vec<&str> = c.source.topics.iter().map(String::as_str).collect();
    // Late records go to the dead-letter topic as they were read: the
    // record travels with its rows, only then.
    let late_to = late_topic(c);
    let keep_record = late_to.is_some();
    let with_record = |mut fields: Vec<(&str, DataType)>| {
        if keep_record {
            fields.push(("record", DataType::Bytes));
        }
        Schema::of(&fields)
    };
    let keyed = match &c.pipeline {
        PipelineConfig::WordCount { .. } => {
            let decoder = Words {
                json: c.source.format == RecordFormat::Json,
                event_time,
                keep_record,
            };
            let schema = with_record(vec![("line", DataType::String)]);
            job.source(SOURCE_UID, source(c, &topics, schema, Arc::new(decoder)))
                .split_words("split-words", "line", "key")
                .key_by(&["key"])
        }
        PipelineConfig::Aggregate {
            key,
            field,
            function,
            ..
        } => {
            let decoder = Fields {
                key: normalize_pointer(key),
                field: field.as_deref().map(normalize_pointer),
                function: *function,
                event_time,
                keep_record,
            };
            let schema = with_record(vec![("key", DataType::String), ("value", DataType::Double)]);
            job.source(SOURCE_UID, source(c, &topics, schema, Arc::new(decoder)))
                .key_by(&["key"])
        }
    };
    let function = match &c.pipeline {
        PipelineConfig::WordCount { .. } => AggregateFunction::Count,
        PipelineConfig::Aggregate { function, .. } => *function,
    };
    let aggs = vec![agg(function)];
    let uid = c.keyed_uid();
    let results = match c.pipeline.window() {
        None => {
            let emit = match c.sink.emit {
                EmitMode::EveryUpdate => AggregateEmit::EveryRow,
                EmitMode::OnCheckpoint => AggregateEmit::OnCheckpoint {
                    max_changed: c.state.cache_entries,
                },
            };
            keyed.aggregate_emitting(&uid, aggs, emit)
        }
        Some(w) => {
            let mut windowed = keyed
                .window(w.spec())
                .allowed_lateness(w.allowed_lateness)
                .every_update(w.emit == WindowEmit::EveryUpdate);
            if let Some(topic) = &late_to {
                windowed = windowed
                    .late_to(topic)
                    .late_value("record")
                    .late_origin("origin");
            }
            windowed.aggregate(&uid, aggs)
        }
    };
    let sink = KafkaSink::results(&c.sink.topic, &["key"]).raw_key();
    // A window's result carries its last millisecond as its timestamp, as
    // it always has; a running aggregate's results are stamped by the
    // producer (in batch calls).
    let sink = match c.pipeline.window() {
        Some(_) => sink,
        None => sink.without_timestamps(),
    };
    let sink = match (c.source.on_bad_record, &c.source.dead_letter_topic) {
        (BadRecordPolicy::Skip, _) => sink.skip_too_large(),
        (BadRecordPolicy::DeadLetter, Some(topic)) => sink.too_large_to(topic),
        _ => sink,
    };
    let kind = match (&c.pipeline, c.pipeline.window()) {
        (PipelineConfig::WordCount { .. }, None) => "word-count".to_string(),
        (PipelineConfig::Aggregate { .. }, None) => format!("aggregate/{}", function.name()),
        (PipelineConfig::WordCount { .. }, Some(_)) => "word-count/window".to_string(),
        (PipelineConfig::Aggregate { .. }, Some(_)) => {
            format!("aggregate/{}/window", function.name())
        }
    };
    results
        .with_kind(&format!("{KIND_PREFIX}{kind}"))
        .sink(SINK_UID, sink);
    job.build()
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
    c: &Config,
    topics: &[&str],
    schema: Schema,
    decoder: Arc<dyn RecordDecoder>,
) -> KafkaSource {
    let mut s = KafkaSource::custom(topics, schema, decoder).start(c.source.start);
    s = match (c.source.on_bad_record, &c.source.dead_letter_topic) {
        (BadRecordPolicy::Skip, _) => s.skip_bad_records(),
        (BadRecordPolicy::DeadLetter, Some(topic)) => s.dead_letter(topic),
        _ => s,
    };
    if let Some(et) = &c.source.event_time {
        // The decoder reads the time; this sets the watermarks.
        s = s
            .kafka_time(et.max_out_of_orderness)
            .idle_timeout(et.idle_timeout);
    }
    if late_topic(c).is_some() {
        // Late records' dead letters name the record they came from.
        s = s.with_origin("origin");
    }
    s
}

/// Where late records go, if anywhere but dropped: then each row carries
/// its record as read (`record`) and its origin (`origin`).
fn late_topic(c: &Config) -> Option<String> {
    c.pipeline.window().and_then(|w| match w.on_late {
        LatePolicy::DeadLetter => c.source.dead_letter_topic.clone(),
        LatePolicy::Drop => None,
    })
}

/// The aggregate of the value column (1), named by its function, as the
/// output has always named it (`"count"`, `"sum"`, ...).
fn agg(function: AggregateFunction) -> Agg {
    let (function, column) = match function {
        AggregateFunction::Count => (AggFunction::Count, None),
        AggregateFunction::Sum => (AggFunction::Sum, Some(1)),
        AggregateFunction::Min => (AggFunction::Min, Some(1)),
        AggregateFunction::Max => (AggFunction::Max, Some(1)),
        AggregateFunction::Avg => (AggFunction::Avg, Some(1)),
    };
    Agg {
        function,
        column,
        name: function.name().into(),
        distinct: false,
    }
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

/// A decoded row, followed by the value as read when late records need it
/// (`keep_record`: the `record` column).
fn row(mut values: Vec<Value>, keep_record: bool, payload: &[u8]) -> Row {
    if keep_record {
        values.push(Value::Bytes(payload.to_vec()));
    }
    Row::insert(values)
}

/// `word-count`: a text value, or a JSON string, as one `line`.
struct Words {
    json: bool,
    event_time: Option<TimestampExtractor>,
    /// A second column with the value as read (late records' dead letters).
    keep_record: bool,
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
        Ok((
            row(vec![Value::String(line)], self.keep_record, payload),
            ts,
        ))
    }
}

/// `aggregate`: the key (a string, number or boolean, as text) and the
/// number to aggregate, by RFC 6901 pointers into a JSON object.
struct Fields {
    key: String,
    field: Option<String>,
    function: AggregateFunction,
    event_time: Option<TimestampExtractor>,
    keep_record: bool,
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
            row(
                vec![Value::String(k), Value::Double(value)],
                self.keep_record,
                payload,
            ),
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
            keep_record: false,
        }
    }

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
            keep_record: false,
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
            keep_record: true,
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
}
