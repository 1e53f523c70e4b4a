use super::*;

impl Binder<'_> {
    /// One join of `left` and `right` by `kind` with the ON conjuncts;
    /// an inner join also takes the WHERE conjuncts over its two inputs.
    /// A conjunct over one input filters it first where that keeps the
    /// join's meaning; equalities of the two sides are the keys; the rest
    /// is the residual condition each pair of rows must meet.
    pub(super) fn join_step(
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
        // A conjunct over the left side alone filters it first in a
        // semi-join (a left row failing it has no match either way), but
        // not in an anti-join (such a row has no match, so it is kept).
        let push_left = matches!(kind, JoinKind::Inner | JoinKind::Right | JoinKind::Semi)
            && left.updating.is_none();
        let push_right = matches!(
            kind,
            JoinKind::Inner | JoinKind::Left | JoinKind::Semi | JoinKind::Anti
        ) && right.updating.is_none();
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
            match (as_of.is_some(), kind) {
                (true, _) => "temporal-join",
                (false, JoinKind::Semi) => "semi-join",
                (false, JoinKind::Anti) => "anti-join",
                (false, _) => "join",
            }
        ));
        if left.updating.is_some() || right.updating.is_some() {
            let by = left.updated_by.as_deref().or(right.updated_by.as_deref());
            for c in &residual {
                refuse_watermark_over_updating(c, by, "the join's ON condition")?;
            }
        }
        let residual = joins::conjoin(residual);
        let condition_text = residual.as_ref().map(|e| e.to_string());
        let condition: Option<JoinCondition> = match residual {
            None => None,
            Some(e) => {
                let c = compile(&e, &mut Scope::plain(&joined, &self.session))?;
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
            return self.temporal_join(join, kind, (at, span), (condition, condition_text), &uid);
        }
        let append = left.updating.is_none() && right.updating.is_none();
        let watermarked =
            |r: &Rel| -> Vec<usize> { r.time.into_iter().chain(r.window_end).collect() };
        let mut expiry = [None, None];
        // Inner and outer joins of append-only inputs whose condition
        // bounds each side by the other's time (a window or interval join)
        // free their rows at the watermark; an outer one pads a row when
        // it expires unmatched, so its output stays append-only too.
        if append && !kind.filters_left() {
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
        let join = lp::join::Join {
            keys: [lk.clone(), rk.clone()],
            spec,
            condition: condition_text,
        };
        let n = left.columns.len();
        // A semi- or anti-join's rows are the left rows: unique by the
        // left's key, taken back and given again as the right side changes.
        let filters_left = kind.filters_left();
        let bounded = expiry.iter().all(Option::is_some);
        let updating = if (kind == JoinKind::Inner && append) || (bounded && !filters_left) {
            None
        } else if filters_left {
            Some(left.updating.clone().unwrap_or_default())
        } else {
            Some(match (&left.updating, &right.updating) {
                (Some(a), Some(b)) if !a.is_empty() && !b.is_empty() => {
                    a.iter().copied().chain(b.iter().map(|i| i + n)).collect()
                }
                _ => Vec::new(),
            })
        };
        let joined = if filters_left {
            left.columns.clone()
        } else {
            joined
        };
        let window = match (left.window, right.window) {
            (Some(lw), Some(rw))
                if matches!(kind, JoinKind::Inner | JoinKind::Left)
                    && lk.iter().zip(&rk).any(|(a, b)| *a == lw.1 && *b == rw.1) =>
            {
                Some(lw)
            }
            _ => None,
        };
        let joined = Rel {
            node: 0,
            columns: joined,
            updated_by: updating.as_ref().map(|_| uid.clone()),
            updating,
            time: None,
            source: None,
            window_end: window.map(|w| w.1),
            timed: left.timed && right.timed,
            window,
        };
        Ok(self
            .plan
            .add(&uid, Op::Join(join), &[&left, &right], joined))
    }

    /// The join of a stream (`left`) with a table's versions (`right`):
    /// `AS OF` the stream's event-time column joins the version valid then,
    /// `AS OF PROCTIME()` the table's row when the stream's row arrives.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn temporal_join(
        &mut self,
        (left, right, (lk, rk)): (Rel, Rel, (Vec<usize>, Vec<usize>)),
        kind: JoinKind,
        (at, span): (E, sqlparser::tokenizer::Span),
        (condition, condition_text): (Option<JoinCondition>, Option<String>),
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
        let join = lp::join::TemporalJoin {
            keys: [lk, rk],
            spec,
            condition: condition_text,
        };
        let joined = Rel {
            node: 0,
            columns: left.columns.iter().chain(&right.columns).cloned().collect(),
            updating: None,
            updated_by: None,
            // A joined row has its stream row's time.
            time: left.time,
            source: None,
            window: None,
            window_end: None,
            timed: left.timed,
        };
        Ok(self
            .plan
            .add(uid, Op::TemporalJoin(join), &[&left, &right], joined))
    }

    /// The columns of `rel` that `exprs` name, computing those that are
    /// not plain columns into hidden columns at the end (`$key0`, ...).
    pub(super) fn key_columns<'e>(
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
                    let c = compile(e, &mut Scope::plain(&rel.columns, &self.session))?;
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
}
