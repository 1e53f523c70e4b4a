//! `GET /api/overview`: what the console shows at a glance — the job, its
//! operators, and every metric sample `/metrics` has, as JSON.

use serde::Serialize;

use crate::config::{BuiltinJob, Config, Delivery, SOURCE_UID};
use crate::observe::metrics::Sample;

/// The job as configured: fixed for the life of the process.
#[derive(Debug, Clone, Serialize)]
pub struct JobInfo {
    pub name: String,
    pub version: &'static str,
    /// `scale.instance` in group mode, `sink.instance` otherwise.
    pub instance: String,
    pub mode: &'static str,
    pub delivery: &'static str,
    pub checkpoint_interval_ms: u64,
    pub operators: Vec<OperatorInfo>,
}

/// One step of the pipeline, in order.
#[derive(Debug, Clone, Serialize)]
pub struct OperatorInfo {
    pub uid: String,
    pub kind: String,
    pub parallelism: u32,
    pub detail: String,
}

impl JobInfo {
    /// The job as its configuration gives it: a built-in pipeline's
    /// source, keyed operator and sink; a SQL job's and a graph's
    /// operators come from their graph ([`JobInfo::from_graph`]).
    pub fn from_config(config: &Config) -> Self {
        let delivery = match config.output.delivery {
            Delivery::ExactlyOnce => "exactly-once",
            Delivery::AtLeastOnce => "at-least-once",
        };
        let operators = config
            .builtin()
            .map(|b| Self::builtin_operators(config, b, delivery))
            .unwrap_or_default();
        Self {
            name: config.job.name.clone(),
            version: env!("CARGO_PKG_VERSION"),
            instance: config.instance().to_string(),
            mode: if config.is_group() { "group" } else { "single" },
            delivery,
            checkpoint_interval_ms: config.checkpoint.interval.as_millis() as u64,
            operators,
        }
    }

    /// A built-in pipeline's three operators.
    fn builtin_operators(config: &Config, b: &BuiltinJob, delivery: &str) -> Vec<OperatorInfo> {
        // In group mode the keyed operator runs as `scale.tasks` tasks
        // spread over the instances; the sources as the input partitions.
        let keyed_parallelism = if config.is_group() {
            config.scale.tasks
        } else {
            config.job.parallelism
        };
        let mut keyed = match b.pipeline.window() {
            None => b.pipeline.kind_name().to_string(),
            Some(w) => format!("{} ({:?} window)", b.pipeline.kind_name(), w.kind).to_lowercase(),
        };
        if let Some(et) = &b.source.event_time {
            let field = et.field.as_deref().unwrap_or("Kafka timestamp");
            keyed.push_str(&format!(", event time from {field}"));
        }
        vec![
            OperatorInfo {
                uid: SOURCE_UID.to_string(),
                kind: "source".into(),
                parallelism: config.job.parallelism,
                detail: format!("topics {}", b.source.topics.join(", ")),
            },
            OperatorInfo {
                uid: b.keyed_uid(),
                kind: keyed,
                parallelism: keyed_parallelism,
                detail: format!("{} key groups", config.job.max_parallelism),
            },
            OperatorInfo {
                uid: "kafka-sink".into(),
                kind: "sink".into(),
                parallelism: keyed_parallelism,
                detail: format!(
                    "topic {}, {delivery}, chained to {}",
                    b.sink.topic,
                    b.keyed_uid()
                ),
            },
        ]
    }

    /// A job graph's nodes as the console lists them: each node's kind,
    /// its inputs and its schema.
    pub fn from_graph(config: &Config, graph: &crate::dataflow::Graph) -> Self {
        let mut info = Self::from_config(config);
        info.operators = graph
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let inputs: Vec<String> = graph
                    .inputs(i)
                    .map(|e| {
                        let from = &graph.nodes[e.from].uid;
                        match &e.exchange {
                            crate::dataflow::graph::Exchange::Forward => {
                                format!("{from} (forward)")
                            }
                            crate::dataflow::graph::Exchange::Hash(_) => format!("{from} (hash)"),
                        }
                    })
                    .collect();
                let detail = match &n.body {
                    crate::dataflow::graph::NodeBody::Source(s) => {
                        format!("topics {}", s.topics.join(", "))
                    }
                    crate::dataflow::graph::NodeBody::Sink(s) => {
                        format!("topic {}, from {}", s.topic, inputs.join(", "))
                    }
                    crate::dataflow::graph::NodeBody::Operator(_) => {
                        format!("from {}; {}", inputs.join(", "), n.schema)
                    }
                };
                OperatorInfo {
                    uid: n.uid.clone(),
                    kind: n.kind.clone(),
                    parallelism: config.job.parallelism,
                    detail,
                }
            })
            .collect();
        info
    }
}

/// The answer of `/api/overview`.
#[derive(Debug, Serialize)]
pub struct Overview<'a> {
    pub now_ms: u64,
    pub job: JobStatus<'a>,
    pub metrics: Vec<Sample>,
}

/// [`JobInfo`] with what changes.
#[derive(Debug, Serialize)]
pub struct JobStatus<'a> {
    #[serde(flatten)]
    pub info: &'a JobInfo,
    pub uptime_s: f64,
    pub restarts: u64,
    pub ready: bool,
}
