//! The session time zone (`[pipeline] time_zone`) against the real broker:
//! one query groups events by the hour their TIMESTAMP_LTZ shows,
//! `DATE_FORMAT(ts, 'yyyy-MM-dd HH')`, run as two jobs in two zones (New
//! York, whose clocks fall back within the input, and Kolkata, half an
//! hour off UTC's hours), each killed with SIGKILL while it works. Each
//! job's final table, read back read_committed, is checked against DuckDB
//! computing the same hours with the same zone over the same input.

use std::time::Duration;

use weir_testkit::{create_topic, log_tail, unique, Rng};

#[path = "support/graph_jobs.rs"]
mod graph_jobs;
use graph_jobs::*;
#[path = "support/sql_kit.rs"]
mod sql_kit;
use sql_kit::*;
use weir_testkit::sql::*;

/// 2026-10-31 00:00 UTC: New York's clocks fall back from 02:00 EDT to
/// 01:00 EST at 2026-11-01 06:00 UTC, within the input's three days.
const START_MS: i64 = 1_793_404_800_000;
const SPAN_MS: u64 = 3 * 86_400_000;
const EVENTS: usize = 3_000;

fn query() -> &'static str {
    "SELECT DATE_FORMAT(ts, 'yyyy-MM-dd HH') AS h, COUNT(*) AS n, SUM(v) AS total, \
     MIN(ts) AS first_at
     FROM events
     GROUP BY DATE_FORMAT(ts, 'yyyy-MM-dd HH')"
}

/// DuckDB's side: the wall-clock hour in `zone` of each instant, by
/// DuckDB's own time zone conversion (ICU), not weir's.
fn duckdb_query(zone: &str) -> String {
    format!(
        "SELECT strftime(timezone('{zone}', make_timestamptz(ms * 1000)), '%Y-%m-%d %H') AS h,
                count(*) AS n, sum(v) AS total, min(make_timestamptz(ms * 1000)) AS first_at
         FROM events
         GROUP BY 1"
    )
}

#[test]
fn hours_of_a_timestamp_ltz_are_the_session_zones_in_two_zones_under_sigkills() {
    let seed = seed();
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let mut lines = Vec::new();
    let mut events = Vec::new();
    for id in 0..EVENTS {
        let ms = START_MS + rng.below(SPAN_MS) as i64;
        let v = rng.below(1000) as i64;
        let ts = jiff::Timestamp::from_millisecond(ms).unwrap();
        let ts = ts.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string();
        lines.push(serde_json::json!({"id": id, "ms": ms, "v": v}).to_string());
        events.push(serde_json::json!({"id": id, "ms": ms, "ts": ts, "v": v}).to_string());
    }
    std::fs::write(data.join("events.jsonl"), lines.join("\n") + "\n").unwrap();
    for zone in ["America/New_York", "Asia/Kolkata"] {
        let input = unique("tz-events");
        let output = unique("tz-hours");
        create_topic(&input, 2);
        create_topic(&output, 2);
        let sections = format!(
            r#"
[sources.events]
topics = ["{input}"]
format = "json"
schema = "id BIGINT, ms BIGINT, ts TIMESTAMP_LTZ(3), v BIGINT"

[sinks.hours]
topic = "{output}"
delivery = "exactly-once"

[pipeline]
time_zone = "{zone}"
sql = """
INSERT INTO hours
{query};
"""
"#,
            query = query()
        );
        let config = graph_config_with(
            &dir.path().join(zone.replace('/', "-")),
            &unique("tz"),
            2,
            &dir.path().join(zone.replace('/', "-")).join("checkpoints"),
            &sections,
        );
        let chunks: Vec<Vec<String>> = events
            .chunks(EVENTS / 6 + 1)
            .map(<[String]>::to_vec)
            .collect();
        let mut weir = feed_with_kills(
            &Job {
                binary: weir(),
                config: &config,
                env: &[],
            },
            (&input, 2),
            &chunks,
            2,
            &mut rng,
        );
        // `Query` holds its SQL for the whole test run.
        let duckdb: &'static str = Box::leak(duckdb_query(zone).into_boxed_str());
        let q = Query {
            sink: "hours",
            weir: "",
            duckdb,
            updating: true,
            compare: &[],
        };
        assert_matches_duckdb(&q, &output, &data, Duration::from_secs(120), &|| {
            format!("{zone}; seed {seed}; log: {}", log_tail(&weir.log_text()))
        });
        weir.stop(Duration::from_secs(30));
        eprintln!("{zone}: hours exact against DuckDB");
    }
}
