//! Checkpoints: what `_metadata` holds, the folder layout on disk, the
//! recovery decision and retention.

pub mod checksum;
pub mod metadata;
pub mod reader;
pub mod recovery;
pub mod retention;
pub mod store;

pub use metadata::{CheckpointMetadata, PartitionOffset, SnapshotFile, StateHandle, Topology};
pub use store::CheckpointStore;
