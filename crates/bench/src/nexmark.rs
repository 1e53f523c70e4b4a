//! Nexmark in SQL (issue #19): the same SQL over the same bids in Kafka,
//! weir against Flink SQL, each run checked exact against DuckDB (the
//! batch answer of `tests/sql/reference.py`), rounds interleaved.
//!
//! A run: a fresh input topic with every bid and one far-future bid per
//! partition (it closes every window), a fresh output topic, the system
//! started; the clock stops when the input is committed and the output
//! has stayed unchanged for `SETTLE`. events/s counts every Nexmark event
//! the bids came from (persons and auctions are generated, not read), as
//! Nexmark reports its queries over bids.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;
use weir_testkit::nexmark;
use weir_testkit::sql::{self as kit, Query};
use weir_testkit::{bootstrap, create_topic, read_topic, unique, Isolation};

use crate::measure::{self, ProcessGroup};
use crate::systems::{java_cp, weir_binary, weir_run};
use crate::{input_topic, machine, median, range, save, Measured, SETTLE};

#[derive(Debug, clap::Args)]
pub struct NexmarkArgs {
    /// Queries by name (weir-testkit's `sql::queries` and
    /// `nexmark::join_queries`).
    #[arg(long, default_value = "q0,q1,q2,hot_items,q11,q15,q17,q21,q22")]
    queries: String,
    /// weir, flink (Flink SQL 2.2, bench/peers/flink/SQL.md).
    #[arg(long, default_value = "weir,flink")]
    systems: String,
    /// Nexmark events generated (bids are 46 of every 50).
    #[arg(long, default_value_t = 200_000)]
    events: u64,
    #[arg(long, default_value_t = 3)]
    rounds: u32,
    #[arg(long, default_value_t = 2)]
    parallelism: u32,
    /// The input's formats, each run for every system, interleaved:
    /// `json`, and `avro` (weir reads registry-framed Avro through
    /// `scripts/registry.sh`'s registry, Flink the same rows as plain Avro
    /// in its `avro` format: bench/peers/flink/SQL.md, "Avro").
    #[arg(long, default_value = "json")]
    formats: String,
}

const PARTITIONS: i32 = 4;

/// One run's figures and whether its output was exact.
struct Run {
    measured: Measured,
    /// The broker's CPU seconds over the same span (None: not found).
    broker_cpu_seconds: Option<f64>,
    check: Result<(), String>,
}

pub fn nexmark(args: NexmarkArgs) {
    let data_dir = tempfile::tempdir().unwrap();
    let data = data_dir.path().to_path_buf();
    kit::generate(&data, args.events, 1, 1000, 0);
    // Each table's events, with one far-future event per partition (it
    // closes every window and moves every watermark past the input).
    let mut tables: BTreeMap<&'static str, Vec<String>> = BTreeMap::new();
    for (table, flush) in [
        ("person", nexmark::flush_person()),
        ("auction", nexmark::flush_auction()),
        ("bid", kit::flush_bid()),
    ] {
        let file = data.join(format!("{table}.jsonl"));
        let mut lines: Vec<String> = std::fs::read_to_string(&file)
            .unwrap()
            .lines()
            .map(String::from)
            .collect();
        lines.extend((0..PARTITIONS).map(|_| flush.clone()));
        std::fs::write(&file, lines.join("\n") + "\n").unwrap();
        tables.insert(table, lines);
    }
    // `hot-items` (the spelling) is the sink `hot_items`.
    let names: Vec<String> = args
        .queries
        .split(',')
        .map(|q| q.trim().replace('-', "_"))
        .collect();
    let wanted: Vec<&str> = names.iter().map(String::as_str).collect();
    // The Nexmark queries, and #40's operators over updating input, over
    // window TVF rows, as semi- and anti-joins and OVER (those whose result
    // a key names: the bench reads an upsert or append-only sink).
    let known = || {
        kit::queries()
            .into_iter()
            .chain(nexmark::join_queries())
            .chain([pipe()])
            .chain(kit::updating_queries())
            .chain(kit::window_row_queries())
            .chain(kit::subquery_queries())
            .chain(kit::over_queries())
            .chain(kit::over_updating_queries())
    };
    // By name, the first of that name (Nexmark's `window_top3` before the
    // test kit's top-3 over TUMBLE's rows).
    let queries: Vec<Query> = wanted
        .iter()
        .map(|w| {
            known().find(|q| q.sink == *w).unwrap_or_else(|| {
                panic!(
                    "unknown query {w}; known: {:?}",
                    known().map(|q| q.sink).collect::<Vec<_>>()
                )
            })
        })
        .collect();
    let formats: Vec<&str> = args.formats.split(',').map(str::trim).collect();
    for f in &formats {
        assert!(
            ["json", "avro"].contains(f),
            "unknown format {f}: json or avro"
        );
    }
    // Each system in each format, as `system` or `system/avro`.
    let systems: Vec<String> = args
        .systems
        .split(',')
        .map(str::trim)
        .flat_map(|s| {
            formats.iter().map(move |f| match *f {
                "json" => s.to_string(),
                f => format!("{s}/{f}"),
            })
        })
        .collect();
    let expected: HashMap<&str, Vec<BTreeMap<String, String>>> = queries
        .iter()
        .map(|q| {
            (
                q.sink,
                kit::multiset(kit::duckdb(&data, q.duckdb).into_iter()),
            )
        })
        .collect();
    eprintln!(
        "{} events, {} bids; expected rows: {}",
        args.events,
        tables["bid"].len(),
        queries
            .iter()
            .map(|q| format!("{} {}", q.sink, expected[q.sink].len()))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut eps: BTreeMap<(String, String), Vec<f64>> = BTreeMap::new();
    let mut cpu: BTreeMap<(String, String), Vec<f64>> = BTreeMap::new();
    let mut rss: BTreeMap<(String, String), Vec<f64>> = BTreeMap::new();
    let mut broker: BTreeMap<(String, String), Vec<f64>> = BTreeMap::new();
    let mut rows = Vec::new();
    for round in 0..args.rounds {
        for q in &queries {
            for system in &systems {
                if q.sink == "pipe" && !system.starts_with("weir") {
                    continue; // the pipe is weir's only
                }
                eprintln!("round {round}: {} {system}", q.sink);
                let result = run_once(
                    system,
                    q,
                    &tables,
                    &data,
                    args.parallelism,
                    &expected[q.sink],
                );
                let key = (q.sink.to_string(), system.to_string());
                match result {
                    Ok(run) => {
                        let m = &run.measured;
                        let rate = args.events as f64 / m.seconds;
                        let cpu_per_m = m.cpu_seconds / args.events as f64 * 1e6;
                        let broker_per_m =
                            run.broker_cpu_seconds.map(|b| b / args.events as f64 * 1e6);
                        let check = run.check.clone().err().unwrap_or_else(|| "exact".into());
                        eprintln!(
                            "  {:.2}s, {rate:.0} events/s, {cpu_per_m:.2} CPU-s per 1M events \
                             (broker {}), {:.0} MB, {check}",
                            m.seconds,
                            broker_per_m.map_or("?".into(), |b| format!("{b:.2}")),
                            m.peak_rss_mb
                        );
                        rows.push(json!({"round": round, "query": q.sink, "system": system,
                            "seconds": m.seconds, "events_per_second": rate,
                            "cpu_s_per_million_events": cpu_per_m, "peak_rss_mb": m.peak_rss_mb,
                            "broker_cpu_s_per_million_events": broker_per_m,
                            "check": check}));
                        if let (Ok(()), Some(b)) = (&run.check, broker_per_m) {
                            broker.entry(key.clone()).or_default().push(b);
                        }
                        if run.check.is_ok() {
                            eps.entry(key.clone()).or_default().push(rate);
                            cpu.entry(key.clone()).or_default().push(cpu_per_m);
                            rss.entry(key).or_default().push(m.peak_rss_mb);
                        }
                    }
                    Err(e) => {
                        eprintln!("  failed: {e}");
                        rows.push(
                            json!({"round": round, "query": q.sink, "system": system, "error": e}),
                        );
                    }
                }
            }
        }
    }
    println!(
        "| query | system | events/s median (min–max) | CPU-s per 1M events median (min–max) | broker CPU-s per 1M events median (min–max) | peak RSS MB median | rounds exact |"
    );
    println!("|---|---|---|---|---|---|---|");
    for q in &queries {
        for system in &systems {
            if q.sink == "pipe" && !system.starts_with("weir") {
                continue;
            }
            let key = (q.sink.to_string(), system.to_string());
            let (Some(r), Some(c), Some(m)) = (eps.get(&key), cpu.get(&key), rss.get(&key)) else {
                println!(
                    "| {} | {system} | failed | | | | 0 of {} |",
                    q.sink, args.rounds
                );
                continue;
            };
            let (rmin, rmax) = range(r);
            let (cmin, cmax) = range(c);
            let brokers = broker.get(&key).map_or("?".to_string(), |b| {
                let (bmin, bmax) = range(b);
                format!("{:.2} ({bmin:.2}–{bmax:.2})", median(b.clone()))
            });
            println!(
                "| {} | {system} | {:.0} ({rmin:.0}–{rmax:.0}) | {:.2} ({cmin:.2}–{cmax:.2}) | {brokers} | {:.0} | {} of {} |",
                q.sink,
                median(r.clone()),
                median(c.clone()),
                median(m.clone()),
                r.len(),
                args.rounds
            );
        }
    }
    save(
        "nexmark",
        json!({"machine": machine(), "events": args.events, "partitions": PARTITIONS,
               "formats": formats,
               "parallelism": args.parallelism, "rounds": args.rounds, "results": rows}),
    );
}

/// The bare consume → produce pipe of q0's rows, to price the per-record
/// cost of SQL's projection and expressions: `SELECT *` over a table of
/// exactly q0's columns plans no operator between the source's decoder
/// and the sink's encoder (weir only; see [`weir_job`]).
fn pipe() -> Query {
    let q0 = kit::queries()
        .into_iter()
        .find(|q| q.sink == "q0")
        .expect("q0");
    Query {
        sink: "pipe",
        weir: "SELECT * FROM bid",
        duckdb: q0.duckdb,
        updating: false,
        compare: &[],
    }
}

/// The Nexmark tables `q` reads (through its views too).
fn tables_read(q: &Query) -> Vec<&'static str> {
    nexmark::tables_of(&format!("{}{}", views_for(q), q.weir))
}

/// One Nexmark table written to its own input topic for a run.
struct TableInput {
    table: &'static str,
    topic: String,
    /// Each partition's end offset once every event is written.
    ends: Vec<(i32, i64)>,
}

fn run_once(
    system: &str,
    q: &Query,
    tables: &BTreeMap<&'static str, Vec<String>>,
    data: &Path,
    parallelism: u32,
    expected: &[BTreeMap<String, String>],
) -> Result<Run, String> {
    let (system, format) = system.split_once('/').unwrap_or((system, "json"));
    // A topic per table the query reads, each with every event.
    let inputs: Vec<TableInput> = tables_read(q)
        .into_iter()
        .map(|table| {
            let (topic, ends) = match format {
                "avro" => avro_topic(table, data, system == "weir"),
                _ => input_topic(&format!("nexmark-{table}"), PARTITIONS, &tables[table]),
            };
            TableInput { table, topic, ends }
        })
        .collect();
    let topics: Vec<(&str, &str)> = inputs.iter().map(|i| (i.table, i.topic.as_str())).collect();
    let output = unique(&format!("nexmark-{}", q.sink));
    create_topic(&output, PARTITIONS);
    let dir = tempfile::tempdir().unwrap();
    let name = unique("nexmark");
    let (argv, group, env) = match system {
        "weir" => weir_job(dir.path(), &name, &topics, &output, q, parallelism, format),
        "flink" => flink_job(dir.path(), &name, &topics, &output, q, parallelism, format),
        other => return Err(format!("unknown system {other}")),
    };
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let started = Instant::now();
    let broker_at_start = measure::broker_cpu_seconds();
    let mut broker_at_change = broker_at_start;
    let mut pg = ProcessGroup::start(&[argv], &dir.path().join("system.log"), &env);
    let client = measure::consumer(&group);
    let total: i64 = inputs
        .iter()
        .flat_map(|i| i.ends.iter().map(|(_, e)| e))
        .sum();
    let (mut last_end, mut last_change, mut cpu_at_change) = (-1i64, Instant::now(), 0.0);
    let timeout = Duration::from_secs(1200);
    loop {
        let committed = inputs
            .iter()
            .map(|i| measure::committed_total_with(&client, &i.topic, &i.ends))
            .sum::<i64>()
            >= total;
        let end: i64 = measure::end_offsets_with(&client, &output)
            .iter()
            .map(|(_, e)| e)
            .sum();
        if end != last_end {
            last_end = end;
            last_change = Instant::now();
            cpu_at_change = pg.cpu_seconds();
            broker_at_change = measure::broker_cpu_seconds();
        }
        if committed && last_end > 0 && last_change.elapsed() >= SETTLE {
            break;
        }
        if pg.any_exited() {
            let log = std::fs::read_to_string(dir.path().join("system.log")).unwrap_or_default();
            pg.kill();
            return Err(format!(
                "{system} exited early: {}",
                weir_testkit::log_tail(&log)
            ));
        }
        if started.elapsed() > timeout {
            pg.kill();
            return Err(format!("{system} did not finish within {timeout:?}"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let measured = Measured {
        seconds: last_change.duration_since(started).as_secs_f64(),
        cpu_seconds: cpu_at_change,
        peak_rss_mb: pg.peak_rss_mb(),
    };
    pg.stop(Duration::from_secs(60));
    let records = read_topic(
        &output,
        Isolation::Committed,
        Duration::from_secs(60),
        Duration::from_secs(2),
        |_| true,
    );
    let got = if q.updating {
        kit::final_upsert_rows(&records)
    } else {
        kit::multiset(records.iter().filter_map(|r| {
            r.value
                .as_deref()
                .map(|v| serde_json::from_str(v).expect("JSON output"))
        }))
    };
    // A query compared on some columns (ties decide the rest), on both
    // sides.
    let compared = |rows: Vec<BTreeMap<String, String>>| {
        if q.compare.is_empty() {
            return rows;
        }
        let mut rows: Vec<_> = rows
            .into_iter()
            .map(|mut r| {
                r.retain(|k, _| q.compare.contains(&k.as_str()));
                r
            })
            .collect();
        rows.sort();
        rows
    };
    let got = compared(got);
    let expected = compared(expected.to_vec());
    let check = if got == expected {
        Ok(())
    } else {
        Err(format!(
            "NOT EXACT: {} rows, {} expected; first difference: {:?}",
            got.len(),
            expected.len(),
            got.iter().zip(&expected).find(|(a, b)| a != b)
        ))
    };
    let broker_cpu_seconds = broker_at_start
        .zip(broker_at_change)
        .map(|(start, end)| end - start);
    Ok(Run {
        measured,
        broker_cpu_seconds,
        check,
    })
}

type Launch = (Vec<String>, String, Vec<(String, String)>);

fn weir_job(
    dir: &Path,
    name: &str,
    inputs: &[(&str, &str)],
    output: &str,
    q: &Query,
    p: u32,
    format: &str,
) -> Launch {
    let sql = format!("{}INSERT INTO {}\n{};\n", views_for(q), q.sink, q.weir);
    let mut sections = match inputs {
        [("bid", input)] => kit::sql_sections(
            input,
            &unique("nexmark-dlq"),
            &[(q.sink.to_string(), output.to_string())],
            &sql,
        ),
        _ => format!(
            "{}\n[sinks.{}]\ntopic = \"{output}\"\ndelivery = \"exactly-once\"\n\n[pipeline]\nsql = \"\"\"\n{sql}\n\"\"\"\n",
            nexmark::source_sections(inputs.iter().copied()),
            q.sink
        ),
    };
    if q.sink == "pipe" {
        // The table has q0's columns only, so `SELECT *` is q0's result.
        let unread = "channel VARCHAR, url VARCHAR,";
        assert!(sections.contains(unread), "the bid schema changed");
        sections = sections.replace(unread, "");
    }
    if format == "avro" {
        // The same columns, read from registry-framed Avro.
        let json = "format = \"json\"\n";
        assert!(sections.contains(json), "the sources are JSON");
        sections = sections.replace(json, "format = \"avro\"\nregistry = \"main\"\n")
            + &format!("\n[registries.main]\nurl = \"{}\"\n", registry_url());
    }
    let toml = format!(
        "[job]\nname = \"{name}\"\nparallelism = {p}\nmax_parallelism = 128\n\n\
         [kafka]\nbootstrap_servers = \"{b}\"\ngroup_id = \"{name}\"\n\n\
         [checkpoint]\ninterval = \"1s\"\ndir = \"{chk}\"\n\n\
         [state]\ndir = \"{state}\"\n\n[admin]\nlisten = \"127.0.0.1:0\"\n{sections}",
        b = bootstrap(),
        chk = dir.join("checkpoints").display(),
        state = dir.join("state").display(),
    );
    let config = dir.join("weir.toml");
    std::fs::write(&config, toml).unwrap();
    (
        weir_run(&weir_binary(), &config),
        name.to_string(),
        vec![("RUST_LOG".into(), crate::systems::weir_log_filter())],
    )
}

/// The views a query reads (the hot-items query reads `counts`; the
/// queries over updating input the running counts).
fn views_for(q: &Query) -> &'static str {
    if q.weir.contains("FROM counts") {
        kit::VIEWS
    } else if q.weir.contains("per_auction") || q.weir.contains("per_bidder_auction") {
        kit::UPDATING_VIEWS
    } else {
        ""
    }
}

fn flink_job(
    dir: &Path,
    name: &str,
    inputs: &[(&str, &str)],
    output: &str,
    q: &Query,
    p: u32,
    format: &str,
) -> Launch {
    let sql_file = dir.join("job.sql");
    std::fs::write(&sql_file, flink_sql(name, inputs, output, q, format)).unwrap();
    let argv = [
        vec!["java".to_string(), "-Xmx2g".into()],
        crate::systems::FLINK_OPENS
            .iter()
            .map(|s| s.to_string())
            .collect(),
        vec![
            "-cp".into(),
            java_cp("flink"),
            "weirbench.FlinkSqlJob".into(),
            "--sql".into(),
            sql_file.display().to_string(),
            "--checkpoints".into(),
            dir.join("checkpoints").display().to_string(),
            "--parallelism".into(),
            p.to_string(),
            "--interval".into(),
            "1s".into(),
        ],
    ]
    .concat();
    (argv, name.to_string(), Vec::new())
}

/// The Flink SQL job (bench/peers/flink/SQL.md): the bid table over
/// `input`, the sink table over `output` with the columns and key weir's
/// planner gives the query (`weir explain`), the views, and the INSERT.
/// Flink's `AVG` of a BIGINT is a truncated BIGINT; the query averages a
/// DOUBLE instead, which is what DuckDB and weir compute.
fn flink_sql(name: &str, inputs: &[(&str, &str)], output: &str, q: &Query, format: &str) -> String {
    // Plain Avro with the schema Flink derives from the DDL
    // (bench/peers/avro/*.avsc), event times as timestamp-millis.
    let source_format = match format {
        "avro" => "'format' = 'avro', 'avro.timestamp_mapping.legacy' = 'false'",
        _ => "'format' = 'json', 'json.timestamp-format.standard' = 'ISO-8601'",
    };
    let (columns, key) = result_schema(q);
    // Flink plans SELECT DISTINCT as a group aggregate, whose result is
    // updating even over an append-only input, and its plain Kafka sink
    // refuses that: it writes to an upsert sink keyed by the whole row
    // (each row once, as weir's append-only result).
    let key = key.or_else(|| {
        q.weir
            .trim_start()
            .to_ascii_uppercase()
            .starts_with("SELECT DISTINCT")
            .then(|| columns.iter().map(|(c, _)| c.clone()).collect())
    });
    let b = bootstrap();
    let mut ddl: Vec<String> = columns
        .iter()
        .map(|(c, t)| format!("  `{c}` {}", flink_type(c, t)))
        .collect();
    let connector = match &key {
        Some(k) => {
            ddl.push(format!(
                "  PRIMARY KEY ({}) NOT ENFORCED",
                k.iter()
                    .map(|c| format!("`{c}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
            "'connector' = 'upsert-kafka', 'key.format' = 'json', 'value.format' = 'json', \
             'value.json.timestamp-format.standard' = 'ISO-8601', \
             'value.json.encode.decimal-as-plain-number' = 'true'"
                .to_string()
        }
        None => "'connector' = 'kafka', 'format' = 'json', \
                 'json.timestamp-format.standard' = 'ISO-8601', \
                 'json.encode.decimal-as-plain-number' = 'true'"
            .to_string(),
    };
    // `day` and `minute` are reserved words in Flink SQL: quoted there (and
    // so is every sink's name: `exists`, `except` and `intersect` are too).
    let query = q
        .weir
        .replace("AVG(price)", "AVG(CAST(price AS DOUBLE))")
        .replace("AVG(Q.final)", "AVG(CAST(Q.final AS DOUBLE))")
        .replace("AS day", "AS `day`")
        .replace("AS minute", "AS `minute`");
    // The tables as weir declares them, event times read as instants.
    let sources: String = inputs
        .iter()
        .map(|(table, input)| {
            let (_, schema) = nexmark::SCHEMAS
                .iter()
                .find(|(t, _)| t == table)
                .expect("a Nexmark table");
            let columns = schema
                .replace("VARCHAR", "STRING")
                .replace("TIMESTAMP(3)", "TIMESTAMP_LTZ(3)");
            format!(
                "CREATE TABLE {table} (
  {columns},
  WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND
) WITH (
  'connector' = 'kafka', 'topic' = '{input}',
  'properties.bootstrap.servers' = '{b}', 'properties.group.id' = '{name}',
  'properties.isolation.level' = 'read_committed', 'scan.startup.mode' = 'earliest-offset',
  {source_format}
);
"
            )
        })
        .collect();
    format!(
        "{sources}CREATE TABLE `{sink}` (
{columns}
) WITH (
  {connector}, 'topic' = '{output}',
  'properties.bootstrap.servers' = '{b}',
  'properties.transaction.timeout.ms' = '600000',
  'sink.delivery-guarantee' = 'exactly-once', 'sink.transactional-id-prefix' = '{name}'
);
{views}INSERT INTO `{sink}`
{query};
",
        sink = q.sink,
        columns = ddl.join(",\n"),
        views = views_for(q),
    )
}

/// A result column's type in Flink: event time is TIMESTAMP_LTZ (it is
/// read as an instant), a window's bounds are TIMESTAMP (UTC here).
fn flink_type(column: &str, weir_type: &str) -> String {
    match weir_type {
        "VARCHAR" => "STRING".into(),
        // A source's own times (`date_time`, `expires`, and q9's
        // `bid_date_time`) keep their type; a window's bounds do not.
        "TIMESTAMP(3)" if column.contains("date_time") || column == "expires" => {
            "TIMESTAMP_LTZ(3)".into()
        }
        t => t.to_string(),
    }
}

/// The query's result columns (name, type) and upsert key, as weir's
/// planner gives them (`weir explain`).
fn result_schema(q: &Query) -> (Vec<(String, String)>, Option<Vec<String>>) {
    let dir = tempfile::tempdir().unwrap();
    let tables: Vec<(&str, &str)> = tables_read(q).into_iter().map(|t| (t, t)).collect();
    let (argv, _, _) = weir_job(dir.path(), "schema", &tables, "out", q, 1, "json");
    let config = argv.last().expect("--config FILE").clone();
    let out = std::process::Command::new(weir_binary())
        .args(["explain", "--config", &config])
        .output()
        .expect("weir explain");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "weir explain: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sink_line = text
        .lines()
        .find(|l| {
            l.trim_start()
                .starts_with(&format!("{}.sink (kafka-sink)", q.sink))
        })
        .unwrap_or_else(|| panic!("no sink line in {text}"));
    let schema = sink_line.split_once(": ").map_or("", |(_, r)| r);
    let mut columns = Vec::new();
    let (mut depth, mut start) = (0, 0);
    let bytes: Vec<char> = schema.chars().collect();
    for (i, c) in bytes.iter().enumerate() {
        match c {
            '(' | '<' => depth += 1,
            ')' | '>' => depth -= 1,
            ',' if depth == 0 => {
                columns.push(bytes[start..i].iter().collect::<String>());
                start = i + 1;
            }
            _ => {}
        }
    }
    columns.push(bytes[start..].iter().collect::<String>());
    let columns = columns
        .iter()
        .map(|c| {
            let c = c.trim();
            let (n, t) = c.split_once(' ').expect("name TYPE");
            (n.to_string(), t.to_string())
        })
        .collect();
    let key = text
        .lines()
        .find(|l| l.trim_start().starts_with(&format!("{} -> topic", q.sink)))
        .and_then(|l| l.split_once("upsert by (").map(|(_, r)| r))
        .and_then(|r| r.split_once(')').map(|(k, _)| k))
        .map(|k| k.split(", ").map(String::from).collect());
    (columns, key)
}

/// The registry's Confluent API (`scripts/registry.sh env`).
fn registry_url() -> String {
    std::env::var("WEIR_REGISTRY_URL")
        .unwrap_or_else(|_| "http://127.0.0.1:8081/apis/ccompat/v7".to_string())
}

/// A new topic of `table`'s events in Avro, written by
/// bench/peers/avro_topics.py (confluent-kafka): registry-framed for weir,
/// plain for Flink. Returns the topic and its end offsets.
fn avro_topic(table: &str, data: &Path, framed: bool) -> (String, Vec<(i32, i64)>) {
    let topic = unique(&format!("nexmark-avro-{table}"));
    create_topic(&topic, PARTITIONS);
    let python = std::env::var_os("WEIR_FORMATS_PYTHON")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::PathBuf::from(std::env::var_os("HOME").expect("HOME"))
                .join(".cache/weir/formats-venv/bin/python")
        });
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/peers/avro_topics.py");
    let started = Instant::now();
    let out = std::process::Command::new(python)
        .arg(script)
        .args(["--table", table, "--partitions", &PARTITIONS.to_string()])
        .arg("--input")
        .arg(data.join(format!("{table}.jsonl")))
        .args([if framed { "--framed" } else { "--plain" }, &topic])
        .args(["--registry", &registry_url(), "--bootstrap", &bootstrap()])
        .output()
        .expect("bench/peers/avro_topics.py runs (tests/formats/venv.sh installs its packages)");
    assert!(
        out.status.success(),
        "avro_topics.py {table}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("avro_topics.py prints JSON");
    let side = if framed { "framed" } else { "plain" };
    let ends = report[side]["ends"]
        .as_array()
        .expect("end offsets")
        .iter()
        .map(|e| (e[0].as_i64().unwrap() as i32, e[1].as_i64().unwrap()))
        .collect();
    eprintln!(
        "{} Avro records written to {topic} ({side}) in {:.1}s",
        report["records"],
        started.elapsed().as_secs_f64()
    );
    (topic, ends)
}
