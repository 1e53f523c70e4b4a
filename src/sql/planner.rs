//! SQL statements onto the job graph.
//!
//! Each `INSERT INTO sink SELECT ...` becomes a chain of operators from
//! its sources to its sink; `CREATE VIEW` names a chain that later
//! statements read (a view read twice is computed once and its rows go
//! to both). A `SELECT` plans, in order:
//!
//! ```text
//! FROM source | view | TABLE(TUMBLE|HOP|SESSION(...)) | (subquery) [CROSS JOIN UNNEST(...)]
//!   → WHERE          filter (a compiled predicate)
//!   → GROUP BY       map (group keys and aggregate arguments), hash(keys),
//!                    aggregate (running: an updating result) or window
//!                    aggregate (window TVF: one row per window on close)
//!   → HAVING         filter (windowed results)
//!   → SELECT list    map (compiled expressions), named as the SELECT says
//! ```
//!
//! What each relation is, append-only or updating (with its unique key),
//! is tracked from source to sink, so that a sink gets the mode its rows
//! need and a construct that cannot take updates is refused by name.

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
use crate::dataflow::ops::aggregate::{Agg, AggFunction, AggregateEmit};
use crate::dataflow::ops::join::{JoinCondition, JoinKind, JoinSpec};
use crate::dataflow::ops::temporal_join::TemporalJoinSpec;
use crate::dataflow::ops::top_n::{SortKey, TopNSpec};
use crate::dataflow::prelude::*;

/// A planned job: its graph, and what each sink receives.
pub struct Plan {
    pub graph: Graph,
    /// Per sink: its name, topic, and changelog mode as `weir explain` says it.
    pub sinks: Vec<(String, String, String)>,
    /// The operators whose results are updating (running aggregates,
    /// windows that update a fired result, tables, joins that retract,
    /// running top-N), with their changelog as `weir explain` says it:
    /// the nodes after them carry the same. None: append-only whatever
    /// its inputs are (a temporal join of a table).
    pub updating: BTreeMap<String, Option<String>>,
}

impl Plan {
    /// The graph, each operator's state tables and changelog, and the
    /// sinks' modes, for `weir explain`.
    pub fn describe(&self) -> String {
        use crate::dataflow::graph::NodeBody;
        let g = &self.graph;
        let mut out = g.describe();
        out.push_str("operators\n");
        // Nodes come in order (every edge goes forward): an updating
        // aggregate makes a stream updating, and what follows it stays so.
        let mut updating: Vec<Option<&str>> = vec![None; g.nodes.len()];
        for (i, n) in g.nodes.iter().enumerate() {
            let from_updating = g.inputs(i).find_map(|e| updating[e.from]);
            updating[i] = match self.updating.get(&n.uid) {
                Some(mode) => mode.as_deref(),
                None => from_updating,
            };
            let changelog = match updating[i] {
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

/// A relation as planned so far: the stream that carries it and what its
/// rows are.
#[derive(Clone)]
struct Rel {
    stream: Stream,
    columns: Vec<ScopeColumn>,
    /// None: append-only. Some(key): an updating result whose rows are
    /// unique by these columns (empty: by none the planner can name).
    updating: Option<Vec<usize>>,
    /// The operator whose results make this relation updating (its uid).
    updated_by: Option<String>,
    /// The event-time column (rows carry its value as their time).
    time: Option<usize>,
    /// The source the rows come from, for its dead-letter topic.
    source: Option<String>,
    /// A window aggregate's result: its window_start and window_end
    /// columns (a later GROUP BY of both keeps the windows).
    window: Option<(usize, usize)>,
    /// A window's `window_end` column, kept when its start is not: never
    /// earlier than its row's event time, so it can bound a join's state.
    window_end: Option<usize>,
    /// Whether rows carry an event time (from a source with a WATERMARK;
    /// a join's row has the later of its two rows'): what `state_ttl`
    /// counts from.
    timed: bool,
}

impl Rel {
    fn with_qualifier(mut self, q: &str) -> Self {
        for c in &mut self.columns {
            c.qualifier = Some(q.to_string());
        }
        self
    }
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
        .sql
        .as_ref()
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
    let mut planner = Planner {
        job: JobBuilder::new(&config.job.name),
        sql: job,
        registries,
        sources: BTreeMap::new(),
        views: BTreeMap::new(),
        uids: BTreeMap::new(),
        errors: Vec::new(),
        sinks: Vec::new(),
        catalog,
        updating: Default::default(),
    };
    for s in &statements {
        if let Err(e) = planner.statement(s) {
            planner.errors.push(e);
        }
    }
    // Only when every statement planned: a failed INSERT would be named twice.
    let planned = planner.errors.is_empty();
    for name in job.sinks.keys().filter(|_| planned) {
        if !planner.sinks.iter().any(|(n, _, _)| n == name) {
            planner.errors.push(SqlError::general(format!(
                "[sinks.{name}] is not written by any INSERT INTO"
            )));
        }
    }
    if !planner.errors.is_empty() {
        return Err(planner.errors);
    }
    let Planner {
        job: builder,
        sinks,
        updating,
        ..
    } = planner;
    let graph = builder.build().map_err(|e| match e {
        crate::error::WeirError::Graph { problems, .. } => {
            problems.into_iter().map(SqlError::general).collect()
        }
        other => vec![SqlError::general(other.to_string())],
    })?;
    Ok(Plan {
        graph,
        sinks,
        updating,
    })
}

struct Planner<'a> {
    job: JobBuilder,
    sql: &'a SqlJob,
    /// `[registries.*]`, shared by the job's sources and sinks.
    registries: crate::format::registry::Registries,
    sources: BTreeMap<String, Rel>,
    views: BTreeMap<String, Rel>,
    uids: BTreeMap<String, usize>,
    errors: Vec<SqlError>,
    sinks: Vec<(String, String, String)>,
    catalog: Catalog,
    /// Operators whose results are updating, with their changelog (None:
    /// append-only over an updating input).
    updating: BTreeMap<String, Option<String>>,
}

fn name_of(name: &ast::ObjectName) -> String {
    name.0
        .iter()
        .map(|p| p.as_ident().map_or(p.to_string(), |i| i.value.clone()))
        .collect::<Vec<_>>()
        .join(".")
}

impl Planner<'_> {
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
                    let hint = super::expr::nearest(&name, known.iter().copied())
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
                        rel.stream.sink(&uid, kafka_sink);
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

    fn sink(
        &mut self,
        name: &str,
        sink: &crate::config::SqlSinkConfig,
        rel: Rel,
        query: &ast::Query,
    ) -> Result<(), SqlError> {
        let names: Vec<&str> = rel.columns.iter().map(|c| c.name.as_str()).collect();
        let key: Vec<String> = match (&sink.key, &rel.updating) {
            (Some(k), _) => {
                // Names match as SQL's do, without regard to case; the key
                // takes the result's spelling.
                let mut resolved = Vec::new();
                for c in k {
                    match names.iter().find(|n| n.eq_ignore_ascii_case(c)) {
                        Some(n) => resolved.push(n.to_string()),
                        None => {
                            return Err(SqlError::at(
                                query.span(),
                                format!(
                                    "sinks.{name}.key: column {c:?} is not in the result ({})",
                                    names.join(", ")
                                ),
                            ))
                        }
                    }
                }
                resolved
            }
            (None, Some(unique)) => unique.iter().map(|i| names[*i].to_string()).collect(),
            (None, None) => Vec::new(),
        };
        let key_refs: Vec<&str> = key.iter().map(String::as_str).collect();
        let keyed = |what: &str| {
            if key.is_empty() {
                what.to_string()
            } else {
                format!("{what}, Kafka key ({})", key.join(", "))
            }
        };
        use crate::config::SinkChangelog;
        let changelog = sink.changelog.unwrap_or(match rel.updating {
            _ if sink.format == crate::config::FormatName::DebeziumJson => SinkChangelog::Debezium,
            Some(_) => SinkChangelog::Upsert,
            None => SinkChangelog::Append,
        });
        let (kafka_sink, mode) = match (changelog, &rel.updating) {
            (SinkChangelog::Append, None) => (
                KafkaSink::append(&sink.topic, &key_refs),
                keyed("append-only"),
            ),
            (SinkChangelog::Append, Some(_)) => {
                let by = rel.updated_by.as_deref().unwrap_or("an aggregate");
                return Err(SqlError::at(
                    query.span(),
                    format!(
                        "sink {name:?} is append-only (sinks.{name}.changelog = \"append\"), but \
                         operator {by:?} produces updates (it changes rows it wrote before: a \
                         GROUP BY without a window, an outer join, a join of a table, a top-N): \
                         set sinks.{name}.changelog = \"upsert\" or \"debezium\", or aggregate \
                         per window"
                    ),
                ));
            }
            (SinkChangelog::Debezium, _) => (
                KafkaSink::debezium(&sink.topic, &key_refs),
                keyed("debezium: every change as {\"before\", \"after\", \"op\"}"),
            ),
            (SinkChangelog::Upsert, None) => {
                if key.is_empty() {
                    return Err(SqlError::at(
                        query.span(),
                        format!(
                            "sink {name:?} upserts (sinks.{name}.changelog = \"upsert\") an \
                             append-only result with no key: set sinks.{name}.key to the columns \
                             whose latest row it keeps"
                        ),
                    ));
                }
                (
                    KafkaSink::upsert(&sink.topic, &key_refs),
                    format!(
                        "upsert by ({}): a row replaces its key's row",
                        key.join(", ")
                    ),
                )
            }
            (SinkChangelog::Upsert, Some(unique)) => {
                if unique.is_empty() {
                    return Err(SqlError::at(
                        query.span(),
                        format!(
                            "sink {name:?} receives an updating result (from operator {:?}) with \
                             no key that names its rows: a GROUP BY whose columns are not all \
                             selected (select them), or a join or top-N whose inputs' keys are not \
                             (a join of inputs without primary keys has none): each change must \
                             replace its key's row, or set sinks.{name}.changelog = \"debezium\" \
                             to write every change",
                            rel.updated_by.as_deref().unwrap_or("?")
                        ),
                    ));
                }
                let want: Vec<&str> = unique.iter().map(|i| names[*i]).collect();
                if sink.key.is_some() && key_refs != want {
                    return Err(SqlError::at(
                        query.span(),
                        format!(
                            "sinks.{name}.key: an updating result is keyed by its GROUP BY columns ({}), not ({})",
                            want.join(", "),
                            key.join(", ")
                        ),
                    ));
                }
                (
                    KafkaSink::upsert(&sink.topic, &key_refs),
                    format!("upsert by ({}): a change replaces its key's row; a deletion is a tombstone", key.join(", ")),
                )
            }
        };
        // Records are stamped by the producer, not with their event time:
        // a broker refuses a timestamp more than
        // `log.message.timestamp.after.max.ms` (an hour) ahead of its
        // clock, and one row with a future event time would fail every
        // retry of its epoch.
        let kafka_sink = kafka_sink.without_timestamps();
        let key_idx: Vec<usize> = key
            .iter()
            .filter_map(|k| names.iter().position(|n| n == k))
            .collect();
        let columns: Vec<crate::dataflow::row::Field> = rel
            .columns
            .iter()
            .map(|c| crate::dataflow::row::Field::new(c.name.clone(), c.ty.clone()))
            .collect();
        let encoding =
            super::formats::sink_encoding(name, sink, &columns, &key_idx, &self.registries)
                .map_err(|m| SqlError::at(query.span(), m))?;
        let kafka_sink = kafka_sink.encoded(encoding);
        let uid = self.uid(&format!("{name}.sink"));
        rel.stream.sink(&uid, kafka_sink);
        self.sinks
            .push((name.to_string(), sink.topic.clone(), mode));
        Ok(())
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
                if a.updating.is_some() || b.updating.is_some() {
                    return Err(SqlError::at(
                        body.span(),
                        "UNION ALL of updating results is not supported yet",
                    ));
                }
                // Union needs one schema: the right side takes the left's names.
                let left_schema = a.stream.schema();
                let right = if b.stream.schema() == left_schema {
                    b.stream.clone()
                } else {
                    let uid = self.uid(&format!("{name}.rename"));
                    b.stream.map(&uid, left_schema, |v| v.to_vec())
                };
                let uid = self.uid(&format!("{name}.union"));
                let stream = a.stream.union(&uid, &[right]);
                Ok(Rel {
                    stream,
                    time: if a.time == b.time { a.time } else { None },
                    window: if a.window == b.window { a.window } else { None },
                    timed: a.timed && b.timed,
                    window_end: if a.window_end == b.window_end {
                        a.window_end
                    } else {
                        None
                    },
                    source: if a.source == b.source {
                        a.source.clone()
                    } else {
                        None
                    },
                    ..a
                })
            }
            other => Err(SqlError::at(
                other.span(),
                "only SELECT and UNION ALL are supported here",
            )),
        }
    }

    /// A source's relation, planned on first use.
    fn source(&mut self, name: &str, at: &ast::ObjectName) -> Result<Option<Rel>, SqlError> {
        let key = name.to_ascii_lowercase();
        if let Some(r) = self.views.get(&key).or_else(|| self.sources.get(&key)) {
            return Ok(Some(r.clone()));
        }
        let Some((source_name, s)) = self
            .sql
            .sources
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
        else {
            return Ok(self.catalog_source(name));
        };
        let source_name = source_name.clone();
        let fail =
            |m: String| SqlError::at(at.span(), format!("sources.{source_name}.schema: {m}"));
        let (mut physical, computed, watermark) = match s.format {
            FormatName::Text => {
                if s.schema.is_some() {
                    return Err(fail(
                        "a text source has one column, `line`: remove schema".into(),
                    ));
                }
                (Schema::of(&[("line", DataType::String)]), Vec::new(), None)
            }
            _ => {
                let t = parse_schema(s.schema.as_deref().unwrap_or("")).map_err(fail)?;
                (t.physical, t.computed, t.watermark)
            }
        };
        let mut defaults = vec![None; physical.len()];
        if physical.is_empty() {
            // The columns are the registry's (or the .proto file's).
            let (columns, d) = super::formats::registry_columns(&source_name, s, &self.registries)
                .map_err(|m| SqlError::at(at.span(), m))?;
            physical = Schema::new(columns);
            defaults = d;
        }
        let metadata = super::formats::metadata_columns(&source_name, s)
            .map_err(|m| SqlError::at(at.span(), m))?;
        for m in &metadata {
            if physical
                .fields
                .iter()
                .any(|f| f.name.eq_ignore_ascii_case(&m.name))
            {
                return Err(SqlError::at(
                    at.span(),
                    format!(
                        "sources.{source_name}.metadata: column {:?} is already a physical column; name it with `KEY AS other_name`",
                        m.name
                    ),
                ));
            }
            physical.fields.push(m.field());
        }
        let mut columns = scope_columns(&physical, &source_name);
        let mut computed_fns: Vec<Arc<EvalFn>> = Vec::new();
        for (n, e) in &computed {
            let c = compile(e, &mut Scope::plain(&columns))
                .map_err(|m| fail(format!("computed column {n}: {}", m.message)))?;
            columns.push(ScopeColumn {
                name: n.clone(),
                qualifier: Some(source_name.clone()),
                ty: c.ty.column_type(),
            });
            computed_fns.push(c.eval);
        }
        let time = watermark
            .as_ref()
            .and_then(|(c, _)| columns.iter().position(|x| x.name.eq_ignore_ascii_case(c)));
        if let (Some((c, _)), None) = (&watermark, time) {
            let names: Vec<&str> = columns.iter().map(|c| c.name.as_str()).collect();
            return Err(fail(format!(
                "WATERMARK FOR {c}: no such column ({})",
                names.join(", ")
            )));
        }
        if let Some(t) = time {
            if columns[t].ty != DataType::Timestamp {
                return Err(fail(format!(
                    "WATERMARK FOR {}: the column is {}, not TIMESTAMP(3)",
                    columns[t].name, columns[t].ty
                )));
            }
        }
        let schema = Schema::new(
            columns
                .iter()
                .map(|c| crate::dataflow::row::Field::new(c.name.clone(), c.ty.clone()))
                .collect(),
        );
        let primary_key = match &s.primary_key {
            None => Vec::new(),
            Some(_) if s.format == FormatName::Text => {
                return Err(SqlError::at(
                    at.span(),
                    format!("sources.{source_name}.primary_key: a text source has no columns to key by; use format = \"json\""),
                ))
            }
            Some(k) if k.is_empty() => {
                return Err(SqlError::at(
                    at.span(),
                    format!("sources.{source_name}.primary_key: name at least one column"),
                ))
            }
            Some(k) => {
                let mut idx = Vec::new();
                for c in k {
                    match physical.fields.iter().position(|f| f.name.eq_ignore_ascii_case(c)) {
                        Some(i) if !idx.contains(&i) => idx.push(i),
                        Some(_) => {
                            return Err(SqlError::at(
                                at.span(),
                                format!("sources.{source_name}.primary_key: column {c:?} is named twice"),
                            ))
                        }
                        None => {
                            let names: Vec<&str> =
                                physical.fields.iter().map(|f| f.name.as_str()).collect();
                            return Err(SqlError::at(
                                at.span(),
                                format!(
                                    "sources.{source_name}.primary_key: column {c:?} is not a column of the schema ({})",
                                    names.join(", ")
                                ),
                            ));
                        }
                    }
                }
                idx
            }
        };
        let decoder = super::formats::TableDecoder::new(
            s,
            super::formats::TableParts {
                source: source_name.clone(),
                physical,
                defaults,
                metadata,
                computed: computed_fns,
                time,
                primary_key: primary_key.clone(),
            },
            &self.registries,
        )
        .map_err(|m| SqlError::at(at.span(), m))?;
        let topics: Vec<&str> = s.topics.iter().map(String::as_str).collect();
        let mut k = KafkaSource::custom(&topics, schema, Arc::new(decoder)).start(s.start);
        k = match (s.on_bad_record, &s.dead_letter_topic) {
            (BadRecordPolicy::Skip, _) => k.skip_bad_records(),
            (BadRecordPolicy::DeadLetter, Some(t)) => k.dead_letter(t),
            _ => k,
        };
        if let (Some(t), Some((_, delay))) = (time, &watermark) {
            k = k.event_time(&columns[t].name, Duration::from_millis(*delay as u64));
            if let Some(idle) = s.idle_timeout {
                k = k.idle_timeout(idle);
            }
        }
        let uid = self.uid(&format!("source.{source_name}"));
        let mut stream = self.job.source(&uid, k);
        let (mut updating, mut updated_by) = (None, None);
        if !primary_key.is_empty() {
            // An upsert topic: the rows it replaces are in the table's state.
            let names: Vec<&str> = primary_key
                .iter()
                .map(|i| columns[*i].name.as_str())
                .collect();
            let uid = self.uid(&format!("source.{source_name}.normalize"));
            stream = stream.key_by(&names).normalize_upserts(&uid);
            self.updating
                .insert(uid.clone(), Some(changelog_mode(&primary_key, &columns)));
            updating = Some(primary_key);
            updated_by = Some(uid);
        }
        let rel = Rel {
            stream,
            columns,
            updating,
            updated_by,
            time,
            source: Some(source_name),
            window: None,
            window_end: None,
            timed: time.is_some(),
        };
        self.sources.insert(key, rel.clone());
        Ok(Some(rel))
    }

    /// A table of the catalog, planned on first use.
    fn catalog_source(&mut self, name: &str) -> Option<Rel> {
        let (n, c) = self
            .catalog
            .sources
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))?;
        let (n, source, uid) = (n.clone(), c.source.clone(), c.uid.clone());
        let columns = scope_columns(&source.columns(), &n);
        let time = c
            .time
            .as_ref()
            .and_then(|t| columns.iter().position(|x| x.name.eq_ignore_ascii_case(t)));
        let uid = self.uid(&uid);
        let stream = self.job.source(&uid, source);
        let rel = Rel {
            stream,
            columns,
            updating: None,
            updated_by: None,
            time,
            source: Some(n),
            window: None,
            window_end: None,
            timed: time.is_some(),
        };
        self.sources.insert(name.to_ascii_lowercase(), rel.clone());
        Some(rel)
    }

    /// The dead-letter topic of the source `name`, if it has one.
    fn dead_letter_topic(&self, name: &str) -> Option<String> {
        match self.sql.sources.get(name) {
            Some(s) => s.dead_letter_topic.clone(),
            None => self.catalog.sources.get(name)?.dead_letter_topic.clone(),
        }
    }

    /// FROM: one relation, a window function over one, a relation with
    /// `CROSS JOIN UNNEST(...)`, or joins ([`Planner::joins`]). Also
    /// returns what is left of WHERE to filter by (joins take the
    /// conjuncts they can use).
    fn from(
        &mut self,
        select: &ast::Select,
        name: &str,
    ) -> Result<(Rel, Option<WindowTvf>, Option<E>), SqlError> {
        if let [ast::TableWithJoins {
            relation:
                TableFactor::Derived {
                    subquery,
                    alias,
                    lateral: false,
                    ..
                },
            joins,
        }] = select.from.as_slice()
        {
            if joins.is_empty() {
                let outer = select.selection.as_ref();
                if let Some((rel, rest)) = self.top_n(subquery, alias.as_ref(), outer, name)? {
                    return Ok((rel, None, rest));
                }
            }
        }
        let is_unnest = |j: &ast::Join| matches!(j.relation, TableFactor::UNNEST { .. });
        if select.from.len() > 1
            || select
                .from
                .iter()
                .any(|t| t.joins.iter().any(|j| !is_unnest(j)))
        {
            let (rel, rest) = self.joins(select, name)?;
            return Ok((rel, None, rest));
        }
        let [twj] = select.from.as_slice() else {
            return Err(SqlError::at(
                select.span(),
                "a SELECT needs FROM: weir's queries read a source or a view",
            ));
        };
        let (mut rel, tvf) = self.table_factor(&twj.relation, name, false)?;
        for (i, j) in twj.joins.iter().enumerate() {
            let mentioned = mentioned(select, &twj.joins[i + 1..]);
            match (&j.join_operator, &j.relation) {
                (
                    JoinOperator::CrossJoin(_) | JoinOperator::CrossApply,
                    TableFactor::UNNEST {
                        alias,
                        array_exprs,
                        with_offset: false,
                        ..
                    },
                ) if tvf.is_none() => {
                    rel = self.unnest(
                        rel,
                        alias.as_ref(),
                        array_exprs,
                        j.relation.span(),
                        name,
                        mentioned.as_ref(),
                    )?;
                }
                _ => return Err(SqlError::at(
                    j.relation.span(),
                    "CROSS JOIN takes UNNEST(array); to join two tables, JOIN ... ON their keys",
                )),
            }
        }
        Ok((rel, tvf, select.selection.clone()))
    }

    /// FROM with joins: `a [INNER] JOIN b ON ...`, `a LEFT | RIGHT | FULL
    /// [OUTER] JOIN b ON ...`, and `FROM a, b WHERE ...` (an inner join
    /// whose conditions are in WHERE), left to right: each join is one
    /// two-input operator, so a three-way join is a chain of two. Returns
    /// what is left of WHERE.
    fn joins(&mut self, select: &ast::Select, name: &str) -> Result<(Rel, Option<E>), SqlError> {
        let mut wheres: Vec<Option<E>> = select
            .selection
            .as_ref()
            .map(joins::conjuncts)
            .unwrap_or_default()
            .into_iter()
            .map(Some)
            .collect();
        let mut rel: Option<Rel> = None;
        for twj in &select.from {
            if self.as_of(&twj.relation)?.is_some() {
                return Err(SqlError::at(
                    twj.relation.span(),
                    "FOR SYSTEM_TIME AS OF belongs to the table on the right of a JOIN (the stream JOIN t FOR SYSTEM_TIME AS OF s.time)",
                ));
            }
            let first = self.join_input(&twj.relation, name, false)?;
            rel = Some(match rel.take() {
                None => first,
                Some(left) => self.join_step(
                    left,
                    first,
                    (JoinKind::Inner, Vec::new(), None),
                    &mut wheres,
                    twj.relation.span(),
                    name,
                )?,
            });
            for j in &twj.joins {
                let Some((kind, on)) = joins::join_kind(&j.join_operator) else {
                    return Err(SqlError::at(
                        j.relation.span(),
                        "this join is not supported: JOIN, INNER JOIN, or LEFT, RIGHT or FULL [OUTER] JOIN, with ON",
                    ));
                };
                let as_of = self.as_of(&j.relation)?;
                let right = self.join_input(&j.relation, name, as_of.is_some())?;
                let on = on.map(joins::conjuncts).unwrap_or_default();
                let left = rel.take().expect("set above");
                rel = Some(self.join_step(
                    left,
                    right,
                    (kind, on, as_of),
                    &mut wheres,
                    j.relation.span(),
                    name,
                )?);
            }
        }
        let rest = joins::conjoin(wheres.into_iter().flatten().collect());
        Ok((rel.expect("FROM has a table"), rest))
    }

    /// Top-N: `FROM (SELECT ..., ROW_NUMBER() OVER (PARTITION BY p ORDER
    /// BY o) AS rn FROM t ...) WHERE rn <= N` (also `rn < N`, `rn = 1`),
    /// as a keyed top-N operator ([`crate::dataflow::ops::top_n`]); None
    /// when the subquery has no ROW_NUMBER. With a window's `window_end`
    /// in PARTITION BY, each window's rows come once when it closes.
    fn top_n(
        &mut self,
        q: &ast::Query,
        alias: Option<&ast::TableAlias>,
        outer_where: Option<&E>,
        name: &str,
    ) -> Result<Option<(Rel, Option<E>)>, SqlError> {
        let SetExpr::Select(inner) = &*q.body else {
            return Ok(None);
        };
        let found = inner
            .projection
            .iter()
            .enumerate()
            .find_map(|(i, item)| match item {
                SelectItem::ExprWithAlias {
                    expr: E::Function(f),
                    alias,
                } if function_name(f).eq_ignore_ascii_case("ROW_NUMBER") => {
                    Some((i, f, alias.value.clone()))
                }
                _ => None,
            });
        let Some((at, f, rank_name)) = found else {
            return Ok(None);
        };
        let Some(ast::WindowType::WindowSpec(w)) = &f.over else {
            return Err(SqlError::at(
                f.span(),
                "ROW_NUMBER() needs OVER (PARTITION BY ... ORDER BY ...)",
            ));
        };
        if w.order_by.is_empty() {
            return Err(SqlError::at(
                f.span(),
                "ROW_NUMBER() OVER (...) needs ORDER BY: rows are ranked by it",
            ));
        }
        if q.with.is_some() || q.order_by.is_some() || q.limit_clause.is_some() {
            return Err(SqlError::at(
                q.span(),
                "a ROW_NUMBER subquery is one SELECT: no WITH, ORDER BY or LIMIT in it",
            ));
        }
        let grouped = !matches!(&inner.group_by, GroupByExpr::Expressions(g, _) if g.is_empty())
            || inner.having.is_some();
        if grouped {
            return Err(SqlError::at(
                inner.span(),
                "ROW_NUMBER over a GROUP BY of the same SELECT is not supported: aggregate in a subquery, and rank its rows",
            ));
        }
        let mut rest = Vec::new();
        let mut limit = None;
        for c in outer_where.map(joins::conjuncts).unwrap_or_default() {
            match (limit, joins::rank_bound(&c, &rank_name)) {
                (None, Some(n)) => limit = Some(n),
                _ => rest.push(c),
            }
        }
        let Some(limit) = limit else {
            return Err(SqlError::at(
                f.span(),
                format!(
                    "ROW_NUMBER() AS {rank_name} runs as a top-N: filter it in the outer query with WHERE {rank_name} <= N"
                ),
            ));
        };
        if limit == 0 {
            return Err(SqlError::at(
                f.span(),
                format!("WHERE {rank_name} keeps no row: the first rank is 1"),
            ));
        }
        let (mut rel, tvf, inner_rest) = self.from(inner, name)?;
        if tvf.is_some() {
            return Err(SqlError::at(
                inner.span(),
                "ROW_NUMBER over a window table function's rows is not supported: rank a window aggregate's (GROUP BY window_start, window_end, ...)",
            ));
        }
        if let Some(wh) = &inner_rest {
            rel = self.filter(rel, wh, &format!("{name}.where"))?;
        }
        if rel.updating.is_some() {
            let by = rel.updated_by.as_deref().unwrap_or("an operator");
            return Err(SqlError::at(
                f.span(),
                format!("ROW_NUMBER over an updating result (operator {by:?} changes rows it emitted) is not supported yet: rank an append-only input"),
            ));
        }
        let global = [E::Value(ast::Value::Number("0".into(), false).into())];
        let partition: Vec<&E> = if w.partition_by.is_empty() {
            global.iter().collect()
        } else {
            w.partition_by.iter().collect()
        };
        let (rel, pcols) = self.key_columns(rel, partition.into_iter(), name)?;
        let (rel, ocols) = self.key_columns(rel, w.order_by.iter().map(|o| &o.expr), name)?;
        let order = w
            .order_by
            .iter()
            .zip(&ocols)
            .map(|(o, c)| {
                let descending = matches!(o.options.sort, Some(ast::OrderBySort::Desc));
                SortKey {
                    column: *c,
                    descending,
                    // Flink's default: NULLs first ascending, last descending.
                    nulls_first: o.options.nulls_first.unwrap_or(!descending),
                }
            })
            .collect();
        let window_end = rel.window_end.filter(|e| pcols.contains(e));
        let uid = self.uid(&format!("{name}.top-n"));
        let stream = rel.stream.key_by_indexes(pcols.clone()).top_n(
            &uid,
            TopNSpec {
                order,
                limit,
                window_end,
            },
            "$rank",
        );
        let rank = rel.columns.len();
        let mut columns = rel.columns.clone();
        columns.push(ScopeColumn {
            name: "$rank".into(),
            qualifier: None,
            ty: DataType::BigInt,
        });
        let updating = match (window_end, limit) {
            (Some(_), _) => None,
            (None, 1) if !w.partition_by.is_empty() => Some(pcols.clone()),
            (None, _) if w.partition_by.is_empty() => Some(vec![rank]),
            (None, _) => Some(pcols.iter().copied().chain([rank]).collect()),
        };
        if let Some(key) = &updating {
            self.updating
                .insert(uid.clone(), Some(changelog_mode(key, &columns)));
        }
        let ranked = Rel {
            stream,
            columns,
            updated_by: updating.as_ref().map(|_| uid.clone()),
            updating,
            time: None,
            source: rel.source.clone(),
            window: rel.window,
            window_end: rel.window_end,
            timed: rel.timed,
        };
        let mut items = inner.projection.clone();
        items[at] = SelectItem::ExprWithAlias {
            expr: E::Identifier(ast::Ident::new("$rank")),
            alias: ast::Ident::new(rank_name),
        };
        let projected = self.project(ranked, &items, &format!("{name}.select"))?;
        let projected = match alias {
            Some(a) => projected.with_qualifier(&a.name.value),
            None => projected,
        };
        Ok(Some((projected, joins::conjoin(rest))))
    }

    /// The AS OF expression of a table written `t FOR SYSTEM_TIME AS OF e`.
    fn as_of(&mut self, t: &TableFactor) -> Result<Option<E>, SqlError> {
        match t {
            TableFactor::Table {
                version: Some(ast::TableVersion::ForSystemTimeAsOf(e)),
                ..
            } => Ok(Some(e.clone())),
            TableFactor::Table {
                version: Some(v), ..
            } => Err(SqlError::at(
                t.span(),
                format!("`{v}` is not Flink SQL: a temporal join reads FOR SYSTEM_TIME AS OF"),
            )),
            _ => Ok(None),
        }
    }

    /// One input of a join: a table, a view or a subquery (`versioned`:
    /// its FOR SYSTEM_TIME AS OF was taken by the join).
    fn join_input(
        &mut self,
        t: &TableFactor,
        name: &str,
        versioned: bool,
    ) -> Result<Rel, SqlError> {
        if matches!(t, TableFactor::UNNEST { .. }) {
            return Err(SqlError::at(
                t.span(),
                "UNNEST in a query with joins is not supported yet: UNNEST in a view, and join the view",
            ));
        }
        match self.table_factor(t, name, versioned)? {
            (rel, None) => Ok(rel),
            (_, Some(_)) => Err(SqlError::at(
                t.span(),
                "a window table function is read by a GROUP BY window_start, window_end: join that aggregate (a subquery) instead",
            )),
        }
    }

    /// One join of `left` and `right` by `kind` with the ON conjuncts;
    /// an inner join also takes the WHERE conjuncts over its two inputs.
    /// A conjunct over one input filters it first where that keeps the
    /// join's meaning; equalities of the two sides are the keys; the rest
    /// is the residual condition each pair of rows must meet.
    fn join_step(
        &mut self,
        left: Rel,
        right: Rel,
        (kind, on, as_of): (JoinKind, Vec<E>, Option<E>),
        wheres: &mut [Option<E>],
        span: sqlparser::tokenizer::Span,
        name: &str,
    ) -> Result<Rel, SqlError> {
        let mut conds = on;
        if kind == JoinKind::Inner {
            for w in wheres.iter_mut() {
                let takes = match w {
                    Some(e) => joins::sides(e, &left.columns, &right.columns)?.2,
                    None => false,
                };
                if takes {
                    conds.extend(w.take());
                }
            }
        }
        let push_left =
            matches!(kind, JoinKind::Inner | JoinKind::Right) && left.updating.is_none();
        let push_right =
            matches!(kind, JoinKind::Inner | JoinKind::Left) && right.updating.is_none();
        let (mut keys, mut to_left, mut to_right, mut residual) = (vec![], vec![], vec![], vec![]);
        for c in &conds {
            if let Some((a, b)) = joins::equality(c, &left.columns, &right.columns)? {
                keys.push((a.clone(), b.clone()));
                continue;
            }
            match joins::sides(c, &left.columns, &right.columns)? {
                (true, false, true) if push_left => to_left.push(c.clone()),
                (false, true, true) if push_right => to_right.push(c.clone()),
                _ => residual.push(c.clone()),
            }
        }
        if keys.is_empty() {
            return Err(SqlError::at(
                span,
                format!(
                    "a join needs an equality of the two sides' columns (a.k = b.k) in ON{}: weir does not run cross joins",
                    if kind == JoinKind::Inner { " or WHERE" } else { "" }
                ),
            ));
        }
        let mut left = left;
        let mut right = right;
        if let Some(f) = joins::conjoin(to_left) {
            left = self.filter(left, &f, &format!("{name}.where"))?;
        }
        if let Some(f) = joins::conjoin(to_right) {
            right = self.filter(right, &f, &format!("{name}.where"))?;
        }
        let (left, lk) = self.key_columns(left, keys.iter().map(|k| &k.0), name)?;
        let (right, rk) = self.key_columns(right, keys.iter().map(|k| &k.1), name)?;
        for ((a, b), (l, r)) in keys.iter().zip(lk.iter().zip(&rk)) {
            let (lt, rt) = (&left.columns[*l].ty, &right.columns[*r].ty);
            if lt != rt {
                return Err(err(
                    a,
                    format!("the join keys {a} ({lt}) and {b} ({rt}) have different types: CAST one to the other's"),
                ));
            }
        }
        let joined: Vec<ScopeColumn> = left.columns.iter().chain(&right.columns).cloned().collect();
        let uid = self.uid(&format!(
            "{name}.{}",
            if as_of.is_some() {
                "temporal-join"
            } else {
                "join"
            }
        ));
        if left.updating.is_some() || right.updating.is_some() {
            let by = left.updated_by.as_deref().or(right.updated_by.as_deref());
            for c in &residual {
                refuse_watermark_over_updating(c, by, "the join's ON condition")?;
            }
        }
        let condition: Option<JoinCondition> = match joins::conjoin(residual) {
            None => None,
            Some(e) => {
                let c = compile(&e, &mut Scope::plain(&joined))?;
                boolean(&c, &e)?;
                let (f, op) = (c.eval, uid.clone());
                Some(Arc::new(move |v: &[Value]| match f(v) {
                    Ok(Value::Bool(b)) => b,
                    Ok(_) => false,
                    Err(e) => {
                        note_eval_error(&op, &e);
                        false
                    }
                }))
            }
        };
        if let Some(at) = as_of {
            let join = (left, right, (lk, rk));
            return self.temporal_join(join, kind, (at, span), condition, &uid);
        }
        let append = left.updating.is_none() && right.updating.is_none();
        let watermarked =
            |r: &Rel| -> Vec<usize> { r.time.into_iter().chain(r.window_end).collect() };
        let mut expiry = [None, None];
        if kind == JoinKind::Inner && append {
            let found = joins::expiries(
                &conds,
                &joins::JoinSide {
                    columns: &left.columns,
                    watermarked: watermarked(&left),
                },
                &joins::JoinSide {
                    columns: &right.columns,
                    watermarked: watermarked(&right),
                },
            );
            // Both or neither: a late row must be dropped on both sides
            // once either side's rows can go.
            if found.iter().all(Option::is_some) {
                expiry = found;
            }
        }
        let ttl = self.sql.pipeline.state_ttl.map(|d| d.as_millis() as i64);
        if ttl.is_some() {
            for (side, r) in [("left", &left), ("right", &right)] {
                if !r.timed {
                    return Err(SqlError::at(
                        span,
                        format!(
                            "[pipeline] state_ttl counts from each row's event time, and the join's {side} input has none: declare a WATERMARK on its source"
                        ),
                    ));
                }
            }
        }
        let spec = JoinSpec {
            kind,
            keys: [Vec::new(), Vec::new()],
            widths: [0, 0],
            condition,
            expiry,
            ttl,
            sweep_every: crate::dataflow::ops::join::SWEEP_EVERY_MS,
        };
        let stream = Stream::connect(
            left.stream.key_by_indexes(lk.clone()),
            right.stream.key_by_indexes(rk.clone()),
        )
        .join(&uid, spec);
        let n = left.columns.len();
        let updating = if kind == JoinKind::Inner && append {
            None
        } else {
            Some(match (&left.updating, &right.updating) {
                (Some(a), Some(b)) if !a.is_empty() && !b.is_empty() => {
                    a.iter().copied().chain(b.iter().map(|i| i + n)).collect()
                }
                _ => Vec::new(),
            })
        };
        if let Some(key) = &updating {
            self.updating
                .insert(uid.clone(), Some(changelog_mode(key, &joined)));
        }
        let window = match (left.window, right.window) {
            (Some(lw), Some(rw)) if lk.iter().zip(&rk).any(|(a, b)| *a == lw.1 && *b == rw.1) => {
                Some(lw)
            }
            _ => None,
        };
        Ok(Rel {
            stream,
            columns: joined,
            updated_by: updating.as_ref().map(|_| uid.clone()),
            updating,
            time: None,
            source: None,
            window_end: window.map(|w| w.1),
            timed: left.timed && right.timed,
            window,
        })
    }

    /// The join of a stream (`left`) with a table's versions (`right`):
    /// `AS OF` the stream's event-time column joins the version valid then,
    /// `AS OF PROCTIME()` the table's row when the stream's row arrives.
    #[allow(clippy::too_many_arguments)]
    fn temporal_join(
        &mut self,
        (left, right, (lk, rk)): (Rel, Rel, (Vec<usize>, Vec<usize>)),
        kind: JoinKind,
        (at, span): (E, sqlparser::tokenizer::Span),
        condition: Option<JoinCondition>,
        uid: &str,
    ) -> Result<Rel, SqlError> {
        // The AS OF expression was parsed on its own: its places are not
        // the query's, so errors point at the table.
        let err = |_: &E, m: String| SqlError::at(span, m);
        if !matches!(kind, JoinKind::Inner | JoinKind::Left) {
            return Err(err(
                &at,
                "a temporal join is an INNER or a LEFT join".into(),
            ));
        }
        let Some(pk) = right.updating.clone().filter(|k| !k.is_empty()) else {
            return Err(err(
                &at,
                "FOR SYSTEM_TIME AS OF reads the versions of a table: a source with primary_key"
                    .into(),
            ));
        };
        if left.updating.is_some() {
            return Err(err(
                &at,
                "the stream side of a temporal join must be append-only".into(),
            ));
        }
        if !pk.iter().all(|c| rk.contains(c)) {
            let names: Vec<&str> = pk.iter().map(|c| right.columns[*c].name.as_str()).collect();
            return Err(err(
                &at,
                format!(
                    "a temporal join's ON must name the table's primary key ({}): a row joins one version of one key",
                    names.join(", ")
                ),
            ));
        }
        let event_time = match &at {
            E::Function(f) if function_name(f).eq_ignore_ascii_case("PROCTIME") => false,
            e => match joins::resolve(e, &left.columns)? {
                Some(c) if Some(c) == left.time => true,
                _ => {
                    return Err(err(
                        e,
                        format!("AS OF {e}: AS OF takes the stream's event-time column (its WATERMARK) or PROCTIME()"),
                    ))
                }
            },
        };
        if event_time && right.time.is_none() {
            return Err(err(
                &at,
                "the table has no event time, so it has no versions by time: declare a WATERMARK in its schema, or join AS OF PROCTIME()".into(),
            ));
        }
        let spec = TemporalJoinSpec {
            outer: kind == JoinKind::Left,
            event_time,
            keys: [Vec::new(), Vec::new()],
            widths: [0, 0],
            condition,
        };
        let stream = Stream::connect(
            left.stream.key_by_indexes(lk),
            right.stream.key_by_indexes(rk),
        )
        .temporal_join(uid, spec);
        // Append-only, though the table's changelog comes in.
        self.updating.insert(uid.to_string(), None);
        Ok(Rel {
            stream,
            columns: left.columns.iter().chain(&right.columns).cloned().collect(),
            updating: None,
            updated_by: None,
            // A joined row has its stream row's time.
            time: left.time,
            source: None,
            window: None,
            window_end: None,
            timed: left.timed,
        })
    }

    /// The columns of `rel` that `exprs` name, computing those that are
    /// not plain columns into hidden columns at the end (`$key0`, ...).
    fn key_columns<'e>(
        &mut self,
        rel: Rel,
        exprs: impl Iterator<Item = &'e E>,
        name: &str,
    ) -> Result<(Rel, Vec<usize>), SqlError> {
        let mut keys = Vec::new();
        let mut computed = Vec::new();
        for e in exprs {
            match joins::resolve(e, &rel.columns)? {
                Some(i) => keys.push(i),
                None => {
                    let c = compile(e, &mut Scope::plain(&rel.columns))?;
                    keys.push(rel.columns.len() + computed.len());
                    computed.push(c);
                }
            }
        }
        if computed.is_empty() {
            return Ok((rel, keys));
        }
        let qualifiers: Vec<Option<String>> =
            rel.columns.iter().map(|c| c.qualifier.clone()).collect();
        let mut outputs: Vec<(String, Compiled, Option<usize>)> = rel
            .columns
            .iter()
            .enumerate()
            .map(|(i, c)| (c.name.clone(), Compiled::column(i, c.ty.clone()), Some(i)))
            .collect();
        let first = outputs.len();
        for (i, c) in computed.into_iter().enumerate() {
            outputs.push((format!("$key{}", first + i), c, None));
        }
        let mut rel = self.finish_projection(rel, outputs, &format!("{name}.join-key"))?;
        for (c, q) in rel.columns.iter_mut().zip(qualifiers) {
            c.qualifier = q;
        }
        Ok((rel, keys))
    }

    /// `CROSS JOIN UNNEST(array)`: a row per item, with the columns of
    /// `rel` that the SELECT mentions (`mentioned`; all of them when None)
    /// and then the item. A column no later clause can read is not copied
    /// into every item's row: word count's line is not.
    fn unnest(
        &mut self,
        rel: Rel,
        alias: Option<&ast::TableAlias>,
        arrays: &[E],
        span: sqlparser::tokenizer::Span,
        name: &str,
        mentioned: Option<&std::collections::BTreeSet<String>>,
    ) -> Result<Rel, SqlError> {
        if rel.updating.is_some() {
            return Err(SqlError::at(
                span,
                "UNNEST of an updating result is not supported yet",
            ));
        }
        let [array] = arrays else {
            return Err(SqlError::at(span, "UNNEST takes one array"));
        };
        let c = compile(array, &mut Scope::plain(&rel.columns))?;
        let item = match c.data_type() {
            Some(DataType::List(t)) => (**t).clone(),
            _ => return Err(err(array, format!("UNNEST takes an ARRAY, not {}", c.ty))),
        };
        let alias_name = alias.map(|a| a.name.value.clone());
        let column = alias
            .and_then(|a| a.columns.first())
            .map(|c| c.name.value.clone())
            .unwrap_or_else(|| "EXPR$0".into());
        let keep: Vec<usize> = (0..rel.columns.len())
            .filter(|i| {
                mentioned.is_none_or(|m| m.contains(&rel.columns[*i].name.to_ascii_lowercase()))
            })
            .collect();
        let moved = |c: usize| keep.iter().position(|k| *k == c);
        let mut columns: Vec<ScopeColumn> = keep.iter().map(|k| rel.columns[*k].clone()).collect();
        columns.push(ScopeColumn {
            name: column,
            qualifier: alias_name,
            ty: item,
        });
        let schema = schema_of(&columns);
        let uid = self.uid(&format!("{name}.unnest"));
        let time = rel.time.and_then(moved);
        let window = rel.window.and_then(|(s, e)| Some((moved(s)?, moved(e)?)));
        let window_end = rel.window_end.and_then(moved);
        // Each item of a row's array, handed to `each`. UNNEST(WORDS(s))
        // splits s as it goes, without an array between.
        type Items = dyn Fn(&[Value], &mut dyn FnMut(Value)) -> Result<(), String> + Send + Sync;
        let words_of = match array {
            E::Function(w) if function_name(w).eq_ignore_ascii_case("WORDS") => {
                match call_args(w, array)?.as_slice() {
                    [text] => Some(compile(text, &mut Scope::plain(&rel.columns))?.eval),
                    _ => None,
                }
            }
            _ => None,
        };
        let items: Arc<Items> = match words_of {
            Some(text) => Arc::new(move |v, each| {
                if let Value::String(s) = text(v)? {
                    s.split_whitespace()
                        .for_each(|w| each(Value::String(w.to_string())));
                }
                Ok(())
            }),
            None => {
                let f = c.eval;
                Arc::new(move |v, each| {
                    if let Value::List(list) = f(v)? {
                        list.into_iter().for_each(each);
                    }
                    Ok(())
                })
            }
        };
        let op = uid.clone();
        let stream = rel.stream.flat_map(&uid, schema, move |v, emit| {
            let result = items(v, &mut |item| {
                // Room for one more column: an aggregate keyed by these
                // appends its result in place.
                let mut row = Vec::with_capacity(keep.len() + 2);
                row.extend(keep.iter().map(|k| v[*k].clone()));
                row.push(item);
                emit(row);
            });
            if let Err(e) = result {
                note_eval_error(&op, &e);
            }
        });
        Ok(Rel {
            stream,
            columns,
            time,
            window,
            window_end,
            ..rel
        })
    }

    /// A source or view by name, qualified by its alias (or its name).
    fn named_table(
        &mut self,
        table: &ast::ObjectName,
        alias: Option<&ast::TableAlias>,
    ) -> Result<Rel, SqlError> {
        let n = name_of(table);
        let Some(rel) = self.source(&n, table)? else {
            let known: Vec<String> = self
                .sql
                .sources
                .keys()
                .chain(self.catalog.sources.keys())
                .chain(self.views.keys())
                .cloned()
                .collect();
            let hint = super::expr::nearest(&n, known.iter().map(String::as_str))
                .map_or(String::new(), |x| format!("; did you mean {x:?}?"));
            return Err(SqlError::at(
                table.span(),
                format!(
                    "unknown table {n:?}: FROM reads a [sources.NAME] or a view ({}){hint}",
                    known.join(", ")
                ),
            ));
        };
        let q = alias.map_or(n, |a| a.name.value.clone());
        Ok(rel.with_qualifier(&q))
    }

    /// One table of FROM; `versioned` when it may be read `FOR
    /// SYSTEM_TIME AS OF` (the right side of a join, which took it).
    fn table_factor(
        &mut self,
        t: &TableFactor,
        name: &str,
        versioned: bool,
    ) -> Result<(Rel, Option<WindowTvf>), SqlError> {
        match t {
            TableFactor::Table {
                name: table,
                alias,
                args: None,
                version,
                ..
            } => {
                if let (Some(v), false) = (version, versioned) {
                    return Err(SqlError::at(
                        table.span(),
                        format!(
                            "{v} is not on the table of a join: it follows the name of a table on the right of a JOIN, before its alias (s JOIN t FOR SYSTEM_TIME AS OF s.time AS x ON ...)"
                        ),
                    ));
                }
                Ok((self.named_table(table, alias.as_ref())?, None))
            }
            TableFactor::Derived {
                subquery,
                alias,
                lateral: false,
                ..
            } => {
                let rel = self.query(subquery, name)?;
                Ok((
                    match alias {
                        Some(a) => rel.with_qualifier(&a.name.value),
                        None => rel,
                    },
                    None,
                ))
            }
            TableFactor::TableFunction { expr, alias } => {
                let (rel, tvf) = self.window_tvf(expr)?;
                Ok((
                    match alias {
                        Some(a) => rel.with_qualifier(&a.name.value),
                        None => rel,
                    },
                    Some(tvf),
                ))
            }
            other => Err(SqlError::at(
                other.span(),
                format!("`{other}` is not supported in FROM"),
            )),
        }
    }

    /// `TUMBLE(TABLE t, DESCRIPTOR(col), size)`, `HOP(..., slide, size)`,
    /// `SESSION(..., gap)`.
    fn window_tvf(&mut self, e: &E) -> Result<(Rel, WindowTvf), SqlError> {
        let E::Function(f) = e else {
            return Err(err(
                e,
                "TABLE(...) takes a window function: TUMBLE, HOP, CUMULATE or SESSION",
            ));
        };
        let kind = function_name(f).to_ascii_uppercase();
        let mut args = call_args(f, e)?;
        // `TABLE t [PARTITION BY a, b]` (super::dialect): the table, and
        // SESSION's partition columns.
        let mut partition = None;
        if let Some(E::Function(t)) = args.first().copied() {
            if function_name(t) == super::dialect::TABLE_ARGUMENT {
                let whole = args[0];
                let inner = call_args(t, whole)?;
                if let Some(E::Function(p)) = inner.get(1).copied() {
                    if kind != "SESSION" {
                        return Err(err(inner[1], "PARTITION BY belongs to SESSION windows"));
                    }
                    let mut cols = Vec::new();
                    for c in call_args(p, inner[1])? {
                        match c {
                            E::Identifier(i) => cols.push(i.value.clone()),
                            other => return Err(err(other, "PARTITION BY names columns")),
                        }
                    }
                    partition = Some((cols, inner[1].span()));
                }
                args[0] = inner[0];
            }
        }
        let n_intervals = match kind.as_str() {
            "TUMBLE" | "SESSION" => 1,
            "HOP" | "CUMULATE" => 2,
            _ => {
                return Err(err(
                    e,
                    format!("{kind} is not a window function: TUMBLE, HOP, CUMULATE or SESSION"),
                ))
            }
        };
        if args.len() < 2 + n_intervals || args.len() > 3 + n_intervals {
            return Err(err(
                e,
                format!(
                    "{kind} takes (TABLE t, DESCRIPTOR(time column), {}{})",
                    if kind == "HOP" {
                        "slide, size"
                    } else if kind == "CUMULATE" {
                        "step, size"
                    } else if kind == "SESSION" {
                        "gap"
                    } else {
                        "size"
                    },
                    if kind == "SESSION" { "" } else { "[, offset]" }
                ),
            ));
        }
        let table = match args[0] {
            E::Identifier(i) => ast::ObjectName::from(vec![i.clone()]),
            E::CompoundIdentifier(parts) => ast::ObjectName::from(parts.clone()),
            other => return Err(err(other, "the first argument is TABLE name")),
        };
        let rel = self.named_table(&table, None)?;
        let descriptor = match args[1] {
            E::Function(d) if function_name(d).eq_ignore_ascii_case("DESCRIPTOR") => {
                match call_args(d, args[1])?.as_slice() {
                    [E::Identifier(i)] => i.value.clone(),
                    _ => return Err(err(args[1], "DESCRIPTOR names one column")),
                }
            }
            other => return Err(err(other, "the second argument is DESCRIPTOR(time column)")),
        };
        let time_ok = rel
            .time
            .is_some_and(|t| rel.columns[t].name.eq_ignore_ascii_case(&descriptor));
        if !time_ok {
            let have = rel.time.map(|t| rel.columns[t].name.clone());
            return Err(err(
                args[1],
                match have {
                    Some(h) => format!(
                        "windows are over the table's event time, {h:?} (its WATERMARK), not {descriptor:?}"
                    ),
                    None => format!(
                        "the table has no event time: declare WATERMARK FOR {descriptor} AS {descriptor} - INTERVAL '..' SECOND in its schema"
                    ),
                },
            ));
        }
        if rel.updating.is_some() {
            return Err(err(e, "a window over an updating result is not supported"));
        }
        let ms = |i: usize| -> Result<i64, SqlError> {
            match args[i] {
                E::Interval(iv) => {
                    let v = interval(iv, args[i])?;
                    if v <= 0 && i < 2 + n_intervals {
                        return Err(err(args[i], "a window's size, slide or gap is positive"));
                    }
                    Ok(v)
                }
                other => Err(err(other, "expected an INTERVAL")),
            }
        };
        let offset = if args.len() > 2 + n_intervals {
            ms(2 + n_intervals)?
        } else {
            0
        };
        let spec = match kind.as_str() {
            "TUMBLE" => WindowSpec::Tumbling {
                size: ms(2)?,
                offset,
            },
            "HOP" => WindowSpec::Hopping {
                slide: ms(2)?,
                size: ms(3)?,
                offset,
            },
            "CUMULATE" => WindowSpec::Cumulate {
                step: ms(2)?,
                size: ms(3)?,
                offset,
            },
            _ => WindowSpec::Session { gap: ms(2)? },
        };
        spec.validate().map_err(|m| err(e, m))?;
        Ok((rel, WindowTvf { spec, partition }))
    }

    fn select(&mut self, s: &ast::Select, name: &str) -> Result<Rel, SqlError> {
        if let Some(d) = &s.distinct {
            return Err(SqlError::at(
                s.span(),
                format!("SELECT {d} is not supported yet: GROUP BY the columns instead"),
            ));
        }
        let (mut rel, tvf, rest) = self.from(s, name)?;
        if let Some(w) = &rest {
            rel = self.filter(rel, w, &format!("{name}.where"))?;
        }
        let group: Vec<&E> = match &s.group_by {
            GroupByExpr::Expressions(exprs, mods) if mods.is_empty() => exprs.iter().collect(),
            other => {
                return Err(SqlError::at(
                    s.span(),
                    format!("{other} is not supported: GROUP BY a list of expressions"),
                ))
            }
        };
        let has_aggregates = s.projection.iter().any(|i| match i {
            SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => {
                contains_aggregate(e)
            }
            _ => false,
        }) || s.having.as_ref().is_some_and(contains_aggregate);
        if group.is_empty() && !has_aggregates {
            if tvf.is_some() {
                return Err(SqlError::at(
                    s.span(),
                    "a window table function is read by a GROUP BY window_start, window_end (a window aggregate); selecting its rows directly is not supported yet",
                ));
            }
            if let Some(h) = &s.having {
                return Err(err(h, "HAVING needs GROUP BY or an aggregate"));
            }
            return self.project(rel, &s.projection, &format!("{name}.select"));
        }
        self.aggregate(rel, tvf, &group, s, name)
    }

    fn filter(&mut self, rel: Rel, predicate: &E, uid: &str) -> Result<Rel, SqlError> {
        if rel.updating.is_some() {
            return Err(err(
                predicate,
                "a filter over an updating result is not supported yet (a row that stops passing would have to be retracted)",
            ));
        }
        let c = compile(predicate, &mut Scope::plain(&rel.columns))?;
        boolean(&c, predicate)?;
        let uid = self.uid(uid);
        let op = uid.clone();
        let f = c.eval;
        let stream = rel.stream.filter(&uid, move |v| match f(v) {
            Ok(Value::Bool(b)) => b,
            Ok(_) => false,
            Err(e) => {
                note_eval_error(&op, &e);
                false
            }
        });
        Ok(Rel { stream, ..rel })
    }

    /// The SELECT list over a relation without aggregation.
    fn project(&mut self, rel: Rel, items: &[SelectItem], uid: &str) -> Result<Rel, SqlError> {
        let mut outputs = Vec::new();
        for item in items {
            match item {
                SelectItem::Wildcard(_) => {
                    // `$key0`, ...: a join's computed keys, not the user's.
                    for (i, c) in rel
                        .columns
                        .iter()
                        .enumerate()
                        .filter(|(_, c)| !c.name.starts_with('$'))
                    {
                        outputs.push((c.name.clone(), Compiled::column(i, c.ty.clone()), Some(i)));
                    }
                }
                SelectItem::QualifiedWildcard(kind, _) => {
                    let q = kind.to_string();
                    // The kind shows as `A.*`; the qualifier is `A`.
                    let q = q.strip_suffix(".*").unwrap_or(&q).to_string();
                    let mut any = false;
                    for (i, c) in rel.columns.iter().enumerate() {
                        if c.qualifier
                            .as_deref()
                            .is_some_and(|x| x.eq_ignore_ascii_case(&q))
                        {
                            outputs.push((
                                c.name.clone(),
                                Compiled::column(i, c.ty.clone()),
                                Some(i),
                            ));
                            any = true;
                        }
                    }
                    if !any {
                        return Err(SqlError::at(item.span(), format!("no table {q:?} in FROM")));
                    }
                }
                SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => {
                    let c = compile(e, &mut Scope::plain(&rel.columns))?;
                    let n = output_name(item, outputs.len());
                    if rel.updating.is_some() {
                        refuse_watermark_over_updating(
                            e,
                            rel.updated_by.as_deref(),
                            &format!("column {n:?}"),
                        )?;
                    }
                    outputs.push((n, c, column_index(e, &rel.columns)));
                }
                other => {
                    return Err(SqlError::at(
                        other.span(),
                        format!("`{other}` is not supported in SELECT"),
                    ))
                }
            }
        }
        self.finish_projection(rel, outputs, uid)
    }

    /// A map to `outputs` (name, expression, input column if it is one),
    /// carrying the event time and the unique key where they pass through.
    fn finish_projection(
        &mut self,
        rel: Rel,
        outputs: Vec<(String, Compiled, Option<usize>)>,
        uid: &str,
    ) -> Result<Rel, SqlError> {
        let mut seen = std::collections::BTreeSet::new();
        for (n, _, _) in &outputs {
            if !seen.insert(n.to_ascii_lowercase()) {
                return Err(SqlError::general(format!(
                    "{uid}: two result columns are named {n:?}: give one an alias (AS)"
                )));
            }
        }
        let columns: Vec<ScopeColumn> = outputs
            .iter()
            .map(|(n, c, _)| ScopeColumn {
                name: n.clone(),
                qualifier: None,
                ty: c.ty.column_type(),
            })
            .collect();
        let moved = |i: usize| outputs.iter().position(|(_, _, from)| *from == Some(i));
        let time = rel.time.and_then(moved);
        let window = rel.window.and_then(|(s, e)| Some((moved(s)?, moved(e)?)));
        let window_end = rel.window_end.and_then(moved);
        let updating = rel.updating.as_ref().map(|key| {
            key.iter()
                .map(|k| moved(*k))
                .collect::<Option<Vec<_>>>()
                .unwrap_or_default()
        });
        let identity = outputs.len() == rel.columns.len()
            && outputs
                .iter()
                .enumerate()
                .all(|(i, (n, _, from))| *from == Some(i) && *n == rel.columns[i].name);
        if identity {
            return Ok(Rel {
                columns,
                time,
                updating,
                window,
                window_end,
                ..rel
            });
        }
        let schema = schema_of(&columns);
        let uid = self.uid(uid);
        let op = uid.clone();
        let fns: Vec<(Option<usize>, Arc<EvalFn>)> = outputs
            .into_iter()
            .map(|(_, c, from)| (from, c.eval))
            .collect();
        let stream = rel.stream.map(&uid, schema, move |v| {
            fns.iter()
                .map(|(from, f)| match from {
                    Some(i) => v[*i].clone(),
                    None => f(v).unwrap_or_else(|e| {
                        note_eval_error(&op, &e);
                        Value::Null
                    }),
                })
                .collect()
        });
        Ok(Rel {
            stream,
            columns,
            time,
            updating,
            updated_by: rel.updated_by,
            source: rel.source,
            window,
            window_end,
            timed: rel.timed,
        })
    }

    fn aggregate(
        &mut self,
        rel: Rel,
        tvf: Option<WindowTvf>,
        group: &[&E],
        s: &ast::Select,
        name: &str,
    ) -> Result<Rel, SqlError> {
        // The window columns of a window table function, by name.
        let is_window_col = |e: &E, col: &str| match e {
            E::Identifier(i) => i.value.eq_ignore_ascii_case(col),
            E::CompoundIdentifier(p) => p.last().is_some_and(|i| i.value.eq_ignore_ascii_case(col)),
            _ => false,
        };
        // Over a window aggregate's result, grouping by both its window
        // columns keeps the windows (Flink's windows of windows).
        let given_cols = if tvf.is_none() { rel.window } else { None };
        let mut keys: Vec<&E> = Vec::new();
        let mut window_exprs: Vec<(E, usize)> = Vec::new();
        let (mut saw_start, mut saw_end) = (false, false);
        for g in group {
            let col = column_index(g, &rel.columns);
            if (tvf.is_some() && is_window_col(g, "window_start"))
                || given_cols.is_some_and(|(ws, _)| col == Some(ws))
            {
                saw_start = true;
                window_exprs.push(((*g).clone(), 0));
            } else if (tvf.is_some() && is_window_col(g, "window_end"))
                || given_cols.is_some_and(|(_, we)| col == Some(we))
            {
                saw_end = true;
                window_exprs.push(((*g).clone(), 1));
            } else {
                keys.push(g);
            }
        }
        let given = given_cols.filter(|_| saw_start && saw_end);
        if given_cols.is_some() && given.is_none() {
            // One of the two is a plain key after all.
            keys.extend(
                group
                    .iter()
                    .filter(|g| window_exprs.iter().any(|(w, _)| w == **g)),
            );
            window_exprs.clear();
        }
        if tvf.is_some() && !(saw_start && saw_end) {
            return Err(SqlError::at(
                s.span(),
                "a window table function's aggregate groups by window_start and window_end (GROUP BY ..., window_start, window_end)",
            ));
        }
        // Keys: each a column of the input, or computed by a map first.
        let input_scope_cols = rel.columns.clone();
        let mut key_exprs: Vec<(E, Compiled)> = Vec::new();
        for k in &keys {
            let c = compile(k, &mut Scope::plain(&input_scope_cols))?;
            if matches!(c.ty, Ty::Null | Ty::Interval) {
                return Err(err(k, "cannot GROUP BY a NULL or an INTERVAL"));
            }
            key_exprs.push(((*k).clone(), c));
        }
        // weir keeps sessions per key: SESSION's PARTITION BY must be the
        // GROUP BY keys (without it, Flink's sessions span every key).
        if let Some(t) = tvf
            .as_ref()
            .filter(|t| matches!(t.spec, WindowSpec::Session { .. }))
        {
            let key_names: Vec<String> = key_exprs
                .iter()
                .map(|(e, _)| {
                    column_index(e, &rel.columns)
                        .map(|c| rel.columns[c].name.to_ascii_lowercase())
                        .unwrap_or_else(|| e.to_string())
                })
                .collect();
            match &t.partition {
                None if !key_names.is_empty() => {
                    return Err(SqlError::at(
                        s.span(),
                        format!(
                            "SESSION without PARTITION BY makes sessions across all rows; weir keeps a session per key: write SESSION(TABLE t PARTITION BY {}, ...)",
                            key_names.join(", ")
                        ),
                    ))
                }
                Some((cols, span)) => {
                    let mut a: Vec<String> = cols.iter().map(|c| c.to_ascii_lowercase()).collect();
                    let mut b = key_names.clone();
                    a.sort();
                    b.sort();
                    if a != b {
                        return Err(SqlError::at(
                            *span,
                            format!(
                                "SESSION's PARTITION BY ({}) must be the GROUP BY columns besides the window ({})",
                                cols.join(", "),
                                key_names.join(", ")
                            ),
                        ));
                    }
                }
                None => {}
            }
        }
        // An aggregate without keys (one result for the whole stream, or
        // per window) gets a constant key: all its rows meet in one subtask.
        let no_keys = key_exprs.is_empty();
        if no_keys {
            key_exprs.push((
                E::Value(ast::Value::Number("0".into(), false).into()),
                Compiled::constant(Value::Int(0), Ty::Data(DataType::BigInt)),
            ));
        }
        // The aggregate's output: keys, [window_start, window_end], aggregates.
        let window = tvf.is_some() || given.is_some();
        let base = key_exprs.len() + if window { 2 } else { 0 };
        let mut substitutions: Vec<(E, Compiled)> = key_exprs
            .iter()
            .enumerate()
            .map(|(i, (e, c))| (e.clone(), Compiled::column(i, c.ty.column_type())))
            .collect();
        // The window columns, as grouped and by their names.
        if window {
            let k = key_exprs.len();
            for (e, which) in &window_exprs {
                substitutions.push((e.clone(), Compiled::column(k + which, DataType::Timestamp)));
            }
            for (n, i) in [("window_start", k), ("window_end", k + 1)] {
                substitutions.push((
                    E::Identifier(ast::Ident::new(n)),
                    Compiled::column(i, DataType::Timestamp),
                ));
            }
            let end = Compiled::column(k + 1, DataType::Timestamp);
            let f = end.eval.clone();
            substitutions.push((
                E::Identifier(ast::Ident::new("window_time")),
                Compiled {
                    eval: Arc::new(move |row| {
                        Ok(match f(row)? {
                            Value::Timestamp(t) => Value::Timestamp(t - 1),
                            v => v,
                        })
                    }),
                    ty: Ty::Data(DataType::Timestamp),
                    constant: None,
                },
            ));
        }
        // Aggregate calls, collected while the SELECT list compiles.
        let mut calls: Vec<(E, AggFunction, Option<Compiled>, bool)> = Vec::new();
        let mut hook = |f: &ast::Function, whole: &E| -> Result<Compiled, SqlError> {
            if let Some(i) = calls.iter().position(|(e, _, _, _)| e == whole) {
                let t = agg_type(calls[i].1, calls[i].2.as_ref());
                return Ok(Compiled::column(base + i, t));
            }
            let fname = function_name(f).to_ascii_uppercase();
            if f.over.is_some() {
                return Err(err(whole, "window functions (OVER) are not supported yet"));
            }
            // FILTER (WHERE p): the argument is NULL where p is not TRUE,
            // and every aggregate skips NULLs (COUNT(*) counts a constant).
            let filter = match &f.filter {
                None => None,
                Some(p) => {
                    let c = compile(p, &mut Scope::plain(&input_scope_cols))?;
                    boolean(&c, p)?;
                    Some(c.eval)
                }
            };
            let distinct = matches!(&f.args, ast::FunctionArguments::List(l)
                if matches!(l.duplicate_treatment, Some(ast::DuplicateTreatment::Distinct)));
            if distinct && fname != "COUNT" {
                return Err(err(
                    whole,
                    format!("{fname}(DISTINCT ...) is not supported yet; COUNT(DISTINCT ...) is"),
                ));
            }
            if rel.updating.is_some() && matches!(fname.as_str(), "MIN" | "MAX") {
                return Err(err(
                    whole,
                    format!("{fname} over an updating result is not supported yet (a retracted extreme would need every value kept)"),
                ));
            }
            let function = match fname.as_str() {
                "COUNT" => AggFunction::Count,
                "SUM" => AggFunction::Sum,
                "MIN" => AggFunction::Min,
                "MAX" => AggFunction::Max,
                _ => AggFunction::Avg,
            };
            let star = matches!(&f.args, ast::FunctionArguments::List(l)
                if matches!(l.args.as_slice(), [ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Wildcard)]));
            let arg = if star {
                if function != AggFunction::Count {
                    return Err(err(
                        whole,
                        format!("{fname}(*) is not an aggregate: only COUNT(*)"),
                    ));
                }
                filter
                    .as_ref()
                    .map(|_| Compiled::constant(Value::Int(1), Ty::Data(DataType::BigInt)))
            } else {
                let args = call_args(f, whole)?;
                let [a] = args.as_slice() else {
                    return Err(err(whole, format!("{fname} takes one argument")));
                };
                if contains_aggregate(a) {
                    return Err(err(a, "an aggregate inside an aggregate is not allowed"));
                }
                let c = compile(a, &mut Scope::plain(&input_scope_cols))?;
                match (function, c.data_type()) {
                    (AggFunction::Count, _) => {}
                    (AggFunction::Min | AggFunction::Max, Some(t))
                        if !matches!(t, DataType::List(_) | DataType::Struct(_)) => {}
                    (
                        AggFunction::Sum | AggFunction::Avg,
                        Some(
                            DataType::Int
                            | DataType::BigInt
                            | DataType::Double
                            | DataType::Decimal { .. },
                        ),
                    ) => {}
                    _ => return Err(err(a, format!("{fname} of {} is not supported", c.ty))),
                }
                Some(c)
            };
            let arg = match (arg, filter) {
                (Some(a), Some(p)) => {
                    let g = a.eval.clone();
                    Some(Compiled {
                        eval: Arc::new(move |row| {
                            if p(row)? == Value::Bool(true) {
                                g(row)
                            } else {
                                Ok(Value::Null)
                            }
                        }),
                        ty: a.ty,
                        constant: None,
                    })
                }
                (a, _) => a,
            };
            let t = agg_type(function, arg.as_ref());
            calls.push((whole.clone(), function, arg, distinct));
            Ok(Compiled::column(base + calls.len() - 1, t))
        };
        let mut outputs = Vec::new();
        // The items that are an aggregate call as it is: they pass
        // through too (resolved once every call is collected).
        let mut direct_calls: Vec<Option<&E>> = Vec::new();
        for item in &s.projection {
            match item {
                SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => {
                    let mut scope = Scope {
                        columns: &input_scope_cols,
                        substitutions: &substitutions,
                        grouped: true,
                        aggregates: Some(&mut hook),
                        no_aggregates_reason: "",
                    };
                    let c = compile(e, &mut scope)?;
                    let from = substitutions
                        .iter()
                        .take(key_exprs.len())
                        .position(|(k, _)| k == e);
                    let n = output_name(item, outputs.len());
                    // Window columns pass through as columns of the aggregate.
                    let through = from.or_else(|| {
                        let k = key_exprs.len();
                        if let Some((_, which)) = window_exprs.iter().find(|(w, _)| w == e) {
                            Some(k + which)
                        } else if window && is_window_col(e, "window_start") {
                            Some(key_exprs.len())
                        } else if window && is_window_col(e, "window_end") {
                            Some(key_exprs.len() + 1)
                        } else {
                            None
                        }
                    });
                    outputs.push((n, c, through));
                    direct_calls.push(matches!(e, E::Function(_)).then_some(e));
                }
                other => return Err(SqlError::at(
                    other.span(),
                    "`*` with GROUP BY is not supported: name the grouped columns and aggregates",
                )),
            }
        }
        let having = match &s.having {
            None => None,
            Some(h) => {
                let mut scope = Scope {
                    columns: &input_scope_cols,
                    substitutions: &substitutions,
                    grouped: true,
                    aggregates: Some(&mut hook),
                    no_aggregates_reason: "",
                };
                let c = compile(h, &mut scope)?;
                boolean(&c, h)?;
                Some((h, c))
            }
        };
        for (o, e) in outputs.iter_mut().zip(&direct_calls) {
            if let (None, Some(e)) = (o.2, e) {
                o.2 = calls
                    .iter()
                    .position(|(call, _, _, _)| call == *e)
                    .map(|i| base + i);
            }
        }
        // GROUP BY without aggregates and without a window is a distinct:
        // the first row of each key, once (append-only).
        let distinct_only = calls.is_empty() && !window;
        if calls.is_empty() && window {
            // A window's keys without aggregates: counted so each has a row.
            calls.push((
                E::Identifier(ast::Ident::new("(rows)")),
                AggFunction::Count,
                None,
                false,
            ));
        }
        // The aggregate's input: the keys and arguments, computed if any is not a column.
        let plain_keys: Option<Vec<usize>> = key_exprs
            .iter()
            .map(|(e, _)| column_index(e, &rel.columns))
            .collect();
        let plain_args: Option<Vec<Option<usize>>> = calls
            .iter()
            .map(|(e, _, a, _)| match (e, a) {
                (_, None) => Some(None),
                (E::Function(f), Some(_)) if f.filter.is_none() => {
                    let args = call_args(f, e).ok()?;
                    column_index(args[0], &rel.columns).map(Some)
                }
                _ => None,
            })
            .collect();
        let (input, key_cols, arg_cols): (Rel, Vec<usize>, Vec<Option<usize>>) =
            match (plain_keys.filter(|_| !distinct_only), plain_args) {
                (Some(k), Some(a)) => (rel.clone(), k, a),
                _ => {
                    // Computed columns are named by their SQL text, so
                    // that `weir explain` and a late record's dead letter
                    // (this row, as JSON) read as the query does.
                    let mut taken: Vec<String> = ["window_start", "window_end"]
                        .into_iter()
                        .map(String::from)
                        .chain(key_exprs.iter().filter_map(|(e, _)| {
                            column_index(e, &rel.columns)
                                .map(|c| rel.columns[c].name.to_ascii_lowercase())
                        }))
                        .collect();
                    let mut readable = |text: String, fallback: String| {
                        let lower = text.to_ascii_lowercase();
                        let name = if taken.contains(&lower) {
                            fallback
                        } else {
                            text
                        };
                        taken.push(name.to_ascii_lowercase());
                        name
                    };
                    let mut pre: Vec<(String, Compiled, Option<usize>)> = Vec::new();
                    for (i, (e, c)) in key_exprs.iter().enumerate() {
                        let from = column_index(e, &rel.columns);
                        let name = match (from, &c.constant) {
                            (Some(_), _) | (None, Some(_)) => format!("k{i}"),
                            (None, None) => readable(e.to_string(), format!("k{i}")),
                        };
                        pre.push((name, c.clone(), from));
                    }
                    let mut arg_cols = Vec::new();
                    for (i, (call, _, a, _)) in calls.iter().enumerate() {
                        match a {
                            Some(c) => {
                                // `price`, or `* FILTER (WHERE price > 10)`
                                // for COUNT(*) FILTER (1 where it holds).
                                let name = match call {
                                    E::Function(f) => {
                                        let arg = call_args(f, call)
                                            .ok()
                                            .and_then(|args| args.first().map(|a| a.to_string()))
                                            .unwrap_or_else(|| "*".into());
                                        let text = match &f.filter {
                                            Some(p) => format!("{arg} FILTER (WHERE {p})"),
                                            None => arg,
                                        };
                                        readable(text, format!("a{i}"))
                                    }
                                    _ => format!("a{i}"),
                                };
                                arg_cols.push(Some(pre.len()));
                                pre.push((name, c.clone(), None));
                            }
                            None => arg_cols.push(None),
                        }
                    }
                    // A given window's columns pass through.
                    if let Some((ws, we)) = given {
                        for c in [ws, we] {
                            pre.push((
                                rel.columns[c].name.clone(),
                                Compiled::column(c, DataType::Timestamp),
                                Some(c),
                            ));
                        }
                    }
                    // Key columns keep their names (they name the result's key).
                    for (i, (e, _)) in key_exprs.iter().enumerate() {
                        if let Some(c) = column_index(e, &rel.columns) {
                            pre[i].0 = rel.columns[c].name.clone();
                        }
                    }
                    let time = rel.time;
                    let mut p =
                        self.finish_projection(rel.clone(), pre, &format!("{name}.group-input"))?;
                    // The rows keep their event time: the map keeps each row's time.
                    p.time = time.and(p.time);
                    let k = (0..key_exprs.len()).collect();
                    (p, k, arg_cols)
                }
            };
        // Each aggregate is named as the SELECT list names it (the state's
        // results then read as the query says), else `agg<i>`.
        let mut taken: Vec<String> = key_cols
            .iter()
            .map(|c| input.columns[*c].name.to_ascii_lowercase())
            .chain(["window_start".into(), "window_end".into()])
            .collect();
        let agg_names: Vec<String> = calls
            .iter()
            .enumerate()
            .map(|(i, (call, _, _, _))| {
                let named = s.projection.iter().find_map(|item| match item {
                    SelectItem::ExprWithAlias { expr, alias } if expr == call => {
                        Some(alias.value.clone())
                    }
                    _ => None,
                });
                let name = named
                    .filter(|n| !taken.contains(&n.to_ascii_lowercase()))
                    .unwrap_or_else(|| format!("agg{i}"));
                taken.push(name.to_ascii_lowercase());
                name
            })
            .collect();
        let aggs: Vec<Agg> = calls
            .iter()
            .zip(&arg_cols)
            .enumerate()
            .map(|(i, ((_, f, _, distinct), col))| Agg {
                function: *f,
                column: *col,
                name: agg_names[i].clone(),
                distinct: *distinct,
            })
            .collect();
        let key_names: Vec<String> = key_cols
            .iter()
            .map(|c| input.columns[*c].name.clone())
            .collect();
        let key_refs: Vec<&str> = key_names.iter().map(String::as_str).collect();
        let keyed = input.stream.key_by(&key_refs);
        let agg_uid = self.uid(&format!(
            "{name}.{}",
            if window {
                "window-aggregate"
            } else if distinct_only {
                "distinct"
            } else {
                "aggregate"
            }
        ));
        let agg_kind = self.catalog.aggregate.kind.take();
        let (stream, updating) = if window {
            if input.updating.is_some() {
                return Err(SqlError::at(
                    s.span(),
                    "a window aggregate over an updating result is not supported",
                ));
            }
            let w = match (&tvf, given.and(input.window)) {
                (Some(t), _) => keyed.window(t.spec),
                (None, Some((ws, we))) => {
                    keyed.window_by_columns(&input.columns[ws].name, &input.columns[we].name)
                }
                (None, None) => {
                    return Err(SqlError::at(
                        s.span(),
                        "the window columns were lost on the way",
                    ))
                }
            };
            let every_update = self.catalog.aggregate.window_every_update;
            let mut w = w
                .allowed_lateness(self.sql.pipeline.allowed_lateness)
                .every_update(every_update);
            if self.sql.pipeline.on_late == LatePolicy::DeadLetter {
                let topic = input
                    .source
                    .as_ref()
                    .and_then(|src| self.dead_letter_topic(src));
                match topic {
                    Some(topic) => {
                        w = w.late_to(&topic);
                        if let Some((value, origin)) = &self.catalog.aggregate.late_record {
                            w = w.late_value(value).late_origin(origin);
                        }
                    }
                    None => {
                        return Err(SqlError::at(
                            s.span(),
                            "[pipeline] on_late = \"dead-letter\" writes late records to the window's source's dead_letter_topic, and it has none",
                        ))
                    }
                }
            }
            // With allowed lateness a late record updates a fired window's
            // row (update-before, update-after): the result is updating,
            // unique by its keys and window.
            // So does a window that emits on every row.
            let late_updates = (self.sql.pipeline.allowed_lateness > Duration::ZERO
                || every_update)
                .then(|| (0..key_cols.len() + 2).collect::<Vec<_>>());
            (w.aggregate(&agg_uid, aggs), late_updates)
        } else if distinct_only {
            (keyed.deduplicate(&agg_uid), None)
        } else {
            (
                keyed.aggregate_emitting(&agg_uid, aggs, self.catalog.aggregate.emit),
                Some((0..key_cols.len()).collect::<Vec<_>>()),
            )
        };
        let stream = match agg_kind {
            Some(kind) => stream.with_kind(&kind),
            None => stream,
        };
        let mut agg_columns: Vec<ScopeColumn> = key_cols
            .iter()
            .map(|c| ScopeColumn {
                name: input.columns[*c].name.clone(),
                qualifier: None,
                ty: input.columns[*c].ty.clone(),
            })
            .collect();
        if window {
            for n in ["window_start", "window_end"] {
                agg_columns.push(ScopeColumn {
                    name: n.into(),
                    qualifier: None,
                    ty: DataType::Timestamp,
                });
            }
        }
        for (i, (_, f, a, _)) in calls.iter().enumerate() {
            agg_columns.push(ScopeColumn {
                name: agg_names[i].clone(),
                qualifier: None,
                ty: agg_type(*f, a.as_ref()),
            });
        }
        let updated_by = updating.is_some().then(|| agg_uid.clone());
        if let Some(key) = &updating {
            let mode = changelog_mode(key, &agg_columns);
            self.updating.insert(agg_uid.clone(), Some(mode));
        }
        let mut out = Rel {
            stream,
            columns: agg_columns,
            updating,
            updated_by,
            time: None,
            source: input.source.clone(),
            window: window.then_some((key_cols.len(), key_cols.len() + 1)),
            window_end: window.then_some(key_cols.len() + 1),
            timed: input.timed,
        };
        if let Some((h, c)) = having {
            if out.updating.is_some() {
                return Err(err(
                    h,
                    "HAVING over a running (non-windowed) aggregate is not supported yet (a key that stops passing would have to be deleted)",
                ));
            }
            let uid = self.uid(&format!("{name}.having"));
            let op = uid.clone();
            let f = c.eval;
            let stream = out.stream.filter(&uid, move |v| match f(v) {
                Ok(Value::Bool(b)) => b,
                Ok(_) => false,
                Err(e) => {
                    note_eval_error(&op, &e);
                    false
                }
            });
            out.stream = stream;
        }
        if out.updating.is_some() || input.updating.is_some() {
            let by = out.updated_by.as_deref().or(input.updated_by.as_deref());
            for (i, item) in s.projection.iter().enumerate() {
                if let SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } = item
                {
                    let n = output_name(item, i);
                    refuse_watermark_over_updating(e, by, &format!("column {n:?}"))?;
                }
            }
        }
        if input.updating.is_some() {
            for k in &keys {
                refuse_watermark_over_updating(
                    k,
                    input.updated_by.as_deref(),
                    &format!("GROUP BY {k}"),
                )?;
            }
        }
        // The unique key (keys, and a late-updating window's columns)
        // follows the columns the SELECT list passes through.
        let projected = self.finish_projection(out, outputs, &format!("{name}.select"))?;
        if no_keys && projected.updating.is_some() {
            return Err(SqlError::at(
                s.span(),
                "an aggregate over the whole stream without GROUP BY is an updating result with no key to upsert by; GROUP BY a column, or aggregate per window",
            ));
        }
        Ok(projected)
    }
}

fn agg_type(f: AggFunction, arg: Option<&Compiled>) -> DataType {
    match (f, arg.and_then(|a| a.data_type())) {
        (AggFunction::Count, _) => DataType::BigInt,
        (AggFunction::Avg, _) => DataType::Double,
        (_, Some(DataType::Int)) => DataType::BigInt,
        (_, Some(t)) => t.clone(),
        (_, None) => DataType::BigInt,
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

/// The column an expression names directly, if it names exactly one.
fn column_index(e: &E, columns: &[ScopeColumn]) -> Option<usize> {
    joins::resolve(e, columns).ok().flatten()
}

fn output_name(item: &SelectItem, position: usize) -> String {
    match item {
        SelectItem::ExprWithAlias { alias, .. } => alias.value.clone(),
        SelectItem::UnnamedExpr(E::Identifier(i)) => i.value.clone(),
        SelectItem::UnnamedExpr(E::CompoundIdentifier(p)) => p
            .last()
            .map_or_else(|| format!("EXPR${position}"), |i| i.value.clone()),
        _ => format!("EXPR${position}"),
    }
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

fn schema_of(columns: &[ScopeColumn]) -> Schema {
    Schema::new(
        columns
            .iter()
            .map(|c| crate::dataflow::row::Field::new(c.name.clone(), c.ty.clone()))
            .collect(),
    )
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

fn contains_aggregate(e: &E) -> bool {
    let text = e.to_string().to_ascii_uppercase();
    // A cheap pre-check, then the tree.
    if !["COUNT", "SUM", "MIN", "MAX", "AVG"]
        .iter()
        .any(|f| text.contains(f))
    {
        return false;
    }
    walk(
        e,
        &mut |x| matches!(x, E::Function(f) if is_aggregate(&function_name(f))),
    )
}
