//! weir: a Kafka-backed stream processor with keyed RocksDB state and
//! exactly-once checkpoints by asynchronous barrier snapshots.
//!
//! Layout:
//! - [`config`]: the TOML configuration tree, env overrides, validation.
//! - [`element`]: what flows on data channels (records, barriers, end).
//! - [`runtime`]: tasks, alignment, the Coordinator, the restart loop.
//! - [`checkpoint`]: `_metadata`, the folder layout, the recovery decision, retention.
//! - [`state`]: keyed state in RocksDB, key groups, snapshot and restore.
//! - [`kafka`]: consumer and producer configuration, offsets, the sink producer.
//! - [`operators`]: the built-in pipelines.
//! - [`observe`]: metrics and checkpoint history (a leaf: the runtime writes, the admin endpoint reads).
//! - [`admin`]: the HTTP endpoint: health, readiness, metrics, checkpoint history, savepoints.
//! - [`cli`]: the `weir` command's subcommands.
//! - [`time`]: event time: timestamps, per-partition watermarks, the watermark valve.
//! - [`window`]: window assignment and session merging.
//! - [`scale`]: group mode: instances sharing a job through a consumer group,
//!   a repartition topic and shared checkpoint storage.

pub mod admin;
pub mod checkpoint;
pub mod cli;
pub mod config;
pub mod element;
pub mod error;
pub mod kafka;
pub mod observe;
pub mod operators;
pub mod runtime;
pub mod scale;
pub mod state;
pub mod time;
pub mod window;

pub use config::Config;
pub use error::{Result, WeirError};
