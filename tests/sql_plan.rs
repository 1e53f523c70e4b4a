//! SQL over the logical plan: operators over updating input (a filter
//! that takes back a row that stops passing, HAVING over a running
//! aggregate, MIN/MAX that keep every value, UNION ALL of changelogs,
//! SELECT DISTINCT), each exact against DuckDB running the same query as
//! a batch over the same events, under SIGKILLs, read by weir-testkit's
//! read_committed consumer.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use weir_testkit::sql::*;
use weir_testkit::{create_topic, log_tail, read_topic, unique, Isolation, Rng};

#[path = "support/graph_jobs.rs"]
mod graph_jobs;
use graph_jobs::*;
#[path = "support/sql_kit.rs"]
mod sql_kit;
use sql_kit::*;

fn weir_on(command: &str, config: &std::path::Path) -> std::process::Output {
    Command::new(weir())
        .args([command, "--config"])
        .arg(config)
        .output()
        .unwrap()
}

/// The running count per auction the updating queries read.
const PER_AUCTION: &str =
    "CREATE VIEW per_auction AS SELECT auction, COUNT(*) AS n FROM bid GROUP BY auction;\n";
const PER_AUCTION_DUCKDB: &str = "(SELECT auction, count(*) AS n FROM bid GROUP BY auction)";

/// The queries over updating results, with DuckDB's batch equivalents.
fn updating_queries() -> Vec<Query> {
    vec![
        // A WHERE over a GROUP BY: an auction whose count leaves the
        // range is deleted (its update-after is filtered out, its
        // update-before is a tombstone).
        Query {
            sink: "where_over_group_by",
            weir: "SELECT auction, n FROM per_auction WHERE n BETWEEN 3 AND 6",
            duckdb: "SELECT auction, n FROM (SELECT auction, count(*) AS n FROM bid GROUP BY auction) WHERE n BETWEEN 3 AND 6",
            updating: true,
            compare: &[],
        },
        // HAVING over a running aggregate: a bidder drops out when its
        // fifth bid arrives.
        Query {
            sink: "having_over_updating",
            weir: "SELECT bidder, COUNT(*) AS n, MAX(price) AS top FROM bid GROUP BY bidder HAVING COUNT(*) <= 4",
            duckdb: "SELECT bidder, count(*) AS n, max(price) AS top FROM bid GROUP BY bidder HAVING count(*) <= 4",
            updating: true,
            compare: &[],
        },
        // MIN/MAX over an updating result: each bid moves its auction
        // from group n to n + 1, retracting it from n's extremes.
        Query {
            sink: "min_max_over_updating",
            weir: "SELECT n, MIN(auction) AS lo, MAX(auction) AS hi, COUNT(*) AS auctions FROM per_auction GROUP BY n",
            duckdb: "SELECT n, min(auction) AS lo, max(auction) AS hi, count(*) AS auctions FROM (SELECT auction, count(*) AS n FROM bid GROUP BY auction) GROUP BY n",
            updating: true,
            compare: &[],
        },
        // SELECT DISTINCT over an updating result: a count per value,
        // deleted when no auction has that count any more.
        Query {
            sink: "distinct_over_updating",
            weir: "SELECT DISTINCT n FROM per_auction",
            duckdb: "SELECT DISTINCT n FROM (SELECT auction, count(*) AS n FROM bid GROUP BY auction)",
            updating: true,
            compare: &[],
        },
        // SELECT DISTINCT over an append-only input: each row once.
        Query {
            sink: "distinct_append",
            weir: "SELECT DISTINCT bidder, channel FROM bid",
            duckdb: "SELECT DISTINCT bidder, channel FROM bid",
            updating: false,
            compare: &[],
        },
    ]
}

/// Nexmark bids through the queries above as one job with parallelism 2,
/// SIGKILLed five times while it works; each sink's final table (or rows)
/// against DuckDB's. A UNION ALL of a stream and an aggregate's changes
/// goes to a Debezium sink, whose changes applied in order leave DuckDB's
/// UNION ALL.
#[test]
fn operators_over_updating_input_are_exact_under_sigkills_against_duckdb() {
    let seed = seed();
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().unwrap();
    let input = nexmark_streams(dir.path(), seed, 6000, 2);
    let topics: BTreeMap<&str, String> = ["person", "auction", "bid"]
        .into_iter()
        .map(|t| (t, unique(&format!("sqlp-{t}"))))
        .collect();
    for t in topics.values() {
        create_topic(t, 2);
    }
    let queries = updating_queries();
    let mut sinks: Vec<(String, String)> = queries
        .iter()
        .map(|q| (q.sink.to_string(), unique(&format!("sqlp-{}", q.sink))))
        .collect();
    sinks.push(("union_changes".into(), unique("sqlp-union")));
    for (_, topic) in &sinks {
        create_topic(topic, 2);
    }
    let union_weir = "INSERT INTO union_changes
SELECT auction, price AS v FROM bid WHERE MOD(bidder, 7) = 0
UNION ALL
SELECT auction, n AS v FROM per_auction;\n";
    let union_duckdb = format!(
        "SELECT auction, price AS v FROM bid WHERE bidder % 7 = 0
         UNION ALL SELECT auction, n AS v FROM {PER_AUCTION_DUCKDB}"
    );
    let sql = format!("{PER_AUCTION}{}{union_weir}", inserts(&queries));
    let mut sections = nexmark_sections(&topics, &sinks, "", &sql);
    sections = sections.replace(
        "[sinks.union_changes]\n",
        "[sinks.union_changes]\nchangelog = \"debezium\"\n",
    );
    let config = graph_config_with(
        dir.path(),
        &unique("sql-plan"),
        2,
        &dir.path().join("checkpoints"),
        &sections,
    );
    let explain = weir_on("explain", &config);
    let plan = String::from_utf8_lossy(&explain.stdout).to_string();
    assert!(
        explain.status.success(),
        "explain: {}",
        String::from_utf8_lossy(&explain.stderr)
    );
    // The logical plan says each node's changelog.
    for want in [
        "Filter n BETWEEN 3 AND 6 [upsert by (auction)] (where_over_group_by.where)",
        "Filter COUNT(*) <= 4 [upsert by (bidder)] (having_over_updating.having)",
        "MIN(auction) AS lo, every value kept",
        "Union all [retracting] (union_changes.union)",
        // Rows no key names go out keyed by every column: a row's insert
        // and deletion share a partition.
        "debezium: every change as {\"before\", \"after\", \"op\"}, Kafka key (auction, v)",
        "Deduplicate by (bidder, channel) [append-only] (distinct_append.distinct)",
    ] {
        assert!(plan.contains(want), "{want:?} in:\n{plan}");
    }
    let chunks = 10;
    let mut weir = feed_with_kills_by(
        &Job {
            binary: weir(),
            config: &config,
            env: &[],
        },
        chunks + 1,
        5,
        &mut rng,
        |i| {
            for (table, lines) in input.chunk(i, chunks) {
                weir_testkit::produce(&topics[table], 2, &lines);
            }
        },
    );
    let context = || format!("seed {seed}; log: {}", log_tail(&weir.log_text()));
    for (q, (_, topic)) in queries.iter().zip(&sinks) {
        assert_matches_duckdb(q, topic, &input.data, Duration::from_secs(120), &context);
    }
    let want = multiset(duckdb(&input.data, &union_duckdb).into_iter());
    assert!(!want.is_empty(), "DuckDB's UNION ALL is empty");
    let union_topic = &sinks.last().expect("the union's sink").1;
    let changes = read_topic(
        union_topic,
        Isolation::Committed,
        Duration::from_secs(90),
        Duration::from_secs(2),
        |r| final_debezium_multiset(r).is_ok_and(|t| t == want),
    );
    let got = final_debezium_multiset(&changes)
        .unwrap_or_else(|e| panic!("union_changes as Debezium changes: {e}; {}", context()));
    assert_eq!(got.len(), want.len(), "union_changes: rows; {}", context());
    assert_eq!(got, want, "union_changes against DuckDB; {}", context());
    let log = weir.log_text();
    weir.stop(Duration::from_secs(30));
    assert!(
        log.matches("job running").count() >= 6,
        "the job was restarted after each kill"
    );
}
