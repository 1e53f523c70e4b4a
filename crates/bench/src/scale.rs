//! Group mode (issue #11): throughput with 1, 2 and 3 instances, of the
//! built-in word count and of the job graph one; the time
//! until a killed instance's work produces committed output again (weir
//! and Kafka Streams, same kill); checkpoint cost on S3.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use serde_json::json;
use weir_testkit::{bootstrap, create_topic, distinct_lines, produce, unique, word_lines, JobSpec};

use crate::measure::{self, ProcessGroup};
use crate::systems::{graph_example, weir_binary, weir_run, write_graph_config};

const TASKS: u32 = 8;
/// Keys fed steadily around a kill: each appears about 50 times a second.
const HOT: usize = 400;

/// Where a run keeps its checkpoints.
#[derive(Clone, Debug)]
pub enum Storage {
    Shared,
    S3,
}

impl Storage {
    pub fn parse(s: &str) -> Self {
        match s {
            "shared" => Storage::Shared,
            "s3" => Storage::S3,
            other => panic!("--storage {other}: use shared or s3"),
        }
    }
}

/// The word count a group-mode job runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScaleSystem {
    /// The built-in pipeline (`kind = "word-count"`) in `weir`.
    Weir,
    /// The job graph word count, `examples/word_count` (its own graph; the
    /// same output: key the word, value `{"key": word, "count": n}`).
    WeirGraph,
}

impl ScaleSystem {
    pub fn parse(s: &str) -> Self {
        match s {
            "weir" => ScaleSystem::Weir,
            "weir-graph" => ScaleSystem::WeirGraph,
            other => panic!("--systems {other}: use weir or weir-graph"),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ScaleSystem::Weir => "weir",
            ScaleSystem::WeirGraph => "weir-graph",
        }
    }
}

/// A group-mode job whose instances run as separate processes.
struct GroupJob {
    system: ScaleSystem,
    name: String,
    input: String,
    output: String,
    dir: PathBuf,
    checkpoint: PathBuf,
    s3_extra: String,
    interval: String,
    extra_properties: String,
}

impl GroupJob {
    fn new(system: ScaleSystem, input: &str, dir: &Path, storage: &Storage) -> Self {
        let name = unique("gbench");
        let output = unique("gbench-counts");
        create_topic(&output, 4);
        let (checkpoint, s3_extra) = match storage {
            Storage::Shared => (dir.join("shared"), String::new()),
            Storage::S3 => {
                let endpoint = std::env::var("WEIR_S3_ENDPOINT")
                    .expect("WEIR_S3_ENDPOINT: start scripts/s3.sh and eval its env");
                let bucket = name.to_lowercase().replace('_', "-");
                let addr = endpoint.trim_start_matches("http://").trim_end_matches('/');
                let (status, body) = weir_testkit::http(addr, "PUT", &format!("/{bucket}"), None);
                assert_eq!(status, 200, "create bucket: {body}");
                (
                    PathBuf::from(format!("s3://{bucket}/chk")),
                    format!(
                        "\n[checkpoint.s3]\nendpoint = {endpoint:?}\nregion = \"us-east-1\"\n\
                         access_key_id = \"test\"\nsecret_access_key = \"test\"\nallow_http = true\n"
                    ),
                )
            }
        };
        Self {
            system,
            name,
            input: input.to_string(),
            output,
            dir: dir.to_path_buf(),
            checkpoint,
            s3_extra,
            interval: "1s".into(),
            extra_properties: String::new(),
        }
    }

    fn group(&self) -> String {
        format!("weir-{}-{}", self.name, self.output)
    }

    fn instance_dir(&self, i: usize) -> PathBuf {
        self.dir.join(format!("i{i}"))
    }

    /// Writes instance `i`'s configuration; returns its path.
    fn write_config(&self, i: usize) -> PathBuf {
        let spec = JobSpec {
            name: self.name.clone(),
            checkpoint_dir: self.checkpoint.clone(),
            delivery: "exactly-once".into(),
            interval: self.interval.clone(),
            extra: format!(
                "\n[scale]\nmode = \"group\"\ntasks = {TASKS}\ninstance = \"i{i}\"\n\n\
                 [kafka.properties]\n\"transaction.timeout.ms\" = \"10000\"\n{}{}",
                self.extra_properties, self.s3_extra
            ),
            ..JobSpec::word_count(&self.instance_dir(i), &self.input, &self.output)
        };
        match self.system {
            ScaleSystem::Weir => spec.write(),
            // The same configuration less [source] and [pipeline].
            ScaleSystem::WeirGraph => write_graph_config(&spec, &self.instance_dir(i)),
        }
    }

    fn start(&self, i: usize, log_filter: &str) -> ProcessGroup {
        let config = self.write_config(i);
        let mut env = vec![
            ("RUST_LOG", log_filter),
            ("WEIR__CHECKPOINT__TIMEOUT", "5s"),
        ];
        let binary = match self.system {
            ScaleSystem::Weir => weir_binary(),
            ScaleSystem::WeirGraph => {
                // The example reads its topics from the environment.
                env.push(("WORD_COUNT_INPUT", &self.input));
                env.push(("WORD_COUNT_OUTPUT", &self.output));
                graph_example("word_count")
            }
        };
        ProcessGroup::start(
            &[weir_run(&binary, &config)],
            &self.instance_dir(i).join("weir.log"),
            &env,
        )
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn spread(v: &[f64]) -> String {
    let mut v = v.to_vec();
    let m = median(&mut v);
    format!("{m:.0} ({:.0}–{:.0})", v[0], v[v.len() - 1])
}

/// Throughput and CPU per word with 1, 2 and 3 instances on one input, of
/// each of `systems`: every system and instance count once per round,
/// rounds interleaved.
pub fn throughput(
    words: usize,
    instances: &[usize],
    rounds: usize,
    storage: &Storage,
    systems: &[ScaleSystem],
) {
    if systems.contains(&ScaleSystem::WeirGraph) {
        // Before the input is written: a missing example fails at once.
        graph_example("word_count");
    }
    // Only weir, the default: the output as it was before weir-graph.
    let only_weir = systems == [ScaleSystem::Weir];
    let label = |system: ScaleSystem| {
        if only_weir {
            String::new()
        } else {
            format!("{}: ", system.name())
        }
    };
    let (lines, expected) = word_lines(7, words / 10, 10, 100_000);
    let input = unique("gbench-words");
    create_topic(&input, 4);
    produce(&input, 4, &lines);
    drop(lines);
    let mut results: HashMap<(ScaleSystem, usize), Vec<(f64, f64)>> = HashMap::new();
    // weir-graph over weir, words/s and CPU per word, per round and count.
    let mut ratios: HashMap<usize, Vec<(f64, f64)>> = HashMap::new();
    let mut raw = Vec::new();
    for round in 0..rounds {
        let mut this_round: HashMap<(ScaleSystem, usize), (f64, f64)> = HashMap::new();
        for &system in systems {
            let label = label(system);
            for &n in instances {
                let tmp = tempfile::tempdir().unwrap();
                let job = GroupJob::new(system, &input, tmp.path(), storage);
                // Done when the group committed every input offset and, after
                // that, every repartition offset: the input's committed
                // offsets alone only say the shuffle is written. This polls
                // offsets, as `weir-bench run` does for single mode; counting
                // the output with a consumer (as this did before) read 5M
                // records on the same two cores and finished seconds after
                // the job did.
                let client = measure::consumer(&job.group());

                let input_ends = measure::end_offsets_with(&client, &input);
                let input_total: i64 = input_ends.iter().map(|(_, e)| e).sum();
                let started = Instant::now();
                // WEIR_BENCH_LOG sets the instances' log filter, and keeps
                // their logs (for an epoch timeline: `weir::engine::group=debug`).
                let filter = std::env::var("WEIR_BENCH_LOG").ok();
                let mut groups: Vec<ProcessGroup> = (0..n)
                    .map(|i| job.start(i, filter.as_deref().unwrap_or("info")))
                    .collect();
                let deadline = started + Duration::from_secs(1800);
                let mut cpu;
                loop {
                    cpu = groups.iter().map(ProcessGroup::cpu_seconds).sum::<f64>();
                    if measure::committed_total_with(&client, &input, &input_ends) >= input_total
                        && shuffle_done(&client, &job.name)
                    {
                        break;
                    }
                    assert!(
                        Instant::now() < deadline,
                        "{label}{n} instances never finished"
                    );
                    if groups.iter_mut().all(ProcessGroup::any_exited) {
                        let logs: String = (0..n)
                            .map(|i| {
                                let log =
                                    std::fs::read_to_string(job.instance_dir(i).join("weir.log"))
                                        .unwrap_or_default();
                                format!("==== i{i}\n{}\n", weir_testkit::log_tail(&log))
                            })
                            .collect();
                        panic!("{label}every one of {n} instances exited early\n{logs}");
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                let secs = started.elapsed().as_secs_f64();
                let rate = words as f64 / secs;
                let us = cpu * 1e6 / words as f64;
                for g in groups {
                    g.stop(Duration::from_secs(30));
                }
                if filter.is_some() {
                    for i in 0..n {
                        let kept = std::env::temp_dir().join(format!(
                            "weir-scale-r{round}-{}-{n}-i{i}.log",
                            system.name()
                        ));
                        let _ = std::fs::copy(job.instance_dir(i).join("weir.log"), &kept);
                        eprintln!("log kept: {}", kept.display());
                    }
                }
                let verified = measure::verify(&job.output, &expected);
                eprintln!(
                    "round {round}: {label}{n} instance(s): {rate:.0} words/s, {us:.2} CPU-µs/word, {secs:.1} s, exact: {verified:?}"
                );
                assert!(
                    verified.is_ok(),
                    "{label}output of {n} instances is not exact"
                );
                results.entry((system, n)).or_default().push((rate, us));
                this_round.insert((system, n), (rate, us));
                raw.push(json!({"round": round, "system": system.name(), "instances": n, "words_per_s": rate, "cpu_us_per_word": us, "seconds": secs}));
            }
        }
        for &n in instances {
            if let (Some(w), Some(g)) = (
                this_round.get(&(ScaleSystem::Weir, n)),
                this_round.get(&(ScaleSystem::WeirGraph, n)),
            ) {
                ratios.entry(n).or_default().push((g.0 / w.0, g.1 / w.1));
            }
        }
    }
    for &system in systems {
        if !only_weir {
            println!("\n{}:\n", system.name());
        }
        println!("| instances | words/s median (min–max) | CPU-µs/word median (min–max) |");
        println!("|---|---|---|");
        for &n in instances {
            let r = &results[&(system, n)];
            let rates: Vec<f64> = r.iter().map(|x| x.0).collect();
            let mut us: Vec<f64> = r.iter().map(|x| x.1).collect();
            let m = median(&mut us.clone());
            us.sort_by(|a, b| a.partial_cmp(b).unwrap());
            println!(
                "| {n} | {} | {m:.2} ({:.2}–{:.2}) |",
                spread(&rates),
                us[0],
                us[us.len() - 1]
            );
        }
    }
    if !ratios.is_empty() {
        println!("\nweir-graph / weir, per round (median (min–max)):\n");
        println!("| instances | words/s | CPU-µs/word |");
        println!("|---|---|---|");
        for &n in instances {
            let r = &ratios[&n];
            let mut rate: Vec<f64> = r.iter().map(|x| x.0).collect();
            let mut us: Vec<f64> = r.iter().map(|x| x.1).collect();
            let (rm, um) = (median(&mut rate), median(&mut us));
            println!(
                "| {n} | {rm:.2} ({:.2}–{:.2}) | {um:.2} ({:.2}–{:.2}) |",
                rate[0],
                rate[rate.len() - 1],
                us[0],
                us[us.len() - 1]
            );
        }
    }
    let systems: Vec<&str> = systems.iter().map(|s| s.name()).collect();
    let ratios: Vec<serde_json::Value> = instances
        .iter()
        .filter_map(|n| ratios.get(n).map(|r| (n, r)))
        .map(|(n, r)| json!({"instances": n, "graph_over_weir_words_per_s": r.iter().map(|x| x.0).collect::<Vec<_>>(), "graph_over_weir_cpu_us_per_word": r.iter().map(|x| x.1).collect::<Vec<_>>()}))
        .collect();
    crate::save(
        "scale-throughput",
        json!({"machine": crate::machine(), "words": words, "tasks": TASKS, "storage": format!("{storage:?}"), "systems": systems, "runs": raw, "ratios": ratios}),
    );
}

/// Whether the group of `c` has committed every row on job `name`'s
/// repartition topics, asked once the input is all committed (so nothing
/// more is written to them). A task's committed offset is one past the
/// last row it read. Past it there may be only commit markers: one per
/// writing instance's transaction, and with several instances the last
/// marker can follow the last row by more than one offset. So a partition
/// whose committed offset is short of its end is read from there by
/// a probe (read_committed, partition EOF on): done if it holds no record.
/// The probe is a new consumer each time: one reassigned between calls
/// still held the last call's end-of-partition events, and counted them
/// as this call's (a run then ended before its rows were all applied).
fn shuffle_done(c: &BaseConsumer, name: &str) -> bool {
    let md = c
        .fetch_metadata(None, Duration::from_secs(10))
        .expect("metadata");
    let prefix = format!("{name}.");
    let topics: Vec<String> = md
        .topics()
        .iter()
        .map(|t| t.name().to_string())
        .filter(|t| t.starts_with(&prefix) && t.ends_with(".repartition"))
        .collect();
    assert!(!topics.is_empty(), "job {name} has no repartition topic");
    let mut behind = TopicPartitionList::new();
    for topic in &topics {
        let ends = measure::end_offsets_with(c, topic);
        let mut tpl = TopicPartitionList::new();
        for (p, _) in &ends {
            tpl.add_partition(topic, *p);
        }
        let Ok(got) = c.committed_offsets(tpl, Duration::from_secs(5)) else {
            return false;
        };
        for (p, end) in &ends {
            let committed = match got.find_partition(topic, *p).map(|e| e.offset()) {
                Some(Offset::Offset(o)) => o,
                _ => 0,
            };
            if committed < *end - 1 {
                behind
                    .add_partition_offset(topic, *p, Offset::Offset(committed))
                    .expect("offset");
            }
        }
    }
    if behind.count() == 0 {
        return true;
    }
    let probe: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("group.id", unique("bench-probe"))
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true")
        .set("enable.auto.commit", "false")
        .create()
        .expect("probe consumer");
    probe.assign(&behind).expect("assign the probe");
    let mut at_end = 0;
    let deadline = Instant::now() + Duration::from_secs(10);
    while at_end < behind.count() && Instant::now() < deadline {
        match probe.poll(Duration::from_millis(100)) {
            Some(Ok(_)) => return false,
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(_))) => at_end += 1,
            _ => {}
        }
    }
    at_end == behind.count()
}

/// A read_committed consumer of `output`'s 4 partitions from `from`.
fn committed_reader(output: &str, from: Offset) -> BaseConsumer {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("group.id", unique("bench-reader"))
        .set("isolation.level", "read_committed")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..4 {
        tpl.add_partition_offset(output, p, from).unwrap();
    }
    c.assign(&tpl).unwrap();
    c
}

/// Reads committed output from its current end and records, per key, when
/// the first record created after `t0` arrived.
struct OutageReader {
    stop: Arc<AtomicBool>,
    first: Arc<std::sync::Mutex<HashMap<String, f64>>>,
    handle: std::thread::JoinHandle<()>,
}

impl OutageReader {
    fn start(output: &str, t0: Arc<std::sync::Mutex<Option<SystemTime>>>) -> Self {
        let c = committed_reader(output, Offset::End);
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let first = Arc::new(std::sync::Mutex::new(HashMap::new()));
        let seen = first.clone();
        let handle = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                let Some(Ok(m)) = c.poll(Duration::from_millis(20)) else {
                    continue;
                };
                let Some(t0) = *t0.lock().unwrap() else {
                    continue;
                };
                let created = m.timestamp().to_millis().unwrap_or(0);
                let t0_ms = t0
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .unwrap()
                    .as_millis() as i64;
                if created <= t0_ms {
                    continue;
                }
                let key = String::from_utf8_lossy(m.key().unwrap_or_default()).into_owned();
                if !key.starts_with("hot") {
                    // Late output of the state's build, not of the feed.
                    continue;
                }
                seen.lock().unwrap().entry(key).or_insert_with(|| {
                    SystemTime::now()
                        .duration_since(t0)
                        .unwrap_or_default()
                        .as_secs_f64()
                });
            }
        });
        Self {
            stop,
            first,
            handle,
        }
    }

    fn keys_back(&self) -> usize {
        self.first.lock().unwrap().len()
    }

    fn finish(self) -> HashMap<String, f64> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().unwrap();
        std::mem::take(&mut *self.first.lock().unwrap())
    }
}

/// Feeds lines of `hot` words steadily until stopped.
fn steady_feed(input: &str, hot: usize, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    let input = input.to_string();
    std::thread::spawn(move || {
        let mut i = 0usize;
        while !stop.load(Ordering::Relaxed) {
            let lines: Vec<String> = (0..200)
                .map(|_| {
                    let words: Vec<String> = (0..10)
                        .map(|_| {
                            i += 1;
                            format!("hot{}", i % hot)
                        })
                        .collect();
                    words.join(" ")
                })
                .collect();
            produce(&input, 4, &lines);
            std::thread::sleep(Duration::from_millis(100));
        }
    })
}

/// Log lines of weir's text format after `t0`, with their times.
fn log_events(log: &Path, needle: &str, t0: SystemTime) -> Vec<(f64, String)> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(needle))
        .filter_map(|l| {
            let stamp = l.split_whitespace().next()?;
            let t = humantime::parse_rfc3339(stamp).ok()?;
            let since = t.duration_since(t0).ok()?.as_secs_f64();
            Some((since, l.to_string()))
        })
        .collect()
}

fn field(line: &str, name: &str) -> Option<f64> {
    let at = line.find(&format!("{name}="))? + name.len() + 1;
    line[at..]
        .split(|c: char| !c.is_ascii_digit() && c != '.')
        .next()?
        .parse()
        .ok()
}

/// SIGKILL of one of three instances once `keys` keys of state are built:
/// the time until every key produces committed output again, and for weir
/// where that time went.
pub fn kill_recovery(keys: usize, systems: &[String], storage: &Storage, rounds: usize) {
    let mut rows = Vec::new();
    for round in 0..rounds {
        for system in systems {
            let tmp = tempfile::tempdir().unwrap();
            let lines = distinct_lines(keys, 10);
            let input = unique("gbench-kill");
            create_topic(&input, 4);
            produce(&input, 4, &lines);
            drop(lines);
            let ends = measure::end_offsets(&input);
            let total: i64 = ends.iter().map(|(_, e)| e).sum();
            let (mut groups, group, output, job) = match system.as_str() {
                "weir" => {
                    let job = GroupJob::new(ScaleSystem::Weir, &input, tmp.path(), storage);
                    let g: Vec<ProcessGroup> = (0..3).map(|i| job.start(i, "info")).collect();
                    (g, job.group(), job.output.clone(), Some(job))
                }
                "kafka-streams" => {
                    let app = unique("ks-kill");
                    let output = unique("gbench-counts");
                    create_topic(&output, 4);
                    let g = (0..3)
                        .map(|i| {
                            let dir = tmp.path().join(format!("i{i}"));
                            std::fs::create_dir_all(&dir).unwrap();
                            ProcessGroup::start(
                                &[vec![
                                    "java".into(),
                                    "-Xmx1g".into(),
                                    // The same session timeout as weir's group (the broker's).
                                    "-Dweirbench.session.timeout.ms=6000".into(),
                                    "-cp".into(),
                                    crate::systems::java_cp("kafka-streams"),
                                    "weirbench.KafkaStreamsWordCount".into(),
                                    bootstrap(),
                                    input.clone(),
                                    output.clone(),
                                    app.clone(),
                                    dir.join("state").display().to_string(),
                                    "1".into(),
                                ]],
                                &dir.join("system.log"),
                                &[],
                            )
                        })
                        .collect();
                    (g, app, output, None)
                }
                other => panic!("unknown system {other}"),
            };
            let client = measure::consumer(&group);
            let deadline = Instant::now() + Duration::from_secs(1800);
            while measure::committed_total_with(&client, &input, &ends) < total {
                assert!(
                    Instant::now() < deadline,
                    "{system}: the state was never built"
                );
                std::thread::sleep(Duration::from_millis(200));
            }
            // The input is committed; its output (the shuffle's second
            // half) may still be on its way: wait until the output is quiet.
            let mut last = measure::end_offsets(&output);
            let mut quiet_since = Instant::now();
            while quiet_since.elapsed() < Duration::from_secs(3) {
                std::thread::sleep(Duration::from_millis(500));
                let now = measure::end_offsets(&output);
                if now != last {
                    last = now;
                    quiet_since = Instant::now();
                }
            }
            let stop = Arc::new(AtomicBool::new(false));
            let feeder = steady_feed(&input, HOT, stop.clone());
            std::thread::sleep(Duration::from_secs(8));
            let t0 = Arc::new(std::sync::Mutex::new(None));
            let reader = OutageReader::start(&output, t0.clone());
            std::thread::sleep(Duration::from_secs(2));
            let victim = groups.remove(0);
            let killed_at = SystemTime::now();
            *t0.lock().unwrap() = Some(killed_at);
            victim.kill();
            // Every hot key back (then 2 s more), or two minutes.
            let waited = Instant::now();
            while reader.keys_back() < HOT && waited.elapsed() < Duration::from_secs(120) {
                std::thread::sleep(Duration::from_millis(200));
            }
            std::thread::sleep(Duration::from_secs(2));
            stop.store(true, Ordering::Relaxed);
            feeder.join().unwrap();
            let first = reader.finish();
            for g in groups {
                g.stop(Duration::from_secs(30));
            }
            let back = first.len();
            let mut gaps: Vec<f64> = first.values().copied().collect();
            gaps.sort_by(|a, b| a.partial_cmp(b).unwrap());
            let worst = gaps.last().copied().unwrap_or(f64::NAN);
            let mut row = json!({
                "round": round, "system": system, "keys": keys, "hot_keys_back": back,
                "all_back_s": worst, "median_key_s": gaps.get(gaps.len() / 2).copied(),
            });
            let mut parts = String::new();
            if let Some(job) = &job {
                let logs: Vec<PathBuf> = (1..3)
                    .map(|i| job.instance_dir(i).join("weir.log"))
                    .collect();
                let assigned = logs
                    .iter()
                    .flat_map(|l| log_events(l, "partition assigned", killed_at))
                    .map(|e| e.0)
                    .fold(f64::NAN, f64::min);
                let resumed = logs
                    .iter()
                    .flat_map(|l| {
                        log_events(l, "assigned partitions restored and resumed", killed_at)
                    })
                    .collect::<Vec<_>>();
                let restores: Vec<(f64, f64, f64, String)> = logs
                    .iter()
                    .flat_map(|l| log_events(l, "task restored", killed_at))
                    .map(|(t, line)| {
                        let how = if line.contains("download") {
                            "download"
                        } else {
                            "local"
                        };
                        (
                            t,
                            field(&line, "took_ms").unwrap_or(f64::NAN),
                            field(&line, "bytes").unwrap_or(0.0),
                            how.to_string(),
                        )
                    })
                    .collect();
                let resumed_at = resumed.iter().map(|e| e.0).fold(f64::NAN, f64::max);
                let restore_ms: Vec<f64> = restores.iter().map(|r| r.1).collect();
                let bytes: Vec<f64> = restores.iter().map(|r| r.2).collect();
                parts = format!(
                    "assigned {assigned:.2} s; resumed {resumed_at:.2} s; task restores (ms): {restore_ms:?}, bytes {bytes:?}, {:?}",
                    restores.iter().map(|r| r.3.as_str()).collect::<Vec<_>>()
                );
                row["assigned_s"] = json!(assigned);
                row["resumed_s"] = json!(resumed_at);
                row["task_restore_ms"] = json!(restore_ms);
                row["task_restore_bytes"] = json!(bytes);
            }
            eprintln!(
                "round {round}: {system}: {back} hot keys back, all back after {worst:.2} s (median key {:.2} s). {parts}",
                gaps.get(gaps.len() / 2).copied().unwrap_or(f64::NAN)
            );
            rows.push(row);
        }
    }
    crate::save(
        "scale-kill",
        json!({"machine": crate::machine(), "keys": keys, "tasks": TASKS, "storage": format!("{storage:?}"), "runs": rows}),
    );
}

/// Checkpoint cost on storage with `keys` keys of state when a `changed`
/// fraction of them changes each interval: bytes uploaded and duration
/// per epoch.
pub fn checkpoint_cost(keys: usize, changed: f64, seconds: u64, storage: &Storage) {
    let tmp = tempfile::tempdir().unwrap();
    let lines = distinct_lines(keys, 10);
    let input = unique("gbench-cost");
    create_topic(&input, 4);
    produce(&input, 4, &lines);
    let ends = measure::end_offsets(&input);
    let total: i64 = ends.iter().map(|(_, e)| e).sum();
    let job = GroupJob::new(ScaleSystem::Weir, &input, tmp.path(), storage);
    let g = job.start(0, "info,weir::scale=debug");
    let client = measure::consumer(&job.group());
    let started = Instant::now();
    while measure::committed_total_with(&client, &input, &ends) < total {
        assert!(
            started.elapsed() < Duration::from_secs(3600),
            "state never built"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    eprintln!(
        "{keys} keys built in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    let t0 = SystemTime::now();
    // Each second a different `changed` slice of the keys' lines.
    let per_second = ((keys as f64 * changed) / 10.0).ceil() as usize;
    let run = Instant::now();
    let mut slice = 0;
    while run.elapsed() < Duration::from_secs(seconds) {
        let from = (slice * per_second) % lines.len();
        let chunk: Vec<String> = lines[from..(from + per_second).min(lines.len())].to_vec();
        let t = Instant::now();
        produce(&input, 4, &chunk);
        slice += 1;
        std::thread::sleep(Duration::from_secs(1).saturating_sub(t.elapsed()));
    }
    std::thread::sleep(Duration::from_secs(3));
    g.stop(Duration::from_secs(60));
    let epochs = log_events(&job.instance_dir(0).join("weir.log"), "epoch committed", t0);
    let mut took: Vec<f64> = epochs
        .iter()
        .filter_map(|e| field(&e.1, "took_ms"))
        .collect();
    let mut uploaded: Vec<f64> = epochs
        .iter()
        .filter_map(|e| field(&e.1, "uploaded_bytes"))
        .collect();
    assert!(!took.is_empty(), "no epoch was logged");
    took.sort_by(|a, b| a.partial_cmp(b).unwrap());
    uploaded.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let p = |v: &[f64], q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    let state_bytes: u64 = std::fs::read_dir(tmp.path().join("i0/state"))
        .map(|_| weir::checkpoint::store::dir_size(&tmp.path().join("i0/state")))
        .unwrap_or(0);
    println!("| keys | changed per epoch | epochs | uploaded per epoch p50 (p99) | duration p50 | duration p99 | local state |");
    println!("|---|---|---|---|---|---|---|");
    println!(
        "| {keys} | {:.1} % | {} | {:.1} MB ({:.1} MB) | {:.0} ms | {:.0} ms | {:.0} MB |",
        changed * 100.0,
        took.len(),
        p(&uploaded, 0.5) / 1e6,
        p(&uploaded, 0.99) / 1e6,
        p(&took, 0.5),
        p(&took, 0.99),
        state_bytes as f64 / 1e6
    );
    crate::save(
        "scale-checkpoint-cost",
        json!({"machine": crate::machine(), "keys": keys, "changed": changed, "storage": format!("{storage:?}"), "took_ms": took, "uploaded_bytes": uploaded}),
    );
}
