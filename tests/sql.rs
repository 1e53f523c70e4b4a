//! Jobs in SQL against the real broker, killed with SIGKILL while they
//! work, read back by an independent read_committed reader, and checked
//! against DuckDB running the same query as a batch over the same input
//! (`tests/sql/reference.py`): never against weir's own planner.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use weir_testkit::{create_topic, log_tail, read_topic, unique, Isolation, Rng};

#[path = "support/graph_jobs.rs"]
mod graph_jobs;
use graph_jobs::*;
#[path = "support/sql_kit.rs"]
mod sql_kit;
use sql_kit::*;
use weir_testkit::sql::*;

#[test]
fn nexmark_queries_in_sql_are_exact_under_sigkills_against_duckdb() {
    let seed = seed();
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().unwrap();
    let Bids { data, bids, flush } = nexmark_bids(dir.path(), seed, 2);

    let bid_topic = unique("sql-bid");
    let dlq = unique("sql-bid-dlq");
    create_topic(&bid_topic, 2);
    create_topic(&dlq, 1);
    let queries = queries();
    let mut sinks: Vec<(String, String)> = queries
        .iter()
        .map(|q| (q.sink.to_string(), unique(&format!("sql-{}", q.sink))))
        .collect();
    // CURRENT_WATERMARK depends on when watermarks arrive, so DuckDB has
    // no answer for it; its sink is checked against what must hold.
    let watermark_topic = unique("sql-current-watermark");
    sinks.push(("current_watermark".into(), watermark_topic.clone()));
    // q17's updating result once more, as a Debezium changelog: every
    // update-before and update-after, checked by applying them in order.
    let q17 = queries.iter().find(|q| q.sink == "q17").expect("q17");
    let changes_topic = unique("sql-q17-debezium");
    sinks.push(("q17_changes".into(), changes_topic.clone()));
    for (_, topic) in &sinks {
        create_topic(topic, 2);
    }
    let sql = job_sql(&queries)
        + "INSERT INTO current_watermark\n\
           SELECT auction, bidder, date_time, CURRENT_WATERMARK(date_time) AS wm FROM bid;\n"
        + &format!("INSERT INTO q17_changes\n{};\n", q17.weir);
    let sections = sql_sections(&bid_topic, &dlq, &sinks, &sql).replace(
        "[sinks.q17_changes]\n",
        "[sinks.q17_changes]\nchangelog = \"debezium\"\n",
    );
    let config = graph_config_with(
        dir.path(),
        &unique("sql-nexmark"),
        2,
        &dir.path().join("checkpoints"),
        &sections,
    );
    // Ten chunks; two bad records (not JSON, a field of the wrong type)
    // in the middle, which go to the dead-letter topic; the flush last.
    let mut chunks: Vec<Vec<String>> = bids
        .chunks(bids.len() / 10 + 1)
        .map(<[String]>::to_vec)
        .collect();
    chunks[4].push("{not json".to_string());
    chunks[4].push(
        r#"{"auction":"abc","bidder":1,"price":5,"date_time":"2026-11-30T10:00:10.000Z"}"#
            .to_string(),
    );
    chunks.push(flush.clone());
    let mut weir = feed_with_kills(
        &Job {
            binary: weir(),
            config: &config,
            env: &[],
        },
        (&bid_topic, 2),
        &chunks,
        5,
        &mut rng,
    );

    for (q, (_, topic)) in queries.iter().zip(&sinks) {
        assert_matches_duckdb(q, topic, &data, Duration::from_secs(90), &|| {
            format!("seed {seed}; log: {}", log_tail(&weir.log_text()))
        });
    }
    assert_current_watermark(&watermark_topic, &bids, &flush);
    let want = multiset(duckdb(&data, q17.duckdb).into_iter());
    let changes = read_topic(
        &changes_topic,
        Isolation::Committed,
        Duration::from_secs(60),
        Duration::from_secs(2),
        |r| final_debezium_rows(r).is_ok_and(|t| t == want),
    );
    let got = final_debezium_rows(&changes)
        .unwrap_or_else(|e| panic!("q17 as Debezium changes: {e}; seed {seed}"));
    assert_eq!(
        got, want,
        "q17 as Debezium changes against DuckDB; seed {seed}"
    );
    assert!(
        changes.len() > want.len(),
        "the changelog holds updates, not only the final rows"
    );
    let dead = read_topic(
        &dlq,
        Isolation::Committed,
        Duration::from_secs(30),
        Duration::from_secs(1),
        |r| r.len() >= 2,
    );
    assert_eq!(
        dead.len(),
        2,
        "the two bad records, once each, in the dead-letter topic"
    );
    let log = weir.log_text();
    weir.stop(Duration::from_secs(30));
    assert!(
        log.matches("job running").count() >= 6,
        "the job was restarted after each kill"
    );
}

/// Every bid once, each with the watermark its operator had seen: NULL
/// before the first, else earlier than the bid's own time (the input is
/// at most 3 s out of order and the watermark trails by 4 s, so no bid is
/// late), and set for a good share of the rows.
fn assert_current_watermark(topic: &str, bids: &[String], flush: &[String]) {
    // Canonical RFC 3339 text: fixed width, so it orders as time does.
    let time = |v: &serde_json::Value| {
        canon_timestamp(v.as_str().unwrap_or_default())
            .unwrap_or_else(|| panic!("not a timestamp: {v}"))
    };
    let identity = |v: &serde_json::Value| {
        (
            v["auction"].to_string(),
            v["bidder"].to_string(),
            time(&v["date_time"]),
        )
    };
    let mut want: Vec<_> = bids
        .iter()
        .chain(flush)
        .map(|b| identity(&serde_json::from_str(b).unwrap()))
        .collect();
    want.sort();
    let rows: Vec<serde_json::Value> = read_topic(
        topic,
        Isolation::Committed,
        Duration::from_secs(90),
        Duration::from_secs(2),
        |r| r.len() >= want.len(),
    )
    .iter()
    .map(|r| serde_json::from_str(r.value.as_deref().unwrap()).unwrap())
    .collect();
    let mut got: Vec<_> = rows.iter().map(identity).collect();
    got.sort();
    assert_eq!(got, want, "every bid once in CURRENT_WATERMARK's sink");
    let mut set = 0;
    for row in &rows {
        if row["wm"].is_null() {
            continue;
        }
        set += 1;
        let (wm, at) = (time(&row["wm"]), time(&row["date_time"]));
        assert!(
            wm < at,
            "CURRENT_WATERMARK {wm} is not before the bid's own time {at}: {row}"
        );
    }
    // Each start of the job reads until its first watermark with none
    // (NULL), and the kills make six starts: half the rows or so can be
    // NULL (one run had 2,758 set of 5,523). A tenth set shows that the
    // watermark reaches the expression.
    assert!(
        set * 10 > rows.len(),
        "CURRENT_WATERMARK was set for only {set} of {} rows",
        rows.len()
    );
}

/// Where `needle` first occurs in `text`: 1-based line and column.
fn line_column(text: &str, needle: &str) -> (usize, usize) {
    let at = text
        .find(needle)
        .unwrap_or_else(|| panic!("{needle:?} is in the query"));
    let before = &text[..at];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
    (line, column)
}

#[test]
fn validate_names_each_broken_query_at_its_line_and_column() {
    // (the query after `INSERT INTO out`, the text the error points at, what it says)
    let cases: &[(&str, &str, &str)] = &[
        ("SELECT auction, bidr FROM bid", "bidr", "unknown column \"bidr\"; did you mean \"bidder\"?"),
        ("SELECT auction FROM bids", "bids", "unknown table \"bids\""),
        ("SELECT auction FROM bid\nWHERE price > 'abc'", "price > 'abc'", "cannot compare BIGINT with VARCHAR"),
        ("SELECT auction, COUNT(*) AS n, bidder\nFROM bid GROUP BY auction", "bidder\n", "neither grouped nor aggregated"),
        ("SELECT auction FROM bid\nWHERE SUM(price) > 3", "SUM(price)", "aggregate functions belong in a SELECT with GROUP BY"),
        ("SELECT FOO(price) AS f FROM bid", "FOO(price)", "unknown function FOO"),
        ("SELECT MOD(price) AS m FROM bid", "MOD(price)", "MOD takes 2 arguments, not 1"),
        ("SELECT channel + 1 AS c FROM bid", "channel + 1", "no arithmetic + between VARCHAR and BIGINT"),
        ("SELEC auction FROM bid", "SELEC", "syntax error"),
        (
            "SELECT auction, window_start, window_end, COUNT(*) AS n\nFROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(price), INTERVAL '10' SECOND))\nGROUP BY auction, window_start, window_end",
            "DESCRIPTOR(price)",
            "windows are over the table's event time, \"date_time\"",
        ),
        ("SELECT a.auction FROM bid a\nJOIN bid b ON a.price > b.price", "bid b", "a join needs an equality of the two sides' columns"),
        ("SELECT b.price FROM bid a\nJOIN bid b ON a.auction = b.channel", "a.auction", "have different types"),
        (
            "SELECT a.auction FROM bid a\nJOIN bid AS b FOR SYSTEM_TIME AS OF a.date_time ON a.auction = b.auction",
            "FOR SYSTEM_TIME",
            "is not on the table of a join",
        ),
        (
            "SELECT a.auction FROM bid a\nJOIN bid FOR SYSTEM_TIME AS OF a.date_time AS b ON a.auction = b.auction",
            "bid FOR SYSTEM_TIME",
            "FOR SYSTEM_TIME AS OF reads the versions of a table: a source with primary_key",
        ),
        ("SELECT a.auction FROM bid a\nJOIN bid b ON a.auction = b.auction AND date_time > 0", "date_time >", "qualify it"),
        (
            "SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price) AS rn FROM bid)\nWHERE price > 3",
            "ROW_NUMBER()",
            "filter it in the outer query with WHERE rn <= N",
        ),
        ("SELECT auction FROM bid\nORDER BY bidder", "bidder", "ORDER BY on a stream is not supported"),
        ("SELECT NOW() AS t FROM bid", "NOW()", "not deterministic"),
        ("SELECT CASE WHEN price > 1 THEN 'a' ELSE 2 END AS c FROM bid", "2 END", "different types"),
        ("SELECT REGEXP_EXTRACT(url, '(', 1) AS r FROM bid", "REGEXP_EXTRACT(url, '(', 1)", "bad regular expression"),
        ("SELECT CAST(price AS MONEY) AS p FROM bid", "price AS MONEY", "unknown type MONEY"),
        ("SELECT DISTINCT ON (auction) auction FROM bid", "SELECT DISTINCT ON", "SELECT DISTINCT ON is not Flink SQL"),
        // LEAD is kept current (tests/sql_plan.rs); its RANGE reaches
        // back over a TIMESTAMP.
        (
            "SELECT LEAD(price) OVER (PARTITION BY auction ORDER BY price\n RANGE BETWEEN INTERVAL '1' SECOND PRECEDING AND CURRENT ROW) AS n FROM bid",
            "price\n RANGE",
            "a RANGE frame reaches back over its ORDER BY column: a TIMESTAMP, ascending",
        ),
        (
            "SELECT auction,\n (SELECT price FROM bid b2 WHERE b2.auction = bid.auction) AS p FROM bid",
            "SELECT price FROM bid b2",
            "a scalar subquery selects one aggregate call",
        ),
        (
            "SELECT auction, COUNT(*) AS n,\n (SELECT MAX(price) FROM bid b2 WHERE b2.auction = bid.auction) AS m\nFROM bid GROUP BY auction",
            "SELECT MAX(price) FROM bid b2",
            "a scalar subquery in a SELECT with GROUP BY, DISTINCT or OVER is not supported",
        ),
        (
            "SELECT auction, COUNT(*) OVER (PARTITION BY auction) AS c\nFROM (SELECT auction, COUNT(*) AS n FROM bid GROUP BY auction)",
            "COUNT(*) OVER",
            "OVER needs ORDER BY: the order of the rows in each partition",
        ),
        ("SELECT SUM(price) OVER (PARTITION BY auction ORDER BY price) AS s FROM bid", "price) AS s", "OVER orders by the table's event-time column"),
        (
            "SELECT DISTINCT auction, COUNT(*) AS n FROM bid GROUP BY auction",
            "SELECT DISTINCT auction",
            "SELECT DISTINCT with GROUP BY or aggregates is not supported",
        ),
    ];
    let dir = tempfile::tempdir().unwrap();
    for (query, offending, message) in cases {
        let sql = format!("INSERT INTO out\n{query}");
        let sinks = [("out".to_string(), "out-topic".to_string())];
        let config = graph_config_with(
            dir.path(),
            "sql-validate",
            1,
            &dir.path().join("c"),
            &sql_sections("bid", "dlq", &sinks, &sql),
        );
        let out = weir_on("validate", &config);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(2),
            "validate refuses {query:?}: {stderr}"
        );
        let (line, column) = line_column(&sql, offending);
        let want = format!("pipeline.sql:{line}:{column}: ");
        let located = stderr.lines().find(|l| l.starts_with(&want));
        assert!(
            located.is_some_and(|l| l.contains(message)),
            "{query:?}: expected `{want}...{message}`, got:\n{stderr}"
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

#[test]
fn word_count_in_sql_gives_what_the_built_in_word_count_gives() {
    let dir = tempfile::tempdir().unwrap();
    let (input, builtin_out, sql_out) = (
        unique("sql-wc-in"),
        unique("sql-wc-builtin"),
        unique("sql-wc-sql"),
    );
    create_topic(&input, 2);
    create_topic(&builtin_out, 2);
    create_topic(&sql_out, 2);
    // Words in mixed case between spaces, tabs and ideographic spaces.
    let (lines, expected) = weir_testkit::word_lines(11, 3000, 8, 500);
    weir_testkit::produce(&input, 2, &lines);

    let mut builtin =
        weir_testkit::JobSpec::word_count(&dir.path().join("builtin"), &input, &builtin_out);
    builtin.delivery = "exactly-once".into();
    let builtin_config = builtin.write();
    // In TOML's basic strings a backslash is escaped: the SQL reads '\s+'.
    let sql = r"INSERT INTO counts
SELECT word, COUNT(*) AS count
FROM lines CROSS JOIN UNNEST(SPLIT(LOWER(REGEXP_REPLACE(line, '\\s+', ' ')), ' ')) AS t(word)
WHERE word <> ''
GROUP BY word";
    let sections = format!(
        "\n[sources.lines]\ntopics = [\"{input}\"]\nformat = \"text\"\n\n[sinks.counts]\ntopic = \"{sql_out}\"\ndelivery = \"exactly-once\"\n\n[pipeline]\nsql = \"\"\"\n{sql}\n\"\"\"\n"
    );
    let sql_dir = dir.path().join("sql");
    let sql_config = graph_config_with(
        &sql_dir,
        &unique("sql-wc"),
        2,
        &sql_dir.join("checkpoints"),
        &sections,
    );

    let mut a = weir_testkit::WeirProcess::start(&weir(), &builtin_config, &[]);
    let mut b = weir_testkit::WeirProcess::start(&weir(), &sql_config, &[]);
    let words: usize = lines.iter().map(|l| l.split_whitespace().count()).sum();
    let builtin_records = read_topic(
        &builtin_out,
        Isolation::Committed,
        Duration::from_secs(90),
        Duration::from_secs(2),
        |r| r.len() >= words,
    );
    let want = weir_testkit::last_counts(&builtin_records);
    let sql_records = read_topic(
        &sql_out,
        Isolation::Committed,
        Duration::from_secs(90),
        Duration::from_secs(2),
        |r| {
            let got: BTreeMap<String, u64> = table(r)
                .into_values()
                .flatten()
                .map(|v| {
                    (
                        v["word"].as_str().unwrap_or("").to_string(),
                        v["count"].as_u64().unwrap_or(0),
                    )
                })
                .collect();
            got.len() == want.len() && got.iter().all(|(w, c)| want.get(w) == Some(c))
        },
    );
    let (log_a, log_b) = (a.log_text(), b.log_text());
    a.stop(Duration::from_secs(30));
    b.stop(Duration::from_secs(30));
    assert_eq!(
        builtin_records.len(),
        words,
        "the built-in word count wrote a count per word; log: {}",
        log_tail(&log_a)
    );
    let got: BTreeMap<String, u64> = table(&sql_records)
        .into_values()
        .flatten()
        .map(|v| {
            (
                v["word"].as_str().expect("word").to_string(),
                v["count"].as_u64().expect("count"),
            )
        })
        .collect();
    let want: BTreeMap<String, u64> = want.into_iter().collect();
    assert!(want.len() > 100, "the input has many words");
    // The built-in pipeline is SQL too (its own, over its own decoder):
    // both are held to the counts of the input as generated.
    let expected: BTreeMap<String, u64> = expected.into_iter().collect();
    assert_eq!(
        want, expected,
        "the built-in word count against the input's counts"
    );
    assert_eq!(
        got,
        want,
        "word count in SQL against the built-in; log: {}",
        log_tail(&log_b)
    );
}

#[test]
fn a_sql_aggregate_is_listed_by_the_console_and_its_state_read_live_and_offline() {
    let seed = seed();
    let dir = tempfile::tempdir().unwrap();
    let Bids { data, bids, .. } = nexmark_bids(dir.path(), seed, 2);
    let (bid_topic, out) = (unique("sql-state-bid"), unique("sql-state-out"));
    create_topic(&bid_topic, 2);
    create_topic(&out, 2);
    let sql = "INSERT INTO per_auction\nSELECT auction, COUNT(*) AS bids, SUM(price) AS volume\nFROM bid GROUP BY auction";
    let sinks = [("per_auction".to_string(), out.clone())];
    let config = graph_config_with(
        dir.path(),
        &unique("sql-state"),
        2,
        &dir.path().join("checkpoints"),
        &sql_sections(&bid_topic, &unique("sql-state-dlq"), &sinks, sql),
    );
    let mut job = weir_testkit::WeirProcess::start(&weir(), &config, &[]);
    weir_testkit::produce(&bid_topic, 2, &bids);
    let query = Query {
        sink: "per_auction",
        weir: "",
        duckdb: "SELECT auction, count(*) AS bids, sum(price) AS volume FROM bid
                 WHERE date_time < TIMESTAMP '2030-01-01' GROUP BY auction",
        updating: true,
        compare: &[],
    };
    assert_matches_duckdb(&query, &out, &data, Duration::from_secs(90), &|| {
        format!("seed {seed}; log: {}", log_tail(&job.log_text()))
    });
    let want: BTreeMap<i64, (i64, i64)> = duckdb(&data, query.duckdb)
        .iter()
        .map(|r| {
            let n = |c: &str| {
                r[c].as_i64()
                    .or_else(|| r[c].as_str().and_then(|s| s.parse().ok()))
                    .unwrap()
            };
            (n("auction"), (n("bids"), n("volume")))
        })
        .collect();

    // The console lists the SQL job's operators.
    let addr = job.admin_addr(Duration::from_secs(10));
    let (status, body) = weir_testkit::http(&addr, "GET", "/api/overview", None);
    assert_eq!(status, 200, "{body}");
    let overview: serde_json::Value = serde_json::from_str(&body).unwrap();
    let uids: Vec<&str> = overview["job"]["operators"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["uid"].as_str().unwrap())
        .collect();
    for uid in ["source.bid", "per_auction.aggregate", "per_auction.sink"] {
        assert!(uids.contains(&uid), "{uid} in {uids:?}");
    }
    // Live: the aggregate's results by the names the SELECT gives them.
    for (auction, (bids, volume)) in want.iter().take(5) {
        let (status, body) = weir_testkit::http(
            &addr,
            "GET",
            &format!("/state/per_auction.aggregate/{auction}"),
            None,
        );
        assert_eq!(status, 200, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            v["value"],
            serde_json::json!({"bids": bids, "volume": volume}),
            "{body}"
        );
    }
    job.stop(Duration::from_secs(30));
    // Offline, from the last checkpoint (a clean stop takes one).
    let scan = state_scan(&config, "per_auction.aggregate");
    let scanned: BTreeMap<i64, i64> = scan
        .lines()
        .map(|l| {
            let e: serde_json::Value = serde_json::from_str(l).expect("a JSON line per entry");
            (
                e["key"][0].as_i64().expect("the auction"),
                e["value"]["rows"].as_i64().expect("rows counted"),
            )
        })
        .collect();
    let want_rows: BTreeMap<i64, i64> = want.iter().map(|(a, (b, _))| (*a, *b)).collect();
    assert_eq!(
        scanned, want_rows,
        "every auction's rows, as the checkpoint holds them"
    );
}

#[test]
fn explain_shows_operators_keys_state_and_what_each_sink_receives() {
    let dir = tempfile::tempdir().unwrap();
    let sql = "INSERT INTO per_auction SELECT auction, COUNT(*) AS bids FROM bid GROUP BY auction;
INSERT INTO windows SELECT auction, window_start, window_end, COUNT(*) AS bids
FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '10' SECOND))
GROUP BY auction, window_start, window_end";
    let sinks = [
        ("per_auction".to_string(), "t1".to_string()),
        ("windows".to_string(), "t2".to_string()),
    ];
    let config = graph_config_with(
        dir.path(),
        "sql-explain",
        2,
        &dir.path().join("c"),
        &sql_sections("bid", "dlq", &sinks, sql),
    );
    let out = weir_on("explain", &config);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for want in [
        "per_auction.aggregate (aggregate/count) <- source.bid[0] hash(auction)",
        "windows.window-aggregate (window-aggregate) <- source.bid[0] hash(auction)",
        "per_auction.aggregate: updating, upsert by (auction) (insert, update-before, update-after, delete); state: acc (value, accumulators)",
        "windows.window-aggregate: append-only; state: windows (map, accumulators)",
        "per_auction -> topic \"t1\": upsert by (auction)",
        "windows -> topic \"t2\": append-only",
    ] {
        assert!(text.contains(want), "{want:?} in:\n{text}");
    }
}

/// `weir <command> --config <config>`, run to its end.
fn weir_on(command: &str, config: &std::path::Path) -> std::process::Output {
    Command::new(weir())
        .args([command, "--config"])
        .arg(config)
        .output()
        .unwrap()
}

/// `weir validate` (exit code, stderr) and `weir explain` (stdout) of a
/// job over the bid source with sinks `out` and `out2`.
fn plan_of(sql: &str, pipeline_extra: &str) -> (Option<i32>, String, String) {
    plan_with(sql, pipeline_extra, &[])
}

/// [`plan_of`] with more settings on sinks (name, TOML lines).
fn plan_with(
    sql: &str,
    pipeline_extra: &str,
    sink_settings: &[(&str, &str)],
) -> (Option<i32>, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let sinks = [
        ("out".to_string(), "t1".to_string()),
        ("out2".to_string(), "t2".to_string()),
    ];
    let mut sections = sql_sections("bid", "dlq", &sinks, sql);
    for (sink, lines) in sink_settings {
        sections = sections.replace(
            &format!("[sinks.{sink}]\n"),
            &format!("[sinks.{sink}]\n{lines}\n"),
        );
    }
    sections.push_str(pipeline_extra);
    let config = graph_config_with(dir.path(), "sql-modes", 2, &dir.path().join("c"), &sections);
    let v = weir_on("validate", &config);
    let e = weir_on("explain", &config);
    (
        v.status.code(),
        String::from_utf8_lossy(&v.stderr).into_owned(),
        String::from_utf8_lossy(&e.stdout).into_owned(),
    )
}

#[test]
fn unnest_carries_only_the_columns_the_select_reads() {
    // The url is split, and only the parts and the auction go on: the
    // url, the price and the rest are not copied into every part's row.
    let some = "INSERT INTO out SELECT auction, part, COUNT(*) AS n
FROM bid CROSS JOIN UNNEST(SPLIT(url, '/')) AS t(part)
WHERE CHAR_LENGTH(part) > 0
GROUP BY auction, part;
INSERT INTO out2 SELECT * FROM bid CROSS JOIN UNNEST(SPLIT(url, '/')) AS t(part)";
    let (code, err, plan) = plan_of(some, "");
    assert_eq!(code, Some(0), "{err}");
    let unnest = |uid: &str| {
        plan.lines()
            .find(|l| l.trim_start().starts_with(&format!("{uid} (flat-map)")))
            .unwrap_or_else(|| panic!("{uid} in:\n{plan}"))
            .split_once(": ")
            .map(|(_, schema)| schema.to_string())
            .unwrap()
    };
    assert_eq!(unnest("out.unnest"), "auction BIGINT, part VARCHAR");
    // `SELECT *` reads every column.
    assert!(
        unnest("out2.unnest").starts_with(
            "auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR"
        ),
        "{plan}"
    );
    // A TOML word count is this SQL over its own table: its line is not
    // carried past the split, and its nodes keep the uids its checkpoints
    // name.
    let dir = tempfile::tempdir().unwrap();
    let config = weir_testkit::JobSpec::word_count(dir.path(), "in", "out").write();
    let e = weir_on("explain", &config);
    let text = String::from_utf8_lossy(&e.stdout);
    assert!(e.status.success(), "{text}");
    for want in [
        "split-words (flat-map) <- kafka-source[0] forward: key VARCHAR\n",
        "word-count (pipeline:word-count) <- split-words[0] hash(key): key VARCHAR, count BIGINT\n",
        "sink (kafka-sink) <- word-count[0] forward",
        "FROM lines CROSS JOIN UNNEST(WORDS(LOWER(line))) AS t(key)",
    ] {
        assert!(text.contains(want), "{want:?} in:\n{text}");
    }
}

#[test]
fn the_planner_gives_each_result_the_mode_its_rows_need_and_refuses_what_it_cannot_keep_exact() {
    // Allowed lateness: a late record updates a fired window, so the
    // result is updating, upserted by its keys and window.
    let windowed = "INSERT INTO out SELECT auction, window_start, window_end, COUNT(*) AS n
FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '10' SECOND))
GROUP BY auction, window_start, window_end;
INSERT INTO out2 SELECT auction FROM bid GROUP BY auction";
    let (code, err, plan) = plan_of(windowed, "allowed_lateness = \"5s\"\n");
    assert_eq!(code, Some(0), "{err}");
    assert!(
        plan.contains("out -> topic \"t1\": upsert by (auction, window_start, window_end)"),
        "{plan}"
    );
    // A GROUP BY without aggregates is a distinct: each key once, append-only.
    assert!(plan.contains("out2.distinct (deduplicate)"), "{plan}");
    assert!(plan.contains("out2 -> topic \"t2\": append-only"), "{plan}");
    let (code, err, plan) = plan_of(windowed, "");
    assert_eq!(code, Some(0), "{err}");
    assert!(plan.contains("out -> topic \"t1\": append-only"), "{plan}");
    // A top-N per window ranks a window's rows once, when it closes: over
    // windows that late records update, refused where ROW_NUMBER is.
    let ranked = "INSERT INTO out SELECT * FROM (SELECT *,
  ROW_NUMBER() OVER (PARTITION BY window_start, window_end ORDER BY n DESC) AS rn
FROM (SELECT auction, window_start, window_end, COUNT(*) AS n
  FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '10' SECOND))
  GROUP BY auction, window_start, window_end)) WHERE rn <= 3;
INSERT INTO out2 SELECT auction FROM bid";
    let (code, err, _) = plan_of(ranked, "allowed_lateness = \"5s\"\n");
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("pipeline.sql:2:3: ROW_NUMBER per window over an updating result"),
        "{err}"
    );
    // MIN/MAX over an updating result keep every value with its count,
    // so that a retracted extreme leaves the next one (their exactness:
    // tests/sql_plan.rs); over an append-only one, the extreme alone.
    let over_updates =
        "CREATE VIEW per_auction AS SELECT auction, COUNT(*) AS n FROM bid GROUP BY auction;
INSERT INTO out SELECT n, MAX(auction) AS top FROM per_auction GROUP BY n;
INSERT INTO out2 SELECT auction, MAX(price) AS top FROM bid GROUP BY auction";
    let (code, err, plan) = plan_of(over_updates, "");
    assert_eq!(code, Some(0), "{err}");
    assert!(
        plan.contains("Aggregate by (n): MAX(auction) AS top, every value kept [upsert by (n)] (out.aggregate)"),
        "{plan}"
    );
    assert!(
        plan.contains(
            "Aggregate by (auction): MAX(price) AS top [upsert by (auction)] (out2.aggregate)"
        ),
        "{plan}"
    );
    // An aggregate of the whole stream has no key to upsert by.
    let (code, err, _) = plan_of(
        "INSERT INTO out SELECT COUNT(*) AS n FROM bid;\nINSERT INTO out2 SELECT auction FROM bid",
        "",
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("without GROUP BY is an updating result with no key"),
        "{err}"
    );
}

#[test]
fn each_sink_writes_the_changelog_it_is_set_to_and_refuses_one_it_cannot() {
    const DEBEZIUM: &str = "changelog = \"debezium\"";
    let sql = "INSERT INTO out SELECT auction, COUNT(*) AS n FROM bid GROUP BY auction;
INSERT INTO out2 SELECT auction, price FROM bid";
    // Unset: an updating result upserts, an append-only one appends.
    let (code, err, plan) = plan_with(sql, "", &[]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        plan.contains("out -> topic \"t1\": upsert by (auction)"),
        "{plan}"
    );
    assert!(plan.contains("out2 -> topic \"t2\": append-only"), "{plan}");
    // Debezium takes either.
    let (code, err, plan) = plan_with(sql, "", &[("out", DEBEZIUM), ("out2", DEBEZIUM)]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        plan.contains("out -> topic \"t1\": debezium: every change as {\"before\", \"after\", \"op\"}, Kafka key (auction)"),
        "{plan}"
    );
    assert!(plan.contains("out2 -> topic \"t2\": debezium"), "{plan}");
    // An updating result into an append-only sink: refused, naming the
    // sink and the operator whose results update.
    let (code, err, _) = plan_with(sql, "", &[("out", "changelog = \"append\"")]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(
            "pipeline.sql:1:17: sink \"out\" is append-only (sinks.out.changelog = \"append\"), \
             but operator \"out.aggregate\" produces updates"
        ),
        "{err}"
    );
    // An upsert of rows that have no key: refused, saying what to set.
    let (code, err, _) = plan_with(sql, "", &[("out2", "changelog = \"upsert\"")]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("set sinks.out2.key to the columns whose latest row it keeps"),
        "{err}"
    );
    // With the key set, it keeps the latest row per key.
    let (code, err, plan) = plan_with(
        sql,
        "",
        &[("out2", "changelog = \"upsert\"\nkey = [\"auction\"]")],
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(
        plan.contains("out2 -> topic \"t2\": upsert by (auction): a row replaces its key's row"),
        "{plan}"
    );
    // A join's updates (an outer join takes back a padded row when its
    // first match comes): refused by an append-only sink, naming the join;
    // an upsert sink needs a key the result has not; Debezium writes them.
    let join = "INSERT INTO out SELECT a.auction, b.bidder FROM bid a LEFT JOIN bid b \
                ON a.auction = b.auction AND a.bidder <> b.bidder;
INSERT INTO out2 SELECT auction, price FROM bid";
    let (code, err, _) = plan_with(join, "", &[("out", "changelog = \"append\"")]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("sink \"out\" is append-only (sinks.out.changelog = \"append\"), but operator \"out.join\" produces updates"),
        "{err}"
    );
    let (code, err, _) = plan_with(join, "", &[]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("(from operator \"out.join\") with no key that names its rows")
            && err.contains("sinks.out.changelog = \"debezium\""),
        "{err}"
    );
    let (code, err, plan) = plan_with(join, "", &[("out", DEBEZIUM)]);
    assert_eq!(code, Some(0), "{err}");
    assert!(plan.contains("out.join (join/left-outer)"), "{plan}");
    assert!(
        plan.contains("out.join: updating, retracting (insert, delete): no key names its rows"),
        "{plan}"
    );
    // Not a mode.
    let (code, err, _) = plan_with(sql, "", &[("out", "changelog = \"retract\"")]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("retract"), "{err}");
}

/// A table read from an upsert topic (`primary_key`): each record replaces
/// its key's row, a tombstone deletes it. An aggregate over the table takes
/// back a replaced row before it adds the new one, under SIGKILLs; the
/// final tables are DuckDB's over the last change of each key.
#[test]
fn a_table_from_an_upsert_topic_feeds_aggregates_that_take_back_replaced_rows() {
    let seed = seed();
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().unwrap();
    let topic = unique("sql-accounts");
    let dlq = unique("sql-accounts-dlq");
    create_topic(&topic, 2);
    create_topic(&dlq, 1);
    let sinks = [
        ("by_state".to_string(), unique("sql-by-state")),
        ("current".to_string(), unique("sql-current")),
        (
            "by_state_changes".to_string(),
            unique("sql-by-state-changes"),
        ),
    ];
    for (_, t) in &sinks {
        create_topic(t, 2);
    }
    // 4,000 changes of 150 accounts, one in seven a tombstone (some of a
    // key that has no row). Even ids are keyed by a JSON object, odd ones
    // by the bare number; a key's changes go to one partition, in order.
    let states = ["OR", "CA", "WA", "ID", "NV", "AZ"];
    let mut changes: Vec<(i32, String, Option<String>)> = Vec::new();
    let mut reference = String::new();
    for seq in 0..4000u64 {
        let id = rng.below(150);
        let key = if id.is_multiple_of(2) {
            format!("{{\"id\":{id}}}")
        } else {
            id.to_string()
        };
        let deleted = rng.below(7) == 0;
        let (value, line) = if deleted {
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
    // A row without its key: a bad record, to the dead-letter topic.
    changes.insert(
        2000,
        (0, "7".into(), Some(r#"{"state":"OR","balance":1}"#.into())),
    );
    let sql = "INSERT INTO by_state
  SELECT state, COUNT(*) AS accounts, SUM(balance) AS total FROM accounts GROUP BY state;
INSERT INTO current SELECT id, state, balance FROM accounts;
INSERT INTO by_state_changes
  SELECT state, COUNT(*) AS accounts, SUM(balance) AS total FROM accounts GROUP BY state;";
    let mut sections = format!(
        r#"
[sources.accounts]
topics = ["{topic}"]
format = "json"
schema = "id BIGINT, state VARCHAR, balance BIGINT"
primary_key = ["id"]
on_bad_record = "dead-letter"
dead_letter_topic = "{dlq}"
"#
    );
    for (name, t) in &sinks {
        sections.push_str(&format!(
            "\n[sinks.{name}]\ntopic = \"{t}\"\ndelivery = \"exactly-once\"\n"
        ));
    }
    sections = sections.replace(
        "[sinks.by_state_changes]\n",
        "[sinks.by_state_changes]\nchangelog = \"debezium\"\n",
    );
    sections.push_str(&format!("\n[pipeline]\nsql = \"\"\"\n{sql}\n\"\"\"\n"));
    let config = graph_config_with(
        dir.path(),
        &unique("sql-table"),
        2,
        &dir.path().join("checkpoints"),
        &sections,
    );
    let explain = weir_on("explain", &config);
    let plan = String::from_utf8_lossy(&explain.stdout);
    assert!(
        plan.contains(
            "source.accounts.normalize (changelog-normalize) <- source.accounts[0] hash(id)"
        ),
        "{plan}"
    );
    let chunks: Vec<&[(i32, String, Option<String>)]> = changes.chunks(400).collect();
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
                  QUALIFY row_number() OVER (PARTITION BY id ORDER BY seq DESC) = 1)";
    let context = || format!("seed {seed}; log: {}", log_tail(&weir.log_text()));
    for (q, topic) in [
        (
            Query {
                sink: "by_state",
                weir: "",
                duckdb: format!(
                    "{last} SELECT state, count(*) AS accounts, sum(balance) AS total
                     FROM last WHERE NOT deleted GROUP BY state"
                )
                .leak(),
                updating: true,
                compare: &[],
            },
            &sinks[0].1,
        ),
        (
            Query {
                sink: "current",
                weir: "",
                duckdb: format!("{last} SELECT id, state, balance FROM last WHERE NOT deleted")
                    .leak(),
                updating: true,
                compare: &[],
            },
            &sinks[1].1,
        ),
    ] {
        assert_matches_duckdb(&q, topic, dir.path(), Duration::from_secs(90), &context);
    }
    let want = multiset(
        duckdb(
            dir.path(),
            &format!(
                "{last} SELECT state, count(*) AS accounts, sum(balance) AS total
                 FROM last WHERE NOT deleted GROUP BY state"
            ),
        )
        .into_iter(),
    );
    let changes = read_topic(
        &sinks[2].1,
        Isolation::Committed,
        Duration::from_secs(60),
        Duration::from_secs(2),
        |r| final_debezium_rows(r).is_ok_and(|t| t == want),
    );
    let got = final_debezium_rows(&changes)
        .unwrap_or_else(|e| panic!("by_state as Debezium changes: {e}; {}", context()));
    assert_eq!(got, want, "by_state as Debezium changes; {}", context());
    let dead = read_topic(
        &dlq,
        Isolation::Committed,
        Duration::from_secs(30),
        Duration::from_secs(1),
        |r| !r.is_empty(),
    );
    assert_eq!(dead.len(), 1, "the row without its key, once");
    let log = weir.log_text();
    weir.stop(Duration::from_secs(30));
    assert!(
        log.matches("job running").count() >= 6,
        "the job was restarted after each kill"
    );
}

/// Nexmark's joins and top-N queries (q3, q4, q5, q7, q8, q9, q18, q19,
/// q20, q23) as one job over three topics with parallelism 2, SIGKILLed
/// five times while it works, each checked against DuckDB over the same
/// events: the regular joins (one feeding two aggregates that take back
/// updates), the interval joins (q4, q7, q9) whose state the watermark
/// frees, the window joins (q5, q8), the three-way join (q23), and top-N
/// by ROW_NUMBER (q9 and q18 keep one row per key, q19 ten, one top-N
/// per window and one over all bids).
#[test]
fn nexmark_joins_and_top_n_in_sql_are_exact_under_sigkills_against_duckdb() {
    let seed = seed();
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().unwrap();
    let input = nexmark_streams(dir.path(), seed, 6000, 2);
    let topics: BTreeMap<&str, String> = ["person", "auction", "bid"]
        .into_iter()
        .map(|t| (t, unique(&format!("sqlj-{t}"))))
        .collect();
    for t in topics.values() {
        create_topic(t, 2);
    }
    let queries = weir_testkit::nexmark::join_queries();
    let sinks: Vec<(String, String)> = queries
        .iter()
        .map(|q| (q.sink.to_string(), unique(&format!("sqlj-{}", q.sink))))
        .collect();
    for (_, topic) in &sinks {
        create_topic(topic, 2);
    }
    let sql = inserts(&queries);
    let config = graph_config_with(
        dir.path(),
        &unique("sql-joins"),
        2,
        &dir.path().join("checkpoints"),
        &nexmark_sections(&topics, &sinks, "", &sql),
    );
    let explain = weir_on("explain", &config);
    let plan = String::from_utf8_lossy(&explain.stdout).to_string();
    assert!(
        explain.status.success(),
        "explain: {}",
        String::from_utf8_lossy(&explain.stderr)
    );
    // q4's and q7's BETWEENs bound both sides; q5's and q8's equal windows
    // too: their state goes with the watermark.
    for q in ["q4", "q5", "q7", "q8", "q9"] {
        assert!(
            plan.contains(&format!("{q}.join (interval-join/inner)")),
            "{q} plans as an interval join:\n{plan}"
        );
    }
    for q in ["q3", "q20", "q23"] {
        assert!(
            plan.contains(&format!("{q}.join (join/inner)")),
            "{q} plans as a regular join:\n{plan}"
        );
    }
    let chunks = 10;
    for q in ["q9", "q18", "q19", "global_top5"] {
        assert!(
            plan.contains(&format!("{q}.top-n (top-n)")),
            "{q} plans as a top-N:\n{plan}"
        );
    }
    assert!(
        plan.contains("window_top3.top-n (window-top-n)"),
        "a top-N per window emits when the window closes:\n{plan}"
    );
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
    for (q, (_, topic)) in queries.iter().zip(&sinks) {
        assert_matches_duckdb(q, topic, &input.data, Duration::from_secs(120), &|| {
            format!("seed {seed}; log: {}", log_tail(&weir.log_text()))
        });
    }
    let log = weir.log_text();
    weir.stop(Duration::from_secs(30));
    assert!(
        log.matches("job running").count() >= 6,
        "the job was restarted after each kill"
    );
}

/// A table that changes while the stream flows, joined two ways in one
/// job under five SIGKILLs: Nexmark q13 joins each bid with the version of
/// `side_input` valid at the bid's event time (a temporal join), checked
/// against DuckDB's ASOF join; a regular join of the same bids with the
/// same table takes back every joined row whose version is replaced and
/// joins the new one, so its Debezium changelog, applied change by change,
/// ends at the join with each key's last version.
#[test]
fn a_table_changing_while_bids_flow_joins_by_version_in_time_and_retracts_in_a_regular_join() {
    use weir_testkit::nexmark::{flush_side_input, q13, side_input_rows};
    let seed = seed();
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().unwrap();
    let Bids { data, bids, flush } = nexmark_bids(dir.path(), seed, 2);
    let versions = side_input_rows(seed);
    let mut side_file = versions.clone();
    side_file.push(flush_side_input());
    std::fs::write(data.join("side_input.jsonl"), side_file.join("\n") + "\n").unwrap();

    let (bid_topic, side_topic, dlq) =
        (unique("sqlt-bid"), unique("sqlt-side"), unique("sqlt-dlq"));
    create_topic(&bid_topic, 2);
    weir_testkit::create_compacted_topic(&side_topic, 2);
    create_topic(&dlq, 1);
    let sinks = vec![
        ("q13".to_string(), unique("sqlt-q13")),
        ("regular".to_string(), unique("sqlt-regular")),
    ];
    for (_, t) in &sinks {
        create_topic(t, 2);
    }
    let q13 = q13();
    let sql = format!(
        "INSERT INTO q13\n{};\n\
         INSERT INTO regular\n\
         SELECT B.auction, B.bidder, B.price, B.date_time, S.value\n\
         FROM bid B JOIN side_input AS S ON MOD(B.auction, 10000) = S.key;\n",
        q13.weir
    );
    let side = format!(
        r#"
[sources.side_input]
topics = ["{side_topic}"]
format = "json"
primary_key = ["key"]
schema = """
  key BIGINT, value VARCHAR, valid_from TIMESTAMP(3),
  WATERMARK FOR valid_from AS valid_from - INTERVAL '4' SECOND
"""
"#
    );
    let sections = sql_sections(&bid_topic, &dlq, &sinks, &sql)
        .replace("\n[pipeline]", &format!("{side}\n[pipeline]"))
        .replace(
            "[sinks.regular]\n",
            "[sinks.regular]\nchangelog = \"debezium\"\nkey = [\"auction\", \"bidder\", \"price\", \"date_time\", \"value\"]\n",
        );
    let config = graph_config_with(
        dir.path(),
        &unique("sql-temporal"),
        2,
        &dir.path().join("checkpoints"),
        &sections,
    );
    let explain = weir_on("explain", &config);
    let plan = String::from_utf8_lossy(&explain.stdout).to_string();
    assert!(plan.contains("q13.temporal-join (temporal-join)"), "{plan}");
    assert!(plan.contains("regular.join (join/inner)"), "{plan}");

    // Bids in ten chunks; the table's first versions with the first chunk,
    // its later versions spread over the next eight (each to the partition
    // of its key, as a compacted topic keeps them), the flushes last.
    let mut bid_chunks: Vec<Vec<String>> = bids
        .chunks(bids.len() / 10 + 1)
        .map(<[String]>::to_vec)
        .collect();
    bid_chunks.push(flush);
    let (first, later): (Vec<&String>, Vec<&String>) = versions
        .iter()
        .partition(|v| v.contains("2026-11-30T09:00:00"));
    let mut side_chunks: Vec<Vec<String>> = vec![Vec::new(); bid_chunks.len()];
    side_chunks[0] = first.into_iter().cloned().collect();
    for (j, v) in later.iter().enumerate() {
        side_chunks[1 + j * 8 / later.len().max(1)].push((*v).clone());
    }
    let keyed = |lines: &[String]| -> Vec<(i32, String, Option<String>)> {
        lines
            .iter()
            .map(|l| {
                let key = serde_json::from_str::<serde_json::Value>(l).unwrap()["key"]
                    .as_i64()
                    .unwrap();
                ((key % 2) as i32, key.to_string(), Some(l.clone()))
            })
            .collect()
    };
    let last = side_chunks.len() - 1;
    let side_records: Vec<Vec<(i32, String, Option<String>)>> = side_chunks
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let mut records = keyed(c);
            if i == last {
                // The flush version to each partition: a partition's
                // watermark stays where its last record left it.
                for p in 0..2 {
                    records.push((p, "999999".into(), Some(flush_side_input())));
                }
            }
            records
        })
        .collect();
    let mut weir = feed_with_kills_by(
        &Job {
            binary: weir(),
            config: &config,
            env: &[],
        },
        bid_chunks.len(),
        5,
        &mut rng,
        |i| {
            weir_testkit::produce_records(&side_topic, &side_records[i]);
            weir_testkit::produce(&bid_topic, 2, &bid_chunks[i]);
        },
    );
    let context = || format!("seed {seed}; log: {}", log_tail(&weir.log_text()));
    assert_matches_duckdb(&q13, &sinks[0].1, &data, Duration::from_secs(120), &context);

    let want = multiset(
        duckdb(
            &data,
            "SELECT B.auction, B.bidder, B.price, B.date_time, S.value
             FROM bid B JOIN (SELECT * FROM side_input
                              QUALIFY row_number() OVER (PARTITION BY key ORDER BY valid_from DESC) = 1) S
             ON B.auction % 10000 = S.key",
        )
        .into_iter(),
    );
    assert!(!want.is_empty(), "the regular join has rows to check");
    let changes = read_topic(
        &sinks[1].1,
        Isolation::Committed,
        Duration::from_secs(120),
        Duration::from_secs(2),
        |r| final_debezium_multiset(r).is_ok_and(|t| t == want),
    );
    let got = final_debezium_multiset(&changes)
        .unwrap_or_else(|e| panic!("the regular join's changes: {e}; {}", context()));
    assert_eq!(
        got.len(),
        want.len(),
        "rows of the regular join; {}",
        context()
    );
    assert_eq!(got, want, "the regular join against DuckDB; {}", context());
    let retracted = changes
        .iter()
        .filter(|r| {
            r.value
                .as_deref()
                .is_some_and(|v| v.contains(r#""op":"d""#))
        })
        .count();
    assert!(
        retracted > 0,
        "a replaced version took back the rows it had joined"
    );
    weir.stop(Duration::from_secs(30));
}

/// `state_ttl = "10s"` on a regular join over 90 s of orders and 60 s of
/// payments, three SIGKILLs: an order and its payment meet when they are
/// at most 10 s apart in event time (a second here) and not when further
/// (30 s here), whatever the watermark had reached when the later one
/// came; the rows the watermark leaves behind are dropped and counted
/// (`weir_state_expired_total`), so the join holds about the last 14 s of
/// rows, not all of them, as `weir state scan` shows.
#[test]
fn state_ttl_bounds_a_regular_join_and_keeps_rows_within_it_joining() {
    let seed = seed();
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().unwrap();
    let t0: i64 = 1_796_032_800_000; // 2026-11-30T10:00:00Z
    let at = |ms: i64| {
        humantime::format_rfc3339_millis(std::time::UNIX_EPOCH + Duration::from_millis(ms as u64))
            .to_string()
    };
    // An order every 20 ms for 90 s; a payment for each order of the first
    // 60 s, a second after it, or 30 s after it for every third.
    let mut orders = Vec::new();
    let mut payments = Vec::new();
    let mut want = Vec::new();
    for k in 0..4500i64 {
        let t = t0 + k * 20;
        orders.push((t, format!(r#"{{"id":{k},"t":"{}"}}"#, at(t))));
        if k < 3000 {
            let late = k % 3 == 0;
            let pt = t + if late { 30_000 } else { 1_000 };
            payments.push((
                pt,
                format!(r#"{{"order_id":{k},"amount":{},"t":"{}"}}"#, k * 7, at(pt)),
            ));
            if !late {
                want.push(format!(r#"{{"id":{k},"amount":{}}}"#, k * 7));
            }
        }
    }
    payments.sort();
    let (orders_topic, payments_topic, out_topic) = (
        unique("ttl-orders"),
        unique("ttl-payments"),
        unique("ttl-paid"),
    );
    for t in [&orders_topic, &payments_topic, &out_topic] {
        create_topic(t, 2);
    }
    let sections = format!(
        r#"
[sources.orders]
topics = ["{orders_topic}"]
format = "json"
schema = "id BIGINT, t TIMESTAMP(3), WATERMARK FOR t AS t - INTERVAL '4' SECOND"

[sources.payments]
topics = ["{payments_topic}"]
format = "json"
schema = "order_id BIGINT, amount BIGINT, t TIMESTAMP(3), WATERMARK FOR t AS t - INTERVAL '4' SECOND"

[sinks.paid]
topic = "{out_topic}"
delivery = "exactly-once"

[pipeline]
state_ttl = "10s"
sql = """
INSERT INTO paid
SELECT O.id, P.amount FROM orders O JOIN payments P ON O.id = P.order_id
"""
"#
    );
    let config = graph_config_with(
        dir.path(),
        &unique("sql-ttl"),
        2,
        &dir.path().join("checkpoints"),
        &sections,
    );
    // Ten chunks of 9 s of event time each, both streams together.
    let chunk = |rows: &[(i64, String)], i: i64| -> Vec<String> {
        rows.iter()
            .filter(|(t, _)| (*t - t0) / 9_000 == i)
            .map(|(_, v)| v.clone())
            .collect()
    };
    let mut job = feed_with_kills_by(
        &Job {
            binary: weir(),
            config: &config,
            env: &[],
        },
        10,
        3,
        &mut rng,
        |i| {
            weir_testkit::produce(&orders_topic, 2, &chunk(&orders, i as i64));
            weir_testkit::produce(&payments_topic, 2, &chunk(&payments, i as i64));
        },
    );
    let context = || format!("seed {seed}; log: {}", log_tail(&job.log_text()));
    let records = read_topic(
        &out_topic,
        Isolation::Committed,
        Duration::from_secs(90),
        Duration::from_secs(2),
        |r| r.len() >= want.len(),
    );
    let want = multiset(want.iter().map(|w| serde_json::from_str(w).unwrap()));
    let got = multiset(records.iter().map(json));
    assert_eq!(got.len(), want.len(), "joined rows; {}", context());
    assert_eq!(
        got,
        want,
        "pairs within the TTL, and only those; {}",
        context()
    );

    let addr = job.admin_addr(Duration::from_secs(30));
    let expired = weir_testkit::metric_sample(
        &weir_testkit::http(&addr, "GET", "/metrics", None).1,
        "weir_state_expired_total{operator=\"paid.join\"}",
    );
    assert!(
        expired.is_some_and(|n| n > 0.0),
        "expired rows are counted: {expired:?}"
    );
    job.stop(Duration::from_secs(30));
    let scan = state_scan(&config, "paid.join");
    let held = scan.lines().count();
    let total = orders.len() + payments.len();
    eprintln!("the join holds {held} of {total} rows; {expired:?} expired since the last start");
    // Each stream's last ~14 s (the TTL and the watermark's 4 s): about
    // 700 orders and 170 payments of the 7,500 rows.
    assert!(
        held > 0 && held < total / 4,
        "the join holds {held} of {total} rows"
    );
}
