//! What the planner reads from a join's conditions, before it builds the
//! join: which side each conjunct names, the key equalities, and the time
//! bounds that let state go when the watermark passes (an interval or a
//! window join).
//!
//! A bound is read from comparisons of time terms, a TIMESTAMP column of
//! one side plus or minus an INTERVAL: `p.x + a <= q.y + b` (also `<`,
//! `>=`, `>`, `=` and `BETWEEN`). When `p.x` is never earlier than its
//! row's event time (the event-time column, or a window's `window_end`),
//! a future row of `p` has `p.x` after the watermark; so once the
//! watermark reaches `q.y + b - a`, no future row of `p` can match the row
//! of `q`, and `q`'s row can go.

use sqlparser::ast::{self, BinaryOperator, Expr as E};

use super::compiled::err;
use super::expr::{interval, ScopeColumn};
use super::SqlError;
use crate::dataflow::ops::join::Expiry;

/// One input of a join step as the condition sees it.
pub struct JoinSide<'a> {
    pub columns: &'a [ScopeColumn],
    /// Columns whose value is never earlier than their row's event time.
    pub watermarked: Vec<usize>,
}

/// `e`'s conjuncts (`a AND b AND c`), through parentheses.
pub fn conjuncts(e: &E) -> Vec<E> {
    match e {
        E::BinaryOp {
            left,
            op: BinaryOperator::And,
            right,
        } => {
            let mut v = conjuncts(left);
            v.extend(conjuncts(right));
            v
        }
        E::Nested(inner)
            if matches!(
                **inner,
                E::BinaryOp {
                    op: BinaryOperator::And,
                    ..
                }
            ) =>
        {
            conjuncts(inner)
        }
        other => vec![other.clone()],
    }
}

/// `parts` joined by AND (None for none).
pub fn conjoin(parts: Vec<E>) -> Option<E> {
    parts.into_iter().reduce(|a, b| E::BinaryOp {
        left: Box::new(a),
        op: BinaryOperator::And,
        right: Box::new(b),
    })
}

/// The column a name refers to in `columns`: Ok(None) if none, an error
/// if more than one (an unqualified name both inputs have).
pub fn resolve(e: &E, columns: &[ScopeColumn]) -> Result<Option<usize>, SqlError> {
    let (q, n) = match e {
        E::Identifier(i) => (None, i.value.as_str()),
        E::CompoundIdentifier(p) if p.len() == 2 => {
            (Some(p[0].value.as_str()), p[1].value.as_str())
        }
        E::Nested(inner) => return resolve(inner, columns),
        _ => return Ok(None),
    };
    let found: Vec<usize> = columns
        .iter()
        .enumerate()
        .filter(|(_, c)| {
            c.name.eq_ignore_ascii_case(n)
                && q.is_none_or(|q| {
                    c.qualifier
                        .as_deref()
                        .is_some_and(|x| x.eq_ignore_ascii_case(q))
                })
        })
        .map(|(i, _)| i)
        .collect();
    match found.as_slice() {
        [] => Ok(None),
        [i] => Ok(Some(*i)),
        _ => Err(err(
            e,
            format!("column {n:?} is ambiguous here: qualify it with its table's name or alias"),
        )),
    }
}

/// Which inputs `e`'s column names refer to: (left, right, every name
/// found in one of them).
pub fn sides(
    e: &E,
    left: &[ScopeColumn],
    right: &[ScopeColumn],
) -> Result<(bool, bool, bool), SqlError> {
    let mut names = Vec::new();
    super::expr::walk(e, &mut |x| {
        if matches!(x, E::Identifier(_) | E::CompoundIdentifier(_)) {
            names.push(x.clone());
        }
        false
    });
    let (mut l, mut r, mut all) = (false, false, true);
    for n in &names {
        let in_left = resolve(n, left)?.is_some();
        let in_right = resolve(n, right)?.is_some();
        if in_left && in_right {
            return Err(err(
                n,
                format!("column {n} is in both inputs of the join: qualify it with its table's name or alias"),
            ));
        }
        l |= in_left;
        r |= in_right;
        all &= in_left || in_right;
    }
    Ok((l, r, all))
}

/// `a = b` with `a` naming only the left input and `b` only the right (or
/// the other way round): the two key expressions, left's first.
pub fn equality<'e>(
    e: &'e E,
    left: &[ScopeColumn],
    right: &[ScopeColumn],
) -> Result<Option<(&'e E, &'e E)>, SqlError> {
    let E::BinaryOp {
        left: a,
        op: BinaryOperator::Eq,
        right: b,
    } = e
    else {
        return Ok(None);
    };
    let sa = sides(a, left, right)?;
    let sb = sides(b, left, right)?;
    Ok(match (sa, sb) {
        ((true, false, true), (false, true, true)) => Some((a, b)),
        ((false, true, true), (true, false, true)) => Some((b, a)),
        _ => None,
    })
}

/// A time term: (side, column, offset ms).
fn time_term(e: &E, sides: &[&JoinSide; 2]) -> Option<(usize, usize, i64)> {
    match e {
        E::Nested(inner) => time_term(inner, sides),
        E::BinaryOp {
            left,
            op: op @ (BinaryOperator::Plus | BinaryOperator::Minus),
            right,
        } => {
            let E::Interval(iv) = &**right else {
                return None;
            };
            let ms = interval(iv, right).ok()?;
            let (s, c, o) = time_term(left, sides)?;
            let ms = if *op == BinaryOperator::Plus { ms } else { -ms };
            Some((s, c, o.checked_add(ms)?))
        }
        _ => {
            for (s, side) in sides.iter().enumerate() {
                if let Ok(Some(c)) = resolve(e, side.columns) {
                    return (side.columns[c].ty.is_timestamp()).then_some((s, c, 0));
                }
            }
            None
        }
    }
}

/// Per side, when its rows expire by the watermark, as the conjuncts
/// bound them (None: they do not).
pub fn expiries(conjuncts: &[E], left: &JoinSide, right: &JoinSide) -> [Option<Expiry>; 2] {
    let sides = [left, right];
    let mut found: [Option<Expiry>; 2] = [None, None];
    // a <= b: a row of b's side expires when a's side can no longer
    // reach it.
    let mut le = |a: &E, b: &E| {
        let (Some((p, x, a)), Some((q, y, b))) = (time_term(a, &sides), time_term(b, &sides))
        else {
            return;
        };
        if p == q || !sides[p].watermarked.contains(&x) {
            return;
        }
        let Some(offset) = b.checked_sub(a) else {
            return;
        };
        let e = Expiry { column: y, offset };
        // Of two bounds on the same column, the earlier frees sooner.
        match &mut found[q] {
            Some(f) if f.column == y => f.offset = f.offset.min(offset),
            Some(_) => {}
            slot @ None => *slot = Some(e),
        }
    };
    for c in conjuncts {
        match c {
            E::BinaryOp { left, op, right } => match op {
                BinaryOperator::LtEq | BinaryOperator::Lt => le(left, right),
                BinaryOperator::GtEq | BinaryOperator::Gt => le(right, left),
                BinaryOperator::Eq => {
                    le(left, right);
                    le(right, left);
                }
                _ => {}
            },
            E::Between {
                expr,
                negated: false,
                low,
                high,
            } => {
                le(low, expr);
                le(expr, high);
            }
            _ => {}
        }
    }
    found
}

/// `rn <= N` (also `rn < N`, `rn = 1`, `N >= rn`, `N > rn`) for the rank
/// column `rank`: the N it keeps.
pub fn rank_bound(e: &E, rank: &str) -> Option<usize> {
    let E::BinaryOp { left, op, right } = e else {
        return None;
    };
    let is_rank = |x: &E| match x {
        E::Identifier(i) => i.value.eq_ignore_ascii_case(rank),
        E::CompoundIdentifier(p) => p.last().is_some_and(|i| i.value.eq_ignore_ascii_case(rank)),
        _ => false,
    };
    let number = |x: &E| match x {
        E::Value(v) => match &v.value {
            ast::Value::Number(n, _) => n.parse::<usize>().ok(),
            _ => None,
        },
        _ => None,
    };
    let (op, n) = if is_rank(left) {
        (op.clone(), number(right)?)
    } else if is_rank(right) {
        let flipped = match op {
            BinaryOperator::GtEq => BinaryOperator::LtEq,
            BinaryOperator::Gt => BinaryOperator::Lt,
            BinaryOperator::Eq => BinaryOperator::Eq,
            _ => return None,
        };
        (flipped, number(left)?)
    } else {
        return None;
    };
    match op {
        BinaryOperator::LtEq => Some(n),
        BinaryOperator::Lt => Some(n.saturating_sub(1)),
        BinaryOperator::Eq if n == 1 => Some(1),
        _ => None,
    }
}

/// The join kind an operator names, and its ON condition (None: a
/// condition-less `JOIN`, whose conditions are in WHERE).
pub fn join_kind(
    op: &ast::JoinOperator,
) -> Option<(crate::dataflow::ops::join::JoinKind, Option<&E>)> {
    use crate::dataflow::ops::join::JoinKind as K;
    use ast::JoinOperator as J;
    let (kind, c) = match op {
        J::Join(c) | J::Inner(c) => (K::Inner, c),
        J::Left(c) | J::LeftOuter(c) => (K::Left, c),
        J::Right(c) | J::RightOuter(c) => (K::Right, c),
        J::FullOuter(c) => (K::Full, c),
        _ => return None,
    };
    match c {
        ast::JoinConstraint::On(e) => Some((kind, Some(e))),
        ast::JoinConstraint::None => Some((kind, None)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataflow::row::DataType;

    fn expr(s: &str) -> E {
        crate::sql::dialect::parse_expr(s).unwrap()
    }

    fn col(q: &str, n: &str, ty: DataType) -> ScopeColumn {
        ScopeColumn {
            name: n.into(),
            qualifier: Some(q.into()),
            ty,
        }
    }

    #[test]
    fn an_interval_condition_bounds_both_sides() {
        let a = [
            col("a", "id", DataType::BigInt),
            col("a", "date_time", DataType::Timestamp),
            col("a", "expires", DataType::Timestamp),
        ];
        let b = [
            col("b", "auction", DataType::BigInt),
            col("b", "date_time", DataType::Timestamp),
        ];
        let (l, r) = (
            JoinSide {
                columns: &a,
                watermarked: vec![1],
            },
            JoinSide {
                columns: &b,
                watermarked: vec![1],
            },
        );
        let c = conjuncts(&expr(
            "a.id = b.auction AND b.date_time BETWEEN a.date_time AND a.expires",
        ));
        assert_eq!(c.len(), 2);
        let e = expiries(&c, &l, &r);
        assert_eq!(
            e[0],
            Some(Expiry {
                column: 2,
                offset: 0
            }),
            "an auction goes at its expiry"
        );
        assert_eq!(
            e[1],
            Some(Expiry {
                column: 1,
                offset: 0
            }),
            "a bid at its own time"
        );

        let c = conjuncts(&expr(
            "a.id = b.auction AND a.date_time BETWEEN b.date_time - INTERVAL '5' SECOND \
             AND b.date_time + INTERVAL '10' SECOND",
        ));
        let e = expiries(&c, &l, &r);
        assert_eq!(
            e[0],
            Some(Expiry {
                column: 1,
                offset: 5_000
            })
        );
        assert_eq!(
            e[1],
            Some(Expiry {
                column: 1,
                offset: 10_000
            })
        );

        // Only an upper bound on b: a's rows are not bounded.
        let c = conjuncts(&expr("a.id = b.auction AND b.date_time <= a.expires"));
        let e = expiries(&c, &l, &r);
        assert_eq!(
            e,
            [
                Some(Expiry {
                    column: 2,
                    offset: 0
                }),
                None
            ]
        );
    }

    #[test]
    fn names_resolve_to_one_side_or_are_refused_as_ambiguous() {
        let a = [
            col("a", "id", DataType::BigInt),
            col("a", "t", DataType::Timestamp),
        ];
        let b = [
            col("b", "id", DataType::BigInt),
            col("b", "x", DataType::BigInt),
        ];
        assert_eq!(
            sides(&expr("a.id + 1"), &a, &b).unwrap(),
            (true, false, true)
        );
        assert_eq!(sides(&expr("x > 3"), &a, &b).unwrap(), (false, true, true));
        assert_eq!(
            sides(&expr("zzz > 3"), &a, &b).unwrap(),
            (false, false, false)
        );
        let e = sides(&expr("id = 3"), &a, &b).unwrap_err();
        assert!(e.message.contains("both inputs"), "{}", e.message);
        let eq = expr("b.id = MOD(a.id, 10)");
        let (l, r) = equality(&eq, &a, &b).unwrap().unwrap();
        assert_eq!(l.to_string(), "MOD(a.id, 10)");
        assert_eq!(r.to_string(), "b.id");
    }
}
