//! Measuring a system under test from outside: its processes' CPU time and
//! peak memory from /proc, and its progress from the consumer group's
//! committed offsets, which every exactly-once system here commits together
//! with its output.

use std::collections::HashMap;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use weir_testkit::{bootstrap, last_counts, read_topic, unique, Isolation};

/// A system's processes, started in their own process group so that CPU,
/// memory and signals cover all of them (JVM threads, Python workers).
pub struct ProcessGroup {
    pub children: Vec<Child>,
    pub pgid: i32,
}

impl ProcessGroup {
    /// Starts `commands` (each argv) in one new process group, output to `log`.
    pub fn start(commands: &[Vec<String>], log: &std::path::Path, env: &[(&str, &str)]) -> Self {
        let mut children = Vec::new();
        let mut pgid = 0;
        for argv in commands {
            let out = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(log)
                .unwrap();
            let mut cmd = Command::new(&argv[0]);
            cmd.args(&argv[1..])
                .stdout(Stdio::from(out.try_clone().unwrap()))
                .stderr(Stdio::from(out))
                .process_group(pgid);
            for (k, v) in env {
                cmd.env(k, v);
            }
            let child = cmd
                .spawn()
                .unwrap_or_else(|e| panic!("start {argv:?}: {e}"));
            if pgid == 0 {
                pgid = child.id() as i32;
            }
            children.push(child);
        }
        Self { children, pgid }
    }

    fn members(&self) -> Vec<i32> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let f = stat_fields(pid);
            // Field 5 (pgrp) is index 2 after the command name.
            if f.get(2).and_then(|v| v.parse::<i32>().ok()) == Some(self.pgid) {
                out.push(pid);
            }
        }
        out
    }

    /// User + system CPU seconds of every live process of the group,
    /// including children they have reaped.
    pub fn cpu_seconds(&self) -> f64 {
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        self.members()
            .iter()
            .map(|pid| {
                let f = stat_fields(*pid);
                (11..=14)
                    .map(|i| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0))
                    .sum::<f64>()
            })
            .sum::<f64>()
            / hz
    }

    /// Sum of the peak resident set sizes, in MiB.
    pub fn peak_rss_mb(&self) -> f64 {
        self.members()
            .iter()
            .map(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/status"))
                    .unwrap_or_default()
                    .lines()
                    .find_map(|l| l.strip_prefix("VmHWM:"))
                    .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
                    .unwrap_or(0.0)
            })
            .sum::<f64>()
            / 1024.0
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: signalling our own process group.
        unsafe {
            libc::killpg(self.pgid, sig);
        }
    }

    /// Whether any process of the group has exited.
    pub fn any_exited(&mut self) -> bool {
        self.children
            .iter_mut()
            .any(|c| matches!(c.try_wait(), Ok(Some(_))))
    }

    /// SIGTERM, wait up to `timeout`, then SIGKILL.
    pub fn stop(mut self, timeout: Duration) {
        self.signal(libc::SIGTERM);
        let until = Instant::now() + timeout;
        while Instant::now() < until {
            if self
                .children
                .iter_mut()
                .all(|c| matches!(c.try_wait(), Ok(Some(_))))
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        self.kill();
    }

    pub fn kill(mut self) {
        self.signal(libc::SIGKILL);
        for c in &mut self.children {
            let _ = c.wait();
        }
    }
}

/// User + system CPU seconds of the local Kafka broker (the process
/// running `kafka.Kafka`), or None when none is found: the share of a
/// run's work the broker does, which a system's own CPU does not show.
pub fn broker_cpu_seconds() -> Option<f64> {
    let pid = std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: i32 = e.file_name().to_str()?.parse().ok()?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        cmdline
            .split(|b| *b == 0)
            .any(|arg| arg == b"kafka.Kafka")
            .then_some(pid)
    })?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let f = stat_fields(pid);
    let ticks: f64 = (11..=12)
        .map(|i| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0))
        .sum();
    Some(ticks / hz)
}

fn stat_fields(pid: i32) -> Vec<String> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    s.rsplit_once(')')
        .map(|(_, r)| r.split_whitespace().map(String::from).collect())
        .unwrap_or_default()
}

/// A client of `group`, for reading its offsets and topics' watermarks.
/// Made once per run: a client per poll would cost the machine more than
/// the polling.
pub fn consumer(group: &str) -> BaseConsumer {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer")
}

/// End offsets of every partition of `topic`.
pub fn end_offsets(topic: &str) -> Vec<(i32, i64)> {
    end_offsets_with(&consumer(&unique("bench-probe")), topic)
}

/// As [`end_offsets`], with an existing client.
pub fn end_offsets_with(c: &BaseConsumer, topic: &str) -> Vec<(i32, i64)> {
    let md = c
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .unwrap();
    md.topics()[0]
        .partitions()
        .iter()
        .map(|p| {
            // A topic created a moment ago may not have its leaders yet
            // ("not leader for partition"): asked again, it has.
            let mut tries = 0;
            let high = loop {
                match c.fetch_watermarks(topic, p.id(), Duration::from_secs(10)) {
                    Ok((_, high)) => break high,
                    Err(e) if tries < 20 => {
                        tries += 1;
                        eprintln!("end offset of {topic}/{}: {e}; asking again", p.id());
                        std::thread::sleep(Duration::from_millis(250));
                    }
                    Err(e) => panic!("end offset of {topic}/{}: {e}", p.id()),
                }
            };
            (p.id(), high)
        })
        .collect()
}

/// Sum of the group's committed offsets on `topic` (0 where none), read
/// with a client of the group.
pub fn committed_total_with(c: &BaseConsumer, topic: &str, ends: &[(i32, i64)]) -> i64 {
    let mut tpl = TopicPartitionList::new();
    for (p, _) in ends {
        tpl.add_partition(topic, *p);
    }
    let Ok(got) = c.committed_offsets(tpl, Duration::from_secs(5)) else {
        return 0;
    };
    ends.iter()
        .map(
            |(p, _)| match got.find_partition(topic, *p).map(|e| e.offset()) {
                Some(Offset::Offset(o)) => o,
                _ => 0,
            },
        )
        .sum()
}

/// Waits, asking every `poll`, until the group of `c` has committed the
/// end offsets `ends` of `topic`: the input is done.
pub fn wait_committed(c: &BaseConsumer, topic: &str, ends: &[(i32, i64)], poll: Duration) {
    let total: i64 = ends.iter().map(|(_, e)| e).sum();
    while committed_total_with(c, topic, ends) < total {
        std::thread::sleep(poll);
    }
}

/// Reads `output` with read_committed and checks every final count.
pub fn verify(output: &str, expected: &HashMap<String, u64>) -> Result<(), String> {
    let got = last_counts(&read_topic(
        output,
        Isolation::Committed,
        Duration::from_secs(900),
        Duration::from_secs(3),
        |r| last_counts(r) == *expected,
    ));
    if got == *expected {
        return Ok(());
    }
    let wrong = expected
        .iter()
        .filter(|(w, n)| got.get(*w) != Some(n))
        .count();
    Err(format!(
        "{wrong} of {} words have wrong final counts",
        expected.len()
    ))
}
