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
use weir_testkit::{create_topic, log_tail, unique, Rng};

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

/// `weir explain` of `config`, which must succeed and print each of
/// `wants`; returns what it printed.
fn explain_with(config: &std::path::Path, wants: &[&str]) -> String {
    let explain = weir_on("explain", config);
    let plan = String::from_utf8_lossy(&explain.stdout).to_string();
    assert!(
        explain.status.success(),
        "explain: {}",
        String::from_utf8_lossy(&explain.stderr)
    );
    for want in wants {
        assert!(
            plan.contains(want),
            "{want:?} in:
{plan}"
        );
    }
    plan
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
        .chain(over_updating_queries())
        .collect();
    // Results no key names, written as Debezium changes.
    let changes = debezium_queries();
    let sinks: Vec<(String, String)> = queries
        .iter()
        .chain(&changes)
        .map(|q| (q.sink.to_string(), unique(&format!("sqlp-{}", q.sink))))
        .collect();
    for (_, topic) in &sinks {
        create_topic(topic, 2);
    }
    let sql = format!("{UPDATING_VIEWS}{}{}", inserts(&queries), inserts(&changes));
    let mut sections = nexmark_sections(&topics, &sinks, "", &sql);
    for q in &changes {
        sections = sections.replace(
            &format!("[sinks.{}]\n", q.sink),
            &format!("[sinks.{}]\nchangelog = \"debezium\"\n", q.sink),
        );
    }
    let config = graph_config_with(
        dir.path(),
        &unique("sql-plan"),
        2,
        &dir.path().join("checkpoints"),
        &sections,
    );
    // The logical plan says each node's changelog.
    let plan = explain_with(
        &config,
        &[
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
        // Over an updating input, or with LEAD: kept current.
        "OverAggregate by (seller) order by (date_time, auction) ROWS 10 PRECEDING: AVG(Q.final), kept current [upsert by (auction, seller)] (q6_rw.over)",
        "TopN 1 by (id, seller) order by (price DESC, date_time, bidder) [upsert by (id, seller)]",
        "OverAggregate by (bidder) order by (n DESC) RANGE UNBOUNDED PRECEDING: RANK(), COUNT(*), kept current [upsert by (bidder, auction)]",
        "kept current [retracting, event time date_time] (over_lead.over)",
        ],
    );
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
    for (q, (_, topic)) in queries.iter().chain(&changes).zip(&sinks) {
        if changes.iter().any(|c| c.sink == q.sink) {
            assert_debezium_matches_duckdb(
                q,
                topic,
                &input.data,
                Duration::from_secs(120),
                &context,
            );
        } else {
            assert_matches_duckdb(q, topic, &input.data, Duration::from_secs(120), &context);
        }
    }
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
    explain_with(
        &config,
        &[
            "Normalize by (id) [upsert by (id)] (source.accounts.normalize)",
            "Filter balance >= 700 [upsert by (id)] (rich.where)",
            "rich -> topic",
        ],
    );
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

/// `[pipeline] state_ttl = "5s"` on every kind of state a key holds
/// without end: a running aggregate, SELECT DISTINCT, a running top-N,
/// an upsert table's normalize. Ninety keys, each busy for one second of
/// event time and then quiet (an event every 20 ms for 90 s), through two
/// SIGKILLs, and at the end key 0 once more, 85 s after it went quiet.
///
/// - Each key's results are DuckDB's while it is busy: the TTL takes
///   nothing from a key within it.
/// - Key 0's state had gone, so its last event starts from nothing, as in
///   Flink: its count is 1, its value passes DISTINCT again, it takes
///   rank 1 of a new top-2 (rank 2 keeps what was written before). The
///   oracle is DuckDB grouping by the key's "life" too.
/// - The state held at the last checkpoint (`weir state scan`) is about
///   the last 10 s of keys, not all 90, and what went is counted in
///   `weir_state_expired_total` per operator.
#[test]
fn state_ttl_bounds_aggregate_distinct_top_n_and_normalize_state() {
    let seed = seed();
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().unwrap();
    let t0: i64 = 1_796_032_800_000; // 2026-11-30T10:00:00Z
    let at = |ms: i64| {
        humantime::format_rfc3339_millis(std::time::UNIX_EPOCH + Duration::from_millis(ms as u64))
            .to_string()
    };
    let keys = 90i64;
    let mut events: Vec<(i64, i64, i64, i64)> = (0..keys * 50)
        .map(|i| (i, i / 50, (i * 7) % 11, t0 + i * 20))
        .collect();
    events.push((keys * 50, 0, 3, t0 + 91_000));
    let line = |(seq, k, v, t): &(i64, i64, i64, i64)| {
        format!(r#"{{"seq":{seq},"k":{k},"v":{v},"t":"{}"}}"#, at(*t))
    };
    let reference: String = events
        .iter()
        .map(|e| {
            let (seq, k, v, _) = e;
            let life = i64::from(*seq == keys * 50);
            format!(r#"{{"seq":{seq},"k":{k},"v":{v},"life":{life}}}"#) + "\n"
        })
        .collect();
    std::fs::write(dir.path().join("ttl_events.jsonl"), reference).unwrap();
    let (events_topic, table_topic) = (unique("sqlp-ttl-events"), unique("sqlp-ttl-table"));
    create_topic(&events_topic, 2);
    create_topic(&table_topic, 2);
    let sinks = [
        ("counts", unique("sqlp-ttl-counts")),
        ("firsts", unique("sqlp-ttl-firsts")),
        ("top2", unique("sqlp-ttl-top2")),
        ("latest_v", unique("sqlp-ttl-latest")),
    ];
    let schema =
        "seq BIGINT, k BIGINT, v BIGINT, t TIMESTAMP(3), WATERMARK FOR t AS t - INTERVAL '4' SECOND";
    let mut sections = format!(
        r#"
[sources.events]
topics = ["{events_topic}"]
format = "json"
schema = "{schema}"

[sources.latest]
topics = ["{table_topic}"]
format = "json"
schema = "{schema}"
primary_key = ["k"]
"#
    );
    for (name, t) in &sinks {
        create_topic(t, 2);
        sections.push_str(&format!(
            "\n[sinks.{name}]\ntopic = \"{t}\"\ndelivery = \"exactly-once\"\n"
        ));
    }
    sections.push_str(
        r#"
[pipeline]
state_ttl = "5s"
sql = """
INSERT INTO counts SELECT k, COUNT(*) AS n, SUM(v) AS s FROM events GROUP BY k;
INSERT INTO firsts SELECT DISTINCT k, v FROM events;
INSERT INTO top2
  SELECT k, rn, v, seq FROM (
    SELECT k, v, seq, ROW_NUMBER() OVER (PARTITION BY k ORDER BY v DESC, seq) AS rn FROM events)
  WHERE rn <= 2;
INSERT INTO latest_v SELECT k, v, seq FROM latest;
"""
"#,
    );
    let config = graph_config_with(
        dir.path(),
        &unique("sql-plan-ttl"),
        2,
        &dir.path().join("checkpoints"),
        &sections,
    );
    explain_with(
        &config,
        &[
            "Aggregate by (k): COUNT(*) AS n, SUM(v) AS s, state TTL 5000 ms",
            "Deduplicate by (k, v), state TTL 5000 ms",
            "TopN 2 by (k) order by (v DESC, seq), state TTL 5000 ms",
            "Normalize by (k), state TTL 5000 ms",
        ],
    );
    // Ten chunks of 9.2 s of event time, each key's events in one
    // partition (its Kafka key), in order.
    let chunks = 10;
    let chunk = |i: usize| -> Vec<(i32, String, Option<String>)> {
        events
            .iter()
            .filter(|e| ((e.3 - t0) / 9_200) as usize == i)
            .map(|e| ((e.1 % 2) as i32, e.1.to_string(), Some(line(e))))
            .collect()
    };
    let mut job = feed_with_kills_by(
        &Job {
            binary: weir(),
            config: &config,
            env: &[],
        },
        chunks,
        2,
        &mut rng,
        |i| {
            let records = chunk(i);
            weir_testkit::produce_records(&events_topic, &records);
            weir_testkit::produce_records(&table_topic, &records);
        },
    );
    let context = || format!("seed {seed}; log: {}", log_tail(&job.log_text()));
    // Each key's latest life replaces what its earlier one wrote.
    let latest_life = "QUALIFY row_number() OVER (PARTITION BY k ORDER BY life DESC) = 1";
    let oracle = [
        (
            "counts",
            format!(
                "SELECT k, count(*) AS n, sum(v) AS s FROM ttl_events GROUP BY k, life {latest_life}"
            ),
            true,
        ),
        (
            "firsts",
            "SELECT k, v FROM (SELECT DISTINCT k, v, life FROM ttl_events)".to_string(),
            false,
        ),
        (
            "top2",
            "SELECT k, rn, v, seq FROM (
               SELECT k, v, seq, life,
                      row_number() OVER (PARTITION BY k, life ORDER BY v DESC, seq) AS rn
               FROM ttl_events)
             WHERE rn <= 2
             QUALIFY row_number() OVER (PARTITION BY k, rn ORDER BY life DESC) = 1"
                .to_string(),
            true,
        ),
        (
            "latest_v",
            "SELECT k, v, seq FROM ttl_events QUALIFY row_number() OVER (PARTITION BY k ORDER BY seq DESC) = 1"
                .to_string(),
            true,
        ),
    ];
    for ((name, duckdb, updating), (_, topic)) in oracle.into_iter().zip(&sinks) {
        let q = Query {
            sink: name,
            weir: "",
            duckdb: duckdb.leak(),
            updating,
            compare: &[],
        };
        assert_matches_duckdb(&q, topic, dir.path(), Duration::from_secs(90), &context);
    }
    let addr = job.admin_addr(Duration::from_secs(30));
    let metrics = weir_testkit::http(&addr, "GET", "/metrics", None).1;
    let operators = [
        ("counts.aggregate", keys),
        ("firsts.distinct", keys * 11),
        ("top2.top-n", keys),
        ("source.latest.normalize", keys),
    ];
    for (uid, _) in &operators {
        let expired = weir_testkit::metric_sample(
            &metrics,
            &format!("weir_state_expired_total{{operator=\"{uid}\"}}"),
        );
        assert!(
            expired.is_some_and(|n| n > 0.0),
            "{uid}: expired keys are counted: {expired:?}; seed {seed}"
        );
    }
    job.stop(Duration::from_secs(30));
    for (uid, total) in operators {
        let held = state_scan(&config, uid).lines().count() as i64;
        eprintln!("{uid} holds {held} entries for {total} keys");
        // The last ~10 s of keys (the TTL, the watermark's 4 s, the
        // sweep), with the TTL's own entry beside each: a third at most.
        assert!(
            held > 0 && held < total / 3,
            "{uid} holds {held} entries for {total} keys"
        );
    }
}
