//! Kafka clients: configuration shared by every client, the source
//! consumers, the group client that reads and commits offsets, and the
//! sink producer.

pub mod brokers;
pub mod members;
pub mod producer;

use std::collections::BTreeMap;
use std::time::Duration;

use std::sync::Arc;

use rdkafka::client::ClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::statistics::Statistics;
use rdkafka::{Offset, TopicPartitionList};

use crate::checkpoint::recovery::GroupOffsets;
use crate::config::{Config, StartPosition};
use crate::error::{Result, WeirError};
use crate::observe::metrics::Metrics;

/// Timeout of metadata and offset requests at start-up.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The metadata string that ties committed offsets to a checkpoint.
pub fn checkpoint_marker(id: u64) -> String {
    format!("weir-checkpoint={id}")
}

/// The checkpoint id in committed offset metadata, if it is a marker.
pub fn parse_marker(s: &str) -> Option<u64> {
    s.strip_prefix("weir-checkpoint=")?.parse().ok()
}

/// `bootstrap.servers`, weir's own `defaults`, then every
/// `[kafka.properties]` entry, so that a user's value always wins over a
/// default of weir's. The properties weir must own are refused at
/// validation (`config::RESERVED_PROPERTIES`) and set by the callers after
/// this.
pub fn client_config(c: &Config, defaults: &[(&str, &str)]) -> ClientConfig {
    let mut cc = ClientConfig::new();
    cc.set("bootstrap.servers", &c.kafka.bootstrap_servers);
    for (k, v) in defaults {
        cc.set(*k, *v);
    }
    for (k, v) in &c.kafka.properties {
        // Producer-only settings make librdkafka warn on consumers; the
        // producer sets this one itself.
        if k != "transaction.timeout.ms" {
            cc.set(k, v);
        }
    }
    cc
}

/// `bootstrap.servers` plus every `[kafka.properties]` entry.
pub fn base_config(c: &Config) -> ClientConfig {
    client_config(c, &[])
}

/// How much a consumer fetches ahead of its task, per partition.
///
/// librdkafka stops fetching a partition whose local queue holds
/// `queued.min.messages` records (default 100,000) or
/// `queued.max.messages.kbytes` (default 64 MiB), and then waits
/// `fetch.queue.backoff.ms` (default 1,000 ms) before it asks again. A
/// task that reads 200,000 records a second drained a full queue in half
/// a second and then sat idle for the other half: every simple Nexmark
/// query ran at about 190,000 events/s, bursting once a second whatever
/// its checkpoint interval (BENCHMARKS.md, "Issue #43, target 5"). A
/// queue a fifth as long, asked again after 10 ms, keeps the task fed and
/// holds less memory per partition. `[kafka.properties]` overrides each.
pub const CONSUMER_DEFAULTS: &[(&str, &str)] = &[
    ("queued.min.messages", "20000"),
    ("queued.max.messages.kbytes", "16384"),
    ("fetch.queue.backoff.ms", "10"),
];

/// A consumer that reads by explicit assignment: weir's checkpoints, not
/// the group, own the positions; the group id only names where offsets are
/// committed.
pub fn consumer_config(c: &Config) -> ClientConfig {
    let mut cc = client_config(c, CONSUMER_DEFAULTS);
    cc.set("group.id", &c.kafka.group_id)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "false")
        // Data an upstream exactly-once producer aborted never enters weir.
        .set("isolation.level", "read_committed")
        // Where a partition starts is set when it is assigned (a
        // checkpoint's offset, else its source's `start`); this is where
        // a position found out of range goes: a built-in pipeline's
        // `source.start`, as it always was, else the earliest record.
        .set(
            "auto.offset.reset",
            match c.builtin().map(|b| b.source.start) {
                Some(StartPosition::Latest) => "latest",
                _ => "earliest",
            },
        );
    cc
}

pub fn create_consumer(c: &Config) -> Result<BaseConsumer> {
    consumer_config(c)
        .create()
        .map_err(|e| WeirError::kafka("create consumer", e))
}

/// A client of the job's consumer group that reads committed offsets as
/// they stand, without waiting for an open transaction that holds newer
/// ones (`read_uncommitted`: librdkafka then fetches offsets without
/// `require_stable`). It never joins the group or reads records.
pub fn create_last_committed_reader(c: &Config) -> Result<BaseConsumer> {
    let mut cc = consumer_config(c);
    cc.set("isolation.level", "read_uncommitted");
    cc.create()
        .map_err(|e| WeirError::kafka("create consumer", e))
}

/// Source task `task`'s consumer, whose librdkafka statistics feed the
/// consumer-lag gauge and its fetch queue's `weir_memory_bytes` once a
/// second.
pub fn create_source_consumer(
    c: &Config,
    metrics: Arc<Metrics>,
    task: &str,
) -> Result<BaseConsumer<SourceContext>> {
    let mut cc = consumer_config(c);
    if !c.kafka.properties.contains_key("statistics.interval.ms") {
        cc.set("statistics.interval.ms", "1000");
    }
    cc.create_with_context(SourceContext {
        metrics,
        task: task.to_string(),
    })
    .map_err(|e| WeirError::kafka("create consumer", e))
}

/// Turns librdkafka statistics into `weir_consumer_lag_records` and the
/// `kafka_fetch_queue` component of `weir_memory_bytes`.
pub struct SourceContext {
    metrics: Arc<Metrics>,
    task: String,
}

impl ClientContext for SourceContext {
    fn stats(&self, stats: Statistics) {
        report_lag(&self.metrics, &stats);
        crate::observe::memory::set(
            &self.metrics.memory,
            crate::observe::memory::KAFKA_FETCH_QUEUE,
            &self.task,
            fetch_queue_bytes(&stats),
        );
    }
}

/// The bytes of records a consumer has fetched ahead of its task, over
/// the partitions it is given.
fn fetch_queue_bytes(stats: &Statistics) -> u64 {
    stats
        .topics
        .values()
        .flat_map(|t| t.partitions.iter())
        .filter(|(partition, p)| **partition >= 0 && p.desired)
        .map(|(_, p)| p.fetchq_size)
        .sum()
}

/// Sets `weir_consumer_lag_records` from a consumer's statistics.
pub fn report_lag(metrics: &Metrics, stats: &Statistics) {
    {
        for (topic, t) in &stats.topics {
            for (partition, p) in &t.partitions {
                // Statistics list every partition of the topic; another
                // source consumer reports the ones this one is not given.
                if *partition < 0 || !p.desired {
                    continue;
                }
                // read_committed: the end is the last stable offset.
                let end = if p.ls_offset >= 0 {
                    p.ls_offset
                } else {
                    p.hi_offset
                };
                let from = if p.app_offset >= 0 {
                    p.app_offset
                } else {
                    p.lo_offset
                };
                if end < 0 || from < 0 {
                    continue;
                }
                metrics
                    .consumer_lag
                    .with_label_values(&[topic.as_str(), &partition.to_string()])
                    .set((end - from).max(0));
            }
        }
    }
}

impl ConsumerContext for SourceContext {}

/// Every (topic, partition) of `topics`, sorted; a topic that does not
/// exist (or has no partitions) is an error naming it.
pub fn topic_partitions(consumer: &BaseConsumer, topics: &[String]) -> Result<Vec<(String, i32)>> {
    let mut out = Vec::new();
    for topic in topics {
        let md = consumer
            .fetch_metadata(Some(topic), REQUEST_TIMEOUT)
            .map_err(|e| WeirError::kafka(format!("metadata of topic {topic:?}"), e))?;
        let t = md
            .topics()
            .iter()
            .find(|t| t.name() == topic)
            .filter(|t| t.error().is_none() && !t.partitions().is_empty())
            .ok_or_else(|| WeirError::MissingTopic {
                topic: topic.clone(),
            })?;
        out.extend(t.partitions().iter().map(|p| (topic.clone(), p.id())));
    }
    out.sort();
    Ok(out)
}

/// The group's committed offsets for `partitions`, with the checkpoint id
/// their metadata names.
pub fn committed_offsets(
    consumer: &BaseConsumer,
    partitions: &[(String, i32)],
) -> Result<GroupOffsets> {
    let mut tpl = TopicPartitionList::new();
    for (t, p) in partitions {
        tpl.add_partition(t, *p);
    }
    let got = consumer
        .committed_offsets(tpl, REQUEST_TIMEOUT)
        .map_err(|e| WeirError::kafka("read the group's committed offsets", e))?;
    let mut offsets = BTreeMap::new();
    let mut ids = Vec::new();
    for e in got.elements() {
        if let Offset::Offset(o) = e.offset() {
            offsets.insert((e.topic().to_string(), e.partition()), o);
            ids.push(parse_marker(e.metadata()));
        }
    }
    ids.dedup();
    let checkpoint_id = match ids.as_slice() {
        [Some(id)] => Some(*id),
        _ => None,
    };
    Ok(GroupOffsets {
        offsets,
        checkpoint_id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marker_round_trips() {
        assert_eq!(parse_marker(&checkpoint_marker(42)), Some(42));
        assert_eq!(parse_marker(""), None);
        assert_eq!(parse_marker("weir-checkpoint=x"), None);
    }

    /// A word-count job's configuration with `properties` as
    /// `[kafka.properties]`, the broker at `bootstrap`, and `sink` appended
    /// to its `[sink]` section (the producer's tests use it too).
    pub(crate) fn config_with(bootstrap: &str, properties: &str, sink: &str) -> Config {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.toml");
        std::fs::write(
            &path,
            format!(
                r#"
[job]
name = "wc"
[kafka]
bootstrap_servers = "{bootstrap}"
group_id = "g"
[kafka.properties]
{properties}
[checkpoint]
dir = "/tmp/c"
[state]
dir = "/tmp/s"
[source]
topics = ["in"]
[pipeline]
kind = "word-count"
[sink]
topic = "out"
{sink}
"#
            ),
        )
        .unwrap();
        Config::load(&path).unwrap()
    }

    /// Consumers fetch ahead with a short back-off by default (the 1 s
    /// default paced every simple query), and a user's value still wins.
    #[test]
    fn consumers_fetch_ahead_with_weirs_defaults_unless_the_user_sets_them() {
        let cc = consumer_config(&config_with("127.0.0.1:9092", "", ""));
        for (k, v) in CONSUMER_DEFAULTS {
            assert_eq!(cc.get(k), Some(*v), "{k}");
        }
        assert_eq!(cc.get("fetch.queue.backoff.ms"), Some("10"));
        assert_eq!(cc.get("isolation.level"), Some("read_committed"));
        let cc = consumer_config(&config_with(
            "127.0.0.1:9092",
            "\"fetch.queue.backoff.ms\" = \"250\"\n\"queued.min.messages\" = \"5000\"",
            "",
        ));
        assert_eq!(cc.get("fetch.queue.backoff.ms"), Some("250"));
        assert_eq!(cc.get("queued.min.messages"), Some("5000"));
        assert_eq!(cc.get("queued.max.messages.kbytes"), Some("16384"));
    }
}
