//! A Kafka record into a row of its source's schema, with its event time:
//! the one decoding path of both modes' sources (single mode's source
//! tasks, group mode's input partitions), so a format, an event-time rule
//! or a bad-record reason is written once.

use crate::dataflow::graph::{KafkaRecord, RecordError, SourceFormat, SourceSpec};
use crate::dataflow::operator::RecordOrigin;
use crate::dataflow::row::{Row, Schema, Value};
use crate::runtime::NO_TIMESTAMP;

/// One Kafka record value as a row of the source's schema, with its event
/// time, and its origin last where the source keeps it
/// (`SourceSpec::origin`); `Ok(None)` for a record that holds no row (a
/// change stream's tombstone).
pub fn decode(
    spec: &SourceSpec,
    schema: &Schema,
    record: &KafkaRecord<'_>,
) -> std::result::Result<Option<(Row, i64)>, RecordError> {
    let Some((mut row, ts)) = decode_value(spec, schema, record)? else {
        return Ok(None);
    };
    if spec.origin {
        row.values.push(RecordOrigin::value(
            record.key,
            record.topic,
            record.partition,
            record.offset,
        ));
    }
    Ok(Some((row, ts)))
}

/// The record of a message as decoders see it.
pub fn record_of<'a>(m: &'a rdkafka::message::BorrowedMessage<'a>) -> KafkaRecord<'a> {
    use rdkafka::Message;
    KafkaRecord {
        key: m.key(),
        payload: m.payload(),
        topic: m.topic(),
        partition: m.partition(),
        offset: m.offset(),
        timestamp: m.timestamp().to_millis(),
        log_append_time: matches!(m.timestamp(), rdkafka::Timestamp::LogAppendTime(_)),
        headers: m.headers(),
    }
}

fn decode_value(
    spec: &SourceSpec,
    schema: &Schema,
    record: &KafkaRecord<'_>,
) -> std::result::Result<Option<(Row, i64)>, RecordError> {
    if let SourceFormat::Custom(decoder) = &spec.format {
        return decoder.decode_record(record);
    }
    let bad = RecordError::Bad;
    let payload = record
        .payload
        .ok_or_else(|| bad("record has no value (null)".into()))?;
    let row = match spec.format {
        SourceFormat::Custom(_) => unreachable!("decoded above"),
        SourceFormat::Text => Row::insert(vec![Value::String(
            std::str::from_utf8(payload)
                .map_err(|e| bad(format!("value is not valid UTF-8: {e}")))?
                .to_string(),
        )]),
        SourceFormat::Json => crate::dataflow::json::decode_row(payload, schema).map_err(bad)?,
    };
    let ts = match &spec.event_time {
        None => NO_TIMESTAMP,
        Some(et) => match et.column {
            None => record
                .timestamp
                .ok_or_else(|| bad("record has no Kafka timestamp for event time".into()))?,
            Some(c) => row.get(c).as_timestamp().ok_or_else(|| {
                bad(format!(
                    "event-time field {:?} is missing or null",
                    schema.fields[c].name
                ))
            })?,
        },
    };
    Ok(Some((row, ts)))
}
