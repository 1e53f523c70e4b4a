//! The repartition topic: the exchange between instances. Partition `t`
//! carries the updates of task `t`'s key groups; weir creates it with
//! `scale.tasks` partitions and refuses to run against one with another
//! count, since the task count fixes which key groups each partition holds.
//!
//! Its `max.message.bytes` and the producer's `message.max.bytes` are
//! sized together: weir creates the topic with room for the largest
//! record the producer accepts, and refuses to start against one with
//! less (the broker would refuse such a record inside a transaction, and
//! every epoch, on every instance, would fail the same way). A row too
//! large for the producer is the row's fault, handled by the sources'
//! `on_bad_record` (`engine::group::exchange`).

use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::TopicPartitionList;
use tracing::{info, warn};

use crate::config::Config;
use crate::error::{Result, WeirError};
use crate::kafka::{self, REQUEST_TIMEOUT};

/// The repartition topic of job `job`'s stage headed by `uid`.
pub fn topic_of(job: &str, uid: &str) -> String {
    format!("{job}.{uid}.repartition")
}

pub(crate) fn admin(c: &Config) -> Result<AdminClient<DefaultClientContext>> {
    kafka::base_config(c)
        .create()
        .map_err(|e| WeirError::kafka("create admin client", e))
}

/// Kafka's record batch header (v2, `RECORD_BATCH_OVERHEAD` in the
/// broker): what a batch holding one record adds to the record.
const RECORD_BATCH_OVERHEAD: u64 = 61;

/// librdkafka's default `message.max.bytes`.
const DEFAULT_MESSAGE_MAX_BYTES: u64 = 1_000_000;

/// The producer's `message.max.bytes` (from `[kafka.properties]`, else
/// librdkafka's default): the largest record it accepts.
pub fn producer_message_max_bytes(c: &Config) -> u64 {
    crate::kafka::producer::producer_config(c)
        .get("message.max.bytes")
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(DEFAULT_MESSAGE_MAX_BYTES)
}

/// The `max.message.bytes` a repartition topic needs: room for the
/// largest record the producer accepts, in a batch of its own.
pub fn needed_max_message_bytes(c: &Config) -> u64 {
    producer_message_max_bytes(c) + RECORD_BATCH_OVERHEAD
}

/// Creates the repartition topic `name` (a job graph's stage's) when it
/// does not exist, and checks its partition count and `max.message.bytes`
/// when it does.
pub fn ensure_topic(
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
    let needed = needed_max_message_bytes(c).to_string();
    let partitions = match count(consumer)? {
        Some(n) => n,
        None => {
            let admin = admin(c)?;
            let topic = NewTopic::new(&name, tasks, TopicReplication::Fixed(-1))
                // The topic is trimmed behind the committed offsets
                // (`trim`); time-based deletion must never run ahead of a
                // task that is behind.
                .set("retention.ms", "-1")
                .set("cleanup.policy", "delete")
                .set("max.message.bytes", &needed);
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
    check_max_message_bytes(c, &name)?;
    Ok(name)
}

/// Refuses a repartition topic whose `max.message.bytes` is below what
/// the producer may send it ([`needed_max_message_bytes`]), naming both
/// keys. A topic whose configuration cannot be read (no DescribeConfigs
/// permission) is passed with a warning.
fn check_max_message_bytes(c: &Config, name: &str) -> Result<()> {
    let needed = needed_max_message_bytes(c);
    let admin = admin(c)?;
    let opts = AdminOptions::new().request_timeout(Some(REQUEST_TIMEOUT));
    let described = futures::executor::block_on(
        admin.describe_configs(&[ResourceSpecifier::Topic(name)], &opts),
    );
    let value = match described.as_deref() {
        Ok([Ok(r)]) => r
            .get("max.message.bytes")
            .and_then(|e| e.value.as_deref())
            .and_then(|v| v.trim().parse::<u64>().ok()),
        other => {
            warn!(topic = %name, result = ?other.map(|_| ()), "the repartition topic's max.message.bytes could not be read; not checked against the producer's message.max.bytes");
            return Ok(());
        }
    };
    match value {
        Some(topic) if topic < needed => Err(WeirError::Graph {
            job: c.job.name.clone(),
            problems: vec![format!(
                "the repartition topic {name:?} has max.message.bytes = {topic}, below the \
                 producer's message.max.bytes = {} plus a record batch's {RECORD_BATCH_OVERHEAD} \
                 bytes: a record the producer accepts would be refused by the broker, failing \
                 every transaction that holds it. Raise the topic's max.message.bytes to at \
                 least {needed} (kafka-configs.sh --alter --entity-type topics --entity-name \
                 {name} --add-config max.message.bytes={needed}), or lower message.max.bytes \
                 in [kafka.properties] to at most {}",
                producer_message_max_bytes(c),
                topic.saturating_sub(RECORD_BATCH_OVERHEAD),
            )],
        }),
        _ => Ok(()),
    }
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
