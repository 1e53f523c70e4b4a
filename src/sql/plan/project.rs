//! `Project`: new columns per row (the SELECT list, computed keys).

use std::sync::Arc;

use crate::dataflow::prelude::*;
use crate::sql::expr::EvalFn;
use crate::sql::note_eval_error;

use super::on_failure::{lower_guarded, OnFunctionFailure, Step};

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
    /// What a row a user-defined function fails on becomes (over an
    /// append-only input; over an updating one, the value is NULL).
    pub on_failure: OnFunctionFailure,
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

    /// As [`Project::evaluate_as`], but a user-defined function's failure
    /// is the Err, for [`OnFunctionFailure`].
    pub fn try_evaluate(&self, op: &str, v: &[Value]) -> Result<Vec<Value>, String> {
        let inner;
        let v = match &self.inner {
            Some(p) => {
                inner = p.try_evaluate(op, v)?;
                &inner[..]
            }
            None => v,
        };
        self.outputs
            .iter()
            .map(|(from, f)| match from {
                Some(i) => Ok(v[*i].clone()),
                None => match f(v) {
                    Ok(value) => Ok(value),
                    Err(e) if crate::udf::is_failure(&e) => Err(e),
                    Err(e) => {
                        note_eval_error(op, &e);
                        Ok(Value::Null)
                    }
                },
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
        if !self.over_updating && self.on_failure != OnFunctionFailure::Null {
            let step: Step = Arc::new(move |v, emit| {
                emit(this.try_evaluate(&op, v)?);
                Ok(())
            });
            let schema = self.schema.clone();
            return lower_guarded(&input, uid, "map", schema, step, &self.on_failure);
        }
        let f = move |v: &[Value]| this.evaluate_as(&op, v);
        if self.over_updating {
            input.map_changes(uid, self.schema.clone(), f)
        } else {
            input.map(uid, self.schema.clone(), f)
        }
    }
}
