//! Conditional functions: their arguments meet in one type (numbers
//! widen), and only the branch a row takes is evaluated. `CASE` is an
//! expression of its own (`super::super::expr`).

use std::sync::Arc;

use sqlparser::ast::Expr as E;

use super::super::cast::{coerce_to, common_type};
use super::super::compiled::{Compiled, EvalFn, Ty};
use super::compose::{all_constant, fold_if};
use super::definition::{Call, Function};
use super::signature::{many, p, Kind::*};
use crate::dataflow::compare::compare;
use crate::dataflow::row::Value;

pub const FUNCTIONS: &[Function] = &[
    Function::new(
        "IF",
        &[p("condition", Boolean), p("then", Any), p("else", Any)],
        "the common type",
        if_,
    )
    .doc(
        "`then` when `condition` is TRUE, else `else` (also when it is NULL)",
        "IF(1 < 2, 'yes', 'no')",
        "'yes'",
    ),
    Function::new(
        "COALESCE",
        &[many(p("x", Any))],
        "the common type",
        coalesce,
    )
    .doc(
        "the first of its arguments that is not NULL",
        "COALESCE(NULL, 2, 3)",
        "2",
    ),
    Function::new(
        "IFNULL",
        &[p("x", Any), p("otherwise", Any)],
        "the common type",
        coalesce,
    )
    .doc(
        "`x`, or `otherwise` when `x` is NULL",
        "IFNULL(NULL, 'none')",
        "'none'",
    ),
    Function::new("NULLIF", &[p("x", Any), p("y", Any)], "type of x", nullif).doc(
        "NULL when `x` equals `y`, else `x`",
        "NULLIF(3, 3)",
        "NULL",
    ),
    Function::new("GREATEST", &[many(p("x", Any))], "the common type", extreme).doc(
        "the greatest of its arguments; NULL when any is NULL",
        "GREATEST(1, 7, 3)",
        "7",
    ),
    Function::new("LEAST", &[many(p("x", Any))], "the common type", extreme).doc(
        "the least of its arguments; NULL when any is NULL",
        "LEAST('b', 'a')",
        "'a'",
    ),
];

/// `args` in their common type, with their functions.
fn common(name: &str, args: Vec<Compiled>) -> Result<(Ty, Vec<Arc<EvalFn>>), String> {
    let here = E::Identifier(sqlparser::ast::Ident::new(name));
    let items: Vec<(Compiled, &E)> = args.into_iter().map(|a| (a, &here)).collect();
    let ty = common_type(&items, &here).map_err(|e| e.message)?;
    let fs = items
        .into_iter()
        .map(|(c, _)| coerce_to(c, &ty).eval)
        .collect();
    Ok((ty, fs))
}

fn if_(call: &Call, mut args: Vec<Compiled>) -> Result<Compiled, String> {
    let name = call.name;
    let constant = all_constant(&args);
    let condition = args.remove(0).eval;
    let (ty, fs) = common(name, args)?;
    let (t, f) = (fs[0].clone(), fs[1].clone());
    Ok(fold_if(
        constant,
        Compiled::new(ty, move |row| {
            if condition(row)? == Value::Bool(true) {
                t(row)
            } else {
                f(row)
            }
        }),
    ))
}

fn coalesce(call: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    let name = call.name;
    let constant = all_constant(&args);
    let (ty, fs) = common(name, args)?;
    Ok(fold_if(
        constant,
        Compiled::new(ty, move |row| {
            for f in &fs {
                let v = f(row)?;
                if !v.is_null() {
                    return Ok(v);
                }
            }
            Ok(Value::Null)
        }),
    ))
}

fn nullif(call: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    let name = call.name;
    let constant = all_constant(&args);
    // Compared in their common type; the result is x as it is.
    let (ty, original) = (args[0].ty.clone(), args[0].eval.clone());
    let (_, fs) = common(name, args)?;
    let (f, g) = (fs[0].clone(), fs[1].clone());
    Ok(fold_if(
        constant,
        Compiled::new(ty, move |row| {
            let x = f(row)?;
            let y = g(row)?;
            Ok(if !x.is_null() && !y.is_null() && compare(&x, &y).is_eq() {
                Value::Null
            } else {
                original(row)?
            })
        }),
    ))
}

fn extreme(call: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    let name = call.name;
    let greatest = name == "GREATEST";
    let constant = all_constant(&args);
    let (ty, fs) = common(name, args)?;
    Ok(fold_if(
        constant,
        Compiled::new(ty, move |row| {
            let mut best = Value::Null;
            for f in &fs {
                let v = f(row)?;
                if v.is_null() {
                    return Ok(Value::Null);
                }
                let order = compare(&v, &best);
                if best.is_null() || (greatest && order.is_gt()) || (!greatest && order.is_lt()) {
                    best = v;
                }
            }
            Ok(best)
        }),
    ))
}
