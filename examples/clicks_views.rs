//! A keyed two-input operator written against weir's `Operator` trait:
//! per user, how many clicks and how many views, from two topics. Both
//! inputs are keyed by `user`, so a user's records of either topic meet in
//! one subtask; the operator keeps both counts in one state table and
//! emits the user's row after each record (an updating result, written to
//! an upsert topic keyed by `{"user": ...}`). Barriers align over both
//! inputs: a checkpoint holds exactly the records before its barrier on
//! each topic.
//!
//! ```text
//! cargo run --example clicks_views -- run --config weir.toml
//! ```
//! Topics from `CLICKS`, `VIEWS` and `COUNTS` (default `clicks`, `views`,
//! `clicks-views`). Input: `{"user": "u1"}` on either topic.

use std::process::ExitCode;

use weir::dataflow::prelude::*;

/// Per user: `[clicks, views]`.
struct CoCount;

impl CoCount {
    const COUNTS: Table = Table(0);
}

impl Operator for CoCount {
    fn on_record(
        &mut self,
        input: usize,
        r: Record,
        ctx: &mut Context,
        out: &mut Collector,
    ) -> weir::Result<()> {
        let old: Option<Vec<Value>> = ctx.get(Self::COUNTS)?;
        let mut counts = old
            .clone()
            .unwrap_or_else(|| vec![Value::Int(0), Value::Int(0)]);
        counts[input] = Value::Int(counts[input].as_int().unwrap_or(0) + 1);
        ctx.put(Self::COUNTS, &counts)?;
        let row = |kind, c: &[Value]| {
            let mut values = vec![r.row.values[0].clone()];
            values.extend_from_slice(c);
            Row::new(kind, values)
        };
        match old {
            None => out.emit(row(RowKind::Insert, &counts), r.timestamp),
            Some(old) => {
                out.emit(row(RowKind::UpdateBefore, &old), r.timestamp);
                out.emit(row(RowKind::UpdateAfter, &counts), r.timestamp);
            }
        }
        Ok(())
    }
}

fn graph(clicks: &str, views: &str, counts: &str) -> weir::Result<Graph> {
    let job = JobBuilder::new("clicks-views");
    let schema = Schema::of(&[("user", DataType::String)]);
    let clicks = job.source("clicks", KafkaSource::json(&[clicks], schema.clone()));
    let views = job.source("views", KafkaSource::json(&[views], schema));
    Stream::connect(clicks.key_by(&["user"]), views.key_by(&["user"]))
        .process(
            "per-user",
            Schema::of(&[
                ("user", DataType::String),
                ("clicks", DataType::BigInt),
                ("views", DataType::BigInt),
            ]),
            vec![TableSpec::value::<Vec<Value>>("counts")],
            || CoCount,
        )
        .sink("out", KafkaSink::upsert(counts, &["user"]));
    job.build()
}

fn main() -> ExitCode {
    let var = |name: &str, default: &str| std::env::var(name).unwrap_or_else(|_| default.into());
    weir::main_with(|| {
        graph(
            &var("CLICKS", "clicks"),
            &var("VIEWS", "views"),
            &var("COUNTS", "clicks-views"),
        )
    })
}
