//! Calls of user-defined scalar functions ([`crate::udf`]): checked
//! against the function's declared parameters with the implicit casts of
//! the built-in functions, and NULL when an argument is.

use super::super::cast::{coerce_to, numeric};
use super::super::compiled::{Compiled, Ty};
use super::compose::strict;
use crate::dataflow::row::{DataType, Value};
use crate::udf::ScalarFunction;

/// `f(args)`; Err says which argument does not fit.
pub fn call(f: &ScalarFunction, args: Vec<Compiled>) -> Result<Compiled, String> {
    let fitted = fit(&f.name, &f.params, args)?;
    let f = f.clone();
    Ok(strict(f.returns.clone(), fitted, move |v| f.call(v)))
}

/// `args` as the parameters `params` of the function `name` take them
/// (a number cast to the number wanted); Err says which does not fit.
pub fn fit(name: &str, params: &[DataType], args: Vec<Compiled>) -> Result<Vec<Compiled>, String> {
    if args.len() != params.len() {
        return Err(format!(
            "{name} takes {} arguments, not {}",
            params.len(),
            args.len()
        ));
    }
    let mut fitted = Vec::with_capacity(args.len());
    for (i, (a, want)) in args.into_iter().zip(params).enumerate() {
        fitted.push(match &a.ty {
            Ty::Null => Compiled::constant(Value::Null, Ty::Data(want.clone())),
            Ty::Data(t) if t == want => a,
            Ty::Data(t) if numeric(t) && numeric(want) => coerce_to(a, &Ty::Data(want.clone())),
            t => {
                return Err(format!(
                    "argument {} of {name} must be {want}, not {t}",
                    i + 1
                ))
            }
        });
    }
    Ok(fitted)
}
