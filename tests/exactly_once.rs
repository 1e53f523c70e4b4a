//! Exactly-once output (issue #3) against a real broker: SIGKILLs at random
//! moments and a crash at every named crash point, checked by an
//! independent read_committed consumer.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use weir_testkit::{
    assert_multiset, last_counts, log_tail, produce, read_topic, topic_pair, word_lines, Isolation,
    JobSpec, Rng, WeirProcess,
};

const WEIR: &str = env!("CARGO_BIN_EXE_weir");

/// The crash points compiled in with `--features failpoints`, with the
/// fail-crate action that fires each one after some normal evaluations.
const CRASH_POINTS: &[(&str, &str)] = &[
    ("after-source-snapshot", "3*off->return"),
    ("after-keyed-snapshot-before-ack", "3*off->return"),
    ("after-metadata-before-commit", "2*off->return"),
    ("after-commit-before-mark", "2*off->return"),
    // The pause lets librdkafka deliver what the open transaction holds
    // so far: the crash then leaves output on the broker to abort.
    ("mid-transaction-produce", "15000*off->1*delay(500)->return"),
];

fn weir() -> &'static Path {
    Path::new(WEIR)
}

fn tail(log: &str) -> &str {
    log_tail(log)
}

fn seed() -> u64 {
    let s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    eprintln!("random seed {s}");
    s
}

/// Produces `lines` in chunks on a background thread, so input keeps
/// arriving while weir is killed and restarted.
fn feed(
    topic: &str,
    lines: Vec<String>,
    chunk: usize,
    pause: Duration,
) -> std::thread::JoinHandle<()> {
    let topic = topic.to_string();
    std::thread::spawn(move || {
        for c in lines.chunks(chunk) {
            produce(&topic, 4, c);
            std::thread::sleep(pause);
        }
    })
}

/// Runs weir with a crash point armed until it kills itself; returns the log.
fn crash_at(config: &Path, point: &str, action: &str) -> String {
    let spec = format!("{point}={action}");
    let mut w = WeirProcess::start(weir(), config, &[("FAILPOINTS", spec.as_str())]);
    let status = w
        .wait(Duration::from_secs(90))
        .unwrap_or_else(|| panic!("crash point {point} never fired:\n{}", tail(&w.log_text())));
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        status.signal(),
        Some(libc::SIGKILL),
        "{point}: {status:?}\n{}",
        tail(&w.log_text())
    );
    w.log_text()
}

#[test]
fn exactly_once_output_survives_kills_and_every_crash_point() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = topic_pair("eo", 4);
    let (lines, expected) = word_lines(11, 20_000, 10, 2_000);
    assert_eq!(expected.values().sum::<u64>(), 200_000);
    let spec = JobSpec {
        delivery: "exactly-once".into(),
        interval: "300ms".into(),
        ..JobSpec::word_count(dir.path(), &input, &output)
    };
    let config = spec.write();
    let feeder = feed(&input, lines, 400, Duration::from_millis(300));
    let mut rng = Rng::new(seed());
    let mut kills = 0;
    let mut crashes = 0;
    // Alternate random SIGKILLs and named crash points.
    let mut points = CRASH_POINTS.iter();
    while kills < 10 || crashes < CRASH_POINTS.len() {
        if kills < 10 {
            let mut w = WeirProcess::start(weir(), &config, &[]);
            std::thread::sleep(Duration::from_millis(500 + rng.below(1500)));
            w.kill9();
            kills += 1;
        }
        if let Some((point, action)) = points.next() {
            let log = crash_at(&config, point, action);
            assert!(
                log.contains(&format!("crash point {point} reached")),
                "{}",
                tail(&log)
            );
            crashes += 1;
        }
    }
    feeder.join().unwrap();
    let mut w = WeirProcess::start(weir(), &config, &[]);
    read_topic(
        &output,
        Isolation::Committed,
        Duration::from_secs(180),
        Duration::from_secs(1),
        |r| last_counts(r) == expected,
    );
    let status = w.stop(Duration::from_secs(60));
    assert!(status.success(), "{}", tail(&w.log_text()));
    let committed = read_topic(
        &output,
        Isolation::Committed,
        Duration::from_secs(120),
        Duration::from_secs(3),
        |r| last_counts(r) == expected,
    );
    assert_multiset(&committed, &expected);
    // Proof that the test could see a duplicate: aborted transactions left
    // records that read_committed hides.
    let uncommitted = read_topic(
        &output,
        Isolation::Uncommitted,
        Duration::from_secs(120),
        Duration::from_secs(3),
        |r| r.len() >= committed.len(),
    );
    assert!(
        uncommitted.len() > committed.len(),
        "read_uncommitted saw {} records, read_committed {}: no aborted output at all?",
        uncommitted.len(),
        committed.len()
    );
    eprintln!(
        "{kills} kills, {crashes} crash points; committed {} records, uncommitted {}",
        committed.len(),
        uncommitted.len()
    );
}

#[test]
fn on_checkpoint_emit_is_strictly_increasing_and_exact_after_kills() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = topic_pair("eo-oc", 4);
    let (lines, expected) = word_lines(12, 10_000, 10, 500);
    let spec = JobSpec {
        delivery: "exactly-once".into(),
        emit: "on-checkpoint".into(),
        interval: "200ms".into(),
        ..JobSpec::word_count(dir.path(), &input, &output)
    };
    let config = spec.write();
    let feeder = feed(&input, lines, 250, Duration::from_millis(200));
    let mut rng = Rng::new(seed());
    for _ in 0..6 {
        let mut w = WeirProcess::start(weir(), &config, &[]);
        std::thread::sleep(Duration::from_millis(600 + rng.below(1200)));
        w.kill9();
    }
    feeder.join().unwrap();
    let mut w = WeirProcess::start(weir(), &config, &[]);
    let records = read_topic(
        &output,
        Isolation::Committed,
        Duration::from_secs(120),
        Duration::from_secs(1),
        |r| last_counts(r) == expected,
    );
    assert!(w.stop(Duration::from_secs(60)).success());
    let mut seqs: HashMap<String, Vec<u64>> = HashMap::new();
    for r in &records {
        seqs.entry(r.key.clone().unwrap())
            .or_default()
            .push(r.count());
    }
    assert_eq!(seqs.len(), expected.len());
    for (w, seq) in &seqs {
        assert!(
            seq.windows(2).all(|p| p[0] < p[1]),
            "{w}: {seq:?} not strictly increasing"
        );
        assert_eq!(seq.last(), expected.get(w), "{w}");
    }
    // Output follows distinct keys per checkpoint, not input records.
    assert!(
        records.len() < 100_000 / 4,
        "{} outputs for 100000 words",
        records.len()
    );
}

#[test]
fn a_second_instance_fences_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = topic_pair("eo-fence", 4);
    let (lines, expected) = word_lines(13, 6_000, 10, 500);
    let a = JobSpec {
        delivery: "exactly-once".into(),
        interval: "300ms".into(),
        ..JobSpec::word_count(&dir.path().join("a"), &input, &output)
    };
    // Same job, same transactional id, same (shared) checkpoint directory;
    // only the local state directory differs.
    let b = JobSpec {
        dir: dir.path().join("b"),
        ..a.clone()
    };
    let a_config = a.write();
    let b_config = b.write();

    let feeder = feed(&input, lines, 300, Duration::from_millis(200));
    let mut first = WeirProcess::start(weir(), &a_config, &[]);
    assert!(
        first.wait_for_log("checkpoint completed", 3, Duration::from_secs(60)),
        "{}",
        first.log_text()
    );
    let mut second = WeirProcess::start(weir(), &b_config, &[]);
    let status = first
        .wait(Duration::from_secs(60))
        .expect("the fenced instance stops");
    assert!(!status.success());
    let log = first.log_text();
    assert!(
        log.contains("another weir instance with the same job and transactional id took over"),
        "{}",
        tail(&log)
    );
    feeder.join().unwrap();
    let committed = read_topic(
        &output,
        Isolation::Committed,
        Duration::from_secs(120),
        Duration::from_secs(1),
        |r| last_counts(r) == expected,
    );
    assert!(
        second.stop(Duration::from_secs(60)).success(),
        "{}",
        tail(&second.log_text())
    );
    assert_multiset(&committed, &expected);
}

#[test]
fn committed_offsets_without_their_checkpoint_refuse_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = topic_pair("eo-lost", 4);
    produce(&input, 4, &["a b c d e f g h"]);
    let spec = JobSpec {
        delivery: "exactly-once".into(),
        ..JobSpec::word_count(dir.path(), &input, &output)
    };
    let config = spec.write();
    let mut w = WeirProcess::start(weir(), &config, &[]);
    // The record's output committed: the group's offsets are past it (two
    // checkpoints alone can complete before the first record is read).
    let committed = read_topic(
        &output,
        Isolation::Committed,
        Duration::from_secs(60),
        Duration::from_millis(500),
        |r| r.len() >= 8,
    );
    assert_eq!(committed.len(), 8, "{}", tail(&w.log_text()));
    assert!(w.stop(Duration::from_secs(60)).success());
    std::fs::remove_dir_all(dir.path().join("checkpoints")).unwrap();
    let mut w = WeirProcess::start(weir(), &config, &[]);
    let status = w
        .wait(Duration::from_secs(60))
        .unwrap_or_else(|| panic!("kept running instead of refusing:\n{}", tail(&w.log_text())));
    assert!(!status.success());
    let log = w.log_text();
    assert!(
        log.contains("match no retained checkpoint"),
        "{}",
        tail(&log)
    );
    assert!(
        log.contains(&format!("(\"{input}\", 0)")),
        "names the offsets: {}",
        tail(&log)
    );
}

#[test]
fn a_transaction_timeout_below_interval_plus_checkpoint_timeout_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let spec = JobSpec {
        delivery: "exactly-once".into(),
        ..JobSpec::word_count(dir.path(), "in", "out")
    };
    let toml = spec.toml().replace(
        "group_id",
        "properties = { \"transaction.timeout.ms\" = \"5000\" }\ngroup_id",
    );
    let config = dir.path().join("short.toml");
    std::fs::write(&config, toml).unwrap();
    for cmd in ["run", "validate"] {
        let out = Command::new(WEIR)
            .args([cmd, "--config"])
            .arg(&config)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{cmd}: {err}");
        assert!(
            err.contains("kafka.properties.\"transaction.timeout.ms\""),
            "{cmd}: {err}"
        );
        assert!(err.contains("20500 ms"), "{cmd}: {err}");
    }
}

/// A word count's exactly-once configuration, loaded as weir loads it,
/// over new topics of `partitions` partitions: its folder (kept alive by
/// the caller), its output topic and the configuration.
fn exactly_once_config(
    prefix: &str,
    partitions: i32,
) -> (tempfile::TempDir, String, weir::config::Config) {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = topic_pair(prefix, partitions);
    let spec = JobSpec {
        delivery: "exactly-once".into(),
        ..JobSpec::word_count(dir.path(), &input, &output)
    };
    let config = weir::config::Config::load(&spec.write()).unwrap();
    (dir, output, config)
}

/// Group mode's late checkpoints (issue #18, hole 4) rest on the
/// producer's journal: a transaction renewed (aborted and begun again with
/// the same records), suspended and resumed, then committed, holds each of
/// its records exactly once and in order per partition, as an independent
/// read_committed reader sees them; headers and keys come through; a
/// transaction aborted after a renewal leaves nothing visible.
#[test]
fn a_renewed_transaction_commits_each_record_once_in_order() {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::message::{Header, OwnedHeaders};
    use weir::kafka::producer::{ProduceBatch, SinkProducer};

    let (_dir, output, config) = exactly_once_config("renew", 2);
    let producer = SinkProducer::create(&config, tokio_util::sync::CancellationToken::new())
        .unwrap()
        .with_journal();
    let group: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", weir_testkit::bootstrap())
        .set("group.id", weir_testkit::unique("renew"))
        .create()
        .unwrap();
    let metadata = group.group_metadata().expect("group metadata");
    let none = rdkafka::TopicPartitionList::new();
    let batch_of = |from: usize, to: usize| {
        let mut b = ProduceBatch::default();
        for i in from..to {
            b.push(format!("k{}", i % 7).as_bytes(), format!("{i}").as_bytes());
        }
        b
    };

    producer.begin_transaction().unwrap();
    producer.send_batch(&output, &batch_of(0, 100)).unwrap();
    let headers = OwnedHeaders::new().insert(Header {
        key: "weir.test",
        value: Some("h"),
    });
    producer
        .send(&output, Some(b"k1"), Some(b"100"), Some(headers), None)
        .unwrap();
    assert!(producer.journal_bytes() > 0);
    producer.renew_transaction().unwrap();
    producer.send_batch(&output, &batch_of(101, 150)).unwrap();
    producer.suspend_transaction().unwrap();
    producer.resume_transaction().unwrap();
    producer.renew_transaction().unwrap();
    producer.send_batch(&output, &batch_of(150, 200)).unwrap();
    producer.commit_transaction(&none, &metadata).unwrap();
    assert_eq!(producer.journal_bytes(), 0, "a commit empties the journal");

    // Aborted after a renewal: none of it is ever visible.
    producer.begin_transaction().unwrap();
    producer.send_batch(&output, &batch_of(1000, 1100)).unwrap();
    producer.renew_transaction().unwrap();
    producer.abort_transaction().unwrap();
    producer.begin_transaction().unwrap();
    producer
        .send(&output, Some(b"end"), Some(b"end"), None, None)
        .unwrap();
    producer.commit_transaction(&none, &metadata).unwrap();

    let records = read_topic(
        &output,
        Isolation::Committed,
        Duration::from_secs(60),
        Duration::from_secs(2),
        |r| r.iter().any(|r| r.value.as_deref() == Some("end")),
    );
    let values: Vec<usize> = records
        .iter()
        .filter_map(|r| r.value.as_deref()?.parse().ok())
        .collect();
    let mut sorted = values.clone();
    sorted.sort_unstable();
    assert_eq!(
        sorted,
        (0..200).collect::<Vec<_>>(),
        "each committed record once, none aborted"
    );
    // In order per key (one key's records share a partition).
    let mut last: HashMap<String, usize> = HashMap::new();
    for r in &records {
        let (Some(k), Some(Ok(v))) = (&r.key, r.value.as_deref().map(str::parse::<usize>)) else {
            continue;
        };
        if let Some(prev) = last.insert(k.clone(), v) {
            assert!(prev < v, "key {k}: {v} after {prev}");
        }
    }
    let with_header = records
        .iter()
        .find(|r| r.value.as_deref() == Some("100"))
        .unwrap();
    assert_eq!(
        with_header.headers.get("weir.test").map(String::as_str),
        Some("h")
    );
}

/// A restart's fence (`init_transactions` with the job's transactional id)
/// aborts the transaction a killed process left open at once, not when the
/// broker's `transaction.timeout.ms` expires: the old process can no
/// longer commit, and a read_committed reader sees nothing of what it sent.
#[test]
fn a_restart_aborts_the_open_transaction_of_a_killed_process_at_once() {
    use rdkafka::config::ClientConfig;
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

    let (_dir, output, config) = exactly_once_config("eo-fence-open", 1);
    // The killed process: its transaction holds a record on the output
    // topic and stays open (never committed nor aborted), for a minute at
    // most on the broker.
    let killed: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", weir_testkit::bootstrap())
        .set("transactional.id", config.transactional_id())
        .set("transaction.timeout.ms", "60000")
        .create()
        .unwrap();
    killed.init_transactions(Duration::from_secs(30)).unwrap();
    killed.begin_transaction().unwrap();
    killed
        .send(
            BaseRecord::to(&output)
                .key("w")
                .payload("from the killed process"),
        )
        .map_err(|(e, _)| e)
        .unwrap();
    killed.flush(Duration::from_secs(30)).unwrap();

    let started = std::time::Instant::now();
    let restarted = weir::kafka::producer::SinkProducer::create(
        &config,
        tokio_util::sync::CancellationToken::new(),
    )
    .expect("the fence");
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(20),
        "the fence waited {took:?}, as if for the open transaction's timeout"
    );
    assert!(
        killed.commit_transaction(Duration::from_secs(30)).is_err(),
        "the killed process's transaction committed after the fence"
    );
    drop(restarted);
    // A record written after the fence is visible to a read_committed
    // reader only once the open transaction before it has ended: it was
    // aborted, since only the record after it is read.
    produce(&output, 1, &["after the fence"]);
    let committed = read_topic(
        &output,
        Isolation::Committed,
        Duration::from_secs(30),
        Duration::from_secs(2),
        |r| !r.is_empty(),
    );
    let values: Vec<_> = committed.iter().map(|r| r.value.as_deref()).collect();
    assert_eq!(values, [Some("after the fence")]);
    let seen = read_topic(
        &output,
        Isolation::Uncommitted,
        Duration::from_secs(30),
        Duration::from_secs(2),
        |r| r.len() >= 2,
    );
    assert_eq!(
        seen.len(),
        2,
        "the killed process's record reached the broker: {seen:?}"
    );
}

/// Runs one of the broker's own Kafka tools (`scripts/kafka.sh tool`),
/// an independent reader of what the broker holds; returns its output.
fn kafka_tool(class: &str, args: &[&str]) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/kafka.sh");
    let out = Command::new(script)
        .arg("tool")
        .arg(class)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{class} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The value after `name: ` in a DumpLogSegments line.
fn field<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let at = line.find(&format!("{name}: "))? + name.len() + 2;
    line[at..].split_whitespace().next()
}

/// With exactly-once delivery the job's two transactional producers
/// alternate per epoch (issue #43): both commit output, as the broker's own
/// log says, and a read_committed reader still sees every count exactly
/// once, each key's last count last (an epoch's record landing before the
/// previous epoch's would leave a lower count last). The broker's tools
/// read its state: `TransactionsCommand` maps each transactional id to its
/// producer id, `LogDirsCommand` says where its log is, `DumpLogSegments`
/// lists the output partitions' record batches and transaction markers.
#[test]
fn both_transactional_producers_commit_output_in_turn() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = topic_pair("eo-pair", 4);
    let (lines, expected) = word_lines(14, 6_000, 10, 300);
    let spec = JobSpec {
        delivery: "exactly-once".into(),
        interval: "200ms".into(),
        ..JobSpec::word_count(dir.path(), &input, &output)
    };
    let config_path = spec.write();
    let config = weir::config::Config::load(&config_path).unwrap();
    let ids = [
        config.transactional_id(),
        format!("{}.1", config.transactional_id()),
    ];
    let feeder = feed(&input, lines, 300, Duration::from_millis(100));
    let mut w = WeirProcess::start(weir(), &config_path, &[]);
    feeder.join().unwrap();
    let committed = read_topic(
        &output,
        Isolation::Committed,
        Duration::from_secs(120),
        Duration::from_secs(1),
        |r| last_counts(r) == expected,
    );
    let status = w.stop(Duration::from_secs(60));
    assert!(status.success(), "{}", tail(&w.log_text()));
    assert_multiset(&committed, &expected);
    for id in &ids {
        let token = config.job_checkpoint_dir().join(format!("owner-{id}"));
        assert!(token.exists(), "no owner token {}", token.display());
    }

    // Transactional id -> producer id, as the transaction coordinator has it.
    let listed = kafka_tool(
        "org.apache.kafka.tools.TransactionsCommand",
        &["--bootstrap-server", &weir_testkit::bootstrap(), "list"],
    );
    let producer_of = |id: &str| -> String {
        listed
            .lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .find(|cols| cols.first() == Some(&id))
            .and_then(|cols| cols.get(2).map(|s| s.to_string()))
            .unwrap_or_else(|| panic!("transactional id {id} not listed:\n{listed}"))
    };
    let producers: Vec<String> = ids.iter().map(|id| producer_of(id)).collect();
    assert_ne!(producers[0], producers[1], "{listed}");

    // Commit markers and data batches per producer id, over the output
    // topic's segments, in the log directory the broker reports.
    let dirs = kafka_tool(
        "org.apache.kafka.tools.LogDirsCommand",
        &[
            "--describe",
            "--bootstrap-server",
            &weir_testkit::bootstrap(),
            "--topic-list",
            &output,
        ],
    );
    let report: serde_json::Value = dirs
        .lines()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no JSON in LogDirsCommand's output:\n{dirs}"));
    let log_dir = std::path::PathBuf::from(
        report["brokers"][0]["logDirs"][0]["logDir"]
            .as_str()
            .unwrap_or_else(|| panic!("no logDir in {report}")),
    );
    let mut commits: HashMap<String, usize> = HashMap::new();
    let mut batches: HashMap<String, usize> = HashMap::new();
    for p in 0..4 {
        let partition_dir = log_dir.join(format!("{output}-{p}"));
        let segments: Vec<String> = std::fs::read_dir(&partition_dir)
            .unwrap_or_else(|e| panic!("{}: {e}", partition_dir.display()))
            .filter_map(|e| {
                let path = e.unwrap().path();
                (path.extension()? == "log").then(|| path.display().to_string())
            })
            .collect();
        assert!(
            !segments.is_empty(),
            "no segment in {}",
            partition_dir.display()
        );
        let dump = kafka_tool(
            "kafka.tools.DumpLogSegments",
            &["--print-data-log", "--files", &segments.join(",")],
        );
        for line in dump.lines().filter(|l| l.contains("baseOffset: ")) {
            let Some(producer) = field(line, "producerId") else {
                continue;
            };
            if field(line, "isControl") == Some("true") {
                continue;
            }
            *batches.entry(producer.to_string()).or_default() += 1;
        }
        // A marker's line follows its batch's header, which names the
        // producer.
        let mut current: Option<String> = None;
        for line in dump.lines() {
            if line.contains("baseOffset: ") {
                current = field(line, "producerId").map(str::to_string);
            } else if line.contains("endTxnMarker: COMMIT") {
                let producer = current.clone().expect("a marker follows its batch header");
                *commits.entry(producer).or_default() += 1;
            }
        }
    }
    eprintln!("producers {producers:?}: data batches {batches:?}, commit markers {commits:?}");
    for p in &producers {
        assert!(
            batches.get(p).copied().unwrap_or(0) > 0 && commits.get(p).copied().unwrap_or(0) > 1,
            "producer {p} wrote or committed nothing: batches {batches:?}, commits {commits:?}"
        );
    }
}
