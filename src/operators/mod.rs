//! The built-in pipelines: how a record becomes keyed updates (the
//! stateless steps chained into the source), and what an output record
//! looks like; the keyed operators themselves are [`aggregate`] and
//! [`window`].

pub mod aggregate;
pub mod window;

use serde_json::Value;

use crate::config::{AggregateFunction, Config, PipelineConfig, RecordFormat};
use crate::state::Accumulator;
use crate::time::timestamp::{normalize_pointer, TimestampExtractor};

/// The result of `function` over an accumulator, as the output shows it.
pub fn result_value(function: AggregateFunction, acc: &Accumulator) -> Value {
    match function {
        AggregateFunction::Count => acc.count.into(),
        AggregateFunction::Sum => acc.sum.into(),
        AggregateFunction::Min => acc.min.into(),
        AggregateFunction::Max => acc.max.into(),
        AggregateFunction::Avg => (acc.sum / acc.count as f64).into(),
    }
}

/// A pipeline built from `[pipeline]` and `[source] format`.
#[derive(Debug, Clone)]
pub enum Pipeline {
    /// Split text on Unicode whitespace, count per lower-cased word.
    WordCount { format: RecordFormat },
    /// A function of a JSON number field, per value of a JSON key field.
    Aggregate {
        /// RFC 6901 pointers.
        key: String,
        field: Option<String>,
        function: AggregateFunction,
    },
}

impl Pipeline {
    pub fn from_config(c: &Config) -> Self {
        match &c.pipeline {
            PipelineConfig::WordCount { .. } => Self::WordCount {
                format: c.source.format,
            },
            PipelineConfig::Aggregate {
                key,
                field,
                function,
                ..
            } => Self::Aggregate {
                key: normalize_pointer(key),
                field: field.as_deref().map(normalize_pointer),
                function: *function,
            },
        }
    }

    /// The function whose result the output carries (a word count counts).
    pub fn function(&self) -> AggregateFunction {
        match self {
            Self::WordCount { .. } => AggregateFunction::Count,
            Self::Aggregate { function, .. } => *function,
        }
    }

    /// The function of a pipeline by its [`Pipeline::kind`], as checkpoints
    /// record it (offline reads); None for a kind this weir does not write.
    pub fn function_of_kind(kind: &str) -> Option<AggregateFunction> {
        use AggregateFunction::*;
        if kind == "word-count" {
            return Some(Count);
        }
        let name = kind.strip_prefix("aggregate/")?;
        [Count, Sum, Min, Max, Avg]
            .into_iter()
            .find(|f| f.name() == name)
    }

    /// The name of the result field: the function's name.
    pub fn result_name(&self) -> &'static str {
        self.function().name()
    }

    /// The result of an accumulator as an object, `{"count": 3}`: what the
    /// output carries besides the key (interactive queries).
    pub fn result_object(&self, acc: &Accumulator) -> Value {
        let mut object = serde_json::Map::new();
        object.insert(self.result_name().to_string(), self.result_value(acc));
        Value::Object(object)
    }

    /// The result of an accumulator as a JSON value.
    pub fn result_value(&self, acc: &Accumulator) -> Value {
        result_value(self.function(), acc)
    }

    /// Decodes one record value and calls `emit(key, value, timestamp)` per
    /// update. The timestamp comes from `event_time` (the JSON field or
    /// `kafka_ts`), or is [`crate::runtime::NO_TIMESTAMP`] without it. On a
    /// bad record nothing is emitted and the reason is returned.
    pub fn extract(
        &self,
        payload: Option<&[u8]>,
        kafka_ts: Option<i64>,
        event_time: Option<&TimestampExtractor>,
        mut emit: impl FnMut(String, f64, i64),
    ) -> Result<(), String> {
        let Some(payload) = payload else {
            return Err("record has no value (null)".into());
        };
        let no_json_ts = |et: Option<&TimestampExtractor>| match et {
            None => Ok(crate::runtime::NO_TIMESTAMP),
            Some(et) => et.extract(None, kafka_ts),
        };
        match self {
            Self::WordCount { format } => {
                let decoded;
                let (text, ts) = match format {
                    RecordFormat::Text => (
                        std::str::from_utf8(payload)
                            .map_err(|e| format!("value is not valid UTF-8: {e}"))?,
                        no_json_ts(event_time)?,
                    ),
                    RecordFormat::Json => {
                        let v = serde_json::from_slice::<Value>(payload)
                            .map_err(|e| format!("value is not valid JSON: {e}"))?;
                        let ts = match event_time {
                            None => crate::runtime::NO_TIMESTAMP,
                            Some(et) => et.extract(Some(&v), kafka_ts)?,
                        };
                        decoded = match v {
                            Value::String(s) => s,
                            _ => return Err("value is JSON but not a string".into()),
                        };
                        (decoded.as_str(), ts)
                    }
                };
                for word in text.split_whitespace() {
                    emit(word.to_lowercase(), 1.0, ts);
                }
                Ok(())
            }
            Self::Aggregate {
                key,
                field,
                function,
            } => {
                let v: Value = serde_json::from_slice(payload)
                    .map_err(|e| format!("value is not valid JSON: {e}"))?;
                if !v.is_object() {
                    return Err("value is JSON but not an object".into());
                }
                let k = match v.pointer(key) {
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Number(n)) => n.to_string(),
                    Some(Value::Bool(b)) => b.to_string(),
                    Some(other) => {
                        return Err(format!(
                            "key field {key:?} is {other}, not a string or number"
                        ))
                    }
                    None => return Err(format!("key field {key:?} is missing")),
                };
                let value = match (function, field) {
                    (AggregateFunction::Count, _) | (_, None) => 1.0,
                    (_, Some(field)) => match v.pointer(field) {
                        Some(Value::Number(n)) => n
                            .as_f64()
                            .ok_or_else(|| format!("field {field:?} is not a finite number"))?,
                        Some(other) => {
                            return Err(format!("field {field:?} is {other}, not a number"))
                        }
                        None => return Err(format!("field {field:?} is missing")),
                    },
                };
                let ts = match event_time {
                    None => crate::runtime::NO_TIMESTAMP,
                    Some(et) => et.extract(Some(&v), kafka_ts)?,
                };
                emit(k, value, ts);
                Ok(())
            }
        }
    }

    /// The output value for `key`: `{"key":"hello","count":3}` or
    /// `{"key":"u1","sum":42.5}`.
    pub fn output(&self, key: &str, acc: &Accumulator) -> Vec<u8> {
        let mut out = Vec::with_capacity(key.len() + 24);
        self.write_output(key, acc, &mut out);
        out
    }

    /// As [`Pipeline::output`], into a reused buffer: this runs once per
    /// update with `emit = "every-update"`. "key" comes first for people
    /// reading the topic; values are encoded by serde_json.
    pub fn write_output(&self, key: &str, acc: &Accumulator, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(b"{\"key\":");
        if key.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
            out.push(b'"');
            out.extend_from_slice(key.as_bytes());
            out.push(b'"');
        } else {
            serde_json::to_writer(&mut *out, key).expect("a string serializes");
        }
        let (name, value) = (self.result_name(), self.result_value(acc));
        out.extend_from_slice(b",\"");
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b"\":");
        serde_json::to_writer(&mut *out, &value).expect("a number serializes");
        out.push(b'}');
    }

    /// Describes the keyed operator for the topology check.
    pub fn kind(&self) -> String {
        match self {
            Self::WordCount { .. } => "word-count".into(),
            Self::Aggregate { function, .. } => format!("aggregate/{}", function.name()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recorded_kind_names_its_function_again() {
        use AggregateFunction::*;
        let wc = Pipeline::WordCount {
            format: RecordFormat::Text,
        };
        assert_eq!(Pipeline::function_of_kind(&wc.kind()), Some(Count));
        for f in [Count, Sum, Min, Max, Avg] {
            let p = Pipeline::Aggregate {
                key: "/k".into(),
                field: Some("/v".into()),
                function: f,
            };
            assert_eq!(Pipeline::function_of_kind(&p.kind()), Some(f));
        }
        assert_eq!(Pipeline::function_of_kind("aggregate/median"), None);
    }

    fn collect(p: &Pipeline, v: &[u8]) -> Result<Vec<(String, f64)>, String> {
        let mut out = Vec::new();
        p.extract(Some(v), None, None, |k, x, _| out.push((k, x)))?;
        Ok(out)
    }

    #[test]
    fn word_count_splits_on_unicode_whitespace_and_lowercases() {
        let p = Pipeline::WordCount {
            format: RecordFormat::Text,
        };
        let words = collect(&p, "Hello\u{3000}WORLD\t hello\u{a0}Ünï".as_bytes()).unwrap();
        let words: Vec<_> = words.into_iter().map(|(k, _)| k).collect();
        assert_eq!(words, vec!["hello", "world", "hello", "ünï"]);
        assert!(collect(&p, &[0xff, 0xfe]).unwrap_err().contains("UTF-8"));
        assert!(p
            .extract(None, None, None, |_, _, _| {})
            .unwrap_err()
            .contains("null"));
    }

    #[test]
    fn aggregate_reads_key_and_field() {
        let p = Pipeline::Aggregate {
            key: "/user".into(),
            field: Some("/amount".into()),
            function: AggregateFunction::Sum,
        };
        assert_eq!(
            collect(&p, br#"{"user":"u1","amount":2.5}"#).unwrap(),
            vec![("u1".to_string(), 2.5)]
        );
        assert_eq!(collect(&p, br#"{"user":7,"amount":1}"#).unwrap()[0].0, "7");
        assert!(collect(&p, br#"{"amount":1}"#)
            .unwrap_err()
            .contains("\"/user\" is missing"));
        assert!(collect(&p, br#"{"user":"u","amount":"x"}"#)
            .unwrap_err()
            .contains("not a number"));
        assert!(collect(&p, b"{not json")
            .unwrap_err()
            .contains("not valid JSON"));
    }

    #[test]
    fn outputs_name_the_function() {
        let mut acc = Accumulator::default();
        acc.add(40.0);
        acc.add(2.5);
        let wc = Pipeline::WordCount {
            format: RecordFormat::Text,
        };
        assert_eq!(wc.output("hello", &acc), br#"{"key":"hello","count":2}"#);
        let sum = Pipeline::Aggregate {
            key: "/user".into(),
            field: Some("/amount".into()),
            function: AggregateFunction::Sum,
        };
        assert_eq!(sum.output("u1", &acc), br#"{"key":"u1","sum":42.5}"#);
        let avg = Pipeline::Aggregate {
            key: "/user".into(),
            field: Some("/amount".into()),
            function: AggregateFunction::Avg,
        };
        assert_eq!(avg.output("u1", &acc), br#"{"key":"u1","avg":21.25}"#);
        // Keys that need escaping go through serde_json.
        assert_eq!(
            wc.output("a\"b\\c\n", &acc),
            br#"{"key":"a\"b\\c\n","count":2}"#
        );
        assert_eq!(
            wc.output("ünï", &acc),
            "{\"key\":\"ünï\",\"count\":2}".as_bytes()
        );
    }
}
