//! The repartition topic: the exchange between instances. Partition `t`
//! carries the updates of task `t`'s key groups; weir creates it with
//! `scale.tasks` partitions and refuses to run against one with another
//! count, since the task count fixes which key groups each partition holds.

use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::TopicPartitionList;
use tracing::info;

use crate::config::Config;
use crate::error::{Result, WeirError};
use crate::kafka::{self, REQUEST_TIMEOUT};

/// `<job>.<operator uid>.repartition`
pub fn topic_name(c: &Config) -> String {
    topic_of(&c.job.name, &c.keyed_uid())
}

/// The repartition topic of job `job`'s stage headed by `uid`.
pub fn topic_of(job: &str, uid: &str) -> String {
    format!("{job}.{uid}.repartition")
}

pub(crate) fn admin(c: &Config) -> Result<AdminClient<DefaultClientContext>> {
    kafka::base_config(c)
        .create()
        .map_err(|e| WeirError::kafka("create admin client", e))
}

/// Creates the repartition topic when it does not exist, and checks its
/// partition count when it does.
pub fn ensure_topic(
    c: &Config,
    consumer: &BaseConsumer<impl rdkafka::consumer::ConsumerContext>,
) -> Result<String> {
    ensure_topic_named(c, consumer, topic_name(c))
}

/// [`ensure_topic`] for the topic `name` (a job graph's stage).
pub fn ensure_topic_named(
    c: &Config,
    consumer: &BaseConsumer<impl rdkafka::consumer::ConsumerContext>,
    name: String,
) -> Result<String> {
    let tasks = c.scale.tasks as i32;
    let count = |consumer: &BaseConsumer<_>| -> Result<Option<usize>> {
        let md = consumer
            .fetch_metadata(Some(&name), REQUEST_TIMEOUT)
            .map_err(|e| WeirError::kafka(format!("metadata of topic {name:?}"), e))?;
        Ok(md
            .topics()
            .iter()
            .find(|t| t.name() == name && t.error().is_none() && !t.partitions().is_empty())
            .map(|t| t.partitions().len()))
    };
    let partitions = match count(consumer)? {
        Some(n) => n,
        None => {
            let admin = admin(c)?;
            let topic = NewTopic::new(&name, tasks, TopicReplication::Fixed(-1))
                // The topic is trimmed behind the committed offsets
                // (`trim`); time-based deletion must never run ahead of a
                // task that is behind.
                .set("retention.ms", "-1")
                .set("cleanup.policy", "delete");
            let opts = AdminOptions::new().operation_timeout(Some(REQUEST_TIMEOUT));
            let results = futures::executor::block_on(admin.create_topics([&topic], &opts))
                .map_err(|e| WeirError::kafka(format!("create topic {name:?}"), e))?;
            for r in results {
                match r {
                    Ok(_) => {
                        info!(topic = %name, partitions = tasks, "created the repartition topic")
                    }
                    // Another instance created it first.
                    Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                    Err((t, code)) => {
                        return Err(WeirError::Task {
                            task: "scale".into(),
                            reason: format!("cannot create the repartition topic {t:?}: {code}"),
                        })
                    }
                }
            }
            let deadline = std::time::Instant::now() + REQUEST_TIMEOUT;
            loop {
                if let Some(n) = count(consumer)? {
                    break n;
                }
                if std::time::Instant::now() > deadline {
                    return Err(WeirError::MissingTopic { topic: name });
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    };
    if partitions != tasks as usize {
        return Err(WeirError::Recovery(format!(
            "the repartition topic {name:?} has {partitions} partitions but scale.tasks = {tasks}: \
             the number of tasks is fixed for the life of a job (each partition holds a fixed \
             range of key groups). Set scale.tasks = {partitions}, or start a new job (another \
             job.name) to change it"
        )));
    }
    Ok(name)
}

/// Deletes repartition records below the committed offsets, which no task
/// will read again.
pub fn trim(
    admin: &AdminClient<DefaultClientContext>,
    topic: &str,
    offsets: &[(i32, i64)],
) -> Result<()> {
    if offsets.is_empty() {
        return Ok(());
    }
    let mut tpl = TopicPartitionList::new();
    for (p, o) in offsets {
        tpl.add_partition_offset(topic, *p, rdkafka::Offset::Offset(*o))
            .map_err(|e| WeirError::kafka("build trim list", e))?;
    }
    let opts = AdminOptions::new().operation_timeout(Some(REQUEST_TIMEOUT));
    futures::executor::block_on(admin.delete_records(&tpl, &opts))
        .map_err(|e| WeirError::kafka(format!("trim {topic:?}"), e))?;
    Ok(())
}

/// A repartition record's value: the update's value and event time.
pub fn encode(value: f64, timestamp: i64, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&value.to_le_bytes());
    out.extend_from_slice(&timestamp.to_le_bytes());
}

/// The update's value and event time, or why the record is not one.
pub fn decode(bytes: &[u8]) -> std::result::Result<(f64, i64), String> {
    let (v, t) = bytes
        .split_first_chunk::<8>()
        .and_then(|(v, rest)| Some((v, rest.first_chunk::<8>()?)))
        .filter(|_| bytes.len() == 16)
        .ok_or_else(|| format!("a repartition record has {} bytes, not 16", bytes.len()))?;
    Ok((f64::from_le_bytes(*v), i64::from_le_bytes(*t)))
}

/// Offsets of `consumer`'s group for one partition list (for tests and
/// tools that resolve pointers).
pub fn committed(
    consumer: &BaseConsumer<impl rdkafka::consumer::ConsumerContext>,
    tpl: TopicPartitionList,
) -> Result<TopicPartitionList> {
    consumer
        .committed_offsets(tpl, REQUEST_TIMEOUT)
        .map_err(|e| WeirError::kafka("read the group's committed offsets", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn updates_round_trip_and_wrong_sizes_are_named() {
        let mut buf = Vec::new();
        encode(2.5, -7, &mut buf);
        assert_eq!(decode(&buf), Ok((2.5, -7)));
        assert_eq!(
            decode(&buf[..15]).unwrap_err(),
            "a repartition record has 15 bytes, not 16"
        );
    }
}
