//! Record formats against the real broker and a real schema registry
//! (Apicurio Registry, `scripts/registry.sh`): input written by
//! confluent-kafka's serializers (`tests/formats/produce.py`), output read
//! by its deserializers (`consume.py`, read_committed) or weir-testkit's
//! JSON reader, results checked against DuckDB over the same events.
//! Never weir's own encoder on the input, nor its decoder on the output.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use weir_testkit::sql::*;
use weir_testkit::{create_topic, log_tail, read_topic, unique, Isolation, Rng, WeirProcess};

#[path = "support/graph_jobs.rs"]
mod graph_jobs;
use graph_jobs::*;
#[path = "support/sql_kit.rs"]
mod sql_kit;
use sql_kit::*;
#[path = "support/formats_kit.rs"]
mod formats_kit;
use formats_kit::*;

fn weir_on(command: &str, config: &std::path::Path) -> std::process::Output {
    Command::new(weir())
        .args([command, "--config"])
        .arg(config)
        .output()
        .unwrap()
}

/// A DuckDB answer's rows against the rows consume.py read from an Avro
/// or Protobuf sink (timestamps as epoch milliseconds there).
fn assert_rows_match(
    what: &str,
    got: &[serde_json::Value],
    want: Vec<serde_json::Value>,
    timestamps: &[&str],
) {
    let got: Vec<serde_json::Value> = got
        .iter()
        .map(|r| {
            let mut v = r["value"].clone();
            timestamps_as_text(&mut v, timestamps);
            v
        })
        .collect();
    let (got, want) = (multiset(got.into_iter()), multiset(want.into_iter()));
    assert!(!want.is_empty(), "{what}: DuckDB's answer is empty");
    assert_eq!(got.len(), want.len(), "{what}: rows");
    assert_eq!(got, want, "{what}: rows against DuckDB");
}

/// Nexmark with bids in Avro and persons and auctions in Protobuf, written
/// by confluent-kafka's serializers through the registry, as one job SIGKILLed
/// five times: q0, q17 (an updating aggregate), and the joins q3 (persons
/// with auctions, regular), q5 (hot items) and q8 (a window join of
/// persons and auctions), each against DuckDB over the same events. q0's
/// rows go out once more in Avro and q3's in Protobuf, through the
/// registry, and are read back by confluent-kafka's deserializers.
#[test]
fn nexmark_from_avro_and_protobuf_is_exact_under_sigkills_against_duckdb() {
    let seed = seed();
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().unwrap();
    let input = nexmark_streams(dir.path(), seed, 6000, 2);
    let topics: BTreeMap<&str, String> = ["person", "auction", "bid"]
        .into_iter()
        .map(|t| (t, unique(&format!("fmt-{t}"))))
        .collect();
    for t in topics.values() {
        create_topic(t, 2);
    }
    let mut queries: Vec<Query> = queries()
        .into_iter()
        .filter(|q| ["q0", "q17"].contains(&q.sink))
        .collect();
    queries.extend(
        weir_testkit::nexmark::join_queries()
            .into_iter()
            .filter(|q| ["q3", "q5", "q8"].contains(&q.sink)),
    );
    assert_eq!(queries.len(), 5);
    let sinks: Vec<(String, String)> = queries
        .iter()
        .map(|q| (q.sink.to_string(), unique(&format!("fmt-{}", q.sink))))
        .collect();
    let (q0_avro, q3_proto, q17_avro) = (
        unique("fmt-q0-avro"),
        unique("fmt-q3-proto"),
        unique("fmt-q17-avro"),
    );
    for topic in sinks
        .iter()
        .map(|(_, t)| t)
        .chain([&q0_avro, &q3_proto, &q17_avro])
    {
        create_topic(topic, 2);
    }
    let q0 = queries.iter().find(|q| q.sink == "q0").unwrap();
    let q3 = queries.iter().find(|q| q.sink == "q3").unwrap();
    let q17 = queries.iter().find(|q| q.sink == "q17").unwrap();
    let sql = inserts(&queries)
        + &format!("INSERT INTO q0_avro\n{};\n", q0.weir)
        + &format!("INSERT INTO q3_proto\n{};\n", q3.weir)
        + &format!("INSERT INTO q17_avro\n{};\n", q17.weir);
    let mut sections = nexmark_format_sections(&topics);
    for (name, topic) in &sinks {
        sections.push_str(&format!(
            "\n[sinks.{name}]\ntopic = \"{topic}\"\ndelivery = \"exactly-once\"\n"
        ));
    }
    sections.push_str(&format!(
        "\n[sinks.q0_avro]\ntopic = \"{q0_avro}\"\nformat = \"avro\"\nregistry = \"main\"\n\
         \n[sinks.q3_proto]\ntopic = \"{q3_proto}\"\nformat = \"protobuf\"\nregistry = \"main\"\n\
         message = \"weir.test.LocalItem\"\n\
         \n[sinks.q17_avro]\ntopic = \"{q17_avro}\"\nformat = \"avro\"\nregistry = \"main\"\n\
         key_format = \"avro\"\n\
         \n[pipeline]\nsql = \"\"\"\n{sql}\n\"\"\"\n"
    ));
    let config = graph_config_with(
        dir.path(),
        &unique("fmt-nexmark"),
        2,
        &dir.path().join("checkpoints"),
        &sections,
    );
    let chunks = 10;
    // The first chunk goes in before the job plans: the persons' and
    // auctions' columns come from their subjects' latest schemas.
    for (table, lines) in input.chunk(0, chunks) {
        produce_nexmark(&topics[table], 2, table, &lines);
    }
    let validate = weir_on("validate", &config);
    assert!(
        validate.status.success(),
        "validate: {}{}",
        String::from_utf8_lossy(&validate.stdout),
        String::from_utf8_lossy(&validate.stderr)
    );
    let mut weir = feed_with_kills_by(
        &Job {
            binary: weir(),
            config: &config,
            env: &[],
        },
        chunks,
        5,
        &mut rng,
        |i| {
            for (table, lines) in input.chunk(i + 1, chunks) {
                produce_nexmark(&topics[table], 2, table, &lines);
            }
        },
    );
    for (q, (_, topic)) in queries.iter().zip(&sinks) {
        assert_matches_duckdb(q, topic, &input.data, Duration::from_secs(120), &|| {
            format!("seed {seed}; log: {}", log_tail(&weir.log_text()))
        });
    }
    let want_q0 = duckdb(&input.data, q0.duckdb);
    let got = consume(&q0_avro, "avro", "string", Some(want_q0.len()), 30_000);
    assert_rows_match("q0 in Avro", &got, want_q0, &["date_time"]);
    let want_q3 = duckdb(&input.data, q3.duckdb);
    let got = consume(&q3_proto, "protobuf", "string", Some(want_q3.len()), 30_000);
    assert_rows_match("q3 in Protobuf", &got, want_q3, &[]);
    // q17's updating result as an Avro upsert topic keyed by an Avro
    // record of its key columns: the last value of each key, tombstones
    // deleting, is DuckDB's table.
    let want_q17 = multiset(duckdb(&input.data, q17.duckdb).into_iter());
    let got = consume_to_end(&q17_avro, "avro", "avro");
    let mut table: BTreeMap<String, serde_json::Value> = BTreeMap::new();
    for r in &got {
        let key = r["key"].to_string();
        assert!(
            r["key"]["auction"].is_i64(),
            "an Avro key record: {}",
            r["key"]
        );
        match &r["value"] {
            serde_json::Value::Null => {
                table.remove(&key);
            }
            v => {
                table.insert(key, v.clone());
            }
        }
    }
    assert_eq!(
        multiset(table.into_values()),
        want_q17,
        "q17 as an Avro upsert topic against DuckDB"
    );
    let log = weir.log_text();
    weir.stop(Duration::from_secs(30));
    assert!(
        log.matches("job running").count() >= 6,
        "the job was restarted after each kill"
    );
}

/// The producer moves to a new version of its Avro schema while weir
/// runs and is SIGKILLed: v1 (`value` an int, a `note`), then v2 (`value`
/// widened to a long, `note` removed, `unit` added with a default), then
/// v3 (`value` a string: an incompatible change). Every v1 and v2 record
/// is read with its own values (a field its writer lacks is NULL for a
/// column list given in TOML); every v3 record goes to the dead-letter
/// topic, its error naming the schema id.
#[test]
fn avro_schema_evolution_mid_stream_reads_every_record_with_its_values_under_sigkills() {
    let seed = seed();
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().unwrap();
    let (input, output, dlq) = (
        unique("fmt-evo-in"),
        unique("fmt-evo-out"),
        unique("fmt-evo-dlq"),
    );
    create_topic(&input, 2);
    create_topic(&output, 2);
    create_topic(&dlq, 1);
    let sections = format!(
        r#"
[registries.main]
url = "{url}"

[sources.readings]
topics = ["{input}"]
format = "avro"
registry = "main"
schema = "id BIGINT, sensor VARCHAR, `value` BIGINT, note VARCHAR, unit VARCHAR"
on_bad_record = "dead-letter"
dead_letter_topic = "{dlq}"

[sinks.out]
topic = "{output}"
delivery = "exactly-once"

[pipeline]
sql = "INSERT INTO out SELECT id, sensor, `value`, note, unit FROM readings;"
"#,
        url = registry_url()
    );
    let config = graph_config_with(
        dir.path(),
        &unique("fmt-evo"),
        2,
        &dir.path().join("checkpoints"),
        &sections,
    );
    // 12 chunks of 50: 0–4 in v1, 5–9 in v2, 10–11 in v3.
    let version = |chunk: usize| match chunk {
        0..=4 => 1,
        5..=9 => 2,
        _ => 3,
    };
    let record = |id: usize, v: u32| -> String {
        let big = 3_000_000_000i64 + id as i64;
        match v {
            1 => format!(
                r#"{{"id":{id},"sensor":"s{}","value":{},"note":"n{id}"}}"#,
                id % 7,
                id * 3
            ),
            2 => format!(
                r#"{{"id":{id},"sensor":"s{}","value":{big},"unit":"kelvin"}}"#,
                id % 7
            ),
            _ => format!(r#"{{"id":{id},"sensor":"s{}","value":"x{id}"}}"#, id % 7),
        }
    };
    let mut weir = feed_with_kills_by(
        &Job {
            binary: weir(),
            config: &config,
            env: &[],
        },
        12,
        4,
        &mut rng,
        |i| {
            let v = version(i);
            let values: Vec<String> = (i * 50..(i + 1) * 50).map(|id| record(id, v)).collect();
            produce_values(
                &input,
                2,
                "avro",
                &format!("evolution/v{v}.avsc"),
                None,
                &values,
            );
        },
    );
    let records = read_topic(
        &output,
        Isolation::Committed,
        Duration::from_secs(90),
        Duration::from_secs(3),
        |r| r.len() >= 500,
    );
    let mut got: BTreeMap<i64, serde_json::Value> = BTreeMap::new();
    for r in &records {
        let v: serde_json::Value = serde_json::from_str(r.value.as_deref().unwrap()).unwrap();
        let id = v["id"].as_i64().unwrap();
        assert!(
            got.insert(id, v).is_none(),
            "id {id} written twice; seed {seed}; log: {}",
            log_tail(&weir.log_text())
        );
    }
    assert_eq!(got.len(), 500, "every v1 and v2 record once; seed {seed}");
    for id in 0..500usize {
        let v = &got[&(id as i64)];
        let sensor = format!("s{}", id % 7);
        let want = if id < 250 {
            serde_json::json!({"id": id, "sensor": sensor, "value": id * 3, "note": format!("n{id}"), "unit": null})
        } else {
            serde_json::json!({"id": id, "sensor": sensor, "value": 3_000_000_000i64 + id as i64, "note": null, "unit": "kelvin"})
        };
        assert_eq!(v, &want, "record {id}");
    }
    let dead = read_topic(
        &dlq,
        Isolation::Committed,
        Duration::from_secs(60),
        Duration::from_secs(2),
        |r| r.len() >= 100,
    );
    assert_eq!(
        dead.len(),
        100,
        "every v3 record, once, in the dead-letter topic"
    );
    let error = dead[0]
        .headers
        .get("weir.error")
        .cloned()
        .unwrap_or_default();
    assert!(
        error.contains("schema id") && error.contains("value"),
        "the dead letter names the schema id and the field: {error:?}"
    );
    weir.stop(Duration::from_secs(30));
}

/// A product table's change stream from Debezium (inserts, a snapshot,
/// updates, deletes, tombstones after the deletes), in `debezium-json`
/// (half the changes inside Debezium's schema envelope) and the same
/// changes in `debezium-avro` through the registry, while orders stream
/// in; one job SIGKILLed four times joins the orders to the JSON table and
/// aggregates per category (an upsert sink), and writes the Avro table
/// back out as Debezium changes. The aggregate equals DuckDB's over the
/// last version of each product, and the Debezium sink's changes, applied
/// in order, end at that last version of each row.
#[test]
fn a_debezium_change_stream_joined_and_aggregated_is_exact_under_sigkills() {
    let seed = seed();
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let topics: BTreeMap<&str, String> = [
        "products_json",
        "products_avro",
        "orders",
        "totals",
        "changes",
    ]
    .into_iter()
    .map(|t| (t, unique(&format!("fmt-dbz-{t}"))))
    .collect();
    for t in topics.values() {
        create_topic(t, 2);
    }
    // 60 products; 8 chunks of changes and orders.
    let (products, chunks) = (60i64, 8usize);
    let mut current: BTreeMap<i64, (String, i64, i64)> = BTreeMap::new();
    let mut change_log: Vec<String> = Vec::new();
    let mut json_chunks: Vec<Vec<(i32, String, Option<String>)>> = vec![Vec::new(); chunks];
    let mut avro_chunks: Vec<Vec<String>> = vec![Vec::new(); chunks];
    let mut order_chunks: Vec<Vec<String>> = vec![Vec::new(); chunks];
    let mut seq = 0;
    let mut order_id = 0;
    for chunk in 0..chunks {
        for _ in 0..40 {
            let id = rng.below(products as u64) as i64;
            let (op, before, after) = match current.get(&id).cloned() {
                None => {
                    let row = (
                        format!("p{id}"),
                        100 + rng.below(900) as i64,
                        rng.below(5) as i64,
                    );
                    // The first chunk is the snapshot Debezium reads first.
                    (if chunk == 0 { "r" } else { "c" }, None, Some(row))
                }
                Some(old) if rng.below(5) == 0 => ("d", Some(old), None),
                Some(old) => {
                    let new = (
                        old.0.clone(),
                        100 + rng.below(900) as i64,
                        rng.below(5) as i64,
                    );
                    ("u", Some(old), Some(new))
                }
            };
            let row_json = |r: &Option<(String, i64, i64)>| match r {
                None => serde_json::Value::Null,
                Some((name, price, category)) => {
                    serde_json::json!({"id": id, "name": name, "price": price, "category": category})
                }
            };
            let change = serde_json::json!({
                "before": row_json(&before), "after": row_json(&after), "op": op,
                "source": {"connector": "postgresql", "lsn": seq}, "ts_ms": 1_764_000_000_000i64 + seq,
            });
            let partition = id % 2;
            let key = serde_json::json!({"id": id}).to_string();
            let json_value = if seq % 2 == 0 {
                serde_json::json!({"schema": {"type": "struct", "name": "dbserver1.shop.products.Envelope"}, "payload": change})
            } else {
                change.clone()
            };
            json_chunks[chunk].push((partition as i32, key.clone(), Some(json_value.to_string())));
            avro_chunks[chunk].push(
                serde_json::json!({"key": key, "value": change, "partition": partition})
                    .to_string(),
            );
            if op == "d" {
                // The tombstone that follows a delete, for log compaction.
                json_chunks[chunk].push((partition as i32, key.clone(), None));
                avro_chunks[chunk].push(
                    serde_json::json!({"key": key, "value": null, "partition": partition})
                        .to_string(),
                );
                current.remove(&id);
            } else {
                current.insert(id, after.clone().unwrap());
            }
            let (name, price, category) = after.clone().or(before.clone()).unwrap();
            change_log.push(
                serde_json::json!({"seq": seq, "id": id, "name": name, "price": price,
                    "category": category, "deleted": op == "d"})
                .to_string(),
            );
            seq += 1;
        }
        for _ in 0..60 {
            let product = rng.below(products as u64) as i64;
            order_chunks[chunk].push(
                serde_json::json!({"order_id": order_id, "product_id": product, "qty": 1 + rng.below(5)})
                    .to_string(),
            );
            order_id += 1;
        }
    }
    std::fs::write(
        data.join("product_changes.jsonl"),
        change_log.join("\n") + "\n",
    )
    .unwrap();
    let all_orders: Vec<String> = order_chunks.concat();
    std::fs::write(data.join("orders.jsonl"), all_orders.join("\n") + "\n").unwrap();

    let sections = format!(
        r#"
[registries.main]
url = "{url}"

[sources.products]
topics = ["{products_json}"]
format = "debezium-json"
schema = "id BIGINT, name VARCHAR, price BIGINT, category BIGINT"
primary_key = ["id"]

[sources.products_avro]
topics = ["{products_avro}"]
format = "debezium-avro"
registry = "main"
primary_key = ["id"]

[sources.orders]
topics = ["{orders}"]
format = "json"
schema = "order_id BIGINT, product_id BIGINT, qty BIGINT"

[sinks.totals]
topic = "{totals}"
delivery = "exactly-once"

[sinks.changes]
topic = "{changes}"
format = "debezium-json"
key = ["id"]

[pipeline]
sql = """
INSERT INTO totals
SELECT p.category, SUM(o.qty * p.price) AS revenue, COUNT(*) AS lines
FROM orders AS o JOIN products AS p ON o.product_id = p.id
GROUP BY p.category;
INSERT INTO changes SELECT id, name, price, category FROM products_avro;
"""
"#,
        url = registry_url(),
        products_json = topics["products_json"],
        products_avro = topics["products_avro"],
        orders = topics["orders"],
        totals = topics["totals"],
        changes = topics["changes"],
    );
    let config = graph_config_with(
        dir.path(),
        &unique("fmt-dbz"),
        2,
        &dir.path().join("checkpoints"),
        &sections,
    );
    let schema = formats_dir().join("debezium.avsc");
    let send = |i: usize| {
        // Debezium's JSON is text: written as it is, by the test kit's producer.
        weir_testkit::produce_records(&topics["products_json"], &json_chunks[i]);
        produce_lines(
            &topics["products_avro"],
            &["--format", "avro", "--schema", schema.to_str().unwrap()],
            &avro_chunks[i],
        );
        weir_testkit::produce(&topics["orders"], 2, &order_chunks[i]);
    };
    // The Avro table's columns come from the registry: its first changes
    // are there before the job plans.
    send(0);
    let mut weir = feed_with_kills_by(
        &Job {
            binary: weir(),
            config: &config,
            env: &[],
        },
        chunks - 1,
        4,
        &mut rng,
        |i| send(i + 1),
    );
    let last = "WITH last AS (SELECT * FROM product_changes
                  QUALIFY row_number() OVER (PARTITION BY id ORDER BY seq DESC) = 1)";
    let totals = Query {
        sink: "totals",
        weir: "",
        duckdb: Box::leak(
            format!(
                "{last} SELECT p.category, SUM(o.qty * p.price) AS revenue, COUNT(*) AS lines
                 FROM orders AS o JOIN last AS p ON o.product_id = p.id
                 WHERE NOT p.deleted GROUP BY p.category"
            )
            .into_boxed_str(),
        ),
        updating: true,
        compare: &[],
    };
    assert_matches_duckdb(
        &totals,
        &topics["totals"],
        &data,
        Duration::from_secs(120),
        &|| format!("seed {seed}; log: {}", log_tail(&weir.log_text())),
    );
    let want = multiset(
        duckdb(
            &data,
            &format!("{last} SELECT id, name, price, category FROM last WHERE NOT deleted"),
        )
        .into_iter(),
    );
    let changes = read_topic(
        &topics["changes"],
        Isolation::Committed,
        Duration::from_secs(60),
        Duration::from_secs(2),
        |r| final_debezium_rows(r).is_ok_and(|t| t == want),
    );
    let got = final_debezium_rows(&changes)
        .unwrap_or_else(|e| panic!("the Debezium sink: {e}; seed {seed}"));
    assert_eq!(
        got, want,
        "the Debezium sink's last rows against DuckDB; seed {seed}"
    );
    weir.stop(Duration::from_secs(30));
}

/// One kind of bad record of each sort, between good ones: an Avro record
/// whose schema id the registry does not have, a truncated Avro record, a
/// record without the registry's magic byte, and a Protobuf message of
/// another type than the table's. Under `skip` each is counted and
/// logged with its topic/partition/offset; under `dead-letter` each is in
/// the dead-letter topic with its reason; under `fail` the job stops at
/// the first, naming it. The good records all arrive.
#[test]
fn bad_records_in_registry_formats_are_skipped_dead_lettered_or_stop_the_job_named() {
    let dir = tempfile::tempdir().unwrap();
    // A good Avro bid and a good Protobuf person, to learn their bytes'
    // framing (the schema ids the registry gave them).
    let probe = unique("fmt-bad-probe");
    create_topic(&probe, 1);
    let bid = r#"{"auction":1,"bidder":2,"price":3,"channel":"c","url":"u","date_time":1764000000000,"extra":""}"#;
    produce_values(
        &probe,
        1,
        "avro",
        "nexmark/bid.avsc",
        None,
        &[bid.to_string()],
    );
    let framed = consume(&probe, "raw", "string", Some(1), 30_000);
    let avro_hex = framed[0]["value"].as_str().unwrap().to_string();
    let unknown_id = format!("00{:08x}{}", 0x7fff_fff0u32, &avro_hex[10..]);
    let truncated = avro_hex[..avro_hex.len() - 4].to_string();
    let no_magic = format!("01{}", &avro_hex[2..]);
    let other_proto = unique("fmt-bad-other");
    create_topic(&other_proto, 1);
    produce_values(
        &other_proto,
        1,
        "protobuf",
        "nexmark/other.proto",
        Some("other.Ping"),
        &[r#"{"text":"not a person"}"#.to_string()],
    );
    let ping_hex = consume(&other_proto, "raw", "string", Some(1), 30_000)[0]["value"]
        .as_str()
        .unwrap()
        .to_string();
    let person = r#"{"id":7,"name":"ann","email_address":"a@b","credit_card":"1","city":"c","state":"OR","date_time":"2026-11-30T10:00:00Z","extra":""}"#;

    for policy in ["skip", "dead-letter", "fail"] {
        let (bids, persons, out, dlq) = (
            unique("fmt-bad-bid"),
            unique("fmt-bad-person"),
            unique("fmt-bad-out"),
            unique("fmt-bad-dlq"),
        );
        for t in [&bids, &persons, &out, &dlq] {
            create_topic(t, 1);
        }
        // Good, four bad, good; the persons: good, another type, good.
        produce_values(
            &bids,
            1,
            "avro",
            "nexmark/bid.avsc",
            None,
            &[bid.to_string()],
        );
        produce_hex(&bids, &[(0, &unknown_id), (0, &truncated), (0, &no_magic)]);
        produce_values(
            &bids,
            1,
            "avro",
            "nexmark/bid.avsc",
            None,
            &[bid.replace("\"auction\":1", "\"auction\":2")],
        );
        produce_values(
            &persons,
            1,
            "protobuf",
            "nexmark/nexmark.proto",
            Some("nexmark.Person"),
            &[person.to_string()],
        );
        produce_hex(&persons, &[(0, &ping_hex)]);
        produce_values(
            &persons,
            1,
            "protobuf",
            "nexmark/nexmark.proto",
            Some("nexmark.Person"),
            &[person.replace("\"id\":7", "\"id\":8")],
        );
        let sections = format!(
            r#"
[registries.main]
url = "{url}"

[sources.bid]
topics = ["{bids}"]
format = "avro"
registry = "main"
schema = "auction BIGINT, bidder BIGINT, price BIGINT"
on_bad_record = "{policy}"
dead_letter_topic = "{dlq}"

[sources.person]
topics = ["{persons}"]
format = "protobuf"
registry = "main"
message = "nexmark.Person"
schema = "id BIGINT, name VARCHAR"
on_bad_record = "{policy}"
dead_letter_topic = "{dlq}"

[sinks.out]
topic = "{out}"

[pipeline]
sql = """
INSERT INTO out
SELECT auction AS id, 'bid' AS kind FROM bid
UNION ALL
SELECT id, 'person' AS kind FROM person;
"""
"#,
            url = registry_url()
        );
        let config = graph_config_with(
            &dir.path().join(policy),
            &unique("fmt-bad"),
            1,
            &dir.path().join(policy).join("checkpoints"),
            &sections,
        );
        let mut weir = WeirProcess::start(&weir(), &config, &[]);
        if policy == "fail" {
            let status = weir.wait(Duration::from_secs(60));
            let log = weir.log_text();
            assert!(
                status.is_some_and(|s| !s.success()),
                "fail: the job stops at a bad record: {}",
                log_tail(&log)
            );
            assert!(
                log.contains(&format!("bad record at {bids}/0@1"))
                    && log.contains("schema id 2147483632"),
                "fail: the error names the record and the unknown id: {}",
                log_tail(&log)
            );
            continue;
        }
        let records = read_topic(
            &out,
            Isolation::Uncommitted,
            Duration::from_secs(60),
            Duration::from_secs(2),
            |r| r.len() >= 4,
        );
        let mut ids: Vec<String> = records.iter().map(|r| r.value.clone().unwrap()).collect();
        ids.sort();
        assert_eq!(
            ids,
            vec![
                r#"{"id":1,"kind":"bid"}"#,
                r#"{"id":2,"kind":"bid"}"#,
                r#"{"id":7,"kind":"person"}"#,
                r#"{"id":8,"kind":"person"}"#
            ],
            "{policy}: every good record once: {}",
            log_tail(&weir.log_text())
        );
        let reasons: Vec<String> = if policy == "skip" {
            assert!(weir.wait_for_log("skipped bad record", 4, Duration::from_secs(10)));
            weir.log_text()
                .lines()
                .filter(|l| l.contains("skipped bad record"))
                .map(String::from)
                .collect()
        } else {
            read_topic(
                &dlq,
                Isolation::Committed,
                Duration::from_secs(60),
                Duration::from_secs(2),
                |r| r.len() >= 4,
            )
            .iter()
            .map(|r| {
                format!(
                    "{}/{}@{}: {}",
                    r.headers["weir.source.topic"],
                    r.headers["weir.source.partition"],
                    r.headers["weir.source.offset"],
                    r.headers["weir.error"]
                )
            })
            .collect()
        };
        assert_eq!(
            reasons.len(),
            4,
            "{policy}: the four bad records: {reasons:#?}"
        );
        let all = reasons.join("\n");
        for needle in [
            "schema id 2147483632",
            "cut short",
            "wrong magic byte 0x01",
            "no message \"nexmark.Person\" (its messages: other.Ping)",
        ] {
            assert!(all.contains(needle), "{policy}: {needle:?} named in {all}");
        }
        if policy == "skip" {
            for offset in ["offset=1", "offset=2", "offset=3"] {
                assert!(all.contains(offset), "skip: {offset} named in {all}");
            }
        }
        weir.stop(Duration::from_secs(30));
    }
}

/// `weir validate` names a registry that is not configured and one that
/// cannot be reached, with their key paths, and a registry schema that
/// does not fit the SQL.
#[test]
fn validate_names_a_missing_or_unreachable_registry_and_a_schema_that_does_not_fit() {
    let dir = tempfile::tempdir().unwrap();
    let topic = unique("fmt-validate");
    create_topic(&topic, 1);
    produce_values(
        &topic,
        1,
        "avro",
        "nexmark/bid.avsc",
        None,
        &[r#"{"auction":1,"bidder":2,"price":3,"channel":"c","url":"u","date_time":1764000000000,"extra":""}"#.to_string()],
    );
    let check = |name: &str, registries: &str, source_extra: &str, sql: &str| -> String {
        let sections = format!(
            "{registries}\n[sources.bid]\ntopics = [\"{topic}\"]\nformat = \"avro\"\n{source_extra}\n\
             [sinks.out]\ntopic = \"out\"\n\n[pipeline]\nsql = \"{sql}\"\n"
        );
        let config = graph_config_with(
            &dir.path().join(name),
            "fmt-validate",
            1,
            &dir.path().join(name).join("checkpoints"),
            &sections,
        );
        let out = weir_on("validate", &config);
        assert!(!out.status.success(), "{name}: validate refuses it");
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout)
    };
    let e = check(
        "missing",
        "",
        "registry = \"main\"",
        "INSERT INTO out SELECT auction FROM bid;",
    );
    assert!(
        e.contains("sources.bid.registry") && e.contains("no registry \\\"main\\\"")
            || e.contains("no registry \"main\""),
        "{e}"
    );
    let e = check(
        "unreachable",
        "[registries.main]\nurl = \"http://127.0.0.1:9\"\ntimeout = \"1s\"\n",
        "registry = \"main\"",
        "INSERT INTO out SELECT auction FROM bid;",
    );
    assert!(
        e.contains("registry main") && e.contains("cannot be reached") && e.contains("sources.bid"),
        "{e}"
    );
    let e = check(
        "misfit",
        &format!("[registries.main]\nurl = \"{}\"\n", registry_url()),
        "registry = \"main\"",
        "INSERT INTO out SELECT auction, colour FROM bid;",
    );
    assert!(
        e.contains("colour"),
        "a column the registry's schema lacks is named: {e}"
    );
    let e = check(
        "listed-misfit",
        &format!("[registries.main]\nurl = \"{}\"\n", registry_url()),
        "registry = \"main\"\nschema = \"auction BIGINT, date_time BOOLEAN\"",
        "INSERT INTO out SELECT auction FROM bid;",
    );
    assert!(
        e.contains("sources.bid.schema")
            && e.contains("does not fit the table's columns")
            && e.contains("date_time"),
        "a listed column the registry's latest schema cannot fill is named: {e}"
    );
}

/// An Avro sink given a registered schema (`schema_id`) writes with it:
/// its field order, an enum for a VARCHAR column, a nullable decimal, a
/// field no column fills left null; confluent-kafka's deserializer reads
/// every row back with that schema.
#[test]
fn an_avro_sink_writes_with_the_schema_it_is_given() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output, scratch) = (
        unique("fmt-given-in"),
        unique("fmt-given-out"),
        unique("fmt-given-scratch"),
    );
    for t in [&input, &output, &scratch] {
        create_topic(t, 1);
    }
    // The schema registered by confluent-kafka's serializer; its id read
    // from a record's frame.
    produce_values(
        &scratch,
        1,
        "avro",
        "given/out.avsc",
        None,
        &[r#"{"status":"OK","id":0,"amount":null}"#.to_string()],
    );
    let hex = consume(&scratch, "raw", "string", Some(1), 30_000)[0]["value"]
        .as_str()
        .unwrap()
        .to_string();
    let id = u32::from_str_radix(&hex[2..10], 16).unwrap();
    let rows: Vec<String> = (0..20)
        .map(|i| {
            format!(
                r#"{{"id":{i},"ok":{},"amount":{}}}"#,
                i % 3 != 0,
                if i % 4 == 0 {
                    "null".to_string()
                } else {
                    format!("{i}.5")
                }
            )
        })
        .collect();
    weir_testkit::produce(&input, 1, &rows);
    let sections = format!(
        r#"
[registries.main]
url = "{url}"

[sources.orders]
topics = ["{input}"]
schema = "id BIGINT, ok BOOLEAN, amount DECIMAL(10, 2)"

[sinks.out]
topic = "{output}"
format = "avro"
registry = "main"
schema_id = {id}

[pipeline]
sql = "INSERT INTO out SELECT id, CASE WHEN ok THEN 'OK' ELSE 'BAD' END AS status, amount FROM orders;"
"#,
        url = registry_url()
    );
    let config = graph_config_with(
        dir.path(),
        &unique("fmt-given"),
        1,
        &dir.path().join("checkpoints"),
        &sections,
    );
    let validate = weir_on("validate", &config);
    assert!(
        validate.status.success(),
        "{}",
        String::from_utf8_lossy(&validate.stderr)
    );
    let mut weir = WeirProcess::start(&weir(), &config, &[]);
    let got = consume(&output, "avro", "string", Some(20), 30_000);
    assert_eq!(got.len(), 20, "{}", log_tail(&weir.log_text()));
    let mut values: Vec<serde_json::Value> = got.iter().map(|r| r["value"].clone()).collect();
    values.sort_by_key(|v| v["id"].as_i64());
    for (i, v) in values.iter().enumerate() {
        let want = serde_json::json!({
            "status": if i % 3 != 0 { "OK" } else { "BAD" },
            "id": i,
            "amount": if i % 4 == 0 { serde_json::Value::Null } else { format!("{i}.50").into() },
            "note": null,
        });
        assert_eq!(v, &want, "row {i}");
    }
    let framed = consume(&output, "raw", "string", Some(1), 30_000);
    let written_id = u32::from_str_radix(&framed[0]["value"].as_str().unwrap()[2..10], 16).unwrap();
    assert_eq!(written_id, id, "the records carry the given schema's id");
    weir.stop(Duration::from_secs(30));
}

/// JSON Schema records (framed by confluent-kafka's JSONSerializer) with
/// an Avro key read into `key_fields`, Kafka metadata as columns (the
/// record's timestamp, partition, offset and headers), CSV lines and raw
/// bytes, in one job; its results written as JSON Schema (read back by
/// confluent-kafka's JSONDeserializer with the registered schema), CSV and
/// raw (read back as text).
#[test]
fn json_schema_csv_raw_key_fields_and_metadata_read_and_write() {
    let dir = tempfile::tempdir().unwrap();
    let t: BTreeMap<&str, String> = ["js", "csv", "raw", "js_out", "csv_out", "raw_out"]
        .into_iter()
        .map(|n| (n, unique(&format!("fmt-misc-{n}"))))
        .collect();
    for topic in t.values() {
        create_topic(topic, 2);
    }
    let schema = formats_dir().join("misc/reading.schema.json");
    let key_schema = formats_dir().join("misc/key.avsc");
    let lines: Vec<String> = (0..30)
        .map(|i| {
            serde_json::json!({
                "key": {"site": format!("site{}", i % 3), "seq": i},
                "value": {"sensor": format!("s{i}"), "celsius": i as f64 / 2.0,
                          "at": format!("2026-11-30T10:00:{:02}.000Z", i)},
                "partition": i % 2,
                "timestamp": 1_764_496_800_000i64 + i * 1000,
                "headers": {"trace": format!("t{i}")},
            })
            .to_string()
        })
        .collect();
    produce_lines(
        &t["js"],
        &[
            "--format",
            "json-schema",
            "--schema",
            schema.to_str().unwrap(),
            "--key-format",
            "avro",
            "--key-schema",
            key_schema.to_str().unwrap(),
        ],
        &lines,
    );
    let csv: Vec<String> = std::iter::once("name,qty,price".to_string())
        .chain((0..10).map(|i| format!("\"item, {i}\",{i},{i}.25")))
        .collect();
    weir_testkit::produce(&t["csv"], 1, &csv);
    let raw: Vec<String> = (0..10).map(|i| format!("line {i} \u{e9}")).collect();
    weir_testkit::produce(&t["raw"], 1, &raw);
    let sections = format!(
        r#"
[registries.main]
url = "{url}"

[sources.readings]
topics = ["{js}"]
format = "json-schema"
registry = "main"
schema = "site VARCHAR, seq BIGINT, sensor VARCHAR, celsius DOUBLE, `at` TIMESTAMP(3)"
key_format = "avro"
key_fields = ["site", "seq"]
metadata = ["timestamp AS kafka_ts", "partition", "offset", "headers"]

[sources.items]
topics = ["{csv}"]
format = "csv"
schema = "name VARCHAR, qty INT, price DECIMAL(6, 2)"

[sources.lines]
topics = ["{raw}"]
format = "raw"
schema = "body VARCHAR"

[sinks.js_out]
topic = "{js_out}"
format = "json-schema"
registry = "main"

[sinks.csv_out]
topic = "{csv_out}"
format = "csv"
csv_delimiter = ";"

[sinks.raw_out]
topic = "{raw_out}"
format = "raw"

[pipeline]
sql = """
INSERT INTO js_out
SELECT site, seq, sensor, celsius, `at`, kafka_ts, `partition`, `offset`, headers
FROM readings;
INSERT INTO csv_out SELECT name || ';' AS name, qty * 2 AS qty2, price FROM items;
INSERT INTO raw_out SELECT UPPER(body) AS body FROM lines;
"""
"#,
        url = registry_url(),
        js = t["js"],
        csv = t["csv"],
        raw = t["raw"],
        js_out = t["js_out"],
        csv_out = t["csv_out"],
        raw_out = t["raw_out"],
    );
    let config = graph_config_with(
        dir.path(),
        &unique("fmt-misc"),
        1,
        &dir.path().join("checkpoints"),
        &sections,
    );
    let mut weir = WeirProcess::start(&weir(), &config, &[]);
    // Where each input record landed, as an independent reader sees it.
    let input = consume(&t["js"], "raw", "raw", Some(30), 30_000);
    let mut offsets: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    for r in &input {
        let value = hex_text(r["value"].as_str().unwrap());
        let sensor = value
            .split("\"sensor\":\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap()
            .to_string();
        offsets.insert(
            sensor,
            (
                r["partition"].as_i64().unwrap(),
                r["offset"].as_i64().unwrap(),
            ),
        );
    }
    let got = consume(&t["js_out"], "json-schema", "string", Some(30), 30_000);
    assert_eq!(got.len(), 30, "{}", log_tail(&weir.log_text()));
    for r in &got {
        let v = &r["value"];
        let seq = v["seq"].as_i64().unwrap();
        let sensor = format!("s{seq}");
        let (partition, offset) = offsets[&sensor];
        assert_eq!(
            v["site"],
            serde_json::json!(format!("site{}", seq % 3)),
            "{v}"
        );
        assert_eq!(v["sensor"], serde_json::json!(sensor), "{v}");
        assert_eq!(v["celsius"].as_f64(), Some(seq as f64 / 2.0), "{v}");
        assert_eq!(
            v["at"],
            serde_json::json!(format!("2026-11-30T10:00:{seq:02}.000Z")),
            "{v}"
        );
        assert_eq!(
            v["kafka_ts"],
            serde_json::json!(weir::dataflow::json::format_timestamp(
                1_764_496_800_000 + seq * 1000
            )),
            "{v}"
        );
        assert_eq!(
            (v["partition"].as_i64(), v["offset"].as_i64()),
            (Some(partition), Some(offset)),
            "{v}"
        );
        assert_eq!(
            v["headers"],
            serde_json::json!([{"key": "trace", "value": format!("t{seq}")}]),
            "{v}"
        );
    }
    let csv_out = consume(&t["csv_out"], "string", "string", Some(10), 30_000);
    let mut csv_lines: Vec<String> = csv_out
        .iter()
        .map(|r| r["value"].as_str().unwrap().to_string())
        .collect();
    csv_lines.sort();
    let mut want: Vec<String> = (0..10)
        .map(|i| format!("\"item, {i};\";{};{i}.25", i * 2))
        .collect();
    want.sort();
    assert_eq!(csv_lines, want, "the CSV sink (the header line skipped)");
    let raw_out = consume(&t["raw_out"], "string", "string", Some(10), 30_000);
    let mut raw_lines: Vec<String> = raw_out
        .iter()
        .map(|r| r["value"].as_str().unwrap().to_string())
        .collect();
    raw_lines.sort();
    let mut want: Vec<String> = (0..10).map(|i| format!("LINE {i} \u{c9}")).collect();
    want.sort();
    assert_eq!(raw_lines, want, "the raw sink");
    weir.stop(Duration::from_secs(30));
}

fn hex_text(hex: &str) -> String {
    let bytes: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Several weir processes starting the same job register the same sink
/// schema under a new subject at the same instant. Apicurio answers all
/// but one of such first registrations with a 409 ("already exists"); CI
/// once stopped a job on it. Every writer must come away with the one id
/// the registry keeps, and none may fail.
#[test]
fn writers_registering_one_schema_at_once_all_get_its_id() {
    use std::sync::{Arc, Barrier};
    use weir::format::registry::{Patience, Registry, SchemaKind};
    let config: weir::config::RegistryConfig = serde_json::from_value(serde_json::json!({
        "url": registry_url(),
    }))
    .unwrap();
    for round in 0..4 {
        let subject = format!("race-{}-{round}-value", unique("subject"));
        let schema = format!(
            r#"{{"type":"record","name":"Race{round}","fields":[{{"name":"n","type":"long"}},{{"name":"s","type":"string"}}]}}"#
        );
        const WRITERS: usize = 6;
        let start = Arc::new(Barrier::new(WRITERS));
        let writers: Vec<_> = (0..WRITERS)
            .map(|_| {
                // One client each, as separate processes have.
                let registry = Registry::new("main", &config).unwrap();
                let (start, subject, schema) = (start.clone(), subject.clone(), schema.clone());
                std::thread::spawn(move || {
                    start.wait();
                    registry.register(
                        &subject,
                        SchemaKind::Avro,
                        &schema,
                        &[],
                        Patience::For(Duration::from_secs(60)),
                    )
                })
            })
            .collect();
        let ids: Vec<u32> = writers
            .into_iter()
            .map(|w| {
                w.join()
                    .unwrap()
                    .unwrap_or_else(|e| panic!("{subject}: {e}"))
            })
            .collect();
        let kept = Registry::new("main", &config)
            .unwrap()
            .latest(&subject, Patience::For(Duration::from_secs(10)))
            .unwrap();
        assert!(
            ids.iter().all(|id| *id == kept.id),
            "{subject}: writers got ids {ids:?}, the registry keeps {}",
            kept.id
        );
    }
}
