//! `Filter`: the rows for which a predicate is TRUE (WHERE, HAVING).

use std::sync::Arc;

use crate::dataflow::prelude::*;
use crate::sql::expr::EvalFn;
use crate::sql::note_eval_error;

pub struct Filter {
    /// The predicate as written, for `weir explain`.
    pub text: String,
    pub predicate: Arc<EvalFn>,
}

impl Filter {
    pub fn describe(&self) -> String {
        format!("Filter {}", self.text)
    }

    pub fn lower(&self, uid: &str, input: Stream) -> Stream {
        let (f, op) = (self.predicate.clone(), uid.to_string());
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
