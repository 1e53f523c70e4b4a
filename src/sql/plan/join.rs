//! `Join` (a regular or interval join by equal keys, with a residual
//! condition) and `TemporalJoin` (a stream with a table's version as of
//! its row's time).

use super::{names, Rel};
use crate::dataflow::ops::join::{JoinKind, JoinSpec};
use crate::dataflow::ops::temporal_join::TemporalJoinSpec;
use crate::dataflow::prelude::*;

pub struct Join {
    /// The key columns of each side.
    pub keys: [Vec<usize>; 2],
    pub spec: JoinSpec,
    /// The residual condition as written, for `weir explain`.
    pub condition: Option<String>,
}

fn on(keys: &[Vec<usize>; 2], inputs: &[&Rel], condition: &Option<String>) -> String {
    let mut s = format!(
        "({}) = ({})",
        names(&inputs[0].columns, &keys[0]),
        names(&inputs[1].columns, &keys[1])
    );
    if let Some(c) = condition {
        s.push_str(&format!(" AND {c}"));
    }
    s
}

impl Join {
    pub fn describe(&self, inputs: &[&Rel]) -> String {
        let kind = match self.spec.kind {
            JoinKind::Inner => "Inner",
            JoinKind::Left => "Left",
            JoinKind::Right => "Right",
            JoinKind::Full => "Full",
            JoinKind::Semi => "Semi",
            JoinKind::Anti => "Anti",
        };
        let bounded = if self.spec.expiry.iter().all(Option::is_some) {
            ", interval"
        } else {
            ""
        };
        format!(
            "Join {kind}{bounded} on {}",
            on(&self.keys, inputs, &self.condition)
        )
    }

    pub fn lower(&self, uid: &str, inputs: &[Stream]) -> Stream {
        Stream::connect(
            inputs[0].key_by_indexes(self.keys[0].clone()),
            inputs[1].key_by_indexes(self.keys[1].clone()),
        )
        .join(uid, self.spec.clone())
    }
}

pub struct TemporalJoin {
    pub keys: [Vec<usize>; 2],
    pub spec: TemporalJoinSpec,
    pub condition: Option<String>,
}

impl TemporalJoin {
    pub fn describe(&self, inputs: &[&Rel]) -> String {
        format!(
            "TemporalJoin {} as of {} on {}",
            if self.spec.outer { "Left" } else { "Inner" },
            if self.spec.event_time {
                "the stream's event time"
            } else {
                "processing time"
            },
            on(&self.keys, inputs, &self.condition)
        )
    }

    pub fn lower(&self, uid: &str, inputs: &[Stream]) -> Stream {
        Stream::connect(
            inputs[0].key_by_indexes(self.keys[0].clone()),
            inputs[1].key_by_indexes(self.keys[1].clone()),
        )
        .temporal_join(uid, self.spec.clone())
    }
}
