//! Jobs built with the Rust API (examples/), run by their own binaries
//! against the real broker, killed with SIGKILL while they work, and
//! checked by an independent read_committed reader: the final upsert table
//! must equal what the input implies, and no committed change repeats.

use std::time::Duration;

use weir_testkit::{
    create_topic, log_tail, produce, read_topic, unique, Isolation, Rng, WeirProcess,
};

#[path = "support/graph_jobs.rs"]
mod graph_jobs;
use graph_jobs::*;

#[test]
fn two_stage_window_counts_then_keys_per_count_are_exact_under_sigkills() {
    let seed = seed();
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().unwrap();
    let (input, output, per_key) = (
        unique("two-stage-in"),
        unique("two-stage-out"),
        unique("two-stage-windows"),
    );
    create_topic(&input, 3);
    create_topic(&output, 2);
    create_topic(&per_key, 2);
    let TwoStage { chunks, want } = two_stage_input(&mut rng);
    let config = graph_config(dir.path(), 2);
    let env = [
        ("TWO_STAGE_INPUT", input.as_str()),
        ("TWO_STAGE_OUTPUT", output.as_str()),
        ("TWO_STAGE_WINDOWS", per_key.as_str()),
    ];
    let mut weir = feed_with_kills(
        &Job {
            binary: example("two_stage"),
            config: &config,
            env: &env,
        },
        (&input, 3),
        &chunks,
        5,
        &mut rng,
    );

    let records = read_final_table(&output, &want);
    let log = weir.log_text();
    weir.stop(Duration::from_secs(30));
    let got = table(&records);
    assert_eq!(
        got.len(),
        want.len(),
        "keys of the final table (seed {seed}); log: {}",
        log_tail(&log)
    );
    assert_eq!(got, want, "final table (seed {seed})");
    assert_counts_up_by_one(&records, "keys", seed);
    assert!(
        log.matches("job running").count() >= 6,
        "the job was restarted after each kill"
    );
}

#[test]
fn a_stage_over_an_updating_result_retracts_and_ends_exact_under_sigkills() {
    let seed = seed();
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (unique("payments"), unique("users-per-total"));
    create_topic(&input, 3);
    create_topic(&output, 2);
    let Payments {
        lines,
        totals,
        per_total,
        want,
    } = payments(&mut rng, 40, 6000, 5);
    let chunks: Vec<Vec<String>> = lines.chunks(400).map(<[String]>::to_vec).collect();
    let config = graph_config(dir.path(), 2);
    let env = [
        ("TOTALS_INPUT", input.as_str()),
        ("TOTALS_OUTPUT", output.as_str()),
    ];
    let mut weir = feed_with_kills(
        &Job {
            binary: example("running_totals"),
            config: &config,
            env: &env,
        },
        (&input, 3),
        &chunks,
        5,
        &mut rng,
    );
    let records = read_final_table(&output, &want);
    // Live state: the subtask that owns a key answers with the operator's
    // results; a key that is not one of the operator's is a 400 naming
    // its key columns.
    let addr = weir.admin_addr(Duration::from_secs(10));
    for (u, total) in totals.iter().take(5) {
        let (status, body) = weir_testkit::http(&addr, "GET", &format!("/state/totals/u{u}"), None);
        assert_eq!(status, 200, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["value"], serde_json::json!({"total": total}), "{body}");
    }
    let (t, n) = per_total.iter().next().expect("a total");
    let (status, body) =
        weir_testkit::http(&addr, "GET", &format!("/state/users-per-total/{t}"), None);
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["value"], serde_json::json!({"users": n}), "{body}");
    let (status, body) = weir_testkit::http(&addr, "GET", "/state/users-per-total/lots", None);
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("total BIGINT"), "{body}");
    let (status, body) = weir_testkit::http(&addr, "GET", "/state/totals/nobody", None);
    assert_eq!(status, 404, "{body}");
    let log = weir.log_text();
    weir.stop(Duration::from_secs(30));
    assert_eq!(
        table(&records),
        want,
        "users per current total (seed {seed}); log: {}",
        log_tail(&log)
    );
    // The state, read offline with the operators' own codecs: each
    // user's accumulated total, and one entry per total users have now.
    let weir_state = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
            .args(["state"])
            .args(args)
            .args(["--checkpoint", "latest", "--config"])
            .arg(&config)
            .args(["--format", "json"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "weir state {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    for (u, total) in totals.iter().take(5) {
        let user = format!("u{u}");
        let line = weir_state(&["get", "--operator", "totals", "--key", &user]);
        let e: serde_json::Value = serde_json::from_str(line.trim()).expect("one JSON line");
        assert_eq!(e["table"], "acc", "{line}");
        assert_eq!(e["key"], serde_json::json!([user]), "{line}");
        assert_eq!(
            e["value"]["parts"][0]["value"],
            serde_json::json!(total),
            "user {user}: {line}"
        );
    }
    let scanned = weir_state(&["scan", "--operator", "users-per-total", "--table", "acc"]);
    let show = std::process::Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["checkpoints", "show", "latest", "--config"])
        .arg(&config)
        .args(["--format", "json"])
        .output()
        .unwrap();
    assert!(
        show.status.success(),
        "checkpoints show: {}",
        String::from_utf8_lossy(&show.stderr)
    );
    let show: serde_json::Value = serde_json::from_slice(&show.stdout).unwrap();
    let keys = |uid: &str| -> u64 {
        show["subtasks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["operator"] == uid)
            .map(|s| s["keys"].as_u64().unwrap())
            .sum()
    };
    assert_eq!(
        keys("totals"),
        totals.len() as u64,
        "one key per user: {show}"
    );
    assert_eq!(
        keys("users-per-total"),
        per_total.len() as u64,
        "one key per current total"
    );
    assert_eq!(
        scanned.lines().count(),
        per_total.len(),
        "one entry per current total: {scanned}"
    );
    // Totals only grow, so nearly every total a user passed through was
    // left again: the second stage retracted it, down to a tombstone.
    let tombstones = records.iter().filter(|r| r.value.is_none()).count();
    assert!(
        tombstones > 50,
        "{tombstones} tombstones: retractions reached the sink"
    );
}

#[test]
fn a_graph_job_refuses_a_source_section_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let config = graph_config(dir.path(), 1);
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str("\n[source]\ntopics = [\"x\"]\n");
    std::fs::write(&config, text).unwrap();
    let out = std::process::Command::new(example("two_stage"))
        .args(["run", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("source") && stderr.contains("defines its sources and operators in code"),
        "{stderr}"
    );
}

#[test]
fn a_two_input_operator_over_topics_of_different_speeds_is_exact_under_sigkills() {
    let seed = seed();
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().unwrap();
    let (clicks, views, counts) = (unique("clicks"), unique("views"), unique("clicks-views"));
    create_topic(&clicks, 4);
    create_topic(&views, 1);
    create_topic(&counts, 2);
    let config = graph_config(dir.path(), 2);
    let env = [
        ("CLICKS", clicks.as_str()),
        ("VIEWS", views.as_str()),
        ("COUNTS", counts.as_str()),
    ];
    // Views come slowly and stop for seconds at a time while clicks pour
    // in; the job is killed while it works.
    let input = clicks_views_input(&mut rng, seed, &views);
    let mut weir = feed_with_kills(
        &Job {
            binary: example("clicks_views"),
            config: &config,
            env: &env,
        },
        (&clicks, 4),
        &input.chunks,
        5,
        &mut rng,
    );
    let want = ClicksViews::want(&input.clicks, &input.views.join().unwrap());
    // The console lists the graph's nodes, not a built-in pipeline's.
    let addr = weir.admin_addr(Duration::from_secs(10));
    let (status, body) = weir_testkit::http(&addr, "GET", "/api/overview", None);
    assert_eq!(status, 200, "{body}");
    let overview: serde_json::Value = serde_json::from_str(&body).unwrap();
    let uids: Vec<&str> = overview["job"]["operators"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["uid"].as_str().unwrap())
        .collect();
    assert_eq!(uids, vec!["clicks", "views", "per-user", "out"], "{body}");
    let records = read_final_table(&counts, &want);
    let log = weir.log_text();
    weir.stop(Duration::from_secs(30));
    assert_eq!(
        table(&records),
        want,
        "clicks and views per user (seed {seed}); log: {}",
        log_tail(&log)
    );
    assert_each_update_moves_one_count(&records, seed);
}

#[test]
fn a_graph_job_restored_at_another_parallelism_keeps_its_tables_exact() {
    let seed = seed();
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (unique("payments"), unique("users-per-total"));
    create_topic(&input, 4);
    create_topic(&output, 2);
    let Payments { lines, want, .. } = payments(&mut rng, 60, 4000, 9);
    let name = unique("rescale");
    let env = [
        ("TOTALS_INPUT", input.as_str()),
        ("TOTALS_OUTPUT", output.as_str()),
    ];
    let (first, second) = lines.split_at(2000);
    // Parallelism 2, then 3 (key groups split), then 1 (merged).
    for (p, part) in [(2u32, first), (3, &second[..1000]), (1, &second[1000..])] {
        let config = graph_config_named(dir.path(), &name, p);
        let mut weir = WeirProcess::start(&example("running_totals"), &config, &env);
        assert!(
            weir.wait_for_log("job running", 1, Duration::from_secs(60)),
            "{}",
            log_tail(&weir.log_text())
        );
        for chunk in part.chunks(250) {
            produce(&input, 4, chunk);
            std::thread::sleep(Duration::from_millis(150));
        }
        std::thread::sleep(Duration::from_millis(500));
        let status = weir.stop(Duration::from_secs(30));
        let log = weir.log_text();
        assert!(status.success(), "parallelism {p}: {}", log_tail(&log));
        if p != 2 {
            assert!(
                log.contains("restoring checkpoint"),
                "parallelism {p} restored: {}",
                log_tail(&log)
            );
        }
    }
    let records = read_topic(
        &output,
        Isolation::Committed,
        Duration::from_secs(60),
        Duration::from_secs(2),
        |r| table(r) == want,
    );
    assert_eq!(
        table(&records),
        want,
        "users per total after 2 -> 3 -> 1 (seed {seed})"
    );
}

#[test]
fn a_graph_job_whose_sink_topic_is_missing_is_refused_at_start_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let input = unique("payments");
    create_topic(&input, 1);
    let missing = unique("no-such-topic");
    let config = graph_config(dir.path(), 1);
    let env = [
        ("TOTALS_INPUT", input.as_str()),
        ("TOTALS_OUTPUT", missing.as_str()),
    ];
    let mut weir = WeirProcess::start(&example("running_totals"), &config, &env);
    let status = weir.wait(Duration::from_secs(60)).expect("exits by itself");
    let log = weir.log_text();
    assert!(!status.success(), "{}", log_tail(&log));
    assert!(
        log.contains(&format!(
            "sink \"out\" writes to topic \"{missing}\", which does not exist"
        )),
        "{}",
        log_tail(&log)
    );
    assert!(
        !log.contains("restarting"),
        "refused, not retried: {}",
        log_tail(&log)
    );
    // So is a window's missing topic for late records.
    let (events, windows) = (unique("events"), unique("windows"));
    create_topic(&events, 1);
    for kind in ["tumbling", "hopping", "session"] {
        create_topic(&format!("{windows}.{kind}"), 1);
    }
    let config = graph_config(&dir.path().join("windows"), 1);
    let env = [
        ("WINDOWS_INPUT", events.as_str()),
        ("WINDOWS_OUTPUT", windows.as_str()),
    ];
    let mut weir = WeirProcess::start(&example("windows"), &config, &env);
    let status = weir.wait(Duration::from_secs(60)).expect("exits by itself");
    let log = weir.log_text();
    assert!(!status.success(), "{}", log_tail(&log));
    assert!(
        log.contains(&format!(
            "operator \"tumbling\" sends late records to topic \"{windows}.tumbling.late\", which does not exist"
        )),
        "{}",
        log_tail(&log)
    );
}

#[test]
fn a_checkpoint_of_a_built_in_pipeline_is_refused_by_a_graph_job_naming_the_operators() {
    let dir = tempfile::tempdir().unwrap();
    let (words, counts) = (unique("words"), unique("counts"));
    create_topic(&words, 2);
    create_topic(&counts, 2);
    produce(
        &words,
        2,
        &["the quick brown fox", "jumps over the lazy dog"],
    );
    // A built-in word count checkpoints into the folder the graph job uses.
    let name = unique("same-job");
    let spec = weir_testkit::JobSpec {
        name: name.clone(),
        delivery: "exactly-once".into(),
        checkpoint_dir: dir.path().join("graph").join("checkpoints"),
        ..weir_testkit::JobSpec::word_count(&dir.path().join("builtin"), &words, &counts)
    };
    let mut builtin = WeirProcess::start(
        std::path::Path::new(env!("CARGO_BIN_EXE_weir")),
        &spec.write(),
        &[],
    );
    assert!(
        builtin.wait_for_log("checkpoint completed", 2, Duration::from_secs(60)),
        "{}",
        log_tail(&builtin.log_text())
    );
    assert!(builtin.stop(Duration::from_secs(30)).success());
    // The graph job of the same name finds that checkpoint: refused, not
    // restored into the wrong operators and not started empty.
    let config = graph_config_named(&dir.path().join("graph"), &name, 2);
    let env = [
        ("TOTALS_INPUT", words.as_str()),
        ("TOTALS_OUTPUT", counts.as_str()),
    ];
    let mut graph = WeirProcess::start(&example("running_totals"), &config, &env);
    let status = graph
        .wait(Duration::from_secs(60))
        .expect("exits by itself");
    let log = graph.log_text();
    assert!(!status.success(), "{}", log_tail(&log));
    assert!(
        log.contains("recovery refused") && log.contains("does not match"),
        "{}",
        log_tail(&log)
    );
    assert!(
        log.contains("\"word-count\"") && log.contains("\"users-per-total\""),
        "the uids on both sides: {}",
        log_tail(&log)
    );
    assert!(
        !log.contains("job running"),
        "nothing ran: {}",
        log_tail(&log)
    );
}

#[test]
fn a_graph_sink_told_to_skip_a_result_over_message_max_bytes_goes_on_without_it() {
    let dir = tempfile::tempdir().unwrap();
    let (words, counts) = (unique("giant-words"), unique("giant-counts"));
    create_topic(&words, 2);
    create_topic(&counts, 2);
    let (mut lines, mut expected) = weir_testkit::word_lines(43, 1_000, 5, 200);
    let giant = "g".repeat(3_000);
    lines.insert(500, format!("before {giant} after"));
    *expected.entry("before".into()).or_insert(0) += 1;
    *expected.entry("after".into()).or_insert(0) += 1;
    produce(&words, 2, &lines);
    let config = graph_config_with(
        dir.path(),
        &unique("giant"),
        2,
        &dir.path().join("checkpoints"),
        "\n[kafka.properties]\n\"message.max.bytes\" = \"4000\"\n",
    );
    let env = [
        ("WORD_COUNT_INPUT", words.as_str()),
        ("WORD_COUNT_OUTPUT", counts.as_str()),
        ("WORD_COUNT_TOO_LARGE", "skip"),
    ];
    let mut w = WeirProcess::start(&example("word_count"), &config, &env);
    let got = weir_testkit::last_counts(&read_topic(
        &counts,
        Isolation::Committed,
        Duration::from_secs(120),
        Duration::from_secs(1),
        |r| weir_testkit::last_counts(r) == expected,
    ));
    assert_eq!(got, expected, "every count but the giant word's");
    let log = w.log_text();
    assert!(
        log.contains("skipped an output record over message.max.bytes")
            && log.contains(&giant[..64]),
        "the skipped key is named: {}",
        log_tail(&log)
    );
    assert!(!log.contains("restarting"), "{}", log_tail(&log));
    assert!(w.stop(Duration::from_secs(60)).success());
}
