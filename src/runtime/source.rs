//! What every source task shares (single mode's `engine::single::source_task`
//! and group mode's instance): the bad-record policy, the offsets a
//! trigger records, consumer errors, and a partition's position.

use std::time::Duration;

use rdkafka::consumer::BaseConsumer;
use tracing::warn;

use crate::checkpoint::PartitionOffset;
use crate::config::BadRecordPolicy;
use crate::error::{Result, WeirError};
use crate::kafka::SourceContext;
use crate::observe::metrics::Metrics;
use crate::time::watermark::SourceWatermarks;

/// Applies `source.on_bad_record` to an input record that did not decode:
/// an error (`fail`), or counted and logged, returning the reason when the
/// record goes to the dead-letter topic. Shared by single and group mode.
pub fn bad_record(
    policy: BadRecordPolicy,
    metrics: &Metrics,
    topic: &str,
    partition: i32,
    offset: i64,
    reason: String,
) -> Result<Option<String>> {
    match policy {
        BadRecordPolicy::Fail => Err(WeirError::BadRecord {
            topic: topic.to_string(),
            partition,
            offset,
            reason,
        }),
        BadRecordPolicy::Skip => {
            metrics.bad_records.with_label_values(&["skip"]).inc();
            warn!(topic, partition, offset, reason = %reason, "skipped bad record");
            Ok(None)
        }
        BadRecordPolicy::DeadLetter => {
            metrics
                .bad_records
                .with_label_values(&["dead-letter"])
                .inc();
            warn!(topic, partition, offset, reason = %reason, "bad record sent to the dead-letter topic");
            Ok(Some(reason))
        }
    }
}

/// A source's part of a checkpoint: the next offset of every partition
/// it has a position for, with event time the highest event time read
/// from it. Shared by the built-in pipelines' and job graphs' sources.
pub fn offsets_at_trigger(
    positions: &[Position],
    watermarks: Option<&SourceWatermarks>,
) -> Vec<PartitionOffset> {
    let max_ts: std::collections::BTreeMap<(String, i32), Option<i64>> = watermarks
        .map(|w| w.snapshot().into_iter().collect())
        .unwrap_or_default();
    positions
        .iter()
        .filter_map(|p| {
            p.next.map(|offset| PartitionOffset {
                topic: p.topic.clone(),
                partition: p.partition,
                offset,
                max_timestamp: max_ts
                    .get(&(p.topic.clone(), p.partition))
                    .copied()
                    .flatten(),
            })
        })
        .collect()
}

/// A consumer's poll error: librdkafka reports transient broker trouble
/// there and retries by itself, so it is logged and reading goes on; only
/// a fatal error stops the source task (`task` names it).
pub fn consumer_error(
    consumer: &BaseConsumer<SourceContext>,
    task: impl FnOnce() -> String,
    e: &rdkafka::error::KafkaError,
) -> Result<()> {
    use rdkafka::consumer::Consumer;
    let task = task();
    if let Some((code, reason)) = consumer.client().fatal_error() {
        return Err(WeirError::Task {
            task,
            reason: format!("consumer fatal error {code:?}: {reason}"),
        });
    }
    warn!(task = %task, error = %e, "consumer error");
    Ok(())
}

/// How often idleness and watermarks are looked at without records.
pub(crate) const WATERMARK_INTERVAL: Duration = Duration::from_millis(100);

/// A partition this subtask owns and the next offset to read, once known.
#[derive(Debug, Clone)]
pub struct Position {
    pub topic: String,
    pub partition: i32,
    pub next: Option<i64>,
}

/// Partial batches are sent at least this often when input trickles in.
pub(crate) const MAX_BATCH_DELAY: Duration = Duration::from_millis(20);
