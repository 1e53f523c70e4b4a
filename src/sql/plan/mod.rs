//! The logical plan of a SQL job: what the binder ([`crate::sql::bind`])
//! makes of the parsed statements, before any operator exists.
//!
//! Each node says what it computes ([`Op`], one module per kind) and what
//! its rows are ([`Rel`]): their columns, unique key, event-time column
//! and **changelog mode** ([`Changelog`]: append-only, upsert by key, or
//! retracting), as Flink's changelog-mode inference and RisingWave's
//! stream plan carry them. `weir explain` prints the plan
//! ([`LogicalPlan::describe`]); [`LogicalPlan::lower`] then builds the job
//! graph, one function per node kind, in the order the nodes were bound
//! (every input is bound before the node that reads it).
//!
//! Adding a node kind: a module here with its struct, its `lower` and its
//! `describe`, a variant of [`Op`], and the binder clause that makes it.

pub mod aggregate;
pub mod filter;
pub mod join;
pub mod lateral;
pub mod on_failure;
pub mod over;
pub mod project;
pub mod rules;
pub mod scan;
pub mod sink;
pub mod top_n;
pub mod union;
pub mod unnest;
pub mod window_tvf;

use crate::dataflow::prelude::*;
use crate::sql::expr::ScopeColumn;

/// A node's index in [`LogicalPlan::nodes`].
pub type NodeId = usize;

/// How a relation's rows change, as a sink or a downstream operator must
/// take them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Changelog {
    /// Inserts only.
    AppendOnly,
    /// Inserts, update-before/update-after and deletes of rows unique by
    /// these columns: a row replaces its key's row.
    Upsert(Vec<usize>),
    /// Inserts and deletes of whole rows: no key names them.
    Retracting,
}

/// A relation: the node that yields it and what its rows are.
#[derive(Clone)]
pub struct Rel {
    pub node: NodeId,
    pub columns: Vec<ScopeColumn>,
    /// None: append-only. Some(key): an updating result whose rows are
    /// unique by these columns (empty: by none the planner can name).
    pub updating: Option<Vec<usize>>,
    /// The operator whose results make this relation updating (its uid).
    pub updated_by: Option<String>,
    /// The event-time column (rows carry its value as their time).
    pub time: Option<usize>,
    /// The source the rows come from, for its dead-letter topic.
    pub source: Option<String>,
    /// A window aggregate's result: its window_start and window_end
    /// columns (a later GROUP BY of both keeps the windows).
    pub window: Option<(usize, usize)>,
    /// A window's `window_end` column, kept when its start is not: never
    /// earlier than its row's event time, so it can bound a join's state.
    pub window_end: Option<usize>,
    /// Whether rows carry an event time (from a source with a WATERMARK;
    /// a join's row has the later of its two rows'): what `state_ttl`
    /// counts from.
    pub timed: bool,
}

impl Rel {
    pub fn changelog(&self) -> Changelog {
        match &self.updating {
            None => Changelog::AppendOnly,
            Some(k) if k.is_empty() => Changelog::Retracting,
            Some(k) => Changelog::Upsert(k.clone()),
        }
    }

    pub fn with_qualifier(mut self, q: &str) -> Self {
        for c in &mut self.columns {
            c.qualifier = Some(q.to_string());
        }
        self
    }

    pub fn schema(&self) -> Schema {
        schema_of(&self.columns)
    }
}

/// The rows' schema, from the columns in scope.
pub fn schema_of(columns: &[ScopeColumn]) -> Schema {
    Schema::new(
        columns
            .iter()
            .map(|c| crate::dataflow::row::Field::new(c.name.clone(), c.ty.clone()))
            .collect(),
    )
}

/// What a node computes.
pub enum Op {
    Scan(scan::Scan),
    Normalize(scan::Normalize),
    Filter(filter::Filter),
    Project(project::Project),
    Aggregate(aggregate::Aggregate),
    WindowAggregate(aggregate::WindowAggregate),
    Deduplicate(aggregate::Deduplicate),
    Join(join::Join),
    TemporalJoin(join::TemporalJoin),
    TopN(top_n::TopN),
    OverAggregate(over::OverAggregate),
    Union(union::Union),
    Unnest(unnest::Unnest),
    LateralTable(lateral::LateralTable),
    WindowTvf(window_tvf::WindowTvf),
    Sink(sink::Sink),
}

impl Op {
    /// The node kind and its arguments, for `weir explain`.
    fn describe(&self, inputs: &[&Rel]) -> String {
        match self {
            Op::Scan(s) => s.describe(),
            Op::Normalize(n) => n.describe(),
            Op::Filter(f) => f.describe(),
            Op::Project(p) => p.describe(),
            Op::Aggregate(a) => a.describe(inputs[0]),
            Op::WindowAggregate(a) => a.describe(inputs[0]),
            Op::Deduplicate(d) => d.describe(inputs[0]),
            Op::Join(j) => j.describe(inputs),
            Op::TemporalJoin(j) => j.describe(inputs),
            Op::TopN(t) => t.describe(inputs[0]),
            Op::OverAggregate(o) => o.describe(inputs[0]),
            Op::Union(u) => u.describe(),
            Op::Unnest(u) => u.describe(),
            Op::LateralTable(l) => l.describe(),
            Op::WindowTvf(w) => w.describe(),
            Op::Sink(s) => s.describe(),
        }
    }

    /// This node's operators on the job graph, reading `inputs`; None for
    /// a sink.
    fn lower(&self, uid: &str, inputs: &[Stream], job: &JobBuilder) -> Option<Stream> {
        let input = || inputs[0].clone();
        Some(match self {
            Op::Scan(s) => s.lower(uid, job),
            Op::Normalize(n) => n.lower(uid, input()),
            Op::Filter(f) => f.lower(uid, input()),
            Op::Project(p) => p.lower(uid, input()),
            Op::Aggregate(a) => a.lower(uid, input()),
            Op::WindowAggregate(a) => a.lower(uid, input()),
            Op::Deduplicate(d) => d.lower(uid, input()),
            Op::Join(j) => j.lower(uid, inputs),
            Op::TemporalJoin(j) => j.lower(uid, inputs),
            Op::TopN(t) => t.lower(uid, input()),
            Op::OverAggregate(o) => o.lower(uid, input()),
            Op::Union(u) => u.lower(uid, inputs),
            Op::Unnest(u) => u.lower(uid, input()),
            Op::LateralTable(l) => l.lower(uid, input()),
            Op::WindowTvf(w) => w.lower(uid, input()),
            Op::Sink(s) => {
                s.lower(uid, input());
                return None;
            }
        })
    }
}

/// One node: what it computes, from which nodes, and what its rows are.
pub struct Node {
    /// The uid its operator gets (checkpoints name state by it).
    pub uid: String,
    pub op: Op,
    pub inputs: Vec<NodeId>,
    pub rel: Rel,
}

/// A SQL job's nodes, each after its inputs.
#[derive(Default)]
pub struct LogicalPlan {
    pub nodes: Vec<Node>,
}

impl LogicalPlan {
    /// Adds a node reading `inputs`, whose rows are `rel` (its `node` is
    /// set here); returns the relation it yields.
    pub fn add(&mut self, uid: &str, op: Op, inputs: &[&Rel], mut rel: Rel) -> Rel {
        rel.node = self.nodes.len();
        self.nodes.push(Node {
            uid: uid.to_string(),
            op,
            inputs: inputs.iter().map(|r| r.node).collect(),
            rel: rel.clone(),
        });
        rel
    }

    /// Builds the job graph: each node's operators, in the order bound.
    pub fn lower(&self, job: &JobBuilder) {
        let mut streams: Vec<Option<Stream>> = Vec::with_capacity(self.nodes.len());
        for n in &self.nodes {
            let inputs: Vec<Stream> = n
                .inputs
                .iter()
                .map(|i| streams[*i].clone().expect("a sink is read by no node"))
                .collect();
            streams.push(n.op.lower(&n.uid, &inputs, job));
        }
    }

    /// The plan as `weir explain` prints it: from each sink down to its
    /// sources, each node with its changelog mode and unique key; a node
    /// read twice is printed once and then named.
    pub fn describe(&self) -> String {
        let mut out = String::from("logical plan\n");
        let mut shown = vec![false; self.nodes.len()];
        for (i, n) in self.nodes.iter().enumerate() {
            if matches!(n.op, Op::Sink(_)) {
                self.describe_node(i, 1, &mut shown, &mut out);
            }
        }
        out
    }

    fn describe_node(&self, i: NodeId, depth: usize, shown: &mut [bool], out: &mut String) {
        let n = &self.nodes[i];
        let pad = "  ".repeat(depth);
        if shown[i] {
            out.push_str(&format!("{pad}{} (above)\n", n.uid));
            return;
        }
        shown[i] = true;
        let inputs: Vec<&Rel> = n.inputs.iter().map(|j| &self.nodes[*j].rel).collect();
        let what = n.op.describe(&inputs);
        let mode = match &n.op {
            Op::Sink(_) => String::new(),
            _ => format!(" [{}]", describe_changelog(&n.rel)),
        };
        out.push_str(&format!("{pad}{what}{mode} ({})\n", n.uid));
        for j in &n.inputs {
            self.describe_node(*j, depth + 1, shown, out);
        }
    }
}

/// A relation's changelog mode with its columns' names.
pub fn describe_changelog(rel: &Rel) -> String {
    let mut s = match rel.changelog() {
        Changelog::AppendOnly => "append-only".to_string(),
        Changelog::Retracting => "retracting".to_string(),
        Changelog::Upsert(k) => format!("upsert by ({})", names(&rel.columns, &k)),
    };
    if let Some(t) = rel.time {
        s.push_str(&format!(", event time {}", rel.columns[t].name));
    }
    s
}

/// `, state TTL 3600000 ms` for a node that has one, for `weir explain`.
pub fn describe_ttl(ttl: &Option<crate::dataflow::ops::state_ttl::StateTtl>) -> String {
    ttl.map_or_else(String::new, |t| format!(", state TTL {} ms", t.ttl))
}

/// The names of `columns` at `at`, comma-separated.
pub fn names(columns: &[ScopeColumn], at: &[usize]) -> String {
    at.iter()
        .filter_map(|i| columns.get(*i).map(|c| c.name.as_str()))
        .collect::<Vec<_>>()
        .join(", ")
}
