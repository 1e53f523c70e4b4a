//! SQL over the logical plan: operators over updating input (a filter
//! that takes back a row that stops passing, HAVING over a running
//! aggregate, MIN/MAX that keep every value, UNION ALL of changelogs,
//! SELECT DISTINCT, top-N that keeps every row) and straight over a
//! window TVF's rows (top-N and deduplication per window), subqueries
//! and set operations as semi- and anti-joins, and OVER aggregations,
//! each exact against DuckDB running the same query as
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
    let queries: Vec<Query> = updating_queries()
        .into_iter()
        .chain(window_row_queries())
        .chain(subquery_queries())
        .chain(over_queries())
        .collect();
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
    let union_duckdb = "SELECT auction, price AS v FROM bid WHERE bidder % 7 = 0
         UNION ALL SELECT auction, n AS v FROM (SELECT auction, count(*) AS n FROM bid GROUP BY auction)";
    let sql = format!("{UPDATING_VIEWS}{}{union_weir}", inserts(&queries));
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
        "TopN 3 by (bidder) order by (n DESC, auction), every row kept [upsert by (bidder, $rank)]",
        "TopN 3 by (window_start, window_end) order by (price DESC, date_time), per window [append-only]",
        "WindowTvf Tumbling { size: 10000, offset: 0 }",
        "Join Anti on (id) = (seller) [retracting] (not_exists.anti-join)",
        "Join Left, interval on (auction, window_start, window_end) = (id, window_start, window_end) [append-only]",
        "Join Semi on (auction) = (id) [retracting] (in_subquery.semi-join)",
        "OverAggregate by (auction) order by date_time ROWS 10 PRECEDING: SUM(price), MAX(price) [append-only, event time date_time] (over_rows.over)",
        "OverAggregate by (bidder) order by date_time RANGE 10000 ms PRECEDING",
    ] {
        assert!(plan.contains(want), "{want:?} in:\n{plan}");
    }
    assert!(
        !plan.contains("distinct_append.where"),
        "WHERE 1 = 1 makes no filter:\n{plan}"
    );
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
    let want = multiset(duckdb(&input.data, union_duckdb).into_iter());
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

/// A table from an upsert topic (`primary_key`), changed and deleted
/// while the job runs under five SIGKILLs: MIN/MAX per state over it (a
/// replaced or deleted balance that was a state's extreme leaves the next
/// one), a WHERE over it into an upsert sink (an account whose balance
/// falls below the bound, or that is deleted, leaves the sink's table),
/// and a top-2 per state over it. Each final table is DuckDB's over the
/// last change of each key.
#[test]
fn min_max_where_and_top_n_over_an_upsert_table_are_exact_under_sigkills() {
    let seed = seed();
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().unwrap();
    let topic = unique("sqlp-accounts");
    create_topic(&topic, 2);
    let sinks = [
        ("extremes".to_string(), unique("sqlp-extremes")),
        ("rich".to_string(), unique("sqlp-rich")),
        ("top2".to_string(), unique("sqlp-top2")),
    ];
    for (_, t) in &sinks {
        create_topic(t, 2);
    }
    // 3,000 changes of 120 accounts, one in six a tombstone; a key's
    // changes go to one partition, in order.
    let states = ["OR", "CA", "WA", "ID", "NV"];
    let mut changes: Vec<(i32, String, Option<String>)> = Vec::new();
    let mut reference = String::new();
    for seq in 0..3000u64 {
        let id = rng.below(120);
        let key = format!("{{\"id\":{id}}}");
        let (value, line) = if rng.below(6) == 0 {
            (
                None,
                format!("{{\"seq\":{seq},\"id\":{id},\"state\":null,\"balance\":null,\"deleted\":true}}"),
            )
        } else {
            let state = states[rng.below(states.len() as u64) as usize];
            let balance = rng.below(1000);
            (
                Some(format!("{{\"id\":{id},\"state\":\"{state}\",\"balance\":{balance}}}")),
                format!("{{\"seq\":{seq},\"id\":{id},\"state\":\"{state}\",\"balance\":{balance},\"deleted\":false}}"),
            )
        };
        changes.push(((id % 2) as i32, key, value));
        reference.push_str(&line);
        reference.push('\n');
    }
    std::fs::write(dir.path().join("account_changes.jsonl"), reference).unwrap();
    let sql = "INSERT INTO extremes
  SELECT state, MIN(balance) AS lo, MAX(balance) AS hi, COUNT(*) AS accounts
  FROM accounts GROUP BY state;
INSERT INTO rich SELECT id, state, balance FROM accounts WHERE balance >= 700;
INSERT INTO top2
  SELECT state, rn, id, balance FROM (
    SELECT state, id, balance,
           ROW_NUMBER() OVER (PARTITION BY state ORDER BY balance DESC, id) AS rn
    FROM accounts)
  WHERE rn <= 2;";
    let mut sections = format!(
        r#"
[sources.accounts]
topics = ["{topic}"]
format = "json"
schema = "id BIGINT, state VARCHAR, balance BIGINT"
primary_key = ["id"]
"#
    );
    for (name, t) in &sinks {
        sections.push_str(&format!(
            "\n[sinks.{name}]\ntopic = \"{t}\"\ndelivery = \"exactly-once\"\n"
        ));
    }
    sections.push_str(&format!("\n[pipeline]\nsql = \"\"\"\n{sql}\n\"\"\"\n"));
    let config = graph_config_with(
        dir.path(),
        &unique("sql-plan-table"),
        2,
        &dir.path().join("checkpoints"),
        &sections,
    );
    let explain = weir_on("explain", &config);
    let plan = String::from_utf8_lossy(&explain.stdout);
    assert!(explain.status.success(), "{plan}");
    for want in [
        "Normalize by (id) [upsert by (id)] (source.accounts.normalize)",
        "Filter balance >= 700 [upsert by (id)] (rich.where)",
        "rich -> topic",
    ] {
        assert!(plan.contains(want), "{want:?} in:\n{plan}");
    }
    let chunks: Vec<&[(i32, String, Option<String>)]> = changes.chunks(300).collect();
    let mut weir = feed_with_kills_by(
        &Job {
            binary: weir(),
            config: &config,
            env: &[],
        },
        chunks.len(),
        5,
        &mut rng,
        |i| weir_testkit::produce_records(&topic, chunks[i]),
    );
    let last = "WITH last AS (SELECT * FROM account_changes
                  QUALIFY row_number() OVER (PARTITION BY id ORDER BY seq DESC) = 1),
             live AS (SELECT * FROM last WHERE NOT deleted)";
    let context = || format!("seed {seed}; log: {}", log_tail(&weir.log_text()));
    let queries = [
        format!(
            "{last} SELECT state, min(balance) AS lo, max(balance) AS hi, count(*) AS accounts
             FROM live GROUP BY state"
        ),
        format!("{last} SELECT id, state, balance FROM live WHERE balance >= 700"),
        format!(
            "{last} SELECT state, rn, id, balance FROM (
               SELECT state, id, balance,
                      row_number() OVER (PARTITION BY state ORDER BY balance DESC, id) AS rn
               FROM live) WHERE rn <= 2"
        ),
    ];
    for ((name, topic), duckdb) in sinks.iter().zip(queries) {
        let q = Query {
            sink: name.clone().leak(),
            weir: "",
            duckdb: duckdb.leak(),
            updating: true,
            compare: &[],
        };
        assert_matches_duckdb(&q, topic, dir.path(), Duration::from_secs(90), &context);
    }
    let log = weir.log_text();
    weir.stop(Duration::from_secs(30));
    assert!(
        log.matches("job running").count() >= 6,
        "the job was restarted after each kill"
    );
}
