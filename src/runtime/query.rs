//! Interactive queries: `GET /state/<uid>/<key>` asks the keyed subtask
//! that owns the key for its current value.
//!
//! The subtask answers between two input batches, on its own thread, from
//! its own state (cache first, then RocksDB), so an answer is exactly what
//! the next update of that key would start from: consistent with every
//! record the subtask has taken in, whether or not a checkpoint holds it
//! yet. A query costs the task one lookup; the batch it interrupts waits
//! for that lookup only.

use std::collections::BTreeMap;
use std::sync::RwLock;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender, TrySendError};
use serde::Serialize;

use crate::state::key_groups::{key_group, subtask_for_key_group};

/// Queries waiting per subtask; past this the endpoint answers 503 at once
/// instead of queueing behind a busy task.
pub const QUERY_QUEUE: usize = 256;

/// How long the endpoint waits for a subtask's answer.
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(5);

/// One key's state, as a subtask read it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct KeyState {
    /// The result the operator would emit for the key now
    /// (`{"count": 3}`), or None when it holds no value for the key.
    pub value: Option<serde_json::Value>,
    /// With windows: the key's windows held in state, by start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub windows: Option<Vec<WindowState>>,
    /// Group mode: the task that answered (instead of a subtask).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task: Option<u32>,
}

impl KeyState {
    /// Whether the operator holds anything for the key.
    pub fn is_empty(&self) -> bool {
        self.value.is_none() && self.windows.as_ref().is_none_or(|w| w.is_empty())
    }
}

/// One window of a key.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct WindowState {
    pub start_ms: i64,
    pub end_ms: i64,
    pub start: String,
    pub end: String,
    pub value: serde_json::Value,
}

/// Why a subtask (or an instance) gave no state for a key.
#[derive(Debug, Clone, PartialEq)]
pub enum QueryFailure {
    /// Group mode: the key's task is owned by another instance (or by none
    /// right now); the message names the task.
    NotHere { task: u32, message: String },
    /// Reading the state failed.
    Failed(String),
}

pub type QueryAnswer = Result<KeyState, QueryFailure>;

/// A query on its way to the subtask that owns the key.
pub struct StateQuery {
    pub key: String,
    /// The key as the operator stores it: the text itself for a built-in
    /// pipeline, the key columns' encoding for a job graph's operator.
    pub encoded: Vec<u8>,
    pub key_group: u32,
    pub reply: tokio::sync::oneshot::Sender<QueryAnswer>,
}

/// Where each queryable operator's subtasks take queries. Replaced by each
/// job attempt; empty while none runs.
#[derive(Default)]
pub struct QueryRoutes {
    operators: RwLock<BTreeMap<String, OperatorRoutes>>,
}

struct OperatorRoutes {
    max_parallelism: u32,
    subtasks: Vec<Sender<StateQuery>>,
    /// A job graph's operator: its key columns, which the key in the path
    /// is parsed by (`dataflow::inspect::parse_key`).
    key: Option<Vec<crate::checkpoint::metadata::KeyColumn>>,
}

/// Why a query got no answer, as the endpoint reports it.
#[derive(Debug, PartialEq)]
pub enum QueryError {
    /// The key in the path is not one of the operator's keys (400).
    BadKey(String),
    /// No running operator by that uid (404).
    UnknownOperator { known: Vec<String> },
    /// The subtask is busy or gone, or no attempt runs (503).
    Unavailable(String),
}

/// Where a query for a key goes.
pub struct Routed {
    pub key_group: u32,
    pub subtask: u32,
    pub answer: tokio::sync::oneshot::Receiver<QueryAnswer>,
}

impl QueryRoutes {
    /// Registers the subtasks of `uid` (subtask `i` at index `i`) and
    /// returns their receivers.
    pub fn register(
        &self,
        uid: &str,
        parallelism: u32,
        max_parallelism: u32,
    ) -> Vec<Receiver<StateQuery>> {
        self.register_keyed(uid, parallelism, max_parallelism, None)
    }

    /// [`QueryRoutes::register`] for a job graph's keyed operator, whose
    /// keys are its `key` columns.
    pub fn register_keyed(
        &self,
        uid: &str,
        parallelism: u32,
        max_parallelism: u32,
        key: Option<Vec<crate::checkpoint::metadata::KeyColumn>>,
    ) -> Vec<Receiver<StateQuery>> {
        let (senders, receivers) = (0..parallelism)
            .map(|_| crossbeam_channel::bounded(QUERY_QUEUE))
            .unzip();
        self.operators.write().expect("query routes lock").insert(
            uid.to_string(),
            OperatorRoutes {
                max_parallelism,
                key,
                subtasks: senders,
            },
        );
        receivers
    }

    /// Forgets every operator (the attempt ended).
    pub fn clear(&self) {
        self.operators.write().expect("query routes lock").clear();
    }

    /// The uids that take queries now.
    pub fn operators(&self) -> Vec<String> {
        self.operators
            .read()
            .expect("query routes lock")
            .keys()
            .cloned()
            .collect()
    }

    /// Sends a query for `key` to the subtask of `uid` that owns it.
    pub fn route(&self, uid: &str, key: &str) -> Result<Routed, QueryError> {
        let operators = self.operators.read().expect("query routes lock");
        let Some(op) = operators.get(uid) else {
            return Err(QueryError::UnknownOperator {
                known: operators.keys().cloned().collect(),
            });
        };
        let encoded = match &op.key {
            None => key.as_bytes().to_vec(),
            Some(columns) => {
                let values = crate::dataflow::inspect::parse_key(key, columns)
                    .map_err(|e| QueryError::BadKey(format!("key {key:?} of {uid}: {e}")))?;
                let mut encoded = Vec::new();
                let row = crate::dataflow::row::Row::insert(values);
                crate::dataflow::codec::encode_key(
                    &row,
                    &(0..row.values.len()).collect::<Vec<_>>(),
                    &mut encoded,
                );
                encoded
            }
        };
        let kg = key_group(&encoded, op.max_parallelism);
        let subtask = subtask_for_key_group(kg, op.subtasks.len() as u32, op.max_parallelism);
        let (reply, answer) = tokio::sync::oneshot::channel();
        let query = StateQuery {
            key: key.to_string(),
            encoded,
            key_group: kg,
            reply,
        };
        match op.subtasks[subtask as usize].try_send(query) {
            Ok(()) => Ok(Routed {
                key_group: kg,
                subtask,
                answer,
            }),
            Err(TrySendError::Full(_)) => Err(QueryError::Unavailable(format!(
                "subtask {subtask} of {uid} has {QUERY_QUEUE} queries waiting; retry later"
            ))),
            Err(TrySendError::Disconnected(_)) => Err(QueryError::Unavailable(format!(
                "subtask {subtask} of {uid} is not running (restarting?)"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_reaches_the_subtask_that_owns_the_key_group() {
        let routes = QueryRoutes::default();
        let receivers = routes.register("count", 3, 128);
        for key in ["a", "fox", "weir", "zebra"] {
            let routed = routes.route("count", key).expect("routed");
            let kg = key_group(key.as_bytes(), 128);
            assert_eq!(routed.key_group, kg);
            assert_eq!(routed.subtask, subtask_for_key_group(kg, 3, 128));
            let q = receivers[routed.subtask as usize]
                .try_recv()
                .expect("queued at the owner");
            assert_eq!((q.key.as_str(), q.key_group), (key, kg));
        }
    }

    #[test]
    fn unknown_operators_and_stopped_subtasks_are_told_apart() {
        let routes = QueryRoutes::default();
        let receivers = routes.register("count", 1, 128);
        match routes.route("nope", "a") {
            Err(QueryError::UnknownOperator { known }) => assert_eq!(known, vec!["count"]),
            _ => panic!("an unknown uid is not found"),
        }
        drop(receivers);
        assert!(matches!(
            routes.route("count", "a"),
            Err(QueryError::Unavailable(_))
        ));
        routes.clear();
        assert!(routes.operators().is_empty());
    }
}
