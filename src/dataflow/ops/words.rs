//! Splits a text column into words: one row per word, lower-cased, split
//! on Unicode whitespace, followed by the row's other columns (the TOML
//! `word-count` pipeline's first step).
//!
//! Each row is made with room for one more column, so a count keyed by the
//! word (the next stage's group aggregate) appends its result in place
//! instead of growing the row: one allocation per word, as before rows.

use crate::dataflow::operator::{Collector, Context, Operator, Record};
use crate::dataflow::row::{Row, Value};
use crate::error::Result;

#[derive(Debug, Clone, Copy)]
pub struct SplitWords {
    /// The text column.
    pub column: usize,
}

impl Operator for SplitWords {
    fn on_record(
        &mut self,
        _: usize,
        r: Record,
        _: &mut Context,
        out: &mut Collector,
    ) -> Result<()> {
        let kind = r.row.kind;
        let n = r.row.values.len();
        if let Value::String(text) = r.row.get(self.column) {
            for word in text.split_whitespace() {
                let mut values = Vec::with_capacity(n + 1);
                values.push(Value::String(word.to_lowercase()));
                // The other columns follow each word (the record as read,
                // for a late record's dead letter).
                for (i, v) in r.row.values.iter().enumerate() {
                    if i != self.column {
                        values.push(v.clone());
                    }
                }
                out.emit(Row::new(kind, values), r.timestamp);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataflow::RecordKey;

    #[test]
    fn words_split_on_unicode_whitespace_lower_cased_with_room_for_a_result() {
        let mut op = SplitWords { column: 0 };
        let mut ctx = Context::new("split", 0, None);
        let mut out = Collector::new();
        let row = Row::insert(vec![Value::from("Hello\u{3000}WORLD\t hello\u{a0}Ünï")]);
        op.on_record(
            0,
            Record {
                row,
                timestamp: 7,
                key_group: 0,
                key: RecordKey::new(),
            },
            &mut ctx,
            &mut out,
        )
        .unwrap();
        let got = out.take();
        let words: Vec<_> = got
            .iter()
            .map(|(r, _)| r.values[0].as_str().unwrap().to_string())
            .collect();
        assert_eq!(words, vec!["hello", "world", "hello", "ünï"]);
        assert!(got.iter().all(|(r, t)| *t == 7 && r.values.capacity() >= 2));
    }
}
