//! Interactive queries under load (issue #12): the same word count with and
//! without `--rate` queries per second on `GET /state/word-count/<key>`,
//! rounds interleaved. Reports words/s and weir's CPU per word for each,
//! and the queries' achieved rate and latency.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use weir_testkit::{create_topic, http, unique, word_lines, JobSpec, Rng};

use crate::measure::{self, ProcessGroup};
use crate::systems::{weir_binary, weir_run};
use crate::{input_topic, machine, median, range, save, WORDS_PER_RECORD};

/// Threads sharing the query rate: one blocking connection per request, so
/// a slow answer does not hold the others back.
const QUERY_THREADS: u32 = 4;

/// What the query threads saw during one run.
#[derive(Default)]
struct QueryStats {
    latencies_us: Vec<u64>,
    /// Answers other than 200 and 404, by status.
    errors: std::collections::BTreeMap<u16, u64>,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Sends `rate` queries per second in all, paced, until `stop`.
fn query_threads(
    addr: String,
    rate: u32,
    vocabulary: u64,
    stop: Arc<AtomicBool>,
    stats: Arc<Mutex<QueryStats>>,
) -> Vec<std::thread::JoinHandle<()>> {
    (0..QUERY_THREADS)
        .map(|t| {
            let (addr, stop, stats) = (addr.clone(), stop.clone(), stats.clone());
            std::thread::spawn(move || {
                let period = Duration::from_secs_f64(f64::from(QUERY_THREADS) / f64::from(rate));
                let mut rng = Rng::new(u64::from(t) + 1);
                let mut next = Instant::now();
                while !stop.load(Ordering::Relaxed) {
                    let word = format!("w{}", rng.below(vocabulary));
                    let sent = Instant::now();
                    let (status, _) =
                        http(&addr, "GET", &format!("/state/word-count/{word}"), None);
                    let us = sent.elapsed().as_micros() as u64;
                    let mut s = stats.lock().unwrap();
                    // 404 is an answer too: the word was not read yet.
                    if status == 200 || status == 404 {
                        s.latencies_us.push(us);
                    } else {
                        *s.errors.entry(status).or_insert(0) += 1;
                    }
                    drop(s);
                    next += period;
                    if let Some(wait) = next.checked_duration_since(Instant::now()) {
                        std::thread::sleep(wait);
                    }
                }
            })
        })
        .collect()
}

struct Run {
    seconds: f64,
    cpu_seconds: f64,
    queries: usize,
    /// How long the queries ran (from the job's readiness to the end).
    query_seconds: f64,
    errors: String,
    p50_ms: f64,
    p99_ms: f64,
}

fn run_once(
    input: &str,
    ends: &[(i32, i64)],
    expected: &HashMap<String, u64>,
    rate: u32,
    vocabulary: u64,
) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let output = unique("bench-query-counts");
    create_topic(&output, 4);
    let addr = format!("127.0.0.1:{}", free_port());
    let spec = JobSpec {
        delivery: "exactly-once".into(),
        interval: "1s".into(),
        admin_listen: addr.clone(),
        ..JobSpec::word_count(dir.path(), input, &output)
    };
    let config = spec.write();
    let group = format!("weir-{}-{}", spec.name, output);
    let started = Instant::now();
    let argv = weir_run(&weir_binary(), &config);
    let pg = ProcessGroup::start(
        &[argv],
        &dir.path().join("weir.log"),
        &[("RUST_LOG", "warn")],
    );
    let stop = Arc::new(AtomicBool::new(false));
    let stats = Arc::new(Mutex::new(QueryStats::default()));
    let mut threads = Vec::new();
    if rate > 0 {
        // Queries start once the job runs (before, they are 503 by design).
        while std::net::TcpStream::connect(&addr).is_err()
            || http(&addr, "GET", "/ready", None).0 != 200
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        threads = query_threads(addr.clone(), rate, vocabulary, stop.clone(), stats.clone());
    }
    let queries_started = Instant::now();
    let client = measure::consumer(&group);
    measure::wait_committed(&client, input, ends, Duration::from_millis(20));
    let seconds = started.elapsed().as_secs_f64();
    let cpu_seconds = pg.cpu_seconds();
    let query_seconds = queries_started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().unwrap();
    }
    pg.stop(Duration::from_secs(60));
    measure::verify(&output, expected).unwrap_or_else(|e| panic!("rate {rate}: {e}"));
    let mut s = stats.lock().unwrap();
    s.latencies_us.sort_unstable();
    let pct = |p: f64| {
        s.latencies_us
            .get(
                ((s.latencies_us.len() as f64 * p) as usize)
                    .min(s.latencies_us.len().saturating_sub(1)),
            )
            .map_or(0.0, |us| *us as f64 / 1000.0)
    };
    Run {
        seconds,
        cpu_seconds,
        queries: s.latencies_us.len(),
        query_seconds,
        errors: if s.errors.is_empty() {
            "0".into()
        } else {
            format!("{:?}", s.errors)
        },
        p50_ms: pct(0.5),
        p99_ms: pct(0.99),
    }
}

/// `weir-bench query-load`.
pub fn query_load(words: usize, rates: &[u32], rounds: usize) {
    let vocabulary = 100_000;
    let records = words / WORDS_PER_RECORD;
    let (lines, expected) = word_lines(11, records, WORDS_PER_RECORD, vocabulary);
    let (input, ends) = input_topic("bench-query-words", 4, &lines);
    drop(lines);
    println!("| round | queries/s asked | words/s | CPU-s per 1M words | queries answered | achieved/s | errors | p50 ms | p99 ms |");
    println!("|---|---|---|---|---|---|---|---|---|");
    let mut rates_seen: Vec<Vec<f64>> = vec![Vec::new(); rates.len()];
    let mut cpus: Vec<Vec<f64>> = vec![Vec::new(); rates.len()];
    let mut results = Vec::new();
    for round in 0..rounds {
        for (i, &rate) in rates.iter().enumerate() {
            let r = run_once(&input, &ends, &expected, rate, vocabulary);
            let wps = words as f64 / r.seconds;
            let cpu = r.cpu_seconds / (words as f64 / 1e6);
            println!(
                "| {round} | {rate} | {wps:.0} | {cpu:.2} | {} | {:.0} | {} | {:.2} | {:.2} |",
                r.queries,
                r.queries as f64 / r.query_seconds.max(1e-9),
                r.errors,
                r.p50_ms,
                r.p99_ms
            );
            rates_seen[i].push(wps);
            cpus[i].push(cpu);
            results.push(json!({
                "round": round, "rate": rate, "words": words, "seconds": r.seconds,
                "cpu_seconds": r.cpu_seconds, "queries": r.queries, "errors": r.errors,
                "p50_ms": r.p50_ms, "p99_ms": r.p99_ms,
            }));
        }
    }
    println!(
        "\n| queries/s asked | words/s median (min–max) | CPU-s per 1M words median (min–max) |"
    );
    println!("|---|---|---|");
    for (i, rate) in rates.iter().enumerate() {
        let (lo, hi) = range(&rates_seen[i]);
        let (clo, chi) = range(&cpus[i]);
        println!(
            "| {rate} | {:.0} ({lo:.0}–{hi:.0}) | {:.2} ({clo:.2}–{chi:.2}) |",
            median(rates_seen[i].clone()),
            median(cpus[i].clone())
        );
    }
    if rates.len() >= 2 {
        let per_round: Vec<f64> = rates_seen[1]
            .iter()
            .zip(&rates_seen[0])
            .map(|(with, without)| with / without)
            .collect();
        let (lo, hi) = range(&per_round);
        println!(
            "words/s with {} queries/s / without: median {:.3} ({lo:.3}–{hi:.3}) over {rounds} rounds",
            rates[1],
            median(per_round.clone())
        );
    }
    save(
        "weir-query-load",
        json!({ "machine": machine(), "rounds": rounds, "results": results }),
    );
}
