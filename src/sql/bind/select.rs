use super::*;

impl Binder<'_> {
    pub(super) fn select(&mut self, s: &ast::Select, name: &str) -> Result<Rel, SqlError> {
        // `[NOT] EXISTS` and `[NOT] IN (SELECT ...)` conjuncts of WHERE
        // are semi- and anti-joins after the rest of WHERE.
        let (plain, subqueries): (Vec<E>, Vec<E>) = s
            .selection
            .as_ref()
            .map(joins::conjuncts)
            .unwrap_or_default()
            .into_iter()
            .partition(|c| !super::subquery::is_subquery_predicate(c));
        let stripped;
        let s = if subqueries.is_empty() {
            s
        } else {
            stripped = ast::Select {
                selection: joins::conjoin(plain),
                ..s.clone()
            };
            &stripped
        };
        let (mut rel, mut tvf, rest) = self.from(s, name)?;
        let grouped = !matches!(&s.group_by, GroupByExpr::Expressions(g, _) if g.is_empty())
            || s.having.is_some()
            || s.projection.iter().any(|i| match i {
                SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => {
                    contains_aggregate(e)
                }
                _ => false,
            });
        // A window TVF read without a GROUP BY: its rows, each with its
        // window, which WHERE and the SELECT list can name.
        if !grouped && s.distinct.is_none() {
            if let Some(t) = tvf.take() {
                rel = self.window_rows(rel, t, s.span(), name)?;
            }
        }
        // Scalar subqueries of WHERE and the SELECT list: left joins with
        // their aggregates, before WHERE reads them.
        let mut scalars = Vec::new();
        if let Some(w) = &rest {
            super::scalar::scalar_subqueries(w, &mut scalars);
        }
        let in_list = {
            let mut found = Vec::new();
            for item in &s.projection {
                if let SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } = item
                {
                    super::scalar::scalar_subqueries(e, &mut found);
                }
            }
            found
        };
        if grouped || s.distinct.is_some() || super::over::has_over_calls(&s.projection) {
            if let Some(q) = in_list.first() {
                return Err(err(
                    q,
                    "a scalar subquery in a SELECT with GROUP BY, DISTINCT or OVER is not supported: compute it in a subquery of FROM first",
                ));
            }
        }
        for q in in_list {
            if !scalars.contains(&q) {
                scalars.push(q);
            }
        }
        let mut substitutions = Vec::new();
        for (i, q) in scalars.iter().enumerate() {
            let (joined, value) = self.scalar_subquery(rel, q, i, name)?;
            rel = joined;
            substitutions.push((q.clone(), value));
        }
        if let Some(w) = &rest {
            rel = self.filter_with(rel, w, &substitutions, &format!("{name}.where"))?;
        }
        for e in &subqueries {
            rel = self.subquery_join(rel, e, name)?;
        }
        if let Some(d) = &s.distinct {
            return self.select_distinct(rel, tvf, d, s, name);
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
            if let Some(h) = &s.having {
                return Err(err(h, "HAVING needs GROUP BY or an aggregate"));
            }
            if super::over::has_over_calls(&s.projection) {
                return self.over_aggregate(rel, &s.projection, name);
            }
            return self.project_with(
                rel,
                &s.projection,
                &substitutions,
                &format!("{name}.select"),
            );
        }
        self.aggregate(rel, tvf, &group, s, name)
    }

    /// `SELECT DISTINCT a, b FROM ...`: a GROUP BY of the selected
    /// expressions without aggregates (a Deduplicate over an append-only
    /// input; over an updating one, a count per row that deletes it when
    /// it reaches zero).
    fn select_distinct(
        &mut self,
        rel: Rel,
        tvf: Option<WindowTvf>,
        d: &ast::Distinct,
        s: &ast::Select,
        name: &str,
    ) -> Result<Rel, SqlError> {
        if let ast::Distinct::On(_) = d {
            return Err(SqlError::at(
                s.span(),
                "SELECT DISTINCT ON is not Flink SQL: rank with ROW_NUMBER() OVER (PARTITION BY ...) and keep rank 1",
            ));
        }
        let grouped = !matches!(&s.group_by, GroupByExpr::Expressions(g, _) if g.is_empty());
        let aggregates = s.projection.iter().any(|i| match i {
            SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => {
                contains_aggregate(e)
            }
            _ => false,
        });
        if grouped || aggregates || s.having.is_some() {
            return Err(SqlError::at(
                s.span(),
                "SELECT DISTINCT with GROUP BY or aggregates is not supported: its rows are unique by the GROUP BY already; drop DISTINCT",
            ));
        }
        if tvf.is_some() {
            return Err(SqlError::at(
                s.span(),
                "SELECT DISTINCT over a window table function's rows is not supported: GROUP BY window_start, window_end and the columns",
            ));
        }
        let mut group = Vec::new();
        for item in &s.projection {
            match item {
                SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => {
                    group.push(e)
                }
                other => {
                    return Err(SqlError::at(
                        other.span(),
                        "SELECT DISTINCT * is not supported: name the columns",
                    ))
                }
            }
        }
        self.aggregate(rel, None, &group, s, name)
    }

    pub(super) fn filter(&mut self, rel: Rel, predicate: &E, uid: &str) -> Result<Rel, SqlError> {
        self.filter_with(rel, predicate, &[], uid)
    }

    /// [`Self::filter`] with `substitutions` (scalar subqueries' values).
    pub(super) fn filter_with(
        &mut self,
        rel: Rel,
        predicate: &E,
        substitutions: &[(E, Compiled)],
        uid: &str,
    ) -> Result<Rel, SqlError> {
        // Over an updating result each change is filtered by its own row:
        // an update-before passes if the old row did, an update-after if
        // the new one does, so a row that stops passing is taken back (a
        // lone update-before; an upsert sink writes it as a tombstone).
        if rel.updating.is_some() {
            refuse_watermark_over_updating(predicate, rel.updated_by.as_deref(), "WHERE")?;
        }
        let c = compile(
            predicate,
            &mut Scope {
                substitutions,
                ..Scope::plain(&rel.columns, &self.session)
            },
        )?;
        boolean(&c, predicate)?;
        // Constant folding: a predicate that is TRUE whatever the row
        // (`WHERE 1 = 1`, as generated SQL has it) makes no node.
        if c.constant == Some(Value::Bool(true)) {
            return Ok(rel);
        }
        Ok(self.add_filter(rel, predicate, c.eval, uid))
    }

    /// A Filter node over `rel`: its rows for which `predicate` is TRUE.
    pub(super) fn add_filter(
        &mut self,
        rel: Rel,
        text: &E,
        predicate: Arc<EvalFn>,
        uid: &str,
    ) -> Rel {
        let uid = self.uid(uid);
        let filter = lp::filter::Filter {
            text: text.to_string(),
            predicate,
            on_failure: self.on_function_failure(&rel),
        };
        self.plan
            .add(&uid, Op::Filter(filter), &[&rel], rel.clone())
    }

    /// The SELECT list over a relation without aggregation.
    pub(super) fn project(
        &mut self,
        rel: Rel,
        items: &[SelectItem],
        uid: &str,
    ) -> Result<Rel, SqlError> {
        self.project_with(rel, items, &[], uid)
    }

    /// [`Self::project`] with `substitutions` (scalar subqueries' values).
    pub(super) fn project_with(
        &mut self,
        rel: Rel,
        items: &[SelectItem],
        substitutions: &[(E, Compiled)],
        uid: &str,
    ) -> Result<Rel, SqlError> {
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
                    let c = compile(
                        e,
                        &mut Scope {
                            substitutions,
                            ..Scope::plain(&rel.columns, &self.session)
                        },
                    )?;
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
    pub(super) fn finish_projection(
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
        let outputs = outputs
            .into_iter()
            .map(|(_, c, from)| (from, c.eval))
            .collect();
        let project = lp::project::Project {
            inner: None,
            schema,
            outputs,
            over_updating: rel.updating.is_some(),
            on_failure: self.on_function_failure(&rel),
        };
        let projected = Rel {
            node: 0,
            columns,
            time,
            updating,
            updated_by: rel.updated_by.clone(),
            source: rel.source.clone(),
            window,
            window_end,
            timed: rel.timed,
        };
        Ok(self
            .plan
            .add(&uid, Op::Project(project), &[&rel], projected))
    }
}

pub(super) fn output_name(item: &SelectItem, position: usize) -> String {
    match item {
        SelectItem::ExprWithAlias { alias, .. } => alias.value.clone(),
        SelectItem::UnnamedExpr(E::Identifier(i)) => i.value.clone(),
        SelectItem::UnnamedExpr(E::CompoundIdentifier(p)) => p
            .last()
            .map_or_else(|| format!("EXPR${position}"), |i| i.value.clone()),
        _ => format!("EXPR${position}"),
    }
}

/// The column an expression names directly, if it names exactly one.
pub(super) fn column_index(e: &E, columns: &[ScopeColumn]) -> Option<usize> {
    joins::resolve(e, columns).ok().flatten()
}
