//! Collection functions over ARRAY and MAP values. An array's elements
//! and a map's values may be NULL; an array or a map that is NULL makes
//! the result NULL.

use super::super::cast::{coerce_to, numeric};
use super::super::compiled::{Compiled, Ty};
use super::compose::{fold_if, strict, text};
use super::definition::{Call, Function};
use super::signature::{any_number, optional, p, Kind::*};
use crate::dataflow::compare::compare;
use crate::dataflow::row::{map_entries, map_of, DataType as T, Value};

pub const FUNCTIONS: &[Function] = &[
    Function::new("CARDINALITY", &[p("a", Array)], "INT", cardinality).doc(
        "the number of elements of `a`",
        "CARDINALITY(ARRAY[1, 2, 3])",
        "3",
    ),
    Function::new("CARDINALITY", &[p("m", Map)], "INT", cardinality).doc(
        "the number of entries of `m`",
        "CARDINALITY(MAP['a', 1, 'b', 2])",
        "2",
    ),
    Function::new("MAP", &[any_number(p("entry", Any))], "MAP", map)
        .written("MAP[k1 ANY, v1 ANY, ...]")
        .doc(
            "a map of the keys and values in turn; a later value of a key replaces an earlier \
             one; a NULL key is an error",
            "MAP_VALUES(MAP['a', 1, 'b', 2, 'a', 3])",
            "ARRAY[3, 2]",
        ),
    Function::new("ROW", &[any_number(p("field", Any))], "ROW", row)
        .written("ROW(f0 ANY, f1 ANY, ...) or (f0, f1, ...)")
        .doc(
            "a ROW of its arguments, its fields named `EXPR$0`, `EXPR$1`, ... as Flink names \
             them; `CAST(ROW(...) AS ROW<a INT, b STRING>)` names them",
            "CAST(ROW(1, 'a') AS ROW<n INT, s STRING>).s",
            "'a'",
        ),
    Function::new("MAP_KEYS", &[p("m", Map)], "ARRAY of the keys", map_keys).doc(
        "the keys of `m`, in the order they were made",
        "MAP_KEYS(MAP['a', 1, 'b', 2])",
        "ARRAY['a', 'b']",
    ),
    Function::new(
        "MAP_VALUES",
        &[p("m", Map)],
        "ARRAY of the values",
        map_keys,
    )
    .doc(
        "the values of `m`, in the order of its keys",
        "MAP_VALUES(MAP['a', 1, 'b', 2])",
        "ARRAY[1, 2]",
    ),
    Function::new(
        "MAP_FROM_ARRAYS",
        &[p("keys", Array), p("values", Array)],
        "MAP",
        map_from_arrays,
    )
    .doc(
        "a map of `keys[i]` to `values[i]`; an error when their lengths differ",
        "MAP_KEYS(MAP_FROM_ARRAYS(ARRAY['x', 'y'], ARRAY[1, 2]))",
        "ARRAY['x', 'y']",
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

/// The type `items` share (numbers widen), for a map's keys or values.
fn shared(items: &[&Compiled], what: &str) -> Result<T, String> {
    let mut ty: Option<T> = None;
    for c in items {
        let Ty::Data(t) = &c.ty else { continue };
        ty = Some(match ty {
            None => t.clone(),
            Some(have) if have == *t => have,
            Some(have) if numeric(&have) && numeric(t) => super::super::cast::wider(&have, t),
            Some(have) => return Err(format!("a MAP's {what} are {have} and {t}: one type")),
        });
    }
    Ok(ty.unwrap_or(T::String))
}

fn map(_: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    if !args.len().is_multiple_of(2) {
        return Err("MAP[...] takes keys and values in turn: an even number".into());
    }
    let keys: Vec<&Compiled> = args.iter().step_by(2).collect();
    let values: Vec<&Compiled> = args.iter().skip(1).step_by(2).collect();
    let (kt, vt) = (shared(&keys, "keys")?, shared(&values, "values")?);
    let constant = args.iter().all(|a| a.constant.is_some());
    let fitted: Vec<_> = args
        .into_iter()
        .enumerate()
        .map(|(i, a)| {
            let t = if i % 2 == 0 { &kt } else { &vt };
            coerce_to(a, &Ty::Data(t.clone())).eval
        })
        .collect();
    let ty = T::Map(Box::new(kt), Box::new(vt));
    Ok(fold_if(
        constant,
        Compiled::new(Ty::Data(ty), move |row| {
            let mut pairs = Vec::with_capacity(fitted.len() / 2);
            for kv in fitted.chunks(2) {
                pairs.push((kv[0](row)?, kv[1](row)?));
            }
            map_of(pairs)
        }),
    ))
}

fn row(_: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    if args.is_empty() {
        return Err("ROW() takes at least one field".into());
    }
    let fields = args
        .iter()
        .enumerate()
        .map(|(i, a)| crate::dataflow::row::Field::new(format!("EXPR${i}"), a.ty.column_type()))
        .collect();
    let constant = args.iter().all(|a| a.constant.is_some());
    let evals: Vec<_> = args.into_iter().map(|a| a.eval).collect();
    Ok(fold_if(
        constant,
        Compiled::new(Ty::Data(T::Struct(fields)), move |row| {
            Ok(Value::Struct(
                evals.iter().map(|f| f(row)).collect::<Result<_, _>>()?,
            ))
        }),
    ))
}

fn map_keys(call: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    let (kt, vt) = match &args[0].ty {
        Ty::Data(T::Map(k, v)) => ((**k).clone(), (**v).clone()),
        _ => (T::String, T::String),
    };
    if call.name == "MAP_KEYS" {
        Ok(strict(T::List(Box::new(kt)), args, |v| {
            Ok(Value::List(
                map_entries(&v[0]).map(|(k, _)| k.clone()).collect(),
            ))
        }))
    } else {
        Ok(strict(T::List(Box::new(vt)), args, |v| {
            Ok(Value::List(
                map_entries(&v[0]).map(|(_, x)| x.clone()).collect(),
            ))
        }))
    }
}

fn map_from_arrays(_: &Call, args: Vec<Compiled>) -> Result<Compiled, String> {
    let ty = T::Map(
        Box::new(element_type(&args[0])),
        Box::new(element_type(&args[1])),
    );
    Ok(strict(ty, args, |v| {
        let (keys, values) = (list(&v[0]), list(&v[1]));
        if keys.len() != values.len() {
            return Err(format!(
                "MAP_FROM_ARRAYS of {} keys and {} values",
                keys.len(),
                values.len()
            ));
        }
        map_of(keys.iter().cloned().zip(values.iter().cloned()))
    }))
}
