use super::*;

impl Binder<'_> {
    /// Top-N: `FROM (SELECT ..., ROW_NUMBER() OVER (PARTITION BY p ORDER
    /// BY o) AS rn FROM t ...) WHERE rn <= N` (also `rn < N`, `rn = 1`),
    /// as a keyed top-N operator ([`crate::dataflow::ops::top_n`]); None
    /// when the subquery has no ROW_NUMBER. With a window's `window_end`
    /// in PARTITION BY, each window's rows come once when it closes.
    pub(super) fn top_n(
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
        // Straight over a window TVF's rows: a top-N (or deduplication)
        // per window when PARTITION BY names the window.
        if let Some(tvf) = tvf {
            rel = self.window_rows(rel, tvf, inner.span(), name)?;
        }
        if let Some(wh) = &inner_rest {
            rel = self.filter(rel, wh, &format!("{name}.where"))?;
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
        // Over an updating result every row of a partition is kept, so
        // that the next moves up when one of the best N is taken back.
        // A top-N per window ranks a window's rows once, when it closes:
        // a change after that (allowed lateness) cannot be ranked again.
        let retract = rel.updating.is_some();
        if retract && window_end.is_some() {
            let by = rel.updated_by.as_deref().unwrap_or("an operator");
            return Err(SqlError::at(
                f.span(),
                format!("ROW_NUMBER per window over an updating result (operator {by:?} changes rows it emitted, as a window with allowed lateness does) is not supported: rank per window over append-only rows"),
            ));
        }
        let uid = self.uid(&format!("{name}.top-n"));
        let top_n = lp::top_n::TopN {
            partition: pcols.clone(),
            spec: TopNSpec {
                order,
                limit,
                window_end,
                retract,
            },
            rank_as: "$rank".into(),
            ttl: match window_end {
                Some(_) => None,
                None => self.state_ttl(&rel, "this top-N", f.span())?,
            },
        };
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
        let ranked = Rel {
            node: 0,
            columns,
            updated_by: updating.as_ref().map(|_| uid.clone()),
            updating,
            time: None,
            source: rel.source.clone(),
            window: rel.window,
            window_end: rel.window_end,
            timed: rel.timed,
        };
        let ranked = self.plan.add(&uid, Op::TopN(top_n), &[&rel], ranked);
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
}
