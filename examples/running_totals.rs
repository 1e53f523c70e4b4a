//! An updating result flowing into a later stage: per user, the running
//! total of `amount`; then, per total, how many users have it now. When a
//! user's total moves from 10 to 15, the second stage retracts the user
//! from 10 and adds them to 15, so the output (an upsert topic keyed by
//! `{"total": ...}`, tombstones for totals no user has any more) always
//! shows the true current distribution.
//!
//! ```text
//! cargo run --example running_totals -- run --config weir.toml
//! ```
//! Topics from `TOTALS_INPUT` and `TOTALS_OUTPUT` (default `payments`,
//! `users-per-total`). Input: `{"user": "u1", "amount": 5}`; records
//! whose amount is not above 0 (or is missing) are not payments and are
//! filtered out first.

use std::process::ExitCode;

use weir::dataflow::prelude::*;

fn graph(input: &str, output: &str) -> weir::Result<Graph> {
    let job = JobBuilder::new("running-totals");
    let payments = job.source(
        "payments",
        KafkaSource::json(
            &[input],
            Schema::of(&[("user", DataType::String), ("amount", DataType::BigInt)]),
        ),
    );
    // Only payments: `WHERE amount > 0`, a filter over a row expression.
    let payments = payments.filter_where("paid", Expr::col("amount").gt(Expr::lit(0)));
    let amount = payments.schema().index_of("amount");
    let totals = payments
        .key_by(&["user"])
        .aggregate("totals", vec![Agg::of(AggFunction::Sum, amount, "total")]);
    totals
        .key_by(&["total"])
        .aggregate("users-per-total", vec![Agg::count("users")])
        .sink("out", KafkaSink::upsert(output, &["total"]));
    job.build()
}

fn main() -> ExitCode {
    let var = |name: &str, default: &str| std::env::var(name).unwrap_or_else(|_| default.into());
    weir::main_with(|| {
        graph(
            &var("TOTALS_INPUT", "payments"),
            &var("TOTALS_OUTPUT", "users-per-total"),
        )
    })
}
