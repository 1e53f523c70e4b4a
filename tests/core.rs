//! Black-box tests of the core (issue #2) against a real Kafka broker
//! (`scripts/kafka.sh start`). Output is checked by an independent rdkafka
//! consumer, never by weir's own code path.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use weir_testkit::{
    create_topic, last_counts, log_tail, produce, read_topic, topic_pair, unique, word_lines,
    Isolation, JobSpec, OutRecord, Rng, WeirProcess,
};

const WEIR: &str = env!("CARGO_BIN_EXE_weir");

fn weir() -> &'static Path {
    Path::new(WEIR)
}

fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("tempdir")
}

fn topics(partitions: i32) -> (String, String) {
    topic_pair("wc", partitions)
}

/// Reads the output until every word's last count equals `expected`.
fn read_until_counts(
    output: &str,
    expected: &HashMap<String, u64>,
    timeout: Duration,
) -> Vec<OutRecord> {
    read_topic(
        output,
        Isolation::Committed,
        timeout,
        Duration::from_secs(1),
        |recs| last_counts(recs) == *expected,
    )
}

fn assert_counts(records: &[OutRecord], expected: &HashMap<String, u64>, log: &str) {
    let got = last_counts(records);
    let mut wrong: Vec<_> = expected
        .iter()
        .filter(|(w, n)| got.get(*w) != Some(n))
        .map(|(w, n)| format!("{w}: expected {n}, got {:?}", got.get(w)))
        .collect();
    wrong.extend(
        got.keys()
            .filter(|w| !expected.contains_key(*w))
            .map(|w| format!("unexpected word {w}")),
    );
    wrong.sort();
    assert!(
        wrong.is_empty(),
        "{} words wrong, e.g. {:?}\n--- weir log (tail) ---\n{}",
        wrong.len(),
        &wrong[..wrong.len().min(10)],
        tail(log)
    );
}

fn tail(log: &str) -> &str {
    log_tail(log)
}

/// Every word's updates, in output order, are exactly 1, 2, ..., n.
fn assert_each_update_once(records: &[OutRecord], expected: &HashMap<String, u64>) {
    let mut seqs: HashMap<String, Vec<u64>> = HashMap::new();
    for r in records {
        seqs.entry(r.key.clone().unwrap())
            .or_default()
            .push(r.count());
    }
    for (w, n) in expected {
        let want: Vec<u64> = (1..=*n).collect();
        assert_eq!(seqs.get(w), Some(&want), "updates of {w}");
    }
}

#[test]
fn word_count_over_100k_words_is_exact() {
    let dir = tempdir();
    let (input, output) = topics(4);
    let (lines, expected) = word_lines(1, 10_000, 10, 3_000);
    produce(&input, 4, &lines);
    let spec = JobSpec::word_count(dir.path(), &input, &output);
    let mut weir = WeirProcess::start(weir(), &spec.write(), &[]);
    let records = read_until_counts(&output, &expected, Duration::from_secs(120));
    let status = weir.stop(Duration::from_secs(60));
    assert_counts(&records, &expected, &weir.log_text());
    assert!(status.success(), "clean stop exits 0: {status:?}");
    assert_eq!(expected.values().sum::<u64>(), 100_000);
    // The job ran straight through: every update appears exactly once.
    assert_each_update_once(&records, &expected);
    let log = weir.log_text();
    assert!(log.contains("final checkpoint completed"), "{}", tail(&log));

    let list = Command::new(WEIR)
        .args(["checkpoints", "list", "--config"])
        .arg(dir.path().join("weir.toml"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&list.stdout);
    assert!(list.status.success(), "{text}");
    assert!(text.contains("completed"), "{text}");
    assert!(text.contains(&format!("{input}/0=")), "{text}");
    assert!(
        text.lines().count() <= 1 + 2,
        "retained = 2 prunes older checkpoints:\n{text}"
    );
}

#[test]
fn sigterm_and_restart_continue_exactly() {
    let dir = tempdir();
    let (input, output) = topics(4);
    let (lines, expected) = word_lines(2, 12_000, 10, 2_000);
    let (first, second) = lines.split_at(6_000);
    produce(&input, 4, first);
    let spec = JobSpec::word_count(dir.path(), &input, &output);
    let config = spec.write();
    let mut weir = WeirProcess::start(weir(), &config, &[]);
    assert!(
        weir.wait_for_log("checkpoint completed", 2, Duration::from_secs(60)),
        "{}",
        weir.log_text()
    );
    produce(&input, 4, &second[..3_000]);
    let status = weir.stop(Duration::from_secs(60));
    assert!(status.success(), "{status:?}\n{}", tail(&weir.log_text()));
    produce(&input, 4, &second[3_000..]);
    let mut weir = WeirProcess::start(self::weir(), &config, &[]);
    let records = read_until_counts(&output, &expected, Duration::from_secs(120));
    assert_counts(&records, &expected, &weir.log_text());
    // A clean stop leaves nothing to replay: not even a repeated update.
    assert_each_update_once(&records, &expected);
    assert!(weir.log_text().contains("restoring checkpoint"));
    assert!(weir.stop(Duration::from_secs(60)).success());
}

#[test]
fn sigkill_at_random_moments_keeps_state_exactly_once() {
    let dir = tempdir();
    let (input, output) = topics(4);
    let (lines, expected) = word_lines(3, 20_000, 10, 2_000);
    let spec = JobSpec {
        interval: "300ms".into(),
        ..JobSpec::word_count(dir.path(), &input, &output)
    };
    let config = spec.write();
    // Input keeps arriving while weir is killed and restarted.
    let feeder_input = input.clone();
    let feeder = std::thread::spawn(move || {
        for chunk in lines.chunks(500) {
            produce(&feeder_input, 4, chunk);
            std::thread::sleep(Duration::from_millis(150));
        }
    });
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    eprintln!("kill schedule seed {seed}");
    let mut rng = Rng::new(seed);
    let mut weir = WeirProcess::start(self::weir(), &config, &[]);
    let mut kills = 0;
    while kills < 6 {
        std::thread::sleep(Duration::from_millis(400 + rng.below(1200)));
        weir.kill9();
        kills += 1;
        weir = WeirProcess::start(self::weir(), &config, &[]);
    }
    feeder.join().unwrap();
    let records = read_until_counts(&output, &expected, Duration::from_secs(180));
    assert_counts(&records, &expected, &weir.log_text());
    let log = weir.log_text();
    assert!(
        log.matches("restoring checkpoint").count() >= 1,
        "{}",
        tail(&log)
    );
    assert!(weir.stop(Duration::from_secs(60)).success());
    eprintln!(
        "{kills} kills; {} output records for {} words",
        records.len(),
        expected.values().sum::<u64>()
    );
}

fn bad_record_input(partitions: i32) -> (String, String, HashMap<String, u64>) {
    let (input, output) = topics(partitions);
    let values: Vec<Vec<u8>> = vec![
        b"apple banana".to_vec(),
        b"banana".to_vec(),
        vec![0xff, 0xfe, b'x'],
        b"cherry apple".to_vec(),
    ];
    produce(&input, 1, &values);
    let expected: HashMap<String, u64> = [("apple", 2), ("banana", 2), ("cherry", 1)]
        .into_iter()
        .map(|(w, n)| (w.to_string(), n))
        .collect();
    (input, output, expected)
}

#[test]
fn bad_record_fail_stops_naming_topic_partition_offset() {
    let dir = tempdir();
    let (input, output, _) = bad_record_input(1);
    let spec = JobSpec::word_count(dir.path(), &input, &output);
    let mut weir = WeirProcess::start(weir(), &spec.write(), &[]);
    let status = weir
        .wait(Duration::from_secs(60))
        .expect("weir stops on a bad record");
    assert!(!status.success());
    let log = weir.log_text();
    assert!(
        log.contains(&format!("bad record at {input}/0@2")),
        "{}",
        tail(&log)
    );
    assert!(log.contains("not valid UTF-8"), "{}", tail(&log));
    assert!(
        !log.contains("restarting"),
        "a bad record is not retried: {}",
        tail(&log)
    );
}

#[test]
fn bad_record_skip_logs_counts_and_goes_on() {
    let dir = tempdir();
    let (input, output, expected) = bad_record_input(1);
    let spec = JobSpec {
        on_bad_record: "skip".into(),
        ..JobSpec::word_count(dir.path(), &input, &output)
    };
    let mut weir = WeirProcess::start(weir(), &spec.write(), &[]);
    let records = read_until_counts(&output, &expected, Duration::from_secs(60));
    assert!(
        weir.wait_for_log("bad_records_skipped=1", 1, Duration::from_secs(30)),
        "{}",
        weir.log_text()
    );
    assert!(weir.stop(Duration::from_secs(30)).success());
    assert_counts(&records, &expected, &weir.log_text());
    let log = weir.log_text();
    assert!(log.contains("skipped bad record"), "{log}");
    assert!(log.contains("offset=2"), "{log}");
}

#[test]
fn bad_record_dead_letter_keeps_the_original_with_headers() {
    let dir = tempdir();
    let (input, output, expected) = bad_record_input(1);
    let dlq = unique("dlq");
    create_topic(&dlq, 1);
    let spec = JobSpec {
        on_bad_record: "dead-letter".into(),
        dead_letter_topic: Some(dlq.clone()),
        ..JobSpec::word_count(dir.path(), &input, &output)
    };
    let mut weir = WeirProcess::start(weir(), &spec.write(), &[]);
    let records = read_until_counts(&output, &expected, Duration::from_secs(60));
    let dead = read_topic(
        &dlq,
        Isolation::Committed,
        Duration::from_secs(30),
        Duration::from_millis(500),
        |r| !r.is_empty(),
    );
    assert!(weir.stop(Duration::from_secs(30)).success());
    assert_counts(&records, &expected, &weir.log_text());
    assert_eq!(dead.len(), 1, "{dead:?}");
    let d = &dead[0];
    assert_eq!(d.value_bytes.as_deref(), Some(&[0xff, 0xfe, b'x'][..]));
    assert_eq!(d.headers.get("weir.source.topic"), Some(&input));
    assert_eq!(
        d.headers.get("weir.source.partition").map(String::as_str),
        Some("0")
    );
    assert_eq!(
        d.headers.get("weir.source.offset").map(String::as_str),
        Some("2")
    );
    assert!(d.headers["weir.error"].contains("UTF-8"), "{:?}", d.headers);
}

#[test]
fn a_changed_pipeline_is_refused_with_the_uids_named() {
    let dir = tempdir();
    let (input, output) = topics(2);
    produce(&input, 2, &["a b c"]);
    let spec = JobSpec::word_count(dir.path(), &input, &output);
    let config = spec.write();
    let mut weir = WeirProcess::start(self::weir(), &config, &[]);
    assert!(weir.wait_for_log("checkpoint completed", 1, Duration::from_secs(60)));
    assert!(weir.stop(Duration::from_secs(30)).success());
    let changed = JobSpec {
        pipeline: "kind = \"word-count\"\nuid = \"word-count-v2\"".into(),
        ..spec
    };
    let config = changed.write();
    let mut weir = WeirProcess::start(self::weir(), &config, &[]);
    let status = weir
        .wait(Duration::from_secs(60))
        .expect("refused at start");
    assert!(!status.success());
    let log = weir.log_text();
    assert!(
        log.contains("\"word-count\"") && log.contains("\"word-count-v2\""),
        "{}",
        tail(&log)
    );
}

#[test]
fn validate_reports_every_problem_with_its_key_path() {
    let dir = tempdir();
    let path: PathBuf = dir.path().join("bad.toml");
    std::fs::write(
        &path,
        r#"
[job]
name = "bad name"
parallelism = 0
[kafka]
bootstrap_servers = "127.0.0.1:9092"
group_id = "g"
[checkpoint]
dir = "/tmp/x"
[state]
dir = "/tmp/y"
[source]
topics = ["in"]
on_bad_record = "dead-letter"
[pipeline]
kind = "word-count"
[sink]
topic = "in"
"#,
    )
    .unwrap();
    let out = Command::new(WEIR)
        .args(["validate", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    for key in [
        "job.name",
        "job.parallelism",
        "source.dead_letter_topic",
        "sink.topic",
    ] {
        assert!(err.contains(&format!("{key}:")), "{key} missing in:\n{err}");
    }
    assert!(err.contains(&path.display().to_string()), "{err}");
    let good = JobSpec::word_count(dir.path(), "in", "out").write();
    let out = Command::new(WEIR)
        .args(["validate", "--config"])
        .arg(&good)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_panicking_task_restarts_the_job_from_the_last_checkpoint() {
    let dir = tempdir();
    let (input, output) = topics(4);
    let (lines, expected) = word_lines(4, 10_000, 10, 1_000);
    produce(&input, 4, &lines);
    let spec = JobSpec::word_count(dir.path(), &input, &output);
    // One panic in a keyed subtask after 30,000 updates.
    let mut weir = WeirProcess::start(
        weir(),
        &spec.write(),
        &[("FAILPOINTS", "keyed-update=30000*off->1*panic->off")],
    );
    let records = read_until_counts(&output, &expected, Duration::from_secs(120));
    assert_counts(&records, &expected, &weir.log_text());
    let log = weir.log_text();
    assert!(log.contains("panicked"), "{}", tail(&log));
    assert!(
        log.contains("job failed; restarting from the last checkpoint"),
        "{}",
        tail(&log)
    );
    assert_eq!(
        log.matches("job running").count(),
        2,
        "one in-process restart: {}",
        tail(&log)
    );
    assert!(weir.stop(Duration::from_secs(60)).success());
}

#[test]
fn past_max_attempts_weir_exits_non_zero() {
    let dir = tempdir();
    let (input, output) = topics(2);
    produce(&input, 2, &["a b c"]);
    // JobSpec sets restart.max_attempts = 3.
    let spec = JobSpec::word_count(dir.path(), &input, &output);
    let mut weir = WeirProcess::start(
        weir(),
        &spec.write(),
        &[("FAILPOINTS", "keyed-update=panic")],
    );
    let status = weir.wait(Duration::from_secs(120));
    let log = weir.log_text();
    let status = status.unwrap_or_else(|| panic!("weir did not give up: {}", tail(&log)));
    assert_eq!(status.code(), Some(1));
    // Three consecutive failed attempts were restarted, the fourth gave up.
    // Checkpoints that complete before the record arrives do not count as
    // progress (their offsets are the restored ones), so the count never
    // starts over.
    assert!(log.contains("attempt=3 max_attempts=3"), "{}", tail(&log));
    assert!(!log.contains("attempt=4"), "{}", tail(&log));
    assert!(log.contains("restart budget spent"), "{}", tail(&log));
}

#[test]
fn a_crash_during_the_first_checkpoint_does_not_block_the_restart() {
    let dir = tempdir();
    let (input, output) = topics(4);
    let (lines, expected) = word_lines(5, 2_000, 10, 300);
    produce(&input, 4, &lines);
    let spec = JobSpec::word_count(dir.path(), &input, &output);
    let config = spec.write();
    // Killed in checkpoint 1, after a snapshot, before anything is prepared.
    let mut first = WeirProcess::start(
        weir(),
        &config,
        &[("FAILPOINTS", "after-keyed-snapshot-before-ack=return")],
    );
    first
        .wait(Duration::from_secs(60))
        .expect("the crash point fires");
    assert!(first
        .log_text()
        .contains("crash point after-keyed-snapshot-before-ack reached"));
    let mut weir = WeirProcess::start(self::weir(), &config, &[]);
    let records = read_until_counts(&output, &expected, Duration::from_secs(60));
    assert_counts(&records, &expected, &weir.log_text());
    let log = weir.log_text();
    assert!(
        log.contains("missing _metadata (never prepared)"),
        "the leftover is reported: {}",
        tail(&log)
    );
    assert!(log.contains("fresh start"), "{}", tail(&log));
    assert!(weir.stop(Duration::from_secs(60)).success());
}

#[test]
fn start_latest_is_kept_across_a_restart_before_the_first_record() {
    let dir = tempdir();
    let (input, output) = topics(1);
    produce(&input, 1, &["old words before the job"]);
    let spec = JobSpec {
        start: "latest".into(),
        ..JobSpec::word_count(dir.path(), &input, &output)
    };
    let config = spec.write();
    let mut first = WeirProcess::start(weir(), &config, &[]);
    assert!(first.wait_for_log("checkpoint completed", 2, Duration::from_secs(60)));
    first.kill9();
    // Arrives while weir is down: "latest" must not move past it.
    produce(&input, 1, &["new new"]);
    let mut weir = WeirProcess::start(self::weir(), &config, &[]);
    let expected: HashMap<String, u64> = [("new".to_string(), 2)].into_iter().collect();
    let records = read_until_counts(&output, &expected, Duration::from_secs(60));
    assert_counts(&records, &expected, &weir.log_text());
    assert!(weir.stop(Duration::from_secs(60)).success());
}
