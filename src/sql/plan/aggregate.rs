//! `Aggregate` (GROUP BY without a window: an updating result, upsert by
//! its keys), `WindowAggregate` (GROUP BY a window TVF's or a window
//! result's window_start, window_end: a row per window when it closes)
//! and `Deduplicate` (GROUP BY without aggregates: each key's first row).

use std::time::Duration;

use super::{describe_ttl, Rel};
use crate::dataflow::ops::aggregate::{Agg, AggFunction, AggregateEmit};
use crate::dataflow::ops::state_ttl::StateTtl;
use crate::dataflow::prelude::*;

/// The aggregate calls as `weir explain` names them.
fn calls(aggs: &[Agg], input: &Rel) -> String {
    aggs.iter()
        .map(|a| {
            let f = a.function.name().to_uppercase();
            let arg = a
                .column
                .and_then(|c| input.columns.get(c))
                .map_or("*", |c| c.name.as_str());
            match (a.distinct, a.function) {
                // Planned so over an input that takes rows back.
                (true, AggFunction::Min | AggFunction::Max) => {
                    format!("{f}({arg}) AS {}, every value kept", a.name)
                }
                (true, _) => format!("{f}(DISTINCT {arg}) AS {}", a.name),
                (false, _) => format!("{f}({arg}) AS {}", a.name),
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

pub struct Aggregate {
    /// The group keys' column names in the input.
    pub keys: Vec<String>,
    pub aggs: Vec<Agg>,
    pub emit: AggregateEmit,
    /// The checkpoint kind a TOML pipeline's aggregate keeps.
    pub kind: Option<String>,
    pub ttl: Option<StateTtl>,
}

impl Aggregate {
    pub fn describe(&self, input: &Rel) -> String {
        format!(
            "Aggregate by ({}): {}{}",
            self.keys.join(", "),
            calls(&self.aggs, input),
            describe_ttl(&self.ttl)
        )
    }

    pub fn lower(&self, uid: &str, input: Stream) -> Stream {
        let keys: Vec<&str> = self.keys.iter().map(String::as_str).collect();
        let s = input
            .key_by(&keys)
            .with_state_ttl(self.ttl)
            .aggregate_emitting(uid, self.aggs.clone(), self.emit);
        with_kind(s, &self.kind)
    }
}

fn with_kind(s: Stream, kind: &Option<String>) -> Stream {
    match kind {
        Some(k) => s.with_kind(k),
        None => s,
    }
}

/// Which windows a window aggregate's rows fall in.
pub enum Windows {
    /// A window table function's (TUMBLE, HOP, CUMULATE, SESSION).
    Assigned(WindowSpec),
    /// The windows an earlier window aggregate's rows name in these
    /// columns (window_start, window_end): windows of windows.
    Given(String, String),
}

pub struct WindowAggregate {
    pub keys: Vec<String>,
    pub windows: Windows,
    pub aggs: Vec<Agg>,
    pub allowed_lateness: Duration,
    /// A window emits its result so far on every row.
    pub every_update: bool,
    /// Where late records go: a topic, and the value and origin columns
    /// of a TOML pipeline's dead letter.
    pub late_to: Option<(String, Option<(String, String)>)>,
    pub kind: Option<String>,
}

impl WindowAggregate {
    pub fn describe(&self, input: &Rel) -> String {
        let w = match &self.windows {
            Windows::Assigned(spec) => format!("{spec:?}"),
            Windows::Given(s, e) => format!("the windows of ({s}, {e})"),
        };
        format!(
            "WindowAggregate {w} by ({}): {}",
            self.keys.join(", "),
            calls(&self.aggs, input)
        )
    }

    pub fn lower(&self, uid: &str, input: Stream) -> Stream {
        let keys: Vec<&str> = self.keys.iter().map(String::as_str).collect();
        let keyed = input.key_by(&keys);
        let w = match &self.windows {
            Windows::Assigned(spec) => keyed.window(*spec),
            Windows::Given(s, e) => keyed.window_by_columns(s, e),
        };
        let mut w = w
            .allowed_lateness(self.allowed_lateness)
            .every_update(self.every_update);
        if let Some((topic, record)) = &self.late_to {
            w = w.late_to(topic);
            if let Some((value, origin)) = record {
                w = w.late_value(value).late_origin(origin);
            }
        }
        with_kind(w.aggregate(uid, self.aggs.clone()), &self.kind)
    }
}

pub struct Deduplicate {
    pub keys: Vec<String>,
    pub kind: Option<String>,
    pub ttl: Option<StateTtl>,
}

impl Deduplicate {
    pub fn describe(&self, _input: &Rel) -> String {
        format!(
            "Deduplicate by ({}){}",
            self.keys.join(", "),
            describe_ttl(&self.ttl)
        )
    }

    pub fn lower(&self, uid: &str, input: Stream) -> Stream {
        let keys: Vec<&str> = self.keys.iter().map(String::as_str).collect();
        let keyed = input.key_by(&keys).with_state_ttl(self.ttl);
        with_kind(keyed.deduplicate(uid), &self.kind)
    }
}
