//! Every SQL function in weir's registry, against an engine that is not
//! weir: each case's expression runs in weir (compiled as a job compiles
//! it) and in DuckDB (`tests/sql/functions.py`) over the same generated
//! rows, NULLs, empty strings, non-ASCII text, extreme numbers and bad
//! formats among them. Where DuckDB's function means something else than
//! Flink's, the case gives DuckDB an expression that means Flink's (the
//! rule is written beside it), or, for a function DuckDB lacks, the value
//! Flink's documentation gives. Also: every function has at least three
//! cases, every example in the function reference gives its result, and
//! docs/sql.md's reference is the registry's.
//!
//! No broker: these are the functions alone; the SQL job tests run them
//! through Kafka.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{json, Value as Json};
use weir::dataflow::row::{DataType, Value};
use weir::sql::functions::registry;
use weir_testkit::sql::{canon, python};
use weir_testkit::Rng;

/// One column of the test table: weir's name and type, DuckDB's type.
struct Column {
    name: &'static str,
    weir: DataType,
    duckdb: &'static str,
}

fn columns() -> Vec<Column> {
    let c = |name, weir, duckdb| Column { name, weir, duckdb };
    vec![
        c("id", DataType::BigInt, "BIGINT"),
        c("s", DataType::String, "VARCHAR"),
        c("t", DataType::String, "VARCHAR"),
        c("i", DataType::BigInt, "BIGINT"),
        c("n", DataType::BigInt, "BIGINT"),
        c("d", DataType::Double, "DOUBLE"),
        c(
            "x",
            DataType::Decimal {
                precision: 10,
                scale: 2,
            },
            "DECIMAL(10, 2)",
        ),
        c("ts", DataType::Timestamp, "TIMESTAMP"),
        c("u", DataType::Timestamp, "TIMESTAMP"),
        // An instant: given to DuckDB with its offset (+00), shown by both
        // in the session time zone of the run.
        c("l", DataType::TimestampLtz, "TIMESTAMPTZ"),
        c("dt", DataType::Date, "DATE"),
        c("tm", DataType::Time, "TIME"),
        c("b", DataType::Boolean, "BOOLEAN"),
        c("a", DataType::List(Box::new(DataType::String)), "VARCHAR[]"),
        c("j", DataType::String, "VARCHAR"),
        c("url", DataType::String, "VARCHAR"),
    ]
}

/// The values each column draws from: the edges every run has, then
/// random ones.
fn edges(column: &str) -> Vec<Json> {
    match column {
        "s" => json!([
            null,
            "",
            "hello world",
            "Ünïcødé ß straße",
            "日本語テキスト",
            "  padded  ",
            "MiXeD cAsE-word_1 2nd",
            "a,b,,c",
            "aGVsbG8gd29ybGQ=",
            "%E2%82%AC+x%20y",
            "emoji 🎉 ok",
            "tab\there",
            "x%zz",
            "a b&c=d/é~*",
            "ÅÄÖ-åäö"
        ]),
        "t" => json!([null, "", ",", "a", "ab", "é", "日", " ", "xyz", "-_", "ß"]),
        "i" => json!([
            null,
            0,
            1,
            -1,
            42,
            -42,
            255,
            4096,
            i64::MAX,
            i64::MIN,
            1_000_000_000_000i64
        ]),
        "n" => json!([null, -1, 0, 1, 2, 3, 5, 10, 12]),
        "d" => json!([null, 0.0, -0.5, 0.5, 1.0, 2.25, -3.75, 100.0, 1e300, 1e-300, 2.71]),
        "x" => json!([
            null,
            "0.00",
            "12.35",
            "-12.35",
            "99999999.99",
            "-0.01",
            "2.50",
            "-2.50"
        ]),
        "ts" | "u" => json!([
            null,
            "1970-01-01 00:00:00.000",
            "2026-12-07 10:30:00.123",
            "2024-02-29 23:59:59.999",
            "1969-12-31 23:59:59.999",
            "2000-01-31 12:00:00.000",
            "2026-01-04 00:00:00.000",
            "1900-03-01 06:07:08.009",
            "2024-03-31 00:00:00.000",
            // New York's clocks skip this one and show this one twice.
            "2026-03-08 02:30:00.000",
            "2026-11-01 01:30:00.000"
        ]),
        // Daylight saving's edges in New York (a gap on 2026-03-08 at
        // 07:00 UTC, a fold on 2026-11-01 from 05:00 to 07:00 UTC),
        // Kolkata's half hour, and years before the zones' rules.
        "l" => json!([
            null,
            "1970-01-01 00:00:00.000+00",
            "2026-12-07 06:57:04.123+00",
            "2026-03-08 06:59:59.999+00",
            "2026-03-08 07:00:00.000+00",
            "2026-11-01 05:30:00.000+00",
            "2026-11-01 06:30:00.000+00",
            "2024-02-29 18:30:00.000+00",
            "1969-12-31 23:59:59.999+00",
            "1900-03-01 06:07:08.009+00"
        ]),
        "dt" => json!([
            null,
            "1970-01-01",
            "2026-12-07",
            "2024-02-29",
            "1969-12-31",
            "2000-03-01",
            "1900-01-01",
            "2026-03-08",
            "2026-11-01"
        ]),
        "tm" => json!([null, "00:00:00", "23:59:59", "12:00:00", "10:30:15", "01:02:03"]),
        "b" => json!([null, true, false]),
        "a" => json!([
            null,
            [],
            ["a"],
            ["a", null, "c"],
            ["x", "y", "z"],
            ["日本", "ü"]
        ]),
        "j" => json!([
            null,
            "",
            "not json",
            "{\"a\":{\"b\":[1,2,{\"c\":\"x\"}]},\"n\":null,\"s\":\"str\",\"f\":1.5,\"t\":true}",
            "[1,2,3]",
            "{\"a\":1}",
            // Keys out of order, spaces, an escape: JSON_QUERY keeps the
            // document's order.
            "{\"z\": 0, \"a\": {\"y\": [3, 1], \"b\": {\"q\": \"x y\", \"c\": 2}, \"\\u00e9\": 1}}"
        ]),
        "url" => json!([
            null,
            "",
            "http://facebook.com/path1/p.php?k1=v1&k2=v2#Ref1",
            "https://user:pw@weir.dev:8443/a/b.html?x=1&y=two",
            "not a url",
            "ftp://host/file"
        ]),
        _ => json!([]),
    }
    .as_array()
    .unwrap()
    .clone()
}

/// A random value for `column`, new or drawn from its edges.
fn random_value(column: &str, rng: &mut Rng) -> Json {
    let edges = edges(column);
    if rng.below(3) == 0 {
        return edges[rng.below(edges.len() as u64) as usize].clone();
    }
    let letters: Vec<char> = "abcXYZ éü日本 ,-_%+0123".chars().collect();
    let word = |n: u64, rng: &mut Rng| -> String {
        (0..n)
            .map(|_| letters[rng.below(letters.len() as u64) as usize])
            .collect()
    };
    match column {
        "s" | "t" => json!(word(if column == "s" { 12 } else { 2 }, rng)),
        "i" => json!(rng.next_u64() as i64 >> rng.below(60)),
        "n" => json!(rng.below(16) as i64 - 3),
        "d" => json!((rng.below(2_000_000) as f64 - 1_000_000.0) / 1000.0),
        "x" => {
            let cents = rng.below(2_000_000) as i64 - 1_000_000;
            json!(format!("{}.{:02}", cents / 100, (cents % 100).abs()).replace("0.-", "-0."))
        }
        "ts" | "u" => {
            // 1960 to 2040, to the millisecond.
            let ms = rng.below(2_524_608_000_000) as i64 - 315_619_200_000;
            let t = jiff::Timestamp::from_millisecond(ms).unwrap();
            json!(t.strftime("%Y-%m-%d %H:%M:%S%.3f").to_string())
        }
        "l" => {
            // 1960 to 2040, to the millisecond.
            let ms = rng.below(2_524_608_000_000) as i64 - 315_619_200_000;
            let t = jiff::Timestamp::from_millisecond(ms).unwrap();
            json!(format!("{}+00", t.strftime("%Y-%m-%d %H:%M:%S%.3f")))
        }
        "dt" => {
            // 1960 to 2040.
            let ms = (rng.below(29_220) as i64 - 3_653) * 86_400_000;
            let t = jiff::Timestamp::from_millisecond(ms).unwrap();
            json!(t.strftime("%Y-%m-%d").to_string())
        }
        "tm" => {
            let s = rng.below(86_400);
            json!(format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60))
        }
        "b" => json!(rng.below(2) == 0),
        "a" => {
            let n = rng.below(4);
            json!((0..n).map(|_| json!(word(2, rng))).collect::<Vec<_>>())
        }
        _ => edges[rng.below(edges.len() as u64) as usize].clone(),
    }
}

/// The table: one row per edge value of the longest column (each column
/// cycling through its edges), then random rows.
fn rows(seed: u64) -> Vec<Vec<Json>> {
    let columns = columns();
    let longest = columns.iter().map(|c| edges(c.name).len()).max().unwrap();
    let mut rng = Rng::new(seed);
    let mut out = Vec::new();
    for r in 0..longest + 200 {
        let row = columns
            .iter()
            .map(|c| match c.name {
                "id" => json!(r),
                name if r < longest => {
                    let e = edges(name);
                    e[r % e.len()].clone()
                }
                name => random_value(name, &mut rng),
            })
            .collect();
        out.push(row);
    }
    out
}

/// A JSON cell as weir's value of the column's type.
fn weir_value(v: &Json, t: &DataType) -> Value {
    match (v, t) {
        (Json::Null, _) => Value::Null,
        (Json::String(s), DataType::Timestamp) => {
            let ms = weir::dataflow::json::parse_timestamp(s).unwrap();
            Value::Timestamp(ms)
        }
        (Json::String(s), DataType::Time) => {
            Value::Timestamp(weir::dataflow::json::parse_time(s).unwrap())
        }
        (Json::String(s), DataType::Date) => {
            Value::Timestamp(weir::dataflow::json::parse_date(s).unwrap())
        }
        (Json::String(s), DataType::TimestampLtz) => {
            let utc = s.strip_suffix("+00").expect("an instant at +00");
            Value::Timestamp(weir::dataflow::json::parse_timestamp(utc).unwrap())
        }
        (Json::String(s), DataType::Decimal { scale, .. }) => {
            Value::Decimal(weir::dataflow::row::Decimal::parse(s, *scale).unwrap())
        }
        (Json::String(s), _) => Value::String(s.clone()),
        (Json::Bool(b), _) => Value::Bool(*b),
        (Json::Number(n), DataType::Double) => Value::Double(n.as_f64().unwrap()),
        (Json::Number(n), _) => Value::Int(n.as_i64().unwrap()),
        (Json::Array(items), DataType::List(t)) => {
            Value::List(items.iter().map(|i| weir_value(i, t)).collect())
        }
        other => panic!("no weir value for {other:?}"),
    }
}

/// weir's value in the canonical JSON form reference.py gives DuckDB's.
fn canonical(v: &Value) -> Json {
    match v {
        Value::Null => Json::Null,
        Value::Bool(b) => json!(b),
        Value::Int(i) => json!(i),
        Value::Double(d) if d.is_nan() => json!("NaN"),
        Value::Double(d) if d.is_infinite() => {
            json!(if *d > 0.0 { "Infinity" } else { "-Infinity" })
        }
        Value::Double(d) => json!(d),
        Value::Decimal(d) => json!(d.to_string()),
        Value::String(s) => json!(s),
        Value::Bytes(b) => json!(b.iter().map(|x| format!("{x:02x}")).collect::<String>()),
        Value::Timestamp(ms) => json!(weir::dataflow::json::format_timestamp(*ms)),
        Value::List(items) => Json::Array(items.iter().map(canonical).collect()),
        Value::Struct(fields) => Json::Array(fields.iter().map(canonical).collect()),
    }
}

/// One case of the table.
enum Case {
    /// The same rows through weir's expression and DuckDB's.
    Duckdb {
        function: &'static str,
        weir: &'static str,
        duckdb: &'static str,
    },
    /// A constant expression and the value Flink's documentation gives
    /// it (for a function DuckDB lacks or means otherwise).
    Flink {
        function: &'static str,
        weir: &'static str,
        want: Json,
    },
    /// A function weir refuses, with the words of its reason.
    Refused {
        function: &'static str,
        weir: &'static str,
        reason: &'static str,
    },
}

impl Case {
    fn function(&self) -> &'static str {
        match self {
            Case::Duckdb { function, .. }
            | Case::Flink { function, .. }
            | Case::Refused { function, .. } => function,
        }
    }
}

/// A case whose DuckDB expression is weir's, word for word.
fn same(function: &'static str, sql: &'static str) -> Case {
    Case::Duckdb {
        function,
        weir: sql,
        duckdb: sql,
    }
}

fn duck(function: &'static str, weir: &'static str, duckdb: &'static str) -> Case {
    Case::Duckdb {
        function,
        weir,
        duckdb,
    }
}

fn flink(function: &'static str, weir: &'static str, want: Json) -> Case {
    Case::Flink {
        function,
        weir,
        want,
    }
}

fn refused(function: &'static str, weir: &'static str, reason: &'static str) -> Case {
    Case::Refused {
        function,
        weir,
        reason,
    }
}

include!("functions/cases.rs");

/// DuckDB's values for the DuckDB cases, by case index.
fn duckdb_values(
    rows: &[Vec<Json>],
    cases: &[Case],
    zone: &str,
) -> Vec<Option<Result<Vec<Json>, String>>> {
    let doc = json!({
        "zone": zone,
        "columns": columns().iter().map(|c| json!([c.name, c.duckdb])).collect::<Vec<_>>(),
        "rows": rows,
        "cases": cases.iter().enumerate().filter_map(|(i, c)| match c {
            Case::Duckdb { duckdb, .. } => Some(json!({"id": i, "sql": duckdb})),
            _ => None,
        }).collect::<Vec<_>>(),
    });
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sql/functions.py");
    let mut child = Command::new(python())
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python runs tests/sql/functions.py");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(doc.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "tests/sql/functions.py failed (is duckdb installed? scripts/setup.sh does it): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut by_case: Vec<Option<Result<Vec<Json>, String>>> =
        (0..cases.len()).map(|_| None).collect();
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        let v: Json = serde_json::from_str(line).unwrap();
        let i = v["id"].as_u64().unwrap() as usize;
        by_case[i] = Some(match v.get("values") {
            Some(Json::Array(values)) => Ok(values.clone()),
            _ => Err(v["error"].as_str().unwrap_or("?").to_string()),
        });
    }
    by_case
}

/// weir's value of `sql` on each row (an error is NULL, as in a job).
fn weir_values(sql: &str, rows: &[Vec<Json>], zone: &str) -> Result<Vec<Json>, String> {
    let columns = columns();
    let named: Vec<(&str, DataType)> = columns.iter().map(|c| (c.name, c.weir.clone())).collect();
    let compiled = weir::sql::expression_in_zone(sql, &named, zone).map_err(|e| e.to_string())?;
    Ok(rows
        .iter()
        .map(|row| {
            let values: Vec<Value> = row
                .iter()
                .zip(&columns)
                .map(|(v, c)| weir_value(v, &c.weir))
                .collect();
            match (compiled.eval)(&values).unwrap_or(Value::Null) {
                // A DATE is its day, as DuckDB gives it.
                Value::Timestamp(ms) if compiled.data_type() == Some(&DataType::Date) => {
                    json!(weir::dataflow::json::format_date(ms))
                }
                // A TIME, as DuckDB gives it (whole seconds here).
                Value::Timestamp(ms) if compiled.data_type() == Some(&DataType::Time) => {
                    json!(weir::dataflow::json::format_time(ms))
                }
                v => canonical(&v),
            }
        })
        .collect())
}

/// Whether weir's and DuckDB's values are the same: canonically, or as
/// doubles within a relative 1e-12 (canon's 12 digits round 0.9690079916925
/// and 0.9690079916925001 apart).
fn agree(a: &Json, b: &Json) -> bool {
    if canon(a) == canon(b) {
        return true;
    }
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => (x - y).abs() <= 1e-12 * x.abs().max(y.abs()),
        _ => false,
    }
}

fn seed() -> u64 {
    std::env::var("WEIR_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        })
}

/// The session time zones every DuckDB case runs in: UTC, one with
/// daylight saving, one half an hour off the hour.
const ZONES: [&str; 3] = ["UTC", "America/New_York", "Asia/Kolkata"];

#[test]
fn every_function_agrees_with_duckdb_or_flinks_documented_values() {
    let seed = seed();
    let rows = rows(seed);
    let cases = cases();
    let mut failures = Vec::new();
    for zone in ZONES {
        agree_in_zone(&rows, &cases, zone, &mut failures);
    }
    assert!(
        failures.is_empty(),
        "{} disagreements (seed {seed}; WEIR_TEST_SEED={seed} repeats the rows):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Each case in the session time zone `zone`: the DuckDB ones on every
/// row, the others (constants) in UTC only.
fn agree_in_zone(rows: &[Vec<Json>], cases: &[Case], zone: &str, failures: &mut Vec<String>) {
    let duckdb = duckdb_values(rows, cases, zone);
    let utc = zone == "UTC";
    for (i, case) in cases.iter().enumerate() {
        match case {
            Case::Duckdb {
                weir, duckdb: sql, ..
            } => {
                let want = match &duckdb[i] {
                    Some(Ok(v)) => v,
                    Some(Err(e)) => {
                        failures.push(format!("DuckDB refused {sql}: {e}"));
                        continue;
                    }
                    None => panic!("no DuckDB answer for case {i}"),
                };
                let got = match weir_values(weir, rows, zone) {
                    Ok(v) => v,
                    Err(e) => {
                        failures.push(format!("weir refused {weir}: {e}"));
                        continue;
                    }
                };
                for ((row, g), w) in rows.iter().zip(&got).zip(want) {
                    if !agree(g, w) {
                        failures.push(format!(
                            "[{zone}] {weir} (DuckDB: {sql}) on row {}: weir {g}, DuckDB {w}",
                            Json::Array(row.clone())
                        ));
                    }
                }
            }
            _ if !utc => {}
            Case::Flink { weir, want, .. } => match weir_values(weir, &rows[..1], zone) {
                Ok(got) if canon(&got[0]) == canon(want) => {}
                Ok(got) => failures.push(format!("{weir}: weir {}, Flink {want}", got[0])),
                Err(e) => failures.push(format!("weir refused {weir}: {e}")),
            },
            Case::Refused { weir, reason, .. } => match weir_values(weir, &rows[..1], zone) {
                Err(e) if e.contains(reason) => {}
                Err(e) => failures.push(format!("{weir}: refused, but not for {reason:?}: {e}")),
                Ok(v) => failures.push(format!("{weir}: not refused; gave {v:?}")),
            },
        }
    }
}

/// Cases of expressions that are syntax rather than a function by name.
const EXPRESSIONS: [&str; 2] = ["CAST", "INTERVAL"];

#[test]
fn every_function_has_at_least_three_cases() {
    let cases = cases();
    let mut thin = Vec::new();
    for name in registry::names() {
        let n = cases.iter().filter(|c| c.function() == name).count();
        if n < 3 {
            thin.push(format!("{name}: {n}"));
        }
    }
    for c in &cases {
        assert!(
            registry::forms(c.function()).is_some() || EXPRESSIONS.contains(&c.function()),
            "a case for {}, which the registry does not know",
            c.function()
        );
    }
    assert!(
        thin.is_empty(),
        "functions with fewer than 3 cases: {}",
        thin.join(", ")
    );
}

#[test]
fn every_example_in_the_reference_gives_its_result() {
    let mut wrong = Vec::new();
    for f in registry::all() {
        let (call, result) = f.example;
        if call.is_empty() {
            continue;
        }
        let eval = |sql: &str| {
            weir::sql::expression(sql, &[])
                .map_err(|e| e.to_string())
                .and_then(|c| (c.eval)(&[]))
        };
        match (eval(call), eval(result)) {
            (Ok(got), Ok(want)) if canon(&canonical(&got)) == canon(&canonical(&want)) => {}
            (got, want) => wrong.push(format!("{call}: {got:?}, the docs say {result} ({want:?})")),
        }
    }
    assert!(
        wrong.is_empty(),
        "examples that do not hold:\n{}",
        wrong.join("\n")
    );
}

/// Checks that docs/sql.md's section between `begin` and `end` is
/// `generated` (what `source` makes); with `WEIR_BLESS` set, writes it.
fn docs_section_is(begin: &str, end: &str, generated: &str, source: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/sql.md");
    let docs = std::fs::read_to_string(&path).unwrap();
    let (Some(a), Some(b)) = (docs.find(begin), docs.find(end)) else {
        panic!("docs/sql.md has no section generated from {source} between {begin:?} and {end:?}");
    };
    if std::env::var_os("WEIR_BLESS").is_some() {
        let updated = format!("{}{begin}{generated}{}", &docs[..a], &docs[b..]);
        std::fs::write(&path, updated).unwrap();
        return;
    }
    assert!(
        docs[a + begin.len()..b] == *generated,
        "docs/sql.md's reference differs from {source}; \
         WEIR_BLESS=1 cargo test --test functions rewrites it"
    );
}

#[test]
fn the_aggregate_reference_in_the_docs_is_the_catalogs() {
    docs_section_is(
        "<!-- aggregates: generated from src/sql/aggregates.rs; WEIR_BLESS=1 cargo test --test functions rewrites it -->\n",
        "<!-- aggregates: end -->",
        &weir::sql::aggregates::reference_markdown(),
        "src/sql/aggregates.rs",
    );
}

#[test]
fn the_function_reference_in_the_docs_is_the_registrys() {
    docs_section_is(
        "<!-- functions: generated from the registry; WEIR_BLESS=1 cargo test --test functions rewrites it -->\n",
        "<!-- functions: end -->",
        &weir::sql::functions::reference_markdown(),
        "the function registry",
    );
}
