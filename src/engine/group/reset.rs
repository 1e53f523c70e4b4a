//! `weir reset`: starts a group-mode job over with empty state, on purpose.
//!
//! A task of a group-mode job restores the checkpoint its committed offset
//! names. When the group has no offset for a task but shared storage holds
//! its checkpoints, the group's offsets were lost (a deleted or reset
//! group, or offsets expired after `offsets.retention.minutes` with every
//! instance down), and the instance refuses to start the task empty: that
//! would process the retained input again over empty state and write wrong
//! results (`GraphInstance::refuse_lost_offsets`). Starting over is then
//! the operator's decision, made once with this command while every
//! instance is stopped, as Kafka Streams' application reset tool does it:
//!
//! 1. every input partition is committed at the source's `start` position
//!    (its first offset for `earliest`, its end for `latest`);
//! 2. every task's repartition partition is committed at its end with the
//!    `EMPTY_START` marker (`crate::engine::group::manifest`): the task starts empty there, and what the
//!    job wrote into its repartition topics before is never read again
//!    (it came from the input that step 1 reads again);
//! 3. the job's task checkpoints, the tasks' committed markers and the
//!    records of savepoints it was seeded from (`stages/`, `committed/` and
//!    `seeded/` in storage) are deleted.
//!
//! The offsets are committed before anything is deleted: a reset cut
//! short leaves tasks that start empty at their marker, never pointers to
//! deleted checkpoints. It can be run again.

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::{Offset, TopicPartitionList};

use super::manifest::{EMPTY_START, MARKERS, SEEDED, STAGES};
use super::plan::GroupPlan;
use super::storage::SharedStorage;
use crate::config::{Config, StartPosition};
use crate::dataflow::graph::{Graph, NodeBody};
use crate::error::{Result, WeirError};
use crate::kafka::{self, REQUEST_TIMEOUT};

/// What a reset did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResetReport {
    pub group: String,
    /// Input partitions and the offsets committed for them.
    pub inputs: Vec<(String, i32, i64)>,
    /// Repartition partitions (one per task) and their committed ends.
    pub tasks: Vec<(String, i32, i64)>,
    /// Objects deleted from storage.
    pub deleted: usize,
    /// Where the checkpoints were.
    pub storage: String,
}

impl ResetReport {
    /// What `weir reset` prints.
    pub fn render(&self) -> String {
        let mut out = format!(
            "consumer group {:?}: committed {} input partitions at the sources' start and {} \
             task partitions at their end (tasks start with empty state there)\n",
            self.group,
            self.inputs.len(),
            self.tasks.len()
        );
        for (t, p, o) in self.inputs.iter().chain(&self.tasks) {
            out.push_str(&format!("  {t}/{p} at {o}\n"));
        }
        out.push_str(&format!(
            "deleted {} task checkpoint objects below {}/{STAGES}, {MARKERS} and seeded\n",
            self.deleted, self.storage
        ));
        out
    }
}

/// Resets the group-mode job `graph` of `config` (see the module's
/// documentation). Refused while the group has members.
pub fn reset(graph: &Graph, config: &Config) -> Result<ResetReport> {
    if !config.is_group() {
        return Err(WeirError::ResetRefused(format!(
            "weir reset starts a group-mode job over (scale.mode = \"group\"); this job runs in \
             single mode, whose checkpoints are folders below {}: to start it over with empty \
             state, stop it and move that folder away",
            config.job_checkpoint_dir().display()
        )));
    }
    let plan = GroupPlan::new(graph, &config.job.name).map_err(|problems| WeirError::Graph {
        job: graph.name.clone(),
        problems,
    })?;
    let group = config.kafka.group_id.clone();
    let consumer: BaseConsumer = kafka::base_config(config)
        .set("group.id", &group)
        .set("enable.auto.commit", "false")
        .create()
        .map_err(|e| WeirError::kafka("create consumer", e))?;
    refuse_active_members(&consumer, &group)?;

    let mut inputs = Vec::new();
    for node in &graph.nodes {
        let NodeBody::Source(spec) = &node.body else {
            continue;
        };
        for (topic, partition) in kafka::topic_partitions(&consumer, &spec.topics)? {
            let (low, high) = watermarks(&consumer, &topic, partition)?;
            let at = match spec.start {
                StartPosition::Earliest => low,
                StartPosition::Latest => high,
            };
            inputs.push((topic, partition, at));
        }
    }
    let mut tasks = Vec::new();
    for stage in &plan.stages {
        for partition in 0..config.scale.tasks as i32 {
            let (_, high) = watermarks(&consumer, &stage.topic, partition)?;
            tasks.push((stage.topic.clone(), partition, high));
        }
    }
    let mut tpl = TopicPartitionList::new();
    for (topic, partition, at) in &inputs {
        tpl.add_partition_offset(topic, *partition, Offset::Offset(*at))
            .map_err(|e| WeirError::kafka(format!("offset of {topic}/{partition}"), e))?;
    }
    for (topic, partition, at) in &tasks {
        tpl.add_partition_offset(topic, *partition, Offset::Offset(*at))
            .map_err(|e| WeirError::kafka(format!("offset of {topic}/{partition}"), e))?;
        tpl.find_partition(topic, *partition)
            .expect("added above")
            .set_metadata(EMPTY_START);
    }
    consumer.commit(&tpl, CommitMode::Sync).map_err(|e| {
        WeirError::kafka(
            format!(
                "commit the reset offsets for consumer group {group:?} (refused while the group \
                 has members: stop every instance first)"
            ),
            e,
        )
    })?;

    let storage = SharedStorage::open(config)?;
    let mut objects = storage.list(STAGES)?;
    objects.extend(storage.list(MARKERS)?);
    objects.extend(storage.list(SEEDED)?);
    for o in &objects {
        storage.delete(&o.key)?;
    }
    tracing::info!(
        group = %group,
        inputs = inputs.len(),
        tasks = tasks.len(),
        deleted = objects.len(),
        "job reset: tasks start with empty state"
    );
    Ok(ResetReport {
        group,
        inputs,
        tasks,
        deleted: objects.len(),
        storage: storage.location.clone(),
    })
}

/// A reset while an instance runs would race its commits. The members are
/// listed with DescribeConsumerGroups, which answers for both group
/// protocols (the classic DescribeGroups answers a KIP-848 group with no
/// members).
fn refuse_active_members(consumer: &BaseConsumer, group: &str) -> Result<()> {
    let members = active_members(consumer, group)?;
    if !members.is_empty() {
        return Err(WeirError::ResetRefused(format!(
            "consumer group {group:?} has {} active members: {}; stop every instance of the \
             job before weir reset",
            members.len(),
            members.join(", ")
        )));
    }
    Ok(())
}

/// The group's members, each as `client id (host)`, listed as
/// [`refuse_active_members`] says why.
pub(super) fn active_members(consumer: &BaseConsumer, group: &str) -> Result<Vec<String>> {
    let members = crate::kafka::members::group_members(consumer.client(), group, REQUEST_TIMEOUT)?;
    Ok(members
        .iter()
        .map(|m| format!("{} ({})", m.client_id, m.host))
        .collect())
}

pub(super) fn watermarks(
    consumer: &BaseConsumer,
    topic: &str,
    partition: i32,
) -> Result<(i64, i64)> {
    consumer
        .fetch_watermarks(topic, partition, REQUEST_TIMEOUT)
        .map_err(|e| WeirError::kafka(format!("watermarks of {topic}/{partition}"), e))
}
