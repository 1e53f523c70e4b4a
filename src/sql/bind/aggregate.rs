use super::*;

impl Binder<'_> {
    pub(super) fn aggregate(
        &mut self,
        rel: Rel,
        tvf: Option<WindowTvf>,
        group: &[&E],
        s: &ast::Select,
        name: &str,
    ) -> Result<Rel, SqlError> {
        let session = self.session.clone();
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
            let c = compile(k, &mut Scope::plain(&input_scope_cols, &self.session))?;
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
        // Each call's user-defined aggregate function, if it is one.
        let mut users: Vec<Option<UserAggregate>> = Vec::new();
        let mut hook = |f: &ast::Function, whole: &E| -> Result<Compiled, SqlError> {
            // LISTAGG(x [, sep]) is ARRAY_JOIN(ARRAY_AGG(x), sep): the
            // aggregate keeps the values, a projection joins them.
            if function_name(f).eq_ignore_ascii_case("LISTAGG") {
                let args = call_args(f, whole)?;
                let separator = match args.as_slice() {
                    [_] => Value::from(","),
                    [_, sep] => {
                        match compile(sep, &mut Scope::plain(&input_scope_cols, &self.session))?
                            .constant
                        {
                            Some(v @ Value::String(_)) => v,
                            _ => return Err(err(sep, "LISTAGG's separator is a constant string")),
                        }
                    }
                    _ => return Err(err(whole, "LISTAGG takes a value and a separator")),
                };
                let mut array_agg = f.clone();
                array_agg.name = ast::ObjectName::from(vec![ast::Ident::new("ARRAY_AGG")]);
                if let ast::FunctionArguments::List(l) = &mut array_agg.args {
                    l.args.truncate(1);
                }
                let array_expr = E::Function(array_agg.clone());
                let column = match calls.iter().position(|(e, _, _, _)| *e == array_expr) {
                    Some(i) => base + i,
                    None => {
                        let arg = match args.first() {
                            Some(a) => {
                                compile(a, &mut Scope::plain(&input_scope_cols, &self.session))?
                            }
                            None => unreachable!("LISTAGG has an argument"),
                        };
                        if !matches!(arg.ty, Ty::Data(DataType::String) | Ty::Null) {
                            return Err(err(
                                whole,
                                format!("LISTAGG joins VARCHAR values, not {}", arg.ty),
                            ));
                        }
                        let distinct = matches!(&f.args, ast::FunctionArguments::List(l)
                            if matches!(l.duplicate_treatment, Some(ast::DuplicateTreatment::Distinct)));
                        calls.push((array_expr, AggFunction::ArrayAgg, Some(arg), distinct));
                        users.push(None);
                        base + calls.len() - 1
                    }
                };
                let list = Compiled::column(column, DataType::List(Box::new(DataType::String)));
                let sep = Compiled::constant(separator, Ty::Data(DataType::String));
                return crate::sql::functions::call("ARRAY_JOIN", vec![list, sep], whole);
            }
            // JSON_ARRAYAGG(v) and JSON_OBJECTAGG(KEY k VALUE v) are
            // ARRAY_AGG of v (or of the pair (k, v)) written as JSON by a
            // projection: they take back retracted rows as ARRAY_AGG does.
            let upper = function_name(f).to_ascii_uppercase();
            if upper == "JSON_ARRAYAGG" || upper == "JSON_OBJECTAGG" {
                let args = call_args(f, whole)?;
                let mut compiled = Vec::new();
                for a in &args {
                    if contains_aggregate(a) {
                        return Err(err(a, "an aggregate inside an aggregate is not allowed"));
                    }
                    compiled.push(compile(
                        a,
                        &mut Scope::plain(&input_scope_cols, &self.session),
                    )?);
                }
                let (keep_nulls, raw) = crate::sql::functions::json::options(&compiled);
                let raw = raw.first().copied().unwrap_or(false);
                let object = upper == "JSON_OBJECTAGG";
                let value = if object {
                    if !matches!(compiled[1].ty, Ty::Data(DataType::String) | Ty::Null) {
                        return Err(err(
                            args[1],
                            format!("JSON_OBJECTAGG's key is VARCHAR, not {}", compiled[1].ty),
                        ));
                    }
                    let (k, v) = (compiled[1].eval.clone(), compiled[2].eval.clone());
                    let t = DataType::Struct(vec![
                        Field::new("key", DataType::String),
                        Field::new("value", compiled[2].ty.column_type()),
                    ]);
                    Compiled::new(Ty::Data(t), move |row| {
                        Ok(Value::Struct(vec![k(row)?, v(row)?]))
                    })
                } else {
                    compiled.pop().expect("a value")
                };
                let item = value.ty.column_type();
                // The ARRAY_AGG under it, keyed apart from the call itself:
                // a SELECT item that is the call is its projection, not the
                // aggregate's column.
                let under = E::Nested(Box::new(whole.clone()));
                let column = match calls.iter().position(|(e, _, _, _)| *e == under) {
                    Some(i) => base + i,
                    None => {
                        calls.push((under, AggFunction::ArrayAgg, Some(value), false));
                        users.push(None);
                        base + calls.len() - 1
                    }
                };
                let list = Compiled::column(column, DataType::List(Box::new(item))).eval;
                return Ok(Compiled::new(Ty::Data(DataType::String), move |row| {
                    let items = match list(row)? {
                        Value::List(items) => items,
                        _ => Vec::new(),
                    };
                    if !object {
                        return Ok(Value::String(crate::sql::functions::json::array_text(
                            items.iter().map(|v| (v, raw)),
                            keep_nulls,
                        )));
                    }
                    let pairs = items.iter().filter_map(|p| match p {
                        Value::Struct(kv) if kv.len() == 2 => Some((&kv[0], &kv[1])),
                        _ => None,
                    });
                    crate::sql::functions::json::object_text(pairs, keep_nulls, raw)
                        .map(Value::String)
                }));
            }
            if let Some(i) = calls.iter().position(|(e, _, _, _)| e == whole) {
                let t = match &users[i] {
                    Some(u) => u.0.returns.clone(),
                    None => agg_type(calls[i].1, calls[i].2.as_ref()),
                };
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
                    let c = compile(p, &mut Scope::plain(&input_scope_cols, &self.session))?;
                    boolean(&c, p)?;
                    Some(c.eval)
                }
            };
            let distinct = matches!(&f.args, ast::FunctionArguments::List(l)
                if matches!(l.duplicate_treatment, Some(ast::DuplicateTreatment::Distinct)));
            // MIN and MAX over an input that takes rows back keep every
            // value with its count (a multiset per group, as Flink's
            // MinWithRetract does): a retracted extreme leaves the next.
            // MIN(DISTINCT x) is MIN(x), so the distinct set is that multiset.
            let distinct =
                distinct || (rel.updating.is_some() && matches!(fname.as_str(), "MIN" | "MAX"));
            let user = session
                .functions
                .get_aggregate(&fname)
                .map(|f| UserAggregate(Arc::new(f.clone())));
            let function = match &user {
                Some(_) => AggFunction::User,
                None => AggFunction::from_sql_name(&fname).unwrap_or(AggFunction::Avg),
            };
            if let Some(u) = &user {
                if distinct {
                    return Err(err(
                        whole,
                        format!("DISTINCT in the user-defined aggregate {fname} is not supported"),
                    ));
                }
                if rel.updating.is_some() && u.0.retract.is_none() {
                    return Err(err(
                        whole,
                        format!(
                            "{fname} over an updating result needs a retract step \
                             (AggregateFunction::with_retract): rows are taken back"
                        ),
                    ));
                }
            }
            if matches!(function, AggFunction::FirstValue | AggFunction::LastValue) {
                if rel.updating.is_some() {
                    return Err(err(
                        whole,
                        format!("{fname} over an updating result is not supported yet"),
                    ));
                }
                if distinct {
                    // FIRST_VALUE(DISTINCT x) is FIRST_VALUE(x).
                    return Err(err(
                        whole,
                        format!("write {fname}(x): DISTINCT changes nothing"),
                    ));
                }
            }
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
                let c = compile(a, &mut Scope::plain(&input_scope_cols, &self.session))?;
                let c = match &user {
                    Some(u) => crate::sql::functions::user::fit(&u.0.name, &u.0.params, vec![c])
                        .map_err(|m| err(a, m))?
                        .pop()
                        .expect("one argument"),
                    None => c,
                };
                match (function, c.data_type()) {
                    (AggFunction::Count | AggFunction::User, _) => {}
                    (
                        AggFunction::FirstValue | AggFunction::LastValue | AggFunction::ArrayAgg,
                        _,
                    ) => {}
                    (AggFunction::BoolAnd | AggFunction::BoolOr, Some(DataType::Boolean)) => {}
                    (AggFunction::Min | AggFunction::Max, Some(t))
                        if !matches!(t, DataType::List(_) | DataType::Struct(_)) => {}
                    (
                        AggFunction::Sum
                        | AggFunction::Avg
                        | AggFunction::VarPop
                        | AggFunction::VarSamp
                        | AggFunction::StddevPop
                        | AggFunction::StddevSamp,
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
            let t = match &user {
                Some(u) => u.0.returns.clone(),
                None => agg_type(function, arg.as_ref()),
            };
            calls.push((whole.clone(), function, arg, distinct));
            users.push(user);
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
                        session: &session,
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
                    session: &session,
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
        // over an append-only input, the first row of each key, once
        // (append-only). Over an updating one a key's rows are counted, so
        // that it is deleted when its last row is taken back.
        let distinct_only = calls.is_empty() && !window && rel.updating.is_none();
        if calls.is_empty() && !distinct_only {
            // Keys without aggregates: counted so each has a row while it
            // has rows.
            calls.push((
                E::Identifier(ast::Ident::new("(rows)")),
                AggFunction::Count,
                None,
                false,
            ));
            users.push(None);
        }
        // The aggregate's input: the keys and arguments, computed if any is not a column.
        let plain_keys: Option<Vec<usize>> = key_exprs
            .iter()
            .map(|(e, _)| column_index(e, &rel.columns))
            .collect();
        let plain_args: Option<Vec<Option<usize>>> = calls
            .iter()
            .zip(&users)
            .map(|((e, _, a, _), user)| match (e, a) {
                (_, None) => Some(None),
                // A user-defined aggregate's argument is fitted to its
                // parameter (perhaps cast): computed.
                (E::Function(f), Some(_)) if f.filter.is_none() && user.is_none() => {
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
                user: users[i].clone(),
            })
            .collect();
        let key_names: Vec<String> = key_cols
            .iter()
            .map(|c| input.columns[*c].name.clone())
            .collect();
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
        let kind = self.catalog.aggregate.kind.take();
        let (op, updating) = if window {
            if input.updating.is_some() {
                return Err(SqlError::at(
                    s.span(),
                    "a window aggregate over an updating result is not supported",
                ));
            }
            let windows = match (&tvf, given.and(input.window)) {
                (Some(t), _) => lp::aggregate::Windows::Assigned(t.spec),
                (None, Some((ws, we))) => lp::aggregate::Windows::Given(
                    input.columns[ws].name.clone(),
                    input.columns[we].name.clone(),
                ),
                (None, None) => {
                    return Err(SqlError::at(
                        s.span(),
                        "the window columns were lost on the way",
                    ))
                }
            };
            let every_update = self.catalog.aggregate.window_every_update;
            let mut late_to = None;
            if self.sql.pipeline.on_late == LatePolicy::DeadLetter {
                let topic = input
                    .source
                    .as_ref()
                    .and_then(|src| self.dead_letter_topic(src));
                match topic {
                    Some(topic) => {
                        late_to = Some((topic, self.catalog.aggregate.late_record.clone()));
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
            let op = lp::aggregate::WindowAggregate {
                keys: key_names,
                windows,
                aggs,
                allowed_lateness: self.sql.pipeline.allowed_lateness,
                every_update,
                late_to,
                kind,
            };
            (Op::WindowAggregate(op), late_updates)
        } else if distinct_only {
            let op = lp::aggregate::Deduplicate {
                keys: key_names,
                kind,
                ttl: self.state_ttl(&rel, "this GROUP BY", s.span())?,
            };
            (Op::Deduplicate(op), None)
        } else {
            let op = lp::aggregate::Aggregate {
                keys: key_names,
                aggs,
                emit: self.catalog.aggregate.emit,
                kind,
                ttl: self.state_ttl(&rel, "this GROUP BY", s.span())?,
            };
            (
                Op::Aggregate(op),
                Some((0..key_cols.len()).collect::<Vec<_>>()),
            )
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
                ty: match &users[i] {
                    Some(u) => u.0.returns.clone(),
                    None => agg_type(*f, a.as_ref()),
                },
            });
        }
        let updated_by = updating.is_some().then(|| agg_uid.clone());
        let out = Rel {
            node: 0,
            columns: agg_columns,
            updating,
            updated_by,
            time: None,
            source: input.source.clone(),
            window: window.then_some((key_cols.len(), key_cols.len() + 1)),
            window_end: window.then_some(key_cols.len() + 1),
            timed: input.timed,
        };
        let mut out = self.plan.add(&agg_uid, op, &[&input], out);
        if let Some((h, c)) = having {
            // Over a running aggregate, a key that stops passing is taken
            // back: see `filter`.
            if out.updating.is_some() {
                refuse_watermark_over_updating(h, out.updated_by.as_deref(), "HAVING")?;
            }
            out = self.add_filter(out, h, c.eval, &format!("{name}.having"));
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

pub(super) fn agg_type(f: AggFunction, arg: Option<&Compiled>) -> DataType {
    match (f, arg.and_then(|a| a.data_type())) {
        (AggFunction::Count, _) => DataType::BigInt,
        (
            AggFunction::Avg
            | AggFunction::VarPop
            | AggFunction::VarSamp
            | AggFunction::StddevPop
            | AggFunction::StddevSamp,
            _,
        ) => DataType::Double,
        (AggFunction::BoolAnd | AggFunction::BoolOr, _) => DataType::Boolean,
        (AggFunction::ArrayAgg, t) => {
            DataType::List(Box::new(t.cloned().unwrap_or(DataType::String)))
        }
        (_, Some(DataType::Int)) => DataType::BigInt,
        (_, Some(t)) => t.clone(),
        (_, None) => DataType::BigInt,
    }
}

pub(super) fn contains_aggregate(e: &E) -> bool {
    let text = e.to_string().to_ascii_uppercase();
    // A cheap pre-check, then the tree.
    if ![
        "COUNT", "SUM", "MIN", "MAX", "AVG", "VAR", "STDDEV", "BOOL_", "EVERY", "_VALUE", "AGG",
    ]
    .iter()
    .any(|f| text.contains(f))
        && !crate::udf::registered_aggregate_names().any(|n| text.contains(n))
    {
        return false;
    }
    walk(
        e,
        // An aggregate with OVER is an OVER aggregation, not a GROUP BY's.
        &mut |x| matches!(x, E::Function(f) if f.over.is_none() && is_aggregate(&function_name(f))),
    )
}
