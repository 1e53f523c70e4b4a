//! Tumbling, hopping and session windows over one stream, built with
//! weir's Rust API: per user, the number of events in each one-minute
//! window, in each minute-long window every 20 s, and in each session of
//! activity (a gap of 30 s ends one). Each result is written once, when
//! the watermark passes the window's end; events that arrive after every
//! window they belong to has closed go, per window kind, to a dead-letter
//! topic.
//!
//! Input: `{"id": 7, "user": "u1", "ts": 1764460800000}` (`ts` in epoch
//! milliseconds or RFC 3339), up to 5 s out of order.
//!
//! ```text
//! cargo run --example windows -- run --config weir.toml
//! ```
//! Topics from `WINDOWS_INPUT` (default `events`) and `WINDOWS_OUTPUT`
//! (default `windows`): results go to `<output>.tumbling`, `.hopping` and
//! `.session`, late events to `<output>.tumbling.late` and so on.

use std::process::ExitCode;
use std::time::Duration;

use weir::dataflow::prelude::*;

fn graph(input: &str, output: &str) -> weir::Result<Graph> {
    let job = JobBuilder::new("windows");
    let events = job.source(
        "events",
        KafkaSource::json(
            &[input],
            Schema::of(&[
                ("id", DataType::BigInt),
                ("user", DataType::String),
                ("ts", DataType::Timestamp),
            ]),
        )
        .event_time("ts", Duration::from_secs(5)),
    );
    let windows = [
        (
            "tumbling",
            WindowSpec::Tumbling {
                size: 60_000,
                offset: 0,
            },
        ),
        (
            "hopping",
            WindowSpec::Hopping {
                size: 60_000,
                slide: 20_000,
                offset: 0,
            },
        ),
        ("session", WindowSpec::Session { gap: 30_000 }),
    ];
    for (kind, spec) in windows {
        let topic = format!("{output}.{kind}");
        events
            .key_by(&["user"])
            .window(spec)
            .late_to(&format!("{topic}.late"))
            .aggregate(kind, vec![Agg::count("count")])
            .sink(
                &format!("{kind}-out"),
                KafkaSink::append(&topic, &["user"]).raw_key(),
            );
    }
    job.build()
}

fn main() -> ExitCode {
    let var = |name: &str, default: &str| std::env::var(name).unwrap_or_else(|_| default.into());
    weir::main_with(|| {
        graph(
            &var("WINDOWS_INPUT", "events"),
            &var("WINDOWS_OUTPUT", "windows"),
        )
    })
}
