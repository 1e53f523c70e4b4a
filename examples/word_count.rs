//! Word count built with weir's Rust API: the same job as the built-in
//! `kind = "word-count"` pipeline, with the same output (Kafka key: the
//! word; value `{"key":"hello","count":3}`), so the two engines can be
//! compared on one input (`weir-bench compare --systems weir,weir-graph`).
//!
//! ```text
//! cargo run --release --example word_count -- run --config weir.toml
//! ```
//! Topics from `WORD_COUNT_INPUT` and `WORD_COUNT_OUTPUT` (default `words`,
//! `word-counts`); `WORD_COUNT_TOO_LARGE=skip` skips a result over the
//! broker's `message.max.bytes` instead of stopping.

use std::process::ExitCode;

use weir::dataflow::prelude::*;

fn graph(input: &str, output: &str) -> weir::Result<Graph> {
    let job = JobBuilder::new("word-count");
    job.source("lines", KafkaSource::text(&[input]))
        .flat_map(
            "split",
            Schema::of(&[("key", DataType::String)]),
            |v, emit| {
                for word in v[0].as_str().unwrap_or("").split_whitespace() {
                    emit(vec![Value::String(word.to_lowercase())]);
                }
            },
        )
        .key_by(&["key"])
        .aggregate("counts", vec![Agg::count("count")])
        .sink(
            "out",
            too_large(KafkaSink::upsert(output, &["key"]).raw_key()),
        );
    job.build()
}

/// `WORD_COUNT_TOO_LARGE=skip`: a count over the broker's
/// `message.max.bytes` (a giant word) is skipped instead of stopping the job.
fn too_large(sink: KafkaSink) -> KafkaSink {
    match std::env::var("WORD_COUNT_TOO_LARGE").as_deref() {
        Ok("skip") => sink.skip_too_large(),
        _ => sink,
    }
}

fn main() -> ExitCode {
    let var = |name: &str, default: &str| std::env::var(name).unwrap_or_else(|_| default.into());
    weir::main_with(|| {
        graph(
            &var("WORD_COUNT_INPUT", "words"),
            &var("WORD_COUNT_OUTPUT", "word-counts"),
        )
    })
}
