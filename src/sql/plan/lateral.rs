//! `LateralTable`: `LATERAL TABLE(f(x))`, a user-defined table function's
//! rows for each input row, each beside the input columns it keeps.

use std::sync::Arc;

use crate::dataflow::prelude::*;
use crate::sql::expr::EvalFn;
use crate::sql::note_eval_error;
use crate::udf::TableFunction;

use super::on_failure::{lower_guarded, OnFunctionFailure, Step};

pub struct LateralTable {
    pub schema: Schema,
    /// The input columns each of the function's rows keeps, before its own.
    pub keep: Vec<usize>,
    pub args: Vec<Arc<EvalFn>>,
    pub function: TableFunction,
    /// `LEFT JOIN LATERAL ... ON TRUE`: an input row the function gives no
    /// rows for is kept once, with NULL columns.
    pub left_outer: bool,
    /// The call as written, for `weir explain`.
    pub text: String,
    /// What an input row the function fails on becomes.
    pub on_failure: OnFunctionFailure,
}

impl LateralTable {
    pub fn describe(&self) -> String {
        let join = if self.left_outer { "Left" } else { "Cross" };
        format!("{join}LateralTable {}", self.text)
    }

    pub fn lower(&self, uid: &str, input: Stream) -> Stream {
        let (keep, args, f) = (self.keep.clone(), self.args.clone(), self.function.clone());
        let (left, op) = (self.left_outer, uid.to_string());
        let width = f.columns.len();
        let guarded = self.on_failure != OnFunctionFailure::Null;
        let step: Step = Arc::new(move |v, emit| {
            let rows = match call(&args, &f, v) {
                Ok(rows) => rows,
                Err(e) if guarded && crate::udf::is_failure(&e) => return Err(e),
                Err(e) => {
                    note_eval_error(&op, &e);
                    Vec::new()
                }
            };
            let with_input = |mut own: Vec<Value>| {
                let mut row = Vec::with_capacity(keep.len() + width + 1);
                row.extend(keep.iter().map(|k| v[*k].clone()));
                own.resize(width, Value::Null);
                row.append(&mut own);
                row
            };
            if rows.is_empty() && left {
                emit(with_input(Vec::new()));
            }
            for r in rows {
                emit(with_input(r));
            }
            Ok(())
        });
        if !guarded {
            return input.flat_map(uid, self.schema.clone(), move |v, emit| {
                let _ = step(v, emit);
            });
        }
        let schema = self.schema.clone();
        lower_guarded(&input, uid, "flat-map", schema, step, &self.on_failure)
    }
}

/// The function's rows for the input row `v`: none when an argument is NULL.
fn call(args: &[Arc<EvalFn>], f: &TableFunction, v: &[Value]) -> Result<Vec<Vec<Value>>, String> {
    let mut values = Vec::with_capacity(args.len());
    for a in args {
        let x = a(v)?;
        if x.is_null() {
            return Ok(Vec::new());
        }
        values.push(x);
    }
    let rows = f.call(&values)?;
    match rows.iter().find(|r| r.len() != f.columns.len()) {
        Some(r) => Err(format!(
            "{}{} gave a row of {} columns; it declares {}",
            crate::udf::FAILURE,
            f.name,
            r.len(),
            f.columns.len()
        )),
        None => Ok(rows),
    }
}
