//! Scalar subqueries in WHERE and the SELECT list: `(SELECT agg(x) FROM t
//! [WHERE t.k = outer.k AND ...])`, one value per outer row, as a left
//! join of the outer rows with the subquery's aggregate grouped by its
//! correlation columns (Flink and RisingWave decorrelate them the same
//! way). Without correlation the aggregate is one row, keyed by a
//! constant: every outer row meets it in one subtask. The value changes
//! as the subquery's table does, so the result is updating: an outer row
//! whose value changed is taken back and given again with the new one.
//!
//! A subquery with no rows is NULL, as SQL's is; COUNT's is 0, which the
//! join's padding would make NULL (the "count bug" of decorrelation), so
//! a COUNT is read through COALESCE.

use super::*;
use crate::dataflow::ops::aggregate::AggFunction;

/// Every scalar subquery in `e`, once each.
pub(super) fn scalar_subqueries(e: &E, found: &mut Vec<E>) {
    walk(e, &mut |x| {
        if let E::Subquery(_) = x {
            if !found.contains(x) {
                found.push(x.clone());
            }
        }
        false
    });
}

impl Binder<'_> {
    /// Joins `outer` with the scalar subquery `e` (the `index`-th of its
    /// SELECT): the joined relation, and what `e` compiles to over it.
    pub(super) fn scalar_subquery(
        &mut self,
        outer: Rel,
        e: &E,
        index: usize,
        name: &str,
    ) -> Result<(Rel, Compiled), SqlError> {
        let E::Subquery(query) = e else {
            return Err(err(e, "not a scalar subquery"));
        };
        let SetExpr::Select(inner) = &*query.body else {
            return Err(err(e, "a scalar subquery is one SELECT"));
        };
        if query.with.is_some() || query.order_by.is_some() || query.limit_clause.is_some() {
            return Err(err(e, "a scalar subquery has no WITH, ORDER BY or LIMIT"));
        }
        let grouped = !matches!(&inner.group_by, GroupByExpr::Expressions(g, _) if g.is_empty());
        if grouped || inner.having.is_some() || inner.distinct.is_some() {
            return Err(err(
                e,
                "a scalar subquery with GROUP BY, HAVING or DISTINCT is not supported: it selects one aggregate, correlated by equalities in its WHERE",
            ));
        }
        let value = match inner.projection.as_slice() {
            [SelectItem::UnnamedExpr(x) | SelectItem::ExprWithAlias { expr: x, .. }]
                if aggregate_call(x).is_some() =>
            {
                x
            }
            _ => {
                return Err(err(
                    e,
                    "a scalar subquery selects one aggregate call (`SELECT MAX(price) FROM bid WHERE ...`): one value for each outer row",
                ))
            }
        };
        let [twj] = inner.from.as_slice() else {
            return Err(err(
                e,
                "a scalar subquery reads one table, view or subquery: join several in a view",
            ));
        };
        if !twj.joins.is_empty() {
            return Err(err(
                e,
                "a scalar subquery reads one table, view or subquery: join several in a view",
            ));
        }
        let (table, tvf) = self.table_factor(&twj.relation, name, false)?;
        if tvf.is_some() {
            return Err(err(
                e,
                "a window table function in a scalar subquery is not supported",
            ));
        }
        // Its WHERE: equalities of an inner and an outer column correlate
        // (the inner table's names first, as SQL scopes them); the rest
        // filters the inner table.
        let conds: Vec<E> = inner
            .selection
            .as_ref()
            .map(joins::conjuncts)
            .unwrap_or_default();
        let inner_side = |x: &E| matches!(joins::resolve(x, &table.columns), Ok(Some(_)));
        let outer_side =
            |x: &E| !inner_side(x) && matches!(joins::resolve(x, &outer.columns), Ok(Some(_)));
        let mut correlation: Vec<(E, E)> = Vec::new();
        let mut local = Vec::new();
        for c in conds {
            if walk(&c, &mut |x| {
                matches!(
                    x,
                    E::Subquery(_)
                        | E::Exists { .. }
                        | E::In {
                            target: ast::InTarget::Subquery(_),
                            ..
                        }
                )
            }) {
                return Err(err(
                    &c,
                    "a subquery inside a scalar subquery is not supported",
                ));
            }
            match &c {
                E::BinaryOp {
                    left,
                    op: ast::BinaryOperator::Eq,
                    right,
                } if inner_side(left) && outer_side(right) => {
                    correlation.push(((**left).clone(), (**right).clone()))
                }
                E::BinaryOp {
                    left,
                    op: ast::BinaryOperator::Eq,
                    right,
                } if outer_side(left) && inner_side(right) => {
                    correlation.push(((**right).clone(), (**left).clone()))
                }
                _ => local.push(c),
            }
        }
        let mut table = table;
        if let Some(w) = joins::conjoin(local) {
            table = self.filter(table, &w, &format!("{name}.scalar{index}.where"))?;
        }
        // The aggregate, grouped by the inner correlation columns (by a
        // constant without any), its columns named out of the user's way.
        let zero = E::Value(ast::Value::Number("0".into(), false).into());
        let group: Vec<E> = if correlation.is_empty() {
            vec![zero.clone()]
        } else {
            correlation.iter().map(|(i, _)| i.clone()).collect()
        };
        let key_name = |k: usize| format!("$sq{index}_k{k}");
        let value_name = format!("$sq{index}");
        let mut projection: Vec<SelectItem> = group
            .iter()
            .enumerate()
            .map(|(k, g)| SelectItem::ExprWithAlias {
                expr: g.clone(),
                alias: ast::Ident::new(key_name(k)),
            })
            .collect();
        projection.push(SelectItem::ExprWithAlias {
            expr: value.clone(),
            alias: ast::Ident::new(&value_name),
        });
        let synthetic = ast::Select {
            projection,
            selection: None,
            group_by: GroupByExpr::Expressions(group.clone(), Vec::new()),
            ..(**inner).clone()
        };
        let group_refs: Vec<&E> = group.iter().collect();
        let aggregated = self.aggregate(
            table,
            None,
            &group_refs,
            &synthetic,
            &format!("{name}.scalar{index}"),
        )?;
        // The outer rows' side of each equality (a constant without any).
        let (outer, outer_keys): (Rel, Vec<E>) = if correlation.is_empty() {
            let (rel, cols) = self.key_columns(outer, std::iter::once(&zero), name)?;
            let key = E::Identifier(ast::Ident::new(&rel.columns[cols[0]].name));
            (rel, vec![key])
        } else {
            let keys = correlation.iter().map(|(_, o)| o.clone()).collect();
            (outer, keys)
        };
        let on: Vec<E> = outer_keys
            .into_iter()
            .enumerate()
            .map(|(k, o)| E::BinaryOp {
                left: Box::new(o),
                op: ast::BinaryOperator::Eq,
                right: Box::new(E::Identifier(ast::Ident::new(key_name(k)))),
            })
            .collect();
        let joined = self.join_step(
            outer,
            aggregated,
            (JoinKind::Left, on, None),
            &mut [],
            e.span(),
            &format!("{name}.scalar{index}"),
        )?;
        let column = joined
            .columns
            .iter()
            .position(|c| c.name == value_name)
            .expect("the subquery's value is a column of the join");
        let ty = joined.columns[column].ty.clone();
        let mut compiled = Compiled::column(column, ty.clone());
        if aggregate_call(value) == Some(AggFunction::Count) {
            // No row of the subquery: the padding's NULL is COUNT's 0.
            compiled = Compiled::new(Ty::Data(ty), move |row| {
                Ok(match &row[column] {
                    Value::Null => Value::Int(0),
                    v => v.clone(),
                })
            });
        }
        Ok((joined, compiled))
    }
}

/// The aggregate `x` calls, if it is one aggregate call.
fn aggregate_call(x: &E) -> Option<AggFunction> {
    match x {
        E::Nested(inner) => aggregate_call(inner),
        E::Function(f) if f.over.is_none() => AggFunction::from_sql_name(&function_name(f)),
        _ => None,
    }
}
