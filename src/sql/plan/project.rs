//! `Project`: new columns per row (the SELECT list, computed keys).

use std::sync::Arc;

use crate::dataflow::prelude::*;
use crate::sql::expr::EvalFn;
use crate::sql::note_eval_error;

pub struct Project {
    pub schema: Schema,
    /// Per output column: the input column it copies, or what computes it.
    pub outputs: Vec<(Option<usize>, Arc<EvalFn>)>,
    /// The input takes rows back: an update that projects to the row it
    /// replaces is dropped (`Stream::map_changes`).
    pub over_updating: bool,
}

impl Project {
    pub fn describe(&self) -> String {
        let names: Vec<&str> = self.schema.fields.iter().map(|f| f.name.as_str()).collect();
        format!("Project ({})", names.join(", "))
    }

    pub fn lower(&self, uid: &str, input: Stream) -> Stream {
        let (fns, op) = (self.outputs.clone(), uid.to_string());
        let f = move |v: &[Value]| {
            fns.iter()
                .map(|(from, f)| match from {
                    Some(i) => v[*i].clone(),
                    None => f(v).unwrap_or_else(|e| {
                        note_eval_error(&op, &e);
                        Value::Null
                    }),
                })
                .collect()
        };
        if self.over_updating {
            input.map_changes(uid, self.schema.clone(), f)
        } else {
            input.map(uid, self.schema.clone(), f)
        }
    }
}
