//! The built-in pipelines: how a record becomes keyed updates, how an
//! update changes the accumulator, and what an output record looks like.

use serde_json::Value;

use crate::config::{AggregateFunction, Config, PipelineKind, RecordFormat};
use crate::state::Accumulator;

/// A pipeline built from `[pipeline]` and `[source] format`.
#[derive(Debug, Clone)]
pub enum Pipeline {
    /// Split text on Unicode whitespace, count per lower-cased word.
    WordCount { format: RecordFormat },
    /// A function of a JSON number field, per value of a JSON key field.
    Aggregate {
        key: String,
        field: Option<String>,
        function: AggregateFunction,
    },
}

impl Pipeline {
    pub fn from_config(c: &Config) -> Self {
        match c.pipeline.kind {
            PipelineKind::WordCount => Self::WordCount {
                format: c.source.format,
            },
            PipelineKind::Aggregate => Self::Aggregate {
                key: c.pipeline.key.clone().unwrap_or_default(),
                field: c.pipeline.field.clone(),
                function: c.pipeline.function.unwrap_or(AggregateFunction::Count),
            },
        }
    }

    /// Decodes one record value and calls `emit(key, value)` per update.
    /// On a bad record nothing is emitted and the reason is returned.
    pub fn extract(
        &self,
        payload: Option<&[u8]>,
        mut emit: impl FnMut(String, f64),
    ) -> Result<(), String> {
        let Some(payload) = payload else {
            return Err("record has no value (null)".into());
        };
        match self {
            Self::WordCount { format } => {
                let decoded;
                let text = match format {
                    RecordFormat::Text => std::str::from_utf8(payload)
                        .map_err(|e| format!("value is not valid UTF-8: {e}"))?,
                    RecordFormat::Json => {
                        decoded = match serde_json::from_slice::<Value>(payload) {
                            Ok(Value::String(s)) => s,
                            Ok(_) => return Err("value is JSON but not a string".into()),
                            Err(e) => return Err(format!("value is not valid JSON: {e}")),
                        };
                        decoded.as_str()
                    }
                };
                for word in text.split_whitespace() {
                    emit(word.to_lowercase(), 1.0);
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
                let Value::Object(obj) = v else {
                    return Err("value is JSON but not an object".into());
                };
                let k = match obj.get(key) {
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
                    (_, Some(field)) => match obj.get(field) {
                        Some(Value::Number(n)) => n
                            .as_f64()
                            .ok_or_else(|| format!("field {field:?} is not a finite number"))?,
                        Some(other) => {
                            return Err(format!("field {field:?} is {other}, not a number"))
                        }
                        None => return Err(format!("field {field:?} is missing")),
                    },
                };
                emit(k, value);
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
        let (name, value): (&str, Value) = match self {
            Self::WordCount { .. } => ("count", acc.count.into()),
            Self::Aggregate { function, .. } => (
                function.name(),
                match function {
                    AggregateFunction::Count => acc.count.into(),
                    AggregateFunction::Sum => acc.sum.into(),
                    AggregateFunction::Min => acc.min.into(),
                    AggregateFunction::Max => acc.max.into(),
                    AggregateFunction::Avg => (acc.sum / acc.count as f64).into(),
                },
            ),
        };
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

    fn collect(p: &Pipeline, v: &[u8]) -> Result<Vec<(String, f64)>, String> {
        let mut out = Vec::new();
        p.extract(Some(v), |k, x| out.push((k, x)))?;
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
        assert!(p.extract(None, |_, _| {}).unwrap_err().contains("null"));
    }

    #[test]
    fn aggregate_reads_key_and_field() {
        let p = Pipeline::Aggregate {
            key: "user".into(),
            field: Some("amount".into()),
            function: AggregateFunction::Sum,
        };
        assert_eq!(
            collect(&p, br#"{"user":"u1","amount":2.5}"#).unwrap(),
            vec![("u1".to_string(), 2.5)]
        );
        assert_eq!(collect(&p, br#"{"user":7,"amount":1}"#).unwrap()[0].0, "7");
        assert!(collect(&p, br#"{"amount":1}"#)
            .unwrap_err()
            .contains("\"user\" is missing"));
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
            key: "user".into(),
            field: Some("amount".into()),
            function: AggregateFunction::Sum,
        };
        assert_eq!(sum.output("u1", &acc), br#"{"key":"u1","sum":42.5}"#);
        let avg = Pipeline::Aggregate {
            key: "user".into(),
            field: Some("amount".into()),
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
