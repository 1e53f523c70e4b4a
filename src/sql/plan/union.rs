//! `Union`: UNION ALL, the rows of every input as they come.

use crate::dataflow::prelude::*;

pub struct Union;

impl Union {
    pub fn describe(&self) -> String {
        "Union all".into()
    }

    pub fn lower(&self, uid: &str, inputs: &[Stream]) -> Stream {
        inputs[0].union(uid, &inputs[1..])
    }
}
