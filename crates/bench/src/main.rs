//! Benchmarks against the local broker, of the real binaries end to end.
//!
//! - `run`: weir's word count (issues #2/#3): throughput and CPU cost per
//!   delivery, emit mode and checkpoint interval (`--matrix`).
//! - `compare`: weir, Kafka Streams, Apache Flink and Quix Streams on the
//!   same input, plus a bare rdkafka consumer as the limit (issue #5).
//! - `recovery`: SIGKILL mid-run with N keys of state, time to the first
//!   newly committed output after the restart.
//! - `checkpoint-cost`: weir's checkpoint duration and snapshot pause at N keys.
//!
//! Time runs from a system's start until the consumer group's committed
//! offsets reach the end of the input; every exactly-once system here
//! commits them together with its output. CPU and peak RSS cover the
//! system's whole process group. Final counts are checked afterwards by an
//! independent read_committed reader, so no system is timed doing less work.
//! `bench/wordcount.sh` and `bench/compare.sh` build everything first.

mod limits;
mod measure;
mod nexmark;
mod queries;
mod scale;
mod systems;
mod udf_cost;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use serde_json::json;
use weir_testkit::{
    create_topic, distinct_lines, http, produce, unique, word_lines, zipf_lines, JobSpec,
};

use measure::{end_offsets, verify, ProcessGroup};
use systems::{weir_binary, weir_run, Ctx, System};

#[derive(Debug, Parser)]
#[command(about = "weir benchmarks against the local Kafka broker")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// weir alone: throughput and CPU per configuration.
    Run(RunArgs),
    /// weir against Kafka Streams, Flink and Quix Streams.
    Compare(CompareArgs),
    /// Time from a restart after SIGKILL to the first newly committed output.
    Recovery(RecoveryArgs),
    /// weir's checkpoint duration and snapshot pause with many keys.
    CheckpointCost(CostArgs),
    /// A tumbling 10 s event-time count per key: weir, Flink, Kafka Streams.
    Windowed(WindowedArgs),
    /// Group mode: words/s and CPU per word with 1, 2, 3 instances, of the
    /// built-in word count and/or its job graph version (`--systems`).
    ScaleThroughput(ScaleThroughputArgs),
    /// Group mode: SIGKILL one of three instances; time until every key
    /// has committed output again (weir, Kafka Streams).
    ScaleKill(ScaleKillArgs),
    /// Group mode: checkpoint bytes uploaded and duration with many keys.
    ScaleCheckpointCost(ScaleCostArgs),
    /// Word count throughput with and without interactive queries
    /// (`GET /state/...`) at a steady rate.
    QueryLoad(QueryLoadArgs),
    /// Nexmark queries in SQL: weir against Flink SQL, each run checked
    /// exact against DuckDB.
    Nexmark(nexmark::NexmarkArgs),
    /// The cost of one call of a user-defined scalar function (q14's
    /// count_char) in Rust and in WebAssembly, against native Rust.
    Udf(UdfArgs),
}

#[derive(Debug, clap::Args)]
struct UdfArgs {
    #[arg(long, default_value_t = 2_000_000)]
    calls: usize,
    #[arg(long, default_value_t = 5)]
    rounds: usize,
}

#[derive(Debug, clap::Args)]
struct QueryLoadArgs {
    #[arg(long, default_value_t = 5_000_000)]
    words: usize,
    /// Query rates to compare, comma-separated; 0 is no queries.
    #[arg(long, default_value = "0,1000")]
    rates: String,
    #[arg(long, default_value_t = 3)]
    rounds: usize,
}

#[derive(Debug, clap::Args)]
struct ScaleThroughputArgs {
    #[arg(long, default_value_t = 1_000_000)]
    words: usize,
    #[arg(long, default_value = "1,2,3")]
    instances: String,
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// "shared" (a folder) or "s3" (needs WEIR_S3_ENDPOINT).
    #[arg(long, default_value = "shared")]
    storage: String,
    /// Word counts to run, comma-separated, each once per round: "weir"
    /// (the built-in pipeline) and "weir-graph" (the job graph of
    /// `examples/word_count`: `cargo build --release --examples`).
    #[arg(long, default_value = "weir")]
    systems: String,
}

#[derive(Debug, clap::Args)]
struct ScaleKillArgs {
    /// Distinct keys of state before the kill.
    #[arg(long, default_value_t = 1_000_000)]
    keys: usize,
    #[arg(long, default_value = "weir,kafka-streams")]
    systems: String,
    #[arg(long, default_value = "s3")]
    storage: String,
    #[arg(long, default_value_t = 3)]
    rounds: usize,
}

#[derive(Debug, clap::Args)]
struct ScaleCostArgs {
    #[arg(long, default_value_t = 10_000_000)]
    keys: usize,
    /// Fraction of the keys changed each second.
    #[arg(long, default_value_t = 0.01)]
    changed: f64,
    #[arg(long, default_value_t = 30)]
    seconds: u64,
    #[arg(long, default_value = "s3")]
    storage: String,
}

#[derive(Debug, clap::Args)]
struct WindowedArgs {
    /// Input events (JSON with an event-time field).
    #[arg(long, default_value_t = 1_000_000)]
    events: usize,
    #[arg(long, default_value_t = 100_000)]
    keys: u64,
    /// Interleaved rounds; each system runs once per round.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    #[arg(
        long,
        default_value = "weir-windowed,flink-windowed,kafka-streams-windowed"
    )]
    systems: String,
    #[arg(long, default_value_t = 2)]
    parallelism: u32,
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    /// Input words (10 per record).
    #[arg(long, default_value_t = 1_000_000)]
    words: usize,
    /// Distinct words.
    #[arg(long, default_value_t = 100_000)]
    vocabulary: u64,
    #[arg(long, default_value_t = 4)]
    partitions: i32,
    #[arg(long, default_value_t = 2)]
    parallelism: u32,
    #[arg(long, default_value = "1s")]
    interval: String,
    #[arg(long, default_value = "exactly-once")]
    delivery: String,
    #[arg(long, default_value = "every-update")]
    emit: String,
    /// Every combination of delivery × emit × interval (1s, 100ms).
    #[arg(long)]
    matrix: bool,
    /// Exactly-once and at-least-once every-update at 1s and 100ms, with
    /// the ratios of issue #10's delivery targets.
    #[arg(long, conflicts_with = "matrix")]
    delivery_cost: bool,
    /// Interleaved rounds; every configuration runs once per round.
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// Runs weir under `perf record` (cpu-clock sampling), writing
    /// `<prefix>-<delivery>-<emit>-<interval>-<round>.data` for
    /// `bench/profile.sh` to summarise by component.
    #[arg(long)]
    perf: Option<PathBuf>,
    /// Runs weir under `valgrind --tool=callgrind`, writing
    /// `<prefix>-<delivery>-<emit>-<interval>-<round>.out` and printing
    /// its instruction total: counts that repeat run to run where
    /// CPU-seconds on a shared machine do not (`callgrind_annotate` reads
    /// the file). Two sizes (`--words`) separate a run's fixed cost from a
    /// word's.
    #[arg(long, conflicts_with = "perf")]
    callgrind: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
struct CompareArgs {
    /// A tenth of the input: 1,000,000 words.
    #[arg(long)]
    quick: bool,
    /// Systems to run, comma-separated.
    #[arg(
        long,
        default_value = "weir,weir-on-checkpoint,kafka-streams,flink,quix"
    )]
    systems: String,
    #[arg(long, default_value_t = 2)]
    parallelism: u32,
    /// Interleaved rounds; every system and limit runs once per round.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
}

#[derive(Debug, clap::Args)]
struct RecoveryArgs {
    /// Distinct keys of state, comma-separated list of runs.
    #[arg(long, default_value = "1000000,10000000")]
    keys: String,
    #[arg(long, default_value = "weir,kafka-streams,flink")]
    systems: String,
    #[arg(long, default_value_t = 2)]
    parallelism: u32,
}

#[derive(Debug, clap::Args)]
struct CostArgs {
    #[arg(long, default_value = "1000000,10000000")]
    keys: String,
    #[arg(long, default_value_t = 2)]
    parallelism: u32,
}

const WORDS_PER_RECORD: usize = 10;

fn repo() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

fn save(kind: &str, value: serde_json::Value) {
    let dir = repo().join("bench/results");
    std::fs::create_dir_all(&dir).unwrap();
    let stamp = humantime::format_rfc3339_seconds(std::time::SystemTime::now())
        .to_string()
        .replace(':', "");
    let path = dir.join(format!("{kind}-{stamp}.json"));
    std::fs::write(&path, serde_json::to_string_pretty(&value).unwrap()).unwrap();
    eprintln!("raw results: {}", path.display());
}

fn machine() -> serde_json::Value {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("model name\t: ").map(String::from))
        .unwrap_or_default();
    // SAFETY: sysconf has no preconditions.
    let cores = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    json!({ "cpu": cpu, "cores": cores })
}

fn main() {
    match Cli::parse().command {
        Cmd::Run(a) => run(a),
        Cmd::Udf(a) => udf_cost::run(a.calls, a.rounds),
        Cmd::Compare(a) => compare(a),
        Cmd::Recovery(a) => recovery(a),
        Cmd::CheckpointCost(a) => checkpoint_cost(a),
        Cmd::Windowed(a) => windowed(a),
        Cmd::ScaleThroughput(a) => scale::throughput(
            a.words,
            &a.instances
                .split(',')
                .map(|n| n.parse().expect("--instances"))
                .collect::<Vec<_>>(),
            a.rounds,
            &scale::Storage::parse(&a.storage),
            &a.systems
                .split(',')
                .map(scale::ScaleSystem::parse)
                .collect::<Vec<_>>(),
        ),
        Cmd::ScaleKill(a) => scale::kill_recovery(
            a.keys,
            &a.systems.split(',').map(String::from).collect::<Vec<_>>(),
            &scale::Storage::parse(&a.storage),
            a.rounds,
        ),
        Cmd::Nexmark(a) => nexmark::nexmark(a),
        Cmd::QueryLoad(a) => queries::query_load(
            a.words,
            &a.rates
                .split(',')
                .map(|r| r.parse().expect("--rates"))
                .collect::<Vec<_>>(),
            a.rounds,
        ),
        Cmd::ScaleCheckpointCost(a) => scale::checkpoint_cost(
            a.keys,
            a.changed,
            a.seconds,
            &scale::Storage::parse(&a.storage),
        ),
    }
    // The run's topics go now, while this thread can still run the admin
    // client's runtime: at exit (the test kit's own hook) the main
    // thread's thread-locals are gone, and the deletion panicked inside
    // it, leaving the topics on the broker.
    match weir_testkit::delete_topics_of_this_process() {
        Ok(deleted) if !deleted.is_empty() => {
            eprintln!("deleted this run's {} topics", deleted.len())
        }
        Ok(_) => {}
        Err(e) => eprintln!("could not delete this run's topics: {e}"),
    }
}

/// Writes `lines` to a new topic; returns it and its end offsets.
fn input_topic(prefix: &str, partitions: i32, lines: &[String]) -> (String, Vec<(i32, i64)>) {
    let input = unique(prefix);
    create_topic(&input, partitions);
    let t = Instant::now();
    produce(&input, partitions, lines);
    eprintln!(
        "{} records written to {input} in {:.1}s",
        lines.len(),
        t.elapsed().as_secs_f64()
    );
    let ends = end_offsets(&input);
    (input, ends)
}

struct Measured {
    seconds: f64,
    cpu_seconds: f64,
    peak_rss_mb: f64,
}

/// How long the output must stay unchanged, after all input offsets are
/// committed, for a run to count as finished.
const SETTLE: Duration = Duration::from_secs(3);

/// Starts `system` on `ctx` and waits until its committed output reflects
/// all input: the group committed the input's end offsets and the output
/// topic stopped growing (systems with internal repartition topics, such as
/// Kafka Streams and Quix Streams, commit the input long before their
/// output is done). The time and CPU are those of the last output write.
fn measure(
    system: &System,
    ctx: &Ctx,
    ends: &[(i32, i64)],
    timeout: Duration,
) -> Result<Measured, String> {
    let group = system.group(ctx);
    let started = Instant::now();
    let mut pg = system.launch(ctx, false);
    let log = ctx.dir.join("system.log");
    let client = measure::consumer(&group);
    let total: i64 = ends.iter().map(|(_, e)| e).sum();
    let mut input_done = false;
    let mut last_end = -1i64;
    let mut last_change = Instant::now();
    let mut cpu_at_change = 0.0;
    loop {
        input_done =
            input_done || measure::committed_total_with(&client, &ctx.input, ends) >= total;
        let end: i64 = measure::end_offsets_with(&client, &ctx.output)
            .iter()
            .map(|(_, e)| e)
            .sum();
        if end != last_end {
            last_end = end;
            last_change = Instant::now();
            cpu_at_change = pg.cpu_seconds();
        }
        if input_done && last_change.elapsed() >= SETTLE {
            break;
        }
        if pg.any_exited() {
            pg.kill();
            return Err(format!(
                "{} exited early; see {}",
                system.name(),
                log.display()
            ));
        }
        if started.elapsed() > timeout {
            pg.kill();
            return Err(format!(
                "{} did not finish within {timeout:?}",
                system.name()
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let seconds = last_change.duration_since(started).as_secs_f64();
    let peak_rss_mb = pg.peak_rss_mb();
    pg.stop(Duration::from_secs(60));
    Ok(Measured {
        seconds,
        cpu_seconds: cpu_at_change,
        peak_rss_mb,
    })
}

fn run(args: RunArgs) {
    let records = args.words / WORDS_PER_RECORD;
    let (lines, expected) = word_lines(7, records, WORDS_PER_RECORD, args.vocabulary);
    let (input, ends) = input_topic("bench-words", args.partitions, &lines);
    drop(lines);
    let combos: Vec<Combo> = if args.matrix {
        let mut v = Vec::new();
        for d in ["exactly-once", "at-least-once"] {
            for e in ["every-update", "on-checkpoint"] {
                for i in ["1s", "100ms"] {
                    v.push(Combo::new(d, e, i));
                }
            }
        }
        v
    } else if args.delivery_cost {
        let mut v = Vec::new();
        for i in ["1s", "100ms"] {
            for d in ["exactly-once", "at-least-once"] {
                v.push(Combo::new(d, "every-update", i));
            }
        }
        v
    } else {
        vec![Combo::new(&args.delivery, &args.emit, &args.interval)]
    };
    println!(
        "| round | delivery | emit | interval | words | seconds | words/s | records/s | CPU-s per 1M words | CPU-s per 1M records | peak RSS MB |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    let mut results = Vec::new();
    // Words/s per combination, one entry per round, in round order.
    let mut rates: Vec<Vec<f64>> = vec![Vec::new(); combos.len()];
    let mut cpus: Vec<Vec<f64>> = vec![Vec::new(); combos.len()];
    for round in 0..args.rounds {
        for (c, combo) in combos.iter().enumerate() {
            let name = |prefix: &PathBuf, ext: &str| {
                PathBuf::from(format!(
                    "{}-{}-{}-{}-{round}.{ext}",
                    prefix.display(),
                    combo.delivery,
                    combo.emit,
                    combo.interval
                ))
            };
            let profile = match (&args.perf, &args.callgrind) {
                (Some(prefix), _) => Some(Profile::Perf(name(prefix, "data"))),
                (_, Some(prefix)) => Some(Profile::Callgrind(name(prefix, "out"))),
                _ => None,
            };
            let m = run_once(&args, combo, &input, &ends, &expected, profile.as_ref());
            if let Some(Profile::Callgrind(out)) = &profile {
                match callgrind_total(out) {
                    Some(n) => println!("callgrind: {}: {n} instructions", out.display()),
                    None => println!("callgrind: {}: no total (did weir exit?)", out.display()),
                }
            }
            let words = args.words as f64;
            let rate = words / m.seconds;
            let cpu = m.cpu_seconds / (words / 1e6);
            println!(
                "| {round} | {} | {} | {} | {} | {:.2} | {rate:.0} | {:.0} | {cpu:.2} | {:.2} | {:.0} |",
                combo.delivery,
                combo.emit,
                combo.interval,
                args.words,
                m.seconds,
                records as f64 / m.seconds,
                m.cpu_seconds / (records as f64 / 1e6),
                m.peak_rss_mb,
            );
            rates[c].push(rate);
            cpus[c].push(cpu);
            results.push(json!({
                "round": round, "delivery": combo.delivery, "emit": combo.emit,
                "interval": combo.interval, "words": args.words, "records": records,
                "seconds": m.seconds, "cpu_seconds": m.cpu_seconds, "peak_rss_mb": m.peak_rss_mb,
            }));
        }
    }
    if args.rounds > 1 {
        println!("\n| delivery | emit | interval | words/s median (min–max) | CPU-s per 1M words median (min–max) |");
        println!("|---|---|---|---|---|");
        for (c, combo) in combos.iter().enumerate() {
            let (rmin, rmax) = range(&rates[c]);
            let (cmin, cmax) = range(&cpus[c]);
            println!(
                "| {} | {} | {} | {:.0} ({rmin:.0}–{rmax:.0}) | {:.2} ({cmin:.2}–{cmax:.2}) |",
                combo.delivery,
                combo.emit,
                combo.interval,
                median(rates[c].clone()),
                median(cpus[c].clone()),
            );
        }
    }
    // The delivery targets of issue #10, each a ratio computed per round.
    let find = |d: &str, i: &str| {
        combos
            .iter()
            .position(|c| c.delivery == d && c.emit == "every-update" && c.interval == i)
    };
    let mut ratios = serde_json::Map::new();
    let mut ratio = |label: &str, a: Option<usize>, b: Option<usize>| {
        let (Some(a), Some(b)) = (a, b) else { return };
        let per_round: Vec<f64> = rates[a].iter().zip(&rates[b]).map(|(x, y)| x / y).collect();
        let (lo, hi) = range(&per_round);
        println!(
            "{label}: median {:.3} ({lo:.3}–{hi:.3}) over {} rounds",
            median(per_round.clone()),
            per_round.len()
        );
        ratios.insert(label.to_string(), json!(per_round));
    };
    ratio(
        "exactly-once / at-least-once words/s at 1s",
        find("exactly-once", "1s"),
        find("at-least-once", "1s"),
    );
    ratio(
        "exactly-once / at-least-once words/s at 100ms",
        find("exactly-once", "100ms"),
        find("at-least-once", "100ms"),
    );
    ratio(
        "at-least-once 100ms / at-least-once 1s words/s",
        find("at-least-once", "100ms"),
        find("at-least-once", "1s"),
    );
    save(
        "weir-run",
        json!({ "machine": machine(), "rounds": args.rounds, "results": results, "ratios": ratios }),
    );
}

/// One configuration of `weir-bench run`.
struct Combo {
    delivery: String,
    emit: String,
    interval: String,
}

impl Combo {
    fn new(delivery: &str, emit: &str, interval: &str) -> Self {
        Self {
            delivery: delivery.into(),
            emit: emit.into(),
            interval: interval.into(),
        }
    }
}

/// A profiler weir runs under.
enum Profile {
    /// `perf record` into this file.
    Perf(PathBuf),
    /// `valgrind --tool=callgrind` into this file.
    Callgrind(PathBuf),
}

/// The instruction total a callgrind output file records.
fn callgrind_total(out: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(out).ok()?;
    text.lines()
        .rev()
        .find_map(|l| {
            l.strip_prefix("totals:")
                .or_else(|| l.strip_prefix("summary:"))
        })
        .and_then(|n| n.trim().parse().ok())
}

/// Runs weir's word count once with `combo` over `input` into a new output
/// topic, until its group committed the whole input; checks the counts.
fn run_once(
    args: &RunArgs,
    combo: &Combo,
    input: &str,
    ends: &[(i32, i64)],
    expected: &HashMap<String, u64>,
    profile: Option<&Profile>,
) -> Measured {
    let dir = tempfile::tempdir().unwrap();
    let output = unique("bench-counts");
    create_topic(&output, args.partitions);
    let spec = JobSpec {
        parallelism: args.parallelism,
        delivery: combo.delivery.clone(),
        emit: combo.emit.clone(),
        interval: combo.interval.clone(),
        ..JobSpec::word_count(dir.path(), input, &output)
    };
    let config = spec.write();
    let group = format!("weir-{}-{}", spec.name, output);
    let started = Instant::now();
    let mut argv: Vec<String> = match profile {
        // cpu-clock works in this VM (no hardware counters). Flat samples:
        // bench/profile.sh attributes each symbol to a component.
        Some(Profile::Perf(out)) => ["perf", "record", "-e", "cpu-clock", "-F", "999", "-o"]
            .iter()
            .map(|s| s.to_string())
            .chain([out.display().to_string(), "--".into()])
            .collect(),
        Some(Profile::Callgrind(out)) => vec![
            "valgrind".into(),
            "--tool=callgrind".into(),
            format!("--callgrind-out-file={}", out.display()),
            "--".into(),
        ],
        None => Vec::new(),
    };
    argv.extend(weir_run(&weir_binary(), &config));
    let pg = ProcessGroup::start(
        &[argv],
        &dir.path().join("weir.log"),
        &[("RUST_LOG", "warn")],
    );
    let client = measure::consumer(&group);
    measure::wait_committed(&client, input, ends, Duration::from_millis(20));
    let seconds = started.elapsed().as_secs_f64();
    let cpu_seconds = pg.cpu_seconds();
    let peak_rss_mb = pg.peak_rss_mb();
    pg.stop(Duration::from_secs(60));
    verify(&output, expected)
        .unwrap_or_else(|e| panic!("{}/{}/{}: {e}", combo.delivery, combo.emit, combo.interval));
    Measured {
        seconds,
        cpu_seconds,
        peak_rss_mb,
    }
}

/// Reads every record of `input` with a bare rdkafka consumer: the limit.
/// weir against its peers and the two limits, `rounds` times interleaved:
/// per system the median and range of words/s and CPU per word, and per
/// round the ratios that the targets are stated in (weir / best peer, weir
/// / bare consume-produce pipe), of which the median and range.
fn compare(args: CompareArgs) {
    let words = if args.quick { 1_000_000 } else { 10_000_000 };
    let records = words / WORDS_PER_RECORD;
    eprintln!("generating {words} words (Zipf over 100,000 distinct) in {records} records");
    let (lines, expected) = zipf_lines(42, records, WORDS_PER_RECORD, 100_000, 1.0);
    let (input, ends) = input_topic("compare-words", 4, &lines);
    drop(lines);
    let systems: Vec<System> = args
        .systems
        .split(',')
        .map(|n| System::parse(n).unwrap_or_else(|| panic!("unknown system {n}")))
        .collect();
    let mut rate: HashMap<String, Vec<f64>> = HashMap::new();
    let mut cpu: HashMap<String, Vec<f64>> = HashMap::new();
    let mut vs_peer = Vec::new();
    let mut vs_pipe = Vec::new();
    let mut rows = Vec::new();
    let per_m = words as f64 / 1e6;
    for round in 0..args.rounds {
        let mut this: HashMap<String, f64> = HashMap::new();
        let bare =
            limits::bare_consumer(&input, &ends, Duration::from_secs(10)) * WORDS_PER_RECORD as f64;
        eprintln!("round {round}: bare consumer {bare:.0} words/s");
        rate.entry("bare rdkafka consumer".into())
            .or_default()
            .push(bare);
        rows.push(
            json!({"round": round, "system": "bare rdkafka consumer", "words_per_second": bare}),
        );
        for (name, txn) in [
            ("bare pipe", false),
            ("bare pipe (transactional, 1 s)", true),
        ] {
            let out = unique("bench-pipe-out");
            create_topic(&out, 4);
            let run = limits::bare_pipe(&input, &ends, &out, txn);
            let wps = words as f64 / run.seconds;
            eprintln!(
                "round {round}: {name} {wps:.0} words/s, {} records out",
                run.records_out
            );
            rate.entry(name.into()).or_default().push(wps);
            cpu.entry(name.into())
                .or_default()
                .push(run.cpu_seconds / per_m);
            this.insert(name.into(), wps);
            rows.push(
                json!({"round": round, "system": name, "seconds": run.seconds,
                "words_per_second": wps, "cpu_seconds_per_million_words": run.cpu_seconds / per_m,
                "records_out": run.records_out}),
            );
        }
        for system in &systems {
            let dir = tempfile::tempdir().unwrap();
            let ctx = Ctx::new("cmp", &input, dir.path(), args.parallelism);
            eprintln!("round {round}: {}", system.name());
            match measure(system, &ctx, &ends, Duration::from_secs(1800)) {
                Ok(m) => {
                    let check = verify(&ctx.output, &expected);
                    let wps = words as f64 / m.seconds;
                    eprintln!(
                        "  {:.2}s, {wps:.0} words/s, {:.2} CPU-s per 1M words, {}",
                        m.seconds,
                        m.cpu_seconds / per_m,
                        check
                            .as_ref()
                            .map_or_else(|e| e.clone(), |_| "exact".into())
                    );
                    rows.push(json!({"round": round, "system": system.name(), "seconds": m.seconds,
                        "words_per_second": wps, "cpu_seconds_per_million_words": m.cpu_seconds / per_m,
                        "peak_rss_mb": m.peak_rss_mb,
                        "counts": check.clone().err().unwrap_or_else(|| "exact".into())}));
                    if check.is_ok() {
                        rate.entry(system.name()).or_default().push(wps);
                        cpu.entry(system.name())
                            .or_default()
                            .push(m.cpu_seconds / per_m);
                        this.insert(system.name(), wps);
                    }
                }
                Err(e) => {
                    eprintln!("  failed: {e}");
                    let log =
                        std::fs::read_to_string(dir.path().join("system.log")).unwrap_or_default();
                    eprintln!("{}", &log[log.len().saturating_sub(3000)..]);
                    rows.push(json!({ "round": round, "system": system.name(), "error": e }));
                }
            }
        }
        let best_peer = this
            .iter()
            .filter(|(n, _)| !n.starts_with("weir") && !n.starts_with("bare"))
            .map(|(_, r)| *r)
            .fold(0.0, f64::max);
        if let Some(w) = this.get("weir") {
            if best_peer > 0.0 {
                vs_peer.push(w / best_peer);
            }
            if let Some(pipe) = this.get("bare pipe (transactional, 1 s)") {
                vs_pipe.push(w / pipe);
            }
        }
    }
    println!(
        "| system | words/s median (min–max) | CPU-s per 1M words median (min–max) | rounds |"
    );
    println!("|---|---|---|---|");
    let mut names: Vec<&String> = rate.keys().collect();
    names.sort();
    for name in names {
        let r = &rate[name];
        let (rmin, rmax) = range(r);
        let c = cpu.get(name).map(|c| {
            let (cmin, cmax) = range(c);
            format!("{:.2} ({cmin:.2}–{cmax:.2})", median(c.clone()))
        });
        println!(
            "| {name} | {:.0} ({rmin:.0}–{rmax:.0}) | {} | {} |",
            median(r.clone()),
            c.unwrap_or_default(),
            r.len()
        );
    }
    for (what, v) in [
        ("weir / best peer", &vs_peer),
        ("weir / transactional bare pipe", &vs_pipe),
    ] {
        if !v.is_empty() {
            let (lo, hi) = range(v);
            println!(
                "\n{what}, words/s per round: median {:.2} ({lo:.2}–{hi:.2})",
                median(v.clone())
            );
        }
    }
    save(
        "compare",
        json!({ "machine": machine(), "words": words, "records": records, "partitions": 4,
                "parallelism": args.parallelism, "rounds": args.rounds, "results": rows,
                "weir_over_best_peer": vs_peer, "weir_over_transactional_pipe": vs_pipe }),
    );
}

/// weir's "first record read" log lines in `log`: the `since_start_ms` of each.
fn first_record_times(log: &Path) -> Vec<u64> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    log_field_values(&text, "first record read", "since_start_ms")
}

/// The step timings of weir's last "job running" line in `log` (the
/// restart's), by field name.
fn restart_steps(log: &Path) -> BTreeMap<&'static str, u64> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    [
        "fence_ms",
        "fence_and_side_restore_ms",
        "recover_ms",
        "verify_ms",
        "restore_ms",
        "since_start_ms",
    ]
    .into_iter()
    .filter_map(|field| {
        let last = *log_field_values(&text, "job running", field).last()?;
        Some((field, last))
    })
    .collect()
}

fn recovery(args: RecoveryArgs) {
    println!(
        "| system | keys | start to first record read (s) | start to first new commit (s) | restart steps, ms (fence / fence with the side restore / recover, of it verify / restore after the decision / job running at) | processed before kill |"
    );
    println!("|---|---|---|---|---|---|");
    let mut rows = Vec::new();
    for keys in args
        .keys
        .split(',')
        .map(|k| k.parse::<usize>().expect("keys"))
    {
        let lines = distinct_lines(keys, WORDS_PER_RECORD);
        let (input, ends) = input_topic("recovery-keys", 4, &lines);
        drop(lines);
        let total: i64 = ends.iter().map(|(_, e)| e).sum();
        for name in args.systems.split(',') {
            let system = System::parse(name).unwrap_or_else(|| panic!("unknown system {name}"));
            let tmp = tempfile::tempdir().unwrap();
            // WEIR_BENCH_KEEP=1 keeps the run's folder (logs included) to
            // read where the restart's time went.
            let (_tmp, dir) = if std::env::var_os("WEIR_BENCH_KEEP").is_some() {
                let kept = tmp.keep();
                eprintln!("keeping {}", kept.display());
                (None, kept)
            } else {
                let path = tmp.path().to_path_buf();
                (Some(tmp), path)
            };
            let ctx = Ctx::new("rec", &input, &dir, args.parallelism);
            let group = system.group(&ctx);
            let client = measure::consumer(&group);
            let mut pg = system.launch(&ctx, false);
            // Kill once most of the state is built and committed.
            let deadline = Instant::now() + Duration::from_secs(3600);
            let mut before = 0;
            while Instant::now() < deadline {
                before = measure::committed_total_with(&client, &ctx.input, &ends);
                if before >= total * 6 / 10 || pg.any_exited() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            pg.kill();
            if before >= total {
                eprintln!("{}: finished before the kill; skipped", system.name());
                continue;
            }
            let log = ctx.dir.join("system.log");
            let reads_before = first_record_times(&log).len();
            let started = Instant::now();
            let pg = system.launch(&ctx, true);
            let mut seconds = None;
            while started.elapsed() < Duration::from_secs(1800) {
                if measure::committed_total_with(&client, &ctx.input, &ends) > before {
                    seconds = Some(started.elapsed().as_secs_f64());
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            pg.kill();
            // weir logs when its first source subtask read a record, in
            // ms since its process started; the peers have no such line.
            let first_read = (matches!(system, System::Weir { .. }))
                .then(|| {
                    first_record_times(&log)
                        .get(reads_before..)
                        .and_then(|after| after.iter().min().copied())
                })
                .flatten()
                .map(|ms| ms as f64 / 1000.0);
            let shown = seconds.map_or("no new commit within 30 min".to_string(), |s| {
                format!("{s:.2}")
            });
            let shown_read = first_read.map_or("–".to_string(), |s| format!("{s:.3}"));
            // weir's "job running" line of the restart times each step.
            let steps = restart_steps(&log);
            let shown_steps = if steps.is_empty() {
                "–".to_string()
            } else {
                let at = |k: &str| steps.get(k).map_or("?".to_string(), u64::to_string);
                format!(
                    "{} / {} / {}, {} / {} / {}",
                    at("fence_ms"),
                    at("fence_and_side_restore_ms"),
                    at("recover_ms"),
                    at("verify_ms"),
                    at("restore_ms"),
                    at("since_start_ms")
                )
            };
            println!(
                "| {} | {keys} | {shown_read} | {shown} | {shown_steps} | {before} of {total} records |",
                system.name()
            );
            rows.push(
                json!({ "system": system.name(), "keys": keys, "seconds": seconds,
                        "first_record_read_seconds": first_read, "restart_steps_ms": steps,
                        "records_committed_before_kill": before, "records": total }),
            );
        }
    }
    save("recovery", json!({ "machine": machine(), "results": rows }));
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn checkpoint_cost(args: CostArgs) {
    println!(
        "| keys | checkpoints | duration p50 ms | duration p99 ms | alignment p50 ms | alignment p99 ms | snapshot pause p50 ms | snapshot pause p99 ms | state MB | peak RSS MB |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let mut rows = Vec::new();
    for keys in args
        .keys
        .split(',')
        .map(|k| k.parse::<usize>().expect("keys"))
    {
        let lines = distinct_lines(keys, WORDS_PER_RECORD);
        let (input, ends) = input_topic("cost-keys", 4, &lines);
        drop(lines);
        let dir = tempfile::tempdir().unwrap();
        let ctx = Ctx::new("cost", &input, dir.path(), args.parallelism);
        let system = System::Weir {
            emit: "every-update".into(),
        };
        let group = system.group(&ctx);
        let pg = system.launch(&ctx, false);
        let client = measure::consumer(&group);
        measure::wait_committed(&client, &input, &ends, Duration::from_millis(100));
        // A few more checkpoints with the full state in place.
        std::thread::sleep(Duration::from_secs(5));
        let addr = admin_addr(&ctx.dir.join("system.log"));
        let (_, body) = http(&addr, "GET", "/checkpoints", None);
        let peak_rss_mb = pg.peak_rss_mb();
        pg.stop(Duration::from_secs(60));
        // Where the time goes, from weir's own log (debug lines, with
        // WEIR_BENCH_LOG=weir=debug): the pause's copy of what changed,
        // the snapshot's asynchronous part (RocksDB checkpoint, changes
        // file, write-back), and the Coordinator's prepare and commit
        // steps.
        let log = std::fs::read_to_string(ctx.dir.join("system.log")).unwrap_or_default();
        for (message, field) in [
            ("state snapshot", "copy_us"),
            ("state snapshot", "changes"),
            ("state snapshot", "staged"),
            ("staged values applied", "apply_us"),
            ("state snapshot written", "checkpoint_us"),
            ("state snapshot written", "file_us"),
            ("sink drained before a snapshot", "commit_wait_us"),
            ("sink drained before a snapshot", "release_us"),
            ("chain checkpoint", "drain_us"),
            ("chain checkpoint", "forward_us"),
            ("chain checkpoint", "stores_us"),
            ("chain checkpoint", "flush_us"),
            ("task snapshot", "sync_ms"),
            ("task snapshot", "async_ms"),
            ("task snapshot", "alignment_ms"),
            ("checkpoint completed", "acks_ms"),
            ("checkpoint completed", "prepare_ms"),
            ("checkpoint completed", "commit_ms"),
            ("checkpoint completed", "duration_ms"),
        ] {
            let mut values = log_field_values(&log, message, field);
            if values.is_empty() {
                continue;
            }
            values.sort_unstable();
            eprintln!(
                "{message} {field}: p50 {} p90 {} p99 {} max {} (n = {})",
                percentile(&values, 0.5),
                percentile(&values, 0.9),
                percentile(&values, 0.99),
                values[values.len() - 1],
                values.len()
            );
        }
        let history: Vec<serde_json::Value> = serde_json::from_str(&body).unwrap();
        let done: Vec<&serde_json::Value> = history
            .iter()
            .filter(|c| c["status"] == "completed")
            .collect();
        let mut durations: Vec<u64> = done
            .iter()
            .map(|c| c["end_to_end_ms"].as_u64().unwrap())
            .collect();
        let mut pauses: Vec<u64> = done
            .iter()
            .map(|c| c["snapshot_ms"].as_u64().unwrap())
            .collect();
        let mut alignments: Vec<u64> = done
            .iter()
            .map(|c| c["alignment_ms"].as_u64().unwrap())
            .collect();
        durations.sort_unstable();
        pauses.sort_unstable();
        alignments.sort_unstable();
        let state_mb = done
            .last()
            .map_or(0.0, |c| c["state_size_bytes"].as_f64().unwrap() / 1e6);
        println!(
            "| {keys} | {} | {} | {} | {} | {} | {} | {} | {state_mb:.0} | {peak_rss_mb:.0} |",
            done.len(),
            percentile(&durations, 0.5),
            percentile(&durations, 0.99),
            percentile(&alignments, 0.5),
            percentile(&alignments, 0.99),
            percentile(&pauses, 0.5),
            percentile(&pauses, 0.99),
        );
        rows.push(
            json!({ "keys": keys, "checkpoints": done.len(), "duration_ms": durations,
                          "alignment_ms": alignments, "snapshot_ms": pauses, "state_mb": state_mb,
                          "peak_rss_mb": peak_rss_mb }),
        );
    }
    save(
        "checkpoint-cost",
        json!({ "machine": machine(), "results": rows }),
    );
}

/// The values of `field=<integer>` on the log lines carrying `message`.
fn log_field_values(log: &str, message: &str, field: &str) -> Vec<u64> {
    let key = format!(" {field}=");
    log.lines()
        .filter(|l| l.contains(message))
        .filter_map(|l| {
            let at = l.find(&key)? + key.len();
            let digits: String = l[at..].chars().take_while(|c| c.is_ascii_digit()).collect();
            digits.parse().ok()
        })
        .collect()
}

fn admin_addr(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    weir_testkit::admin_addr_in(&text)
        .unwrap_or_else(|| panic!("no admin endpoint in {}", log.display()))
}

const WINDOW_MS: i64 = 10_000;

/// Expected count per (key, window start).
type WindowCounts = HashMap<(String, i64), u64>;

/// Events for the windowed workload: per partition, event time advances
/// 1 ms per event with up to 3 s of disorder (inside the 5 s bound, so
/// nothing is late), uniform keys, starting an hour ago (the broker keeps
/// records by timestamp and refuses ones far in the future). Returns the
/// lines, the expected count per (key, window start), the event-time span
/// and the last event time.
fn windowed_events(
    events: usize,
    keys: u64,
    partitions: usize,
) -> (Vec<String>, WindowCounts, i64, i64) {
    let now = weir::observe::now_ms() as i64;
    let t0 = now - 3_600_000 - (now - 3_600_000).rem_euclid(WINDOW_MS);
    let mut rng = weir_testkit::Rng::new(99);
    let mut lines = Vec::with_capacity(events + partitions);
    let mut expected = HashMap::new();
    let per = events / partitions;
    let mut last = t0;
    for i in 0..per {
        for _ in 0..partitions {
            let ts = t0 + i as i64 - rng.below(3_000) as i64;
            last = last.max(ts);
            let key = format!("k{:06}", rng.below(keys));
            lines.push(format!(r#"{{"key":"{key}","ts":{ts},"amount":1}}"#));
            let start = ts - ts.rem_euclid(WINDOW_MS);
            *expected.entry((key, start)).or_insert(0) += 1;
        }
    }
    (lines, expected, last - t0 + 3_000, last)
}

/// Flush events, produced once a system has read all input, far enough
/// ahead that every window closes, in every partition and (for Kafka
/// Streams, whose time is per task) under keys that its murmur2
/// partitioner spreads over all four repartition partitions.
fn flush_lines(after: i64) -> Vec<String> {
    let mut lines = Vec::new();
    for key in ["__flush__0", "__flush__1", "__flush__4", "__flush__6"] {
        for _ in 0..4 {
            lines.push(format!(r#"{{"key":"{key}","ts":{after},"amount":1}}"#));
        }
    }
    lines
}

/// Runs a windowed system: start, wait until its group committed the
/// input, produce the flush events, wait until the output settles. Time
/// and CPU are those of the last output write.
fn measure_windowed(
    system: &System,
    ctx: &Ctx,
    ends: &[(i32, i64)],
    flush: &[String],
    results: i64,
    timeout: Duration,
) -> Result<Measured, String> {
    let group = system.group(ctx);
    let started = Instant::now();
    let mut pg = system.launch(ctx, false);
    let client = measure::consumer(&group);
    let total: i64 = ends.iter().map(|(_, e)| e).sum();
    let mut flushed = false;
    let mut last_end = -1i64;
    let mut last_change = Instant::now();
    let mut cpu_at_change = 0.0;
    loop {
        if !flushed && measure::committed_total_with(&client, &ctx.input, ends) >= total {
            produce(&ctx.input, 4, flush);
            flushed = true;
        }
        let end: i64 = measure::end_offsets_with(&client, &ctx.output)
            .iter()
            .map(|(_, e)| e)
            .sum();
        if end != last_end {
            last_end = end;
            last_change = Instant::now();
            cpu_at_change = pg.cpu_seconds();
        }
        // Kafka Streams commits its input long before its windows close
        // and emits in bursts: the output must also hold every result.
        if flushed && end >= results && last_change.elapsed() >= SETTLE {
            break;
        }
        // A system that lost results never reaches the count; a minute
        // without output after the flush ends its run, and the check that
        // follows reports what is missing.
        if flushed && last_change.elapsed() >= Duration::from_secs(60) {
            break;
        }
        if pg.any_exited() {
            pg.kill();
            return Err(format!("{} exited early", system.name()));
        }
        if started.elapsed() > timeout {
            pg.kill();
            return Err(format!(
                "{} did not finish within {timeout:?}",
                system.name()
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let seconds = last_change.duration_since(started).as_secs_f64();
    let peak_rss_mb = pg.peak_rss_mb();
    pg.stop(Duration::from_secs(60));
    Ok(Measured {
        seconds,
        cpu_seconds: cpu_at_change,
        peak_rss_mb,
    })
}

/// Checks a windowed output against the expected counts: exactly one
/// result per (key, window), each equal; the flush key is ignored.
fn verify_windows(output: &str, expected: &HashMap<(String, i64), u64>) -> Result<(), String> {
    // The system has stopped: everything it committed is there; read
    // until nothing more comes.
    let records = weir_testkit::read_topic(
        output,
        weir_testkit::Isolation::Committed,
        Duration::from_secs(300),
        Duration::from_secs(3),
        |_| true,
    );
    let mut seen: HashMap<(String, i64), u64> = HashMap::new();
    let mut duplicates = 0;
    for r in &records {
        let v: serde_json::Value = serde_json::from_str(r.value.as_deref().unwrap_or("null"))
            .map_err(|e| format!("output is not JSON: {e}"))?;
        let key = v["key"].as_str().unwrap_or_default().to_string();
        if key.starts_with("__flush__") {
            continue;
        }
        let start = v["window_start"]
            .as_str()
            .and_then(|s| s.parse::<jiff::Timestamp>().ok())
            .map(|t| t.as_millisecond())
            .ok_or_else(|| format!("bad window_start in {v}"))?;
        let count = v["count"]
            .as_u64()
            .ok_or_else(|| format!("no count in {v}"))?;
        if seen.insert((key, start), count).is_some() {
            duplicates += 1;
        }
    }
    let wrong = expected
        .iter()
        .filter(|(k, n)| seen.get(*k) != Some(n))
        .count();
    let extra = seen.keys().filter(|k| !expected.contains_key(*k)).count();
    if duplicates + wrong + extra == 0 {
        Ok(())
    } else {
        Err(format!(
            "{wrong} of {} windows wrong or missing, {extra} unexpected, {duplicates} duplicates",
            expected.len()
        ))
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn range(v: &[f64]) -> (f64, f64) {
    let min = v.iter().cloned().fold(f64::INFINITY, f64::min);
    let max = v.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    (min, max)
}

/// The windowed comparison: every system once per round, rounds
/// interleaved; medians with min–max, and weir's ratio to the best peer
/// computed per round.
fn windowed(args: WindowedArgs) {
    let (lines, expected, span, last) = windowed_events(args.events, args.keys, 4);
    // Kafka Streams closes windows by stream time, the largest timestamp
    // any partition of a task has shown; on a backlog the partitions are
    // read unevenly, so its grace must cover the whole event-time span or
    // it drops events of slower partitions as late.
    let grace_ms = span + 10_000;
    let flush = flush_lines(last + grace_ms + 20_000);
    eprintln!(
        "{} events, {} keys, {} (key, window) results expected",
        args.events,
        args.keys,
        expected.len()
    );
    // Each run gets its own copy of the input: the flush events a run
    // appends would otherwise sit inside the next run's input, and Kafka
    // Streams, whose stream time is the maximum over partitions, would
    // drop as late every event it reads after one of them.
    let systems: Vec<System> = args
        .systems
        .split(',')
        .map(|n| System::parse(n).unwrap_or_else(|| panic!("unknown system {n}")))
        .collect();
    let mut eps: HashMap<String, Vec<f64>> = HashMap::new();
    let mut cpu: HashMap<String, Vec<f64>> = HashMap::new();
    let mut ratios = Vec::new();
    let mut rows = Vec::new();
    for round in 0..args.rounds {
        let mut this_round: HashMap<String, f64> = HashMap::new();
        for system in &systems {
            let (input, ends) = input_topic("windowed-events", 4, &lines);
            let dir = tempfile::tempdir().unwrap();
            let mut ctx = Ctx::new("win", &input, dir.path(), args.parallelism);
            ctx.grace_ms = Some(grace_ms);
            eprintln!("round {round}: {}", system.name());
            match measure_windowed(
                system,
                &ctx,
                &ends,
                &flush,
                expected.len() as i64,
                Duration::from_secs(1800),
            ) {
                Ok(m) => {
                    let check = verify_windows(&ctx.output, &expected);
                    let rate = args.events as f64 / m.seconds;
                    let cpu_us = m.cpu_seconds / args.events as f64 * 1e6;
                    eprintln!(
                        "  {:.2}s, {rate:.0} events/s, {cpu_us:.2} CPU-µs/event, {:.0} MB, {}",
                        m.seconds,
                        m.peak_rss_mb,
                        check
                            .as_ref()
                            .map_or_else(|e| e.clone(), |_| "exact".into())
                    );
                    rows.push(json!({"round": round, "system": system.name(), "seconds": m.seconds,
                        "events_per_second": rate, "cpu_us_per_event": cpu_us, "peak_rss_mb": m.peak_rss_mb,
                        "check": check.clone().err().unwrap_or_else(|| "exact".into())}));
                    if check.is_ok() {
                        eps.entry(system.name()).or_default().push(rate);
                        cpu.entry(system.name()).or_default().push(cpu_us);
                        this_round.insert(system.name(), rate);
                    }
                }
                Err(e) => {
                    eprintln!("  failed: {e}");
                    rows.push(json!({"round": round, "system": system.name(), "error": e}));
                }
            }
        }
        let best_peer = this_round
            .iter()
            .filter(|(n, _)| n.as_str() != "weir")
            .map(|(_, r)| *r)
            .fold(0.0, f64::max);
        if let (Some(w), true) = (this_round.get("weir"), best_peer > 0.0) {
            ratios.push(w / best_peer);
        }
    }
    println!(
        "| system | events/s median (min–max) | CPU-µs per event median (min–max) | rounds exact |"
    );
    println!("|---|---|---|---|");
    for system in &systems {
        let name = system.name();
        let (Some(r), Some(c)) = (eps.get(&name), cpu.get(&name)) else {
            println!("| {name} | failed | | 0 |");
            continue;
        };
        let (rmin, rmax) = range(r);
        let (cmin, cmax) = range(c);
        println!(
            "| {name} | {:.0} ({rmin:.0}–{rmax:.0}) | {:.2} ({cmin:.2}–{cmax:.2}) | {} of {} |",
            median(r.clone()),
            median(c.clone()),
            r.len(),
            args.rounds
        );
    }
    if !ratios.is_empty() {
        let (lo, hi) = range(&ratios);
        println!(
            "\nweir / best peer, events/s, per round: median {:.2}× ({lo:.2}–{hi:.2}×)",
            median(ratios.clone())
        );
    }
    save(
        "windowed",
        json!({"machine": machine(), "events": args.events, "keys": args.keys, "partitions": 4,
               "parallelism": args.parallelism, "rounds": args.rounds, "results": rows, "ratios": ratios}),
    );
}
