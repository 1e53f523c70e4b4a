//! The operator model: what a keyed operator does with records, watermarks
//! and checkpoints. The task runner (`runtime::keyed`) owns everything
//! else — inputs, barrier alignment, the watermark valve, the output and
//! the snapshot protocol — so an operator is only its logic and its state
//! (docs/architecture.md).

use std::path::Path;

use super::output::Output;
use super::Update;
use crate::error::Result;
use crate::state::Snapshot;

pub trait Operator: Send + 'static {
    /// One keyed update, in input order.
    fn on_update(&mut self, update: Update, out: &mut Output) -> Result<()>;

    /// The subtask's event-time watermark advanced to `watermark`: fire
    /// what is due. Runs before the watermark goes further downstream.
    fn on_watermark(&mut self, _watermark: i64, _out: &mut Output) -> Result<()> {
        Ok(())
    }

    /// A checkpoint barrier is aligned: emit what belongs to this epoch
    /// before the snapshot (e.g. `emit = "on-checkpoint"` results).
    fn before_snapshot(&mut self, _out: &mut Output) -> Result<()> {
        Ok(())
    }

    /// Writes back cached state and snapshots it into `target`, whose
    /// parent exists (`CheckpointStore::snapshot_target`).
    fn snapshot(&mut self, target: &Path) -> Result<Snapshot>;

    /// The current state of `key` (in `key_group`, which this subtask
    /// owns), for an interactive query: cache included, between two
    /// updates.
    fn query(&mut self, key_group: u32, key: &str) -> Result<super::query::KeyState>;

    /// Fills in the operator's name in errors that come from its state.
    fn name_error(&self, e: crate::WeirError) -> crate::WeirError {
        e
    }
}
