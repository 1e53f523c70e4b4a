//! Word-count benchmark against the local broker: throughput and CPU cost
//! of the real `weir` binary, end to end.
//!
//! It writes the input once, starts `weir run` (the binary next to this one,
//! so build both with `--release`), and stops the clock when the consumer
//! group's committed offsets reach the end of the input: with exactly-once
//! delivery that is the moment the committed output reflects all input;
//! with at-least-once it is the checkpoint after it. CPU time and peak RSS
//! are read from /proc for the weir process alone. Then it checks the final
//! counts with an independent reader, so no configuration is timed doing
//! less work.
//!
//!   cargo build --release --bins && target/release/weir-bench --words 1000000
//!   target/release/weir-bench --matrix      # issue #3's table

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use clap::Parser;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use weir::testkit::{
    bootstrap, create_topic, last_counts, produce, read_topic, unique, word_lines, Isolation,
    JobSpec, WeirProcess,
};

#[derive(Debug, Parser)]
#[command(about = "weir word-count benchmark against the local Kafka broker")]
struct Args {
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
    /// Run every combination of delivery × emit × interval (1s, 100ms).
    #[arg(long)]
    matrix: bool,
    /// Skip checking the final counts.
    #[arg(long)]
    no_verify: bool,
}

struct Figures {
    seconds: f64,
    cpu_seconds: f64,
    peak_rss_mb: f64,
    checkpoints: usize,
}

const WORDS_PER_RECORD: usize = 10;

fn main() {
    let args = Args::parse();
    let weir_bin = std::env::current_exe().unwrap().with_file_name("weir");
    assert!(
        weir_bin.exists(),
        "{} not found: cargo build --release --bins",
        weir_bin.display()
    );
    let records = args.words / WORDS_PER_RECORD;
    eprintln!(
        "generating {} words in {records} records ({} distinct at most)",
        args.words, args.vocabulary
    );
    let (lines, expected) = word_lines(7, records, WORDS_PER_RECORD, args.vocabulary);
    let input = unique("bench-words");
    create_topic(&input, args.partitions);
    let t = Instant::now();
    produce(&input, args.partitions, &lines);
    eprintln!(
        "input written in {:.1}s to {input}",
        t.elapsed().as_secs_f64()
    );
    drop(lines);

    let combos: Vec<(String, String, String)> = if args.matrix {
        let mut v = Vec::new();
        for d in ["exactly-once", "at-least-once"] {
            for e in ["every-update", "on-checkpoint"] {
                for i in ["1s", "100ms"] {
                    v.push((d.to_string(), e.to_string(), i.to_string()));
                }
            }
        }
        v
    } else {
        vec![(
            args.delivery.clone(),
            args.emit.clone(),
            args.interval.clone(),
        )]
    };
    println!(
        "| delivery | emit | interval | words | seconds | words/s | records/s | CPU-s per 1M words | CPU-s per 1M records | peak RSS MB | checkpoints |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for (delivery, emit, interval) in combos {
        let f = run_one(
            &args, &weir_bin, &input, &expected, &delivery, &emit, &interval,
        );
        let words = args.words as f64;
        println!(
            "| {delivery} | {emit} | {interval} | {} | {:.2} | {:.0} | {:.0} | {:.2} | {:.2} | {:.0} | {} |",
            args.words,
            f.seconds,
            words / f.seconds,
            records as f64 / f.seconds,
            f.cpu_seconds / (words / 1e6),
            f.cpu_seconds / (records as f64 / 1e6),
            f.peak_rss_mb,
            f.checkpoints,
        );
    }
}

fn run_one(
    args: &Args,
    weir_bin: &Path,
    input: &str,
    expected: &HashMap<String, u64>,
    delivery: &str,
    emit: &str,
    interval: &str,
) -> Figures {
    let dir = tempfile::tempdir().unwrap();
    let output = unique("bench-counts");
    create_topic(&output, args.partitions);
    let spec = JobSpec {
        parallelism: args.parallelism,
        delivery: delivery.into(),
        emit: emit.into(),
        interval: interval.into(),
        ..JobSpec::word_count(dir.path(), input, &output)
    };
    let config = spec.write();
    let group = format!("weir-{}-{}", spec.name, output);
    let ends = end_offsets(input);
    let started = Instant::now();
    let mut weir = WeirProcess::start(
        weir_bin,
        &config,
        &[("RUST_LOG", "warn,weir::runtime::coordinator=info")],
    );
    let pid = weir.pid();
    loop {
        if committed(&group, input, &ends) {
            break;
        }
        if let Ok(Some(s)) = weir.child.try_wait() {
            panic!("weir exited early ({s:?}): {}", weir.log_text());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let seconds = started.elapsed().as_secs_f64();
    let cpu_seconds = cpu_seconds(pid);
    let peak_rss_mb = peak_rss_kb(pid) / 1024.0;
    weir.stop(Duration::from_secs(120));
    let checkpoints = weir.log_text().matches("checkpoint completed").count();
    if !args.no_verify {
        let got = last_counts(&read_topic(
            &output,
            Isolation::Committed,
            Duration::from_secs(600),
            Duration::from_secs(2),
            |r| last_counts(r) == *expected,
        ));
        assert!(
            got == *expected,
            "{delivery}/{emit}/{interval}: final counts differ from the input's"
        );
    }
    Figures {
        seconds,
        cpu_seconds,
        peak_rss_mb,
        checkpoints,
    }
}

fn consumer(group: &str) -> BaseConsumer {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer")
}

fn end_offsets(topic: &str) -> Vec<(i32, i64)> {
    let c = consumer(&unique("bench-probe"));
    let md = c
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .unwrap();
    md.topics()[0]
        .partitions()
        .iter()
        .map(|p| {
            (
                p.id(),
                c.fetch_watermarks(topic, p.id(), Duration::from_secs(10))
                    .unwrap()
                    .1,
            )
        })
        .collect()
}

/// Whether the group's committed offsets reached `ends` on every partition.
fn committed(group: &str, topic: &str, ends: &[(i32, i64)]) -> bool {
    let c = consumer(group);
    let mut tpl = TopicPartitionList::new();
    for (p, _) in ends {
        tpl.add_partition(topic, *p);
    }
    let Ok(got) = c.committed_offsets(tpl, Duration::from_secs(5)) else {
        return false;
    };
    ends.iter().all(|(p, end)| {
        matches!(got.find_partition(topic, *p).map(|e| e.offset()), Some(Offset::Offset(o)) if o >= *end)
    })
}

fn proc_stat(pid: i32) -> Vec<String> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name, which is in parentheses.
    let after = s.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    after.split_whitespace().map(String::from).collect()
}

fn cpu_seconds(pid: i32) -> f64 {
    let f = proc_stat(pid);
    // utime and stime are fields 14 and 15 (1-based), i.e. 11 and 12 after ')'.
    let ticks: f64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0.0)
        + f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0.0);
    // SAFETY: sysconf has no memory-safety preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    ticks / hz
}

fn peak_rss_kb(pid: i32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0)
}
