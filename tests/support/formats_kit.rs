//! What the format tests share (tests/formats.rs, tests/graph_group.rs,
//! tests/registry_outage.rs): the real schema registry
//! (`scripts/registry.sh`), records written by an independent producer and
//! read by an independent reader (`tests/formats/produce.py` and
//! `consume.py`: confluent-kafka's serializers, never weir's encoder), and
//! the Nexmark tables in Avro (bids) and Protobuf (persons, auctions).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The registry's Confluent API, as `scripts/registry.sh env` exports it.
pub fn registry_url() -> String {
    std::env::var("WEIR_REGISTRY_URL")
        .unwrap_or_else(|_| "http://127.0.0.1:8081/apis/ccompat/v7".to_string())
}

/// The virtualenv's interpreter with confluent-kafka (tests/formats/venv.sh).
pub fn python() -> PathBuf {
    std::env::var_os("WEIR_FORMATS_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let home = std::env::var_os("HOME").expect("HOME");
            PathBuf::from(home).join(".cache/weir/formats-venv/bin/python")
        })
}

pub fn formats_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/formats")
}

/// Writes `lines` (JSON: `{"key", "value", "partition"}`, or `value_hex`
/// with `--raw-value-hex`) to `topic` with produce.py and `args`.
pub fn produce_lines(topic: &str, args: &[&str], lines: &[String]) {
    let mut child = Command::new(python())
        .arg(formats_dir().join("produce.py"))
        .args(["--topic", topic, "--registry", &registry_url()])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tests/formats/produce.py runs (tests/formats/venv.sh installs its packages)");
    {
        let mut stdin = child.stdin.take().unwrap();
        for l in lines {
            writeln!(stdin, "{l}").unwrap();
        }
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "produce.py {args:?} to {topic}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// JSON objects as the values of records spread over `partitions`
/// (round robin, no key), in `format` with `schema` (a file under
/// tests/formats) and, for Protobuf, `message`.
pub fn produce_values(
    topic: &str,
    partitions: i32,
    format: &str,
    schema: &str,
    message: Option<&str>,
    values: &[String],
) {
    let schema = formats_dir().join(schema);
    let mut args = vec!["--format", format, "--schema", schema.to_str().unwrap()];
    if let Some(m) = message {
        args.extend(["--message", m]);
    }
    let lines: Vec<String> = values
        .iter()
        .enumerate()
        .map(|(i, v)| {
            format!(
                r#"{{"key":null,"value":{v},"partition":{}}}"#,
                i as i32 % partitions
            )
        })
        .collect();
    produce_lines(topic, &args, &lines);
}

/// Records of raw bytes (hex), to a partition.
pub fn produce_hex(topic: &str, records: &[(i32, &str)]) {
    let lines: Vec<String> = records
        .iter()
        .map(|(p, hex)| format!(r#"{{"key":null,"value_hex":"{hex}","partition":{p}}}"#))
        .collect();
    produce_lines(topic, &["--raw-value-hex"], &lines);
}

/// Every committed record of `topic` (read_committed) decoded by
/// consume.py: `{"partition","offset","key","value"}` each. Waits for
/// `expect` records, or until nothing came for `idle_ms`.
pub fn consume(
    topic: &str,
    format: &str,
    key_format: &str,
    expect: Option<usize>,
    idle_ms: u64,
) -> Vec<serde_json::Value> {
    let mut args = vec!["--idle-ms".to_string(), idle_ms.to_string()];
    if let Some(n) = expect {
        args.extend(["--expect".to_string(), n.to_string()]);
    }
    run_consume(topic, format, key_format, &args)
}

/// Every committed record of `topic`, read to the end of each partition
/// (`--eof`: no guess at how many records an updating result wrote).
pub fn consume_to_end(topic: &str, format: &str, key_format: &str) -> Vec<serde_json::Value> {
    let args = ["--eof", "--idle-ms", "60000"].map(String::from);
    run_consume(topic, format, key_format, &args)
}

fn run_consume(
    topic: &str,
    format: &str,
    key_format: &str,
    args: &[String],
) -> Vec<serde_json::Value> {
    let out = Command::new(python())
        .arg(formats_dir().join("consume.py"))
        .args(["--topic", topic, "--registry", &registry_url()])
        .args(["--format", format, "--key-format", key_format])
        .args(args)
        .output()
        .expect("tests/formats/consume.py runs");
    assert!(
        out.status.success(),
        "consume.py {topic}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("consume.py prints JSON lines"))
        .collect()
}

/// Epoch milliseconds (consume.py's form of a timestamp) as RFC 3339 with
/// milliseconds, DuckDB's canonical form, for the named columns.
pub fn timestamps_as_text(row: &mut serde_json::Value, columns: &[&str]) {
    for c in columns {
        if let Some(ms) = row.get(*c).and_then(serde_json::Value::as_i64) {
            row[*c] = serde_json::Value::String(weir::dataflow::json::format_timestamp(ms));
        }
    }
}

/// `[registries.main]`, and the Nexmark tables: bids in Avro (the
/// table's columns listed, a projection of the writer's schema), persons
/// and auctions in Protobuf (their columns from the registry's schema of
/// the topic's subject), each with a 4 s watermark.
pub fn nexmark_format_sections(topics: &BTreeMap<&str, String>) -> String {
    let mut t = format!(
        "\n[registries.main]\nurl = \"{}\"\ntimeout = \"3s\"\n",
        registry_url()
    );
    let watermark = "WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND";
    for (table, topic) in topics {
        match *table {
            "bid" => t.push_str(&format!(
                "\n[sources.bid]\ntopics = [\"{topic}\"]\nformat = \"avro\"\nregistry = \"main\"\n\
                 schema = \"\"\"\n  auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,\n  \
                 date_time TIMESTAMP(3), extra VARCHAR,\n  {watermark}\n\"\"\"\n"
            )),
            "person" | "auction" => {
                let message = if *table == "person" {
                    "nexmark.Person"
                } else {
                    "nexmark.Auction"
                };
                t.push_str(&format!(
                    "\n[sources.{table}]\ntopics = [\"{topic}\"]\nformat = \"protobuf\"\nregistry = \"main\"\n\
                     message = \"{message}\"\nschema = \"{watermark}\"\n"
                ))
            }
            other => panic!("no Nexmark table {other}"),
        }
    }
    t
}

/// Writes Nexmark events (weir-testkit's JSON lines) of `table` in its
/// format: bids in Avro, persons and auctions in Protobuf.
pub fn produce_nexmark(topic: &str, partitions: i32, table: &str, lines: &[String]) {
    if lines.is_empty() {
        return;
    }
    match table {
        "bid" => produce_values(topic, partitions, "avro", "nexmark/bid.avsc", None, lines),
        "person" => produce_values(
            topic,
            partitions,
            "protobuf",
            "nexmark/nexmark.proto",
            Some("nexmark.Person"),
            lines,
        ),
        "auction" => produce_values(
            topic,
            partitions,
            "protobuf",
            "nexmark/nexmark.proto",
            Some("nexmark.Auction"),
            lines,
        ),
        other => panic!("no Nexmark table {other}"),
    }
}
