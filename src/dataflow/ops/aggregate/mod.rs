//! Keyed aggregates: a running group aggregate (an updating result), and
//! the accumulators it shares with the window aggregate (`super::window`).
//!
//! The group aggregate consumes updating input too: an insert or
//! update-after adds its row, an update-before or delete takes it away, so a
//! later stage over an updating result retracts the old value before it
//! adds the new one. It emits insert for a new key, update-before and
//! update-after when a key's result changes, and delete when its last row
//! is retracted.
//!
//! - [`function`]: which aggregates a job asks for ([`Agg`], [`AggFunction`]);
//! - [`accumulators`]: what one key keeps for them, and how it is stored;
//! - [`group`]: the running group aggregate over those accumulators.

pub mod accumulators;
pub mod function;
pub mod group;

pub use accumulators::Accumulators;
pub use function::{output_schema, Agg, AggFunction, UserAggregate};
pub use group::{AggregateEmit, GroupAggregate};
