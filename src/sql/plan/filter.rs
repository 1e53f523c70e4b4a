//! `Filter`: the rows for which a predicate is TRUE (WHERE, HAVING).

use std::sync::Arc;

use crate::dataflow::prelude::*;
use crate::sql::expr::EvalFn;
use crate::sql::note_eval_error;

use super::on_failure::{lower_guarded, OnFunctionFailure, Step};

pub struct Filter {
    /// The predicate as written, for `weir explain`.
    pub text: String,
    pub predicate: Arc<EvalFn>,
    /// What a row a user-defined function fails on becomes (NULL over an
    /// updating input: the row is dropped as a NULL condition drops it).
    pub on_failure: OnFunctionFailure,
}

impl Filter {
    pub fn describe(&self) -> String {
        format!("Filter {}", self.text)
    }

    pub fn lower(&self, uid: &str, input: Stream) -> Stream {
        let (f, op) = (self.predicate.clone(), uid.to_string());
        if self.on_failure != OnFunctionFailure::Null {
            let step: Step = Arc::new(move |v, emit| {
                match f(v) {
                    Ok(Value::Bool(true)) => emit(v.to_vec()),
                    Ok(_) => {}
                    Err(e) if crate::udf::is_failure(&e) => return Err(e),
                    Err(e) => note_eval_error(&op, &e),
                }
                Ok(())
            });
            let schema = input.schema();
            return lower_guarded(&input, uid, "filter", schema, step, &self.on_failure);
        }
        input.filter(uid, move |v| match f(v) {
            Ok(Value::Bool(b)) => b,
            Ok(_) => false,
            Err(e) => {
                note_eval_error(&op, &e);
                false
            }
        })
    }
}
