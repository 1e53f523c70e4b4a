//! A Kafka record's metadata as columns, as Flink's Kafka connector has
//! them (`METADATA FROM 'timestamp'`): `[sources.NAME] metadata =
//! ["timestamp AS kafka_ts", "partition", "offset", "headers"]`. They
//! follow the physical columns, in the order listed.

use rdkafka::message::Headers;

use crate::dataflow::graph::KafkaRecord;
use crate::dataflow::row::{DataType, Field, Value};

/// One metadata key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetadataKey {
    /// TIMESTAMP(3): the record's Kafka timestamp.
    Timestamp,
    /// VARCHAR: `CreateTime` or `LogAppendTime`.
    TimestampType,
    /// VARCHAR.
    Topic,
    /// INT.
    Partition,
    /// BIGINT.
    Offset,
    /// ARRAY<ROW<key VARCHAR, value BYTES>>: Flink's MAP<STRING, BYTES>
    /// until weir has MAP, in the record's order (a key may repeat).
    Headers,
    /// BYTES: the record's key as it is.
    Key,
}

/// A metadata column: which key, under which name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataColumn {
    pub key: MetadataKey,
    pub name: String,
}

const KEYS: &[(&str, MetadataKey)] = &[
    ("timestamp", MetadataKey::Timestamp),
    ("timestamp-type", MetadataKey::TimestampType),
    ("topic", MetadataKey::Topic),
    ("partition", MetadataKey::Partition),
    ("offset", MetadataKey::Offset),
    ("headers", MetadataKey::Headers),
    ("key", MetadataKey::Key),
];

impl MetadataColumn {
    /// `"offset"` or `"timestamp AS kafka_ts"`; Err names what is wrong.
    pub fn parse(text: &str) -> Result<Self, String> {
        let words: Vec<&str> = text.split_whitespace().collect();
        let (key, name) = match words[..] {
            [key] => (key, key.replace('-', "_")),
            [key, as_, name] if as_.eq_ignore_ascii_case("as") => (key, name.to_string()),
            _ => {
                return Err(format!(
                    "{text:?} is not `KEY` or `KEY AS name` (keys: {})",
                    names()
                ))
            }
        };
        let key = KEYS
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, k)| *k)
            .ok_or_else(|| format!("{key:?} is not a metadata key (keys: {})", names()))?;
        Ok(Self { key, name })
    }

    pub fn field(&self) -> Field {
        Field::new(self.name.clone(), self.key.data_type())
    }

    pub fn value(&self, r: &KafkaRecord<'_>) -> Value {
        match self.key {
            MetadataKey::Timestamp => r.timestamp.map_or(Value::Null, Value::Timestamp),
            MetadataKey::TimestampType => Value::String(
                if r.log_append_time {
                    "LogAppendTime"
                } else {
                    "CreateTime"
                }
                .into(),
            ),
            MetadataKey::Topic => Value::String(r.topic.to_string()),
            MetadataKey::Partition => Value::Int(i64::from(r.partition)),
            MetadataKey::Offset => Value::Int(r.offset),
            MetadataKey::Key => r.key.map_or(Value::Null, |k| Value::Bytes(k.to_vec())),
            MetadataKey::Headers => Value::List(
                r.headers
                    .map(|h| {
                        h.iter()
                            .map(|h| {
                                Value::Struct(vec![
                                    Value::String(h.key.to_string()),
                                    h.value.map_or(Value::Null, |v| Value::Bytes(v.to_vec())),
                                ])
                            })
                            .collect()
                    })
                    .unwrap_or_default(),
            ),
        }
    }
}

impl MetadataKey {
    pub fn data_type(self) -> DataType {
        match self {
            MetadataKey::Timestamp => DataType::Timestamp,
            MetadataKey::TimestampType | MetadataKey::Topic => DataType::String,
            MetadataKey::Partition => DataType::Int,
            MetadataKey::Offset => DataType::BigInt,
            MetadataKey::Key => DataType::Bytes,
            MetadataKey::Headers => DataType::List(Box::new(DataType::Struct(vec![
                Field::new("key", DataType::String),
                Field::new("value", DataType::Bytes),
            ]))),
        }
    }
}

fn names() -> String {
    KEYS.iter().map(|(k, _)| *k).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_parse_with_and_without_a_name() {
        let c = MetadataColumn::parse("timestamp AS kafka_ts").unwrap();
        assert_eq!(
            (c.key, c.name.as_str()),
            (MetadataKey::Timestamp, "kafka_ts")
        );
        let c = MetadataColumn::parse("timestamp-type").unwrap();
        assert_eq!(c.name, "timestamp_type");
        assert!(MetadataColumn::parse("leader-epoch")
            .unwrap_err()
            .contains("not a metadata key"));
        assert!(MetadataColumn::parse("a b")
            .unwrap_err()
            .contains("KEY AS name"));
        let r = KafkaRecord {
            key: Some(b"k"),
            payload: None,
            topic: "t",
            partition: 3,
            offset: 42,
            timestamp: Some(7),
            log_append_time: false,
            headers: None,
        };
        assert_eq!(
            MetadataColumn::parse("offset").unwrap().value(&r),
            Value::Int(42)
        );
        assert_eq!(
            MetadataColumn::parse("headers").unwrap().value(&r),
            Value::List(vec![])
        );
    }
}
