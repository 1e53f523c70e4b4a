//! Jobs in SQL against the real broker, killed with SIGKILL while they
//! work, read back by an independent read_committed reader, and checked
//! against DuckDB running the same query as a batch over the same input
//! (`tests/sql/reference.py`): never against weir's own planner.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use weir_testkit::{create_topic, log_tail, read_topic, unique, Isolation, OutRecord, Rng};

#[path = "support/graph_jobs.rs"]
mod graph_jobs;
use graph_jobs::*;

fn weir() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_weir"))
}

/// The Python with DuckDB: `WEIR_SQL_PYTHON`, else the virtualenv
/// scripts/setup.sh makes, else `python3`.
fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("WEIR_SQL_PYTHON") {
        return p.into();
    }
    let venv = std::env::var_os("WEIR_SQL_VENV")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/weir/sql-venv")));
    match venv.map(|v| v.join("bin/python")) {
        Some(p) if p.exists() => p,
        _ => "python3".into(),
    }
}

fn reference() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sql/reference.py")
}

/// Nexmark events (person, auction, bid as JSON lines) in `dir`.
fn generate(dir: &Path, events: u64, seed: u64, rate: u32, max_delay_ms: u32) {
    let out = Command::new(python())
        .arg(reference())
        .args([
            "gen",
            "--events",
            &events.to_string(),
            "--seed",
            &seed.to_string(),
        ])
        .args(["--rate-per-sec", &rate.to_string()])
        .args(["--max-delay-ms", &max_delay_ms.to_string(), "--out"])
        .arg(dir)
        .output()
        .expect("python3 runs tests/sql/reference.py");
    assert!(
        out.status.success(),
        "gen: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// DuckDB's answer to `sql` over the events in `dir`, one JSON object per row.
fn duckdb(dir: &Path, sql: &str) -> Vec<serde_json::Value> {
    let out = Command::new(python())
        .arg(reference())
        .args(["query", "--dir"])
        .arg(dir)
        .args(["--sql", sql])
        .output()
        .expect("python3 runs tests/sql/reference.py");
    assert!(
        out.status.success(),
        "DuckDB refused {sql}: {} (is the duckdb package installed? scripts/setup.sh does it)",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).expect("DuckDB row as JSON"))
        .collect()
}

/// A value as both engines are compared: numbers (and DuckDB's exact
/// DECIMAL strings) to 12 significant digits, so that `10769.780` and
/// `10769.78` agree and a DOUBLE average may differ in its last bits.
fn canon(v: &serde_json::Value) -> String {
    let number = match v {
        serde_json::Value::Number(n) => n.as_f64(),
        serde_json::Value::String(s)
            if !s.is_empty() && s.parse::<f64>().is_ok() && !s.contains('T') =>
        {
            s.parse::<f64>().ok()
        }
        _ => None,
    };
    match number {
        Some(x) if x.abs() < f64::MIN_POSITIVE => "0".into(),
        Some(x) => format!("{x:.11e}"),
        None => v.to_string(),
    }
}

fn canon_row(v: &serde_json::Value) -> BTreeMap<String, String> {
    v.as_object()
        .expect("a row is a JSON object")
        .iter()
        .map(|(k, x)| (k.clone(), canon(x)))
        .collect()
}

/// Rows as a sorted multiset.
fn multiset(rows: impl Iterator<Item = serde_json::Value>) -> Vec<BTreeMap<String, String>> {
    let mut v: Vec<_> = rows.map(|r| canon_row(&r)).collect();
    v.sort();
    v
}

/// One query of the test job: the sink it writes, weir's SQL, DuckDB's
/// batch equivalent, and whether its result is updating.
struct Query {
    sink: &'static str,
    weir: &'static str,
    duckdb: &'static str,
    updating: bool,
}

/// Views the queries read (the issue's hot-items example: windows of windows).
const VIEWS: &str = "CREATE VIEW counts AS
  SELECT auction, window_start, window_end, COUNT(*) AS num
  FROM TABLE(HOP(TABLE bid, DESCRIPTOR(date_time), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
  GROUP BY auction, window_start, window_end;
";

fn queries() -> Vec<Query> {
    vec![
        Query {
            sink: "q0",
            weir: "SELECT auction, bidder, price, date_time, extra FROM bid",
            duckdb: "SELECT auction, bidder, price, date_time, extra FROM bid",
            updating: false,
        },
        Query {
            sink: "q1",
            weir: "SELECT auction, bidder, 0.908 * price AS price, date_time, extra FROM bid",
            duckdb: "SELECT auction, bidder, 0.908 * price AS price, date_time, extra FROM bid",
            updating: false,
        },
        Query {
            sink: "q2",
            weir: "SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0",
            duckdb: "SELECT auction, price FROM bid WHERE auction % 123 = 0",
            updating: false,
        },
        Query {
            sink: "q14",
            weir: "SELECT auction, bidder, 0.908 * price AS price,
                     CASE
                       WHEN HOUR(date_time) >= 8 AND HOUR(date_time) <= 18 THEN 'dayTime'
                       WHEN HOUR(date_time) <= 6 OR HOUR(date_time) >= 20 THEN 'nightTime'
                       ELSE 'otherTime'
                     END AS bid_time_type,
                     date_time, extra,
                     CHAR_LENGTH(extra) - CHAR_LENGTH(REPLACE(extra, 'c', '')) AS c_counts
                   FROM bid
                   WHERE 0.908 * price > 1000000 AND 0.908 * price < 50000000",
            duckdb: "SELECT auction, bidder, 0.908 * price AS price,
                     CASE
                       WHEN hour(date_time) >= 8 AND hour(date_time) <= 18 THEN 'dayTime'
                       WHEN hour(date_time) <= 6 OR hour(date_time) >= 20 THEN 'nightTime'
                       ELSE 'otherTime'
                     END AS bid_time_type,
                     date_time, extra,
                     char_length(extra) - char_length(replace(extra, 'c', '')) AS c_counts
                   FROM bid
                   WHERE 0.908 * price > 1000000 AND 0.908 * price < 50000000",
            updating: false,
        },
        Query {
            sink: "q21",
            weir: "SELECT auction, bidder, price, channel,
                     CASE
                       WHEN LOWER(channel) = 'apple' THEN '0'
                       WHEN LOWER(channel) = 'google' THEN '1'
                       WHEN LOWER(channel) = 'facebook' THEN '2'
                       WHEN LOWER(channel) = 'baidu' THEN '3'
                       ELSE REGEXP_EXTRACT(url, '(&|^)channel_id=([^&]*)', 2)
                     END AS channel_id
                   FROM bid
                   WHERE REGEXP_EXTRACT(url, '(&|^)channel_id=([^&]*)', 2) IS NOT NULL
                      OR LOWER(channel) IN ('apple', 'google', 'facebook', 'baidu')",
            duckdb: "SELECT auction, bidder, price, channel,
                     CASE
                       WHEN lower(channel) = 'apple' THEN '0'
                       WHEN lower(channel) = 'google' THEN '1'
                       WHEN lower(channel) = 'facebook' THEN '2'
                       WHEN lower(channel) = 'baidu' THEN '3'
                       ELSE nullif(regexp_extract(url, '(&|^)channel_id=([^&]*)', 2), '')
                     END AS channel_id
                   FROM bid
                   WHERE nullif(regexp_extract(url, '(&|^)channel_id=([^&]*)', 2), '') IS NOT NULL
                      OR lower(channel) IN ('apple', 'google', 'facebook', 'baidu')",
            updating: false,
        },
        Query {
            sink: "q22",
            weir: "SELECT auction, bidder, price, channel,
                     SPLIT_INDEX(url, '/', 3) AS dir1,
                     SPLIT_INDEX(url, '/', 4) AS dir2,
                     SPLIT_INDEX(url, '/', 5) AS dir3
                   FROM bid",
            duckdb: "SELECT auction, bidder, price, channel,
                     nullif(split_part(url, '/', 4), '') AS dir1,
                     nullif(split_part(url, '/', 5), '') AS dir2,
                     nullif(split_part(url, '/', 6), '') AS dir3
                   FROM bid",
            updating: false,
        },
        Query {
            sink: "tumble",
            weir: "SELECT auction, window_start, window_end, COUNT(*) AS num, MAX(price) AS top,
                          SUM(price) AS total
                   FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '10' SECOND))
                   GROUP BY auction, window_start, window_end",
            duckdb: "SELECT auction, ws AS window_start, ws + INTERVAL 10 SECOND AS window_end,
                            count(*) AS num, max(price) AS top, sum(price) AS total
                     FROM (SELECT *, time_bucket(INTERVAL 10 SECOND, date_time, TIMESTAMP '1970-01-01') AS ws
                           FROM bid WHERE date_time < TIMESTAMP '2030-01-01')
                     GROUP BY auction, ws",
            updating: false,
        },
        Query {
            sink: "hop",
            weir: "SELECT window_start, window_end, COUNT(*) AS bids, AVG(price) AS avg_price
                   FROM TABLE(HOP(TABLE bid, DESCRIPTOR(date_time), INTERVAL '5' SECOND, INTERVAL '20' SECOND))
                   GROUP BY window_start, window_end",
            duckdb: "SELECT ws AS window_start, ws + INTERVAL 20 SECOND AS window_end,
                            count(*) AS bids, avg(price) AS avg_price
                     FROM (SELECT price,
                                  time_bucket(INTERVAL 5 SECOND, date_time, TIMESTAMP '1970-01-01')
                                    - to_seconds(5 * i) AS ws
                           FROM bid, range(0, 4) t(i)
                           WHERE date_time < TIMESTAMP '2030-01-01')
                     GROUP BY ws",
            updating: false,
        },
        Query {
            sink: "hot_items",
            weir: "SELECT window_start, window_end, MAX(num) AS max_bids
                   FROM counts GROUP BY window_start, window_end",
            duckdb: "WITH counts AS (
                       SELECT auction, ws AS window_start, ws + INTERVAL 10 SECOND AS window_end,
                              count(*) AS num
                       FROM (SELECT auction,
                                    time_bucket(INTERVAL 2 SECOND, date_time, TIMESTAMP '1970-01-01')
                                      - to_seconds(2 * i) AS ws
                             FROM bid, range(0, 5) t(i)
                             WHERE date_time < TIMESTAMP '2030-01-01')
                       GROUP BY auction, ws)
                     SELECT window_start, window_end, max(num) AS max_bids
                     FROM counts GROUP BY window_start, window_end",
            updating: false,
        },
        Query {
            sink: "q11",
            weir: "SELECT bidder, COUNT(*) AS bid_count, window_start AS starttime, window_end AS endtime
                   FROM TABLE(SESSION(TABLE bid PARTITION BY bidder, DESCRIPTOR(date_time), INTERVAL '10' SECOND))
                   GROUP BY bidder, window_start, window_end",
            // Sessions merge when they touch: a bid at most the gap after
            // the last one continues the session.
            duckdb: "WITH s AS (
                       SELECT bidder, date_time,
                              CASE WHEN date_time - lag(date_time) OVER (PARTITION BY bidder ORDER BY date_time)
                                        <= INTERVAL 10 SECOND THEN 0 ELSE 1 END AS new
                       FROM bid WHERE date_time < TIMESTAMP '2030-01-01'),
                     g AS (
                       SELECT bidder, date_time,
                              sum(new) OVER (PARTITION BY bidder ORDER BY date_time
                                             ROWS UNBOUNDED PRECEDING) AS sid
                       FROM s)
                     SELECT bidder, count(*) AS bid_count, min(date_time) AS starttime,
                            max(date_time) + INTERVAL 10 SECOND AS endtime
                     FROM g GROUP BY bidder, sid",
            updating: false,
        },
        Query {
            sink: "q17",
            weir: "SELECT auction, DATE_FORMAT(date_time, 'yyyy-MM-dd') AS day,
                          COUNT(*) AS total_bids,
                          COUNT(*) FILTER (WHERE price < 10000) AS rank1_bids,
                          COUNT(*) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bids,
                          COUNT(*) FILTER (WHERE price >= 1000000) AS rank3_bids,
                          MIN(price) AS min_price, MAX(price) AS max_price,
                          AVG(price) AS avg_price, SUM(price) AS sum_price
                   FROM bid
                   GROUP BY auction, DATE_FORMAT(date_time, 'yyyy-MM-dd')",
            duckdb: "SELECT auction, strftime(date_time, '%Y-%m-%d') AS day,
                            count(*) AS total_bids,
                            count(*) FILTER (WHERE price < 10000) AS rank1_bids,
                            count(*) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bids,
                            count(*) FILTER (WHERE price >= 1000000) AS rank3_bids,
                            min(price) AS min_price, max(price) AS max_price,
                            avg(price) AS avg_price, sum(price) AS sum_price
                     FROM bid
                     GROUP BY auction, strftime(date_time, '%Y-%m-%d')",
            updating: true,
        },
    ]
}

/// A far-future bid per input partition: it moves every partition's
/// watermark past the input, so every window of the input closes. Its
/// own windows never close; the window queries' DuckDB side leaves it out.
fn flush_bid() -> String {
    r#"{"auction":999999,"bidder":1,"price":1,"channel":"flush","url":"https://www.nexmark.com/flush/item.htm?query=1","date_time":"2030-06-01T00:00:00.000Z","extra":""}"#.to_string()
}

fn sql_sections(bid_topic: &str, dlq: &str, sinks: &[(String, String)], sql: &str) -> String {
    let mut t = format!(
        r#"
[sources.bid]
topics = ["{bid_topic}"]
format = "json"
schema = """
  auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,
  date_time TIMESTAMP(3), extra VARCHAR,
  WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND
"""
on_bad_record = "dead-letter"
dead_letter_topic = "{dlq}"
"#
    );
    for (name, topic) in sinks {
        t.push_str(&format!(
            "\n[sinks.{name}]\ntopic = \"{topic}\"\ndelivery = \"exactly-once\"\n"
        ));
    }
    t.push_str(&format!("\n[pipeline]\nsql = \"\"\"\n{sql}\n\"\"\"\n"));
    t
}

/// The final upsert table by canonical key, with canonical rows.
fn final_rows(records: &[OutRecord]) -> BTreeMap<String, BTreeMap<String, String>> {
    table(records)
        .into_iter()
        .filter_map(|(k, v)| v.map(|v| (k, canon_row(&v))))
        .collect()
}

#[test]
fn nexmark_queries_in_sql_are_exact_under_sigkills_against_duckdb() {
    let seed = seed();
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    // 6,000 events at 100 per second: a minute of event time, bids up to
    // 3 s early (the watermark allows 4 s, so none is late).
    generate(&data, 6000, seed % 10_000, 100, 3000);
    let bid_file = data.join("bid.jsonl");
    let mut bids: Vec<String> = std::fs::read_to_string(&bid_file)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    // A bid without a price: SQL NULL through arithmetic, filters and aggregates.
    let mut no_price: serde_json::Value = serde_json::from_str(&bids[bids.len() / 2]).unwrap();
    no_price["price"] = serde_json::Value::Null;
    bids.insert(bids.len() / 2, no_price.to_string());
    let flush = vec![flush_bid(), flush_bid()];
    let mut for_duckdb = bids.clone();
    for_duckdb.extend(flush.iter().cloned());
    std::fs::write(&bid_file, for_duckdb.join("\n") + "\n").unwrap();

    let bid_topic = unique("sql-bid");
    let dlq = unique("sql-bid-dlq");
    create_topic(&bid_topic, 2);
    create_topic(&dlq, 1);
    let queries = queries();
    let sinks: Vec<(String, String)> = queries
        .iter()
        .map(|q| (q.sink.to_string(), unique(&format!("sql-{}", q.sink))))
        .collect();
    for (_, topic) in &sinks {
        create_topic(topic, 2);
    }
    let sql: String = VIEWS.to_string()
        + &queries
            .iter()
            .map(|q| format!("INSERT INTO {}\n{};\n", q.sink, q.weir))
            .collect::<String>();
    let config = graph_config_with(
        dir.path(),
        &unique("sql-nexmark"),
        2,
        &dir.path().join("checkpoints"),
        &sql_sections(&bid_topic, &dlq, &sinks, &sql),
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
    chunks.push(flush);
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
        let want = duckdb(&data, q.duckdb);
        assert!(
            !want.is_empty(),
            "{}: DuckDB's answer is empty; the test would prove nothing",
            q.sink
        );
        if q.updating {
            let want_rows = multiset(want.into_iter());
            let records = read_topic(
                topic,
                Isolation::Committed,
                Duration::from_secs(90),
                Duration::from_secs(2),
                |r| {
                    let mut got: Vec<_> = final_rows(r).into_values().collect();
                    got.sort();
                    got == want_rows
                },
            );
            let mut got: Vec<_> = final_rows(&records).into_values().collect();
            got.sort();
            assert_eq!(
                got.len(),
                want_rows.len(),
                "{}: keys in the final table (seed {seed}); log: {}",
                q.sink,
                log_tail(&weir.log_text())
            );
            assert_eq!(
                got, want_rows,
                "{}: the final table against DuckDB (seed {seed})",
                q.sink
            );
            // No committed change repeats the key's previous row.
            let mut last: BTreeMap<String, Option<String>> = BTreeMap::new();
            for r in &records {
                let k = r.key.clone().expect("an upsert record has a key");
                let v = r.value.clone();
                assert_ne!(
                    last.get(&k),
                    Some(&v),
                    "{}: key {k} committed the same row twice in a row (seed {seed})",
                    q.sink
                );
                last.insert(k, v);
            }
        } else {
            let want_rows = multiset(want.into_iter());
            let records = read_topic(
                topic,
                Isolation::Committed,
                Duration::from_secs(90),
                Duration::from_secs(2),
                |r| r.len() >= want_rows.len(),
            );
            let got = multiset(records.iter().map(json));
            assert_eq!(
                got.len(),
                want_rows.len(),
                "{}: rows (seed {seed}); log: {}",
                q.sink,
                log_tail(&weir.log_text())
            );
            assert_eq!(
                got, want_rows,
                "{}: rows against DuckDB (seed {seed})",
                q.sink
            );
        }
    }
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
        ("SELECT a.auction FROM bid a\nJOIN bid b ON a.auction = b.auction", "bid b", "joins are not supported yet"),
        ("SELECT auction FROM bid\nORDER BY bidder", "bidder", "ORDER BY on a stream is not supported"),
        ("SELECT NOW() AS t FROM bid", "NOW()", "not deterministic"),
        ("SELECT CASE WHEN price > 1 THEN 'a' ELSE 2 END AS c FROM bid", "2 END", "different types"),
        ("SELECT REGEXP_EXTRACT(url, '(', 1) AS r FROM bid", "REGEXP_EXTRACT(url, '(', 1)", "bad regular expression"),
        ("SELECT CAST(price AS MONEY) AS p FROM bid", "price AS MONEY", "unknown type MONEY"),
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
        let out = Command::new(weir())
            .args(["validate", "--config"])
            .arg(&config)
            .output()
            .unwrap();
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
    let (lines, _) = weir_testkit::word_lines(11, 3000, 8, 500);
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
    assert_eq!(
        got,
        want,
        "word count in SQL against the built-in; log: {}",
        log_tail(&log_b)
    );
}
