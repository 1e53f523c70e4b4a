//! The same operators in both runners (issue #41): a table of operators,
//! each a SQL query, run once as a single-mode job (a thread per task,
//! channels, barriers) and once as a group-mode job of three instances
//! (tasks on each instance's poll thread, repartition topics, epochs),
//! over the same Nexmark input, SIGKILLed twice in each mode. Every
//! (operator, mode) cell must equal DuckDB's batch answer, read by the test
//! kit's read_committed consumer.
//!
//! Each runner has its own heavier tests (tests/sql_plan.rs,
//! tests/graph_group.rs); this table is what makes an operator that works
//! in one mode and not the other fail in one place, named by both.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use weir_testkit::sql::{
    debezium_queries, over_queries, subquery_queries, updating_queries, window_row_queries, Query,
    UPDATING_VIEWS,
};
use weir_testkit::{create_topic, log_tail, produce, unique, Rng};

#[path = "support/graph_jobs.rs"]
mod graph_jobs;
use graph_jobs::*;
#[path = "support/sql_kit.rs"]
mod sql_kit;
use sql_kit::*;
#[path = "support/group_cluster.rs"]
mod group_cluster;
use group_cluster::*;

/// The operators, each with the query that exercises it; a query whose
/// result no key names goes to a Debezium sink (`changes`).
const OPERATORS: &[(&str, &str)] = &[
    ("regular join", "q3"),
    ("window aggregate (HOP)", "q5"),
    ("window join", "q8"),
    ("interval join under a top-1", "q9"),
    ("deduplication (ROW_NUMBER = 1)", "q18"),
    ("append-only top-N", "q19"),
    ("filter over an updating aggregate", "where_over_group_by"),
    ("MIN/MAX with retractions", "min_max_over_updating"),
    ("top-N over updating input", "top3_over_updating"),
    (
        "SELECT DISTINCT over updating input",
        "distinct_over_updating",
    ),
    ("window top-N over TVF rows", "window_top3"),
    ("outer window join", "outer_window_join"),
    ("semi-join (IN)", "in_subquery"),
    ("anti-join (NOT EXISTS)", "not_exists"),
    ("INTERSECT", "intersect"),
    ("OVER ROWS", "over_rows"),
    ("OVER RANGE", "over_range"),
    ("OVER kept current (changes)", "q6_rw"),
];

#[derive(Debug, Clone, Copy)]
enum Mode {
    Single,
    Group,
}

/// Each operator's query, and whether its result goes out as Debezium
/// changes.
fn operator_queries() -> Vec<(&'static str, Query, bool)> {
    let changes: Vec<Query> = debezium_queries();
    let mut all: Vec<Query> = updating_queries()
        .into_iter()
        .chain(window_row_queries())
        .chain(subquery_queries())
        .chain(over_queries())
        .collect();
    // Nexmark's joins and top-N last: `window_top3` is also one of the
    // window-row queries, which come first.
    all.extend(weir_testkit::nexmark::join_queries());
    OPERATORS
        .iter()
        .map(|(operator, sink)| {
            if let Some(q) = changes.iter().find(|q| q.sink == *sink) {
                return (*operator, q.clone(), true);
            }
            let q = all
                .iter()
                .find(|q| q.sink == *sink)
                .unwrap_or_else(|| panic!("no test query {sink} for {operator}"));
            (*operator, q.clone(), false)
        })
        .collect()
}

#[test]
fn every_operator_is_exact_in_both_runners_under_sigkills() {
    let seed = seed();
    let dir = tempfile::tempdir().unwrap();
    let input = nexmark_streams(dir.path(), seed, 4000, 2);
    let queries = operator_queries();
    assert_eq!(queries.len(), OPERATORS.len());
    for mode in [Mode::Single, Mode::Group] {
        let mut rng = Rng::new(seed ^ mode as u64);
        let tag = match mode {
            Mode::Single => "opm-s",
            Mode::Group => "opm-g",
        };
        let topics: BTreeMap<&str, String> = ["person", "auction", "bid"]
            .into_iter()
            .map(|t| (t, unique(&format!("{tag}-{t}"))))
            .collect();
        let sinks: Vec<(String, String)> = queries
            .iter()
            .map(|(_, q, _)| (q.sink.to_string(), unique(&format!("{tag}-{}", q.sink))))
            .collect();
        for t in topics.values().chain(sinks.iter().map(|(_, t)| t)) {
            create_topic(t, 2);
        }
        let plain: Vec<Query> = queries
            .iter()
            .filter(|(_, _, changes)| !changes)
            .map(|(_, q, _)| q.clone())
            .collect();
        let changes: Vec<Query> = queries
            .iter()
            .filter(|(_, _, changes)| *changes)
            .map(|(_, q, _)| q.clone())
            .collect();
        let sql = format!("{UPDATING_VIEWS}{}{}", inserts(&plain), inserts(&changes));
        let mut sections = nexmark_sections(&topics, &sinks, "", &sql);
        for q in &changes {
            sections = sections.replace(
                &format!("[sinks.{}]\n", q.sink),
                &format!("[sinks.{}]\nchangelog = \"debezium\"\n", q.sink),
            );
        }
        let base = dir.path().join(tag);
        let chunks = 8;
        let feed = |i: usize| {
            for (table, lines) in input.chunk(i, chunks) {
                produce(&topics[table], 2, &lines);
            }
        };
        let check = |logs: &dyn Fn() -> String| {
            for ((operator, q, as_changes), (_, topic)) in queries.iter().zip(&sinks) {
                let context = || {
                    format!(
                        "{operator} ({}) in {mode:?} mode, seed {seed}\n{}",
                        q.sink,
                        logs()
                    )
                };
                if *as_changes {
                    assert_debezium_matches_duckdb(
                        q,
                        topic,
                        &input.data,
                        Duration::from_secs(180),
                        &context,
                    );
                } else {
                    assert_matches_duckdb(
                        q,
                        topic,
                        &input.data,
                        Duration::from_secs(180),
                        &context,
                    );
                }
                eprintln!("{operator:<40} {mode:?}: exact against DuckDB");
            }
        };
        match mode {
            Mode::Single => {
                let config = graph_config_with(
                    &base,
                    &unique("opm"),
                    2,
                    &base.join("checkpoints"),
                    &sections,
                );
                let mut weir = feed_with_kills_by(
                    &Job {
                        binary: weir(),
                        config: &config,
                        env: &[],
                    },
                    chunks + 1,
                    2,
                    &mut rng,
                    feed,
                );
                check(&|| log_tail(&weir.log_text()).to_string());
                weir.stop(Duration::from_secs(30));
            }
            Mode::Group => {
                let mut c = Cluster::sql(&base, &sections);
                for i in 0..3 {
                    c.start(i);
                }
                feed_with_random_kills_by(&mut c, chunks + 1, 2, &mut rng, feed);
                check(&|| c.logs());
                c.assert_alive();
                c.stop_all();
            }
        }
        // The topics go when the test process ends (`unique` names them).
        let _ = std::fs::remove_dir_all(Path::new(&base));
    }
}
