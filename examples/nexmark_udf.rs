//! The `weir` binary with user-defined functions written in Rust: Nexmark
//! q14's `count_char`, the table function `split_words_rust`, and
//! `panics_on_x`, which panics (for the tests: a row it fails on is a bad
//! record, never a crash), and the aggregate `price_span`. Run it as `weir`:
//!
//! ```text
//! cargo run --example nexmark_udf -- run --config weir.toml
//! ```
//! with SQL such as
//! `SELECT auction, count_char(extra, 'c') AS c_counts FROM bid`.

use std::process::ExitCode;

use weir::dataflow::row::{DataType, Value};
use weir::udf::{AggregateFunction, Functions, ScalarFunction, TableFunction};

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

/// The aggregate `price_span(x)`: the largest value less the smallest.
/// Its accumulator is a ROW of the two, kept in weir's state and
/// checkpointed with it. It merges (SESSION windows) but has no retract
/// step (the next extreme is not kept), so weir refuses it over an
/// updating input.
fn price_span() -> AggregateFunction {
    let parts = |acc: &Value| match acc {
        Value::Struct(f) => (
            f[0].as_int().unwrap_or(i64::MAX),
            f[1].as_int().unwrap_or(i64::MIN),
        ),
        _ => (i64::MAX, i64::MIN),
    };
    AggregateFunction::new(
        "price_span",
        DataType::BigInt,
        DataType::BigInt,
        || Value::Struct(vec![Value::Null, Value::Null]),
        move |acc, args| {
            let x = args[0].as_int().ok_or("price_span takes a BIGINT")?;
            let (lo, hi) = parts(&acc);
            Ok(Value::Struct(vec![
                Value::Int(lo.min(x)),
                Value::Int(hi.max(x)),
            ]))
        },
        move |acc| {
            let (lo, hi) = parts(acc);
            Ok(if lo > hi {
                Value::Null
            } else {
                Value::Int(hi - lo)
            })
        },
    )
    .with_merge(move |a, b| {
        let ((a0, a1), (b0, b1)) = (parts(&a), parts(b));
        Ok(Value::Struct(vec![
            Value::Int(a0.min(b0)),
            Value::Int(a1.max(b1)),
        ]))
    })
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
        ))
        .aggregate(price_span());
    weir::main_with_functions(functions)
}
