//! `Scan`: a table read from Kafka topics (a `[sources.NAME]` or a
//! catalog table), and `Normalize`: an upsert topic's rows as the changes
//! of a table keyed by its primary key.

use crate::dataflow::prelude::*;

pub struct Scan {
    /// The table's name.
    pub table: String,
    pub source: KafkaSource,
}

impl Scan {
    pub fn describe(&self) -> String {
        format!("Scan {}", self.table)
    }

    pub fn lower(&self, uid: &str, job: &JobBuilder) -> Stream {
        job.source(uid, self.source.clone())
    }
}

/// Each row replaces its key's row (Flink's upsert-kafka): the row it
/// replaces is taken back first, from the table's state.
pub struct Normalize {
    /// The primary key's column names.
    pub key: Vec<String>,
    pub ttl: Option<crate::dataflow::ops::state_ttl::StateTtl>,
}

impl Normalize {
    pub fn describe(&self) -> String {
        format!(
            "Normalize by ({}){}",
            self.key.join(", "),
            super::describe_ttl(&self.ttl)
        )
    }

    pub fn lower(&self, uid: &str, input: Stream) -> Stream {
        let names: Vec<&str> = self.key.iter().map(String::as_str).collect();
        input
            .key_by(&names)
            .with_state_ttl(self.ttl)
            .normalize_upserts(uid)
    }
}
