//! Running weir as a service (issue #4): the admin endpoint, savepoints,
//! secrets, the state-directory lock and failing checkpoint storage,
//! against a real broker and the real binary.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use weir_testkit::{
    create_topic, http, last_counts, log_tail, produce, read_topic, topic_pair, unique, word_lines,
    Isolation, JobSpec, WeirProcess,
};

const WEIR: &str = env!("CARGO_BIN_EXE_weir");

fn weir() -> &'static Path {
    Path::new(WEIR)
}

fn tail(log: &str) -> &str {
    log_tail(log)
}

fn topics(partitions: i32) -> (String, String) {
    topic_pair("ops", partitions)
}

/// The value of one sample line of Prometheus text, e.g.
/// `weir_records_in_total{operator="kafka-source"}`.
fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics
        .lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + timeout;
    while Instant::now() < until {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
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

#[test]
fn metrics_move_and_lag_falls_to_zero() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = topics(4);
    let (lines, expected) = word_lines(21, 5_000, 10, 1_000);
    produce(&input, 4, &lines);
    let spec = JobSpec::word_count(dir.path(), &input, &output);
    let mut w = WeirProcess::start(weir(), &spec.write(), &[]);
    let addr = w.admin_addr(Duration::from_secs(30));
    assert_eq!(http(&addr, "GET", "/health", None).0, 200);
    assert!(wait_until(Duration::from_secs(30), || http(
        &addr, "GET", "/ready", None
    )
    .0 == 200));
    assert!(w.wait_for_log("checkpoint completed", 1, Duration::from_secs(30)));
    let early = http(&addr, "GET", "/metrics", None).1;
    let completed_early = sample(&early, "weir_checkpoints_completed_total").unwrap();
    read_counts(&output, &expected);
    // Lag comes from librdkafka statistics, published once a second.
    let mut metrics = String::new();
    let lag_zero = wait_until(Duration::from_secs(15), || {
        metrics = http(&addr, "GET", "/metrics", None).1;
        (0..4).all(|p| {
            sample(
                &metrics,
                &format!("weir_consumer_lag_records{{partition=\"{p}\",topic=\"{input}\"}}"),
            ) == Some(0.0)
        })
    });
    assert!(lag_zero, "lag did not fall to 0:\n{metrics}");
    assert_eq!(
        sample(&metrics, "weir_records_in_total{operator=\"kafka-source\"}"),
        Some(5_000.0),
        "{metrics}"
    );
    assert_eq!(
        sample(&metrics, "weir_records_in_total{operator=\"word-count\"}"),
        Some(50_000.0)
    );
    assert_eq!(
        sample(&metrics, "weir_records_out_total{operator=\"word-count\"}"),
        Some(50_000.0)
    );
    assert!(sample(&metrics, "weir_checkpoints_completed_total").unwrap() > completed_early);
    for h in [
        "weir_checkpoint_duration_seconds_count",
        "weir_checkpoint_alignment_seconds_count",
        "weir_checkpoint_sync_seconds_count",
        "weir_checkpoint_size_bytes_count",
    ] {
        assert!(sample(&metrics, h).unwrap_or(0.0) > 0.0, "{h}:\n{metrics}");
    }
    assert!(sample(&metrics, "weir_last_checkpoint_id").unwrap() >= 1.0);
    assert!(sample(&metrics, "weir_last_checkpoint_age_seconds").unwrap() < 30.0);
    // Memory by component: the process's, and each keyed task's store
    // (reported after each checkpoint) and source consumer (each second).
    let memory = |component: &str| -> Vec<(String, f64)> {
        let prefix = format!("weir_memory_bytes{{component=\"{component}\",task=\"");
        metrics
            .lines()
            .filter_map(|l| l.strip_prefix(prefix.as_str()))
            .filter_map(|rest| {
                let (task, value) = rest.split_once("\"} ")?;
                Some((task.to_string(), value.parse().ok()?))
            })
            .collect()
    };
    assert!(memory("resident")[0].1 > 1e6, "{metrics}");
    assert!(memory("allocator_committed")[0].1 > 0.0, "{metrics}");
    let caches = memory("state_cache");
    assert!(
        !caches.is_empty()
            && caches
                .iter()
                .all(|(task, bytes)| !task.is_empty() && *bytes > 0.0),
        "every keyed task's state cache holds its 1,000 words:\n{metrics}"
    );
    for component in [
        "rocksdb_memtables",
        "rocksdb_block_cache",
        "rocksdb_table_readers",
    ] {
        assert_eq!(
            memory(component).len(),
            caches.len(),
            "{component}:\n{metrics}"
        );
    }
    assert!(!memory("kafka_fetch_queue").is_empty(), "{metrics}");
    let (status, body) = http(&addr, "GET", "/checkpoints", None);
    assert_eq!(status, 200);
    let history: Vec<serde_json::Value> = serde_json::from_str(&body).unwrap();
    let done = history
        .iter()
        .find(|c| c["status"] == "completed")
        .expect("a completed checkpoint");
    for field in [
        "id",
        "trigger_time_ms",
        "end_to_end_ms",
        "alignment_ms",
        "snapshot_ms",
        "commit_ms",
        "state_size_bytes",
    ] {
        assert!(done[field].is_u64(), "{field} in {done}");
    }
    assert!(done["state_size_bytes"].as_u64().unwrap() > 0);
    assert!(w.stop(Duration::from_secs(60)).success());
}

/// Word counts of `lines`, lower-cased as weir counts them.
fn count_words(lines: &[String]) -> HashMap<String, u64> {
    let mut counts = HashMap::new();
    for l in lines {
        for word in l.split_whitespace() {
            *counts.entry(word.to_lowercase()).or_insert(0) += 1;
        }
    }
    counts
}

#[test]
fn a_savepoint_survives_retention_and_restores_exact_counts() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = topics(4);
    let (lines, expected) = word_lines(22, 6_000, 10, 800);
    let (first, second) = lines.split_at(3_000);
    produce(&input, 4, first);
    let spec = JobSpec {
        interval: "200ms".into(),
        ..JobSpec::word_count(dir.path(), &input, &output)
    };
    let mut w = WeirProcess::start(weir(), &spec.write(), &[]);
    let addr = w.admin_addr(Duration::from_secs(30));
    read_counts(&output, &count_words(first));
    let (status, body) = http(&addr, "POST", "/savepoints", None);
    assert_eq!(status, 200, "{body}");
    let path = serde_json::from_str::<serde_json::Value>(&body).unwrap()["path"]
        .as_str()
        .unwrap()
        .to_string();
    let id: u64 = Path::new(&path).file_name().unwrap().to_str().unwrap()["savepoint-".len()..]
        [..10]
        .parse()
        .unwrap();
    // retained = 2: the checkpoint the savepoint came from is pruned while
    // we wait; the savepoint stays.
    let seen = w.log_text().matches("checkpoint completed").count();
    assert!(w.wait_for_log("checkpoint completed", seen + 5, Duration::from_secs(30)));
    let (_, history) = http(&addr, "GET", "/checkpoints", None);
    assert!(
        history.contains(&path),
        "history names the savepoint: {history}"
    );
    assert!(w.stop(Duration::from_secs(60)).success());
    let original = spec
        .checkpoint_dir
        .join(&spec.name)
        .join(format!("chk-{id:010}"));
    assert!(
        !original.exists(),
        "{} should have been pruned",
        original.display()
    );
    assert!(
        Path::new(&path).join("_metadata").is_file(),
        "savepoint {path} is gone"
    );

    // A new run (fresh state, new output topic) restored from the savepoint
    // continues exactly from the first half's counts.
    let dir2 = tempfile::tempdir().unwrap();
    let output2 = unique("ops-counts-restored");
    create_topic(&output2, 4);
    let spec2 = JobSpec {
        name: spec.name.clone(),
        ..JobSpec::word_count(dir2.path(), &input, &output2)
    };
    produce(&input, 4, second);
    let config2 = spec2.write();
    let log = dir2.path().join("weir.log");
    let out = std::fs::File::create(&log).unwrap();
    let mut child = Command::new(WEIR)
        .args(["run", "--config"])
        .arg(&config2)
        .arg("--restore-from")
        .arg(&path)
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap();
    // Only words of the second half are emitted again; each must reach its
    // total over both halves.
    let want: HashMap<String, u64> = count_words(second)
        .keys()
        .map(|w| (w.clone(), expected[w]))
        .collect();
    let counts = read_counts(&output2, &want);
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert!(child.wait().unwrap().success());
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("restoring checkpoint"), "{}", tail(&text));
    assert_eq!(counts, want);
}

#[test]
fn a_secret_from_the_environment_appears_in_no_log_line_or_output() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = topics(2);
    produce(&input, 2, &["x y z"]);
    let secret = format!("s3cr3t-{}", std::process::id());
    let spec = JobSpec {
        extra: String::new(),
        ..JobSpec::word_count(dir.path(), &input, &output)
    };
    let toml = spec.toml().replace(
        "group_id",
        "properties = { \"sasl.password\" = \"${WEIR_TEST_SECRET}\", \"ssl.key.password\" = \"${WEIR_TEST_SECRET}\" }\ngroup_id",
    );
    let config = dir.path().join("weir.toml");
    std::fs::write(&config, toml).unwrap();
    let mut w = WeirProcess::start(
        weir(),
        &config,
        &[("WEIR_TEST_SECRET", secret.as_str()), ("RUST_LOG", "trace")],
    );
    let addr = w.admin_addr(Duration::from_secs(30));
    read_counts(
        &output,
        &[("x", 1), ("y", 1), ("z", 1)]
            .iter()
            .map(|(k, v)| (k.to_string(), *v))
            .collect(),
    );
    let served = [
        http(&addr, "GET", "/metrics", None).1,
        http(&addr, "GET", "/checkpoints", None).1,
    ];
    assert!(w.stop(Duration::from_secs(60)).success());
    let list = Command::new(WEIR)
        .args(["checkpoints", "list", "--config"])
        .arg(&config)
        .env("WEIR_TEST_SECRET", &secret)
        .output()
        .unwrap();
    let log = w.log_text();
    assert!(
        log.lines().count() > 20,
        "trace logging produced a real log"
    );
    assert!(!log.contains(&secret), "the secret is in the log");
    for text in served {
        assert!(!text.contains(&secret));
    }
    assert!(!String::from_utf8_lossy(&list.stdout).contains(&secret));
    // Unset, the variable is a config error naming the key.
    let out = Command::new(WEIR)
        .args(["validate", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        err.contains(
            "kafka.properties.\"sasl.password\": environment variable WEIR_TEST_SECRET is not set"
        ),
        "{err}"
    );
}

/// `weir validate` on `config` with `env`: the exit code and stderr.
fn validate(config: &Path, env: &[(&str, &str)]) -> (Option<i32>, String) {
    let out = Command::new(WEIR)
        .args(["validate", "--config"])
        .arg(config)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn an_admin_endpoint_beyond_loopback_requires_a_token_and_bounds_savepoints() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = topics(2);
    produce(&input, 2, &["x y z x"]);
    let token = format!("tok-{}-{}", std::process::id(), unique("t"));
    let open = JobSpec {
        admin_listen: "0.0.0.0:0".into(),
        checkpoint_extra: "max_savepoints = 1".into(),
        ..JobSpec::word_count(dir.path(), &input, &output)
    };
    // Without a token, beyond loopback: refused by validate and by run,
    // naming the key.
    let config = open.write();
    let (code, err) = validate(&config, &[]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("admin.token_env"), "{err}");
    assert!(err.contains("allow_unauthenticated"), "{err}");
    let run = Command::new(WEIR)
        .args(["run", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(
        run.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(String::from_utf8_lossy(&run.stderr).contains("admin.token_env"));
    // Open on purpose: accepted.
    let opted_out = JobSpec {
        admin_extra: "allow_unauthenticated = true".into(),
        ..open.clone()
    };
    let (code, err) = validate(&opted_out.write(), &[]);
    assert_eq!(code, Some(0), "{err}");

    let guarded = JobSpec {
        admin_extra: "token_env = \"WEIR_TEST_ADMIN_TOKEN\"".into(),
        ..open.clone()
    };
    let config = guarded.write();
    let (code, err) = validate(&config, &[]);
    assert_eq!(code, Some(2), "the variable is unset: {err}");
    assert!(err.contains("admin.token_env"), "{err}");
    let env = [("WEIR_TEST_ADMIN_TOKEN", token.as_str())];
    assert_eq!(validate(&config, &env).0, Some(0));
    let mut w = WeirProcess::start(weir(), &config, &env);
    let listening = w.admin_addr(Duration::from_secs(30));
    assert!(listening.starts_with("0.0.0.0:"), "{listening}");
    let addr = listening.replace("0.0.0.0", "127.0.0.1");
    read_counts(
        &output,
        &[("x", 2), ("y", 1), ("z", 1)]
            .iter()
            .map(|(k, v)| (k.to_string(), *v))
            .collect(),
    );
    // The probes stay open.
    assert_eq!(http(&addr, "GET", "/health", None).0, 200);
    assert!(wait_until(Duration::from_secs(30), || http(
        &addr, "GET", "/ready", None
    )
    .0 == 200));
    // Keyed state: only with the token.
    for wrong in [None, Some("wrong"), Some(&token[..token.len() - 1])] {
        let (status, body) = http(&addr, "GET", "/state/word-count/x", wrong);
        assert_eq!(status, 401, "{wrong:?}: {body}");
        assert!(!body.contains("count"), "{body}");
    }
    let (status, body) = http(&addr, "GET", "/state/word-count/x", Some(&token));
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"count\":2"), "{body}");
    for path in ["/metrics", "/checkpoints", "/api/overview"] {
        assert_eq!(http(&addr, "GET", path, None).0, 401, "{path}");
        assert_eq!(http(&addr, "GET", path, Some(&token)).0, 200, "{path}");
    }
    // Savepoints: only with the token, and at most checkpoint.max_savepoints.
    let (status, body) = http(&addr, "POST", "/savepoints", None);
    assert_eq!(status, 401, "{body}");
    let (status, body) = http(&addr, "POST", "/savepoints", Some(&token));
    assert_eq!(status, 200, "{body}");
    let (status, body) = http(&addr, "POST", "/savepoints", Some(&token));
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("checkpoint.max_savepoints = 1"), "{body}");
    let savepoints = std::fs::read_dir(
        guarded
            .checkpoint_dir
            .join(format!("{}-savepoints", guarded.name)),
    )
    .unwrap()
    .count();
    assert_eq!(savepoints, 1, "the refused request wrote nothing");
    assert!(w.stop(Duration::from_secs(60)).success());
    assert!(!w.log_text().contains(&token), "the token is in the log");
}

#[test]
fn a_second_weir_on_the_same_state_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = topics(2);
    let spec = JobSpec::word_count(dir.path(), &input, &output);
    let config = spec.write();
    let mut first = WeirProcess::start(weir(), &config, &[]);
    assert!(
        first.wait_for_log("job running", 1, Duration::from_secs(30)),
        "{}",
        first.log_text()
    );
    let out = Command::new(WEIR)
        .args(["run", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "held by another weir process (pid {})",
            first.pid()
        )),
        "{err}"
    );
    assert!(first.stop(Duration::from_secs(60)).success());
    // State folders are owner-only.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(dir.path().join("state").join(&spec.name))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o700);
}

#[test]
fn checkpoint_storage_that_cannot_be_written_fails_checkpoints_then_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = topics(4);
    let (lines, expected) = word_lines(23, 4_000, 10, 1_000);
    let spec = JobSpec {
        interval: "500ms".into(),
        max_attempts: 20,
        checkpoint_extra: "tolerable_failures = 5".into(),
        ..JobSpec::word_count(dir.path(), &input, &output)
    };
    let mut w = WeirProcess::start(weir(), &spec.write(), &[]);
    let addr = w.admin_addr(Duration::from_secs(30));
    let feeder_input = input.clone();
    let feeder = std::thread::spawn(move || {
        for chunk in lines.chunks(200) {
            produce(&feeder_input, 4, chunk);
            std::thread::sleep(Duration::from_millis(50));
        }
    });
    assert!(w.wait_for_log("checkpoint completed", 3, Duration::from_secs(30)));
    // Break the job's checkpoint folder: a file where the folder was (root
    // ignores permissions, so a read-only folder would not do).
    let job_dir = spec.checkpoint_dir.join(&spec.name);
    let aside = spec.checkpoint_dir.join("aside");
    std::fs::rename(&job_dir, &aside).unwrap();
    std::fs::write(&job_dir, b"not a folder").unwrap();
    let records = |addr: &str| {
        sample(
            &http(addr, "GET", "/metrics", None).1,
            "weir_records_in_total{operator=\"kafka-source\"}",
        )
        .unwrap_or(0.0)
    };
    let before = records(&addr);
    assert!(
        w.wait_for_log("checkpoint failed", 2, Duration::from_secs(30)),
        "{}",
        tail(&w.log_text())
    );
    // The folder is still broken: every checkpoint meanwhile fails. The
    // feeder's next chunk may take a while on a loaded machine, so wait
    // for it to be read rather than for a fixed time.
    let started = std::time::Instant::now();
    let mut during = records(&addr);
    while during <= before && started.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(200));
        during = records(&addr);
    }
    assert!(
        during > before,
        "processing goes on while checkpoints fail ({before} -> {during})"
    );
    let (_, body) = http(&addr, "GET", "/checkpoints", None);
    let history: Vec<serde_json::Value> = serde_json::from_str(&body).unwrap();
    let failed = history
        .iter()
        .find(|c| c["status"] == "failed")
        .expect("a failed checkpoint");
    assert!(
        failed["reason"].as_str().unwrap().contains(&spec.name),
        "{failed}"
    );
    assert!(
        w.wait_for_log(
            "restarting from the last checkpoint",
            1,
            Duration::from_secs(30)
        ),
        "{}",
        tail(&w.log_text())
    );
    // Storage comes back: the job recovers from the last good checkpoint.
    std::fs::remove_file(&job_dir).unwrap();
    std::fs::rename(&aside, &job_dir).unwrap();
    feeder.join().unwrap();
    let counts = read_counts(&output, &expected);
    assert_eq!(counts, expected, "{}", tail(&w.log_text()));
    let log = w.log_text();
    assert!(
        log.contains("consecutive checkpoints failed"),
        "{}",
        tail(&log)
    );
    assert!(w.stop(Duration::from_secs(60)).success());
}

/// The broker check reads the setting Kafka 3.6 brought (transaction
/// verification, KIP-890) from the real broker's configuration: the local
/// broker is new enough, so a misspelt setting or a failed read shows here
/// as "missing" or as an error, where the start-up warning would only stay
/// silent.
#[test]
fn the_local_broker_verifies_transactional_writes() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = topics(1);
    let config =
        weir::config::Config::load(&JobSpec::word_count(dir.path(), &input, &output).write())
            .unwrap();
    let brokers = weir::kafka::brokers::brokers_verification(&config).unwrap();
    assert!(!brokers.is_empty(), "no broker described");
    for (id, v) in brokers {
        assert_eq!(
            v,
            weir::kafka::brokers::Verification::On,
            "broker {id}: {}",
            weir::kafka::brokers::VERIFICATION
        );
    }
}
