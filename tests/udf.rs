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

/// A function that traps, one that runs out of fuel and one that panics:
/// each row's value is NULL where it failed, and the job goes on.
const FAULTS_DUCKDB: &str = "SELECT auction, bidder, extra, price,
       CASE WHEN contains(extra, 'x') THEN NULL ELSE strlen(extra) END AS fussy,
       CASE WHEN price < 1000 THEN NULL ELSE (price - 1000) * 2 END AS spun,
       CASE WHEN contains(extra, 'x') THEN NULL ELSE strlen(extra) END AS panicked,
       length('é' || extra || 'ü' || channel || 'é')
         - length(replace('é' || extra || 'ü' || channel || 'é', 'é', '')) AS accents
     FROM bid";

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
        (
            "faults",
            "SELECT auction, bidder, extra, price, fussy_length(extra) AS fussy, \
             spin_if_negative(price - 1000) AS spun, panics_on_x(extra) AS panicked, \
             count_char(CONCAT('é', extra, 'ü', channel, 'é'), 'é') AS accents FROM bid"
                .to_string(),
            FAULTS_DUCKDB,
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
    let sections = sql_sections(&bid_topic, &dlq, &sinks, &sql) + &functions_toml(&wat);
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
    let mut weir = feed_with_kills(
        &Job {
            binary: example("nexmark_udf"),
            config: &config,
            env: &[],
        },
        (&bid_topic, 2),
        &chunks,
        4,
        &mut rng,
    );
    for ((name, _, duckdb_sql), (_, topic)) in queries.iter().zip(&sinks) {
        let q = Query {
            sink: name,
            weir: "",
            duckdb: duckdb_sql,
            updating: false,
            compare: &[],
        };
        assert_matches_duckdb(&q, topic, &data, Duration::from_secs(90), &|| {
            format!("seed {seed}; log: {}", log_tail(&weir.log_text()))
        });
    }
    let faults = read_topic(
        &sinks[4].1,
        Isolation::Committed,
        Duration::from_secs(30),
        Duration::from_secs(1),
        |_| true,
    );
    let nulls = |column: &str| faults.iter().filter(|r| json(r)[column].is_null()).count();
    assert!(
        nulls("fussy") > 0 && nulls("spun") > 0 && nulls("panicked") > 0,
        "some rows made each function fail; seed {seed}"
    );
    let log = weir.log_text();
    weir.stop(Duration::from_secs(30));
    assert!(
        log.matches("job running").count() >= 5,
        "the job was restarted after each kill"
    );
    assert!(
        log.contains("trapped") && log.contains("ran out of fuel") && log.contains("panicked"),
        "a failing function is logged with why: {}",
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
