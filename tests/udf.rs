//! User-defined functions against the real broker: Nexmark q14 with its
//! original `count_char` UDF, once written in Rust (registered by the
//! binary examples/nexmark_udf.rs, which is the `weir` binary with its
//! functions) and once as a WebAssembly module named in the TOML
//! (tests/udf/udfs.wat); a table function in both forms; and functions
//! that trap, run out of fuel or panic on some rows. One job, killed with
//! SIGKILL while it works, read back read_committed, checked against
//! DuckDB over the same input.

use std::path::Path;
use std::time::Duration;

use weir_testkit::{create_topic, log_tail, read_topic, unique, Isolation, Rng};

#[path = "support/graph_jobs.rs"]
mod graph_jobs;
use graph_jobs::*;
#[path = "support/sql_kit.rs"]
mod sql_kit;
use sql_kit::*;
use weir_testkit::sql::*;

/// q14 as Nexmark writes it, with `count` standing for its UDF's name.
fn q14(count: &str) -> String {
    format!(
        "SELECT auction, bidder, 0.908 * price AS price,
           CASE
             WHEN HOUR(date_time) >= 8 AND HOUR(date_time) <= 18 THEN 'dayTime'
             WHEN HOUR(date_time) <= 6 OR HOUR(date_time) >= 20 THEN 'nightTime'
             ELSE 'otherTime'
           END AS bid_time_type,
           date_time, extra, {count}(extra, 'c') AS c_counts
         FROM bid
         WHERE 0.908 * price > 1000000 AND 0.908 * price < 50000000"
    )
}

const Q14_DUCKDB: &str = "SELECT auction, bidder, 0.908 * price AS price,
       CASE
         WHEN hour(date_time) >= 8 AND hour(date_time) <= 18 THEN 'dayTime'
         WHEN hour(date_time) <= 6 OR hour(date_time) >= 20 THEN 'nightTime'
         ELSE 'otherTime'
       END AS bid_time_type,
       date_time, extra, length(extra) - length(replace(extra, 'c', '')) AS c_counts
     FROM bid
     WHERE 0.908 * price > 1000000 AND 0.908 * price < 50000000";

const WORDS_DUCKDB: &str = "SELECT auction, bidder, w AS word, strlen(w) AS len
     FROM bid, unnest(string_split(extra || ' ' || channel || ' ' || extra, ' ')) AS t(w)
     WHERE w <> ''";

/// A function that traps (an x in `extra`), one that runs out of fuel (a
/// price under 1000) and one that panics (every seventh auction): a row any
/// of them fails on is a bad record under the source's `on_bad_record`.
/// `bid` dead-letters it and `bid_skipping` (the same bids, on a topic of
/// its own) skips it; the job goes on, and every other row is whole.
const FAULTS_DUCKDB: &str = "SELECT auction, bidder, extra, price,
       strlen(extra) AS fussy, (price - 1000) * 2 AS spun, 2 AS panicked,
       length('é' || extra || 'ü' || channel || 'é')
         - length(replace('é' || extra || 'ü' || channel || 'é', 'é', '')) AS accents
     FROM bid
     WHERE NOT contains(extra, 'x') AND (price IS NULL OR price >= 1000) AND auction % 7 <> 0";

/// The rows the functions fail on: the dead letters of `bid`'s query.
const FAILED_DUCKDB: &str = "SELECT auction, bidder, extra, price FROM bid
     WHERE contains(extra, 'x') OR price < 1000 OR auction % 7 = 0";

/// Evaluated in order, so each fails first on rows of its own: the trap on
/// an x in `extra`, the fuel on a price under 1000, the panic on every
/// seventh auction.
const FAULTS_SQL: &str = "SELECT auction, bidder, extra, price, fussy_length(extra) AS fussy, \
     spin_if_negative(price - 1000) AS spun, \
     panics_on_x(IF(MOD(auction, 7) = 0, 'x', 'ok')) AS panicked, \
     count_char(CONCAT('é', extra, 'ü', channel, 'é'), 'é') AS accents FROM";

/// `[sources.bid_skipping]`: the bids again, with `on_bad_record = "skip"`.
fn skipping_source(topic: &str) -> String {
    format!(
        r#"
[sources.bid_skipping]
topics = ["{topic}"]
format = "json"
schema = """
  auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,
  date_time TIMESTAMP(3), extra VARCHAR,
  WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND
"""
on_bad_record = "skip"
"#
    )
}

fn functions_toml(wat: &Path) -> String {
    let wat = wat.display();
    format!(
        r#"
[functions.count_char]
wasm = "{wat}"
params = ["VARCHAR", "VARCHAR"]
returns = "BIGINT"

[functions.split_words]
wasm = "{wat}"
params = ["VARCHAR"]
columns = ["word VARCHAR", "len BIGINT"]

[functions.fussy_length]
wasm = "{wat}"
params = ["VARCHAR"]
returns = "BIGINT"

[functions.spin_if_negative]
wasm = "{wat}"
params = ["BIGINT"]
returns = "BIGINT"
fuel = 100000
"#
    )
}

#[test]
fn q14_with_count_char_in_rust_and_in_webassembly_is_exact_under_sigkills() {
    let seed = seed();
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().unwrap();
    let Bids { data, bids, flush } = nexmark_bids(dir.path(), seed, 2);
    let bid_topic = unique("udf-bid");
    let dlq = unique("udf-bid-dlq");
    create_topic(&bid_topic, 2);
    create_topic(&dlq, 1);
    let words = "CONCAT(extra, ' ', channel, ' ', extra)";
    let queries: Vec<(&str, String, &str)> = vec![
        ("q14_rust", q14("count_char_rust"), Q14_DUCKDB),
        ("q14_wasm", q14("count_char"), Q14_DUCKDB),
        (
            "words_wasm",
            format!(
                "SELECT auction, bidder, word, len FROM bid, \
                 LATERAL TABLE(split_words({words})) AS T(word, len)"
            ),
            WORDS_DUCKDB,
        ),
        (
            "words_rust",
            format!(
                "SELECT auction, bidder, w AS word, n AS len FROM bid \
                 CROSS JOIN LATERAL TABLE(split_words_rust({words})) AS T(w, n)"
            ),
            WORDS_DUCKDB,
        ),
        ("faults", format!("{FAULTS_SQL} bid"), FAULTS_DUCKDB),
        (
            "faults_skipped",
            format!("{FAULTS_SQL} bid_skipping"),
            FAULTS_DUCKDB,
        ),
        // An aggregate written in Rust, its accumulator (a ROW) in state.
        (
            "span_rust",
            "SELECT auction, price_span(price) AS span, COUNT(*) AS n FROM bid GROUP BY auction"
                .to_string(),
            "SELECT auction, max(price) - min(price) AS span, count(*) AS n FROM bid GROUP BY auction",
        ),
    ];
    let sinks: Vec<(String, String)> = queries
        .iter()
        .map(|(name, _, _)| (name.to_string(), unique(&format!("udf-{name}"))))
        .collect();
    for (_, topic) in &sinks {
        create_topic(topic, 2);
    }
    let sql: String = queries
        .iter()
        .map(|(name, q, _)| format!("INSERT INTO {name}\n{q};\n"))
        .collect();
    let wat = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/udf/udfs.wat");
    // The skipping source reads the same bids from a topic of its own
    // (a topic has one source).
    let skipping_topic = unique("udf-bid-skipping");
    create_topic(&skipping_topic, 2);
    let sections = sql_sections(&bid_topic, &dlq, &sinks, &sql)
        + &skipping_source(&skipping_topic)
        + &functions_toml(&wat);
    let config = graph_config_with(
        dir.path(),
        &unique("udf-nexmark"),
        2,
        &dir.path().join("checkpoints"),
        &sections,
    );
    let mut chunks: Vec<Vec<String>> = bids
        .chunks(bids.len() / 8 + 1)
        .map(<[String]>::to_vec)
        .collect();
    chunks.push(flush);
    let mut weir = feed_with_kills_by(
        &Job {
            binary: example("nexmark_udf"),
            config: &config,
            env: &[],
        },
        chunks.len(),
        4,
        &mut rng,
        |i| {
            weir_testkit::produce(&bid_topic, 2, &chunks[i]);
            weir_testkit::produce(&skipping_topic, 2, &chunks[i]);
        },
    );
    for ((name, _, duckdb_sql), (_, topic)) in queries.iter().zip(&sinks) {
        let q = Query {
            sink: name,
            weir: "",
            duckdb: duckdb_sql,
            updating: *name == "span_rust",
            compare: &[],
        };
        assert_matches_duckdb(&q, topic, &data, Duration::from_secs(90), &|| {
            format!("seed {seed}; log: {}", log_tail(&weir.log_text()))
        });
    }
    // The dead letters: each row a function failed on, once, as JSON,
    // with the error naming the function.
    let failed = duckdb(&data, FAILED_DUCKDB);
    assert!(
        !failed.is_empty(),
        "no row made a function fail; seed {seed}"
    );
    let letters = read_topic(
        &dlq,
        Isolation::Committed,
        Duration::from_secs(60),
        Duration::from_secs(2),
        |r| r.len() >= failed.len(),
    );
    let row = |v: &serde_json::Value| {
        ["auction", "bidder", "extra", "price"]
            .map(|c| canon(&v[c]))
            .join(" ")
    };
    let mut want: Vec<String> = failed.iter().map(row).collect();
    let mut got: Vec<String> = letters.iter().map(|r| row(&json(r))).collect();
    want.sort();
    got.sort();
    assert_eq!(
        got, want,
        "the dead letters are the rows a function failed on; seed {seed}"
    );
    for r in &letters {
        let error = r
            .headers
            .get("weir.function.error")
            .map_or("", String::as_str);
        assert!(
            ["FUSSY_LENGTH", "SPIN_IF_NEGATIVE", "PANICS_ON_X"]
                .iter()
                .any(|f| error.contains(f)),
            "a dead letter names the function that failed: {error:?}"
        );
    }
    let log = weir.log_text();
    weir.stop(Duration::from_secs(30));
    assert!(
        log.matches("job running").count() >= 5,
        "the job was restarted after each kill"
    );
    assert!(
        ["trapped", "ran out of fuel", "panicked"]
            .iter()
            .all(|why| letters.iter().any(|r| r
                .headers
                .get("weir.function.error")
                .is_some_and(|e| e.contains(why)))),
        "each way a function fails is named: {}",
        log_tail(&log)
    );
}

/// `weir validate` names what is wrong with a user-defined function: a
/// module that does not export what the TOML declares, the types of its
/// export, an unknown function with the nearest name, a scalar function
/// called as a table and the other way round.
#[test]
fn validate_names_what_is_wrong_with_a_user_defined_function() {
    let dir = tempfile::tempdir().unwrap();
    let wat = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/udf/udfs.wat");
    let check = |functions: &str, sql: &str| -> String {
        let sinks = vec![("out".to_string(), "udf-validate-out".to_string())];
        let sections = sql_sections("udf-validate-in", "udf-validate-dlq", &sinks, sql) + functions;
        let config = graph_config_with(
            dir.path(),
            "udf-validate",
            1,
            &dir.path().join("checkpoints"),
            &sections,
        );
        let out = std::process::Command::new(weir())
            .args(["validate", "--config"])
            .arg(&config)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout)
    };
    let declared = |export: &str, params: &str| {
        format!(
            "\n[functions.count_char]\nwasm = \"{}\"\nexport = \"{export}\"\nparams = [{params}]\nreturns = \"BIGINT\"\n",
            wat.display()
        )
    };
    let q = "INSERT INTO out SELECT auction, count_char(extra, 'c') AS n FROM bid;";
    let ok = check(&declared("count_char", "\"VARCHAR\", \"VARCHAR\""), q);
    assert!(ok.contains(": ok"), "{ok}");
    let missing = check(&declared("count_chars", "\"VARCHAR\", \"VARCHAR\""), q);
    assert!(
        missing.contains("functions.count_char")
            && missing.contains("exports no function count_chars"),
        "{missing}"
    );
    let types = check(&declared("count_char", "\"BIGINT\", \"VARCHAR\""), q);
    assert!(
        types.contains("(i32, i32, i32, i32) -> (i64)") && types.contains("need (i64, i32, i32)"),
        "{types}"
    );
    let typo = check(
        &declared("count_char", "\"VARCHAR\", \"VARCHAR\""),
        "INSERT INTO out SELECT auction, count_chr(extra, 'c') AS n FROM bid;",
    );
    assert!(typo.contains("did you mean COUNT_CHAR?"), "{typo}");
    let as_table = check(
        &declared("count_char", "\"VARCHAR\", \"VARCHAR\""),
        "INSERT INTO out SELECT auction, n FROM bid, LATERAL TABLE(count_char(extra, 'c')) AS T(n);",
    );
    assert!(
        as_table.contains("unknown table function COUNT_CHAR"),
        "{as_table}"
    );
    let wrong_argument = check(
        &declared("count_char", "\"VARCHAR\", \"VARCHAR\""),
        "INSERT INTO out SELECT auction, count_char(price, 'c') AS n FROM bid;",
    );
    assert!(
        wrong_argument.contains("argument 1 of COUNT_CHAR must be VARCHAR, not BIGINT"),
        "{wrong_argument}"
    );
    let bad_type = check(
        &format!(
            "\n[functions.count_char]\nwasm = \"{}\"\nparams = [\"VARCHR\"]\nreturns = \"BIGINT\"\n",
            wat.display()
        ),
        q,
    );
    assert!(
        bad_type.contains("functions.count_char.params.0")
            && bad_type.contains("unknown type VARCHR"),
        "{bad_type}"
    );
}

/// Under `on_bad_record = "fail"`, a row a function fails on stops the job
/// with an error that names the function, why and the row: at once, not
/// after a loop of restarts that would meet the row again each time.
#[test]
fn a_function_failing_under_on_bad_record_fail_stops_the_job_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let bid_topic = unique("udf-fail-bid");
    let out_topic = unique("udf-fail-out");
    create_topic(&bid_topic, 1);
    create_topic(&out_topic, 1);
    let bid = |auction: u32, extra: &str| {
        format!(
            r#"{{"auction":{auction},"bidder":1,"price":5000,"channel":"c","url":"u","date_time":"2026-12-07T10:00:00.000Z","extra":"{extra}"}}"#
        )
    };
    weir_testkit::produce(
        &bid_topic,
        1,
        &[bid(1, "fine"), bid(2, "an x here"), bid(3, "fine")],
    );
    let sinks = vec![("out".to_string(), out_topic.clone())];
    let wat = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/udf/udfs.wat");
    let sections = sql_sections(
        &bid_topic,
        "unused-dlq",
        &sinks,
        "INSERT INTO out SELECT auction, fussy_length(extra) AS n FROM bid;",
    )
    .replace(
        "on_bad_record = \"dead-letter\"\ndead_letter_topic = \"unused-dlq\"",
        "on_bad_record = \"fail\"",
    ) + &functions_toml(&wat);
    assert!(sections.contains("on_bad_record = \"fail\""));
    let config = graph_config_with(
        dir.path(),
        &unique("udf-fail"),
        1,
        &dir.path().join("checkpoints"),
        &sections,
    );
    let mut weir = weir_testkit::WeirProcess::start(&weir(), &config, &[]);
    let status = weir.wait(Duration::from_secs(120));
    let log = weir.log_text();
    let status = status.unwrap_or_else(|| {
        weir.kill9();
        panic!("weir did not stop: {}", log_tail(&log))
    });
    assert!(!status.success(), "the job failed: {}", log_tail(&log));
    assert!(
        log.contains("FUSSY_LENGTH")
            && log.contains("trapped")
            && log.contains("an x here")
            && log.contains("on_bad_record"),
        "the error names the function, why and the row: {}",
        log_tail(&log)
    );
    assert!(
        log.contains("a restart would not fix this")
            && !log.contains("restarting from the last checkpoint"),
        "it stops at once, without restarts: {}",
        log_tail(&log)
    );
}

/// `weir validate` of the binary with Rust functions refuses a
/// user-defined aggregate without a retract step over an updating result,
/// and DISTINCT in one, each at its line and column.
#[test]
fn validate_refuses_a_user_aggregate_where_it_cannot_be_exact() {
    let dir = tempfile::tempdir().unwrap();
    let check = |sql: &str| -> String {
        let sinks = vec![("out".to_string(), "udf-validate-agg-out".to_string())];
        let sections = sql_sections("udf-validate-agg-in", "udf-validate-agg-dlq", &sinks, sql);
        let config = graph_config_with(
            dir.path(),
            "udf-validate-agg",
            1,
            &dir.path().join("checkpoints"),
            &sections,
        );
        let out = std::process::Command::new(example("nexmark_udf"))
            .args(["validate", "--config"])
            .arg(&config)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout)
    };
    let updating = check(
        "INSERT INTO out SELECT bidder, price_span(top) AS span FROM \
         (SELECT auction, bidder, MAX(price) AS top FROM bid GROUP BY auction, bidder) \
         GROUP BY bidder;",
    );
    assert!(
        updating.contains("PRICE_SPAN over an updating result needs a retract step"),
        "{updating}"
    );
    let distinct = check(
        "INSERT INTO out SELECT auction, price_span(DISTINCT price) AS span FROM bid GROUP BY auction;",
    );
    assert!(
        distinct.contains("DISTINCT in the user-defined aggregate PRICE_SPAN"),
        "{distinct}"
    );
    let fine = check(
        "INSERT INTO out SELECT auction, price_span(price) AS span FROM bid GROUP BY auction;",
    );
    assert!(!fine.contains("error"), "{fine}");
}
