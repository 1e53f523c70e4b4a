//! `Unnest`: `CROSS JOIN UNNEST(array)`, a row per item.

use std::sync::Arc;

use crate::dataflow::prelude::*;
use crate::sql::note_eval_error;

/// Each item of a row's array, handed to `each`.
pub type Items = dyn Fn(&[Value], &mut dyn FnMut(Value)) -> Result<(), String> + Send + Sync;

pub struct Unnest {
    pub schema: Schema,
    /// The input columns each item's row keeps, before the item.
    pub keep: Vec<usize>,
    pub items: Arc<Items>,
    /// The array as written, for `weir explain`.
    pub text: String,
}

impl Unnest {
    pub fn describe(&self) -> String {
        format!("Unnest {}", self.text)
    }

    pub fn lower(&self, uid: &str, input: Stream) -> Stream {
        let (keep, items, op) = (self.keep.clone(), self.items.clone(), uid.to_string());
        input.flat_map(uid, self.schema.clone(), move |v, emit| {
            let result = items(v, &mut |item| {
                // Room for one more column: an aggregate keyed by these
                // appends its result in place.
                let mut row = Vec::with_capacity(keep.len() + 2);
                row.extend(keep.iter().map(|k| v[*k].clone()));
                row.push(item);
                emit(row);
            });
            if let Err(e) = result {
                note_eval_error(&op, &e);
            }
        })
    }
}
