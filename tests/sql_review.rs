//! What a review of the SQL operators found (issue #38), each against the
//! real broker and the real binary, read back by an independent
//! read_committed reader: a tombstone into an event-time temporal join
//! deletes its key from the watermark on (checked against DuckDB over the
//! same changelog), a retraction under `state_ttl` takes back what its row
//! joined however much later it is stamped, and `CURRENT_WATERMARK` over
//! an updating result is refused, naming the column.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use weir_testkit::{create_topic, log_tail, read_topic, unique, Isolation, WeirProcess};

#[path = "support/graph_jobs.rs"]
mod graph_jobs;
use graph_jobs::*;
#[path = "support/sql_kit.rs"]
mod sql_kit;
use sql_kit::*;
use weir_testkit::sql::*;

/// 2026-11-30T10:00:00Z
const T: i64 = 1_796_032_800_000;

fn at(ms: i64) -> String {
    humantime::format_rfc3339_millis(std::time::UNIX_EPOCH + Duration::from_millis(ms as u64))
        .to_string()
}

fn s(secs: i64) -> i64 {
    T + secs * 1_000
}

/// The multiset of JSON rows a sink's records hold.
fn rows_of(records: &[weir_testkit::OutRecord]) -> Vec<BTreeMap<String, String>> {
    multiset(records.iter().map(json))
}

/// A table (an upsert topic with a primary key, its versions by
/// `valid_from`) and a stream probing it by event time. Key 1 has a
/// version at T+100 s when its tombstone arrives, with the watermark
/// between T+50 s and T+96 s; key 3 is deleted the same way and written
/// again at T+250 s; key 2 is never deleted. Stream rows at T+200 to
/// T+300 s find key 1 deleted (an inner join drops them, a LEFT join pads
/// them), key 3 deleted until its new version. Before, the tombstone was
/// filed at the watermark, before the version at T+100 s, which stayed
/// the key's row: every later stream row joined it. DuckDB runs the same
/// rule as a batch: each tombstone deletes its key from its time on,
/// taking the versions written before it with later times.
#[test]
fn a_tombstone_into_an_event_time_temporal_join_deletes_the_key_from_the_watermark_on() {
    let dir = tempfile::tempdir().unwrap();
    let (rates, probes, inner, left) = (
        unique("review-rates"),
        unique("review-probes"),
        unique("review-inner"),
        unique("review-left"),
    );
    for t in [&rates, &probes, &inner, &left] {
        create_topic(t, 1);
    }
    let sections = format!(
        r#"
[sources.rates]
topics = ["{rates}"]
format = "json"
primary_key = ["key"]
schema = "key BIGINT, rate VARCHAR, valid_from TIMESTAMP(3), WATERMARK FOR valid_from AS valid_from - INTERVAL '4' SECOND"

[sources.probes]
topics = ["{probes}"]
format = "json"
schema = "id BIGINT, key BIGINT, t TIMESTAMP(3), WATERMARK FOR t AS t - INTERVAL '4' SECOND"

[sinks.inner_join]
topic = "{inner}"
delivery = "exactly-once"

[sinks.left_join]
topic = "{left}"
delivery = "exactly-once"

[pipeline]
sql = """
INSERT INTO inner_join
SELECT P.id, P.key, R.rate FROM probes P
JOIN rates FOR SYSTEM_TIME AS OF P.t AS R ON P.key = R.key;
INSERT INTO left_join
SELECT P.id, P.key, R.rate FROM probes P
LEFT JOIN rates FOR SYSTEM_TIME AS OF P.t AS R ON P.key = R.key;
"""
"#
    );
    let config = graph_config_with(
        dir.path(),
        &unique("review-temporal"),
        1,
        &dir.path().join("checkpoints"),
        &sections,
    );
    // The changelog as written, and as DuckDB reads it.
    let mut changes: Vec<(i32, String, Option<String>)> = Vec::new();
    let mut reference = String::new();
    let change = |changes: &mut Vec<_>,
                  reference: &mut String,
                  key: i64,
                  version: Option<(&str, i64)>,
                  deleted_from: i64| {
        let seq = changes.len();
        let (value, line) = match version {
            Some((rate, t)) => (
                Some(format!(
                    r#"{{"key":{key},"rate":"{rate}","valid_from":"{}"}}"#,
                    at(t)
                )),
                format!(
                    r#"{{"seq":{seq},"key":{key},"rate":"{rate}","valid_from":"{}","deleted":false}}"#,
                    at(t)
                ),
            ),
            None => (
                None,
                format!(
                    r#"{{"seq":{seq},"key":{key},"rate":null,"valid_from":"{}","deleted":true}}"#,
                    at(deleted_from)
                ),
            ),
        };
        changes.push((0, key.to_string(), value));
        reference.push_str(&line);
        reference.push('\n');
    };
    for key in 1..=3 {
        change(
            &mut changes,
            &mut reference,
            key,
            Some((&format!("r{key}a"), s(0))),
            0,
        );
    }
    for key in 1..=3 {
        change(
            &mut changes,
            &mut reference,
            key,
            Some((&format!("r{key}b"), s(100))),
            0,
        );
    }
    let first_rates = changes.len();
    // A tombstone deletes from the watermark at its arrival plus 1 ms:
    // at least T+50 s (the rows at T+50 s were joined, so the watermark
    // had reached them), at most T+96 s (the versions at T+100 s less the
    // 4 s bound). Any time in between gives DuckDB the same answer.
    change(&mut changes, &mut reference, 1, None, s(96) + 1);
    change(&mut changes, &mut reference, 3, None, s(96) + 1);
    change(&mut changes, &mut reference, 3, Some(("r3c", s(250))), 0);
    let flush = r#"{"key":999,"rate":"flush","valid_from":"2026-11-30T11:00:00.000Z"}"#;
    std::fs::write(dir.path().join("rate_changes.jsonl"), &reference).unwrap();

    let probe = |id: i64, key: i64, t: i64| format!(r#"{{"id":{id},"key":{key},"t":"{}"}}"#, at(t));
    // Key 4 has no version; its row at T+60 s moves the stream's
    // watermark past T+50 s.
    let mut first_probes: Vec<String> = (1..=3).map(|k| probe(k, k, s(50))).collect();
    first_probes.push(probe(4, 4, s(60)));
    let mut later_probes = Vec::new();
    for (i, t) in [200, 250, 300].into_iter().enumerate() {
        for k in 1..=3 {
            later_probes.push(probe(10 * (i as i64 + 1) + k, k, s(t)));
        }
    }
    let all_probes: Vec<String> = first_probes.iter().chain(&later_probes).cloned().collect();
    std::fs::write(
        dir.path().join("probes.jsonl"),
        all_probes.join("\n") + "\n",
    )
    .unwrap();

    let mut weir = WeirProcess::start(&weir(), &config, &[]);
    let context = |w: &WeirProcess| log_tail(&w.log_text()).to_string();
    // First the versions and the rows at T+50 s, joined before the
    // tombstones come (the watermark is then past T+50 s).
    weir_testkit::produce_records(&rates, &changes[..first_rates]);
    weir_testkit::produce(&probes, 1, &first_probes);
    let joined_first = read_topic(
        &inner,
        Isolation::Committed,
        Duration::from_secs(60),
        Duration::from_secs(1),
        |r| r.len() >= 3,
    );
    assert_eq!(joined_first.len(), 3, "{}", context(&weir));
    // Then the tombstones and the later rows; a far version and row move
    // both watermarks past them.
    weir_testkit::produce_records(&rates, &changes[first_rates..]);
    weir_testkit::produce_records(&rates, &[(0, "999".into(), Some(flush.into()))]);
    let mut rest = later_probes.clone();
    rest.push(probe(999, 999, s(3_600)));
    weir_testkit::produce(&probes, 1, &rest);

    let no_later_than = "WITH v AS (
        SELECT c.key, c.valid_from, c.deleted, CASE WHEN c.deleted THEN NULL ELSE c.rate END AS rate
        FROM rate_changes c
        WHERE NOT EXISTS (SELECT 1 FROM rate_changes d
                          WHERE d.deleted AND d.key = c.key AND d.seq > c.seq
                            AND d.valid_from <= c.valid_from))";
    for (topic, sql, what) in [
        (
            &inner,
            format!(
                "{no_later_than} SELECT p.id, p.key, v.rate FROM probes p
                 ASOF JOIN v ON p.key = v.key AND p.t >= v.valid_from WHERE NOT v.deleted"
            ),
            "inner",
        ),
        (
            &left,
            format!(
                "{no_later_than} SELECT p.id, p.key, v.rate FROM probes p
                 ASOF LEFT JOIN v ON p.key = v.key AND p.t >= v.valid_from"
            ),
            "left",
        ),
    ] {
        let want = multiset(duckdb(dir.path(), &sql).into_iter());
        let records = read_topic(
            topic,
            Isolation::Committed,
            Duration::from_secs(60),
            Duration::from_secs(2),
            |r| r.len() >= want.len(),
        );
        let got = rows_of(&records);
        assert_eq!(
            got,
            want,
            "the {what} temporal join against DuckDB; {}",
            context(&weir)
        );
        // What the rule means, spelled out: key 1's later rows match
        // nothing (padded in the LEFT join), key 3's row at T+200 s too.
        let one = canon(&serde_json::json!(1));
        let deleted: Vec<_> = got
            .iter()
            .filter(|r| r["key"] == one && r["id"] != one)
            .collect();
        match what {
            "inner" => assert!(deleted.is_empty(), "key 1 was deleted: {deleted:?}"),
            _ => assert!(
                deleted.len() == 3 && deleted.iter().all(|r| r["rate"] == "null"),
                "key 1's later rows padded: {deleted:?}"
            ),
        }
    }
    weir.stop(Duration::from_secs(30));
}

/// `state_ttl = "3s"` on a regular join of a stream with an upsert table:
/// item 1's price changes 4 s after a click joined it, item 2's 1 s
/// after, item 3's never. The table's normalize stamps the update-before
/// with the new change's time, 4 s from the click, over the TTL; the
/// retraction must still take back the row its insert joined, and the new
/// price, 4 s from the click, joins nothing. Before, the retraction was
/// matched by its own time and never met the click: the joined row stayed.
#[test]
fn under_state_ttl_a_retraction_takes_back_the_rows_its_insert_joined() {
    let dir = tempfile::tempdir().unwrap();
    let (prices, clicks, out) = (
        unique("review-prices"),
        unique("review-clicks"),
        unique("review-priced"),
    );
    for t in [&prices, &clicks, &out] {
        create_topic(t, 1);
    }
    let sections = format!(
        r#"
[sources.prices]
topics = ["{prices}"]
format = "json"
primary_key = ["item"]
schema = "item BIGINT, price BIGINT, t TIMESTAMP(3), WATERMARK FOR t AS t - INTERVAL '4' SECOND"

[sources.clicks]
topics = ["{clicks}"]
format = "json"
schema = "id BIGINT, item BIGINT, t TIMESTAMP(3), WATERMARK FOR t AS t - INTERVAL '4' SECOND"

[sinks.priced]
topic = "{out}"
delivery = "exactly-once"
changelog = "debezium"
key = ["id", "item", "price"]

[pipeline]
state_ttl = "3s"
sql = """
INSERT INTO priced
SELECT C.id, C.item, P.price FROM clicks C JOIN prices P ON C.item = P.item
"""
"#
    );
    let config = graph_config_with(
        dir.path(),
        &unique("review-ttl"),
        1,
        &dir.path().join("checkpoints"),
        &sections,
    );
    let price = |item: i64, price: i64, t: i64| {
        (
            0,
            item.to_string(),
            Some(format!(
                r#"{{"item":{item},"price":{price},"t":"{}"}}"#,
                at(t)
            )),
        )
    };
    let click =
        |id: i64, item: i64, t: i64| format!(r#"{{"id":{id},"item":{item},"t":"{}"}}"#, at(t));
    let mut weir = WeirProcess::start(&weir(), &config, &[]);
    weir_testkit::produce_records(
        &prices,
        &[price(1, 10, s(0)), price(2, 20, s(0)), price(3, 30, s(0))],
    );
    weir_testkit::produce(
        &clicks,
        1,
        &[click(1, 1, s(1)), click(2, 2, s(1)), click(3, 3, s(1))],
    );
    let joined = read_topic(
        &out,
        Isolation::Committed,
        Duration::from_secs(60),
        Duration::from_secs(1),
        |r| r.len() >= 3,
    );
    assert_eq!(joined.len(), 3, "{}", log_tail(&weir.log_text()));
    // The prices change after the clicks joined them.
    weir_testkit::produce_records(&prices, &[price(1, 11, s(5)), price(2, 21, s(2))]);
    let row = |id: i64, item: i64, price: i64| serde_json::json!({"id": id, "item": item, "price": price});
    let want = multiset([row(2, 2, 21), row(3, 3, 30)].into_iter());
    let changes = read_topic(
        &out,
        Isolation::Committed,
        Duration::from_secs(60),
        Duration::from_secs(2),
        |r| final_debezium_multiset(r).is_ok_and(|t| t == want),
    );
    let got = final_debezium_multiset(&changes)
        .unwrap_or_else(|e| panic!("the join's changes: {e}; {}", log_tail(&weir.log_text())));
    assert_eq!(
        got,
        want,
        "click 1's row taken back (its new price is 4 s away), click 2's replaced; {}",
        log_tail(&weir.log_text())
    );
    weir.stop(Duration::from_secs(30));
}

/// `weir validate` on `sql`: its exit code and stderr.
fn validate(sections: &str) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    let config = graph_config_with(
        dir.path(),
        &unique("review-validate"),
        1,
        &dir.path().join("checkpoints"),
        sections,
    );
    let out = Command::new(weir())
        .args(["validate", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

/// `CURRENT_WATERMARK` is evaluated again for every row, a retraction
/// too: over an updating result (a table with a primary key, a running
/// aggregate) the update-before would differ from the row it takes back.
/// Refused when planned, naming the column; over an append-only stream
/// it stays allowed. Before, all three were accepted.
#[test]
fn current_watermark_over_an_updating_result_is_refused_naming_the_column() {
    let sources = r#"
[sources.accounts]
topics = ["accounts"]
format = "json"
primary_key = ["id"]
schema = "id BIGINT, balance BIGINT, t TIMESTAMP(3), WATERMARK FOR t AS t - INTERVAL '1' SECOND"

[sources.bids]
topics = ["bids"]
format = "json"
schema = "auction BIGINT, t TIMESTAMP(3), WATERMARK FOR t AS t - INTERVAL '1' SECOND"

[sinks.out]
topic = "out"
"#;
    let job = |sql: &str| format!("{sources}\n[pipeline]\nsql = \"\"\"\n{sql}\n\"\"\"\n");
    // Over a table with a primary key: a Debezium `before` would not
    // equal the previous `after`.
    let (code, err) = validate(&job(
        "INSERT INTO out SELECT id, balance, CURRENT_WATERMARK(t) AS seen_at FROM accounts",
    ));
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("column \"seen_at\" reads CURRENT_WATERMARK over an updating result")
            && err.contains("source.accounts"),
        "{err}"
    );
    // Over a running aggregate's result, through a view.
    let (code, err) = validate(&job("CREATE VIEW per_auction AS
  SELECT auction, COUNT(*) AS n, MAX(t) AS last_t FROM bids GROUP BY auction;
INSERT INTO out SELECT auction, n, CURRENT_WATERMARK(last_t) AS wm FROM per_auction"));
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("column \"wm\" reads CURRENT_WATERMARK over an updating result"),
        "{err}"
    );
    // Over an append-only stream it is what it was.
    let (code, err) = validate(&job(
        "INSERT INTO out SELECT auction, CURRENT_WATERMARK(t) AS wm FROM bids",
    ));
    assert_eq!(code, Some(0), "{err}");
}
