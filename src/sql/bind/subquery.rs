//! Subqueries in WHERE and set operations, as semi- and anti-joins:
//! `[NOT] EXISTS (SELECT ... FROM t WHERE <correlation>)`, `x [NOT] IN
//! (SELECT y FROM t ...)`, `EXCEPT`, `INTERSECT` and `UNION` (distinct).
//! Each is a join of the outer rows with the subquery's table that emits
//! the outer rows alone, and takes one back (or gives it again) when the
//! other side changes: the result is updating.

use super::*;
use crate::dataflow::ops::aggregate::Agg;

/// Whether a WHERE conjunct is a subquery predicate this module binds.
pub(super) fn is_subquery_predicate(e: &E) -> bool {
    matches!(
        e,
        E::Exists { .. }
            | E::In {
                target: ast::InTarget::Subquery(_),
                ..
            }
    )
}

/// `e` qualified by the qualifier of the one column of `columns` it
/// names, if it is a bare name: the outer side of `x IN (SELECT y ...)`
/// is the outer query's, the inner side the subquery's, whatever other
/// columns share their names.
fn qualified(e: &E, columns: &[ScopeColumn]) -> E {
    if let E::Identifier(i) = e {
        if let Ok(Some(c)) = joins::resolve(e, columns) {
            if let Some(q) = &columns[c].qualifier {
                return E::CompoundIdentifier(vec![ast::Ident::new(q), i.clone()]);
            }
        }
    }
    e.clone()
}

impl Binder<'_> {
    /// A WHERE conjunct `[NOT] EXISTS (...)` or `x [NOT] IN (SELECT y
    /// ...)` over `outer`: a semi-join (anti-join with NOT) with the
    /// subquery's one table, keyed by the equalities of its WHERE that
    /// correlate the two (`a.seller = p.id`) and, for IN, by `x = y`; its
    /// other conjuncts filter the table first or are the join's residual
    /// condition.
    pub(super) fn subquery_join(&mut self, outer: Rel, e: &E, name: &str) -> Result<Rel, SqlError> {
        let (subquery, negated, probe) = match e {
            E::Exists { subquery, negated } => (subquery, *negated, None),
            E::In {
                expr,
                target: ast::InTarget::Subquery(subquery),
                negated,
                ..
            } => (subquery, *negated, Some(&**expr)),
            other => return Err(err(other, "not a subquery predicate")),
        };
        let SetExpr::Select(inner) = &*subquery.body else {
            return Err(err(e, "a subquery in WHERE is one SELECT"));
        };
        if subquery.with.is_some() || subquery.order_by.is_some() || subquery.limit_clause.is_some()
        {
            return Err(err(e, "a subquery in WHERE has no WITH, ORDER BY or LIMIT"));
        }
        let grouped = !matches!(&inner.group_by, GroupByExpr::Expressions(g, _) if g.is_empty());
        if grouped || inner.having.is_some() {
            return Err(err(
                e,
                "a subquery with GROUP BY in WHERE is not supported: make it a view and join it",
            ));
        }
        let [twj] = inner.from.as_slice() else {
            return Err(err(
                e,
                "a subquery in WHERE reads one table, view or subquery: join several in a view",
            ));
        };
        if !twj.joins.is_empty() {
            return Err(err(
                e,
                "a subquery in WHERE reads one table, view or subquery: join several in a view",
            ));
        }
        let (table, tvf) = self.table_factor(&twj.relation, name, false)?;
        if tvf.is_some() {
            return Err(err(
                e,
                "a window table function in a subquery of WHERE is not supported",
            ));
        }
        let mut conds: Vec<E> = inner
            .selection
            .as_ref()
            .map(joins::conjuncts)
            .unwrap_or_default();
        if conds.iter().any(is_subquery_predicate) {
            return Err(err(
                e,
                "a subquery inside a subquery of WHERE is not supported",
            ));
        }
        if let Some(x) = probe {
            let y = match inner.projection.as_slice() {
                [SelectItem::UnnamedExpr(y) | SelectItem::ExprWithAlias { expr: y, .. }] => y,
                _ => return Err(err(e, "IN (SELECT ...) selects one column")),
            };
            conds.push(E::BinaryOp {
                left: Box::new(qualified(x, &outer.columns)),
                op: ast::BinaryOperator::Eq,
                right: Box::new(qualified(y, &table.columns)),
            });
        }
        let kind = if negated {
            JoinKind::Anti
        } else {
            JoinKind::Semi
        };
        self.join_step(outer, table, (kind, conds, None), &mut [], e.span(), name)
    }

    /// `a EXCEPT b`, `a INTERSECT b`, `a UNION b`: whole rows compared,
    /// NULLs equal as SQL's set operations have them, each distinct row
    /// of the result once. EXCEPT is an anti-join and INTERSECT a
    /// semi-join of the two sides keyed by each row's encoding; UNION is
    /// UNION ALL; then the distinct rows.
    pub(super) fn set_operation(
        &mut self,
        op: &ast::SetOperator,
        quantifier: &ast::SetQuantifier,
        (a, b): (Rel, Rel),
        span: sqlparser::tokenizer::Span,
        name: &str,
    ) -> Result<Rel, SqlError> {
        if !matches!(
            quantifier,
            ast::SetQuantifier::None | ast::SetQuantifier::Distinct
        ) {
            return Err(SqlError::at(
                span,
                format!("{op} {quantifier} is not supported: {op} (distinct rows) is"),
            ));
        }
        let types = |r: &Rel| r.columns.iter().map(|c| c.ty.clone()).collect::<Vec<_>>();
        if types(&a) != types(&b) {
            return Err(SqlError::at(
                span,
                format!("the two sides of {op} have different column types"),
            ));
        }
        let rows = match op {
            ast::SetOperator::Union => self.union_all(a, b, name)?,
            _ => {
                let kind = if matches!(op, ast::SetOperator::Except) {
                    JoinKind::Anti
                } else {
                    JoinKind::Semi
                };
                let width = a.columns.len();
                let (a, ka) = self.row_key(a, name);
                let (b, kb) = self.row_key(b, name);
                let filtered = self.keyed_join(a, b, (kind, ka, kb), span, name)?;
                // The row key goes.
                let outputs = (0..width)
                    .map(|i| {
                        (
                            filtered.columns[i].name.clone(),
                            Compiled::column(i, filtered.columns[i].ty.clone()),
                            Some(i),
                        )
                    })
                    .collect();
                self.finish_projection(filtered, outputs, &format!("{name}.select"))?
            }
        };
        self.distinct_rows(rows, span, name)
    }

    /// `rel` with one more column, `$row`: its row's values encoded, a
    /// key under which equal rows (NULLs too) meet.
    fn row_key(&mut self, rel: Rel, name: &str) -> (Rel, usize) {
        let width = rel.columns.len();
        let mut columns = rel.columns.clone();
        columns.push(ScopeColumn {
            name: "$row".into(),
            qualifier: None,
            ty: DataType::Bytes,
        });
        let mut outputs: Vec<(Option<usize>, Arc<EvalFn>)> = (0..width)
            .map(|i| (Some(i), Compiled::column(i, rel.columns[i].ty.clone()).eval))
            .collect();
        outputs.push((
            None,
            Arc::new(|v: &[Value]| {
                let mut bytes = Vec::new();
                crate::dataflow::codec::encode_values(v, &mut bytes);
                Ok(Value::Bytes(bytes))
            }),
        ));
        let uid = self.uid(&format!("{name}.row-key"));
        let project = lp::project::Project {
            inner: None,
            schema: schema_of(&columns),
            outputs,
            over_updating: false,
            on_failure: Default::default(),
        };
        let keyed = Rel {
            columns,
            ..rel.clone()
        };
        (
            self.plan.add(&uid, Op::Project(project), &[&rel], keyed),
            width,
        )
    }

    /// A semi- or anti-join of `left` and `right` by one key column each.
    fn keyed_join(
        &mut self,
        left: Rel,
        right: Rel,
        (kind, lk, rk): (JoinKind, usize, usize),
        span: sqlparser::tokenizer::Span,
        name: &str,
    ) -> Result<Rel, SqlError> {
        let ttl = self.sql.pipeline.state_ttl.map(|d| d.as_millis() as i64);
        if ttl.is_some() && !(left.timed && right.timed) {
            return Err(SqlError::at(
                span,
                "[pipeline] state_ttl counts from each row's event time, and a side of this set operation has none: declare a WATERMARK on its source",
            ));
        }
        let uid = self.uid(&format!(
            "{name}.{}",
            if kind == JoinKind::Anti {
                "anti-join"
            } else {
                "semi-join"
            }
        ));
        let spec = JoinSpec {
            kind,
            keys: [Vec::new(), Vec::new()],
            widths: [0, 0],
            condition: None,
            expiry: [None, None],
            ttl,
            sweep_every: crate::dataflow::ops::join::SWEEP_EVERY_MS,
        };
        let join = lp::join::Join {
            keys: [vec![lk], vec![rk]],
            spec,
            condition: None,
        };
        let updating = Some(left.updating.clone().unwrap_or_default());
        let out = Rel {
            updated_by: Some(uid.clone()),
            updating,
            time: None,
            window: None,
            window_end: None,
            timed: left.timed && right.timed,
            ..left.clone()
        };
        Ok(self.plan.add(&uid, Op::Join(join), &[&left, &right], out))
    }

    /// The distinct rows of `rel`: over an append-only input each row
    /// once, when first seen; over an updating one a count per row, which
    /// deletes the row when it reaches zero.
    pub(super) fn distinct_rows(
        &mut self,
        rel: Rel,
        span: sqlparser::tokenizer::Span,
        name: &str,
    ) -> Result<Rel, SqlError> {
        let keys: Vec<String> = rel.columns.iter().map(|c| c.name.clone()).collect();
        let all: Vec<usize> = (0..rel.columns.len()).collect();
        let ttl = self.state_ttl(&rel, "this set operation's DISTINCT", span)?;
        if rel.updating.is_none() {
            let uid = self.uid(&format!("{name}.distinct"));
            let op = lp::aggregate::Deduplicate {
                keys,
                kind: None,
                ttl,
            };
            let out = Rel {
                columns: rel
                    .columns
                    .iter()
                    .map(|c| ScopeColumn {
                        qualifier: None,
                        ..c.clone()
                    })
                    .collect(),
                ..rel.clone()
            };
            return Ok(self.plan.add(&uid, Op::Deduplicate(op), &[&rel], out));
        }
        let uid = self.uid(&format!("{name}.distinct"));
        let op = lp::aggregate::Aggregate {
            keys,
            aggs: vec![Agg::count("$rows")],
            emit: Default::default(),
            kind: None,
            ttl,
        };
        let mut columns: Vec<ScopeColumn> = rel
            .columns
            .iter()
            .map(|c| ScopeColumn {
                qualifier: None,
                ..c.clone()
            })
            .collect();
        columns.push(ScopeColumn {
            name: "$rows".into(),
            qualifier: None,
            ty: DataType::BigInt,
        });
        let counted = Rel {
            columns,
            updating: Some(all.clone()),
            updated_by: Some(uid.clone()),
            time: None,
            window: None,
            window_end: None,
            ..rel.clone()
        };
        let counted = self.plan.add(&uid, Op::Aggregate(op), &[&rel], counted);
        let outputs = all
            .iter()
            .map(|i| {
                let c = &counted.columns[*i];
                (c.name.clone(), Compiled::column(*i, c.ty.clone()), Some(*i))
            })
            .collect();
        self.finish_projection(counted, outputs, &format!("{name}.select"))
    }
}
