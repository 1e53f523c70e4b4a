//! What the SQL tests share (tests/sql.rs, tests/graph_group.rs): the
//! Nexmark input from `tests/sql/reference.py`, DuckDB's answers, the
//! queries with their DuckDB equivalents, and the comparison.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use weir_testkit::sql::*;
use weir_testkit::{read_topic, Isolation};

use crate::graph_jobs::json;

pub fn weir() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_weir"))
}

/// The bids of a generated Nexmark input, as the tests feed them.
pub struct Bids {
    /// The generated files (DuckDB reads `bid.jsonl`, with the flush bids).
    pub data: PathBuf,
    /// The bids in input order, with one whose price is NULL.
    pub bids: Vec<String>,
    /// One far-future bid per input partition, to feed last.
    pub flush: Vec<String>,
}

/// 6,000 events at 100 per second: a minute of event time, bids up to
/// 3 s early (the watermark allows 4 s, so none is late).
pub fn nexmark_bids(dir: &Path, seed: u64, partitions: usize) -> Bids {
    let data = dir.join("data");
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
    let flush = vec![flush_bid(); partitions];
    let mut for_duckdb = bids.clone();
    for_duckdb.extend(flush.iter().cloned());
    std::fs::write(&bid_file, for_duckdb.join("\n") + "\n").unwrap();
    Bids { data, bids, flush }
}

/// The job's SQL: the views, then one INSERT per query.
pub fn job_sql(queries: &[Query]) -> String {
    VIEWS.to_string() + &inserts(queries)
}

/// One `INSERT INTO sink query;` per query.
pub fn inserts(queries: &[Query]) -> String {
    queries
        .iter()
        .map(|q| format!("INSERT INTO {}\n{};\n", q.sink, q.weir))
        .collect()
}

/// Reads `topic` (a Debezium sink) read_committed until its changes,
/// applied in order, leave DuckDB's answer to `q` over `data` as a
/// multiset, and asserts it; a deletion of a row that is not there fails.
pub fn assert_debezium_matches_duckdb(
    q: &Query,
    topic: &str,
    data: &Path,
    timeout: Duration,
    context: &dyn Fn() -> String,
) {
    let want = multiset(duckdb(data, q.duckdb).into_iter());
    assert!(
        !want.is_empty(),
        "{}: DuckDB's answer is empty; the test would prove nothing",
        q.sink
    );
    let records = read_topic(
        topic,
        Isolation::Committed,
        timeout,
        Duration::from_secs(2),
        |r| final_debezium_multiset(r).is_ok_and(|t| t == want),
    );
    let got = final_debezium_multiset(&records)
        .unwrap_or_else(|e| panic!("{} as Debezium changes: {e}; {}", q.sink, context()));
    assert_eq!(got.len(), want.len(), "{}: rows; {}", q.sink, context());
    assert_eq!(got, want, "{} against DuckDB; {}", q.sink, context());
}

/// Reads `topic` read_committed until it holds DuckDB's answer to `q`
/// over `data`, and asserts it: for an append-only result the multiset of
/// rows; for an updating one the final table, and no key committing the
/// same row twice in a row.
pub fn assert_matches_duckdb(
    q: &Query,
    topic: &str,
    data: &Path,
    timeout: Duration,
    context: &dyn Fn() -> String,
) {
    let want = duckdb(data, q.duckdb);
    assert!(
        !want.is_empty(),
        "{}: DuckDB's answer is empty; the test would prove nothing",
        q.sink
    );
    // The columns compared (all, unless the query names some), on both
    // sides.
    let compared = |mut rows: Vec<BTreeMap<String, String>>| {
        if !q.compare.is_empty() {
            for r in &mut rows {
                r.retain(|k, _| q.compare.contains(&k.as_str()));
            }
            rows.sort();
        }
        rows
    };
    let want_rows = compared(multiset(want.into_iter()));
    if q.updating {
        let records = read_topic(
            topic,
            Isolation::Committed,
            timeout,
            Duration::from_secs(2),
            |r| compared(final_upsert_rows(r)) == want_rows,
        );
        let got = compared(final_upsert_rows(&records));
        assert_eq!(
            got.len(),
            want_rows.len(),
            "{}: keys in the final table; {}",
            q.sink,
            context()
        );
        assert_eq!(
            got,
            want_rows,
            "{}: the final table against DuckDB; {}",
            q.sink,
            context()
        );
        let mut last: BTreeMap<String, Option<String>> = BTreeMap::new();
        for r in &records {
            let k = r.key.clone().expect("an upsert record has a key");
            let v = r.value.clone();
            assert_ne!(
                last.get(&k),
                Some(&v),
                "{}: key {k} committed the same row twice in a row; {}",
                q.sink,
                context()
            );
            last.insert(k, v);
        }
    } else {
        let records = read_topic(
            topic,
            Isolation::Committed,
            timeout,
            Duration::from_secs(2),
            |r| r.len() >= want_rows.len(),
        );
        let got = compared(multiset(records.iter().map(json)));
        assert_eq!(
            got.len(),
            want_rows.len(),
            "{}: rows; {}",
            q.sink,
            context()
        );
        assert_eq!(
            got,
            want_rows,
            "{}: rows against DuckDB; {}",
            q.sink,
            context()
        );
    }
}

/// The three Nexmark streams of a generated input, to feed in step.
pub struct Streams {
    /// The generated files, with the flush events (DuckDB reads them).
    pub data: PathBuf,
    /// Per table (person, auction, bid), its events in event order.
    pub tables: Vec<(&'static str, Vec<String>)>,
    /// Per table, one far-future event per input partition, to feed last.
    pub flush: Vec<(&'static str, Vec<String>)>,
}

/// `events` Nexmark events at 100 per second, each up to 3 s early (the
/// watermark allows 4 s, so none is late), as three streams.
pub fn nexmark_streams(dir: &Path, seed: u64, events: u64, partitions: usize) -> Streams {
    use weir_testkit::nexmark::{flush_auction, flush_person};
    let data = dir.join("data");
    generate(&data, events, seed % 10_000, 100, 3000);
    let mut tables = Vec::new();
    let mut flush = Vec::new();
    for (table, last) in [
        ("person", flush_person()),
        ("auction", flush_auction()),
        ("bid", flush_bid()),
    ] {
        let file = data.join(format!("{table}.jsonl"));
        let lines: Vec<String> = std::fs::read_to_string(&file)
            .unwrap()
            .lines()
            .map(String::from)
            .collect();
        let last = vec![last; partitions];
        let mut all = lines.clone();
        all.extend(last.iter().cloned());
        std::fs::write(&file, all.join("\n") + "\n").unwrap();
        tables.push((table, lines));
        flush.push((table, last));
    }
    Streams {
        data,
        tables,
        flush,
    }
}

impl Streams {
    /// Chunk `i` of `n` (then the flush as chunk `n`): the i-th part of
    /// each table, so that the three advance in event time together.
    pub fn chunk(&self, i: usize, n: usize) -> Vec<(&'static str, Vec<String>)> {
        if i == n {
            return self.flush.clone();
        }
        self.tables
            .iter()
            .map(|(t, lines)| {
                let per = lines.len().div_ceil(n);
                let from = (i * per).min(lines.len());
                let to = ((i + 1) * per).min(lines.len());
                (*t, lines[from..to].to_vec())
            })
            .collect()
    }
}

/// A SQL job's sections over the three Nexmark tables (`topics`: table
/// name to topic), JSON with a 4 s watermark each, one exactly-once
/// `[sinks.NAME]` per (name, topic), and `[pipeline] sql` with `pipeline`
/// lines before it.
pub fn nexmark_sections(
    topics: &BTreeMap<&str, String>,
    sinks: &[(String, String)],
    pipeline: &str,
    sql: &str,
) -> String {
    let mut t = weir_testkit::nexmark::source_sections(
        topics.iter().map(|(table, topic)| (*table, topic.as_str())),
    );
    for (name, topic) in sinks {
        t.push_str(&format!(
            "\n[sinks.{name}]\ntopic = \"{topic}\"\ndelivery = \"exactly-once\"\n"
        ));
    }
    t.push_str(&format!(
        "\n[pipeline]\n{pipeline}\nsql = \"\"\"\n{sql}\n\"\"\"\n"
    ));
    t
}

/// `weir state scan --operator OPERATOR --checkpoint latest` of the job
/// configured by `config`, as JSON lines (one per entry); the scan must
/// succeed.
pub fn state_scan(config: &Path, operator: &str) -> String {
    let out = std::process::Command::new(weir())
        .args(["state", "scan", "--operator", operator])
        .args(["--checkpoint", "latest", "--config"])
        .arg(config)
        .args(["--format", "json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "weir state scan {operator}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 JSON lines")
}
