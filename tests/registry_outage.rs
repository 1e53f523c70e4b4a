//! The schema registry stops answering for 20 s while a job reads Avro
//! records whose writer schema it has not fetched yet: the records wait
//! (nothing skipped, nothing lost, even with `on_bad_record = "skip"`),
//! and once the registry answers again every record is read once. In its
//! own test binary: the registry is shared, and the tests of other
//! binaries never run at the same time as this one.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use weir_testkit::{create_topic, log_tail, read_topic, unique, Isolation, WeirProcess};

#[path = "support/graph_jobs.rs"]
mod graph_jobs;
use graph_jobs::*;
#[path = "support/formats_kit.rs"]
mod formats_kit;
use formats_kit::*;

/// The registry's process (`scripts/registry.sh` keeps its pid).
fn registry_pid() -> i32 {
    let home = std::env::var_os("WEIR_REGISTRY_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".registry"));
    let text = std::fs::read_to_string(home.join("registry.pid"))
        .expect("the registry runs (scripts/registry.sh start)");
    text.trim().parse().expect("a pid")
}

/// SIGCONT on drop: the registry answers again whatever the test did.
struct Paused(i32);

impl Paused {
    fn new(pid: i32) -> Self {
        assert_eq!(
            unsafe { libc::kill(pid, libc::SIGSTOP) },
            0,
            "SIGSTOP the registry"
        );
        Paused(pid)
    }
}

impl Drop for Paused {
    fn drop(&mut self) {
        unsafe { libc::kill(self.0, libc::SIGCONT) };
    }
}

fn reading(id: usize, version: u32) -> String {
    match version {
        1 => format!(
            r#"{{"id":{id},"sensor":"s{}","value":{},"note":"n{id}"}}"#,
            id % 5,
            id
        ),
        _ => format!(
            r#"{{"id":{id},"sensor":"s{}","value":{},"unit":"kelvin"}}"#,
            id % 5,
            id
        ),
    }
}

#[test]
fn a_registry_that_stops_answering_for_20_s_makes_records_wait_and_loses_none() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output, scratch) = (
        unique("fmt-outage-in"),
        unique("fmt-outage-out"),
        unique("fmt-outage-scratch"),
    );
    create_topic(&input, 2);
    create_topic(&output, 2);
    create_topic(&scratch, 1);
    let sections = format!(
        r#"
[registries.main]
url = "{url}"
timeout = "1s"

[sources.readings]
topics = ["{input}"]
format = "avro"
registry = "main"
schema = "id BIGINT, sensor VARCHAR, `value` BIGINT, unit VARCHAR"
on_bad_record = "skip"

[sinks.out]
topic = "{output}"
delivery = "exactly-once"

[pipeline]
sql = "INSERT INTO out SELECT id, sensor, `value`, unit FROM readings;"
"#,
        url = registry_url()
    );
    let config = graph_config_with(
        dir.path(),
        &unique("fmt-outage"),
        2,
        &dir.path().join("checkpoints"),
        &sections,
    );
    let v1: Vec<String> = (0..200).map(|id| reading(id, 1)).collect();
    produce_values(&input, 2, "avro", "evolution/v1.avsc", None, &v1);
    let binary = std::path::PathBuf::from(env!("CARGO_BIN_EXE_weir"));
    let mut weir = WeirProcess::start(&binary, &config, &[("RUST_LOG", "info")]);
    let first = read_topic(
        &output,
        Isolation::Committed,
        Duration::from_secs(60),
        Duration::from_secs(1),
        |r| r.len() >= 200,
    );
    assert_eq!(first.len(), 200, "v1 read: {}", log_tail(&weir.log_text()));
    // v2 records, framed by the registry's serializer while it answers
    // (the id is new to weir), kept as bytes.
    let v2: Vec<String> = (200..400).map(|id| reading(id, 2)).collect();
    produce_values(&scratch, 1, "avro", "evolution/v2.avsc", None, &v2);
    let framed: Vec<String> = consume(&scratch, "raw", "string", Some(200), 30_000)
        .iter()
        .map(|r| r["value"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(framed.len(), 200);
    let paused_at = Instant::now();
    {
        let _paused = Paused::new(registry_pid());
        let records: Vec<(i32, &str)> = framed
            .iter()
            .enumerate()
            .map(|(i, hex)| (i as i32 % 2, hex.as_str()))
            .collect();
        produce_hex(&input, &records);
        std::thread::sleep(Duration::from_secs(20).saturating_sub(paused_at.elapsed()));
        let during = read_topic(
            &output,
            Isolation::Uncommitted,
            Duration::from_secs(2),
            Duration::from_millis(500),
            |_| false,
        );
        assert_eq!(
            during.len(),
            200,
            "no v2 record is written while its schema cannot be had"
        );
        let log = weir.log_text();
        assert!(
            log.contains("schema registry cannot be reached"),
            "the wait is logged: {}",
            log_tail(&log)
        );
    }
    let records = read_topic(
        &output,
        Isolation::Committed,
        Duration::from_secs(90),
        Duration::from_secs(2),
        |r| r.len() >= 400,
    );
    let log = weir.log_text();
    let mut ids: Vec<i64> = records
        .iter()
        .map(|r| {
            let v: serde_json::Value = serde_json::from_str(r.value.as_deref().unwrap()).unwrap();
            v["id"].as_i64().unwrap()
        })
        .collect();
    ids.sort();
    assert_eq!(
        ids,
        (0..400).collect::<Vec<i64>>(),
        "every record once, none skipped: {}",
        log_tail(&log)
    );
    assert!(
        !log.contains("skipped bad record"),
        "nothing was skipped: {}",
        log_tail(&log)
    );
    assert!(
        log.contains("schema registry answers again"),
        "{}",
        log_tail(&log)
    );
    weir.stop(Duration::from_secs(30));
}
