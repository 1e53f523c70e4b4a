//! `OverAggregate`: `agg(x) OVER (PARTITION BY p ORDER BY t <frame>)` over
//! an append-only input, ordered by its event time: each row once, when
//! the watermark passes it, with one more column per call.

use super::{names, Rel};
use crate::dataflow::ops::over::{Frame, OverSpec};
use crate::dataflow::prelude::*;

pub struct OverAggregate {
    pub partition: Vec<usize>,
    pub spec: OverSpec,
    pub schema: Schema,
    /// The calls as written, for `weir explain`.
    pub calls: Vec<String>,
}

impl OverAggregate {
    pub fn describe(&self, input: &Rel) -> String {
        let frame = match self.spec.frame {
            Frame::Rows(n) => format!("ROWS {n} PRECEDING"),
            Frame::Range(ms) => format!("RANGE {ms} ms PRECEDING"),
            Frame::Unbounded { peers: true } => "RANGE UNBOUNDED PRECEDING".into(),
            Frame::Unbounded { peers: false } => "ROWS UNBOUNDED PRECEDING".into(),
        };
        format!(
            "OverAggregate by ({}) order by {} {frame}: {}",
            names(&input.columns, &self.partition),
            names(&input.columns, &[self.spec.time]),
            self.calls.join(", ")
        )
    }

    pub fn lower(&self, uid: &str, input: Stream) -> Stream {
        input.key_by_indexes(self.partition.clone()).over_aggregate(
            uid,
            self.spec.clone(),
            self.schema.clone(),
        )
    }
}
