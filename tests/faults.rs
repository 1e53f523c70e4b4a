//! Fault tests (issue #8) of the real `weir` binary against the real broker:
//! a checkpoint volume that fills up, a damaged newest checkpoint, an
//! instance frozen (SIGSTOP) past its transaction timeout with and without a
//! replacement, and every combination of checkpoint mode, delivery and
//! emission under SIGKILLs. Output is always read by an independent
//! consumer (testkit's `read_topic`), never through weir's own code.
//!
//! The tests of this file run one at a time (see [`serial`]): several of
//! them depend on timing (a transaction timeout, a restart budget) that a
//! two-core machine running five weir processes at once would blur.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use weir_testkit::{
    assert_multiset, bootstrap, distinct_lines, http, last_counts, log_tail, produce, producer,
    read_topic, send_chunk, topic_pair, unique, word_lines, Isolation, JobSpec, OutRecord, Rng,
    WeirProcess,
};

const WEIR: &str = env!("CARGO_BIN_EXE_weir");

fn weir() -> &'static Path {
    Path::new(WEIR)
}

fn tail(log: &str) -> &str {
    log_tail(log)
}

/// The first `n` lines of a log, for assertion messages.
fn head(log: &str, n: usize) -> String {
    log.lines().take(n).collect::<Vec<_>>().join("\n")
}

/// One test of this file at a time.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn seed() -> u64 {
    let s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    eprintln!("random seed {s}");
    s
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

fn source_records_in(addr: &str) -> f64 {
    weir_testkit::metric_sample(
        &http(addr, "GET", "/metrics", None).1,
        "weir_records_in_total{operator=\"kafka-source\"}",
    )
    .unwrap_or(0.0)
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

// ---------------------------------------------------------------------------
// Output checks
// ---------------------------------------------------------------------------

/// Each word's counts in output order.
fn sequences(records: &[OutRecord]) -> HashMap<String, Vec<u64>> {
    let mut seqs: HashMap<String, Vec<u64>> = HashMap::new();
    for r in records {
        seqs.entry(r.key.clone().expect("output has a key"))
            .or_default()
            .push(r.count());
    }
    seqs
}

fn max_counts(records: &[OutRecord]) -> HashMap<String, u64> {
    let mut max: HashMap<String, u64> = HashMap::new();
    for r in records {
        let m = max
            .entry(r.key.clone().expect("output has a key"))
            .or_insert(0);
        *m = (*m).max(r.count());
    }
    max
}

/// Reads committed output until every word's last count is the expected one.
fn read_committed_until_exact(
    output: &str,
    expected: &HashMap<String, u64>,
    timeout: Duration,
) -> Vec<OutRecord> {
    read_topic(
        output,
        Isolation::Committed,
        timeout,
        Duration::from_secs(3),
        |r| last_counts(r) == *expected,
    )
}

// ---------------------------------------------------------------------------
// Input
// ---------------------------------------------------------------------------

/// Produces lines in chunks on a background thread, so input keeps
/// arriving while weir fails, restarts or is frozen.
struct Feeder {
    done: Arc<AtomicBool>,
    cancel: Arc<AtomicBool>,
    fed: Arc<AtomicUsize>,
    total: usize,
    handle: Option<JoinHandle<()>>,
}

impl Feeder {
    fn start(topic: &str, lines: Vec<String>, chunk: usize, pause: Duration) -> Self {
        let done = Arc::new(AtomicBool::new(false));
        let cancel = Arc::new(AtomicBool::new(false));
        let fed = Arc::new(AtomicUsize::new(0));
        let total = lines.len();
        let handle = {
            let (done, cancel, fed) = (done.clone(), cancel.clone(), fed.clone());
            let topic = topic.to_string();
            std::thread::spawn(move || {
                // One producer for the whole feed: a new one per chunk
                // costs most of a second.
                let p = producer();
                let mut sent = 0usize;
                for c in lines.chunks(chunk) {
                    if cancel.load(Ordering::SeqCst) {
                        break;
                    }
                    send_chunk(&p, &topic, &mut sent, c);
                    fed.fetch_add(c.len(), Ordering::SeqCst);
                    std::thread::sleep(pause);
                }
                done.store(true, Ordering::SeqCst);
            })
        };
        Self {
            done,
            cancel,
            fed,
            total,
            handle: Some(handle),
        }
    }

    fn is_done(&self) -> bool {
        self.done.load(Ordering::SeqCst)
    }

    /// Waits until everything is produced and acknowledged.
    fn join(mut self) {
        if let Some(h) = self.handle.take() {
            h.join().expect("the feeder thread panicked");
        }
        assert_eq!(
            self.fed.load(Ordering::SeqCst),
            self.total,
            "the feeder fed everything"
        );
    }
}

impl Feeder {
    /// Stops feeding at the next chunk boundary; returns how many lines
    /// were produced (and acknowledged).
    fn stop(mut self) -> usize {
        self.cancel.store(true, Ordering::SeqCst);
        if let Some(h) = self.handle.take() {
            h.join().expect("the feeder thread panicked");
        }
        self.fed.load(Ordering::SeqCst)
    }
}

impl Drop for Feeder {
    /// A failed test stops feeding.
    fn drop(&mut self) {
        self.cancel.store(true, Ordering::SeqCst);
    }
}

// ---------------------------------------------------------------------------
// 1. A full checkpoint volume
// ---------------------------------------------------------------------------

/// A tmpfs mounted for the life of the value (lazily unmounted on drop, so
/// a process still holding a file there cannot keep it mounted).
struct Tmpfs {
    path: PathBuf,
}

impl Tmpfs {
    fn mount(path: &Path, size: &str) -> Self {
        fs::create_dir_all(path).unwrap();
        let out = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(path)
            .output()
            .expect("run mount");
        assert!(
            out.status.success(),
            "mount -t tmpfs at {} (needs root): {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        Self {
            path: path.to_path_buf(),
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}

/// Keeps a file system full: a thread appends to `path` until ENOSPC, and
/// again whenever something frees space, until [`Filler::remove`].
struct Filler {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    bytes: Arc<AtomicUsize>,
    handle: Option<JoinHandle<()>>,
}

impl Filler {
    fn start(path: &Path) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let bytes = Arc::new(AtomicUsize::new(0));
        let mut file = fs::File::create(path).expect("create the filler");
        let handle = {
            let (stop, bytes) = (stop.clone(), bytes.clone());
            std::thread::spawn(move || {
                let block = vec![0xA5u8; 1 << 20];
                while !stop.load(Ordering::SeqCst) {
                    loop {
                        match file.write(&block) {
                            Ok(0) => break,
                            Ok(n) => {
                                bytes.fetch_add(n, Ordering::SeqCst);
                            }
                            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
                            Err(e) => panic!("filling the volume: {e}"),
                        }
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
        };
        // The first pass fills the volume.
        let filled = wait_until(Duration::from_secs(30), || {
            let before = bytes.load(Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(100));
            before > 0 && bytes.load(Ordering::SeqCst) == before
        });
        assert!(filled, "the filler did not fill the volume");
        Self {
            path: path.to_path_buf(),
            stop,
            bytes,
            handle: Some(handle),
        }
    }

    fn remove(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.handle.take() {
            h.join().expect("filler thread");
        }
        fs::remove_file(&self.path).expect("remove the filler");
    }
}

impl Drop for Filler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

#[test]
fn a_full_checkpoint_volume_fails_checkpoints_then_restarts_and_output_is_exact() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let volume = Tmpfs::mount(&dir.path().join("checkpoint-volume"), "64m");
    let (input, output) = topic_pair("faults-full", 4);
    let (lines, expected) = word_lines(seed(), 8_000, 10, 2_000);
    let spec = JobSpec {
        delivery: "exactly-once".into(),
        interval: "500ms".into(),
        max_attempts: 30,
        checkpoint_dir: volume.path.clone(),
        checkpoint_extra: "tolerable_failures = 2".into(),
        ..JobSpec::word_count(dir.path(), &input, &output)
    };
    let mut w = WeirProcess::start(weir(), &spec.write(), &[]);
    let addr = w.admin_addr(Duration::from_secs(30));
    let feeder = Feeder::start(&input, lines, 100, Duration::from_millis(150));
    assert!(
        w.wait_for_log("checkpoint completed", 3, Duration::from_secs(60)),
        "{}",
        tail(&w.log_text())
    );

    // Where the log stood before the volume began to fill: a checkpoint can
    // fail while the filler is still writing, and that failure counts.
    let at_fill = w.log_text().len();
    let filler = Filler::start(&volume.path.join("filler"));
    let records_at_fill = source_records_in(&addr);
    eprintln!(
        "volume filled with {} bytes",
        filler.bytes.load(Ordering::SeqCst)
    );
    let failed_in = |log: &str| -> Vec<String> {
        log.lines()
            .filter(|l| l.contains("checkpoint failed"))
            .map(str::to_string)
            .collect()
    };
    let failed_lines = |w: &WeirProcess| failed_in(&w.log_text()[at_fill..]);
    assert!(
        wait_until(Duration::from_secs(30), || failed_lines(&w).len() >= 2),
        "no two failed checkpoints after the volume filled up:\n{}",
        tail(&w.log_text())
    );
    let records_during = source_records_in(&addr);
    assert!(
        !feeder.is_done(),
        "the feeder finished before the failures: the processing check would be empty"
    );
    assert!(
        records_during > records_at_fill,
        "processing goes on while checkpoints fail ({records_at_fill} -> {records_during})"
    );
    eprintln!("failed checkpoints: {:?}", failed_lines(&w));
    let enospc = "No space left on device";
    let in_log = failed_lines(&w).iter().any(|l| l.contains(enospc));
    let (_, history) = http(&addr, "GET", "/checkpoints", None);
    let history: Vec<serde_json::Value> = serde_json::from_str(&history).unwrap();
    let in_history = history.iter().any(|c| {
        c["status"] == "failed" && c["reason"].as_str().is_some_and(|r| r.contains(enospc))
    });
    assert!(
        in_log || in_history,
        "no failed checkpoint names {enospc:?}: log lines {:?}, history {history:?}",
        failed_lines(&w)
    );
    assert!(
        wait_until(Duration::from_secs(30), || w.log_text()[at_fill..]
            .contains("restarting from the last checkpoint")),
        "no restart after tolerable_failures = 2:\n{}",
        tail(&w.log_text())
    );
    let before_restart = {
        let log = &w.log_text()[at_fill..];
        let restart = log.find("restarting from the last checkpoint").unwrap();
        failed_in(&log[..restart])
    };
    assert!(
        before_restart.len() > 2
            && before_restart
                .iter()
                .any(|l| l.contains("consecutive_failures=3")),
        "restarted after fewer than tolerable_failures + 1 failed checkpoints: {before_restart:?}"
    );

    // The volume has room again: the job recovers by itself.
    filler.remove();
    let at_removal = w.log_text().len();
    assert!(
        wait_until(Duration::from_secs(60), || w.log_text()[at_removal..]
            .contains("checkpoint completed")),
        "no checkpoint completed after the volume was freed:\n{}",
        tail(&w.log_text())
    );
    feeder.join();
    read_committed_until_exact(&output, &expected, Duration::from_secs(120));
    assert!(
        w.child.try_wait().unwrap().is_none(),
        "weir exited:\n{}",
        tail(&w.log_text())
    );
    let status = w.stop(Duration::from_secs(60));
    assert!(status.success(), "{status:?}\n{}", tail(&w.log_text()));
    let committed = read_committed_until_exact(&output, &expected, Duration::from_secs(60));
    assert_multiset(&committed, &expected);
}

// ---------------------------------------------------------------------------
// 2. A damaged newest checkpoint
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy)]
enum Damage {
    /// One `.sst` file deleted.
    Delete,
    /// The middle third of one `.sst` file inverted (same length).
    Garbage,
    /// One `.sst` file cut to half its length.
    Truncate,
}

/// Every `.sst` file under `dir`, recursively.
/// The files under `dir` that hold state data: RocksDB's SST files, the
/// copied write-ahead logs and weir's changes files (a snapshot flushes no
/// memtable, so a small state may have no SST yet).
fn data_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).unwrap().flatten() {
        let p = entry.path();
        if p.is_dir() {
            out.extend(data_files(&p));
        } else if p.extension().is_some_and(|e| e == "sst" || e == "log")
            || p.file_name().is_some_and(|n| n == "WEIR-CHANGES")
        {
            out.push(p);
        }
    }
    out
}

fn damage_file(path: &Path, damage: Damage) {
    match damage {
        Damage::Delete => fs::remove_file(path).unwrap(),
        Damage::Garbage => {
            let mut f = fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(path)
                .unwrap();
            let len = f.metadata().unwrap().len();
            let (start, n) = (len / 3, (len / 3).max(1) as usize);
            let mut bytes = vec![0u8; n];
            f.seek(SeekFrom::Start(start)).unwrap();
            f.read_exact(&mut bytes).unwrap();
            for b in &mut bytes {
                *b = !*b;
            }
            f.seek(SeekFrom::Start(start)).unwrap();
            f.write_all(&bytes).unwrap();
            f.sync_all().unwrap();
            assert_eq!(f.metadata().unwrap().len(), len);
        }
        Damage::Truncate => {
            let f = fs::OpenOptions::new().write(true).open(path).unwrap();
            let len = f.metadata().unwrap().len();
            f.set_len(len / 2).unwrap();
            f.sync_all().unwrap();
        }
    }
}

/// Output records as (partition, offset, key, value), in a stable order.
fn snapshot_of(records: &[OutRecord]) -> Vec<(i32, i64, Option<String>, Option<String>)> {
    let mut v: Vec<_> = records
        .iter()
        .map(|r| (r.partition, r.offset, r.key.clone(), r.value.clone()))
        .collect();
    v.sort();
    v
}

/// Damages the newest checkpoint's largest state file (or, `sst`, its
/// largest SST file: RocksDB checksums those itself, so weir checks their
/// CRCs while the restored job runs, before its first commit) and checks
/// that weir refuses to go on from it, naming it, with no output committed
/// since.
fn damaged_checkpoint_case(damage: Damage, sst: bool) {
    eprintln!("--- damage: {damage:?}, SST only: {sst}");
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = topic_pair("faults-damaged", 4);
    // Many distinct words, so that each subtask's state files are large;
    // for an SST to damage, more than a memtable's worth (4 MiB) each.
    let mut lines = distinct_lines(if sst { 800_000 } else { 20_000 }, 10);
    lines.extend(word_lines(seed(), 2_000, 10, 500).0);
    let expected = count_words(&lines);
    produce(&input, 4, &lines);
    let spec = JobSpec {
        delivery: "exactly-once".into(),
        interval: "500ms".into(),
        ..JobSpec::word_count(dir.path(), &input, &output)
    };
    let config = spec.write();
    let mut w = WeirProcess::start(weir(), &config, &[]);
    read_committed_until_exact(&output, &expected, Duration::from_secs(120));
    let status = w.stop(Duration::from_secs(60));
    assert!(status.success(), "{status:?}\n{}", tail(&w.log_text()));
    let before = read_committed_until_exact(&output, &expected, Duration::from_secs(60));
    assert_eq!(last_counts(&before), expected, "complete output before");

    let job_dir = spec.checkpoint_dir.join(&spec.name);
    let mut folders: Vec<PathBuf> = fs::read_dir(&job_dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("chk-"))
        })
        .collect();
    folders.sort();
    let newest = folders.last().expect("a checkpoint folder").clone();
    let folder_name = newest.file_name().unwrap().to_str().unwrap().to_string();
    let files = data_files(&newest.join("state"));
    assert!(
        !files.is_empty(),
        "no state data file under {}: the test would damage nothing",
        newest.display()
    );
    let victim = files
        .iter()
        .filter(|p| !sst || p.extension().is_some_and(|e| e == "sst"))
        .max_by_key(|p| fs::metadata(p).unwrap().len())
        .unwrap_or_else(|| panic!("no SST file among {files:?}: the test would damage nothing"))
        .clone();
    let file_name = victim.file_name().unwrap().to_str().unwrap().to_string();
    eprintln!("damaging {} ({damage:?})", victim.display());
    damage_file(&victim, damage);
    // New input after the damage: a restore that went ahead (a damaged SST
    // of the right size is checked only while the job runs) would have
    // output of its own to commit. It must commit none of it.
    produce(&input, 4, &word_lines(seed() ^ 0x5eed, 200, 10, 500).0);

    let at_restart = w.log_text().len();
    let mut again = WeirProcess::start(weir(), &config, &[]);
    let status = again.wait(Duration::from_secs(60));
    let log = again.log_text()[at_restart..].to_string();
    let status = status.unwrap_or_else(|| {
        panic!(
            "{damage:?}: weir did not refuse to start within 60 s; its log begins:\n{}",
            head(&log, 25)
        )
    });
    assert!(!status.success(), "{damage:?}: {status:?}\n{}", tail(&log));
    let naming = log
        .lines()
        .find(|l| l.contains(&folder_name) && l.contains(&file_name));
    eprintln!("{damage:?}: {status:?}, refusal: {naming:?}");
    assert!(
        naming.is_some(),
        "{damage:?}: no log line names both the checkpoint {folder_name} and the file {file_name}:\n{}",
        tail(&log)
    );
    assert!(
        !log.contains("fresh start"),
        "{damage:?}: started from empty state:\n{}",
        tail(&log)
    );
    let after = read_topic(
        &output,
        Isolation::Committed,
        Duration::from_secs(60),
        Duration::from_secs(3),
        |r| r.len() >= before.len(),
    );
    assert!(
        snapshot_of(&after) == snapshot_of(&before),
        "{damage:?}: committed output changed after the refusal ({} records before, {} after)",
        before.len(),
        after.len()
    );
}

#[test]
fn a_damaged_newest_checkpoint_refuses_to_start_naming_folder_and_file() {
    let _serial = serial();
    for damage in [Damage::Delete, Damage::Truncate, Damage::Garbage] {
        damaged_checkpoint_case(damage, false);
    }
    damaged_checkpoint_case(Damage::Garbage, true);
}

// ---------------------------------------------------------------------------
// 3, 4. An instance frozen past its transaction timeout
// ---------------------------------------------------------------------------

/// Writes `spec` with `checkpoint.timeout = 3s` and a 10 s transaction
/// timeout (> interval 1s + 3s, as validation requires), and checks that
/// weir accepts it.
fn short_transaction_timeout_config(spec: &JobSpec) -> PathBuf {
    let toml = spec.toml();
    assert_eq!(toml.matches("timeout = \"20s\"").count(), 1, "{toml}");
    assert_eq!(toml.matches("group_id").count(), 1, "{toml}");
    assert!(!toml.contains("[kafka.properties]"), "{toml}");
    let toml = toml
        .replace("timeout = \"20s\"", "timeout = \"3s\"")
        .replace(
            "group_id",
            "properties = { \"transaction.timeout.ms\" = \"10000\" }\ngroup_id",
        );
    fs::create_dir_all(&spec.dir).unwrap();
    let path = spec.dir.join("weir.toml");
    fs::write(&path, toml).unwrap();
    let out = Command::new(WEIR)
        .args(["validate", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the short-timeout configuration is valid: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    path
}

fn watermark_reader(isolation: &str) -> BaseConsumer {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("group.id", unique("weir-test-watermarks"))
        .set("enable.auto.commit", "false")
        .set("isolation.level", isolation)
        .create()
        .expect("watermark reader")
}

/// Whether a transaction on `topic` is open: on some partition the last
/// stable offset (what a read_committed ListOffsets answers) is below the
/// high watermark.
fn has_open_transaction(topic: &str) -> bool {
    let committed = watermark_reader("read_committed");
    let uncommitted = watermark_reader("read_uncommitted");
    let md = uncommitted
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .expect("metadata");
    md.topics()[0].partitions().iter().any(|p| {
        let (_, high) = uncommitted
            .fetch_watermarks(topic, p.id(), Duration::from_secs(10))
            .expect("high watermark");
        let (_, stable) = committed
            .fetch_watermarks(topic, p.id(), Duration::from_secs(10))
            .expect("last stable offset");
        stable < high
    })
}

/// SIGSTOPs `w` at a moment its transaction on `output` is open on the
/// broker (otherwise there is nothing to time out), while input keeps
/// arriving; returns when it stopped.
fn freeze_with_open_transaction(w: &WeirProcess, output: &str, rng: &mut Rng) -> Instant {
    for _ in 0..40 {
        w.signal(libc::SIGSTOP);
        let stopped = Instant::now();
        // A commit in flight when the process stopped completes on the
        // broker by itself; what is open after this is open for good.
        std::thread::sleep(Duration::from_millis(500));
        if has_open_transaction(output) {
            return stopped;
        }
        w.signal(libc::SIGCONT);
        std::thread::sleep(Duration::from_millis(100 + rng.below(400)));
    }
    panic!("never caught weir with an open transaction on {output}");
}

/// With all earlier input processed, produces one small chunk of `held` at a
/// time and SIGSTOPs `w` once that chunk's output is in an open transaction
/// on the broker: the frozen process has nothing left to send and no input
/// to read. Returns when it stopped and the chunks not produced yet.
fn freeze_idle_with_open_transaction(
    w: &WeirProcess,
    input: &str,
    output: &str,
    held: &[String],
) -> (Instant, Vec<String>) {
    let p = producer();
    let mut sent = 0;
    let chunks: Vec<&[String]> = held.chunks(20).collect();
    for (i, chunk) in chunks.iter().enumerate() {
        send_chunk(&p, input, &mut sent, chunk);
        // Time to read the chunk and deliver its output (linger 5 ms).
        std::thread::sleep(Duration::from_millis(250));
        w.signal(libc::SIGSTOP);
        let stopped = Instant::now();
        std::thread::sleep(Duration::from_millis(500));
        if has_open_transaction(output) {
            return (stopped, chunks[i + 1..].concat());
        }
        w.signal(libc::SIGCONT);
    }
    panic!("never caught weir with an open transaction on {output}");
}

/// Past the 10 s transaction timeout plus the broker's 5 s abort interval
/// (`transaction.abort.timed.out.transaction.cleanup.interval.ms` of
/// scripts/kafka.sh).
const FROZEN: Duration = Duration::from_secs(17);

/// How the frozen instance resumes.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Resume {
    /// Input arrives all along, also when the process resumes.
    Busy,
    /// Nothing in flight and no new input: the first thing the resumed
    /// process does is its next checkpoint.
    Idle,
}

/// An exactly-once job whose instance A is SIGSTOPped for longer than its
/// transaction timeout (10 s) with a transaction open, then resumed;
/// `replacement` starts instance B of the same job (same checkpoint
/// directory, group and transactional id, its own state directory) while A
/// is frozen. With a replacement A must stop as fenced and B's output stand;
/// without one A must restart by itself. Either way the committed output is
/// exact.
fn frozen_instance_case(replacement: bool, resume: Resume) {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = topic_pair("faults-frozen", 4);
    let seed = seed();
    let a = JobSpec {
        delivery: "exactly-once".into(),
        interval: "1s".into(),
        max_attempts: 10,
        ..JobSpec::word_count(&dir.path().join("a"), &input, &output)
    };
    // Same job, group, transactional id and (shared) checkpoint directory;
    // another state directory, since A still holds the lock on its own.
    let b = JobSpec {
        dir: dir.path().join("b"),
        ..a.clone()
    };
    let a_config = short_transaction_timeout_config(&a);
    let b_config = short_transaction_timeout_config(&b);
    let mut first = WeirProcess::start(weir(), &a_config, &[]);

    // Busy: a pool fed until A has resumed and been dealt with. Idle: a
    // first part fed and processed, then small held-back chunks until one
    // is caught in an open transaction; the rest comes after A is dealt with.
    let (pool, _) = word_lines(seed, 20_000, 10, 1_000);
    let mut fed_lines: Vec<String> = Vec::new();
    let mut busy_feeder = None;
    let mut later: Vec<String> = Vec::new();
    let stopped = match resume {
        Resume::Busy => {
            busy_feeder = Some(Feeder::start(
                &input,
                pool.clone(),
                40,
                Duration::from_millis(250),
            ));
            assert!(
                first.wait_for_log("checkpoint completed", 3, Duration::from_secs(60)),
                "{}",
                tail(&first.log_text())
            );
            freeze_with_open_transaction(&first, &output, &mut Rng::new(seed))
        }
        Resume::Idle => {
            let (main, held) = pool[..3_600].split_at(3_000);
            Feeder::start(&input, main.to_vec(), 100, Duration::from_millis(100)).join();
            fed_lines.extend_from_slice(main);
            read_committed_until_exact(&output, &count_words(main), Duration::from_secs(120));
            let (stopped, rest) = freeze_idle_with_open_transaction(&first, &input, &output, held);
            fed_lines.extend_from_slice(&held[..held.len() - rest.len()]);
            later = rest;
            stopped
        }
    };
    std::thread::sleep(FROZEN.saturating_sub(stopped.elapsed()));

    let mut second = None;
    if replacement {
        let mut b = WeirProcess::start(weir(), &b_config, &[]);
        assert!(
            b.wait_for_log("checkpoint completed", 2, Duration::from_secs(60)),
            "the replacement runs:\n{}",
            tail(&b.log_text())
        );
        second = Some(b);
    }
    let at_resume = first.log_text().len();
    first.signal(libc::SIGCONT);
    if busy_feeder.as_ref().is_some_and(Feeder::is_done) {
        eprintln!("note: the input pool ran out before the resume");
    }

    if let Some(b) = &second {
        // A must stop as fenced, without restarting: a restart's
        // init_transactions would fence B.
        let status = first.wait(Duration::from_secs(60));
        let log = first.log_text()[at_resume..].to_string();
        let status = status.unwrap_or_else(|| {
            panic!(
                "{resume:?}: the resumed instance did not stop within 60 s; its log after SIGCONT \
                 begins:\n{}\n--- the replacement's log (tail):\n{}",
                head(&log, 40),
                tail(&b.log_text())
            )
        });
        assert!(!status.success(), "{resume:?}: {status:?}\n{}", tail(&log));
        assert!(
            log.contains("was fenced"),
            "{resume:?}:\n{}",
            head(&log, 40)
        );
        assert!(
            !log.contains("restarting from the last checkpoint"),
            "{resume:?}: a fenced instance must not restart (its init_transactions would fence \
             the replacement):\n{}",
            head(&log, 40)
        );
    } else {
        // A must restart by itself, naming the transaction, and go on.
        let restarts = |w: &WeirProcess| -> Vec<String> {
            w.log_text()[at_resume..]
                .lines()
                .filter(|l| l.contains("restarting from the last checkpoint"))
                .map(str::to_string)
                .collect()
        };
        let restarted = wait_until(Duration::from_secs(60), || {
            !restarts(&first).is_empty() || first.child.try_wait().unwrap().is_some()
        });
        assert!(
            restarted && first.child.try_wait().unwrap().is_none(),
            "{resume:?}: the resumed instance did not restart in-process (exit: {:?}):\n{}",
            first.child.try_wait().unwrap(),
            tail(&first.log_text()[at_resume..])
        );
        assert!(
            restarts(&first)
                .iter()
                .any(|l| l.to_lowercase().contains("transaction")),
            "{resume:?}: the restart does not name the transaction: {:?}",
            restarts(&first)
        );
        let at_restart = first.log_text().len();
        assert!(
            wait_until(Duration::from_secs(60), || first.log_text()[at_restart..]
                .contains("checkpoint completed")),
            "{resume:?}: no checkpoint completed after the restart:\n{}",
            tail(&first.log_text()[at_resume..])
        );
    }

    if let Some(f) = busy_feeder {
        let n = f.stop();
        fed_lines.extend_from_slice(&pool[..n]);
    }
    if !later.is_empty() {
        Feeder::start(&input, later.clone(), 100, Duration::from_millis(50)).join();
        fed_lines.extend(later);
    }
    let expected = count_words(&fed_lines);
    let mut live = second.unwrap_or(first);
    read_committed_until_exact(&output, &expected, Duration::from_secs(120));
    assert!(
        live.child.try_wait().unwrap().is_none(),
        "{resume:?}: the instance that should still run exited:\n{}",
        tail(&live.log_text())
    );
    let status = live.stop(Duration::from_secs(60));
    let log = live.log_text();
    assert!(status.success(), "{resume:?}: {status:?}\n{}", tail(&log));
    if !replacement {
        assert!(
            !log.contains("was fenced"),
            "{resume:?}: no other instance ran, yet weir reports being fenced:\n{}",
            tail(&log)
        );
    }
    let committed = read_committed_until_exact(&output, &expected, Duration::from_secs(60));
    assert_multiset(&committed, &expected);
    let uncommitted = read_topic(
        &output,
        Isolation::Uncommitted,
        Duration::from_secs(60),
        Duration::from_secs(3),
        |r| r.len() >= committed.len(),
    );
    eprintln!(
        "{resume:?}: {} lines, committed {} records, uncommitted {} (aborted output included)",
        fed_lines.len(),
        committed.len(),
        uncommitted.len()
    );
}

#[test]
fn a_sigstopped_instance_whose_transaction_timed_out_is_fenced_when_resumed() {
    let _serial = serial();
    frozen_instance_case(true, Resume::Busy);
}

#[test]
fn a_sigstopped_idle_instance_whose_transaction_timed_out_is_fenced_when_resumed() {
    let _serial = serial();
    frozen_instance_case(true, Resume::Idle);
}

#[test]
fn a_sigstopped_instance_without_replacement_restarts_after_its_transaction_timed_out() {
    let _serial = serial();
    frozen_instance_case(false, Resume::Busy);
}

#[test]
fn a_sigstopped_idle_instance_without_replacement_restarts_after_its_transaction_timed_out() {
    let _serial = serial();
    frozen_instance_case(false, Resume::Idle);
}

// ---------------------------------------------------------------------------
// 5. checkpoint.mode × sink.delivery × sink.emit
// ---------------------------------------------------------------------------

const EMITS: [&str; 2] = ["every-update", "on-checkpoint"];

fn combination_spec(
    dir: &Path,
    input: &str,
    output: &str,
    mode: &str,
    delivery: &str,
    emit: &str,
) -> JobSpec {
    JobSpec {
        delivery: delivery.into(),
        emit: emit.into(),
        interval: "300ms".into(),
        max_attempts: 10,
        checkpoint_extra: format!("mode = \"{mode}\""),
        ..JobSpec::word_count(dir, input, output)
    }
}

/// Whether `records` hold what the combination promises (see
/// [`check_combination`]); used to wait for complete output.
fn combination_complete(
    records: &[OutRecord],
    expected: &HashMap<String, u64>,
    mode: &str,
    delivery: &str,
) -> bool {
    if delivery == "exactly-once" {
        return last_counts(records) == *expected;
    }
    let max = max_counts(records);
    expected.iter().all(|(w, n)| match max.get(w) {
        Some(m) if mode == "exactly-once" => m == n,
        Some(m) => m >= n,
        None => false,
    })
}

/// The documented promise of each combination.
fn check_combination(
    records: &[OutRecord],
    expected: &HashMap<String, u64>,
    mode: &str,
    delivery: &str,
    emit: &str,
) {
    let what = format!("mode {mode}, delivery {delivery}, emit {emit}");
    let seqs = sequences(records);
    let mut unexpected: Vec<&String> = seqs.keys().filter(|w| !expected.contains_key(*w)).collect();
    unexpected.sort();
    assert!(
        unexpected.is_empty(),
        "{what}: words that are not in the input: {:?}",
        &unexpected[..unexpected.len().min(10)]
    );
    let missing: Vec<&String> = expected.keys().filter(|w| !seqs.contains_key(*w)).collect();
    assert!(
        missing.is_empty(),
        "{what}: words missing from the output: {:?}",
        &missing[..missing.len().min(10)]
    );
    match (delivery, emit) {
        ("exactly-once", "every-update") => assert_multiset(records, expected),
        ("exactly-once", _) => {
            for (w, n) in expected {
                let seq = &seqs[w];
                assert!(
                    seq.windows(2).all(|p| p[0] < p[1]),
                    "{what}: {w}: {seq:?} not strictly increasing"
                );
                assert_eq!(seq.last(), Some(n), "{what}: last count of {w}");
            }
        }
        _ => {
            let max = max_counts(records);
            for (w, n) in expected {
                if mode == "exactly-once" {
                    assert_eq!(max[w], *n, "{what}: maximum count of {w}");
                } else {
                    assert!(
                        max[w] >= *n,
                        "{what}: maximum count of {w} {} < {n}",
                        max[w]
                    );
                }
            }
            if emit == "every-update" {
                let seen: HashSet<(&str, u64)> = seqs
                    .iter()
                    .flat_map(|(w, s)| s.iter().map(move |c| (w.as_str(), *c)))
                    .collect();
                let mut absent: Vec<String> = expected
                    .iter()
                    .flat_map(|(w, n)| (1..=*n).map(move |i| (w.as_str(), i)))
                    .filter(|p| !seen.contains(p))
                    .map(|(w, i)| format!("({w}, {i})"))
                    .collect();
                absent.sort();
                assert!(
                    absent.is_empty(),
                    "{what}: {} updates never emitted, e.g. {:?}",
                    absent.len(),
                    &absent[..absent.len().min(10)]
                );
            }
        }
    }
}

/// ~20,000 words, two SIGKILLs at random moments while input arrives, a
/// final run stopped with SIGTERM; then the output, read as documented for
/// the delivery, must keep the combination's promise.
fn run_combination(mode: &str, delivery: &str, emit: &str) {
    eprintln!("--- mode {mode}, delivery {delivery}, emit {emit}");
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = topic_pair("faults-combo", 4);
    let seed = seed();
    let (lines, expected) = word_lines(seed, 2_000, 10, 400);
    let spec = combination_spec(dir.path(), &input, &output, mode, delivery, emit);
    let config = spec.write();
    let feeder = Feeder::start(&input, lines, 50, Duration::from_millis(100));
    let mut rng = Rng::new(seed);
    let mut logs = String::new();
    for _ in 0..2 {
        let mut w = WeirProcess::start(weir(), &config, &[]);
        std::thread::sleep(Duration::from_millis(800 + rng.below(1500)));
        assert!(
            w.child.try_wait().unwrap().is_none(),
            "weir exited before the kill:\n{}",
            tail(&w.log_text())
        );
        w.kill9();
        logs = w.log_text();
    }
    assert!(
        logs.contains("checkpoint completed"),
        "no checkpoint before the kills: nothing was at stake\n{}",
        tail(&logs)
    );
    let mode_name = if mode == "exactly-once" {
        "mode=ExactlyOnce"
    } else {
        "mode=AtLeastOnce"
    };
    assert!(
        logs.contains(mode_name),
        "checkpoint.mode not in effect:\n{}",
        tail(&logs)
    );
    feeder.join();
    let isolation = if delivery == "exactly-once" {
        Isolation::Committed
    } else {
        Isolation::Uncommitted
    };
    let mut w = WeirProcess::start(weir(), &config, &[]);
    read_topic(
        &output,
        isolation,
        Duration::from_secs(120),
        Duration::from_secs(1),
        |r| combination_complete(r, &expected, mode, delivery),
    );
    let status = w.stop(Duration::from_secs(60));
    assert!(status.success(), "{status:?}\n{}", tail(&w.log_text()));
    let records = read_topic(
        &output,
        isolation,
        Duration::from_secs(60),
        Duration::from_secs(3),
        |r| combination_complete(r, &expected, mode, delivery),
    );
    check_combination(&records, &expected, mode, delivery, emit);
    eprintln!(
        "mode {mode}, delivery {delivery}, emit {emit}: {} output records for {} words",
        records.len(),
        expected.values().sum::<u64>()
    );
}

#[test]
fn every_mode_delivery_emit_combination_refuses_at_least_once_mode_with_exactly_once_delivery() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    for emit in EMITS {
        let spec = combination_spec(
            &dir.path().join(emit),
            "in",
            "out",
            "at-least-once",
            "exactly-once",
            emit,
        );
        let config = spec.write();
        let out = Command::new(WEIR)
            .args(["validate", "--config"])
            .arg(&config)
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(out.status.code(), Some(2), "emit {emit}: {text}");
        assert!(
            text.contains("checkpoint.mode") && text.contains("sink.delivery"),
            "emit {emit}: the refusal names both keys: {text}"
        );
        // The same configuration with exactly-once checkpoints is valid.
        let fine = combination_spec(
            &dir.path().join(format!("{emit}-fine")),
            "in",
            "out",
            "exactly-once",
            "exactly-once",
            emit,
        );
        let ok = Command::new(WEIR)
            .args(["validate", "--config"])
            .arg(fine.write())
            .output()
            .unwrap();
        assert!(
            ok.status.success(),
            "emit {emit}: {}",
            String::from_utf8_lossy(&ok.stderr)
        );
    }
}

#[test]
fn every_mode_delivery_emit_combination_exactly_once_mode_exactly_once_delivery() {
    let _serial = serial();
    for emit in EMITS {
        run_combination("exactly-once", "exactly-once", emit);
    }
}

#[test]
fn every_mode_delivery_emit_combination_exactly_once_mode_at_least_once_delivery() {
    let _serial = serial();
    for emit in EMITS {
        run_combination("exactly-once", "at-least-once", emit);
    }
}

#[test]
fn every_mode_delivery_emit_combination_at_least_once_mode_at_least_once_delivery() {
    let _serial = serial();
    for emit in EMITS {
        run_combination("at-least-once", "at-least-once", emit);
    }
}
