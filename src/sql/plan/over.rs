//! `OverAggregate`: `agg(x) OVER (PARTITION BY p ORDER BY o <frame>)`,
//! one more column per call, evaluated one of two ways:
//! - over an append-only input ordered by its event time, each row once
//!   when the watermark passes it (append-only output);
//! - over an updating input, or with LEAD, kept current over the input as
//!   a table: a row's values are updated when a row its frame, rank or
//!   LAG/LEAD reaches comes or goes (retracting output).

use super::{names, Rel};
use crate::dataflow::ops::over::{Frame, OverSpec};
use crate::dataflow::ops::over_table::OverTableSpec;
use crate::dataflow::prelude::*;

pub enum Evaluation {
    /// [`crate::dataflow::ops::over::OverAggregate`].
    AsWatermarkPasses(OverSpec),
    /// [`crate::dataflow::ops::over_table::OverTable`].
    KeptCurrent(OverTableSpec),
}

pub struct OverAggregate {
    pub partition: Vec<usize>,
    pub evaluation: Evaluation,
    pub schema: Schema,
    /// The calls as written, for `weir explain`.
    pub calls: Vec<String>,
    /// Kept current: a partition's rows go when it is quiet this long.
    pub ttl: Option<crate::dataflow::ops::state_ttl::StateTtl>,
}

fn describe_frame(frame: Frame) -> String {
    match frame {
        Frame::Rows(n) => format!("ROWS {n} PRECEDING"),
        Frame::Range(ms) => format!("RANGE {ms} ms PRECEDING"),
        Frame::Unbounded { peers: true } => "RANGE UNBOUNDED PRECEDING".into(),
        Frame::Unbounded { peers: false } => "ROWS UNBOUNDED PRECEDING".into(),
    }
}

impl OverAggregate {
    pub fn describe(&self, input: &Rel) -> String {
        let by = names(&input.columns, &self.partition);
        match &self.evaluation {
            Evaluation::AsWatermarkPasses(spec) => format!(
                "OverAggregate by ({by}) order by {} {}: {}",
                names(&input.columns, &[spec.time]),
                describe_frame(spec.frame),
                self.calls.join(", ")
            ),
            Evaluation::KeptCurrent(spec) => {
                let order: Vec<String> = spec
                    .order
                    .iter()
                    .map(|k| {
                        let name = names(&input.columns, &[k.column]);
                        if k.descending {
                            format!("{name} DESC")
                        } else {
                            name
                        }
                    })
                    .collect();
                format!(
                    "OverAggregate by ({by}) order by ({}) {}: {}, kept current{}",
                    order.join(", "),
                    describe_frame(spec.frame),
                    self.calls.join(", "),
                    super::describe_ttl(&self.ttl)
                )
            }
        }
    }

    pub fn lower(&self, uid: &str, input: Stream) -> Stream {
        let keyed = input.key_by_indexes(self.partition.clone());
        match &self.evaluation {
            Evaluation::AsWatermarkPasses(spec) => {
                keyed.over_aggregate(uid, spec.clone(), self.schema.clone())
            }
            Evaluation::KeptCurrent(spec) => {
                keyed
                    .with_state_ttl(self.ttl)
                    .over_table(uid, spec.clone(), self.schema.clone())
            }
        }
    }
}
