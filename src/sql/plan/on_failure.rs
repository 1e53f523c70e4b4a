//! What a row whose user-defined function failed on it (an error it
//! returned, a panic, a WebAssembly trap, fuel run out) becomes: under its
//! source's `on_bad_record`, as a record that cannot be decoded is. A
//! failed built-in expression (an overflow, a bad cast) is another matter:
//! its value is NULL ([`crate::sql::note_eval_error`]).
//!
//! The policy belongs to the one source a SELECT reads; a SELECT over a
//! join of sources, or a relation of a view, keeps the NULL.

use std::sync::Arc;

use crate::config::BadRecordPolicy;
use crate::dataflow::json::encode_row;
use crate::dataflow::operator::{Collector, Context, LateRecord, Operator, Record};
use crate::dataflow::prelude::*;

/// What a user-defined function's failure does to its row.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum OnFunctionFailure {
    /// The value is NULL (counted and logged), as a built-in's failure.
    #[default]
    Null,
    /// The row is dropped (counted and logged): `on_bad_record = "skip"`.
    Skip,
    /// The row goes to the source's dead-letter topic as JSON, with the
    /// function's error: `"dead-letter"`.
    DeadLetter(String),
    /// The job stops, naming the function and why: `"fail"`. A restart
    /// would meet the row again, so it exits rather than loop.
    Fail,
}

impl OnFunctionFailure {
    /// The policy of a source with `policy` and `dead_letter_topic`.
    pub fn of_source(policy: BadRecordPolicy, dead_letter_topic: Option<&str>) -> Self {
        match (policy, dead_letter_topic) {
            (BadRecordPolicy::Skip, _) => Self::Skip,
            (BadRecordPolicy::DeadLetter, Some(t)) => Self::DeadLetter(t.to_string()),
            (BadRecordPolicy::DeadLetter, None) => Self::Skip,
            (BadRecordPolicy::Fail, _) => Self::Fail,
        }
    }

    pub fn describe(&self) -> &'static str {
        match self {
            Self::Null => "NULL",
            Self::Skip => "skip",
            Self::DeadLetter(_) => "dead-letter",
            Self::Fail => "fail",
        }
    }
}

/// `step` over `input` as the stateless operator `uid` of `kind` whose
/// rows have `schema`, with `policy` for a row a user-defined function
/// fails on (its dead letters to the source's topic).
pub fn lower_guarded(
    input: &Stream,
    uid: &str,
    kind: &str,
    schema: Schema,
    step: Step,
    policy: &OnFunctionFailure,
) -> Stream {
    let dead_letters = match policy {
        OnFunctionFailure::DeadLetter(t) => Some(t.clone()),
        _ => None,
    };
    let op = Guarded {
        step,
        policy: policy.clone(),
        input: input.schema(),
    };
    input.stateless(uid, kind, schema, op, dead_letters)
}

/// A row's step (a projection, a filter's verdict, a table function's
/// rows): it emits the row's output rows, or fails with the failure of a
/// user-defined function (before it emits any).
pub type Step =
    Arc<dyn Fn(&[Value], &mut dyn FnMut(Vec<Value>)) -> Result<(), String> + Send + Sync>;

/// A stateless operator that runs a [`Step`] and applies the policy to a
/// row on which a user-defined function failed.
#[derive(Clone)]
pub struct Guarded {
    pub step: Step,
    pub policy: OnFunctionFailure,
    /// The input's columns, to write a dead letter's row as JSON.
    pub input: Schema,
}

impl Operator for Guarded {
    fn on_record(
        &mut self,
        _: usize,
        r: Record,
        ctx: &mut Context,
        out: &mut Collector,
    ) -> crate::Result<()> {
        let (kind, timestamp) = (r.row.kind, r.timestamp);
        let failure = match (self.step)(&r.row.values, &mut |values| {
            out.emit(Row::new(kind, values), timestamp)
        }) {
            Ok(()) => return Ok(()),
            Err(failure) => failure,
        };
        crate::observe::metrics::FUNCTION_FAILURES
            .with_label_values(&[ctx.uid.as_str(), self.policy.describe()])
            .inc();
        match &self.policy {
            OnFunctionFailure::Fail => {
                let mut row = Vec::new();
                encode_row(&r.row, &self.input, &mut row);
                return Err(ctx.failure(format!(
                    "{failure} on the row {} (the source's on_bad_record = \"fail\"; set it to \
                     \"skip\" or \"dead-letter\" to go on without the row)",
                    String::from_utf8_lossy(&row)
                )));
            }
            OnFunctionFailure::DeadLetter(_) => {
                let mut value = Vec::new();
                encode_row(&r.row, &self.input, &mut value);
                ctx.late(LateRecord {
                    value,
                    error: failure.clone(),
                    headers: vec![("weir.function.error".into(), failure.clone())],
                    origin: None,
                    failed: true,
                });
            }
            OnFunctionFailure::Skip | OnFunctionFailure::Null => {}
        }
        note_failure(&ctx.uid, &failure, &self.policy);
        Ok(())
    }
}

/// Logs a row a function failed on: the first, then every
/// power-of-two-th, so a stream of them does not flood the log.
fn note_failure(operator: &str, failure: &str, policy: &OnFunctionFailure) {
    static FAILURES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = FAILURES.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
    if n.is_power_of_two() {
        tracing::warn!(
            operator,
            error = failure,
            policy = policy.describe(),
            failures_so_far = n,
            "a user-defined function failed on a row; the row follows its source's on_bad_record"
        );
    }
}
