//! Collection functions over ARRAY values. An array's elements may be
//! NULL; an array that is NULL makes the result NULL.

use super::super::compiled::{Compiled, Ty};
use super::compose::{strict, text};
use super::definition::{Call, Function};
use super::signature::{optional, p, Kind::*};
use crate::dataflow::expr::compare;
use crate::dataflow::row::{DataType as T, Value};

pub const FUNCTIONS: &[Function] = &[
    Function::new("CARDINALITY", &[p("a", Array)], "INT", cardinality).doc(
        "the number of elements of `a`",
        "CARDINALITY(ARRAY[1, 2, 3])",
        "3",
    ),
    Function::new("ELEMENT", &[p("a", Array)], "the element type", element).doc(
        "the one element of `a`; NULL when `a` is empty, an error when it has more than one",
        "ELEMENT(ARRAY['only'])",
        "'only'",
    ),
    Function::new(
        "ARRAY_CONTAINS",
        &[p("a", Array), p("x", Any)],
        "BOOLEAN",
        array_contains,
    )
    .doc(
        "whether `a` has an element equal to `x` (a NULL `x` looks for a NULL element)",
        "ARRAY_CONTAINS(ARRAY[1, 2], 2)",
        "TRUE",
    ),
    Function::new(
        "ARRAY_JOIN",
        &[
            p("a", Array),
            p("separator", Text),
            optional(p("null_replacement", Text)),
        ],
        "VARCHAR",
        array_join,
    )
    .doc(
        "the elements of `a` (strings) with `separator` between them; NULL elements are left \
         out, or written as `null_replacement`",
        "ARRAY_JOIN(ARRAY['a', NULL, 'c'], '-', '?')",
        "'a-?-c'",
    ),
];

/// The element type of an array argument (VARCHAR for an untyped NULL).
fn element_type(c: &Compiled) -> T {
    match &c.ty {
        Ty::Data(T::List(t)) => (**t).clone(),
        _ => T::String,
    }
}

fn list(v: &Value) -> &[Value] {
    match v {
        Value::List(items) => items,
        _ => &[],
    }
}

fn cardinality(_: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    Ok(strict(T::Int, args, |v| {
        Ok(Value::Int(list(&v[0]).len() as i64))
    }))
}

fn element(_: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    let t = element_type(&args[0]);
    Ok(strict(t, args, |v| match list(&v[0]) {
        [] => Ok(Value::Null),
        [one] => Ok(one.clone()),
        more => Err(format!(
            "ELEMENT of an array of {} elements: it takes an array of at most one",
            more.len()
        )),
    }))
}

fn array_contains(_: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    let want = element_type(&args[0]);
    match &args[1].ty {
        Ty::Data(t)
            if *t != want
                && !(super::super::cast::numeric(t) && super::super::cast::numeric(&want)) =>
        {
            return Err(format!(
                "ARRAY_CONTAINS looks for {t} in an array of {want}"
            ))
        }
        _ => {}
    }
    let (a, x) = (args[0].eval.clone(), args[1].eval.clone());
    Ok(Compiled::new(Ty::Data(T::Boolean), move |row| {
        let items = a(row)?;
        if items.is_null() {
            return Ok(Value::Null);
        }
        let x = x(row)?;
        Ok(Value::Bool(list(&items).iter().any(|e| {
            if x.is_null() {
                e.is_null()
            } else {
                !e.is_null() && compare(e, &x).is_eq()
            }
        })))
    }))
}

fn array_join(_: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    if element_type(&args[0]) != T::String {
        return Err(format!(
            "ARRAY_JOIN joins an array of VARCHAR, not {}",
            args[0].ty
        ));
    }
    let (a, sep) = (args[0].eval.clone(), args[1].eval.clone());
    let replacement = args.get(2).map(|c| c.eval.clone());
    Ok(Compiled::new(Ty::Data(T::String), move |row| {
        let (items, sep) = (a(row)?, sep(row)?);
        let replacement = match &replacement {
            Some(r) => Some(r(row)?),
            None => None,
        };
        if items.is_null() || sep.is_null() || replacement.as_ref().is_some_and(Value::is_null) {
            return Ok(Value::Null);
        }
        let parts: Vec<&str> = list(&items)
            .iter()
            .filter_map(|e| match e {
                Value::Null => replacement.as_ref().map(text),
                e => Some(text(e)),
            })
            .collect();
        Ok(Value::String(parts.join(text(&sep))))
    }))
}
