//! What the tests of job graphs (tests/graph.rs, tests/graph_group.rs)
//! share: the examples' binaries, configurations, the two-stage job's
//! input and expected table, reading an upsert topic's final table.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use weir_testkit::{
    bootstrap, log_tail, produce, read_topic, unique, Isolation, OutRecord, Rng, WeirProcess,
};

/// 2025-11-30T10:00:00Z
pub const T0: i64 = 1_764_496_800_000;

pub fn seed() -> u64 {
    let s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    eprintln!("random seed {s}");
    s
}

/// An example's binary, built by `cargo test` next to the test binaries.
pub fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>");
    let path = dir.join("examples").join(name);
    assert!(
        path.exists(),
        "{} is not built (cargo test builds the examples)",
        path.display()
    );
    path
}

/// A configuration for a job graph: no [source] or [pipeline].
pub fn graph_config(dir: &Path, p: u32) -> PathBuf {
    graph_config_named(dir, &unique("graph"), p)
}

/// As [`graph_config`] for the job `name` (its checkpoints, group and
/// transactional id), so that a second configuration continues the job.
pub fn graph_config_named(dir: &Path, name: &str, p: u32) -> PathBuf {
    graph_config_with(dir, name, p, &dir.join("checkpoints"), "")
}

/// As [`graph_config_named`] with checkpoints in `checkpoints` (shared by
/// a group's instances) and `extra` appended (a `[scale]` section).
pub fn graph_config_with(
    dir: &Path,
    name: &str,
    p: u32,
    checkpoints: &Path,
    extra: &str,
) -> PathBuf {
    let toml = format!(
        r#"[job]
name = "{name}"
parallelism = {p}
max_parallelism = 128

[kafka]
bootstrap_servers = "{bootstrap}"
group_id = "weir-{name}"

[checkpoint]
interval = "300ms"
dir = "{checkpoints}"
timeout = "20s"
retained = 2

[state]
dir = "{dir}/state"

[restart]
max_attempts = 3
backoff = "200ms"

[admin]
listen = "127.0.0.1:0"

[sink]
delivery = "exactly-once"
{extra}"#,
        bootstrap = bootstrap(),
        dir = dir.display(),
        checkpoints = checkpoints.display(),
    );
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join("weir.toml");
    std::fs::write(&path, toml).unwrap();
    path
}

pub fn json(record: &OutRecord) -> serde_json::Value {
    serde_json::from_str(record.value.as_deref().expect("a value")).expect("JSON value")
}

/// The upsert table after every record: key → last value, tombstones delete.
pub fn table(records: &[OutRecord]) -> BTreeMap<String, Option<serde_json::Value>> {
    let mut t = BTreeMap::new();
    for r in records {
        // Keys compared as JSON (the sink writes columns in schema order).
        let key: serde_json::Value =
            serde_json::from_str(r.key.as_deref().expect("upsert records have keys"))
                .expect("JSON key");
        let key = key.to_string();
        match &r.value {
            None => {
                t.remove(&key);
            }
            Some(_) => {
                t.insert(key, Some(json(r)));
            }
        }
    }
    t
}

/// A job's binary, its configuration and its environment.
pub struct Job<'a> {
    pub binary: PathBuf,
    pub config: &'a Path,
    pub env: &'a [(&'a str, &'a str)],
}

/// Reads an upsert topic read_committed until its table equals `want`
/// and nothing new arrives for 2 s (at most 90 s); returns every record.
pub fn read_final_table(
    topic: &str,
    want: &BTreeMap<String, Option<serde_json::Value>>,
) -> Vec<OutRecord> {
    read_final_table_within(topic, want, Duration::from_secs(90))
}

/// [`read_final_table`], waiting at most `timeout`.
pub fn read_final_table_within(
    topic: &str,
    want: &BTreeMap<String, Option<serde_json::Value>>,
    timeout: Duration,
) -> Vec<OutRecord> {
    read_topic(
        topic,
        Isolation::Committed,
        timeout,
        Duration::from_secs(2),
        |r| &table(r) == want,
    )
}

/// Feeds `chunks` to `input` with pauses while SIGKILLing and restarting
/// the job `kills` times at random moments; returns the running process.
pub fn feed_with_kills(
    job: &Job,
    input: (&str, i32),
    chunks: &[Vec<String>],
    kills: usize,
    rng: &mut Rng,
) -> WeirProcess {
    let (input, partitions) = input;
    feed_with_kills_by(job, chunks.len(), kills, rng, |i| {
        produce(input, partitions, &chunks[i])
    })
}

/// As [`feed_with_kills`], with `send(i)` writing chunk `i` of `chunks`.
pub fn feed_with_kills_by(
    job: &Job,
    chunks: usize,
    kills: usize,
    rng: &mut Rng,
    send: impl Fn(usize),
) -> WeirProcess {
    let weir = WeirProcess::start(job.binary.as_path(), job.config, job.env);
    feed_with_kills_after(job, weir, chunks, kills, rng, send)
}

/// As [`feed_with_kills_by`], with the job's first process already
/// started (with `--restore-from`, say); restarts start it plainly.
pub fn feed_with_kills_after(
    job: &Job,
    mut weir: WeirProcess,
    chunks: usize,
    kills: usize,
    rng: &mut Rng,
    send: impl Fn(usize),
) -> WeirProcess {
    let (binary, config, env) = (job.binary.as_path(), job.config, job.env);
    assert!(
        weir.wait_for_log("job running", 1, Duration::from_secs(60)),
        "never ran: {}",
        log_tail(&weir.log_text())
    );
    let every = (chunks / (kills + 1)).max(1);
    let mut killed = 0;
    for i in 0..chunks {
        send(i);
        if killed < kills && i % every == every - 1 {
            // While the chunk is being worked on and its output written,
            // somewhere inside an epoch (the interval is 300 ms).
            std::thread::sleep(Duration::from_millis(rng.below(120)));
            weir.kill9();
            killed += 1;
            let runs = weir.log_text().matches("job running").count();
            weir = WeirProcess::start(binary, config, env);
            assert!(
                weir.wait_for_log("job running", runs + 1, Duration::from_secs(60)),
                "no restart after kill {killed}: {}",
                log_tail(&weir.log_text())
            );
        } else {
            std::thread::sleep(Duration::from_millis(100 + rng.below(400)));
        }
    }
    assert_eq!(killed, kills, "every planned kill happened");
    weir
}

/// The two-stage example's input (in chunks) and the final table its
/// upsert topic must hold.
pub struct TwoStage {
    pub chunks: Vec<Vec<String>>,
    pub want: BTreeMap<String, Option<serde_json::Value>>,
}

pub fn two_stage_input(rng: &mut Rng) -> TwoStage {
    // 80 one-second windows, 150 keys, 1..=5 events per key and window.
    let (windows, keys) = (80i64, 150u64);
    let mut expected: BTreeMap<(i64, u64), u64> = BTreeMap::new();
    let mut lines_per_window = Vec::new();
    for w in 0..windows {
        let mut lines = Vec::new();
        for k in 0..keys {
            let n = 1 + rng.below(5);
            for _ in 0..n {
                let at = T0 + w * 1000 + rng.below(1000) as i64;
                lines.push(format!(r#"{{"key":"k{k}","at":{at}}}"#));
            }
            *expected.entry((T0 + w * 1000, n)).or_default() += 1;
        }
        // Out of order within the window, never across windows.
        for i in (1..lines.len()).rev() {
            lines.swap(i, rng.below(i as u64 + 1) as usize);
        }
        lines_per_window.push(lines);
    }
    let mut chunks: Vec<Vec<String>> = lines_per_window.chunks(5).map(|c| c.concat()).collect();
    // Past every window on every partition: all of them close.
    let end = T0 + (windows + 10) * 1000;
    chunks.push(
        (0..3)
            .map(|_| format!(r#"{{"key":"_end","at":{end}}}"#))
            .collect(),
    );
    // A bad record, skipped by the source's policy.
    chunks[1].push("not json".into());

    let want: BTreeMap<String, Option<serde_json::Value>> = expected
        .iter()
        .map(|((start, n), keys)| {
            let start = weir::dataflow::json::format_timestamp(*start);
            let key = serde_json::json!({"window_start": start, "n": n}).to_string();
            (
                key,
                Some(serde_json::json!({"window_start": start, "n": n, "keys": keys})),
            )
        })
        .collect();
    TwoStage { chunks, want }
}

/// Exactly once for a running count written on every change: each key's
/// `column` counts up 1, 2, 3, ... with no value committed twice and none
/// skipped.
pub fn assert_counts_up_by_one(records: &[OutRecord], column: &str, seed: u64) {
    let mut seen: BTreeMap<String, u64> = BTreeMap::new();
    for r in records {
        let keys = json(r)[column].as_u64().expect("the count column");
        let last = seen.entry(r.key.clone().unwrap()).or_default();
        assert_eq!(
            keys,
            *last + 1,
            "key {:?} went from {last} to {keys} (seed {seed})",
            r.key
        );
        *last = keys;
    }
}

/// Payments `{"user","amount"}` of `users` users, `n` of them with amounts
/// up to `max`: the lines, each user's total, and the table the
/// running_totals job must end with (users per current total).
pub struct Payments {
    pub lines: Vec<String>,
    pub totals: BTreeMap<u64, i64>,
    pub per_total: BTreeMap<i64, u64>,
    pub want: BTreeMap<String, Option<serde_json::Value>>,
}

pub fn payments(rng: &mut Rng, users: u64, n: usize, max: u64) -> Payments {
    let mut totals: BTreeMap<u64, i64> = BTreeMap::new();
    let mut lines = Vec::new();
    for _ in 0..n {
        let (u, amount) = (rng.below(users), 1 + rng.below(max) as i64);
        *totals.entry(u).or_default() += amount;
        lines.push(format!(r#"{{"user":"u{u}","amount":{amount}}}"#));
    }
    // Not payments, which the job's filter (`amount > 0`) drops: were they
    // counted, "ghost" would have a total of 0 and u0's would go down.
    for (i, line) in [
        r#"{"user":"ghost","amount":0}"#,
        r#"{"user":"u0","amount":-1000}"#,
        r#"{"user":"ghost"}"#,
    ]
    .iter()
    .enumerate()
    {
        lines.insert(i * lines.len() / 3, line.to_string());
    }
    let mut per_total: BTreeMap<i64, u64> = BTreeMap::new();
    for t in totals.values() {
        *per_total.entry(*t).or_default() += 1;
    }
    let want = per_total
        .iter()
        .map(|(t, n)| {
            (
                serde_json::json!({"total": t}).to_string(),
                Some(serde_json::json!({"total": t, "users": n})),
            )
        })
        .collect();
    Payments {
        lines,
        totals,
        per_total,
        want,
    }
}

/// The clicks_views example's input: views on their own thread, slowly
/// and stopping for seconds at a time (`views`, joined for what it sent),
/// clicks in chunks for the caller to feed (`chunks`, `clicks` per user).
pub struct ClicksViews {
    pub chunks: Vec<Vec<String>>,
    pub clicks: BTreeMap<u64, u64>,
    pub views: std::thread::JoinHandle<BTreeMap<u64, u64>>,
}

pub fn clicks_views_input(rng: &mut Rng, seed: u64, views_topic: &str) -> ClicksViews {
    let users = 25u64;
    let views = {
        let views = views_topic.to_string();
        let mut rng = Rng::new(seed ^ 0x5eed);
        std::thread::spawn(move || {
            let mut sent: BTreeMap<u64, u64> = BTreeMap::new();
            for round in 0..12 {
                let batch: Vec<String> = (0..20)
                    .map(|_| {
                        let u = rng.below(users);
                        *sent.entry(u).or_default() += 1;
                        format!(r#"{{"user":"u{u}"}}"#)
                    })
                    .collect();
                produce(&views, 1, &batch);
                let pause = if round % 4 == 3 { 3000 } else { 300 };
                std::thread::sleep(Duration::from_millis(pause));
            }
            sent
        })
    };
    let mut clicks: BTreeMap<u64, u64> = BTreeMap::new();
    let chunks = (0..16)
        .map(|_| {
            (0..500)
                .map(|_| {
                    let u = rng.below(users);
                    *clicks.entry(u).or_default() += 1;
                    format!(r#"{{"user":"u{u}"}}"#)
                })
                .collect()
        })
        .collect();
    ClicksViews {
        chunks,
        clicks,
        views,
    }
}

impl ClicksViews {
    /// The final table once every view is sent: per user, both counts.
    pub fn want(
        clicks: &BTreeMap<u64, u64>,
        views: &BTreeMap<u64, u64>,
    ) -> BTreeMap<String, Option<serde_json::Value>> {
        let users: std::collections::BTreeSet<u64> =
            clicks.keys().chain(views.keys()).copied().collect();
        users
            .into_iter()
            .map(|u| {
                let user = format!("u{u}");
                let (c, v) = (
                    clicks.get(&u).copied().unwrap_or(0),
                    views.get(&u).copied().unwrap_or(0),
                );
                (
                    serde_json::json!({"user": user}).to_string(),
                    Some(serde_json::json!({"user": user, "clicks": c, "views": v})),
                )
            })
            .collect()
    }
}

/// Each committed update moved one of the two counts by one: nothing was
/// applied twice or lost between two committed rows.
pub fn assert_each_update_moves_one_count(records: &[OutRecord], seed: u64) {
    let mut seen: BTreeMap<String, u64> = BTreeMap::new();
    for r in records {
        let v = json(r);
        let total = v["clicks"].as_u64().unwrap() + v["views"].as_u64().unwrap();
        let last = seen.entry(r.key.clone().unwrap()).or_default();
        assert_eq!(
            total,
            *last + 1,
            "user {:?} went from {last} to {total} records (seed {seed})",
            r.key
        );
        *last = total;
    }
}
