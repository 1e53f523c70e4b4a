//! A two-stage job built with weir's Rust API: per-key tumbling counts,
//! then, per window, how many keys reached each count.
//!
//! Input: JSON objects `{"key": "k1", "at": "2026-11-30T10:00:00.250Z"}`
//! (or `at` in epoch milliseconds). Stage one counts each key's records
//! per one-second window of event time and emits the count once the
//! watermark passes the window. Stage two is keyed by (window, count) and
//! keeps a running count of keys: an updating result, written to an
//! upsert topic keyed by `{"window_start": ..., "n": ...}`.
//!
//! ```text
//! cargo run --example two_stage -- run --config weir.toml
//! ```
//! with `[job]`, `[kafka]`, `[checkpoint]` and `[state]` as for `weir run`
//! (no `[source]` or `[pipeline]`: they are the code below). The topics
//! come from `TWO_STAGE_INPUT`, `TWO_STAGE_OUTPUT` and `TWO_STAGE_WINDOWS`
//! (stage one's per-key window counts; default `two-stage-in`,
//! `two-stage-out`, `two-stage-windows`).

use std::process::ExitCode;
use std::time::Duration;

use weir::dataflow::prelude::*;

fn graph(input: &str, output: &str, windows: &str) -> weir::Result<Graph> {
    let job = JobBuilder::new("two-stage");
    let events = job.source(
        "events",
        KafkaSource::json(
            &[input],
            Schema::of(&[("key", DataType::String), ("at", DataType::Timestamp)]),
        )
        // No idle timeout: a partition read a moment later than the others
        // must hold the watermark back, or its records would be late.
        .event_time("at", Duration::from_millis(200))
        .skip_bad_records(),
    );
    let per_key = events
        .key_by(&["key"])
        .window(WindowSpec::Tumbling {
            size: 1000,
            offset: 0,
        })
        .aggregate("per-key", vec![Agg::count("n")]);
    // Stage one's results go to a topic of their own too (an append sink
    // chained into stage one) and on to stage two.
    per_key.sink("windows", KafkaSink::append(windows, &["key"]));
    per_key
        .key_by(&["window_start", "n"])
        .aggregate("keys-per-count", vec![Agg::count("keys")])
        .sink("out", KafkaSink::upsert(output, &["window_start", "n"]));
    job.build()
}

fn main() -> ExitCode {
    let var = |name: &str, default: &str| std::env::var(name).unwrap_or_else(|_| default.into());
    weir::main_with(|| {
        graph(
            &var("TWO_STAGE_INPUT", "two-stage-in"),
            &var("TWO_STAGE_OUTPUT", "two-stage-out"),
            &var("TWO_STAGE_WINDOWS", "two-stage-windows"),
        )
    })
}
