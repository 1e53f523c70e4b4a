//! How a job graph runs in group mode. Every node with hash inputs heads
//! a **stage**: a repartition topic `<job>.<head uid>.repartition` with
//! `scale.tasks` partitions, one task per partition, which Kafka's group
//! assigns like any input partition. A two-input head reads both inputs
//! from its one topic (each record names its port), so the two sides of
//! a key are always in the same task.
//!
//! The plan is the graph's own stages (`Graph::stages`, what single mode
//! runs as tasks), read for an exchange that only hashes: single mode's
//! channels also carry forward edges between stages (a union's inputs, a
//! node after a fan-out), repartition topics do not, so a stage headed by
//! a node with forward inputs only (never keyed) runs in the chain of
//! every entry it is reached from: a source's, or a keyed stage's. A node
//! reached from two entries (a union of two sources) runs in both; it is
//! stateless, so that is the same as one copy that sees both.

use std::collections::{BTreeMap, BTreeSet};

use crate::dataflow::graph::{Exchange, Graph, NodeBody, NodeId};

/// Where records enter a chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub head: NodeId,
    /// The head and every node run in its chain, in node order.
    pub nodes: Vec<NodeId>,
}

/// One keyed stage: its entry, its topic and the writers it waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StagePlan {
    pub entry: Entry,
    pub topic: String,
    /// The head's input edges: a repartition row names one of them.
    pub inputs: usize,
    pub writers: Vec<Writers>,
}

/// A set of writers a stage expects watermarks from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Writers {
    /// Every partition of this source's topics.
    Source(usize),
    /// Every task of this stage.
    Stage(usize),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupPlan {
    pub sources: Vec<Entry>,
    pub stages: Vec<StagePlan>,
}

/// The writer id of a source partition.
pub fn partition_writer(topic: &str, partition: i32) -> String {
    format!("{topic}/{partition}")
}

/// The writer id of a stage's task.
pub fn task_writer(head_uid: &str, task: u32) -> String {
    format!("{head_uid}#{task}")
}

impl GroupPlan {
    /// The plan, or each reason the graph cannot run in group mode.
    pub fn new(graph: &Graph, job: &str) -> Result<Self, Vec<String>> {
        let mut problems = Vec::new();
        let hash_in = |n: NodeId| {
            graph
                .inputs(n)
                .any(|e| matches!(e.exchange, Exchange::Hash(_)))
        };
        for (n, node) in graph.nodes.iter().enumerate() {
            let forward_in = graph.inputs(n).any(|e| e.exchange == Exchange::Forward);
            if hash_in(n) && forward_in {
                problems.push(format!(
                    "node {:?} has both keyed (hash) and forward inputs; in group mode a node \
                     with a keyed input reads every input from its repartition topic, so key \
                     every input (key_by)",
                    node.uid
                ));
            }
        }
        if !problems.is_empty() {
            return Err(problems);
        }
        // The graph's stages, and the one each node runs in.
        let graph_stages = graph.stages();
        let mut stage_of = vec![0; graph.nodes.len()];
        for (i, st) in graph_stages.iter().enumerate() {
            for n in &st.nodes {
                stage_of[*n] = i;
            }
        }
        // An entry: the stage `head` heads, and every stage without a
        // keyed input that a forward edge reaches from what it holds.
        let closure = |head: NodeId| {
            let mut nodes: BTreeSet<NodeId> =
                graph_stages[stage_of[head]].nodes.iter().copied().collect();
            let mut grown = true;
            while grown {
                grown = false;
                for e in &graph.edges {
                    let joins = e.exchange == Exchange::Forward
                        && nodes.contains(&e.from)
                        && !nodes.contains(&e.to)
                        && !hash_in(e.to);
                    if joins {
                        nodes.extend(graph_stages[stage_of[e.to]].nodes.iter().copied());
                        grown = true;
                    }
                }
            }
            Entry {
                head,
                nodes: nodes.into_iter().collect(),
            }
        };
        let sources: Vec<Entry> = graph
            .nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| matches!(n.body, NodeBody::Source(_)))
            .map(|(i, _)| closure(i))
            .collect();
        let heads: Vec<NodeId> = (0..graph.nodes.len()).filter(|n| hash_in(*n)).collect();
        let stage_entries: Vec<Entry> = heads.iter().map(|h| closure(*h)).collect();
        let mut stages = Vec::new();
        for entry in &stage_entries {
            let mut writers = BTreeSet::new();
            for e in graph.inputs(entry.head) {
                for (s, src) in sources.iter().enumerate() {
                    if src.nodes.contains(&e.from) {
                        writers.insert(Writers::Source(s));
                    }
                }
                for (g, st) in stage_entries.iter().enumerate() {
                    if st.nodes.contains(&e.from) {
                        writers.insert(Writers::Stage(g));
                    }
                }
            }
            stages.push(StagePlan {
                topic: crate::engine::group::repartition::topic_of(
                    job,
                    &graph.nodes[entry.head].uid,
                ),
                inputs: graph.inputs(entry.head).count(),
                entry: entry.clone(),
                writers: writers.into_iter().collect(),
            });
        }
        Ok(Self { sources, stages })
    }

    /// The stage whose head is `node`.
    pub fn stage_of_head(&self, node: NodeId) -> Option<usize> {
        self.stages.iter().position(|s| s.entry.head == node)
    }

    /// Every stage's topic by stage.
    pub fn topics(&self) -> BTreeMap<String, usize> {
        self.stages
            .iter()
            .enumerate()
            .map(|(i, s)| (s.topic.clone(), i))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataflow::prelude::*;

    /// Two sources, a union, a keyed count, a second keyed stage over the
    /// counts, sinks after both stages.
    fn graph() -> Graph {
        let job = JobBuilder::new("g");
        let schema = Schema::new(vec![Field::new("w", DataType::String)]);
        let a = job.source("a", KafkaSource::json(&["ta"], schema.clone()));
        let b = job.source("b", KafkaSource::json(&["tb"], schema));
        let counts = a
            .union("u", &[b])
            .key_by(&["w"])
            .aggregate("counts", vec![Agg::count("n")]);
        counts.sink("out1", KafkaSink::upsert("o1", &["w"]));
        counts
            .key_by(&["n"])
            .aggregate("per-n", vec![Agg::count("keys")])
            .sink("out2", KafkaSink::upsert("o2", &["n"]));
        job.build().expect("valid graph")
    }

    #[test]
    fn stages_follow_hash_edges_and_writers_follow_the_entries() {
        let g = graph();
        let plan = GroupPlan::new(&g, "job").unwrap();
        let uid = |n: NodeId| g.nodes[n].uid.as_str();
        let names = |e: &Entry| e.nodes.iter().map(|n| uid(*n)).collect::<Vec<_>>();
        assert_eq!(plan.sources.len(), 2);
        assert_eq!(names(&plan.sources[0]), vec!["a", "u"]);
        assert_eq!(names(&plan.sources[1]), vec!["b", "u"]);
        assert_eq!(plan.stages.len(), 2);
        assert_eq!(names(&plan.stages[0].entry), vec!["counts", "out1"]);
        assert_eq!(plan.stages[0].topic, "job.counts.repartition");
        assert_eq!(
            plan.stages[0].writers,
            vec![Writers::Source(0), Writers::Source(1)]
        );
        assert_eq!(plan.stages[1].writers, vec![Writers::Stage(0)]);
        assert_eq!(names(&plan.stages[1].entry), vec!["per-n", "out2"]);
    }

    #[test]
    fn a_node_with_keyed_and_forward_inputs_is_refused_by_name() {
        let mut g = graph();
        let counts = g.nodes.iter().position(|n| n.uid == "counts").unwrap();
        let a = g.nodes.iter().position(|n| n.uid == "a").unwrap();
        g.edges.push(crate::dataflow::graph::Edge {
            from: a,
            to: counts,
            port: 0,
            exchange: Exchange::Forward,
        });
        let problems = GroupPlan::new(&g, "job").unwrap_err();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0].contains("\"counts\"") && problems[0].contains("key every input"),
            "{problems:?}"
        );
    }
}
