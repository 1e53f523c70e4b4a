//! Group mode (`scale.mode = "group"`): several instances run one job.
//! Kafka assigns the work (the consumer group protocol), carries the
//! exchange between instances (the repartition topic) and makes it
//! exactly-once (one transaction per instance per epoch); task checkpoints
//! live on storage every instance reaches (docs/scale-out.md).
//!
//! - [`epoch`]: an instance's epoch and its commit, independent of Kafka.
//! - [`repartition`]: the repartition topic and its records.
//! - [`manifest`]: task checkpoints on storage, pointers, garbage collection.
//! - [`storage`]: a shared folder or S3 through `object_store`.

pub mod checkpoints;
pub mod epoch;
pub mod manifest;
pub mod repartition;
pub mod storage;
