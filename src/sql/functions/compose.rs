//! How a function's implementation becomes a [`Compiled`] call: NULL in,
//! NULL out (SQL's strict functions), constant arguments folded when the
//! job is planned, and small readers of argument values.

use std::sync::Arc;

use super::super::compiled::{Compiled, EvalFn, Ty};
use crate::dataflow::row::{DataType, Value};

pub type Outcome = Result<Value, String>;

/// A function that is NULL when any argument is; folded to a constant
/// when every argument is one.
pub fn strict(
    ty: DataType,
    args: Vec<Compiled>,
    h: impl Fn(&[Value]) -> Outcome + Send + Sync + 'static,
) -> Compiled {
    let constant = args.iter().all(|a| a.constant.is_some());
    let c = match <[Compiled; 1]>::try_from(args) {
        // One argument: no buffer of values.
        Ok([a]) => {
            let f = a.eval;
            Compiled::new(Ty::Data(ty), move |row| {
                let v = f(row)?;
                if v.is_null() {
                    return Ok(Value::Null);
                }
                h(std::slice::from_ref(&v))
            })
        }
        Err(args) => {
            let fs: Vec<Arc<EvalFn>> = args.into_iter().map(|a| a.eval).collect();
            Compiled::new(Ty::Data(ty), move |row| {
                let mut vals: smallvec::SmallVec<[Value; 4]> = smallvec::SmallVec::new();
                for f in &fs {
                    let v = f(row)?;
                    if v.is_null() {
                        return Ok(Value::Null);
                    }
                    vals.push(v);
                }
                h(&vals)
            })
        }
    };
    fold_if(constant, c)
}

/// A two-argument function that is NULL when either argument is.
pub fn strict2(
    ty: Ty,
    f: Arc<EvalFn>,
    g: Arc<EvalFn>,
    h: impl Fn(Value, Value) -> Outcome + Send + Sync + 'static,
) -> Compiled {
    Compiled::new(ty, move |row| {
        let x = f(row)?;
        if x.is_null() {
            return Ok(Value::Null);
        }
        let y = g(row)?;
        if y.is_null() {
            return Ok(Value::Null);
        }
        h(x, y)
    })
}

/// `c` as a constant when `constant` (its inputs are) and it evaluates.
pub fn fold_if(constant: bool, c: Compiled) -> Compiled {
    if constant {
        if let Ok(v) = (c.eval)(&[]) {
            return Compiled::constant(v, c.ty);
        }
    }
    c
}

/// Whether every one of `args` is a constant.
pub fn all_constant(args: &[Compiled]) -> bool {
    args.iter().all(|a| a.constant.is_some())
}

pub fn text(v: &Value) -> &str {
    v.as_str().unwrap_or("")
}

pub fn int(v: &Value) -> i64 {
    v.as_int().unwrap_or(0)
}

pub fn double(v: &Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

/// The constant text of argument `i`, if it is there (the signature
/// checked that it is a constant).
pub fn constant_text(args: &[Compiled], i: usize) -> Option<String> {
    match args.get(i).and_then(|a| a.constant.as_ref()) {
        Some(Value::String(s)) => Some(s.clone()),
        _ => None,
    }
}

pub fn regex(pattern: &str) -> Result<regex::Regex, String> {
    regex::Regex::new(pattern).map_err(|m| format!("bad regular expression: {m}"))
}

/// The type a result has that follows its first argument's.
pub fn type_of(c: &Compiled) -> DataType {
    c.ty.column_type()
}
