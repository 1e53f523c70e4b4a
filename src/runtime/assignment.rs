//! What an instance in group mode owns, as the admin endpoint (`GET
//! /tasks`) shows it. Kept here, beside the rest of what a job shares with
//! its service (`JobShared`), so that the runtime needs nothing from the
//! engine that fills it in (`engine::group`).

use std::collections::BTreeMap;

/// What the admin endpoint shows of an instance in group mode.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Ownership {
    pub instance: String,
    pub tasks: Vec<u32>,
    pub inputs: Vec<String>,
    /// Task → manifest key of its last committed checkpoint.
    pub committed: BTreeMap<u32, String>,
    /// A job graph's tasks, by the uid of their stage's head node.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub stages: BTreeMap<String, Vec<u32>>,
    /// Epoch commits the group refused since the process started, and
    /// since the last one it accepted: a count that only grows means the
    /// instance makes no progress (a group that rebalances without end).
    pub commits_refused: u64,
    pub commits_refused_in_a_row: u64,
}
