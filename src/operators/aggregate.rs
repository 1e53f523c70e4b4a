//! The keyed aggregate without windows (word count, and `kind =
//! "aggregate"` with no `[pipeline.window]`): one accumulator per key,
//! emitted on every update or once per checkpoint per changed key.

use std::path::Path;

use rustc_hash::FxHashSet;

use super::Pipeline;
use crate::config::EmitMode;
use crate::error::{Result, WeirError};
use crate::runtime::operator::Operator;
use crate::runtime::output::Output;
use crate::runtime::query::KeyState;
use crate::runtime::Update;
use crate::state::{state_key, KeyedState, Snapshot};

pub struct AggregateOperator {
    pub uid: String,
    pub pipeline: Pipeline,
    pub emit: EmitMode,
    pub state: KeyedState,
    /// Keys changed since the last emission (emit = on-checkpoint).
    pub changed: FxHashSet<(u32, String)>,
    /// Past this many changed keys their results are emitted before the
    /// barrier, in the same epoch, so the set stays bounded.
    pub max_changed_keys: usize,
}

impl AggregateOperator {
    pub fn new(
        uid: String,
        pipeline: Pipeline,
        emit: EmitMode,
        state: KeyedState,
        max_changed_keys: usize,
    ) -> Self {
        Self {
            uid,
            pipeline,
            emit,
            state,
            changed: FxHashSet::default(),
            max_changed_keys,
        }
    }

    /// Emits the current result of every key changed since the last
    /// emission, in key order.
    fn emit_changed(&mut self, out: &mut Output) -> Result<()> {
        let mut changed: Vec<(u32, String)> = self.changed.drain().collect();
        changed.sort_unstable();
        for (kg, key) in changed {
            let acc = self
                .state
                .get(&state_key(kg, key.as_bytes()))?
                .ok_or_else(|| WeirError::Task {
                    task: self.uid.clone(),
                    reason: format!("changed key {key:?} in key group {kg} has no state"),
                })?;
            self.pipeline.write_output(&key, &acc, &mut out.buf);
            out.send_buf(key.as_bytes(), None)?;
        }
        Ok(())
    }
}

impl Operator for AggregateOperator {
    fn on_update(&mut self, u: Update, out: &mut Output) -> Result<()> {
        let value = u.value;
        let acc = self
            .state
            .update(u.key_group, u.key.as_bytes(), |a| a.add(value))?;
        match self.emit {
            EmitMode::EveryUpdate => {
                // The common path: no allocation per output.
                self.pipeline.write_output(&u.key, &acc, &mut out.buf);
                out.send_buf(u.key.as_bytes(), None)
            }
            EmitMode::OnCheckpoint => {
                self.changed.insert((u.key_group, u.key));
                if self.changed.len() >= self.max_changed_keys {
                    // Emitted now, in this epoch: the results a barrier
                    // would have emitted, only earlier.
                    self.emit_changed(out)?;
                }
                Ok(())
            }
        }
    }

    fn before_snapshot(&mut self, out: &mut Output) -> Result<()> {
        if self.emit == EmitMode::OnCheckpoint {
            self.emit_changed(out)?;
        }
        Ok(())
    }

    fn snapshot(&mut self, target: &Path) -> Result<Snapshot> {
        self.state.snapshot(target)
    }

    fn query(&mut self, key_group: u32, key: &str) -> Result<KeyState> {
        let acc = self.state.get(&state_key(key_group, key.as_bytes()))?;
        Ok(KeyState {
            value: acc.map(|acc| self.pipeline.result_object(&acc)),
            windows: None,
            task: None,
        })
    }

    fn name_error(&self, e: WeirError) -> WeirError {
        name_corrupt_state(&self.uid, e)
    }
}

/// Fills in the operator uid of a corrupt-state error.
pub fn name_corrupt_state(uid: &str, e: WeirError) -> WeirError {
    match e {
        WeirError::CorruptState {
            key_group,
            key,
            location,
            reason,
            ..
        } => WeirError::CorruptState {
            uid: uid.to_string(),
            key_group,
            key,
            location,
            reason,
        },
        other => other,
    }
}
