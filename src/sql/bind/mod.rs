//! The binder: parsed SQL statements into a [`LogicalPlan`], one clause
//! at a time, with names resolved, expressions compiled and typed, and
//! each relation's changelog mode derived (docs/architecture.md).
//!
//! Each `INSERT INTO sink SELECT ...` becomes a chain of plan nodes from
//! its sources to its sink; `CREATE VIEW` names a relation that later
//! statements read (a view read twice is computed once and its rows go
//! to both). A `SELECT` binds, in order:
//!
//! ```text
//! FROM source | view | TABLE(TUMBLE|HOP|SESSION(...)) | (subquery) [CROSS JOIN UNNEST(...)]   from.rs, source.rs, join.rs, unnest.rs, top_n.rs
//!   → WHERE          Filter                                                               select.rs
//!   → GROUP BY       Project (keys, arguments), Aggregate | WindowAggregate | Deduplicate aggregate.rs
//!   → HAVING         Filter (windowed results)
//!   → SELECT list    Project, named as the SELECT says                                    select.rs
//! ```
//!
//! What each relation is, append-only or updating (with its unique key),
//! is tracked from source to sink, so that a sink gets the mode its rows
//! need (sink.rs) and a construct that cannot take updates is refused by
//! name. [`LogicalPlan::lower`] then builds the job graph.

mod aggregate;
mod from;
mod join;
mod lateral;
mod over;
mod scalar;
mod select;
mod sink;
mod source;
mod subquery;
mod top_n;
mod unnest;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use sqlparser::ast::{
    self, Expr as E, GroupByExpr, JoinOperator, SelectItem, SetExpr, Spanned, Statement,
    TableFactor,
};

use super::expr::{
    boolean, call_args, compile, err, function_name, interval, is_aggregate, walk, Compiled,
    EvalFn, Scope, ScopeColumn, Ty,
};
use super::joins;
use super::schema::parse_schema;
use super::{note_eval_error, SqlError};
use crate::config::{BadRecordPolicy, Config, FormatName, LatePolicy, SqlJob};
use crate::dataflow::ops::aggregate::{Agg, AggFunction, AggregateEmit, UserAggregate};
use crate::dataflow::ops::join::{JoinCondition, JoinKind, JoinSpec};
use crate::dataflow::ops::temporal_join::TemporalJoinSpec;
use crate::dataflow::ops::top_n::{SortKey, TopNSpec};
use crate::dataflow::prelude::*;

use super::plan::{self as lp, schema_of, LogicalPlan, Op, Rel};
use aggregate::contains_aggregate;
use select::{column_index, output_name};

/// A planned job: its graph, and what each sink receives.
pub struct Plan {
    /// The statements' logical plan, as bound.
    pub logical: LogicalPlan,
    pub graph: Graph,
    /// Per sink: its name, topic, and changelog mode as `weir explain` says it.
    pub sinks: Vec<(String, String, String)>,
}

impl Plan {
    /// The graph, each operator's state tables and changelog, and the
    /// sinks' modes, for `weir explain`.
    pub fn describe(&self) -> String {
        use crate::dataflow::graph::NodeBody;
        let g = &self.graph;
        let mut out = self.logical.describe();
        out.push_str(&g.describe());
        out.push_str("operators\n");
        // Each operator's changelog is its logical node's; an operator
        // the lowering added (none has a logical node of its uid) carries
        // its input's. Nodes come in order: every edge goes forward.
        let rels: BTreeMap<&str, &Rel> = self
            .logical
            .nodes
            .iter()
            .map(|n| (n.uid.as_str(), &n.rel))
            .collect();
        let mut updating: Vec<Option<String>> = vec![None; g.nodes.len()];
        for (i, n) in g.nodes.iter().enumerate() {
            updating[i] = match rels.get(n.uid.as_str()) {
                Some(rel) => rel
                    .updating
                    .as_ref()
                    .map(|key| changelog_mode(key, &rel.columns)),
                None => g.inputs(i).find_map(|e| updating[e.from].clone()),
            };
            let changelog = match &updating[i] {
                Some(mode) => format!("updating, {mode}"),
                None => "append-only".into(),
            };
            let state = match &n.body {
                NodeBody::Operator(op) if !op.tables.is_empty() => op
                    .tables
                    .iter()
                    .map(|t| format!("{} ({:?}, {})", t.name, t.kind, t.codec).to_lowercase())
                    .collect::<Vec<_>>()
                    .join(", "),
                _ => "none".into(),
            };
            out.push_str(&format!("  {}: {changelog}; state: {state}\n", n.uid));
        }
        out.push_str("sinks\n");
        for (name, topic, mode) in &self.sinks {
            out.push_str(&format!("  {name} -> topic {topic:?}: {mode}\n"));
        }
        out
    }
}

/// What a caller gives the planner besides a configuration's
/// `[sources.*]` and `[sinks.*]`: how a TOML pipeline
/// ([`crate::pipelines`]) is compiled from its SQL. Its tables keep their
/// own decoders (JSON pointers, a text or JSON-string line), its sink the
/// output its users know (the word as the Kafka key, a row per update),
/// and its aggregate the uid, kind and emission its checkpoints and
/// output have always had; the computation between them is the SQL's.
#[derive(Default)]
pub struct Catalog {
    pub sources: BTreeMap<String, CatalogSource>,
    pub sinks: BTreeMap<String, CatalogSink>,
    pub aggregate: AggregateSettings,
    /// Uids the caller gives nodes, by the uid the planner would give
    /// them (`output.aggregate`): what a checkpoint written before the
    /// job was SQL names them.
    pub uids: BTreeMap<String, String>,
}

/// A table read by a source the caller built.
pub struct CatalogSource {
    pub uid: String,
    pub source: KafkaSource,
    /// The column with each row's event time (the decoder fills it with
    /// the time it gives the row), for window functions' DESCRIPTOR.
    pub time: Option<String>,
    /// Where a window over this table sends late records.
    pub dead_letter_topic: Option<String>,
}

/// A sink the caller built: `INSERT INTO` its name writes the rows to it
/// as they are.
pub struct CatalogSink {
    pub uid: String,
    pub topic: String,
    pub sink: KafkaSink,
    /// What `weir explain` says of it.
    pub mode: String,
}

/// How the aggregates of a job run, where not as Flink SQL's do.
#[derive(Default)]
pub struct AggregateSettings {
    /// The checkpoint kind of the job's first aggregate.
    pub kind: Option<String>,
    /// When a running aggregate emits (default: on every change).
    pub emit: AggregateEmit,
    /// A window emits its result so far on every row, not once at its end.
    pub window_every_update: bool,
    /// A late record's dead letter is the bytes of the first column, with
    /// the Kafka key and origin of the second (a source's origin column),
    /// not the row as JSON.
    pub late_record: Option<(String, String)>,
}

/// A window table function in FROM.
struct WindowTvf {
    spec: WindowSpec,
    /// SESSION's PARTITION BY columns, and where they were written.
    partition: Option<(Vec<String>, sqlparser::tokenizer::Span)>,
}

/// Compiles the SQL job of `config` (which must have one).
pub fn plan(config: &Config) -> Result<Plan, Vec<SqlError>> {
    let job = config
        .sql()
        .ok_or_else(|| vec![SqlError::general("the configuration has no [pipeline] sql")])?;
    plan_with(config, job, Catalog::default())
}

/// Compiles `job`'s statements over its own tables and sinks and those of
/// `catalog`.
pub fn plan_with(config: &Config, job: &SqlJob, catalog: Catalog) -> Result<Plan, Vec<SqlError>> {
    let statements = super::dialect::parse_statements(&job.text).map_err(|e| vec![e])?;
    if statements.is_empty() {
        return Err(vec![SqlError::general("the SQL has no statements")]);
    }
    let registries = crate::format::registry::Registries::new(&job.registries)
        .map_err(|e| vec![SqlError::general(e)])?;
    let session = super::session::Session::of(job)?;
    let mut binder = Binder {
        session,
        plan: LogicalPlan::default(),
        sql: job,
        registries,
        sources: BTreeMap::new(),
        views: BTreeMap::new(),
        uids: BTreeMap::new(),
        errors: Vec::new(),
        sinks: Vec::new(),
        catalog,
    };
    for s in &statements {
        if let Err(e) = binder.statement(s) {
            binder.errors.push(e);
        }
    }
    // Only when every statement planned: a failed INSERT would be named twice.
    let planned = binder.errors.is_empty();
    for name in job.sinks.keys().filter(|_| planned) {
        if !binder.sinks.iter().any(|(n, _, _)| n == name) {
            binder.errors.push(SqlError::general(format!(
                "[sinks.{name}] is not written by any INSERT INTO"
            )));
        }
    }
    if !binder.errors.is_empty() {
        return Err(binder.errors);
    }
    let Binder {
        plan: logical,
        sinks,
        ..
    } = binder;
    let logical = lp::rules::rewrite(logical);
    let builder = JobBuilder::new(&config.job.name);
    logical.lower(&builder);
    let graph = builder.build().map_err(|e| match e {
        crate::error::WeirError::Graph { problems, .. } => {
            problems.into_iter().map(SqlError::general).collect()
        }
        other => vec![SqlError::general(other.to_string())],
    })?;
    Ok(Plan {
        logical,
        graph,
        sinks,
    })
}

struct Binder<'a> {
    /// The user-defined functions the statements may call.
    session: super::session::Session,
    /// The nodes bound so far.
    plan: LogicalPlan,
    sql: &'a SqlJob,
    /// `[registries.*]`, shared by the job's sources and sinks.
    registries: crate::format::registry::Registries,
    sources: BTreeMap<String, Rel>,
    views: BTreeMap<String, Rel>,
    uids: BTreeMap<String, usize>,
    errors: Vec<SqlError>,
    sinks: Vec<(String, String, String)>,
    catalog: Catalog,
}

fn name_of(name: &ast::ObjectName) -> String {
    name.0
        .iter()
        .map(|p| p.as_ident().map_or(p.to_string(), |i| i.value.clone()))
        .collect::<Vec<_>>()
        .join(".")
}

impl Binder<'_> {
    /// `[pipeline] state_ttl` for a node that keeps per-key state over
    /// `input` (`what` names it): counted from each row's event time, as
    /// the join's is, so an input without one is refused at `span`.
    fn state_ttl(
        &self,
        input: &Rel,
        what: &str,
        span: sqlparser::tokenizer::Span,
    ) -> Result<Option<crate::dataflow::ops::state_ttl::StateTtl>, SqlError> {
        let Some(ttl) = self.sql.pipeline.state_ttl else {
            return Ok(None);
        };
        if !input.timed {
            return Err(SqlError::at(
                span,
                format!(
                    "[pipeline] state_ttl counts from each row's event time, and the input of {what} has none: declare a WATERMARK on its source"
                ),
            ));
        }
        Ok(Some(crate::dataflow::ops::state_ttl::StateTtl::new(
            ttl.as_millis() as i64,
        )))
    }

    /// A uid for a new node: `base`, then `base-2`, ... if taken.
    fn uid(&mut self, base: &str) -> String {
        let given = self.catalog.uids.remove(base);
        let base = given.as_deref().unwrap_or(base);
        let base: String = base
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let n = self.uids.entry(base.clone()).or_insert(0);
        *n += 1;
        if *n == 1 {
            base
        } else {
            format!("{base}-{n}")
        }
    }

    fn statement(&mut self, s: &Statement) -> Result<(), SqlError> {
        match s {
            Statement::CreateView(v) => {
                let name = name_of(&v.name);
                if self.views.contains_key(&name.to_ascii_lowercase()) {
                    return Err(SqlError::at(
                        v.name.span(),
                        format!("view {name:?} is defined twice"),
                    ));
                }
                let rel = self.query(&v.query, &name)?;
                self.views.insert(name.to_ascii_lowercase(), rel);
                Ok(())
            }
            Statement::Insert(insert) => {
                let ast::TableObject::TableName(table) = &insert.table else {
                    return Err(SqlError::at(s.span(), "INSERT INTO names a [sinks.NAME]"));
                };
                let name = name_of(table);
                let sql = self.sql;
                let catalog_sink = self
                    .catalog
                    .sinks
                    .keys()
                    .find(|n| n.eq_ignore_ascii_case(&name))
                    .cloned();
                let config_sink = sql
                    .sinks
                    .iter()
                    .find(|(n, _)| n.eq_ignore_ascii_case(&name))
                    .map(|(n, c)| (n.clone(), Some(c)));
                let Some((sink_name, sink)) = config_sink.or(catalog_sink.map(|n| (n, None)))
                else {
                    let known: Vec<&str> = sql
                        .sinks
                        .keys()
                        .chain(self.catalog.sinks.keys())
                        .map(String::as_str)
                        .collect();
                    let hint = super::names::nearest(&name, known.iter().copied())
                        .map_or(String::new(), |n| format!("; did you mean {n:?}?"));
                    return Err(SqlError::at(
                        table.span(),
                        format!("no sink {name:?}: INSERT INTO names a [sinks.NAME] of the configuration ({}){hint}", known.join(", ")),
                    ));
                };
                if self.sinks.iter().any(|(n, _, _)| *n == sink_name) {
                    return Err(SqlError::at(
                        table.span(),
                        format!("sink {sink_name:?} is written by two INSERT statements; write one (a UNION ALL of both)"),
                    ));
                }
                if !insert.columns.is_empty() {
                    return Err(SqlError::at(
                        table.span(),
                        "INSERT with a column list is not supported: name the columns in the SELECT",
                    ));
                }
                let Some(query) = &insert.source else {
                    return Err(SqlError::at(s.span(), "INSERT INTO needs a SELECT"));
                };
                let rel = self.query(query, &sink_name)?;
                match sink {
                    Some(sink) => self.sink(&sink_name, sink, rel, query),
                    None => {
                        let c = &self.catalog.sinks[&sink_name];
                        let (uid, topic, mode, kafka_sink) = (
                            c.uid.clone(),
                            c.topic.clone(),
                            c.mode.clone(),
                            c.sink.clone(),
                        );
                        let uid = self.uid(&uid);
                        let sink = lp::sink::Sink {
                            name: sink_name.clone(),
                            topic: topic.clone(),
                            mode: mode.clone(),
                            sink: kafka_sink,
                        };
                        self.plan.add(&uid, Op::Sink(sink), &[&rel], rel.clone());
                        self.sinks.push((sink_name, topic, mode));
                        Ok(())
                    }
                }
            }
            _ => Err(SqlError::at(
                s.span(),
                format!(
                    "only CREATE VIEW and INSERT INTO statements make a job, not `{}`",
                    s.to_string()
                        .split_whitespace()
                        .take(3)
                        .collect::<Vec<_>>()
                        .join(" ")
                ),
            )),
        }
    }

    fn query(&mut self, q: &ast::Query, name: &str) -> Result<Rel, SqlError> {
        // WITH names hold inside this query only.
        let outer = self.views.clone();
        let rel = self.query_body(q, name);
        self.views = outer;
        rel
    }

    fn query_body(&mut self, q: &ast::Query, name: &str) -> Result<Rel, SqlError> {
        if let Some(with) = &q.with {
            for cte in &with.cte_tables {
                let n = cte.alias.name.value.clone();
                let rel = self.query(&cte.query, &n)?;
                self.views.insert(n.to_ascii_lowercase(), rel);
            }
        }
        if let Some(o) = &q.order_by {
            return Err(SqlError::at(
                o.span(),
                "ORDER BY on a stream is not supported (a stream has no end to sort to; top-N is ROW_NUMBER() OVER (... ORDER BY ...) filtered by its rank in an outer query)",
            ));
        }
        if let Some(l) = &q.limit_clause {
            return Err(SqlError::at(l.span(), "LIMIT on a stream is not supported"));
        }
        self.set_expr(&q.body, name)
    }

    fn set_expr(&mut self, body: &SetExpr, name: &str) -> Result<Rel, SqlError> {
        match body {
            SetExpr::Select(s) => self.select(s, name),
            SetExpr::Query(q) => self.query(q, name),
            SetExpr::SetOperation {
                op: ast::SetOperator::Union,
                set_quantifier: ast::SetQuantifier::All,
                left,
                right,
            } => {
                let a = self.set_expr(left, name)?;
                let b = self.set_expr(right, name)?;
                let types = |r: &Rel| r.columns.iter().map(|c| c.ty.clone()).collect::<Vec<_>>();
                if types(&a) != types(&b) {
                    return Err(SqlError::at(
                        body.span(),
                        "the two sides of UNION ALL have different column types",
                    ));
                }
                self.union_all(a, b, name)
            }
            SetExpr::SetOperation {
                op:
                    op @ (ast::SetOperator::Union
                    | ast::SetOperator::Except
                    | ast::SetOperator::Intersect),
                set_quantifier,
                left,
                right,
            } => {
                let a = self.set_expr(left, name)?;
                let b = self.set_expr(right, name)?;
                self.set_operation(op, set_quantifier, (a, b), body.span(), name)
            }
            other => Err(SqlError::at(
                other.span(),
                "only SELECT, UNION [ALL], EXCEPT and INTERSECT are supported here",
            )),
        }
    }

    /// `a UNION ALL b`: each side's rows as they come. Of updating
    /// inputs the union's changes are each input's: retracting, unique by
    /// no key (both inputs can hold a row of one key).
    fn union_all(&mut self, a: Rel, b: Rel, name: &str) -> Result<Rel, SqlError> {
        // Of updating inputs, the union's changes are each
        // input's: retracting, unique by no key (both inputs can
        // hold a row of one key).
        // Union needs one schema: the right side takes the left's names.
        let left_schema = a.schema();
        let right = if b.schema() == left_schema {
            b
        } else {
            let uid = self.uid(&format!("{name}.rename"));
            let outputs = b
                .columns
                .iter()
                .enumerate()
                .map(|(i, c)| (Some(i), Compiled::column(i, c.ty.clone()).eval))
                .collect();
            let rename = lp::project::Project {
                inner: None,
                schema: left_schema,
                outputs,
                over_updating: false,
                on_failure: Default::default(),
            };
            let renamed = Rel {
                columns: a.columns.clone(),
                ..b.clone()
            };
            self.plan.add(&uid, Op::Project(rename), &[&b], renamed)
        };
        let uid = self.uid(&format!("{name}.union"));
        let updating = (a.updating.is_some() || right.updating.is_some()).then(Vec::new);
        let union = Rel {
            updated_by: updating.as_ref().map(|_| uid.clone()),
            updating,
            time: if a.time == right.time { a.time } else { None },
            window: if a.window == right.window {
                a.window
            } else {
                None
            },
            timed: a.timed && right.timed,
            window_end: if a.window_end == right.window_end {
                a.window_end
            } else {
                None
            },
            source: if a.source == right.source {
                a.source.clone()
            } else {
                None
            },
            ..a.clone()
        };
        Ok(self
            .plan
            .add(&uid, Op::Union(lp::union::Union), &[&a, &right], union))
    }
}

/// An updating result's changelog as `weir explain` says it: upserts by
/// the columns that name its rows, or, with none, inserts and deletes of
/// whole rows.
fn changelog_mode(key: &[usize], columns: &[ScopeColumn]) -> String {
    if key.is_empty() {
        return "retracting (insert, delete): no key names its rows".into();
    }
    let names: Vec<&str> = key
        .iter()
        .filter_map(|k| columns.get(*k).map(|c| c.name.as_str()))
        .collect();
    format!(
        "upsert by ({}) (insert, update-before, update-after, delete)",
        names.join(", ")
    )
}

/// A table's columns in scope, qualified by its name.
fn scope_columns(schema: &Schema, table: &str) -> Vec<ScopeColumn> {
    schema
        .fields
        .iter()
        .map(|f| ScopeColumn {
            name: f.name.clone(),
            qualifier: Some(table.to_string()),
            ty: f.data_type.clone(),
        })
        .collect()
}

/// What a step that makes rows from each row (UNNEST, LATERAL TABLE)
/// keeps of its input: the columns a later clause reads (`mentioned`; all
/// of them when None). A column nothing reads is not copied into every
/// new row: word count's line is not.
struct Kept {
    keep: Vec<usize>,
    columns: Vec<ScopeColumn>,
}

impl Kept {
    fn of(rel: &Rel, mentioned: Option<&std::collections::BTreeSet<String>>) -> Self {
        let keep: Vec<usize> = (0..rel.columns.len())
            .filter(|i| {
                mentioned.is_none_or(|m| m.contains(&rel.columns[*i].name.to_ascii_lowercase()))
            })
            .collect();
        let columns = keep.iter().map(|k| rel.columns[*k].clone()).collect();
        Self { keep, columns }
    }

    /// Where input column `c` is among the kept ones.
    fn moved(&self, c: usize) -> Option<usize> {
        self.keep.iter().position(|k| *k == c)
    }

    /// The new rows' relation: the kept columns, then `added`, with the
    /// time and window columns of `rel` where they moved.
    fn rel(&self, rel: &Rel, added: Vec<ScopeColumn>) -> Rel {
        let mut columns = self.columns.clone();
        columns.extend(added);
        Rel {
            columns,
            time: rel.time.and_then(|c| self.moved(c)),
            window: rel
                .window
                .and_then(|(s, e)| Some((self.moved(s)?, self.moved(e)?))),
            window_end: rel.window_end.and_then(|c| self.moved(c)),
            ..rel.clone()
        }
    }
}

/// Whether `e` calls an aggregate function anywhere.
/// Every name the SELECT mentions after a join of its FROM (the words of
/// its list, WHERE, GROUP BY, HAVING and the `later` joins), or None when
/// it selects `*` (then it reads every column).
fn mentioned(
    select: &ast::Select,
    later: &[ast::Join],
) -> Option<std::collections::BTreeSet<String>> {
    use sqlparser::tokenizer::{Token, Tokenizer};
    let mut texts: Vec<String> = Vec::new();
    for item in &select.projection {
        match item {
            SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => {
                texts.push(e.to_string())
            }
            _ => return None,
        }
    }
    texts.extend(select.selection.iter().map(|e| e.to_string()));
    texts.extend(select.having.iter().map(|e| e.to_string()));
    match &select.group_by {
        GroupByExpr::Expressions(exprs, _) => texts.extend(exprs.iter().map(|e| e.to_string())),
        GroupByExpr::All(_) => return None,
    }
    texts.extend(later.iter().map(|j| j.relation.to_string()));
    let mut words = std::collections::BTreeSet::new();
    for t in &texts {
        for token in Tokenizer::new(&super::dialect::FlinkDialect, t)
            .tokenize()
            .ok()?
        {
            if let Token::Word(w) = token {
                words.insert(w.value.to_ascii_lowercase());
            }
        }
    }
    Some(words)
}

/// Whether `e` calls `CURRENT_WATERMARK`.
fn reads_watermark(e: &E) -> bool {
    walk(
        e,
        &mut |x| matches!(x, E::Function(f) if function_name(f).eq_ignore_ascii_case("CURRENT_WATERMARK")),
    )
}

/// `CURRENT_WATERMARK` is evaluated again for every row, a retraction
/// included: over an updating result the update-before would carry
/// another value than the row it takes back, so a join downstream keeps
/// the old row forever and a Debezium `before` differs from the previous
/// `after`. Refused where rows are taken back, as NOW and RAND are
/// refused everywhere, naming the column (`what`) that computes it.
fn refuse_watermark_over_updating(
    e: &E,
    updated_by: Option<&str>,
    what: &str,
) -> Result<(), SqlError> {
    if !reads_watermark(e) {
        return Ok(());
    }
    Err(err(
        e,
        format!(
            "{what} reads CURRENT_WATERMARK over an updating result (operator {:?} takes back rows it \
             emitted): a retraction would be computed again with a later watermark and no longer \
             equal the row it takes back. Compute it over the append-only input, before the \
             aggregate, join or table that makes the result updating",
            updated_by.unwrap_or("?")
        ),
    ))
}
