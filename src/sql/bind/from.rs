use super::*;

impl Binder<'_> {
    /// FROM: one relation, a window function over one, a relation with
    /// `CROSS JOIN UNNEST(...)`, or joins ([`Planner::joins`]). Also
    /// returns what is left of WHERE to filter by (joins take the
    /// conjuncts they can use).
    pub(super) fn from(
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
        let is_lateral = |t: &TableFactor| matches!(t, TableFactor::Function { lateral: true, .. });
        let is_step = |j: &ast::Join| {
            matches!(j.relation, TableFactor::UNNEST { .. }) || is_lateral(&j.relation)
        };
        // `FROM t, LATERAL TABLE(f(x))`: the table function beside t, as
        // CROSS JOIN LATERAL TABLE would have it.
        let laterals_after_comma = select.from.len() > 1
            && select.from[1..]
                .iter()
                .all(|t| t.joins.is_empty() && is_lateral(&t.relation));
        if (select.from.len() > 1 && !laterals_after_comma)
            || select
                .from
                .iter()
                .any(|t| t.joins.iter().any(|j| !is_step(j)))
        {
            let (rel, rest) = self.joins(select, name)?;
            return Ok((rel, None, rest));
        }
        let Some(twj) = select.from.first() else {
            return Err(SqlError::at(
                select.span(),
                "a SELECT needs FROM: weir's queries read a source or a view",
            ));
        };
        // Each step after the first relation: (LEFT JOIN ... ON TRUE, what).
        let mut steps: Vec<(Option<&JoinOperator>, &TableFactor)> = twj
            .joins
            .iter()
            .map(|j| (Some(&j.join_operator), &j.relation))
            .collect();
        steps.extend(select.from[1..].iter().map(|t| (None, &t.relation)));
        let (mut rel, tvf) = self.table_factor(&twj.relation, name, false)?;
        for (i, (operator, relation)) in steps.iter().enumerate() {
            let later: Vec<ast::Join> = steps[i + 1..]
                .iter()
                .map(|(op, r)| ast::Join {
                    relation: (*r).clone(),
                    global: false,
                    join_operator: op
                        .cloned()
                        .unwrap_or(JoinOperator::CrossJoin(ast::JoinConstraint::None)),
                })
                .collect();
            let mentioned = mentioned(select, &later);
            let on_true = |c: &ast::JoinConstraint| {
                matches!(c, ast::JoinConstraint::On(E::Value(v))
                    if v.value == ast::Value::Boolean(true))
            };
            match (operator, relation) {
                (
                    None | Some(JoinOperator::CrossJoin(_) | JoinOperator::CrossApply),
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
                        relation.span(),
                        name,
                        mentioned.as_ref(),
                    )?;
                }
                (None | Some(JoinOperator::CrossJoin(_)), r) if is_lateral(r) && tvf.is_none() => {
                    rel = self.lateral_table(rel, r, false, name, mentioned.as_ref())?;
                }
                (Some(JoinOperator::Join(c) | JoinOperator::Inner(c)), r)
                    if is_lateral(r) && on_true(c) && tvf.is_none() =>
                {
                    rel = self.lateral_table(rel, r, false, name, mentioned.as_ref())?;
                }
                (Some(JoinOperator::Left(c) | JoinOperator::LeftOuter(c)), r)
                    if is_lateral(r) && on_true(c) && tvf.is_none() =>
                {
                    rel = self.lateral_table(rel, r, true, name, mentioned.as_ref())?;
                }
                (_, r) if is_lateral(r) => {
                    return Err(SqlError::at(
                        r.span(),
                        "a table function is joined as CROSS JOIN LATERAL TABLE(f(x)), \
                         [LEFT] JOIN LATERAL TABLE(f(x)) ON TRUE, or FROM t, LATERAL TABLE(f(x)), \
                         over a table that is not a window",
                    ))
                }
                _ => return Err(SqlError::at(
                    relation.span(),
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
    pub(super) fn joins(
        &mut self,
        select: &ast::Select,
        name: &str,
    ) -> Result<(Rel, Option<E>), SqlError> {
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

    /// The AS OF expression of a table written `t FOR SYSTEM_TIME AS OF e`.
    pub(super) fn as_of(&mut self, t: &TableFactor) -> Result<Option<E>, SqlError> {
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
    pub(super) fn join_input(
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
            // A window join: each side's rows with their windows.
            (rel, Some(tvf)) => self.window_rows(rel, tvf, t.span(), name),
        }
    }

    /// One table of FROM; `versioned` when it may be read `FOR
    /// SYSTEM_TIME AS OF` (the right side of a join, which took it).
    pub(super) fn table_factor(
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

    /// A window table function's rows without a GROUP BY (a top-N, a
    /// join or a SELECT over them): each row once per window it falls in,
    /// with `window_start`, `window_end` and `window_time` after its
    /// columns. SESSION windows grow as rows come, so their rows are not
    /// assigned one by one: they are aggregated.
    pub(super) fn window_rows(
        &mut self,
        rel: Rel,
        tvf: WindowTvf,
        span: sqlparser::tokenizer::Span,
        name: &str,
    ) -> Result<Rel, SqlError> {
        if let WindowSpec::Session { .. } = tvf.spec {
            return Err(SqlError::at(
                span,
                "a SESSION window's rows are not assigned one by one (a session grows as rows come): aggregate them with GROUP BY window_start, window_end",
            ));
        }
        let Some(time) = rel.time else {
            return Err(SqlError::at(
                span,
                "a window table function needs the table's event time",
            ));
        };
        let qualifier = rel.columns.first().and_then(|c| c.qualifier.clone());
        let n = rel.columns.len();
        let mut columns = rel.columns.clone();
        for c in ["window_start", "window_end", "window_time"] {
            columns.push(ScopeColumn {
                name: c.into(),
                qualifier: qualifier.clone(),
                ty: DataType::Timestamp,
            });
        }
        let uid = self.uid(&format!("{name}.window-rows"));
        let op = lp::window_tvf::WindowTvf {
            spec: tvf.spec,
            time,
            schema: schema_of(&columns),
        };
        let rows = Rel {
            columns,
            window: Some((n, n + 1)),
            window_end: Some(n + 1),
            ..rel.clone()
        };
        Ok(self.plan.add(&uid, Op::WindowTvf(op), &[&rel], rows))
    }

    /// `TUMBLE(TABLE t, DESCRIPTOR(col), size)`, `HOP(..., slide, size)`,
    /// `SESSION(..., gap)`.
    pub(super) fn window_tvf(&mut self, e: &E) -> Result<(Rel, WindowTvf), SqlError> {
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
            if function_name(t) == crate::sql::dialect::TABLE_ARGUMENT {
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
        // Flink aligns windows over a TIMESTAMP_LTZ to the session time
        // zone's days and hours, which daylight saving makes 23 or 25
        // hours long; weir's windows are fixed lengths of the UTC
        // timeline, which agree with that only where the zone is UTC.
        let time = rel.time.expect("checked above");
        if rel.columns[time].ty == DataType::TimestampLtz
            && self.session.time_zone.to_fixed_offset().ok() != Some(jiff::tz::Offset::UTC)
        {
            return Err(err(
                args[1],
                format!(
                    "a window over the TIMESTAMP_LTZ column {descriptor:?} would be aligned to the \
                     session time zone ([pipeline] time_zone = {:?}), and weir's windows are aligned \
                     to UTC: declare the column TIMESTAMP(3) (the wall-clock time), or leave \
                     time_zone at UTC",
                    self.session.time_zone.iana_name().unwrap_or("its offset")
                ),
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
}
