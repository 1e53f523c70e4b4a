//! The engines that run a job graph ([`crate::dataflow::Graph`]), and what
//! both share: a task's operators as a [`chain`] and the Kafka [`sink`].
//!
//! - [`single`]: single mode, a thread per task, channels between stages,
//!   checkpoints by barriers (`single::coordinator`).
//! - [`group`]: group mode, tasks on each instance's poll thread,
//!   repartition topics between stages, checkpoints by epochs
//!   (`engine::group::protocol`).
//! - [`core`]: the task both runners drive (`TaskCore`: process,
//!   advance the watermark, snapshot, restore) and its watermark marks.
//! - [`chain`]: a task's operators, chained, and its outgoing exchanges.
//! - [`decode`]: a Kafka record into a source's row, for both modes.
//! - [`sink`]: the Kafka sink operator.

pub mod chain;
pub mod core;
pub mod decode;
pub mod group;
pub mod single;
pub mod sink;
pub mod upsert_fold;

pub use self::single::run;

use self::chain::SlotBody;
use self::sink::SinkWriter;
use crate::config::BadRecordPolicy;
use crate::dataflow::graph::{Exchange, Graph, NodeBody, SinkSpec};
use crate::dataflow::tables::KeyedStore;
use crate::dataflow::Context;
use crate::error::{Result, WeirError};
use crate::kafka::{self};
use crate::runtime::output::{Output, OutputTarget};

/// The slot of node `n` in a chain of subtask (or task) `subtask`: a
/// source passes its rows on (its reading is the task's), an operator
/// runs over its store, a sink writes through the `Output` made for it.
pub(crate) fn slot_body(
    graph: &Graph,
    n: usize,
    subtask: u32,
    store: Option<KeyedStore>,
    output: impl Fn(OutputFor<'_>) -> Output,
) -> SlotBody {
    let node = &graph.nodes[n];
    match &node.body {
        NodeBody::Source(_) => SlotBody::Forward,
        NodeBody::Operator(spec) => {
            let mut ctx = Box::new(Context::new(&node.uid, subtask, store));
            ctx.set_update_before(graph.update_before_needed(n));
            if spec.keyed {
                let mut columns = vec![Vec::new(); spec.inputs];
                for e in graph.inputs(n) {
                    if let (Exchange::Hash(cols), Some(slot)) =
                        (&e.exchange, columns.get_mut(e.port))
                    {
                        *slot = cols.clone();
                    }
                }
                ctx.set_key_columns(columns);
            }
            SlotBody::Operator {
                op: (spec.factory)(),
                ctx,
                keyed: spec.keyed,
                late: spec
                    .late_topic
                    .as_deref()
                    .map(|t| Box::new(output(OutputFor::Late(t)))),
            }
        }
        NodeBody::Sink(spec) => SlotBody::Sink(Box::new(SinkWriter::new(
            &node.uid,
            spec.clone(),
            node.schema.clone(),
            output(OutputFor::Sink(spec)),
        ))),
    }
}

/// What an `Output` of a slot writes: a sink's topic, or an operator's
/// late records as dead letters to a topic.
pub(crate) enum OutputFor<'a> {
    Sink(&'a SinkSpec),
    Late(&'a str),
}

impl OutputFor<'_> {
    /// Where operator `uid`'s subtask `subtask` writes it.
    pub(crate) fn target(&self, uid: &str, subtask: u32) -> OutputTarget {
        let (sink_topic, dead_letter_topic, on_bad_record) = match self {
            OutputFor::Sink(s) => (s.topic.clone(), s.dead_letter_topic.clone(), s.on_too_large),
            OutputFor::Late(t) => (
                String::new(),
                Some(t.to_string()),
                BadRecordPolicy::DeadLetter,
            ),
        };
        OutputTarget {
            uid: uid.to_string(),
            subtask,
            sink_topic,
            dead_letter_topic,
            on_bad_record,
        }
    }
}

/// Refuses to start when a sink's topic, or an operator's topic for late
/// records, does not exist (a producer would wait for it, then fail at the
/// first record, long after the start).
pub(crate) fn check_sink_topics(
    graph: &Graph,
    consumer: &rdkafka::consumer::BaseConsumer,
) -> Result<()> {
    for n in &graph.nodes {
        // (topic, whether it is a sink's), for the error that names it.
        let topics: Vec<(&String, bool)> = match &n.body {
            NodeBody::Sink(spec) => std::iter::once(&spec.topic)
                .chain(&spec.dead_letter_topic)
                .map(|t| (t, true))
                .collect(),
            NodeBody::Operator(spec) => spec.late_topic.iter().map(|t| (t, false)).collect(),
            NodeBody::Source(_) => continue,
        };
        for (topic, sink) in topics {
            check_topic(consumer, &n.uid, topic, sink)?;
        }
    }
    Ok(())
}

fn check_topic(
    consumer: &rdkafka::consumer::BaseConsumer,
    uid: &str,
    topic: &str,
    sink: bool,
) -> Result<()> {
    match kafka::topic_partitions(consumer, &[topic.to_string()]) {
        Err(WeirError::MissingTopic { topic }) if sink => Err(WeirError::MissingSinkTopic {
            sink: uid.to_string(),
            topic,
        }),
        Err(WeirError::MissingTopic { topic }) => Err(WeirError::MissingLateTopic {
            operator: uid.to_string(),
            topic,
        }),
        other => other.map(|_| ()),
    }
}
