//! The `weir` binary with user-defined functions written in Rust: Nexmark
//! q14's `count_char`, the table function `split_words_rust`, and
//! `panics_on_x`, which panics (for the tests: a panic is a bad value,
//! never a crash). Run it as `weir`:
//!
//! ```text
//! cargo run --example nexmark_udf -- run --config weir.toml
//! ```
//! with SQL such as
//! `SELECT auction, count_char(extra, 'c') AS c_counts FROM bid`.

use std::process::ExitCode;

use weir::dataflow::row::{DataType, Value};
use weir::udf::{Functions, ScalarFunction, TableFunction};

/// Nexmark's `CountChar`: how many characters of `s` are the first
/// character of `c`.
fn count_char(args: &[Value]) -> Result<Value, String> {
    let (Some(s), Some(c)) = (args[0].as_str(), args[1].as_str()) else {
        return Err("count_char takes two strings".into());
    };
    let Some(want) = c.chars().next() else {
        return Ok(Value::Int(0));
    };
    Ok(Value::Int(s.chars().filter(|x| *x == want).count() as i64))
}

/// The words of `s` (split at spaces), each with its length in bytes.
fn split_words(args: &[Value]) -> Result<Vec<Vec<Value>>, String> {
    let s = args[0].as_str().ok_or("split_words takes a string")?;
    Ok(s.split(' ')
        .filter(|w| !w.is_empty())
        .map(|w| vec![Value::String(w.to_string()), Value::Int(w.len() as i64)])
        .collect())
}

fn main() -> ExitCode {
    let functions = Functions::new()
        .scalar(ScalarFunction::new(
            "count_char_rust",
            &[DataType::String, DataType::String],
            DataType::BigInt,
            count_char,
        ))
        .scalar(ScalarFunction::new(
            "panics_on_x",
            &[DataType::String],
            DataType::BigInt,
            |args| {
                let s = args[0].as_str().unwrap_or("");
                assert!(!s.contains('x'), "an x in {s:?}");
                Ok(Value::Int(s.len() as i64))
            },
        ))
        .table(TableFunction::new(
            "split_words_rust",
            &[DataType::String],
            &[("word", DataType::String), ("len", DataType::BigInt)],
            split_words,
        ));
    weir::main_with_functions(functions)
}
