//! A job moved from single mode to group mode and back through savepoints
//! (issue #41), SIGKILLed in every mode, exact against DuckDB.
//!
//! One SQL job (a regular join, a HOP window, MIN/MAX over retractions, a
//! top-N over an updating input) over Nexmark input fed in nine chunks:
//! 1. single mode, parallelism 2, three chunks, one SIGKILL; stopped with
//!    SIGTERM (a final checkpoint) and `weir savepoint` copies it;
//! 2. group mode, two instances of four tasks per stage, the first started
//!    with `--restore-from` that savepoint (seeding every task from it,
//!    key groups re-split; a record of a seeding cut short before its
//!    commit, planted first, does not pass for one done), three chunks, two SIGKILLs of random instances;
//!    every instance stopped, then `weir savepoint` drains the repartition
//!    topics and lays the committed task checkpoints out as a folder;
//!    Restarted with the same `--restore-from`, the first instance finds
//!    the seeding done; another savepoint is refused once the job has task
//!    checkpoints;
//! 3. single mode again, parallelism 3, `--restore-from` the group's
//!    savepoint, the last three chunks and the events that close every
//!    window, one SIGKILL.
//!
//! Every sink topic, written by all three runs, must hold DuckDB's answer
//! over the whole input: nothing lost or doubled at either move.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use weir_testkit::sql::{updating_queries, Query, UPDATING_VIEWS};
use weir_testkit::{create_topic, log_tail, produce, unique, Rng, WeirProcess};

#[path = "support/graph_jobs.rs"]
mod graph_jobs;
use graph_jobs::*;
#[path = "support/sql_kit.rs"]
mod sql_kit;
use sql_kit::*;
#[path = "support/group_cluster.rs"]
mod group_cluster;
use group_cluster::*;

/// The queries, by sink name: one operator family each.
const SINKS: &[&str] = &["q3", "q5", "min_max_over_updating", "top3_over_updating"];

fn queries() -> Vec<Query> {
    let all: Vec<Query> = updating_queries()
        .into_iter()
        .chain(weir_testkit::nexmark::join_queries())
        .collect();
    SINKS
        .iter()
        .map(|s| {
            all.iter()
                .find(|q| q.sink == *s)
                .unwrap_or_else(|| panic!("no test query {s}"))
                .clone()
        })
        .collect()
}

/// `weir savepoint --config <config>`: the folder it prints.
fn savepoint(config: &Path) -> PathBuf {
    let out = std::process::Command::new(weir())
        .args(["savepoint", "--config"])
        .arg(config)
        .env("RUST_LOG", "info")
        .output()
        .expect("run weir savepoint");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "weir savepoint --config {} failed: {}\n{}",
        config.display(),
        stdout,
        log_tail(&String::from_utf8_lossy(&out.stderr))
    );
    let folder = PathBuf::from(stdout.lines().last().expect("a folder").trim());
    assert!(folder.join("_metadata").is_file(), "{}", folder.display());
    folder
}

#[test]
fn a_job_moves_from_single_to_group_mode_and_back_exactly_under_sigkills() {
    let seed = seed();
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().unwrap();
    let input = nexmark_streams(dir.path(), seed, 3000, 2);
    let queries = queries();
    let topics: BTreeMap<&str, String> = ["person", "auction", "bid"]
        .into_iter()
        .map(|t| (t, unique(&format!("move-{t}"))))
        .collect();
    let sinks: Vec<(String, String)> = queries
        .iter()
        .map(|q| (q.sink.to_string(), unique(&format!("move-{}", q.sink))))
        .collect();
    for t in topics.values().chain(sinks.iter().map(|(_, t)| t)) {
        create_topic(t, 2);
    }
    let sql = format!("{UPDATING_VIEWS}{}", inserts(&queries));
    let sections = nexmark_sections(&topics, &sinks, "", &sql);
    let base = dir.path().join("job");
    let name = unique("move");
    let checkpoints = base.join("checkpoints");
    let chunks = 9;
    let feed = |i: usize| {
        for (table, lines) in input.chunk(i, chunks) {
            produce(&topics[table], 2, &lines);
        }
    };

    // 1. Single mode.
    let single = graph_config_with(&base.join("single"), &name, 2, &checkpoints, &sections);
    let job = Job {
        binary: weir(),
        config: &single,
        env: &[],
    };
    let mut w = feed_with_kills_by(&job, 3, 1, &mut rng, feed);
    let status = w.stop(Duration::from_secs(60));
    assert!(status.success(), "{}", log_tail(&w.log_text()));
    let from_single = savepoint(&single);
    eprintln!("single mode's savepoint: {}", from_single.display());

    // 2. Group mode, seeded from it. First as after a seeding cut short
    // between recording the folder and its commit: the record alone must
    // not pass for a seeding done.
    let metadata: serde_json::Value =
        serde_json::from_slice(&std::fs::read(from_single.join("_metadata")).unwrap()).unwrap();
    let record = checkpoints.join(&name).join("seeded").join(format!(
        "{}-{}",
        from_single.file_name().unwrap().to_string_lossy(),
        metadata["prepared_time_ms"]
    ));
    std::fs::create_dir_all(record.parent().unwrap()).unwrap();
    std::fs::write(&record, "cut short").unwrap();
    let mut c = Cluster::sql(&base, &sections);
    c.name = name.clone();
    c.start_with(0, &["--restore-from", from_single.to_str().unwrap()]);
    assert!(
        c.running.get_mut(&0).unwrap().wait_for_log(
            "job seeded from the savepoint",
            1,
            Duration::from_secs(120)
        ),
        "i0 was not seeded: {}",
        c.logs()
    );
    assert!(
        c.logs()
            .contains("cut short before its commit; seeding again"),
        "{}",
        c.logs()
    );
    // Restarted with the same --restore-from, it finds the seeding done.
    c.kill9(0);
    c.start_with(0, &["--restore-from", from_single.to_str().unwrap()]);
    assert!(
        c.running.get_mut(&0).unwrap().wait_for_log(
            "the job was seeded from this savepoint before",
            1,
            Duration::from_secs(60)
        ),
        "i0 restarted with --restore-from: {}",
        c.logs()
    );
    c.start(1);
    feed_with_random_kills_by(&mut c, 3, 2, &mut rng, |i| feed(3 + i));
    c.assert_alive();
    c.stop_all();
    // Another savepoint is refused once the job has task checkpoints.
    let other = base.join("other-savepoint");
    let copied = std::process::Command::new("cp")
        .arg("-r")
        .arg(&from_single)
        .arg(&other)
        .status()
        .expect("cp");
    assert!(copied.success());
    let refused = std::process::Command::new(weir())
        .args(["run", "--config"])
        .arg(base.join("i0").join("weir.toml"))
        .arg("--restore-from")
        .arg(&other)
        .output()
        .expect("run weir");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && stderr.contains("already has committed task checkpoints"),
        "{:?}: {}",
        refused.status,
        log_tail(&stderr)
    );
    let from_group = savepoint(&base.join("i0").join("weir.toml"));
    eprintln!("group mode's savepoint: {}", from_group.display());

    // 3. Single mode again, at another parallelism.
    let again = graph_config_with(&base.join("again"), &name, 3, &checkpoints, &sections);
    let job = Job {
        binary: weir(),
        config: &again,
        env: &[],
    };
    let first = WeirProcess::start_with(
        &job.binary,
        &again,
        &["--restore-from", from_group.to_str().unwrap()],
        &[],
    );
    // The last three chunks, then the far-future events that close every
    // window (`Streams::chunk`).
    let mut w = feed_with_kills_after(&job, first, 4, 1, &mut rng, |i| feed(6 + i));

    for (q, (_, topic)) in queries.iter().zip(&sinks) {
        let context = || {
            format!(
                "{} after single → group → single, seed {seed}\n{}",
                q.sink,
                log_tail(&w.log_text())
            )
        };
        assert_matches_duckdb(q, topic, &input.data, Duration::from_secs(180), &context);
        eprintln!("{:<24} exact against DuckDB", q.sink);
    }
    let status = w.stop(Duration::from_secs(60));
    assert!(status.success(), "{}", log_tail(&w.log_text()));
    let _ = std::fs::remove_dir_all(&base);
}
