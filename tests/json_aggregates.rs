//! JSON_ARRAYAGG and JSON_OBJECTAGG against the real broker: values per
//! key read from one partition (so their order is the order they were
//! written, on every replay), the job killed with SIGKILL while it works,
//! the final table read back read_committed and checked against DuckDB's
//! JSON of the same rows' values in the same order.

use std::time::Duration;

use weir_testkit::{create_topic, log_tail, unique, Rng};

#[path = "support/graph_jobs.rs"]
mod graph_jobs;
use graph_jobs::*;
#[path = "support/sql_kit.rs"]
mod sql_kit;
use sql_kit::*;
use weir_testkit::sql::*;

const ROWS: usize = 1_500;

#[test]
fn json_arrayagg_and_objectagg_per_key_are_exact_under_sigkills() {
    let seed = seed();
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let mut lines = Vec::new();
    for id in 0..ROWS {
        let k = rng.below(40);
        // Every tenth value NULL: left out of the array (ABSENT ON NULL),
        // `null` in the object (NULL ON NULL), as Flink's defaults.
        let v = if rng.below(10) == 0 {
            serde_json::Value::Null
        } else {
            serde_json::json!(rng.below(1000) as i64 - 500)
        };
        lines.push(
            serde_json::json!({"id": id, "k": k, "tag": format!("t{id}"), "v": v}).to_string(),
        );
    }
    std::fs::write(data.join("tagged.jsonl"), lines.join("\n") + "\n").unwrap();
    let input = unique("jagg-in");
    let output = unique("jagg-out");
    create_topic(&input, 1);
    create_topic(&output, 2);
    let sections = format!(
        r#"
[sources.tagged]
topics = ["{input}"]
format = "json"
schema = "id BIGINT, k BIGINT, tag VARCHAR, v BIGINT"

[sinks.aggs]
topic = "{output}"
delivery = "exactly-once"

[pipeline]
sql = """
INSERT INTO aggs
SELECT k, JSON_ARRAYAGG(v) AS vs, JSON_OBJECTAGG(KEY tag VALUE v) AS by_tag, COUNT(*) AS n
FROM tagged GROUP BY k;
"""
"#
    );
    let config = graph_config_with(
        dir.path(),
        &unique("jagg"),
        2,
        &dir.path().join("checkpoints"),
        &sections,
    );
    let chunks: Vec<Vec<String>> = lines.chunks(ROWS / 6 + 1).map(<[String]>::to_vec).collect();
    let mut weir = feed_with_kills(
        &Job {
            binary: weir(),
            config: &config,
            env: &[],
        },
        (&input, 1),
        &chunks,
        3,
        &mut rng,
    );
    let q = Query {
        sink: "aggs",
        weir: "",
        // json_group_array and json_group_object are macros in DuckDB,
        // which take no ORDER BY: the same JSON from ordered lists.
        duckdb: "SELECT k,
                        coalesce(CAST(to_json(list(v ORDER BY id) FILTER (WHERE v IS NOT NULL)) AS VARCHAR), '[]') AS vs,
                        CAST('{' || string_agg(CAST(to_json(tag) AS VARCHAR) || ':' || coalesce(CAST(to_json(v) AS VARCHAR), 'null'), ',' ORDER BY id) || '}' AS VARCHAR) AS by_tag,
                        count(*) AS n
                 FROM tagged GROUP BY k",
        updating: true,
        compare: &[],
    };
    assert_matches_duckdb(&q, &output, &data, Duration::from_secs(120), &|| {
        format!("seed {seed}; log: {}", log_tail(&weir.log_text()))
    });
    weir.stop(Duration::from_secs(30));
}
