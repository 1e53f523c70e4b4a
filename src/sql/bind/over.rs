//! `agg(x) OVER (PARTITION BY p ORDER BY t [ROWS | RANGE BETWEEN ...
//! PRECEDING AND CURRENT ROW])` in a SELECT list without GROUP BY: an
//! OverAggregate node (src/dataflow/ops/over.rs), then the SELECT list
//! over its output with each call as a column.

use super::*;
use crate::dataflow::ops::over::{Frame, OverCall, OverSpec};
use crate::dataflow::ops::over_table::OverTableSpec;
use crate::dataflow::ops::top_n::SortKey;

/// Every call with an OVER clause in `e` (none nested in another).
fn over_calls(e: &E, found: &mut Vec<E>) {
    walk(e, &mut |x| {
        if let E::Function(f) = x {
            if f.over.is_some() {
                if !found.contains(x) {
                    found.push(x.clone());
                }
                return false;
            }
        }
        false
    });
}

/// Whether a SELECT list has OVER calls.
pub(super) fn has_over_calls(items: &[SelectItem]) -> bool {
    let mut found = Vec::new();
    for item in items {
        if let SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } = item {
            over_calls(e, &mut found);
        }
    }
    !found.is_empty()
}

impl Binder<'_> {
    /// The SELECT list `items` over `rel` with its OVER calls computed.
    pub(super) fn over_aggregate(
        &mut self,
        rel: Rel,
        items: &[SelectItem],
        name: &str,
    ) -> Result<Rel, SqlError> {
        let session = self.session.clone();
        let mut calls = Vec::new();
        for item in items {
            if let SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } = item {
                over_calls(e, &mut calls);
            }
        }
        let first = &calls[0];
        let window = |e: &E| -> Result<ast::WindowSpec, SqlError> {
            match e {
                E::Function(f) => match &f.over {
                    Some(ast::WindowType::WindowSpec(w)) if w.window_name.is_none() => {
                        Ok(w.clone())
                    }
                    _ => Err(err(
                        e,
                        "a named window (OVER w) is not supported: write the window in OVER (...)",
                    )),
                },
                _ => Err(err(e, "not an OVER call")),
            }
        };
        let w = window(first)?;
        for c in &calls[1..] {
            if window(c)? != w {
                return Err(err(
                    c,
                    format!("every OVER of one SELECT is the same window, as in Flink: this one differs from `{first}`'s"),
                ));
            }
        }
        // Over an updating input, or with LEAD (a row's value changes when
        // its next rows come), the calls are kept current over the input
        // as a table (OverTable), ordered by any columns; else each row is
        // emitted once as the watermark passes its time (OverAggregate).
        let lead = calls
            .iter()
            .any(|c| matches!(c, E::Function(f) if function_name(f).eq_ignore_ascii_case("LEAD")));
        let kept_current = rel.updated_by.is_some() || lead;
        let Some((o, more)) = w.order_by.split_first() else {
            return Err(err(
                first,
                if kept_current {
                    "OVER needs ORDER BY: the order of the rows in each partition"
                } else {
                    "OVER needs ORDER BY the table's event-time column (its WATERMARK), ascending"
                },
            ));
        };
        let sort_key = |o: &ast::OrderByExpr| -> Result<SortKey, SqlError> {
            let Some(c) = joins::resolve(&o.expr, &rel.columns)? else {
                return Err(err(&o.expr, "OVER's ORDER BY names columns"));
            };
            let descending = matches!(o.options.sort, Some(ast::OrderBySort::Desc));
            Ok(SortKey {
                column: c,
                descending,
                nulls_first: o.options.nulls_first.unwrap_or(!descending),
            })
        };
        let mut order = Vec::new();
        let time = if kept_current {
            order.push(sort_key(o)?);
            None
        } else {
            // ORDER BY the event time, ascending: rows are emitted in its
            // order as the watermark passes them. Further columns order the
            // rows of one time (a weir extension; Flink takes the time
            // alone).
            let ascending = !matches!(o.options.sort, Some(ast::OrderBySort::Desc));
            match joins::resolve(&o.expr, &rel.columns)? {
                Some(c) if ascending && Some(c) == rel.time => Some(c),
                _ => return Err(err(
                    &o.expr,
                    "OVER orders by the table's event-time column (its WATERMARK), ascending, first",
                )),
            }
        };
        for o in more {
            order.push(sort_key(o)?);
        }
        let frame = match &w.window_frame {
            // Flink's (and SQL's) default with ORDER BY.
            None => Frame::Unbounded { peers: true },
            Some(f) => {
                if !matches!(f.end_bound, None | Some(ast::WindowFrameBound::CurrentRow)) {
                    return Err(err(
                        first,
                        "an OVER frame ends at CURRENT ROW: a row is emitted before the rows after it come",
                    ));
                }
                match (&f.units, &f.start_bound) {
                    (ast::WindowFrameUnits::Groups, _) => {
                        return Err(err(first, "GROUPS frames are not supported: ROWS or RANGE"))
                    }
                    (units, ast::WindowFrameBound::Preceding(None)) => Frame::Unbounded {
                        peers: matches!(units, ast::WindowFrameUnits::Range),
                    },
                    (ast::WindowFrameUnits::Rows, ast::WindowFrameBound::Preceding(Some(n))) => {
                        match &**n {
                            E::Value(v) => match &v.value {
                                ast::Value::Number(s, _) => match s.parse::<usize>() {
                                    Ok(n) => Frame::Rows(n),
                                    Err(_) => return Err(err(n, "ROWS takes a whole number of rows")),
                                },
                                _ => return Err(err(n, "ROWS takes a whole number of rows")),
                            },
                            other => return Err(err(other, "ROWS takes a whole number of rows")),
                        }
                    }
                    (ast::WindowFrameUnits::Range, ast::WindowFrameBound::Preceding(Some(d))) => {
                        match &**d {
                            E::Interval(i) => {
                                let ms = interval(i, d)?;
                                if ms < 0 {
                                    return Err(err(d, "a RANGE reaches back a positive interval"));
                                }
                                Frame::Range(ms)
                            }
                            other => {
                                return Err(err(
                                    other,
                                    "RANGE over the event time takes an INTERVAL: RANGE BETWEEN INTERVAL '10' SECOND PRECEDING AND CURRENT ROW",
                                ))
                            }
                        }
                    }
                    (_, ast::WindowFrameBound::CurrentRow) => Frame::Rows(0),
                    _ => {
                        return Err(err(
                            first,
                            "an OVER frame starts at n PRECEDING, UNBOUNDED PRECEDING or CURRENT ROW",
                        ))
                    }
                }
            }
        };
        if let (true, Frame::Range(_)) = (kept_current, frame) {
            let by = order[0];
            if by.descending || !rel.columns[by.column].ty.is_timestamp() {
                return Err(err(
                    &o.expr,
                    "a RANGE frame reaches back over its ORDER BY column: a TIMESTAMP, ascending",
                ));
            }
        }
        let global = [E::Value(ast::Value::Number("0".into(), false).into())];
        let partition: Vec<&E> = if w.partition_by.is_empty() {
            global.iter().collect()
        } else {
            w.partition_by.iter().collect()
        };
        let (rel, pcols) = self.key_columns(rel, partition.into_iter(), name)?;
        // Each call: what it computes, and its result column's type.
        let mut spec_calls = Vec::new();
        let mut types = Vec::new();
        for c in &calls {
            let E::Function(f) = c else {
                unreachable!("an OVER call")
            };
            let fname = function_name(f).to_ascii_uppercase();
            let star = matches!(&f.args, ast::FunctionArguments::List(l)
                if matches!(l.args.as_slice(), [ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Wildcard)]));
            let args = if star { Vec::new() } else { call_args(f, c)? };
            let column = |a: &E| -> Result<(usize, DataType), SqlError> {
                match joins::resolve(a, &rel.columns)? {
                    Some(i) => Ok((i, rel.columns[i].ty.clone())),
                    None => Err(err(
                        a,
                        "an OVER call's argument is a column: compute it in a subquery first",
                    )),
                }
            };
            let aggregate = AggFunction::from_sql_name(&fname);
            let (call, ty) = match fname.as_str() {
                _ if aggregate.is_some() => {
                    let function = aggregate.expect("an aggregate");
                    if !matches!(
                        function,
                        AggFunction::Count
                            | AggFunction::Sum
                            | AggFunction::Min
                            | AggFunction::Max
                            | AggFunction::Avg
                    ) {
                        return Err(err(
                            c,
                            format!("{fname} OVER (...) is not supported yet: COUNT, SUM, MIN, MAX and AVG are"),
                        ));
                    }
                    let arg = match (star, args.as_slice()) {
                        (true, _) if function == AggFunction::Count => None,
                        (false, [a]) => Some(column(a)?),
                        _ => return Err(err(c, format!("{fname} takes one column"))),
                    };
                    let ty = match (function, &arg) {
                        (AggFunction::Count, _) => DataType::BigInt,
                        (AggFunction::Avg, _) => DataType::Double,
                        (_, Some((_, DataType::Int))) => DataType::BigInt,
                        (_, Some((_, t))) => t.clone(),
                        (_, None) => DataType::BigInt,
                    };
                    let agg = Agg {
                        function,
                        column: arg.map(|(i, _)| i),
                        name: format!("$over{}", spec_calls.len()),
                        distinct: false,
                        user: None,
                    };
                    (OverCall::Aggregate(agg), ty)
                }
                "ROW_NUMBER" => (OverCall::RowNumber, DataType::BigInt),
                "RANK" => (OverCall::Rank, DataType::BigInt),
                "DENSE_RANK" => (OverCall::DenseRank, DataType::BigInt),
                "LAG" | "LEAD" => {
                    let (col, ty) = match args.first() {
                        Some(a) => column(a)?,
                        None => return Err(err(c, format!("{fname} takes a column"))),
                    };
                    let offset = match args.get(1) {
                        None => 1,
                        Some(n) => match compile(n, &mut Scope::plain(&rel.columns, &self.session))?.constant {
                            Some(Value::Int(k)) if k >= 1 => k as usize,
                            _ => {
                                return Err(err(
                                    n,
                                    format!("{fname}'s offset is a whole number from 1"),
                                ))
                            }
                        },
                    };
                    let default = match args.get(2) {
                        None => Value::Null,
                        Some(d) => match compile(d, &mut Scope::plain(&rel.columns, &self.session))?.constant {
                            Some(v) => v,
                            None => return Err(err(d, format!("{fname}'s default is a constant"))),
                        },
                    };
                    let call = if fname == "LAG" {
                        OverCall::Lag {
                            column: col,
                            offset,
                            default,
                        }
                    } else {
                        OverCall::Lead {
                            column: col,
                            offset,
                            default,
                        }
                    };
                    (call, ty)
                }
                other => {
                    return Err(err(
                        c,
                        format!("{other} is not an OVER function: COUNT, SUM, AVG, MIN, MAX, ROW_NUMBER, RANK, DENSE_RANK, LAG, LEAD"),
                    ))
                }
            };
            spec_calls.push(call);
            types.push(ty);
        }
        // Rows of one time are peers (RANK, RANGE frames); with more ORDER
        // BY columns SQL's peers would be rows equal in all of them.
        let by_time_peers = spec_calls
            .iter()
            .any(|c| matches!(c, OverCall::Rank | OverCall::DenseRank))
            || (matches!(frame, Frame::Range(_) | Frame::Unbounded { peers: true })
                && spec_calls
                    .iter()
                    .any(|c| matches!(c, OverCall::Aggregate(_))));
        if time.is_some() && order.len() > 1 && by_time_peers {
            return Err(err(
                first,
                "OVER with more ORDER BY columns than the event time takes ROWS frames, ROW_NUMBER and LAG: RANK and RANGE frames have the rows of one time as peers",
            ));
        }
        let n = rel.columns.len();
        let mut columns = rel.columns.clone();
        let mut substitutions = Vec::new();
        for (i, (c, ty)) in calls.iter().zip(&types).enumerate() {
            columns.push(ScopeColumn {
                name: format!("$over{i}"),
                qualifier: None,
                ty: ty.clone(),
            });
            substitutions.push((c.clone(), Compiled::column(n + i, ty.clone())));
        }
        let uid = self.uid(&format!("{name}.over"));
        let written: Vec<String> = calls
            .iter()
            .map(|c| match c {
                E::Function(f) => {
                    let mut f = f.clone();
                    f.over = None;
                    f.to_string()
                }
                other => other.to_string(),
            })
            .collect();
        let schema = schema_of(&columns);
        let (evaluation, out) = match time {
            Some(time) => (
                lp::over::Evaluation::AsWatermarkPasses(OverSpec {
                    time,
                    then: order,
                    frame,
                    calls: spec_calls,
                }),
                Rel {
                    columns: columns.clone(),
                    window: None,
                    window_end: None,
                    ..rel.clone()
                },
            ),
            None => (
                lp::over::Evaluation::KeptCurrent(OverTableSpec {
                    order,
                    frame,
                    calls: spec_calls,
                }),
                // Each row's values change as rows around it come and go:
                // unique by what made the input's rows unique.
                Rel {
                    columns: columns.clone(),
                    window: None,
                    window_end: None,
                    updating: Some(rel.updating.clone().unwrap_or_default()),
                    updated_by: Some(uid.clone()),
                    ..rel.clone()
                },
            ),
        };
        let ttl = match evaluation {
            lp::over::Evaluation::KeptCurrent(_) => {
                self.state_ttl(&rel, "this OVER", first.span())?
            }
            lp::over::Evaluation::AsWatermarkPasses(_) => None,
        };
        let op = lp::over::OverAggregate {
            partition: pcols,
            evaluation,
            schema,
            calls: written,
            ttl,
        };
        let out = self.plan.add(&uid, Op::OverAggregate(op), &[&rel], out);
        // The SELECT list, each call read from its column.
        let mut outputs = Vec::new();
        for item in items {
            match item {
                SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => {
                    let mut scope = Scope {
                        columns: &columns,
                        substitutions: &substitutions,
                        grouped: false,
                        aggregates: None,
                        session: &session,
                        no_aggregates_reason:
                            "an aggregate without OVER belongs in a SELECT with GROUP BY",
                    };
                    let c = compile(e, &mut scope)?;
                    let n = output_name(item, outputs.len());
                    outputs.push((n, c, column_index(e, &columns)));
                }
                SelectItem::Wildcard(_) => {
                    for (i, c) in columns.iter().enumerate().take(n) {
                        if !c.name.starts_with('$') {
                            outputs.push((
                                c.name.clone(),
                                Compiled::column(i, c.ty.clone()),
                                Some(i),
                            ));
                        }
                    }
                }
                other => {
                    return Err(SqlError::at(
                        other.span(),
                        format!("`{other}` is not supported with OVER"),
                    ))
                }
            }
        }
        self.finish_projection(out, outputs, &format!("{name}.select"))
    }
}
