//! Event time (docs/event-time.md): timestamps from records, watermarks.
//!
//! - [`timestamp`]: a record's event time, from a JSON field or the Kafka
//!   timestamp, in milliseconds since the Unix epoch.
//! - [`watermark`]: per-partition watermarks with idleness at a source
//!   subtask, and what it sends downstream.
//! - [`valve`]: the minimum over a subtask's input channels, with idle
//!   channels left out.
//!
//! All of it is pure bookkeeping: no clocks are read here (callers pass the
//! wall-clock time), no threads, no I/O.

pub mod timestamp;
pub mod valve;
pub mod watermark;

pub use timestamp::{normalize_pointer, TimestampExtractor, TimestampFormat};
pub use valve::{ValveOutput, WatermarkValve};
pub use watermark::{SourceWatermarks, WatermarkUpdate, MIN_WATERMARK};

/// The event time of records of a job without event time.
pub const NO_TIMESTAMP: i64 = i64::MIN;
