//! The SQL tests' and the Nexmark benchmark's shared parts: the Nexmark
//! input and DuckDB's answers from `tests/sql/reference.py` (an engine that
//! is not weir), the queries with their DuckDB equivalents, and how rows of
//! both engines are compared.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The Python with DuckDB: `WEIR_SQL_PYTHON`, else the virtualenv
/// scripts/setup.sh makes, else `python3`.
pub fn python() -> PathBuf {
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

pub fn reference() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/sql/reference.py")
}

/// Nexmark events (person, auction, bid as JSON lines) in `dir`.
pub fn generate(dir: &Path, events: u64, seed: u64, rate: u32, max_delay_ms: u32) {
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
pub fn duckdb(dir: &Path, sql: &str) -> Vec<serde_json::Value> {
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
pub fn canon(v: &serde_json::Value) -> String {
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
        None => match v.as_str().and_then(canon_timestamp) {
            Some(t) => serde_json::Value::String(t).to_string(),
            None => v.to_string(),
        },
    }
}

/// A UTC timestamp as every engine may write it (`2026-11-30T10:00:05.56Z`,
/// `2026-11-30T10:00Z`, `2026-11-30 10:00:10`) in one form:
/// `2026-11-30T10:00:05.560Z`. None for other text.
pub fn canon_timestamp(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let digits = |r: std::ops::Range<usize>| {
        b.get(r.clone())
            .is_some_and(|x| x.iter().all(u8::is_ascii_digit))
    };
    if b.len() < 16
        || !digits(0..4)
        || b[4] != b'-'
        || !digits(5..7)
        || b[7] != b'-'
        || !digits(8..10)
    {
        return None;
    }
    if !(b[10] == b'T' || b[10] == b' ') || !digits(11..13) || b[13] != b':' || !digits(14..16) {
        return None;
    }
    let mut rest = s[16..].strip_suffix('Z').unwrap_or(&s[16..]);
    let mut seconds = "00";
    if let Some(r) = rest.strip_prefix(':') {
        if r.len() < 2 || !r.as_bytes()[..2].iter().all(u8::is_ascii_digit) {
            return None;
        }
        seconds = &r[..2];
        rest = &r[2..];
    }
    let millis = match rest.strip_prefix('.') {
        None if rest.is_empty() => "000".to_string(),
        Some(f) if !f.is_empty() && f.bytes().all(|c| c.is_ascii_digit()) => {
            format!("{:0<3}", &f[..f.len().min(3)])
        }
        _ => return None,
    };
    Some(format!("{}T{}:{seconds}.{millis}Z", &s[..10], &s[11..16]))
}

pub fn canon_row(v: &serde_json::Value) -> BTreeMap<String, String> {
    v.as_object()
        .expect("a row is a JSON object")
        .iter()
        .map(|(k, x)| (k.clone(), canon(x)))
        .collect()
}

/// The final table of an upsert topic as sorted canonical rows: the last
/// value of each key, a tombstone deleting it. Keys compare as JSON when
/// they are (the sink writes a key's columns in schema order), else as
/// written. An updating result is compared with DuckDB's by this.
pub fn final_upsert_rows(records: &[crate::OutRecord]) -> Vec<BTreeMap<String, String>> {
    let mut t: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for r in records {
        let raw = r.key.clone().unwrap_or_default();
        let key = serde_json::from_str::<serde_json::Value>(&raw).map_or(raw, |k| k.to_string());
        match &r.value {
            None => {
                t.remove(&key);
            }
            Some(v) => {
                t.insert(
                    key,
                    canon_row(&serde_json::from_str(v).expect("JSON output")),
                );
            }
        }
    }
    let mut rows: Vec<_> = t.into_values().collect();
    rows.sort();
    rows
}

/// The final table of a Debezium changelog topic (`{"before","after","op"}`
/// per record, keyed by the result's key) as sorted canonical rows, after
/// checking that every change applies to the table as it is: a `"c"` to a
/// key without a row, a `"d"` to the key's current row. A change committed
/// twice, or an update-after without its update-before, breaks that.
pub fn final_debezium_rows(
    records: &[crate::OutRecord],
) -> Result<Vec<BTreeMap<String, String>>, String> {
    let mut t: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for (i, r) in records.iter().enumerate() {
        let raw = r.key.clone().unwrap_or_default();
        let key = serde_json::from_str::<serde_json::Value>(&raw).map_or(raw, |k| k.to_string());
        let Some(v) = &r.value else {
            return Err(format!("record {i} (key {key}) is a tombstone"));
        };
        let v: serde_json::Value =
            serde_json::from_str(v).map_err(|e| format!("record {i} is not JSON: {e}"))?;
        match (v["op"].as_str(), &v["before"], &v["after"]) {
            (Some("c"), serde_json::Value::Null, after) if after.is_object() => {
                if let Some(old) = t.insert(key.clone(), canon_row(after)) {
                    return Err(format!(
                        "record {i}: \"c\" for key {key}, which has a row ({old:?})"
                    ));
                }
            }
            (Some("d"), before, serde_json::Value::Null) if before.is_object() => {
                let before = canon_row(before);
                match t.remove(&key) {
                    Some(row) if row == before => {}
                    other => {
                        return Err(format!(
                            "record {i}: \"d\" of {before:?} for key {key}, whose row is {other:?}"
                        ))
                    }
                }
            }
            _ => return Err(format!("record {i} is not a Debezium change: {v}")),
        }
    }
    let mut rows: Vec<_> = t.into_values().collect();
    rows.sort();
    Ok(rows)
}

/// The rows a Debezium changelog leaves (a multiset: a result without a
/// key that names its rows, as a join's), after checking each change in
/// topic order: a `"d"` must take away a row that is there. Changes of one
/// row must share a partition (the sink keys them by the row's columns).
pub fn final_debezium_multiset(
    records: &[crate::OutRecord],
) -> Result<Vec<BTreeMap<String, String>>, String> {
    let mut rows: BTreeMap<BTreeMap<String, String>, usize> = BTreeMap::new();
    for (i, r) in records.iter().enumerate() {
        let Some(v) = &r.value else {
            return Err(format!("record {i} is a tombstone"));
        };
        let v: serde_json::Value =
            serde_json::from_str(v).map_err(|e| format!("record {i} is not JSON: {e}"))?;
        match (v["op"].as_str(), &v["before"], &v["after"]) {
            (Some("c"), serde_json::Value::Null, after) if after.is_object() => {
                *rows.entry(canon_row(after)).or_default() += 1;
            }
            (Some("d"), before, serde_json::Value::Null) if before.is_object() => {
                let row = canon_row(before);
                match rows.get_mut(&row) {
                    Some(n) if *n > 1 => *n -= 1,
                    Some(_) => {
                        rows.remove(&row);
                    }
                    None => {
                        return Err(format!("record {i}: \"d\" of {row:?}, which is not there"))
                    }
                }
            }
            _ => return Err(format!("record {i} is not a Debezium change: {v}")),
        }
    }
    Ok(rows
        .into_iter()
        .flat_map(|(r, n)| std::iter::repeat_n(r, n))
        .collect())
}

/// Rows as a sorted multiset.
pub fn multiset(rows: impl Iterator<Item = serde_json::Value>) -> Vec<BTreeMap<String, String>> {
    let mut v: Vec<_> = rows.map(|r| canon_row(&r)).collect();
    v.sort();
    v
}

/// One query of the test job: the sink it writes, weir's SQL, DuckDB's
/// batch equivalent, and whether its result is updating.
#[derive(Clone)]
pub struct Query {
    pub sink: &'static str,
    pub weir: &'static str,
    pub duckdb: &'static str,
    pub updating: bool,
    /// The columns compared with DuckDB's answer, where the job writes more
    /// than a tie lets DuckDB decide (none: every column). The job's rows
    /// are still checked whole for repeated changes.
    pub compare: &'static [&'static str],
}

/// The running counts [`updating_queries`] read (tests/sql_plan.rs,
/// tests/graph_group.rs).
pub const UPDATING_VIEWS: &str =
    "CREATE VIEW per_auction AS SELECT auction, COUNT(*) AS n FROM bid GROUP BY auction;
CREATE VIEW per_bidder_auction AS
  SELECT bidder, auction, COUNT(*) AS n FROM bid GROUP BY bidder, auction;\n";

/// The queries over updating results, with DuckDB's batch equivalents.
pub fn updating_queries() -> Vec<Query> {
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
        // Top-3 per bidder over an updating aggregate: when an auction's
        // count rises past another's, both ranks change (Flink's retract
        // rank: every row of a bidder is kept).
        Query {
            sink: "top3_over_updating",
            weir: "SELECT bidder, auction, n, rn FROM (
                     SELECT bidder, auction, n,
                            ROW_NUMBER() OVER (PARTITION BY bidder ORDER BY n DESC, auction) AS rn
                     FROM per_bidder_auction)
                   WHERE rn <= 3",
            duckdb: "SELECT bidder, auction, n, rn FROM (
                       SELECT bidder, auction, n,
                              row_number() OVER (PARTITION BY bidder ORDER BY n DESC, auction) AS rn
                       FROM (SELECT bidder, auction, count(*) AS n FROM bid GROUP BY bidder, auction))
                     WHERE rn <= 3",
            updating: true,
            compare: &[],
        },
        // N = 1 over an updating aggregate: per count, the highest
        // auction that has it; when that auction's count moves on, the
        // next one takes its place.
        Query {
            sink: "top1_over_updating",
            weir: "SELECT n, auction FROM (
                     SELECT n, auction, ROW_NUMBER() OVER (PARTITION BY n ORDER BY auction DESC) AS rn
                     FROM per_auction)
                   WHERE rn = 1",
            duckdb: "SELECT n, auction FROM (
                       SELECT n, auction, row_number() OVER (PARTITION BY n ORDER BY auction DESC) AS rn
                       FROM (SELECT auction, count(*) AS n FROM bid GROUP BY auction))
                     WHERE rn = 1",
            updating: true,
            compare: &[],
        },
        // SELECT DISTINCT over an append-only input: each row once.
        Query {
            sink: "distinct_append",
            // WHERE 1 = 1 is folded away: no filter.
            weir: "SELECT DISTINCT bidder, channel FROM bid WHERE 1 = 1",
            duckdb: "SELECT DISTINCT bidder, channel FROM bid",
            updating: false,
            compare: &[],
        },
    ]
}

/// Queries straight over a window table function's rows (no GROUP BY):
/// a top-N and a deduplication per window (each window's rows once, when
/// it closes), and the rows themselves with their windows.
pub fn window_row_queries() -> Vec<Query> {
    const BUCKETS: &str =
        "(SELECT *, time_bucket(INTERVAL 10 SECOND, date_time, TIMESTAMP '1970-01-01') AS ws
                            FROM bid WHERE date_time < TIMESTAMP '2030-01-01')";
    vec![
        Query {
            sink: "window_top3",
            weir: "SELECT window_start, window_end, auction, price, rn FROM (
                     SELECT window_start, window_end, auction, price,
                            ROW_NUMBER() OVER (PARTITION BY window_start, window_end
                                               ORDER BY price DESC, date_time) AS rn
                     FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '10' SECOND)))
                   WHERE rn <= 3",
            duckdb: format!(
                "SELECT window_start, window_end, auction, price, rn FROM (
                   SELECT ws AS window_start, ws + INTERVAL 10 SECOND AS window_end, auction, price,
                          row_number() OVER (PARTITION BY ws ORDER BY price DESC, date_time) AS rn
                   FROM {BUCKETS})
                 WHERE rn <= 3"
            )
            .leak(),
            updating: false,
            compare: &[],
        },
        Query {
            sink: "window_dedup",
            weir: "SELECT window_start, window_end, bidder, auction, price, date_time FROM (
                     SELECT *, ROW_NUMBER() OVER (PARTITION BY window_start, window_end, bidder
                                                  ORDER BY date_time DESC, price DESC, auction DESC) AS rn
                     FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '10' SECOND)))
                   WHERE rn = 1",
            duckdb: format!(
                "SELECT window_start, window_end, bidder, auction, price, date_time FROM (
                   SELECT ws AS window_start, ws + INTERVAL 10 SECOND AS window_end,
                          bidder, auction, price, date_time,
                          row_number() OVER (PARTITION BY ws, bidder ORDER BY date_time DESC, price DESC, auction DESC) AS rn
                   FROM {BUCKETS})
                 WHERE rn = 1"
            )
            .leak(),
            updating: false,
            compare: &[],
        },
        // An outer window join of two TVFs' rows: a bid without its
        // auction in the same window is padded once, when the window
        // closes (append-only).
        Query {
            sink: "outer_window_join",
            weir: "SELECT b.auction, b.price, b.window_start, b.window_end, a.seller
                   FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '10' SECOND)) b
                   LEFT JOIN TABLE(TUMBLE(TABLE auction, DESCRIPTOR(date_time), INTERVAL '10' SECOND)) a
                   ON b.auction = a.id AND b.window_start = a.window_start AND b.window_end = a.window_end",
            duckdb: "SELECT b.auction, b.price, b.ws AS window_start, b.ws + INTERVAL 10 SECOND AS window_end,
                            a.seller
                     FROM (SELECT *, time_bucket(INTERVAL 10 SECOND, date_time, TIMESTAMP '1970-01-01') AS ws
                           FROM bid WHERE date_time < TIMESTAMP '2030-01-01') b
                     LEFT JOIN (SELECT *, time_bucket(INTERVAL 10 SECOND, date_time, TIMESTAMP '1970-01-01') AS ws
                                FROM auction WHERE date_time < TIMESTAMP '2030-01-01') a
                     ON b.auction = a.id AND b.ws = a.ws",
            updating: false,
            compare: &[],
        },
        Query {
            sink: "window_rows",
            weir: "SELECT auction, price, window_start, window_end
                   FROM TABLE(HOP(TABLE bid, DESCRIPTOR(date_time), INTERVAL '5' SECOND, INTERVAL '10' SECOND))
                   WHERE MOD(auction, 5) = 0",
            duckdb: "SELECT auction, price, ws AS window_start, ws + INTERVAL 10 SECOND AS window_end
                     FROM (SELECT auction, price,
                                  time_bucket(INTERVAL 5 SECOND, date_time, TIMESTAMP '1970-01-01')
                                    - to_seconds(5 * i) AS ws
                           FROM bid, range(0, 2) t(i))
                     WHERE auction % 5 = 0",
            updating: false,
            compare: &[],
        },
    ]
}

/// Subqueries in WHERE and set operations over the Nexmark streams, each
/// a semi- or anti-join that takes rows back as the other side changes.
pub fn subquery_queries() -> Vec<Query> {
    vec![
        // Persons with no auction, each taken back when one appears.
        Query {
            sink: "not_exists",
            weir: "SELECT DISTINCT id, name FROM person
                   WHERE NOT EXISTS (SELECT * FROM auction WHERE auction.seller = person.id)",
            duckdb: "SELECT DISTINCT id, name FROM person
                     WHERE NOT EXISTS (SELECT * FROM auction WHERE auction.seller = person.id)",
            updating: true,
            compare: &[],
        },
        Query {
            sink: "exists",
            weir: "SELECT DISTINCT id, city FROM person
                   WHERE EXISTS (SELECT * FROM auction WHERE auction.seller = person.id AND category = 10)",
            duckdb: "SELECT DISTINCT id, city FROM person
                     WHERE EXISTS (SELECT * FROM auction WHERE auction.seller = person.id AND category = 10)",
            updating: true,
            compare: &[],
        },
        Query {
            sink: "in_subquery",
            weir: "SELECT DISTINCT bidder FROM bid
                   WHERE auction IN (SELECT id FROM auction WHERE category = 10)",
            duckdb: "SELECT DISTINCT bidder FROM bid
                     WHERE auction IN (SELECT id FROM auction WHERE category = 10)",
            updating: true,
            compare: &[],
        },
        Query {
            sink: "not_in",
            weir: "SELECT DISTINCT id FROM person WHERE id NOT IN (SELECT bidder FROM bid)",
            duckdb: "SELECT DISTINCT id FROM person WHERE id NOT IN (SELECT bidder FROM bid)",
            updating: true,
            compare: &[],
        },
        Query {
            sink: "except",
            weir: "SELECT bidder FROM bid EXCEPT SELECT seller FROM auction",
            duckdb: "SELECT bidder FROM bid EXCEPT SELECT seller FROM auction",
            updating: true,
            compare: &[],
        },
        Query {
            sink: "intersect",
            weir: "SELECT bidder FROM bid INTERSECT SELECT seller FROM auction",
            duckdb: "SELECT bidder FROM bid INTERSECT SELECT seller FROM auction",
            updating: true,
            compare: &[],
        },
        Query {
            sink: "union_distinct",
            weir: "SELECT bidder AS who FROM bid UNION SELECT seller AS who FROM auction",
            duckdb: "SELECT bidder AS who FROM bid UNION SELECT seller AS who FROM auction",
            updating: false,
            compare: &[],
        },
    ]
}

/// OVER aggregations over the bids, ordered by event time: a ROWS frame,
/// a RANGE frame, and the ranking functions with LAG. The far-future
/// flush bids are never passed by the watermark, so never emitted.
pub fn over_queries() -> Vec<Query> {
    vec![
        Query {
            sink: "over_rows",
            weir: "SELECT auction, date_time, price,
                     SUM(price) OVER (PARTITION BY auction ORDER BY date_time, price, bidder
                                      ROWS BETWEEN 10 PRECEDING AND CURRENT ROW) AS s,
                     MAX(price) OVER (PARTITION BY auction ORDER BY date_time, price, bidder
                                      ROWS BETWEEN 10 PRECEDING AND CURRENT ROW) AS m
                   FROM bid",
            duckdb: "SELECT auction, date_time, price,
                       sum(price) OVER (PARTITION BY auction ORDER BY date_time, price NULLS FIRST, bidder
                                        ROWS BETWEEN 10 PRECEDING AND CURRENT ROW) AS s,
                       max(price) OVER (PARTITION BY auction ORDER BY date_time, price NULLS FIRST, bidder
                                        ROWS BETWEEN 10 PRECEDING AND CURRENT ROW) AS m
                     FROM bid WHERE date_time < TIMESTAMP '2030-01-01'",
            updating: false,
            compare: &[],
        },
        Query {
            sink: "over_range",
            weir: "SELECT bidder, date_time,
                     COUNT(*) OVER (PARTITION BY bidder ORDER BY date_time
                                    RANGE BETWEEN INTERVAL '10' SECOND PRECEDING AND CURRENT ROW) AS n,
                     AVG(price) OVER (PARTITION BY bidder ORDER BY date_time
                                      RANGE BETWEEN INTERVAL '10' SECOND PRECEDING AND CURRENT ROW) AS a
                   FROM bid",
            duckdb: "SELECT bidder, date_time,
                       count(*) OVER (PARTITION BY bidder ORDER BY date_time
                                      RANGE BETWEEN INTERVAL 10 SECOND PRECEDING AND CURRENT ROW) AS n,
                       avg(price) OVER (PARTITION BY bidder ORDER BY date_time
                                        RANGE BETWEEN INTERVAL 10 SECOND PRECEDING AND CURRENT ROW) AS a
                     FROM bid WHERE date_time < TIMESTAMP '2030-01-01'",
            updating: false,
            compare: &[],
        },
        // Rows of one time are RANK's peers.
        Query {
            sink: "over_rank",
            weir: "SELECT bidder, date_time,
                     RANK() OVER (PARTITION BY bidder ORDER BY date_time) AS r,
                     DENSE_RANK() OVER (PARTITION BY bidder ORDER BY date_time) AS dr
                   FROM bid",
            duckdb: "SELECT bidder, date_time,
                       rank() OVER (PARTITION BY bidder ORDER BY date_time) AS r,
                       dense_rank() OVER (PARTITION BY bidder ORDER BY date_time) AS dr
                     FROM bid WHERE date_time < TIMESTAMP '2030-01-01'",
            updating: false,
            compare: &[],
        },
        Query {
            sink: "over_row_number",
            weir: "SELECT bidder, date_time, price,
                     ROW_NUMBER() OVER (PARTITION BY bidder ORDER BY date_time, price, auction) AS rn,
                     LAG(price, 1) OVER (PARTITION BY bidder ORDER BY date_time, price, auction) AS prev
                   FROM bid",
            duckdb: "SELECT bidder, date_time, price,
                       row_number() OVER (PARTITION BY bidder ORDER BY date_time, price NULLS FIRST, auction) AS rn,
                       lag(price, 1) OVER (PARTITION BY bidder ORDER BY date_time, price NULLS FIRST, auction) AS prev
                     FROM bid WHERE date_time < TIMESTAMP '2030-01-01'",
            updating: false,
            compare: &[],
        },
    ]
}

/// OVER over an updating result: each bidder's auctions ranked by how
/// often the bidder bid on them, kept current as the counts change (an
/// upsert by the counts' key).
pub fn over_updating_queries() -> Vec<Query> {
    vec![Query {
        sink: "over_updating_rank",
        weir: "SELECT bidder, auction, n,
                 RANK() OVER (PARTITION BY bidder ORDER BY n DESC) AS r,
                 COUNT(*) OVER (PARTITION BY bidder ORDER BY n DESC) AS c
               FROM per_bidder_auction",
        duckdb: "SELECT bidder, auction, n,
                   rank() OVER (PARTITION BY bidder ORDER BY n DESC) AS r,
                   count(*) OVER (PARTITION BY bidder ORDER BY n DESC) AS c
                 FROM (SELECT bidder, auction, count(*) AS n FROM bid GROUP BY bidder, auction)",
        updating: true,
        compare: &[],
    }]
}

/// Queries whose results no key names (their changes go to a Debezium
/// sink, whose changes applied in order leave DuckDB's rows): a UNION ALL
/// of a stream and an aggregate's changes; Nexmark q6 in RisingWave's
/// form (the average of each seller's last ten winning bids, OVER a top-1
/// per auction: Flink SQL cannot run it, its OVER takes no retractions),
/// with the auction id added to both ORDER BYs so that DuckDB's ties do
/// not decide; scalar subqueries, whose values change as their tables do;
/// LEAD and LAG, whose rows change as later rows come.
pub fn debezium_queries() -> Vec<Query> {
    vec![
        Query {
            sink: "union_changes",
            weir: "SELECT auction, price AS v FROM bid WHERE MOD(bidder, 7) = 0
                   UNION ALL
                   SELECT auction, n AS v FROM per_auction",
            duckdb: "SELECT auction, price AS v FROM bid WHERE bidder % 7 = 0
                     UNION ALL SELECT auction, n AS v FROM (SELECT auction, count(*) AS n FROM bid GROUP BY auction)",
            updating: true,
            compare: &[],
        },
        Query {
            sink: "q6_rw",
            weir: "SELECT Q.seller,
                     AVG(Q.final) OVER (PARTITION BY Q.seller ORDER BY Q.date_time, Q.auction
                                        ROWS BETWEEN 10 PRECEDING AND CURRENT ROW) AS avg
                   FROM (
                     SELECT ROW_NUMBER() OVER (PARTITION BY A.id, A.seller ORDER BY B.price DESC, B.date_time, B.bidder) AS rank,
                            A.id AS auction, A.seller, B.price AS final, B.date_time
                     FROM auction AS A, bid AS B
                     WHERE A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.expires
                   ) AS Q
                   WHERE Q.rank <= 1",
            duckdb: "SELECT Q.seller,
                       avg(Q.final) OVER (PARTITION BY Q.seller ORDER BY Q.date_time, Q.auction
                                          ROWS BETWEEN 10 PRECEDING AND CURRENT ROW) AS avg
                     FROM (
                       SELECT row_number() OVER (PARTITION BY A.id, A.seller ORDER BY B.price DESC NULLS LAST, B.date_time, B.bidder) AS rank,
                              A.id AS auction, A.seller, B.price AS final, B.date_time
                       FROM auction AS A, bid AS B
                       WHERE A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.expires
                     ) AS Q
                     WHERE Q.rank <= 1",
            updating: true,
            compare: &[],
        },
        // Scalar subqueries: correlated (a left join with an aggregate per
        // auction, or per seller: COUNT's 0 for a person without
        // auctions), and not (a one-row aggregate every bid meets).
        Query {
            sink: "scalar_correlated",
            weir: "SELECT auction, bidder, price FROM bid b
                   WHERE price > (SELECT AVG(price) FROM bid b2 WHERE b2.auction = b.auction)",
            duckdb: "SELECT auction, bidder, price FROM bid b
                     WHERE price > (SELECT avg(price) FROM bid b2 WHERE b2.auction = b.auction)",
            updating: true,
            compare: &[],
        },
        Query {
            sink: "scalar_in_select",
            weir: "SELECT p.id, p.name,
                     (SELECT COUNT(*) FROM auction a WHERE a.seller = p.id AND a.category = 10) AS auctions
                   FROM person p",
            duckdb: "SELECT p.id, p.name,
                       (SELECT count(*) FROM auction a WHERE a.seller = p.id AND a.category = 10) AS auctions
                     FROM person p",
            updating: true,
            compare: &[],
        },
        Query {
            sink: "scalar_uncorrelated",
            weir: "SELECT auction, bidder, price FROM bid
                   WHERE price >= (SELECT MAX(price) FROM bid WHERE MOD(auction, 10) = 0)",
            duckdb: "SELECT auction, bidder, price FROM bid
                     WHERE price >= (SELECT max(price) FROM bid WHERE auction % 10 = 0)",
            updating: true,
            compare: &[],
        },
        Query {
            sink: "over_lead",
            weir: "SELECT bidder, date_time, price,
                     LEAD(price) OVER (PARTITION BY bidder ORDER BY date_time, price, auction) AS next,
                     LEAD(price, 2, -1) OVER (PARTITION BY bidder ORDER BY date_time, price, auction) AS after_next,
                     LAG(price) OVER (PARTITION BY bidder ORDER BY date_time, price, auction) AS prev
                   FROM bid",
            duckdb: "SELECT bidder, date_time, price,
                       lead(price) OVER (PARTITION BY bidder ORDER BY date_time, price NULLS FIRST, auction) AS next,
                       lead(price, 2, -1) OVER (PARTITION BY bidder ORDER BY date_time, price NULLS FIRST, auction) AS after_next,
                       lag(price) OVER (PARTITION BY bidder ORDER BY date_time, price NULLS FIRST, auction) AS prev
                     FROM bid",
            updating: true,
            compare: &[],
        },
    ]
}

/// Views the queries read (the issue's hot-items example: windows of windows).
pub const VIEWS: &str = "CREATE VIEW counts AS
  SELECT auction, window_start, window_end, COUNT(*) AS num
  FROM TABLE(HOP(TABLE bid, DESCRIPTOR(date_time), INTERVAL '2' SECOND, INTERVAL '10' SECOND))
  GROUP BY auction, window_start, window_end;
";

pub fn queries() -> Vec<Query> {
    vec![
        Query {
            sink: "q0",
            weir: "SELECT auction, bidder, price, date_time, extra FROM bid",
            duckdb: "SELECT auction, bidder, price, date_time, extra FROM bid",
            updating: false,
            compare: &[],
        },
        Query {
            sink: "q1",
            weir: "SELECT auction, bidder, 0.908 * price AS price, date_time, extra FROM bid",
            duckdb: "SELECT auction, bidder, 0.908 * price AS price, date_time, extra FROM bid",
            updating: false,
            compare: &[],
        },
        Query {
            sink: "q2",
            weir: "SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0",
            duckdb: "SELECT auction, price FROM bid WHERE auction % 123 = 0",
            updating: false,
            compare: &[],
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
            compare: &[],
        },
        // Aggregates of #42, over a running (updating) result: variances
        // (exact sums for integers), BOOL_AND/OR, LISTAGG(DISTINCT) in
        // value order. DuckDB's VAR_POP (Welford's method on doubles)
        // differs from the exact variance in the 12th digit, where the
        // comparison looks: its side computes the definition exactly in
        // HUGEINT, with one division in DOUBLE.
        Query {
            sink: "stats",
            weir: "SELECT auction, COUNT(*) AS n, VAR_POP(price) AS var_pop,
                     VAR_SAMP(price) AS var_samp, STDDEV_POP(price) AS sd_pop,
                     STDDEV_SAMP(price) AS sd_samp, BOOL_AND(price > 1000) AS all_above,
                     BOOL_OR(price > 10000000) AS any_huge,
                     LISTAGG(DISTINCT channel) AS channels
                   FROM bid GROUP BY auction",
            duckdb: "SELECT auction, n, var_pop, var_samp, sqrt(var_pop) AS sd_pop,
                       sqrt(var_samp) AS sd_samp, all_above, any_huge, channels
                     FROM (
                       SELECT auction, COUNT(*) AS n,
                         CASE WHEN count(price) > 0 THEN
                           (count(price) * sum(price::HUGEINT * price)
                             - sum(price::HUGEINT) * sum(price::HUGEINT))::DOUBLE
                           / (count(price) * count(price)) END AS var_pop,
                         CASE WHEN count(price) > 1 THEN
                           (count(price) * sum(price::HUGEINT * price)
                             - sum(price::HUGEINT) * sum(price::HUGEINT))::DOUBLE
                           / (count(price) * (count(price) - 1)) END AS var_samp,
                         bool_and(price > 1000) AS all_above,
                         bool_or(price > 10000000) AS any_huge,
                         string_agg(DISTINCT channel, ',' ORDER BY channel) AS channels
                       FROM bid GROUP BY auction)",
            updating: true,
            compare: &[],
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
            compare: &[],
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
            compare: &[],
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
            compare: &[],
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
            compare: &[],
        },
        Query {
            sink: "cumulate",
            weir: "SELECT window_start, window_end, COUNT(*) AS bids, SUM(price) AS volume
                   FROM TABLE(CUMULATE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '5' SECOND, INTERVAL '20' SECOND))
                   GROUP BY window_start, window_end",
            duckdb: "SELECT ws AS window_start, ws + to_seconds(5 * k) AS window_end,
                            count(*) AS bids, sum(price) AS volume
                     FROM (SELECT price, date_time,
                                  time_bucket(INTERVAL 20 SECOND, date_time, TIMESTAMP '1970-01-01') AS ws
                           FROM bid WHERE date_time < TIMESTAMP '2030-01-01'), range(1, 5) t(k)
                     WHERE date_time < ws + to_seconds(5 * k)
                     GROUP BY ws, k",
            updating: false,
            compare: &[],
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
            compare: &[],
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
            compare: &[],
        },
        Query {
            sink: "q15",
            weir: "SELECT DATE_FORMAT(date_time, 'yyyy-MM-dd') AS day,
                          COUNT(*) AS total_bids,
                          COUNT(*) FILTER (WHERE price < 10000) AS rank1_bids,
                          COUNT(*) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bids,
                          COUNT(*) FILTER (WHERE price >= 1000000) AS rank3_bids,
                          COUNT(DISTINCT bidder) AS total_bidders,
                          COUNT(DISTINCT bidder) FILTER (WHERE price < 10000) AS rank1_bidders,
                          COUNT(DISTINCT bidder) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bidders,
                          COUNT(DISTINCT bidder) FILTER (WHERE price >= 1000000) AS rank3_bidders,
                          COUNT(DISTINCT auction) AS total_auctions,
                          COUNT(DISTINCT auction) FILTER (WHERE price < 10000) AS rank1_auctions,
                          COUNT(DISTINCT auction) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_auctions,
                          COUNT(DISTINCT auction) FILTER (WHERE price >= 1000000) AS rank3_auctions
                   FROM bid GROUP BY DATE_FORMAT(date_time, 'yyyy-MM-dd')",
            duckdb: "SELECT strftime(date_time, '%Y-%m-%d') AS day,
                          count(*) AS total_bids,
                          count(*) FILTER (WHERE price < 10000) AS rank1_bids,
                          count(*) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bids,
                          count(*) FILTER (WHERE price >= 1000000) AS rank3_bids,
                          count(DISTINCT bidder) AS total_bidders,
                          count(DISTINCT bidder) FILTER (WHERE price < 10000) AS rank1_bidders,
                          count(DISTINCT bidder) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bidders,
                          count(DISTINCT bidder) FILTER (WHERE price >= 1000000) AS rank3_bidders,
                          count(DISTINCT auction) AS total_auctions,
                          count(DISTINCT auction) FILTER (WHERE price < 10000) AS rank1_auctions,
                          count(DISTINCT auction) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_auctions,
                          count(DISTINCT auction) FILTER (WHERE price >= 1000000) AS rank3_auctions
                     FROM bid GROUP BY strftime(date_time, '%Y-%m-%d')",
            updating: true,
            compare: &[],
        },
        Query {
            sink: "q16",
            weir: "SELECT channel, DATE_FORMAT(date_time, 'yyyy-MM-dd') AS day,
                          MAX(DATE_FORMAT(date_time, 'HH:mm')) AS minute,
                          COUNT(*) AS total_bids,
                          COUNT(*) FILTER (WHERE price < 10000) AS rank1_bids,
                          COUNT(*) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bids,
                          COUNT(*) FILTER (WHERE price >= 1000000) AS rank3_bids,
                          COUNT(DISTINCT bidder) AS total_bidders,
                          COUNT(DISTINCT bidder) FILTER (WHERE price < 10000) AS rank1_bidders,
                          COUNT(DISTINCT bidder) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bidders,
                          COUNT(DISTINCT bidder) FILTER (WHERE price >= 1000000) AS rank3_bidders,
                          COUNT(DISTINCT auction) AS total_auctions,
                          COUNT(DISTINCT auction) FILTER (WHERE price < 10000) AS rank1_auctions,
                          COUNT(DISTINCT auction) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_auctions,
                          COUNT(DISTINCT auction) FILTER (WHERE price >= 1000000) AS rank3_auctions
                   FROM bid GROUP BY channel, DATE_FORMAT(date_time, 'yyyy-MM-dd')",
            duckdb: "SELECT channel, strftime(date_time, '%Y-%m-%d') AS day,
                          max(strftime(date_time, '%H:%M')) AS minute,
                          count(*) AS total_bids,
                          count(*) FILTER (WHERE price < 10000) AS rank1_bids,
                          count(*) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bids,
                          count(*) FILTER (WHERE price >= 1000000) AS rank3_bids,
                          count(DISTINCT bidder) AS total_bidders,
                          count(DISTINCT bidder) FILTER (WHERE price < 10000) AS rank1_bidders,
                          count(DISTINCT bidder) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bidders,
                          count(DISTINCT bidder) FILTER (WHERE price >= 1000000) AS rank3_bidders,
                          count(DISTINCT auction) AS total_auctions,
                          count(DISTINCT auction) FILTER (WHERE price < 10000) AS rank1_auctions,
                          count(DISTINCT auction) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_auctions,
                          count(DISTINCT auction) FILTER (WHERE price >= 1000000) AS rank3_auctions
                     FROM bid GROUP BY channel, strftime(date_time, '%Y-%m-%d')",
            updating: true,
            compare: &[],
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
            compare: &[],
        },
    ]
}

/// A far-future bid per input partition: it moves every partition's
/// watermark past the input, so every window of the input closes. Its
/// own windows never close; the window queries' DuckDB side leaves it out.
pub fn flush_bid() -> String {
    r#"{"auction":999999,"bidder":1,"price":1,"channel":"flush","url":"https://www.nexmark.com/flush/item.htm?query=1","date_time":"2030-06-01T00:00:00.000Z","extra":""}"#.to_string()
}

/// A SQL job's sections: `[sources.bid]` (Nexmark bids as JSON with a
/// 4 s watermark, bad records to `dlq`), one `[sinks.NAME]` per (name,
/// topic), exactly-once, and `[pipeline] sql`.
pub fn sql_sections(bid_topic: &str, dlq: &str, sinks: &[(String, String)], sql: &str) -> String {
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
