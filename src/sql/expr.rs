//! SQL expressions compiled once, when the job is planned, into closures
//! over a row's values: no tree is walked per record, each node's types
//! are settled before the first row, and a constant argument (a regular
//! expression, a date format) is prepared once.
//!
//! Semantics are Flink SQL's where DuckDB agrees with it: NULL in, NULL
//! out; `AND`/`OR`/`NOT` with three-valued logic; BIGINT arithmetic that
//! fails on overflow; `/` of integers is integer division; DECIMAL keeps
//! its scale (`0.908 * price` is `DECIMAL(23, 3)`). An expression that
//! fails on a value (an overflow, a division by zero, a cast of `'abc'`
//! to BIGINT) gives Err here; the operator that evaluates it makes that
//! NULL and counts it (docs/sql.md), so a bad value never stops the job.

use std::sync::Arc;

use sqlparser::ast::Expr as E;
use sqlparser::ast::{
    self, BinaryOperator, CastKind, DateTimeField, FunctionArg, FunctionArgExpr, FunctionArguments,
    UnaryOperator,
};

use super::cast::{cast_value, coerce_to, common_type};
pub use super::compiled::{err, Compiled, EvalFn, Ty};
use super::functions;
use super::names::nearest;
use super::session::Session;
use super::types::parse_type;
use super::SqlError;
use crate::dataflow::compare::compare;
use crate::dataflow::row::{DataType, Decimal, Value};

/// What an aggregate call compiles to where aggregates are allowed: the
/// column of the aggregate's output that holds it.
pub type AggregateHook<'a> = dyn FnMut(&ast::Function, &E) -> Result<Compiled, SqlError> + 'a;

/// A column a query can name: its name, the table (or alias) it belongs
/// to, and its type.
#[derive(Debug, Clone)]
pub struct ScopeColumn {
    pub name: String,
    pub qualifier: Option<String>,
    pub ty: DataType,
}

/// What names mean where an expression is compiled: the input's columns,
/// and expressions that stand for a computed column (after GROUP BY, a
/// grouped expression or an aggregate call is a column of the aggregate's
/// output).
pub struct Scope<'a> {
    pub columns: &'a [ScopeColumn],
    pub substitutions: &'a [(E, Compiled)],
    /// After GROUP BY: a column that is neither grouped nor aggregated is
    /// an error with this explanation.
    pub grouped: bool,
    /// Aggregate calls met while compiling, for the planner to compute
    /// (None: aggregates are not allowed here, with the reason).
    pub aggregates: Option<&'a mut AggregateHook<'a>>,
    pub no_aggregates_reason: &'a str,
    /// The job's user-defined functions, among others.
    pub session: &'a Session,
}

impl<'a> Scope<'a> {
    pub fn plain(columns: &'a [ScopeColumn], session: &'a Session) -> Self {
        Self {
            session,
            columns,
            substitutions: &[],
            grouped: false,
            aggregates: None,
            no_aggregates_reason: "aggregate functions belong in a SELECT with GROUP BY (or \
                                   in its HAVING)",
        }
    }
}

/// The aggregate functions weir computes, and the user-defined ones the
/// binary registered ([`crate::udf::register`]).
pub fn is_aggregate(name: &str) -> bool {
    builtin_aggregate(name)
        || crate::udf::registered_aggregate_names().any(|n| n.eq_ignore_ascii_case(name))
}

fn builtin_aggregate(name: &str) -> bool {
    super::aggregates::is_builtin(name)
}

pub fn function_name(f: &ast::Function) -> String {
    f.name
        .0
        .last()
        .and_then(|p| p.as_ident())
        .map(|i| i.value.clone())
        .unwrap_or_else(|| f.name.to_string())
}

/// The plain argument expressions of a call (Err for `*`, named
/// arguments and clauses weir does not take).
pub fn call_args<'f>(f: &'f ast::Function, whole: &E) -> Result<Vec<&'f E>, SqlError> {
    match &f.args {
        FunctionArguments::None => Ok(Vec::new()),
        FunctionArguments::Subquery(_) => {
            Err(err(whole, "a subquery as an argument is not supported"))
        }
        FunctionArguments::List(list) => {
            if !list.clauses.is_empty() {
                return Err(err(
                    whole,
                    format!("{} in a function call is not supported", list.clauses[0]),
                ));
            }
            list.args
                .iter()
                .map(|a| match a {
                    FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Ok(e),
                    FunctionArg::Unnamed(FunctionArgExpr::Wildcard) => {
                        Err(err(whole, "`*` is an argument only of COUNT(*)"))
                    }
                    _ => Err(err(whole, format!("argument {a} is not supported"))),
                })
                .collect()
        }
    }
}

/// Compiles `e` in `scope`.
pub fn compile(e: &E, scope: &mut Scope) -> Result<Compiled, SqlError> {
    for (s, c) in scope.substitutions {
        if s == e {
            return Ok(c.clone());
        }
    }
    match e {
        E::Nested(inner) => compile(inner, scope),
        E::Identifier(ident) => column(scope, None, &ident.value, e),
        E::CompoundIdentifier(parts) => {
            let names: Vec<&str> = parts.iter().map(|p| p.value.as_str()).collect();
            compound(scope, &names, e)
        }
        E::CompoundFieldAccess { root, access_chain } => {
            let mut c = compile(root, scope)?;
            for a in access_chain {
                match a {
                    ast::AccessExpr::Dot(E::Identifier(f)) => c = field(c, &f.value, e)?,
                    ast::AccessExpr::Subscript(ast::Subscript::Index { index }) => {
                        let i = compile(index, scope)?;
                        c = element_at(c, i, e)?;
                    }
                    _ => {
                        return Err(err(
                            e,
                            "only field access with `.name` and an array index `[i]` are \
                             supported",
                        ))
                    }
                }
            }
            Ok(c)
        }
        E::Value(v) => literal(&v.value, e),
        E::TypedString(ts) => {
            let text = match &ts.value.value {
                ast::Value::SingleQuotedString(s) => s.clone(),
                other => other.to_string(),
            };
            let t = sql_type(&ts.data_type, e)?;
            let v = cast_value(Value::String(text), &t).map_err(|m| err(e, m))?;
            Ok(Compiled::constant(v, Ty::Data(t)))
        }
        E::Interval(i) => Ok(match interval_value(i, e)? {
            IntervalValue::Millis(ms) => Compiled::constant(Value::Int(ms), Ty::Interval),
            IntervalValue::Months(m) => Compiled::constant(Value::Int(m), Ty::MonthInterval),
        }),
        E::IsNull(a) => {
            let a = compile(a, scope)?;
            Ok(unary_bool(a, |v| Ok(Value::Bool(v.is_null()))))
        }
        E::IsNotNull(a) => {
            let a = compile(a, scope)?;
            Ok(unary_bool(a, |v| Ok(Value::Bool(!v.is_null()))))
        }
        E::IsTrue(a) | E::IsNotTrue(a) | E::IsFalse(a) | E::IsNotFalse(a) => {
            let c = compile(a, scope)?;
            boolean(&c, a)?;
            let want = matches!(e, E::IsTrue(_) | E::IsNotFalse(_));
            let negate = matches!(e, E::IsNotTrue(_) | E::IsNotFalse(_));
            Ok(unary_bool(c, move |v| {
                let is = matches!(v, Value::Bool(b) if b == want);
                Ok(Value::Bool(is != negate))
            }))
        }
        E::UnaryOp { op, expr } => {
            let a = compile(expr, scope)?;
            match op {
                UnaryOperator::Not => {
                    boolean(&a, expr)?;
                    Ok(unary_bool(a, |v| {
                        Ok(match v {
                            Value::Bool(b) => Value::Bool(!b),
                            _ => Value::Null,
                        })
                    }))
                }
                UnaryOperator::Minus => {
                    let t = numeric_or_interval(&a, expr)?;
                    let f = a.eval.clone();
                    fold(Compiled::new(t, move |row| negate(f(row)?)), &a)
                }
                UnaryOperator::Plus => {
                    numeric_or_interval(&a, expr)?;
                    Ok(a)
                }
                _ => Err(err(e, format!("operator {op} is not supported"))),
            }
        }
        E::BinaryOp { left, op, right } => binary(e, left, op, right, scope),
        E::Between {
            expr,
            negated,
            low,
            high,
        } => {
            let (x, lo, hi) = (
                compile(expr, scope)?,
                compile(low, scope)?,
                compile(high, scope)?,
            );
            comparable(&x, &lo, e)?;
            comparable(&x, &hi, e)?;
            let (x, lo, hi, negated) = (x.eval, lo.eval, hi.eval, *negated);
            Ok(Compiled::new(Ty::Data(DataType::Boolean), move |row| {
                let v = x(row)?;
                let ge = cmp_bool(&v, &lo(row)?, |o| o.is_ge());
                let le = cmp_bool(&v, &hi(row)?, |o| o.is_le());
                let both = and3(ge, le);
                Ok(match both {
                    Some(b) => Value::Bool(b != negated),
                    None => Value::Null,
                })
            }))
        }
        E::In {
            expr,
            target: ast::InTarget::List(list),
            negated,
            ..
        } => {
            let x = compile(expr, scope)?;
            let items = list
                .iter()
                .map(|i| {
                    let c = compile(i, scope)?;
                    comparable(&x, &c, i)?;
                    Ok(c.eval)
                })
                .collect::<Result<Vec<_>, SqlError>>()?;
            let (x, negated) = (x.eval, *negated);
            Ok(Compiled::new(Ty::Data(DataType::Boolean), move |row| {
                let v = x(row)?;
                if v.is_null() {
                    return Ok(Value::Null);
                }
                let mut saw_null = false;
                for i in &items {
                    let w = i(row)?;
                    if w.is_null() {
                        saw_null = true;
                    } else if compare(&v, &w).is_eq() {
                        return Ok(Value::Bool(!negated));
                    }
                }
                Ok(if saw_null {
                    Value::Null
                } else {
                    Value::Bool(negated)
                })
            }))
        }
        E::In { .. } | E::Subquery(_) | E::Exists { .. } => {
            Err(err(e, "subqueries are not supported"))
        }
        E::Like {
            negated,
            expr,
            pattern,
            escape_char,
            any: false,
        }
        | E::ILike {
            negated,
            expr,
            pattern,
            escape_char,
            any: false,
        } => {
            let insensitive = matches!(e, E::ILike { .. });
            let x = compile(expr, scope)?;
            string(&x, expr)?;
            let p = compile(pattern, scope)?;
            string(&p, pattern)?;
            let escape = match escape_char.as_deref() {
                None => None,
                Some(E::Value(v)) => match &v.value {
                    ast::Value::SingleQuotedString(s) if s.chars().count() == 1 => s.chars().next(),
                    _ => return Err(err(e, "ESCAPE takes one character")),
                },
                Some(_) => return Err(err(e, "ESCAPE takes one character")),
            };
            functions::like(x, p, *negated, insensitive, escape).map_err(|m| err(pattern, m))
        }
        E::Case {
            operand,
            conditions,
            else_result,
            ..
        } => case(
            e,
            operand.as_deref(),
            conditions,
            else_result.as_deref(),
            scope,
        ),
        E::Cast {
            kind,
            expr,
            data_type,
            format: None,
        } => {
            let x = compile(expr, scope)?;
            let t = sql_type(data_type, e)?;
            if let (Some(DataType::Struct(from)), DataType::Struct(to)) = (x.data_type(), &t) {
                if from.len() != to.len() {
                    return Err(err(
                        e,
                        format!(
                            "a ROW of {} fields cannot be cast to {t}, which has {}",
                            from.len(),
                            to.len()
                        ),
                    ));
                }
            }
            // To or from a TIMESTAMP_LTZ, through the wall-clock time the
            // session time zone shows (Flink's casts).
            let zone = &scope.session.time_zone;
            let ltz = Ty::Data(DataType::TimestampLtz);
            let (x, t) = match (&x.ty, &t) {
                (from, to) if *from == ltz && *to == DataType::TimestampLtz => return Ok(x),
                (from, to) if *from == ltz => (functions::calendar::to_local(x, zone), to.clone()),
                (_, DataType::TimestampLtz) => {
                    let local = cast_to(x, DataType::Timestamp, kind);
                    return Ok(functions::calendar::to_zoned(local, zone));
                }
                // A DATE as text is its day, a TIME its time of day; an
                // ARRAY, MAP or ROW is written in Flink's form.
                (
                    Ty::Data(
                        from @ (DataType::Date
                        | DataType::Time
                        | DataType::List(_)
                        | DataType::Map(..)
                        | DataType::Struct(_)),
                    ),
                    DataType::String,
                ) => {
                    let from = from.clone();
                    let f = x.eval.clone();
                    let text = Compiled::new(Ty::Data(DataType::String), move |row| {
                        Ok(match f(row)? {
                            Value::Null => Value::Null,
                            v => Value::String(super::cast::to_text_of(&v, &from)),
                        })
                    });
                    let text = functions::compose::fold_if(x.constant.is_some(), text);
                    (text, DataType::String)
                }
                _ => (x, t),
            };
            let cast = cast_to(x, t, kind);
            Ok(match super::types::cast_length(&data_type.to_string()) {
                Some(length) => {
                    let f = cast.eval.clone();
                    functions::compose::fold_if(
                        cast.constant.is_some(),
                        Compiled::new(cast.ty.clone(), move |row| Ok(length.apply(f(row)?))),
                    )
                }
                None => cast,
            })
        }
        E::Extract { field, expr, .. } => {
            let x = compile(expr, scope)?;
            timestamp(&x, expr)?;
            // A TIMESTAMP_LTZ's fields are those the session's clocks show.
            let x = if x.ty == Ty::Data(DataType::TimestampLtz) {
                functions::calendar::to_local(x, &scope.session.time_zone)
            } else {
                x
            };
            let part = extract_part(field, e)?;
            Ok(functions::extract(x, part))
        }
        E::Ceil { expr, field } | E::Floor { expr, field } => {
            let name = if matches!(e, E::Ceil { .. }) {
                "CEIL"
            } else {
                "FLOOR"
            };
            let mut args = vec![compile(expr, scope)?];
            match field {
                ast::CeilFloorKind::DateTimeField(DateTimeField::NoDateTime) => {}
                // `FLOOR(t TO unit)`: the unit by its name.
                ast::CeilFloorKind::DateTimeField(unit) => args.push(Compiled::constant(
                    Value::String(unit.to_string()),
                    Ty::Data(DataType::String),
                )),
                ast::CeilFloorKind::Scale(_) => {
                    return Err(err(
                        e,
                        format!("{name}(x, scale) is not supported; use ROUND"),
                    ))
                }
            }
            functions::call_in(scope.session, name, args, e)
        }
        E::Substring {
            expr,
            substring_from,
            substring_for,
            ..
        } => {
            let mut args = vec![compile(expr, scope)?];
            args.push(match substring_from {
                Some(f) => compile(f, scope)?,
                None => Compiled::constant(Value::Int(1), Ty::Data(DataType::BigInt)),
            });
            if let Some(f) = substring_for {
                args.push(compile(f, scope)?);
            }
            functions::call_in(scope.session, "SUBSTRING", args, e)
        }
        E::Trim {
            trim_where,
            trim_what,
            expr,
            trim_characters: None,
        } => {
            let x = compile(expr, scope)?;
            let what = match trim_what {
                Some(w) => compile(w, scope)?,
                None => Compiled::constant(Value::from(" "), Ty::Data(DataType::String)),
            };
            let side = match trim_where {
                Some(ast::TrimWhereField::Leading) => "LTRIM",
                Some(ast::TrimWhereField::Trailing) => "RTRIM",
                _ => "TRIM",
            };
            functions::call_in(scope.session, side, vec![x, what], e)
        }
        E::Position { expr, r#in } => {
            let args = vec![compile(expr, scope)?, compile(r#in, scope)?];
            functions::call_in(scope.session, "POSITION", args, e)
        }
        E::Array(ast::Array { elem, .. }) => {
            if elem.is_empty() {
                return Err(err(e, "ARRAY[] needs at least one element to have a type"));
            }
            let items = elem
                .iter()
                .map(|x| Ok((compile(x, scope)?, x)))
                .collect::<Result<Vec<_>, SqlError>>()?;
            let ty = super::cast::common_type(&items, e)?;
            let constant = items.iter().all(|(c, _)| c.constant.is_some());
            let fs: Vec<_> = items
                .into_iter()
                .map(|(c, _)| super::cast::coerce_to(c, &ty).eval)
                .collect();
            let array = Compiled::new(
                Ty::Data(DataType::List(Box::new(ty.column_type()))),
                move |row| {
                    fs.iter()
                        .map(|f| f(row))
                        .collect::<Result<Vec<_>, _>>()
                        .map(Value::List)
                },
            );
            Ok(if constant {
                match (array.eval)(&[]) {
                    Ok(v) => Compiled::constant(v, array.ty),
                    Err(_) => array,
                }
            } else {
                array
            })
        }
        // `(a, b)`: a ROW, as `ROW(a, b)`.
        E::Tuple(items) => {
            let args = items
                .iter()
                .map(|i| compile(i, scope))
                .collect::<Result<Vec<_>, _>>()?;
            functions::call("ROW", args, e)
        }
        E::Function(f) => {
            let name = function_name(f);
            if is_aggregate(&name) {
                return match scope.aggregates.as_mut() {
                    Some(hook) => hook(f, e),
                    None => Err(err(
                        e,
                        format!("{}: {}", name.to_uppercase(), scope.no_aggregates_reason),
                    )),
                };
            }
            if f.over.is_some() {
                return Err(err(e, "window functions (OVER) are not supported yet"));
            }
            if f.filter.is_some() {
                return Err(err(e, "FILTER applies only to aggregate functions"));
            }
            let name = name.to_ascii_uppercase();
            let args = call_args(f, e)?
                .into_iter()
                .enumerate()
                .map(|(i, a)| match a {
                    // A time unit keyword (`TIMESTAMPADD(DAY, ...)`) by its name.
                    E::Identifier(unit) if functions::takes_unit(&name, i) => {
                        Ok(Compiled::constant(
                            Value::String(unit.value.to_ascii_uppercase()),
                            Ty::Data(DataType::String),
                        ))
                    }
                    a => compile(a, scope),
                })
                .collect::<Result<Vec<_>, _>>()?;
            functions::call_in(scope.session, &name, args, e)
        }
        _ => Err(err(e, format!("the expression `{e}` is not supported"))),
    }
}

/// `array[i]`: the element at 1-based `i`, NULL past either end.
fn element_at(array: Compiled, i: Compiled, e: &E) -> Result<Compiled, SqlError> {
    // `m[k]`: the value of key k, NULL when the map has none.
    if let Ty::Data(DataType::Map(key, value)) = &array.ty {
        let k = match (&i.ty, key.as_ref()) {
            (Ty::Null, _) => i,
            (Ty::Data(t), want) if t == want => i,
            (Ty::Data(t), want) if numeric(t) && numeric(want) => {
                coerce_to(i, &Ty::Data(want.clone()))
            }
            (t, want) => {
                return Err(err(e, format!("the map's keys are {want}, not {t}")));
            }
        };
        let (m, k) = (array.eval, k.eval);
        return Ok(Compiled::new(Ty::Data((**value).clone()), move |row| {
            let (Value::List(entries), k) = (m(row)?, k(row)?) else {
                return Ok(Value::Null);
            };
            Ok(entries
                .into_iter()
                .find_map(|e| match e {
                    Value::Struct(mut kv) if kv.len() == 2 && kv[0] == k => kv.pop(),
                    _ => None,
                })
                .unwrap_or(Value::Null))
        }));
    }
    let item = match &array.ty {
        Ty::Data(DataType::List(t)) => (**t).clone(),
        t => {
            return Err(err(
                e,
                format!("only an ARRAY takes an index [i] and a MAP a key [k], not {t}"),
            ))
        }
    };
    if !matches!(i.ty, Ty::Null | Ty::Data(DataType::Int | DataType::BigInt)) {
        return Err(err(
            e,
            format!("an array index is an integer, not {}", i.ty),
        ));
    }
    let (a, i) = (array.eval, i.eval);
    Ok(Compiled::new(Ty::Data(item), move |row| {
        let (Value::List(items), Value::Int(i)) = (a(row)?, i(row)?) else {
            return Ok(Value::Null);
        };
        Ok(usize::try_from(i - 1)
            .ok()
            .and_then(|i| items.get(i).cloned())
            .unwrap_or(Value::Null))
    }))
}

/// Constant-folds `c` when every input of it (`of`) is constant.
fn fold(c: Compiled, of: &Compiled) -> Result<Compiled, SqlError> {
    if of.constant.is_some() {
        if let Ok(v) = (c.eval)(&[]) {
            return Ok(Compiled::constant(v, c.ty));
        }
    }
    Ok(c)
}

fn unary_bool(
    a: Compiled,
    f: impl Fn(Value) -> Result<Value, String> + Send + Sync + 'static,
) -> Compiled {
    let g = a.eval;
    Compiled::new(Ty::Data(DataType::Boolean), move |row| f(g(row)?))
}

fn column(scope: &Scope, qualifier: Option<&str>, name: &str, e: &E) -> Result<Compiled, SqlError> {
    let matches: Vec<usize> = scope
        .columns
        .iter()
        .enumerate()
        .filter(|(_, c)| {
            c.name.eq_ignore_ascii_case(name)
                && qualifier.is_none_or(|q| {
                    c.qualifier
                        .as_deref()
                        .is_some_and(|cq| cq.eq_ignore_ascii_case(q))
                })
        })
        .map(|(i, _)| i)
        .collect();
    match matches.as_slice() {
        [i] => {
            if scope.grouped {
                return Err(err(
                    e,
                    format!(
                        "column {name:?} is neither grouped nor aggregated: add it to GROUP BY \
                         or use it inside an aggregate function"
                    ),
                ));
            }
            Ok(Compiled::column(*i, scope.columns[*i].ty.clone()))
        }
        [] => {
            let shown = match qualifier {
                Some(q) => format!("{q}.{name}"),
                None => name.to_string(),
            };
            let nearest = nearest(name, scope.columns.iter().map(|c| c.name.as_str()));
            let hint = match nearest {
                Some(n) => format!("; did you mean {n:?}?"),
                None => String::new(),
            };
            Err(err(e, format!("unknown column {shown:?}{hint}")))
        }
        _ => Err(err(
            e,
            format!("column {name:?} is ambiguous: qualify it with its table's name or alias"),
        )),
    }
}

/// `t.col`, `col.field`, `t.col.field`...
fn compound(scope: &Scope, names: &[&str], e: &E) -> Result<Compiled, SqlError> {
    let qualified = names.len() >= 2
        && scope.columns.iter().any(|c| {
            c.qualifier
                .as_deref()
                .is_some_and(|q| q.eq_ignore_ascii_case(names[0]))
        });
    let (mut c, rest) = if qualified {
        (column(scope, Some(names[0]), names[1], e)?, &names[2..])
    } else {
        (column(scope, None, names[0], e)?, &names[1..])
    };
    for f in rest {
        c = field(c, f, e)?;
    }
    Ok(c)
}

/// A field of a ROW value.
fn field(c: Compiled, name: &str, e: &E) -> Result<Compiled, SqlError> {
    let Some(DataType::Struct(fields)) = c.data_type() else {
        return Err(err(
            e,
            format!("{} has no field {name:?}: it is not a ROW", c.ty),
        ));
    };
    let Some(i) = fields
        .iter()
        .position(|f| f.name.eq_ignore_ascii_case(name))
    else {
        let nearest = nearest(name, fields.iter().map(|f| f.name.as_str()));
        return Err(err(
            e,
            format!(
                "the ROW has no field {name:?}{}",
                nearest.map_or(String::new(), |n| format!("; did you mean {n:?}?"))
            ),
        ));
    };
    let t = fields[i].data_type.clone();
    let f = c.eval;
    Ok(Compiled::new(Ty::Data(t), move |row| {
        Ok(match f(row)? {
            Value::Struct(mut items) if i < items.len() => items.swap_remove(i),
            _ => Value::Null,
        })
    }))
}

fn literal(v: &ast::Value, e: &E) -> Result<Compiled, SqlError> {
    Ok(match v {
        ast::Value::Number(text, _) => {
            if let Ok(i) = text.parse::<i64>() {
                Compiled::constant(Value::Int(i), Ty::Data(DataType::BigInt))
            } else if text.contains(['e', 'E']) {
                let d: f64 = text.parse().map_err(|_| err(e, "not a number"))?;
                Compiled::constant(Value::Double(d), Ty::Data(DataType::Double))
            } else {
                let scale = text.split_once('.').map_or(0, |(_, f)| f.len());
                let digits = text.chars().filter(char::is_ascii_digit).count();
                if scale > 38 || digits > 38 {
                    return Err(err(e, "a decimal literal has at most 38 digits"));
                }
                let d = Decimal::parse(text, scale as u8).map_err(|m| err(e, m))?;
                Compiled::constant(
                    Value::Decimal(d),
                    Ty::Data(DataType::Decimal {
                        precision: digits.max(scale).max(1) as u8,
                        scale: scale as u8,
                    }),
                )
            }
        }
        ast::Value::SingleQuotedString(s) | ast::Value::DoubleQuotedString(s) => {
            Compiled::constant(Value::String(s.clone()), Ty::Data(DataType::String))
        }
        ast::Value::Boolean(b) => Compiled::constant(Value::Bool(*b), Ty::Data(DataType::Boolean)),
        ast::Value::Null => Compiled::constant(Value::Null, Ty::Null),
        other => return Err(err(e, format!("the literal {other} is not supported"))),
    })
}

/// An interval literal's value: a day-time interval in milliseconds, or a
/// year-month interval in months (which has no fixed length: it moves a
/// date on the calendar).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntervalValue {
    Millis(i64),
    Months(i64),
}

/// A day-time interval in milliseconds: what a window's size, a join's
/// bound or a watermark's delay takes. `INTERVAL '4' SECOND`,
/// `INTERVAL '2.5' SECOND`, `INTERVAL '1 02:00:00' DAY TO SECOND`,
/// `INTERVAL '10 seconds'`; a year-month interval is refused here.
pub fn interval(i: &ast::Interval, e: &E) -> Result<i64, SqlError> {
    match interval_value(i, e)? {
        IntervalValue::Millis(ms) => Ok(ms),
        IntervalValue::Months(_) => Err(err(
            e,
            "an interval of YEAR or MONTH has no fixed length: here the unit is MILLISECOND, \
             SECOND, MINUTE, HOUR or DAY",
        )),
    }
}

/// Any interval literal, as Flink writes them: one unit
/// (`INTERVAL '3' MONTH`, `INTERVAL '-1.5' HOUR`), two units
/// (`INTERVAL '1-6' YEAR TO MONTH`, `INTERVAL '2 03:04:05.006' DAY TO
/// SECOND`, `INTERVAL '10:30' HOUR TO MINUTE`), or the unit in the text
/// (`INTERVAL '10 seconds'`, `INTERVAL '2 months'`).
pub fn interval_value(i: &ast::Interval, e: &E) -> Result<IntervalValue, SqlError> {
    let text = match i.value.as_ref() {
        E::Value(v) => match &v.value {
            ast::Value::SingleQuotedString(s) => s.clone(),
            ast::Value::Number(n, _) => n.clone(),
            _ => return Err(err(e, "an interval's value is a number in quotes")),
        },
        E::UnaryOp {
            op: UnaryOperator::Minus,
            expr,
        } => match expr.as_ref() {
            E::Value(v) => match &v.value {
                ast::Value::SingleQuotedString(s) | ast::Value::Number(s, _) => format!("-{s}"),
                _ => return Err(err(e, "an interval's value is a number in quotes")),
            },
            _ => return Err(err(e, "an interval's value is a number in quotes")),
        },
        _ => return Err(err(e, "an interval's value is a number in quotes")),
    };
    let text = text.trim();
    match (&i.leading_field, &i.last_field) {
        (Some(first), Some(last)) => two_units(text, first, last).ok_or_else(|| {
            err(
                e,
                format!(
                    "{text:?} is not an interval {first} TO {last} (for example {})",
                    two_unit_example(first, last)
                ),
            )
        }),
        (Some(f), None) => {
            let unit =
                unit_of(f).ok_or_else(|| err(e, format!("INTERVAL ... {f} is not supported")))?;
            one_unit(text, unit).ok_or_else(|| err(e, format!("{text:?} is not a number of {f}S")))
        }
        (None, _) => {
            // `INTERVAL '10 seconds'`: the unit is in the text.
            let mut parts = text.split_whitespace();
            let number = parts.next().unwrap_or("");
            let word = parts.next().unwrap_or("").to_ascii_lowercase();
            let field =
                match word.trim_end_matches('s') {
                    "millisecond" => DateTimeField::Millisecond,
                    "second" => DateTimeField::Second,
                    "minute" => DateTimeField::Minute,
                    "hour" => DateTimeField::Hour,
                    "day" => DateTimeField::Day,
                    "month" => DateTimeField::Month,
                    "year" => DateTimeField::Year,
                    _ => return Err(err(
                        e,
                        "an interval's unit is MILLISECOND, SECOND, MINUTE, HOUR, DAY, MONTH or \
                         YEAR",
                    )),
                };
            let unit = unit_of(&field).expect("each of these units has a length");
            one_unit(number, unit)
                .ok_or_else(|| err(e, format!("{number:?} is not a number of {word}")))
        }
    }
}

#[derive(Clone, Copy)]
enum Unit {
    Millis(i64),
    Months(i64),
}

fn unit_of(f: &DateTimeField) -> Option<Unit> {
    Some(match f {
        DateTimeField::Year | DateTimeField::Years => Unit::Months(12),
        DateTimeField::Month | DateTimeField::Months => Unit::Months(1),
        f => Unit::Millis(unit_ms(f)?),
    })
}

/// A number of one unit: a fraction is kept to the millisecond for a
/// day-time unit; months and years are whole.
fn one_unit(number: &str, unit: Unit) -> Option<IntervalValue> {
    match unit {
        Unit::Millis(ms) => {
            let n: f64 = number.parse().ok()?;
            let v = (n * ms as f64).round();
            (v.is_finite() && v.abs() < 9.2e18).then_some(IntervalValue::Millis(v as i64))
        }
        Unit::Months(m) => {
            let n: i64 = number.parse().ok()?;
            n.checked_mul(m).map(IntervalValue::Months)
        }
    }
}

/// `'1-6'` YEAR TO MONTH, `'2 03:04:05.006'` DAY TO SECOND and the other
/// two-unit forms; a leading `-` negates the whole interval.
fn two_units(text: &str, first: &DateTimeField, last: &DateTimeField) -> Option<IntervalValue> {
    use DateTimeField as F;
    let (negative, body) = match text.strip_prefix('-') {
        Some(rest) => (true, rest.trim()),
        None => (false, text.strip_prefix('+').unwrap_or(text).trim()),
    };
    let sign = if negative { -1 } else { 1 };
    let whole = |s: &str| -> Option<i64> {
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()
    };
    // Seconds with up to three decimals, in milliseconds.
    let seconds = |s: &str| -> Option<i64> {
        let (w, f) = s.split_once('.').unwrap_or((s, ""));
        if f.len() > 3 || !f.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let frac = if f.is_empty() {
            0
        } else {
            format!("{f:0<3}").parse::<i64>().ok()?
        };
        Some(whole(w)? * 1_000 + frac)
    };
    let clock = |s: &str, units: &[i64]| -> Option<i64> {
        let parts: Vec<&str> = s.split(':').collect();
        if parts.len() != units.len() {
            return None;
        }
        let mut total = 0i64;
        for (k, (p, unit)) in parts.iter().zip(units).enumerate() {
            let v = if k == units.len() - 1 && *unit == 1 {
                seconds(p)?
            } else {
                whole(p)? * unit
            };
            total = total.checked_add(v)?;
        }
        Some(total)
    };
    let (h, m) = (3_600_000, 60_000);
    let ms = match (first, last) {
        (F::Year | F::Years, F::Month | F::Months) => {
            let (y, mo) = body.split_once('-')?;
            let months = whole(y)?.checked_mul(12)?.checked_add(whole(mo)?)?;
            return Some(IntervalValue::Months(sign * months));
        }
        (F::Day | F::Days, last) => {
            let (d, rest) = body.split_once(' ')?;
            let d = whole(d)?.checked_mul(86_400_000)?;
            let rest = rest.trim();
            let r = match last {
                F::Hour | F::Hours => whole(rest)? * h,
                F::Minute | F::Minutes => clock(rest, &[h, m])?,
                F::Second | F::Seconds => clock(rest, &[h, m, 1])?,
                _ => return None,
            };
            d.checked_add(r)?
        }
        (F::Hour | F::Hours, F::Minute | F::Minutes) => clock(body, &[h, m])?,
        (F::Hour | F::Hours, F::Second | F::Seconds) => clock(body, &[h, m, 1])?,
        (F::Minute | F::Minutes, F::Second | F::Seconds) => clock(body, &[m, 1])?,
        _ => return None,
    };
    Some(IntervalValue::Millis(sign * ms))
}

fn two_unit_example(first: &DateTimeField, last: &DateTimeField) -> &'static str {
    use DateTimeField as F;
    match (first, last) {
        (F::Year | F::Years, _) => "'1-6' YEAR TO MONTH",
        (F::Day | F::Days, F::Hour | F::Hours) => "'2 03' DAY TO HOUR",
        (F::Day | F::Days, F::Minute | F::Minutes) => "'2 03:04' DAY TO MINUTE",
        (F::Day | F::Days, _) => "'2 03:04:05.006' DAY TO SECOND",
        (F::Hour | F::Hours, F::Minute | F::Minutes) => "'03:04' HOUR TO MINUTE",
        (F::Hour | F::Hours, _) => "'03:04:05.006' HOUR TO SECOND",
        (F::Minute | F::Minutes, _) => "'04:05.006' MINUTE TO SECOND",
        _ => "YEAR TO MONTH, DAY TO HOUR|MINUTE|SECOND, HOUR TO MINUTE|SECOND, MINUTE TO SECOND",
    }
}

fn unit_ms(f: &DateTimeField) -> Option<i64> {
    Some(match f {
        DateTimeField::Millisecond | DateTimeField::Milliseconds => 1,
        DateTimeField::Second | DateTimeField::Seconds => 1_000,
        DateTimeField::Minute | DateTimeField::Minutes => 60_000,
        DateTimeField::Hour | DateTimeField::Hours => 3_600_000,
        DateTimeField::Day | DateTimeField::Days => 86_400_000,
        _ => return None,
    })
}

fn extract_part(f: &DateTimeField, e: &E) -> Result<&'static str, SqlError> {
    Ok(match f {
        DateTimeField::Year | DateTimeField::Years => "YEAR",
        DateTimeField::Month | DateTimeField::Months => "MONTH",
        DateTimeField::Day | DateTimeField::Days => "DAY",
        DateTimeField::Hour | DateTimeField::Hours => "HOUR",
        DateTimeField::Minute | DateTimeField::Minutes => "MINUTE",
        DateTimeField::Second | DateTimeField::Seconds => "SECOND",
        DateTimeField::Millisecond | DateTimeField::Milliseconds => "MILLISECOND",
        DateTimeField::DayOfWeek | DateTimeField::Dow => "DOW",
        DateTimeField::DayOfYear | DateTimeField::Doy => "DOY",
        DateTimeField::Epoch => "EPOCH",
        _ => return Err(err(e, format!("EXTRACT({f} ...) is not supported"))),
    })
}

pub fn sql_type(t: &ast::DataType, e: &E) -> Result<DataType, SqlError> {
    parse_type(&t.to_string()).map_err(|m| err(e, m))
}

fn numeric(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Int | DataType::BigInt | DataType::Double | DataType::Decimal { .. }
    )
}

fn numeric_or_interval(c: &Compiled, e: &E) -> Result<Ty, SqlError> {
    match &c.ty {
        Ty::Null | Ty::Interval | Ty::MonthInterval => Ok(c.ty.clone()),
        Ty::Data(t) if numeric(t) => Ok(c.ty.clone()),
        t => Err(err(e, format!("{t} is not a number"))),
    }
}

pub fn boolean(c: &Compiled, e: &E) -> Result<(), SqlError> {
    match &c.ty {
        Ty::Null | Ty::Data(DataType::Boolean) => Ok(()),
        t => Err(err(e, format!("expected BOOLEAN, found {t}"))),
    }
}

/// `CAST(c AS t)`, or TRY_CAST's NULL for a value that does not convert.
fn cast_to(c: Compiled, t: DataType, kind: &CastKind) -> Compiled {
    let tried = matches!(kind, CastKind::TryCast | CastKind::SafeCast);
    let f = c.eval.clone();
    let target = t.clone();
    functions::compose::fold_if(
        c.constant.is_some(),
        Compiled::new(Ty::Data(t), move |row| match cast_value(f(row)?, &target) {
            Ok(v) => Ok(v),
            Err(_) if tried => Ok(Value::Null),
            Err(m) => Err(m),
        }),
    )
}

fn string(c: &Compiled, e: &E) -> Result<(), SqlError> {
    match &c.ty {
        Ty::Null | Ty::Data(DataType::String) => Ok(()),
        t => Err(err(e, format!("expected VARCHAR, found {t}"))),
    }
}

fn timestamp(c: &Compiled, e: &E) -> Result<(), SqlError> {
    match &c.ty {
        Ty::Null | Ty::Data(DataType::Timestamp | DataType::TimestampLtz) => Ok(()),
        t => Err(err(
            e,
            format!("expected TIMESTAMP(3) or TIMESTAMP_LTZ(3), found {t}"),
        )),
    }
}

fn comparable(a: &Compiled, b: &Compiled, e: &E) -> Result<(), SqlError> {
    let ok = match (&a.ty, &b.ty) {
        (Ty::Null, _) | (_, Ty::Null) => true,
        // A DATE is compared with a TIMESTAMP as its midnight, as Flink
        // casts it.
        (Ty::Data(x), Ty::Data(y)) => {
            x == y
                || (numeric(x) && numeric(y))
                || matches!(
                    (x, y),
                    (DataType::Date, DataType::Timestamp) | (DataType::Timestamp, DataType::Date)
                )
        }
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(err(e, format!("cannot compare {} with {}", a.ty, b.ty)))
    }
}

fn negate(v: Value) -> Result<Value, String> {
    Ok(match v {
        Value::Int(i) => Value::Int(i.checked_neg().ok_or("BIGINT overflow in negation")?),
        Value::Double(d) => Value::Double(-d),
        Value::Decimal(d) => Value::Decimal(Decimal {
            unscaled: -{ d.unscaled },
            scale: d.scale,
        }),
        other => other,
    })
}

fn truth(v: &Value) -> Option<bool> {
    match v {
        Value::Bool(b) => Some(*b),
        _ => None,
    }
}

fn and3(a: Option<bool>, b: Option<bool>) -> Option<bool> {
    match (a, b) {
        (Some(false), _) | (_, Some(false)) => Some(false),
        (Some(true), Some(true)) => Some(true),
        _ => None,
    }
}

fn cmp_bool(a: &Value, b: &Value, f: impl Fn(std::cmp::Ordering) -> bool) -> Option<bool> {
    if a.is_null() || b.is_null() {
        None
    } else {
        Some(f(compare(a, b)))
    }
}

/// A string constant compared with a timestamp is read as a timestamp (a
/// TIMESTAMP_LTZ's as the wall-clock time of the session time zone).
fn coerce_for_compare(
    a: Compiled,
    other: &Compiled,
    e: &E,
    zone: &jiff::tz::TimeZone,
) -> Result<Compiled, SqlError> {
    if let (Some(Value::String(s)), Some(t @ (DataType::Date | DataType::Time))) =
        (&a.constant, other.data_type())
    {
        let ms = if *t == DataType::Date {
            crate::dataflow::json::parse_date(s)
        } else {
            crate::dataflow::json::parse_time(s)
        }
        .map_err(|m| err(e, m))?;
        return Ok(Compiled::constant(
            Value::Timestamp(ms),
            Ty::Data(t.clone()),
        ));
    }
    if let (Some(Value::String(s)), Some(t)) = (&a.constant, other.data_type()) {
        if t.is_timestamp() {
            let mut ms = crate::dataflow::json::parse_timestamp(s).map_err(|m| err(e, m))?;
            if *t == DataType::TimestampLtz {
                ms = functions::calendar::zoned_ms(zone, ms).map_err(|m| err(e, m))?;
            }
            return Ok(Compiled::constant(
                Value::Timestamp(ms),
                Ty::Data(t.clone()),
            ));
        }
    }
    Ok(a)
}

fn binary(
    e: &E,
    left: &E,
    op: &BinaryOperator,
    right: &E,
    scope: &mut Scope,
) -> Result<Compiled, SqlError> {
    let a = compile(left, scope)?;
    let b = compile(right, scope)?;
    use BinaryOperator as B;
    match op {
        B::And | B::Or => {
            boolean(&a, left)?;
            boolean(&b, right)?;
            let (f, g) = (a.eval.clone(), b.eval.clone());
            let is_and = *op == B::And;
            let c = Compiled::new(Ty::Data(DataType::Boolean), move |row| {
                let x = truth(&f(row)?);
                // Short cut: FALSE AND _, TRUE OR _.
                if x == Some(!is_and) {
                    return Ok(Value::Bool(!is_and));
                }
                let y = truth(&g(row)?);
                let r = if is_and {
                    and3(x, y)
                } else {
                    match (x, y) {
                        (Some(true), _) | (_, Some(true)) => Some(true),
                        (Some(false), Some(false)) => Some(false),
                        _ => None,
                    }
                };
                Ok(r.map_or(Value::Null, Value::Bool))
            });
            both_constant(c, &a, &b)
        }
        B::Eq | B::NotEq | B::Lt | B::LtEq | B::Gt | B::GtEq => {
            let zone = &scope.session.time_zone;
            let a = coerce_for_compare(a, &b, left, zone)?;
            let b = coerce_for_compare(b, &a, right, zone)?;
            comparable(&a, &b, e)?;
            let test: fn(std::cmp::Ordering) -> bool = match op {
                B::Eq => |o| o.is_eq(),
                B::NotEq => |o| o.is_ne(),
                B::Lt => |o| o.is_lt(),
                B::LtEq => |o| o.is_le(),
                B::Gt => |o| o.is_gt(),
                _ => |o| o.is_ge(),
            };
            let (f, g) = (a.eval.clone(), b.eval.clone());
            let c = Compiled::new(Ty::Data(DataType::Boolean), move |row| {
                Ok(cmp_bool(&f(row)?, &g(row)?, test).map_or(Value::Null, Value::Bool))
            });
            both_constant(c, &a, &b)
        }
        B::StringConcat => functions::call_in(scope.session, "CONCAT", vec![a, b], e),
        B::Plus | B::Minus | B::Multiply | B::Divide | B::Modulo => {
            let name = match op {
                B::Plus => "+",
                B::Minus => "-",
                B::Multiply => "*",
                B::Divide => "/",
                _ => "%",
            };
            let c = functions::arithmetic(name, a.clone(), b.clone(), e)?;
            both_constant(c, &a, &b)
        }
        _ => Err(err(e, format!("operator {op} is not supported"))),
    }
}

fn both_constant(c: Compiled, a: &Compiled, b: &Compiled) -> Result<Compiled, SqlError> {
    if a.constant.is_some() && b.constant.is_some() {
        if let Ok(v) = (c.eval)(&[]) {
            return Ok(Compiled::constant(v, c.ty));
        }
    }
    Ok(c)
}

fn case(
    e: &E,
    operand: Option<&E>,
    conditions: &[ast::CaseWhen],
    else_result: Option<&E>,
    scope: &mut Scope,
) -> Result<Compiled, SqlError> {
    let operand = operand.map(|o| compile(o, scope)).transpose()?;
    let mut whens = Vec::new();
    let mut results = Vec::new();
    for w in conditions {
        let c = compile(&w.condition, scope)?;
        match &operand {
            Some(o) => comparable(o, &c, &w.condition)?,
            None => boolean(&c, &w.condition)?,
        }
        whens.push(c.eval);
        results.push((compile(&w.result, scope)?, &w.result));
    }
    let otherwise = else_result.map(|x| (compile(x, scope), x));
    let mut all: Vec<(Compiled, &E)> = results;
    let otherwise = match otherwise {
        Some((c, x)) => {
            all.push((c?, x));
            true
        }
        None => false,
    };
    let ty = common_type(&all, e)?;
    let mut branches: Vec<Arc<EvalFn>> = all
        .into_iter()
        .map(|(c, _)| coerce_to(c, &ty).eval)
        .collect();
    let default = if otherwise { branches.pop() } else { None };
    let operand = operand.map(|o| o.eval);
    Ok(Compiled::new(ty, move |row| {
        let subject = operand.as_ref().map(|o| o(row)).transpose()?;
        for (when, then) in whens.iter().zip(&branches) {
            let w = when(row)?;
            let hit = match &subject {
                Some(s) => !s.is_null() && !w.is_null() && compare(s, &w).is_eq(),
                None => truth(&w) == Some(true),
            };
            if hit {
                return then(row);
            }
        }
        match &default {
            Some(d) => d(row),
            None => Ok(Value::Null),
        }
    }))
}

/// True if `pred` holds for `e` or any expression inside it.
pub fn walk(e: &E, pred: &mut dyn FnMut(&E) -> bool) -> bool {
    if pred(e) {
        return true;
    }
    let mut any = |x: &E| walk(x, pred);
    match e {
        E::Nested(a)
        | E::IsNull(a)
        | E::IsNotNull(a)
        | E::IsTrue(a)
        | E::IsFalse(a)
        | E::IsNotTrue(a)
        | E::IsNotFalse(a) => any(a),
        E::UnaryOp { expr, .. }
        | E::Cast { expr, .. }
        | E::Extract { expr, .. }
        | E::Ceil { expr, .. }
        | E::Floor { expr, .. } => any(expr),
        E::BinaryOp { left, right, .. } => any(left) || any(right),
        E::Between {
            expr, low, high, ..
        } => any(expr) || any(low) || any(high),
        E::In {
            expr,
            target: ast::InTarget::List(list),
            ..
        } => any(expr) || list.iter().any(any),
        E::Like { expr, pattern, .. } | E::ILike { expr, pattern, .. } => any(expr) || any(pattern),
        E::Case {
            operand,
            conditions,
            else_result,
            ..
        } => {
            operand.as_deref().is_some_and(&mut any)
                || conditions
                    .iter()
                    .any(|c| any(&c.condition) || any(&c.result))
                || else_result.as_deref().is_some_and(any)
        }
        E::Function(f) => match &f.args {
            ast::FunctionArguments::List(l) => l.args.iter().any(|a| match a {
                ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(x)) => any(x),
                _ => false,
            }),
            _ => false,
        },
        E::Substring {
            expr,
            substring_from,
            substring_for,
            ..
        } => {
            any(expr)
                || substring_from.as_deref().is_some_and(&mut any)
                || substring_for.as_deref().is_some_and(any)
        }
        _ => false,
    }
}
