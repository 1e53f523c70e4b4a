//! Liveness and poison-output holes (issue #8) against a real broker and
//! the real binary: a timed-out alignment is cancelled and its folder stays
//! gone, a task that does not stop is named and the process exits, and an
//! output record over `message.max.bytes` follows `on_bad_record` instead
//! of a restart loop. Output is read by an independent read_committed
//! consumer.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use weir_testkit::{
    last_counts, log_tail, produce, read_topic, topic_pair, word_lines, Isolation, JobSpec,
    WeirProcess,
};

const WEIR: &str = env!("CARGO_BIN_EXE_weir");

fn weir() -> &'static Path {
    Path::new(WEIR)
}

fn read_counts(output: &str, expected: &HashMap<String, u64>) -> HashMap<String, u64> {
    last_counts(&read_topic(
        output,
        Isolation::Committed,
        Duration::from_secs(120),
        Duration::from_secs(1),
        |r| last_counts(r) == *expected,
    ))
}

/// Ids of checkpoints the log reports as failed.
fn failed_ids(log: &str) -> Vec<u64> {
    log.lines()
        .filter(|l| l.contains("checkpoint failed"))
        .filter_map(|l| l.split("checkpoint_id=").nth(1))
        .filter_map(|r| r.split_whitespace().next())
        .filter_map(|id| id.parse().ok())
        .collect()
}

#[test]
fn a_timed_out_alignment_is_cancelled_and_its_folder_is_never_recreated() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = topic_pair("cancel", 4);
    let (lines, expected) = word_lines(31, 6_000, 10, 500);
    let spec = JobSpec {
        delivery: "exactly-once".into(),
        interval: "300ms".into(),
        checkpoint_extra: "tolerable_failures = 10".into(),
        ..JobSpec::word_count(dir.path(), &input, &output)
    }
    .toml()
    .replace("timeout = \"20s\"", "timeout = \"1s\"");
    let config = dir.path().join("weir.toml");
    std::fs::write(&config, spec).unwrap();
    let job_dir = dir.path().join("checkpoints").join(
        std::fs::read_to_string(&config)
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("name = \""))
            .unwrap()
            .trim_end_matches('"'),
    );
    // The 7th barrier any source forwards is held back 4 s: the other
    // source's barrier blocks that input of each keyed subtask, and the
    // checkpoint times out after 1 s.
    let mut w = WeirProcess::start(
        weir(),
        &config,
        &[("FAILPOINTS", "source-before-barrier=6*off->1*delay(4000)")],
    );
    produce(&input, 4, &lines[..3_000]);
    assert!(
        w.wait_for_log("checkpoint failed", 1, Duration::from_secs(60)),
        "{}",
        log_tail(&w.log_text())
    );
    let failed = failed_ids(&w.log_text());
    assert!(!failed.is_empty(), "{}", log_tail(&w.log_text()));
    let folder = job_dir.join(format!("chk-{:010}", failed[0]));
    // The Coordinator removes the folder right after logging the failure;
    // from then on it must stay gone, also once the held-back source
    // forwards its stale barrier (about 4 s later), when a late snapshot
    // would re-create it (retention would remove it again later, so
    // watch closely).
    let watch_until = Instant::now() + Duration::from_secs(8);
    let mut gone = false;
    while Instant::now() < watch_until {
        let exists = folder.exists();
        assert!(
            !(gone && exists),
            "the cancelled checkpoint's folder {} was re-created:\n{}",
            folder.display(),
            log_tail(&w.log_text())
        );
        gone |= !exists;
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(gone, "the failed checkpoint's folder was never removed");
    let completed_before = w.log_text().matches("checkpoint completed").count();
    produce(&input, 4, &lines[3_000..]);
    assert!(
        w.wait_for_log(
            "checkpoint completed",
            completed_before + 3,
            Duration::from_secs(60)
        ),
        "{}",
        log_tail(&w.log_text())
    );
    assert_eq!(read_counts(&output, &expected), expected);
    let log = w.log_text();
    assert!(
        !log.contains("restarting from the last checkpoint"),
        "a cancelled alignment must not cost a restart: {}",
        log_tail(&log)
    );
    assert!(w.stop(Duration::from_secs(60)).success());
}

#[test]
fn a_task_that_does_not_stop_is_named_and_the_process_exits() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = topic_pair("stuck", 2);
    let (lines, _) = word_lines(37, 2_000, 10, 300);
    let spec = JobSpec {
        interval: "300ms".into(),
        checkpoint_extra: "tolerable_failures = 0".into(),
        max_attempts: 5,
        ..JobSpec::word_count(dir.path(), &input, &output)
    }
    .toml()
    .replace("timeout = \"20s\"", "timeout = \"1s\"");
    let config = dir.path().join("weir.toml");
    std::fs::write(&config, spec).unwrap();
    produce(&input, 2, &lines);
    // One keyed update blocks for 10 minutes: its checkpoint times out, the
    // attempt is cancelled, and that task never looks at the token.
    let mut w = WeirProcess::start(
        weir(),
        &config,
        &[("FAILPOINTS", "keyed-update=3000*off->1*delay(600000)")],
    );
    let started = Instant::now();
    let status = w.wait(Duration::from_secs(90)).unwrap_or_else(|| {
        panic!(
            "weir kept waiting for a stuck task:\n{}",
            log_tail(&w.log_text())
        )
    });
    assert!(!status.success());
    let log = w.log_text();
    assert!(
        log.contains("did not stop") && log.contains("word-count-"),
        "the stuck task is named: {}",
        log_tail(&log)
    );
    assert!(
        !log.contains("job failed; restarting"),
        "no in-process restart beside a stuck thread: {}",
        log_tail(&log)
    );
    assert!(started.elapsed() < Duration::from_secs(90));
}

/// A word longer than the producer's `message.max.bytes` allows for its
/// output record, between ordinary words.
fn lines_with_a_giant_word() -> (Vec<String>, HashMap<String, u64>, String) {
    let (mut lines, mut expected) = word_lines(41, 2_000, 5, 200);
    let giant = "g".repeat(3_000);
    lines.insert(1_000, format!("before {giant} after"));
    *expected.entry("before".into()).or_insert(0) += 1;
    *expected.entry("after".into()).or_insert(0) += 1;
    (lines, expected, giant)
}

fn oversized_spec(dir: &Path, input: &str, output: &str, policy: &str) -> JobSpec {
    JobSpec {
        delivery: "exactly-once".into(),
        on_bad_record: policy.into(),
        max_attempts: 5,
        extra: "[kafka.properties]\n\"message.max.bytes\" = \"4000\"\n".into(),
        ..JobSpec::word_count(dir, input, output)
    }
}

#[test]
fn an_output_record_over_message_max_bytes_is_skipped_under_skip() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = topic_pair("oversize-skip", 2);
    let (lines, expected, _) = lines_with_a_giant_word();
    produce(&input, 2, &lines);
    let spec = oversized_spec(dir.path(), &input, &output, "skip");
    let mut w = WeirProcess::start(weir(), &spec.write(), &[]);
    assert_eq!(read_counts(&output, &expected), expected);
    let log = w.log_text();
    assert!(
        log.contains("skipped an output record over message.max.bytes"),
        "{}",
        log_tail(&log)
    );
    assert!(!log.contains("restarting"), "{}", log_tail(&log));
    assert!(w.stop(Duration::from_secs(60)).success());
}

#[test]
fn an_output_record_over_message_max_bytes_stops_the_job_under_fail() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = topic_pair("oversize-fail", 2);
    let (lines, _, giant) = lines_with_a_giant_word();
    produce(&input, 2, &lines);
    let spec = oversized_spec(dir.path(), &input, &output, "fail");
    let mut w = WeirProcess::start(weir(), &spec.write(), &[]);
    let status = w.wait(Duration::from_secs(60)).unwrap_or_else(|| {
        panic!(
            "weir loops instead of stopping:\n{}",
            log_tail(&w.log_text())
        )
    });
    assert!(!status.success());
    let log = w.log_text();
    assert!(
        log.contains("message.max.bytes") && log.contains(&giant[..64]),
        "the error names the key and the limit: {}",
        log_tail(&log)
    );
    assert!(
        !log.contains("job failed; restarting"),
        "a restart would produce the same record again: {}",
        log_tail(&log)
    );
}

#[test]
fn past_the_changed_key_bound_on_checkpoint_results_are_emitted_before_the_barrier() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = topic_pair("changed-bound", 2);
    // 5,000 distinct words in one long epoch, with room for 100 changed keys.
    let lines: Vec<String> = (0..500)
        .map(|i| {
            (0..10)
                .map(|j| format!("w{}", i * 10 + j))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    produce(&input, 2, &lines);
    let spec = JobSpec {
        emit: "on-checkpoint".into(),
        interval: "10m".into(),
        extra: String::new(),
        ..JobSpec::word_count(dir.path(), &input, &output)
    }
    .toml()
    .replace("[state]\n", "[state]\ncache_entries = 100\n");
    let config = dir.path().join("weir.toml");
    std::fs::write(&config, spec).unwrap();
    let mut w = WeirProcess::start(weir(), &config, &[]);
    // No checkpoint for 10 minutes, yet every word's result is out: the
    // changed-key set was emitted each time it reached its bound.
    let records = read_topic(
        &output,
        Isolation::Uncommitted,
        Duration::from_secs(60),
        Duration::from_secs(1),
        |r| last_counts(r).len() >= 4_800,
    );
    let counts = last_counts(&records);
    assert!(
        counts.len() >= 4_800,
        "{} words out: {}",
        counts.len(),
        log_tail(&w.log_text())
    );
    assert!(counts.values().all(|c| *c == 1));
    assert!(!w.log_text().contains("checkpoint completed"));
    w.kill9();
}
