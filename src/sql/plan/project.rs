//! `Project`: new columns per row (the SELECT list, computed keys).

use std::sync::Arc;

use crate::dataflow::prelude::*;
use crate::sql::expr::EvalFn;
use crate::sql::note_eval_error;

#[derive(Clone)]
pub struct Project {
    pub schema: Schema,
    /// Per output column: the input column it copies, or what computes it.
    pub outputs: Vec<(Option<usize>, Arc<EvalFn>)>,
    /// The input takes rows back: an update that projects to the row it
    /// replaces is dropped (`Stream::map_changes`).
    pub over_updating: bool,
    /// A projection merged into this one ([`super::rules`]): its row is
    /// computed first, once, and `outputs` read it.
    pub inner: Option<Box<Project>>,
}

impl Project {
    pub fn describe(&self) -> String {
        let names: Vec<&str> = self.schema.fields.iter().map(|f| f.name.as_str()).collect();
        format!("Project ({})", names.join(", "))
    }

    /// The output row of input row `v` (an error is the column's NULL,
    /// noted under `op`).
    pub fn evaluate_as(&self, op: &str, v: &[Value]) -> Vec<Value> {
        let inner;
        let v = match &self.inner {
            Some(p) => {
                inner = p.evaluate_as(op, v);
                &inner[..]
            }
            None => v,
        };
        self.outputs
            .iter()
            .map(|(from, f)| match from {
                Some(i) => v[*i].clone(),
                None => f(v).unwrap_or_else(|e| {
                    note_eval_error(op, &e);
                    Value::Null
                }),
            })
            .collect()
    }

    #[cfg(test)]
    pub fn evaluate(&self, v: &[Value]) -> Vec<Value> {
        self.evaluate_as("test", v)
    }

    pub fn lower(&self, uid: &str, input: Stream) -> Stream {
        let this = self.clone();
        let op = uid.to_string();
        let f = move |v: &[Value]| this.evaluate_as(&op, v);
        if self.over_updating {
            input.map_changes(uid, self.schema.clone(), f)
        } else {
            input.map(uid, self.schema.clone(), f)
        }
    }
}
