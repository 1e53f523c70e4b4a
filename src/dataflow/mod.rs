//! The dataflow layer: what a job is, independent of how it runs.
//!
//! - [`row`]: typed rows with a schema and a change kind.
//! - [`codec`], [`json`]: rows as bytes (keys, state) and as JSON (Kafka).
//! - [`graph`]: nodes (sources, operators, sinks) and edges (forward, hash).
//! - [`operator`]: the trait operators implement, their context and collector.
//! - [`state`]: named tables per keyed operator, over RocksDB.
//! - [`ops`]: the built-in operators.
//! - [`ordered`]: order-preserving bytes, for state kept in a value's order.
//! - [`builder`]: the Rust API that yields a graph.
//!
//! The engine that runs a graph is [`crate::engine`]; nothing here knows
//! channels, Kafka clients or the Coordinator (docs/architecture.md).

pub mod builder;
pub mod codec;
pub mod compare;
pub mod expr;
pub mod graph;
pub mod inspect;
pub mod json;
pub mod operator;
pub mod ops;
pub mod ordered;
pub mod row;
pub mod tables;

pub use graph::Graph;
pub use operator::{Collector, Context, Operator, Record, RecordKey};

/// What a job written in Rust needs.
pub mod prelude {
    pub use super::builder::{
        ConnectedStreams, JobBuilder, KafkaSink, KafkaSource, KeyedStream, Stream, WindowedStream,
    };
    pub use super::codec::StateCodec;
    pub use super::expr::Expr;
    pub use super::graph::Graph;
    pub use super::operator::{Collector, Context, Operator, Record};
    pub use super::ops::aggregate::{Agg, AggFunction, AggregateEmit};
    pub use super::row::{DataType, Field, Row, RowKind, Schema, Value};
    pub use super::tables::{Table, TableSpec};
    pub use crate::window::assign::WindowSpec;
}
