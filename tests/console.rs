//! The console, interactive queries, offline state and the Grafana
//! dashboard (issue #12), against the real binary on the real broker.
//! Expected values come from the input, counted here, never from weir.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use weir_testkit::{
    http, last_counts, log_tail, produce, read_topic, topic_pair, word_lines, Isolation, JobSpec,
    WeirProcess,
};

const WEIR: &str = env!("CARGO_BIN_EXE_weir");

fn weir() -> &'static Path {
    Path::new(WEIR)
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `weir <args>`: exit code, stdout, stderr.
fn weir_cli(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(WEIR).args(args).output().expect("run weir");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Word counts of the input records below `offsets` (per partition),
/// tokenised as weir does (Unicode whitespace, lower case), read by a
/// plain consumer.
fn counts_below(input: &str, offsets: &BTreeMap<i32, i64>, total: usize) -> HashMap<String, u64> {
    let records = read_topic(
        input,
        Isolation::Uncommitted,
        Duration::from_secs(60),
        Duration::from_millis(500),
        |r| r.len() >= total,
    );
    let mut counts = HashMap::new();
    for r in records {
        if r.offset >= offsets.get(&r.partition).copied().unwrap_or(0) {
            continue;
        }
        for w in r.value.as_deref().unwrap_or("").split_whitespace() {
            *counts.entry(w.to_lowercase()).or_insert(0) += 1;
        }
    }
    counts
}

/// Every file under `dir` with its length and contents hash: equal before
/// and after a read means the read modified nothing.
fn fingerprint(dir: &Path) -> BTreeMap<PathBuf, (u64, u64)> {
    use std::hash::{Hash, Hasher};
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let bytes = std::fs::read(&p).unwrap();
                let mut h = std::collections::hash_map::DefaultHasher::new();
                bytes.hash(&mut h);
                out.insert(p, (bytes.len() as u64, h.finish()));
            }
        }
    }
    out
}

#[test]
fn offline_state_equals_the_counts_at_the_checkpoint_offsets_and_the_folder_is_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = topic_pair("offline", 4);
    let (lines, _) = word_lines(71, 60_000, 8, 2_000);
    let (first, rest) = lines.split_at(20_000);
    produce(&input, 4, first);
    // on-checkpoint emission leaves the cache dirty at each barrier, so the
    // snapshots carry changes files the reader must lay over RocksDB.
    let spec = JobSpec {
        delivery: "exactly-once".into(),
        emit: "on-checkpoint".into(),
        interval: "2s".into(),
        ..JobSpec::word_count(dir.path(), &input, &output)
    };
    let config = dir.path().join("weir.toml");
    std::fs::write(
        &config,
        spec.toml().replace("retained = 2", "retained = 10"),
    )
    .unwrap();
    let config_arg = config.to_str().unwrap();
    let mut w = WeirProcess::start(weir(), &config, &[]);
    // More input arrives while weir runs: the checkpoint read is mid-stream.
    let feeder = {
        let (input, rest) = (input.clone(), rest.to_vec());
        std::thread::spawn(move || {
            for chunk in rest.chunks(2_000) {
                produce(&input, 4, chunk);
                std::thread::sleep(Duration::from_millis(150));
            }
        })
    };
    assert!(
        w.wait_for_log("checkpoint completed", 3, Duration::from_secs(120)),
        "{}",
        log_tail(&w.log_text())
    );

    let (code, shown, err) = weir_cli(&[
        "checkpoints",
        "show",
        "latest",
        "--config",
        config_arg,
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    let shown: serde_json::Value = serde_json::from_str(&shown).expect("show --format json");
    let folder = PathBuf::from(shown["folder"].as_str().unwrap());
    let offsets: BTreeMap<i32, i64> = shown["source_offsets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                o["partition"].as_i64().unwrap() as i32,
                o["offset"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(offsets.len(), 4, "{shown}");
    let before = fingerprint(&folder);

    // The whole operator, read while weir runs.
    let (code, scanned, err) = weir_cli(&[
        "state",
        "scan",
        "--checkpoint",
        folder.to_str().unwrap(),
        "--operator",
        "word-count",
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    let offline: HashMap<String, u64> = scanned
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("a JSON line");
            (
                v["key"].as_str().unwrap().to_string(),
                v["count"].as_u64().unwrap(),
            )
        })
        .collect();
    feeder.join().unwrap();
    let expected = counts_below(&input, &offsets, lines.len());
    assert!(!expected.is_empty());
    assert_eq!(
        offline.len(),
        expected.len(),
        "keys at checkpoint {}",
        shown["checkpoint_id"]
    );
    assert_eq!(offline, expected, "values at the checkpoint's offsets");
    // `show` counted the same keys, split over the two subtasks.
    let subtasks = shown["subtasks"].as_array().unwrap();
    assert_eq!(subtasks.len(), 2, "{shown}");
    let keys: u64 = subtasks.iter().map(|s| s["keys"].as_u64().unwrap()).sum();
    assert_eq!(keys as usize, expected.len(), "{shown}");

    // One key, by prefix, in text; a missing key and a wrong operator.
    let (word, count) = expected.iter().max_by_key(|(_, c)| **c).unwrap();
    let folder_arg = folder.to_str().unwrap();
    let (code, got, err) = weir_cli(&[
        "state",
        "get",
        "--checkpoint",
        folder_arg,
        "--operator",
        "word-count",
        "--key",
        word,
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(got.trim(), format!("{word}\t{count}"));
    let (code, got, _) = weir_cli(&[
        "state",
        "scan",
        "--checkpoint",
        folder_arg,
        "--operator",
        "word-count",
        "--prefix",
        "w1",
    ]);
    assert_eq!(code, 0);
    let with_prefix = expected.keys().filter(|k| k.starts_with("w1")).count();
    assert_eq!(got.lines().count(), with_prefix, "{got}");
    assert!(got.lines().all(|l| l.starts_with("w1")), "{got}");
    let (code, got, err) = weir_cli(&[
        "state",
        "get",
        "--checkpoint",
        folder_arg,
        "--operator",
        "word-count",
        "--key",
        "no-such-word",
    ]);
    assert_eq!((code, got.as_str()), (1, ""), "{err}");
    assert!(
        err.contains("no key \"no-such-word\" in operator word-count"),
        "{err}"
    );
    let (code, _, err) = weir_cli(&[
        "state",
        "get",
        "--checkpoint",
        folder_arg,
        "--operator",
        "nope",
        "--key",
        word,
    ]);
    assert_eq!(code, 1);
    assert!(
        err.contains("no keyed state for operator \"nope\"") && err.contains("word-count"),
        "{err}"
    );
    let (code, text, err) = weir_cli(&["checkpoints", "show", folder_arg]);
    assert_eq!(code, 0, "{err}");
    assert!(
        text.contains("word-count") && text.contains("key groups"),
        "{text}"
    );

    assert_eq!(
        fingerprint(&folder),
        before,
        "reading modified {}",
        folder.display()
    );
    assert!(w.stop(Duration::from_secs(60)).success());
}

/// The `weir_*` names a Grafana dashboard's queries use, without the
/// histogram suffixes.
fn dashboard_metric_names(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(&text).expect("dashboard JSON");
    let mut exprs = Vec::new();
    fn walk(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, v) in m {
                    match (k.as_str(), v) {
                        ("expr" | "query", serde_json::Value::String(s)) => out.push(s.clone()),
                        _ => walk(v, out),
                    }
                }
            }
            serde_json::Value::Array(a) => a.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    walk(&dashboard, &mut exprs);
    let mut names: Vec<String> = exprs
        .iter()
        .flat_map(|e| {
            e.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|t| t.starts_with("weir_"))
                .map(|t| {
                    ["_bucket", "_sum", "_count"]
                        .iter()
                        .fold(t.to_string(), |t, s| {
                            t.strip_suffix(s).map_or(t.clone(), String::from)
                        })
                })
                .collect::<Vec<_>>()
        })
        .collect();
    names.sort();
    names.dedup();
    names
}

#[test]
fn live_queries_answer_each_key_and_the_console_shows_it_in_a_browser() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = topic_pair("console", 4);
    let (lines, expected) = word_lines(73, 20_000, 6, 500);
    produce(&input, 4, &lines);
    let spec = JobSpec {
        delivery: "exactly-once".into(),
        interval: "1s".into(),
        admin_extra: "token_env = \"WEIR_TEST_ADMIN_TOKEN\"".into(),
        ..JobSpec::word_count(dir.path(), &input, &output)
    };
    let token = "s3cret-console";
    let mut w = WeirProcess::start(weir(), &spec.write(), &[("WEIR_TEST_ADMIN_TOKEN", token)]);
    let addr = w.admin_addr(Duration::from_secs(60));
    let committed = last_counts(&read_topic(
        &output,
        Isolation::Committed,
        Duration::from_secs(120),
        Duration::from_secs(1),
        |r| last_counts(r) == expected,
    ));
    assert_eq!(committed, expected, "{}", log_tail(&w.log_text()));

    // Every key's current value, from the subtask that owns it.
    for (word, count) in expected.iter().take(50) {
        let (status, body) = http(
            &addr,
            "GET",
            &format!("/state/word-count/{word}"),
            Some(token),
        );
        assert_eq!(status, 200, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["value"]["count"].as_u64(), Some(*count), "{word}: {body}");
    }
    let (status, body) = http(&addr, "GET", "/state/word-count/no-such-word", Some(token));
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("no key"), "{body}");
    let (status, body) = http(&addr, "GET", "/state/nope/w1", Some(token));
    assert_eq!(status, 404, "{body}");
    assert!(
        body.contains("word-count"),
        "the known uids are named: {body}"
    );
    assert_eq!(http(&addr, "GET", "/state/word-count/w1", None).0, 401);

    // The console in headless Chromium: same numbers as /metrics, a
    // checkpoint chart that grows, a key lookup with the right count.
    let (word, count) = expected.iter().max_by_key(|(_, c)| **c).unwrap();
    let python = Command::new(repo().join("scripts/browser.sh"))
        .arg("python")
        .output()
        .expect("scripts/browser.sh");
    assert!(
        python.status.success(),
        "the browser check needs scripts/browser.sh setup (chromium and Playwright): {}",
        String::from_utf8_lossy(&python.stderr)
    );
    let python = String::from_utf8_lossy(&python.stdout).trim().to_string();
    let screenshot = std::env::var("WEIR_CONSOLE_SCREENSHOT")
        .map(PathBuf::from)
        .unwrap_or_else(|_| dir.path().join("console.png"));
    let url = format!("http://{addr}/");
    let metrics_url = format!("http://{addr}/metrics");
    let count = count.to_string();
    let check = Command::new(&python)
        .arg(repo().join("tests/browser/console_check.py"))
        .args([
            "--url",
            &url,
            "--token",
            token,
            "--metrics-url",
            &metrics_url,
        ])
        .args(["--lookup-operator", "word-count", "--lookup-key", word])
        .args(["--expect-count", &count, "--missing-key", "no-such-word"])
        .args(["--wait-checkpoints", "3", "--timeout", "90"])
        .arg("--screenshot")
        .arg(&screenshot)
        .output()
        .expect("run console_check.py");
    assert!(
        check.status.success(),
        "console check failed:\n{}\n{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    assert!(screenshot.is_file());
    assert!(w.stop(Duration::from_secs(60)).success());
}

#[test]
fn windowed_queries_list_open_windows_and_the_dashboard_uses_only_real_metrics() {
    // 2026-11-30T00:00:00Z
    const T0: i64 = 1_764_460_800_000;
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = topic_pair("console-windows", 2);
    let event = |user: &str, dt: i64| format!(r#"{{"user":{{"id":"{user}"}},"ts":{}}}"#, T0 + dt);
    // Round robin over 2 partitions: p0 gets u1@0s, u2@2s and a bad record
    // (skipped); p1 gets u1@1s and u1@61s. The watermark (the lower of the
    // two partitions, less 1 s) stays below T0+1m: both windows of u1 are
    // open.
    produce(
        &input,
        2,
        &[
            event("u1", 0),
            event("u1", 1_000),
            event("u2", 2_000),
            event("u1", 61_000),
            "not json".to_string(),
        ],
    );
    let spec = JobSpec {
        format: "json".into(),
        delivery: "exactly-once".into(),
        on_bad_record: "skip".into(),
        pipeline: "kind = \"aggregate\"\nkey = \"/user/id\"\nfunction = \"count\"".into(),
        interval: "500ms".into(),
        extra: "[source.event_time]\nfield = \"/ts\"\nmax_out_of_orderness = \"1s\"\n\
                [pipeline.window]\nkind = \"tumbling\"\nsize = \"1m\"\non_late = \"drop\"\n"
            .into(),
        ..JobSpec::word_count(dir.path(), &input, &output)
    };
    let mut w = WeirProcess::start(weir(), &spec.write(), &[]);
    let addr = w.admin_addr(Duration::from_secs(60));
    let uid = "aggregate-count-by-user.id-tumbling-1m";
    let mut last = String::new();
    // The two partitions are read by different source subtasks: u1@61s
    // (p1) can be counted before u1@0s (p0). So wait until every record
    // of u1 was counted (the first window has reached 2); the check below
    // is then that nothing else is in it and nothing was counted twice.
    let answered = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(200));
        let (status, body) = http(&addr, "GET", &format!("/state/{uid}/u1"), None);
        last = body;
        let first_counted = serde_json::from_str::<serde_json::Value>(&last).is_ok_and(|v| {
            v["windows"].as_array().is_some_and(|ws| {
                ws.iter().any(|w| {
                    w["start_ms"].as_i64() == Some(T0) && w["value"]["count"].as_u64() >= Some(2)
                })
            })
        });
        status == 200 && last.contains(&format!("{}", T0 + 60_000)) && first_counted
    });
    assert!(answered, "{last}\n{}", log_tail(&w.log_text()));
    let v: serde_json::Value = serde_json::from_str(&last).unwrap();
    let windows: Vec<(i64, i64, u64)> = v["windows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            (
                w["start_ms"].as_i64().unwrap(),
                w["end_ms"].as_i64().unwrap(),
                w["value"]["count"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        windows,
        vec![(T0, T0 + 60_000, 2), (T0 + 60_000, T0 + 120_000, 1)],
        "{last}"
    );

    // Both partitions move past T0+2m: both windows fire and are gone.
    produce(&input, 2, &[event("u3", 125_000), event("u3", 125_000)]);
    let closed = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(200));
        let (status, body) = http(&addr, "GET", &format!("/state/{uid}/u1"), None);
        last = body;
        status == 404
    });
    assert!(closed, "u1's windows fired and were dropped: {last}");
    // Then an event for a closed window is late (dropped, counted).
    produce(&input, 2, &[event("u9", 0), event("u9", 0)]);
    let metrics_text = || http(&addr, "GET", "/metrics", None).1;
    let mut text = String::new();
    let complete = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(200));
        text = metrics_text();
        text.contains("weir_late_records_total{") && text.contains("weir_bad_records_total{")
    });
    assert!(complete, "{text}");
    let names = dashboard_metric_names(&repo().join("deploy/grafana/weir.json"));
    assert!(names.len() >= 10, "{names:?}");
    let missing: Vec<&String> = names
        .iter()
        .filter(|n| !text.lines().any(|l| l.starts_with(n.as_str())))
        .collect();
    assert!(missing.is_empty(), "not in /metrics: {missing:?}\n{text}");
    let _ = output;
    assert!(w.stop(Duration::from_secs(60)).success());
}
