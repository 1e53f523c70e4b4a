//! `Sink`: INSERT INTO a `[sinks.NAME]`, in the changelog it writes.

use crate::dataflow::prelude::*;

pub struct Sink {
    pub name: String,
    pub topic: String,
    /// What the sink receives, as `weir explain` says it.
    pub mode: String,
    pub sink: KafkaSink,
}

impl Sink {
    pub fn describe(&self) -> String {
        format!(
            "Sink {} -> topic {:?}: {}",
            self.name, self.topic, self.mode
        )
    }

    pub fn lower(&self, uid: &str, input: Stream) {
        input.sink(uid, self.sink.clone());
    }
}
