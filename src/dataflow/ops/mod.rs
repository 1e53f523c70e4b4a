//! The built-in operators, one file each: stateless steps that chain
//! ([`stateless`]) and keyed aggregates ([`aggregate`]). An operator of
//! your own implements [`crate::dataflow::Operator`] and is added with
//! `KeyedStream::process` (or, built in, with one builder method).

pub mod aggregate;
pub mod changelog_normalize;
pub mod deduplicate;
pub mod join;
pub mod over;
pub mod over_table;
pub mod state_ttl;
pub mod stateless;
pub mod temporal_join;
pub mod top_n;
pub mod where_filter;
pub mod window;
pub mod words;
