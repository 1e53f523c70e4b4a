//! Group mode (issue #11) against a real broker and, for S3, a real S3
//! emulator (`moto` in server mode, started by `scripts/test.sh` through
//! `scripts/s3.sh`): several instances share one job, are killed and
//! replaced, scale up and down, are paused into zombies; checkpoint storage
//! is garbage-collected and its damage refused. Output is checked by an
//! independent read_committed consumer.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use weir_testkit::{
    assert_multiset, bootstrap, create_topic, create_topic_with, http, log_tail, produce,
    read_topic, topic_pair, unique, word_lines, Isolation, JobSpec, OutRecord, Rng, WeirProcess,
};

const WEIR: &str = env!("CARGO_BIN_EXE_weir");
const TASKS: u32 = 8;

fn seed() -> u64 {
    let s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    eprintln!("random seed {s}");
    s
}

/// Where the instances keep their checkpoints.
#[derive(Clone)]
enum Storage {
    /// A folder every instance reaches (a shared file system).
    Shared(PathBuf),
    /// `s3://<bucket>/<prefix>` on the emulator.
    S3 { bucket: String },
}

/// The S3 emulator's endpoint; the suite starts it (`scripts/test.sh`).
fn s3_endpoint() -> String {
    std::env::var("WEIR_S3_ENDPOINT").unwrap_or_else(|_| {
        panic!(
            "WEIR_S3_ENDPOINT is not set: start the S3 emulator with `scripts/s3.sh start` and \
             `eval \"$(scripts/s3.sh env)\"` (scripts/test.sh does both)"
        )
    })
}

impl Storage {
    fn s3() -> Self {
        let bucket = unique("weir-test").to_lowercase().replace('_', "-");
        let endpoint = s3_endpoint();
        let addr = endpoint.trim_start_matches("http://").trim_end_matches('/');
        let (status, body) = http(addr, "PUT", &format!("/{bucket}"), None);
        assert_eq!(status, 200, "create bucket {bucket}: {body}");
        Storage::S3 { bucket }
    }

    fn dir(&self) -> PathBuf {
        match self {
            Storage::Shared(p) => p.clone(),
            Storage::S3 { bucket } => PathBuf::from(format!("s3://{bucket}/checkpoints")),
        }
    }

    /// The `[checkpoint.s3]` section, reaching the emulator at `endpoint`.
    fn extra(&self, endpoint: &str) -> String {
        match self {
            Storage::Shared(_) => String::new(),
            Storage::S3 { .. } => format!(
                "\n[checkpoint.s3]\nendpoint = {endpoint:?}\nregion = \"us-east-1\"\naccess_key_id = \
                 \"test\"\nsecret_access_key = \"test\"\nallow_http = true\n"
            ),
        }
    }
}

/// One job's instances: each has its own folder (config, log, state) and
/// all share the job name, group, topics and checkpoint location.
struct Cluster {
    base: PathBuf,
    name: String,
    input: String,
    output: String,
    storage: Storage,
    interval: String,
    timeout: String,
    /// `scale.group_protocol`.
    protocol: &'static str,
    /// `source.start`.
    start: &'static str,
    /// `source.on_bad_record`.
    on_bad_record: &'static str,
    /// Where instances started from now on reach S3 (the emulator itself
    /// unless set), and `[kafka.properties]` lines they get besides.
    s3_endpoint: Option<String>,
    properties: String,
    /// `[kafka.properties]` lines of one instance only.
    instance_properties: BTreeMap<usize, String>,
    /// Another build's binary for one instance (rolling upgrades).
    binaries: BTreeMap<usize, PathBuf>,
    /// `scale.tasks` and `transaction.timeout.ms`.
    tasks: u32,
    transaction_timeout_ms: u32,
    running: BTreeMap<usize, WeirProcess>,
}

impl Cluster {
    fn new(base: &Path, storage: Storage) -> Self {
        let (input, output) = topic_pair("scale", 4);
        Self {
            base: base.to_path_buf(),
            name: unique("scale"),
            input,
            output,
            storage,
            interval: "500ms".into(),
            timeout: "5s".into(),
            protocol: "consumer",
            start: "earliest",
            on_bad_record: "fail",
            s3_endpoint: None,
            properties: String::new(),
            instance_properties: BTreeMap::new(),
            binaries: BTreeMap::new(),
            tasks: TASKS,
            transaction_timeout_ms: 30_000,
            running: BTreeMap::new(),
        }
    }

    fn config(&self, i: usize) -> PathBuf {
        let mut spec =
            JobSpec::word_count(&self.base.join(format!("i{i}")), &self.input, &self.output);
        spec.name = self.name.clone();
        spec.checkpoint_dir = self.storage.dir();
        spec.delivery = "exactly-once".into();
        spec.interval = self.interval.clone();
        spec.start = self.start.into();
        spec.on_bad_record = self.on_bad_record.into();
        spec.extra = format!(
            "\n[scale]\nmode = \"group\"\ntasks = {}\ninstance = \"i{i}\"\ngroup_protocol = {:?}\n\n\
             [kafka.properties]\n\"transaction.timeout.ms\" = \"{}\"\n{}{}{}",
            self.tasks,
            self.protocol,
            self.transaction_timeout_ms,
            self.properties,
            self.instance_properties
                .get(&i)
                .map(String::as_str)
                .unwrap_or_default(),
            self.storage
                .extra(self.s3_endpoint.as_deref().unwrap_or(&s3_endpoint()))
        );
        spec.write()
    }

    fn start(&mut self, i: usize) {
        self.start_with(i, &[]);
    }

    fn start_with(&mut self, i: usize, env: &[(&str, &str)]) {
        let config = self.config(i);
        let mut vars = vec![
            ("RUST_LOG", "info"),
            ("WEIR__CHECKPOINT__TIMEOUT", self.timeout.as_str()),
        ];
        vars.extend_from_slice(env);
        let binary = self
            .binaries
            .get(&i)
            .map_or(Path::new(WEIR), PathBuf::as_path);
        let w = WeirProcess::start(binary, &config, &vars);
        self.running.insert(i, w);
    }

    fn kill9(&mut self, i: usize) {
        if let Some(mut w) = self.running.remove(&i) {
            w.kill9();
            let _ = w.wait(Duration::from_secs(10));
        }
    }

    fn stop(&mut self, i: usize) {
        let mut w = self.running.remove(&i).expect("running instance");
        let status = w.stop(Duration::from_secs(60));
        assert!(
            status.success(),
            "instance i{i} did not stop cleanly:\n{}",
            log_tail(&w.log_text())
        );
    }

    /// Starts instance `i` and waits for it to exit non-zero within
    /// `within` (`case` names the situation in failures); returns what it
    /// logged this time.
    fn start_refused(&mut self, i: usize, case: &str, within: Duration) -> String {
        let earlier = std::fs::read_to_string(self.base.join(format!("i{i}/weir.log")))
            .map_or(0, |t| t.len());
        self.start(i);
        let mut w = self.running.remove(&i).unwrap();
        let status = w.wait(within).unwrap_or_else(|| {
            panic!(
                "{case}: the instance kept running:\n{}",
                log_tail(&w.log_text())
            )
        });
        assert!(!status.success(), "{case}: exited successfully");
        w.log_text()[earlier..].to_string()
    }

    fn logs(&self) -> String {
        let mut out = String::new();
        for i in 0..4 {
            let log = self.base.join(format!("i{i}/weir.log"));
            if let Ok(text) = std::fs::read_to_string(&log) {
                out.push_str(&format!("==== i{i}\n{}\n", log_tail(&text)));
            }
        }
        out
    }

    /// Every instance still running is alive. One the group fenced (it
    /// was unresponsive past the session timeout, which an overloaded
    /// two-core machine can cause: the zombie case, whose exit with a clear
    /// message is the specified behaviour) is restarted, as its supervisor
    /// would; any other exit fails the test.
    fn assert_alive(&mut self) {
        let mut dead = Vec::new();
        let mut fenced = Vec::new();
        for (i, w) in self.running.iter_mut() {
            if let Ok(Some(status)) = w.child.try_wait() {
                let log = w.log_text();
                let last = log
                    .lines()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or("");
                if status.code() == Some(1)
                    && last.starts_with("error: fenced by the consumer group")
                {
                    fenced.push(*i);
                } else {
                    dead.push(format!("i{i}: {status:?}"));
                }
            }
        }
        assert!(
            dead.is_empty(),
            "instances exited: {dead:?}\n{}",
            self.logs()
        );
        for i in fenced {
            eprintln!("supervisor: i{i} was fenced by the group and exited; restarting it");
            self.running.remove(&i);
            self.start(i);
        }
    }

    /// Every instance's whole log, for what must (not) have been logged.
    fn full_logs(&self) -> String {
        (0..4)
            .filter_map(|i| std::fs::read_to_string(self.base.join(format!("i{i}/weir.log"))).ok())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Waits until the committed output holds every expected pair, then
    /// checks it is exactly that.
    fn assert_exact(&self, expected: &HashMap<String, u64>) -> Vec<OutRecord> {
        self.assert_exact_within(expected, Duration::from_secs(240))
    }

    fn assert_exact_within(
        &self,
        expected: &HashMap<String, u64>,
        within: Duration,
    ) -> Vec<OutRecord> {
        let total: u64 = expected.values().sum();
        let records = read_topic(
            &self.output,
            Isolation::Committed,
            within,
            Duration::from_secs(3),
            |r| r.len() as u64 >= total,
        );
        if (records.len() as u64) < total {
            eprintln!("{}", self.logs());
        }
        // What the instances said about resets, skips and failures, for a
        // failure's diagnosis.
        for i in 0..4 {
            if let Ok(text) = std::fs::read_to_string(self.base.join(format!("i{i}/weir.log"))) {
                for line in text.lines().filter(|l| {
                    l.contains(" WARN ")
                        || l.contains(" ERROR ")
                        || l.contains("refused the commit")
                }) {
                    eprintln!("i{i}: {}", &line[..line.len().min(400)]);
                }
            }
        }
        assert_multiset(&records, expected);
        records
    }

    /// The tasks an instance's admin endpoint reports.
    fn tasks_of(&mut self, i: usize) -> Vec<u32> {
        let w = self.running.get_mut(&i).expect("running");
        let addr = w.admin_addr(Duration::from_secs(30));
        let (status, body) = http(&addr, "GET", "/tasks", None);
        assert_eq!(status, 200, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        v["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_u64().unwrap() as u32)
            .collect()
    }

    /// How many partitions (tasks and input partitions) an instance owns.
    fn partitions_of(&mut self, i: usize) -> usize {
        let w = self.running.get_mut(&i).expect("running");
        let addr = w.admin_addr(Duration::from_secs(30));
        let (status, body) = http(&addr, "GET", "/tasks", None);
        assert_eq!(status, 200, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        v["tasks"].as_array().unwrap().len() + v["inputs"].as_array().unwrap().len()
    }

    /// Interactive queries: of the running instances, exactly the one
    /// owning a key's task answers its count; the others answer 421 naming
    /// the task.
    fn assert_queries(&mut self, expected: &HashMap<String, u64>, keys: usize) {
        let ids: Vec<usize> = self.running.keys().copied().collect();
        let addrs: Vec<String> = ids
            .iter()
            .map(|i| {
                let w = self.running.get_mut(i).expect("running");
                w.admin_addr(Duration::from_secs(30))
            })
            .collect();
        for (word, count) in expected.iter().take(keys) {
            let mut answered = Vec::new();
            for addr in &addrs {
                let (status, body) = http(addr, "GET", &format!("/state/word-count/{word}"), None);
                match status {
                    200 => {
                        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
                        assert_eq!(v["value"]["count"].as_u64(), Some(*count), "{word}: {body}");
                        answered.push(addr.clone());
                    }
                    421 => assert!(body.contains("\"task\""), "{body}"),
                    other => panic!("{word} at {addr}: {other} {body}"),
                }
            }
            assert_eq!(answered.len(), 1, "{word} answered by {answered:?}");
        }
    }

    /// Waits until the running instances together own every task.
    fn wait_all_tasks_owned(&mut self, timeout: Duration) {
        let started = Instant::now();
        loop {
            let ids: Vec<usize> = self.running.keys().copied().collect();
            let mut owned: Vec<u32> = ids.iter().flat_map(|i| self.tasks_of(*i)).collect();
            owned.sort();
            if owned == (0..TASKS).collect::<Vec<_>>() {
                return;
            }
            assert!(
                started.elapsed() < timeout,
                "tasks owned after {timeout:?}: {owned:?}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Waits until instance `i` owns at least one task.
    fn wait_owns_a_task(&mut self, i: usize, timeout: Duration) {
        let started = Instant::now();
        while self.tasks_of(i).is_empty() {
            assert!(
                started.elapsed() < timeout,
                "i{i} owns no task after {timeout:?}:\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Asserts that every running instance is still running (none exited).
    fn assert_all_running(&mut self) {
        for (i, w) in self.running.iter_mut() {
            assert!(
                matches!(w.child.try_wait(), Ok(None)),
                "i{i} exited:\n{}",
                log_tail(&w.log_text())
            );
        }
    }
}

/// Produces `lines` in chunks on a background thread.
fn feed(
    topic: &str,
    lines: Vec<String>,
    chunk: usize,
    pause: Duration,
) -> std::thread::JoinHandle<()> {
    let topic = topic.to_string();
    std::thread::spawn(move || {
        for c in lines.chunks(chunk) {
            produce(&topic, 4, c);
            std::thread::sleep(pause);
        }
    })
}

/// Test 1: three instances, 200,000 words, 4 input partitions, 8 tasks,
/// ten SIGKILLs of random instances, each replaced after a random pause.
fn survives_random_kills(storage: Storage, base: &Path) {
    let mut rng = Rng::new(seed());
    let mut c = Cluster::new(base, storage);
    let (lines, expected) = word_lines(rng.next_u64(), 20_000, 10, 3_000);
    for i in 0..3 {
        c.start(i);
    }
    let feeder = feed(&c.input, lines, 500, Duration::from_millis(700));
    for kill in 0..10 {
        std::thread::sleep(Duration::from_millis(1_500 + rng.below(2_500)));
        c.assert_alive();
        let victim = rng.below(3) as usize;
        eprintln!("kill {kill}: SIGKILL i{victim}");
        c.kill9(victim);
        std::thread::sleep(Duration::from_millis(rng.below(3_000)));
        c.start(victim);
    }
    feeder.join().unwrap();
    c.assert_exact(&expected);
    c.assert_alive();
    c.wait_all_tasks_owned(Duration::from_secs(60));
    c.assert_queries(&expected, 30);
    for i in 0..3 {
        c.stop(i);
    }
}

/// Test 2: one instance, then three, then one again, during one run.
fn scales_one_three_one(storage: Storage, base: &Path, protocol: &'static str) {
    let mut rng = Rng::new(seed());
    let mut c = Cluster::new(base, storage);
    c.protocol = protocol;
    let (lines, expected) = word_lines(rng.next_u64(), 15_000, 10, 3_000);
    let thirds: Vec<Vec<String>> = lines.chunks(5_000).map(<[String]>::to_vec).collect();
    c.start(0);
    let feeder = feed(&c.input, thirds[0].clone(), 500, Duration::from_millis(300));
    c.wait_all_tasks_owned(Duration::from_secs(60));
    feeder.join().unwrap();
    c.start(1);
    c.start(2);
    let feeder = feed(&c.input, thirds[1].clone(), 500, Duration::from_millis(300));
    // The work spreads out over all three: tasks leave i0, and each new
    // instance owns partitions (the group's assignor may give one of them
    // only input partitions and the other only tasks).
    let started = Instant::now();
    while c.tasks_of(0).len() == TASKS as usize
        || c.partitions_of(1) == 0
        || c.partitions_of(2) == 0
    {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "tasks never moved:\n{}",
            c.logs()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    feeder.join().unwrap();
    c.stop(1);
    c.stop(2);
    c.wait_all_tasks_owned(Duration::from_secs(60));
    assert_eq!(c.tasks_of(0).len(), TASKS as usize);
    let feeder = feed(&c.input, thirds[2].clone(), 500, Duration::from_millis(300));
    feeder.join().unwrap();
    c.assert_exact(&expected);
    c.assert_alive();
    c.stop(0);
}

/// A commit the group refuses (a raced rebalance) aborts the epoch and
/// resets every partition to its committed offset and state while the
/// consumer has records of the old positions fetched already. None of them
/// may be applied against the restored state: a third of the commits are
/// refused here, under a steady feed, and the output must stay exact.
#[test]
fn refused_commits_reset_to_the_committed_state_without_losing_or_repeating_a_record() {
    let (_keep, base) = test_dir();
    let mut rng = Rng::new(seed());
    let mut c = Cluster::new(&base, Storage::Shared(base.join("checkpoints")));
    c.interval = "300ms".into();
    let (lines, expected) = word_lines(rng.next_u64(), 8_000, 10, 2_000);
    c.start_with(0, &[("FAILPOINTS", "group-commit-refused=33%return")]);
    let feeder = feed(&c.input, lines, 200, Duration::from_millis(100));
    feeder.join().unwrap();
    let records = c.assert_exact(&expected);
    assert!(!records.is_empty());
    let log = std::fs::read_to_string(base.join("i0/weir.log")).unwrap();
    let resets = log.matches("failpoint group-commit-refused").count();
    assert!(resets >= 5, "only {resets} refused commits:\n{}", c.logs());
    c.assert_alive();
    c.stop(0);
}

/// A test folder; `WEIR_TEST_KEEP=1` keeps it (logs, state, checkpoints)
/// to look into a failure.
fn test_dir() -> (Option<tempfile::TempDir>, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    if std::env::var_os("WEIR_TEST_KEEP").is_some() {
        let kept = tmp.keep();
        eprintln!("keeping {}", kept.display());
        (None, kept)
    } else {
        let path = tmp.path().to_path_buf();
        (Some(tmp), path)
    }
}

#[test]
fn shared_folder_three_instances_survive_random_kills_exactly_once() {
    let (_tmp, dir) = test_dir();
    survives_random_kills(Storage::Shared(dir.join("shared")), &dir);
}

#[test]
fn s3_three_instances_survive_random_kills_exactly_once() {
    let (_tmp, dir) = test_dir();
    survives_random_kills(Storage::s3(), &dir);
}

#[test]
fn shared_folder_scaling_one_three_one_is_exact() {
    let dir = tempfile::tempdir().unwrap();
    scales_one_three_one(
        Storage::Shared(dir.path().join("shared")),
        dir.path(),
        "consumer",
    );
}

/// The classic group protocol with cooperative-sticky assignment, for
/// brokers before Kafka 4.0.
#[test]
fn classic_protocol_scaling_one_three_one_is_exact() {
    let dir = tempfile::tempdir().unwrap();
    scales_one_three_one(
        Storage::Shared(dir.path().join("shared")),
        dir.path(),
        "classic",
    );
}

#[test]
fn s3_scaling_one_three_one_is_exact() {
    let dir = tempfile::tempdir().unwrap();
    scales_one_three_one(Storage::s3(), dir.path(), "consumer");
}

/// Issue #38 item 5: a repartition record carries a row's key and the
/// whole row, so a 600 KB word makes a record over 1 MB, larger than the
/// producer's `message.max.bytes`. Under `on_bad_record = "skip"` the row
/// is skipped with a warning naming it, like an oversized sink record in
/// single mode: no instance exits (before, each owner of the source's
/// partition in turn failed with `OutputTooLarge`), and every other word
/// is counted exactly.
#[test]
fn a_row_too_large_for_a_repartition_record_is_skipped_and_every_instance_keeps_running() {
    let (_tmp, dir) = test_dir();
    let mut rng = Rng::new(seed());
    let mut c = Cluster::new(&dir, Storage::Shared(dir.join("shared")));
    c.on_bad_record = "skip";
    let (mut lines, expected) = word_lines(rng.next_u64(), 4_000, 5, 500);
    let giant = "g".repeat(600 * 1024);
    lines.insert(2_000, giant.clone());
    for i in 0..3 {
        c.start(i);
    }
    feed(&c.input, lines, 500, Duration::from_millis(200))
        .join()
        .unwrap();
    c.assert_exact(&expected);
    // A while longer: an instance that failed on the row would be gone.
    std::thread::sleep(Duration::from_secs(5));
    c.assert_alive();
    assert_eq!(c.running.len(), 3);
    let logs = c.full_logs();
    assert!(
        logs.lines().any(
            |l| l.contains("skipped an output record over message.max.bytes")
                && l.contains(".word-count.repartition")
                && l.contains(&giant[..48])
        ),
        "the skip is logged naming the topic and the row's key: {}",
        c.logs()
    );
    assert!(
        !logs.contains("restarting") && !logs.contains("OutputTooLarge"),
        "{}",
        c.logs()
    );
    for i in 0..3 {
        c.stop(i);
    }
}

/// SIGKILL of an instance whose epoch is open: its transaction holds
/// output (and repartition records for every task, if it reads input), so
/// every read_committed reader of those partitions (the output's reader,
/// the survivor's tasks) would wait until the broker aborts it,
/// `transaction.timeout.ms` after it began (two minutes here).
/// The survivor that takes its tasks over sees it is no longer in the group
/// and fences its transactional id, which aborts the transaction at once:
/// the output is whole and exact long before the timeout.
#[test]
fn a_killed_instances_open_transaction_is_aborted_when_its_tasks_move() {
    let (_tmp, dir) = test_dir();
    let mut rng = Rng::new(seed());
    let mut c = Cluster::new(&dir, Storage::Shared(dir.join("shared")));
    c.transaction_timeout_ms = 120_000;
    let (lines, expected) = word_lines(rng.next_u64(), 12_000, 10, 2_000);
    c.start(0);
    c.start(1);
    c.wait_owns_a_task(1, Duration::from_secs(60));
    // i1's tasks write output (and, with input partitions, it writes
    // repartition records) all along, in an epoch that is open whenever
    // it is killed: the output's read_committed reader waits for it.
    let feeder = feed(&c.input, lines, 500, Duration::from_millis(250));
    std::thread::sleep(Duration::from_secs(3));
    c.kill9(1);
    let killed = Instant::now();
    feeder.join().unwrap();
    c.assert_exact_within(&expected, Duration::from_secs(60));
    let took = killed.elapsed();
    assert!(
        took < Duration::from_secs(100),
        "the output was whole {took:?} after the kill, as if the killed instance's transaction \
         had waited for its timeout"
    );
    let log = std::fs::read_to_string(dir.join("i0/weir.log")).unwrap();
    assert!(
        log.lines().any(|l| l.contains(
            "took over the transactional id of an instance that is no longer in the group"
        ) && l.contains("instance=\"i1\"")),
        "i0 did not fence i1:\n{}",
        log_tail(&log)
    );
    c.assert_alive();
    c.stop(0);
}

/// Issue #38 item 6: a task's new owner fences the instance that last
/// committed it only when that instance is not in the group. Members used
/// to be told apart by a `client.id` weir set (`weir-instance-<name>`),
/// so an instance with its own `client.id` in `[kafka.properties]` looked
/// dead to one without: i1 sets one, owns every task, then i0 and i2 join
/// and take some of i1's tasks (and later i1 takes some back when i2
/// stops). No instance may fence another, and none restarts.
#[test]
fn a_live_instance_with_its_own_client_id_is_never_fenced_when_its_tasks_move() {
    let (_tmp, dir) = test_dir();
    let mut rng = Rng::new(seed());
    let mut c = Cluster::new(&dir, Storage::Shared(dir.join("shared")));
    c.instance_properties
        .insert(1, "\"client.id\" = \"my-own-client-id\"\n".into());
    let (lines, expected) = word_lines(rng.next_u64(), 9_000, 10, 2_000);
    let (first, rest) = lines.split_at(3_000);
    c.start(1);
    c.wait_all_tasks_owned(Duration::from_secs(60));
    produce(&c.input, 4, first);
    // i1 commits checkpoints of every task: their pointers name it.
    std::thread::sleep(Duration::from_secs(5));
    let feeder = feed(&c.input, rest.to_vec(), 500, Duration::from_millis(300));
    c.start(0);
    c.wait_owns_a_task(0, Duration::from_secs(60));
    c.start(2);
    c.wait_all_tasks_owned(Duration::from_secs(60));
    std::thread::sleep(Duration::from_secs(3));
    c.stop(2);
    feeder.join().unwrap();
    c.assert_exact(&expected);
    c.assert_all_running();
    let logs = c.full_logs();
    let fenced: Vec<&str> = logs
        .lines()
        .filter(|l| {
            l.contains("took over the transactional id")
                && (l.contains("instance=\"i0\"") || l.contains("instance=\"i1\""))
        })
        .collect();
    assert!(fenced.is_empty(), "a live instance was fenced: {fenced:?}");
    assert!(
        !logs.contains("restarting"),
        "an instance restarted:\n{}",
        c.logs()
    );
    c.stop(0);
    c.stop(1);
}

/// Issue #38 item 7, a rolling upgrade: two instances of an earlier
/// build (its binary in `WEIR_OLD_BINARY`) run the job, one of this build
/// joins, then each earlier one is stopped and replaced by this build,
/// while input flows. Every instance keeps running and the output is
/// exact. Ignored by default: it needs the earlier build
/// (docs/operations.md, "Rolling upgrades").
#[test]
#[ignore = "needs an earlier build's binary in WEIR_OLD_BINARY"]
fn a_rolling_upgrade_from_an_earlier_build_is_exact() {
    let old = PathBuf::from(
        std::env::var("WEIR_OLD_BINARY").expect("WEIR_OLD_BINARY names an earlier build's weir"),
    );
    let (_tmp, dir) = test_dir();
    let mut rng = Rng::new(seed());
    let mut c = Cluster::new(&dir, Storage::Shared(dir.join("shared")));
    let (lines, expected) = word_lines(rng.next_u64(), 30_000, 10, 2_000);
    c.binaries.insert(0, old.clone());
    c.binaries.insert(1, old);
    c.start(0);
    c.start(1);
    c.wait_all_tasks_owned(Duration::from_secs(60));
    let feeder = feed(&c.input, lines, 500, Duration::from_millis(400));
    std::thread::sleep(Duration::from_secs(4));
    // Two of the earlier build and one of this.
    c.start(2);
    c.wait_owns_a_task(2, Duration::from_secs(60));
    std::thread::sleep(Duration::from_secs(4));
    for i in [0, 1] {
        c.stop(i);
        c.binaries.remove(&i);
        c.start(i);
        // The log is appended to: the admin address is the new process's
        // once it logged its own.
        assert!(c.running.get_mut(&i).unwrap().wait_for_log(
            "admin endpoint listening",
            2,
            Duration::from_secs(30)
        ));
        c.wait_owns_a_task(i, Duration::from_secs(60));
        std::thread::sleep(Duration::from_secs(4));
    }
    feeder.join().unwrap();
    c.assert_exact(&expected);
    c.assert_all_running();
    let logs = c.full_logs();
    assert!(
        !logs.contains("unknown repartition record type") && !logs.contains("restarting"),
        "{}",
        c.logs()
    );
    for i in 0..3 {
        c.stop(i);
    }
}

/// Test 4: an instance paused until its tasks moved is fenced when it
/// wakes up: it exits with a message, and none of its output is visible.
#[test]
fn a_paused_instance_is_fenced_and_its_output_never_visible() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(seed());
    let mut c = Cluster::new(dir.path(), Storage::Shared(dir.path().join("shared")));
    let (lines, expected) = word_lines(rng.next_u64(), 8_000, 10, 2_000);
    let (first, rest) = lines.split_at(4_000);
    c.start(0);
    c.start(1);
    produce(&c.input, 4, first);
    c.wait_all_tasks_owned(Duration::from_secs(60));
    // Pause i0 in the middle of its work.
    let feeder = feed(&c.input, rest.to_vec(), 250, Duration::from_millis(200));
    // i0 must own a task to lose; under load the split takes a moment.
    c.wait_owns_a_task(0, Duration::from_secs(30));
    assert!(
        !c.tasks_of(0).is_empty(),
        "i0 owns no task to lose:\n{}",
        c.logs()
    );
    let pid = c.running[&0].pid();
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    // i1 takes everything over once the session times out.
    let started = Instant::now();
    while c.tasks_of(1).len() < TASKS as usize {
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "tasks never moved to i1:\n{}",
            c.logs()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    feeder.join().unwrap();
    unsafe { libc::kill(pid, libc::SIGCONT) };
    let mut zombie = c.running.remove(&0).unwrap();
    let status = zombie
        .wait(Duration::from_secs(60))
        .unwrap_or_else(|| panic!("the zombie did not exit:\n{}", log_tail(&zombie.log_text())));
    assert!(!status.success(), "the zombie exited successfully");
    let log = zombie.log_text();
    assert!(
        log.contains("fenced by the consumer group"),
        "the zombie's message does not say it was fenced:\n{}",
        log_tail(&log)
    );
    c.assert_exact(&expected);
    c.stop(1);
}

/// The committed pointer of each task in the group: manifest key by task.
fn committed_pointers(group: &str, topic: &str) -> BTreeMap<u32, String> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("group.id", group)
        .set("isolation.level", "read_committed")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for t in 0..TASKS as i32 {
        tpl.add_partition(topic, t);
    }
    let got = consumer
        .committed_offsets(tpl, Duration::from_secs(30))
        .unwrap();
    got.elements()
        .iter()
        .filter(|e| matches!(e.offset(), Offset::Offset(_)))
        .map(|e| {
            let key = e
                .metadata()
                .strip_prefix("weir-task=")
                .unwrap_or_else(|| {
                    panic!("task {} has no pointer: {:?}", e.partition(), e.metadata())
                })
                .to_string();
            (e.partition() as u32, key)
        })
        .collect()
}

fn files_below(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            if e.file_type().unwrap().is_dir() {
                stack.push(e.path());
            } else {
                out.push(e.path().strip_prefix(dir).unwrap().display().to_string());
            }
        }
    }
    out.sort();
    out
}

/// Test 5: after many checkpoints, and after tasks changed hands, storage
/// holds only what the retained checkpoints reach, and every committed
/// pointer resolves.
#[test]
fn garbage_collection_keeps_exactly_what_retained_checkpoints_reach() {
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("shared");
    let mut rng = Rng::new(seed());
    let mut c = Cluster::new(dir.path(), Storage::Shared(shared.clone()));
    c.interval = "200ms".into();
    c.timeout = "2s".into();
    let (lines, expected) = word_lines(rng.next_u64(), 12_000, 10, 2_000);
    c.start(0);
    c.start(1);
    let feeder = feed(&c.input, lines, 300, Duration::from_millis(300));
    std::thread::sleep(Duration::from_secs(6));
    // i1's tasks move to i0, whose checkpoints then reference i1's files.
    c.stop(1);
    feeder.join().unwrap();
    c.assert_exact(&expected);
    // Past the grace period for other writers' files (2 × checkpoint.timeout).
    std::thread::sleep(Duration::from_secs(5));
    produce(&c.input, 4, &["late words arrive".to_string()]);
    std::thread::sleep(Duration::from_secs(12));
    c.stop(0);
    let job = shared.join(&c.name);
    let pointers = committed_pointers(
        &format!("weir-{}-{}", c.name, c.output),
        &format!("{}.word-count.repartition", c.name),
    );
    assert_eq!(
        pointers.len(),
        TASKS as usize,
        "every task has a committed checkpoint"
    );
    let mut checkpoints = 0;
    for t in 0..TASKS {
        // The job graph's layout: each stage's tasks under its head's uid.
        let folder = job.join(format!("stages/word-count/{t:04}"));
        let all = files_below(&folder);
        let manifests: Vec<&String> = all.iter().filter(|f| f.starts_with("manifests/")).collect();
        assert!(
            !manifests.is_empty() && manifests.len() <= 2,
            "task {t} keeps {} manifests (retained = 2): {manifests:?}",
            manifests.len()
        );
        let committed = &pointers[&t];
        assert!(
            job.join(committed).exists(),
            "task {t}: the committed pointer {committed} does not resolve"
        );
        let mut reached = std::collections::BTreeSet::new();
        for m in &manifests {
            let v: serde_json::Value =
                serde_json::from_slice(&std::fs::read(folder.join(m)).unwrap()).unwrap();
            for f in v["files"].as_array().unwrap() {
                let key = f["key"].as_str().unwrap().to_string();
                assert!(
                    job.join(&key).exists(),
                    "task {t}: {m} references missing {key}"
                );
                reached.insert(key);
            }
            checkpoints += 1;
        }
        let unreached: Vec<&String> = all
            .iter()
            .filter(|f| f.starts_with("files/"))
            .filter(|f| !reached.contains(&format!("stages/word-count/{t:04}/{f}")))
            .collect();
        assert!(
            unreached.is_empty(),
            "task {t}: files no retained checkpoint reaches: {unreached:?}"
        );
    }
    eprintln!("{checkpoints} retained task checkpoints, all files reached");
    // The repartition topic is trimmed behind the committed offsets.
    let probe: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .create()
        .unwrap();
    let repartition = format!("{}.word-count.repartition", c.name);
    let trimmed: i64 = (0..TASKS as i32)
        .map(|p| {
            probe
                .fetch_watermarks(&repartition, p, Duration::from_secs(10))
                .unwrap()
                .0
        })
        .sum();
    assert!(trimmed > 0, "nothing of {repartition} was trimmed");
}

/// Test 6: a committed checkpoint whose object is damaged or missing is
/// refused by the new owner, naming task and object; the task never starts
/// from empty state.
#[test]
fn a_damaged_or_missing_checkpoint_object_is_refused_naming_task_and_object() {
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("shared");
    let mut c = Cluster::new(dir.path(), Storage::Shared(shared.clone()));
    let (lines, expected) = word_lines(seed(), 2_000, 10, 500);
    c.start(0);
    produce(&c.input, 4, &lines);
    c.assert_exact(&expected);
    c.stop(0);
    let pointers = committed_pointers(
        &format!("weir-{}-{}", c.name, c.output),
        &format!("{}.word-count.repartition", c.name),
    );
    let job = shared.join(&c.name);
    let (task, manifest) = pointers
        .iter()
        .next()
        .map(|(t, m)| (*t, m.clone()))
        .unwrap();
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(job.join(&manifest)).unwrap()).unwrap();
    // The largest file: with a small state that is the copied WAL.
    let sst = v["files"]
        .as_array()
        .unwrap()
        .iter()
        .max_by_key(|f| f["size_bytes"].as_u64().unwrap())
        .map(|f| f["key"].as_str().unwrap().to_string())
        .expect("the checkpoint has files");
    let before = read_topic(
        &c.output,
        Isolation::Committed,
        Duration::from_secs(30),
        Duration::from_secs(2),
        |r| r.len() as u64 >= expected.values().sum::<u64>(),
    )
    .len();

    // Same length, other bytes; then the object gone. Each time a new
    // machine (an empty state folder) must download the checkpoint.
    let path = job.join(&sst);
    let len = std::fs::metadata(&path).unwrap().len() as usize;
    std::fs::write(&path, vec![0x5a; len]).unwrap();
    for (case, needle) in [("damaged", "is damaged"), ("missing", "is missing")] {
        if case == "missing" {
            std::fs::remove_file(&path).unwrap();
        }
        let _ = std::fs::remove_dir_all(dir.path().join("i0/state"));
        let log = c.start_refused(0, case, Duration::from_secs(60));
        assert!(
            log.contains(&format!("task {task}")) && log.contains(&sst) && log.contains(needle),
            "{case}: the message does not name task {task} and {sst}:\n{}",
            log_tail(&log)
        );
        assert!(
            !log.contains(&format!(
                "task starts with empty state: the group has no offset for it task={task}"
            )),
            "{case}: task {task} started from empty state"
        );
    }
    let after = read_topic(
        &c.output,
        Isolation::Committed,
        Duration::from_secs(10),
        Duration::from_secs(2),
        |_| true,
    )
    .len();
    assert_eq!(before, after, "output was committed after the refusal");
}

/// A repartition topic whose partition count differs from `scale.tasks`
/// is refused with a message naming both.
#[test]
fn a_different_task_count_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = Cluster::new(dir.path(), Storage::Shared(dir.path().join("shared")));
    create_topic(&format!("{}.word-count.repartition", c.name), 3);
    c.start(0);
    let mut w = c.running.remove(&0).unwrap();
    let status = w.wait(Duration::from_secs(60)).expect("the instance exits");
    assert!(!status.success());
    let log = w.log_text();
    assert!(
        log.contains("has 3 partitions but scale.tasks = 8"),
        "{}",
        log_tail(&log)
    );
}

/// Issue #38 item 5: a repartition topic whose `max.message.bytes` is
/// below the producer's `message.max.bytes` would take a record the
/// producer accepts and then refuse it at the broker, failing every
/// transaction holding it: refused at start, naming both keys.
#[test]
fn a_repartition_topic_smaller_than_the_producers_records_is_refused_naming_both_keys() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = Cluster::new(dir.path(), Storage::Shared(dir.path().join("shared")));
    create_topic_with(
        &format!("{}.word-count.repartition", c.name),
        TASKS as i32,
        &[("max.message.bytes", "500000")],
    );
    c.start(0);
    let mut w = c.running.remove(&0).unwrap();
    let status = w
        .wait(Duration::from_secs(60))
        .unwrap_or_else(|| panic!("the instance kept running:\n{}", log_tail(&w.log_text())));
    assert!(!status.success());
    let log = w.log_text();
    assert!(
        log.contains("max.message.bytes = 500000")
            && log.contains("message.max.bytes = 1000000")
            && log.contains("--add-config max.message.bytes=1000061"),
        "{}",
        log_tail(&log)
    );
}

/// `lines` more lines of ten words over `vocabulary`, their counts added
/// to `expected`.
fn more_lines(
    rng: &mut Rng,
    lines: usize,
    vocabulary: u64,
    expected: &mut HashMap<String, u64>,
) -> Vec<String> {
    let (out, counts) = word_lines(rng.next_u64(), lines, 10, vocabulary);
    for (w, n) in counts {
        *expected.entry(w).or_insert(0) += n;
    }
    out
}

/// Deletes every record of `topic`'s 4 partitions, as retention would.
fn delete_to_end(topic: &str) {
    use rdkafka::admin::AdminOptions;
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .create()
        .unwrap();
    let mut ends = TopicPartitionList::new();
    for p in 0..4 {
        let (_, high) = consumer
            .fetch_watermarks(topic, p, Duration::from_secs(10))
            .unwrap();
        ends.add_partition_offset(topic, p, Offset::Offset(high))
            .unwrap();
    }
    let (admin, rt) = admin();
    rt.block_on(admin.delete_records(&ends, &AdminOptions::new()))
        .unwrap();
}

/// The log's warnings about input deleted before it was read, and the
/// records they say went unread.
fn unread_by_retention(log: &str) -> (Vec<&str>, u64) {
    let warnings: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("deleted by the topic's retention before they were read"))
        .collect();
    let lost = warnings
        .iter()
        .map(|l| {
            l.split("lost=")
                .nth(1)
                .and_then(|r| r.split_whitespace().next())
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or_else(|| panic!("no lost= in {l}"))
        })
        .sum();
    (warnings, lost)
}

/// An admin client of the broker, and a runtime to wait on its calls.
fn admin() -> (
    rdkafka::admin::AdminClient<rdkafka::client::DefaultClientContext>,
    tokio::runtime::Runtime,
) {
    let admin = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .create()
        .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    (admin, rt)
}

/// Deletes consumer group `group` (it must have no members), as an
/// operator's `kafka-consumer-groups.sh --delete` or an offsets expiry
/// does.
fn delete_group(group: &str) {
    use rdkafka::admin::AdminOptions;
    let (admin, rt) = admin();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let results = rt
            .block_on(admin.delete_groups(&[group], &AdminOptions::new()))
            .unwrap();
        match &results[0] {
            Ok(_) => return,
            // The stopped member may take a moment to leave.
            Err((_, code)) if Instant::now() < deadline => {
                eprintln!("delete group {group}: {code:?}; retrying");
                std::thread::sleep(Duration::from_millis(500));
            }
            Err(e) => panic!("delete group {group}: {e:?}"),
        }
    }
}

/// Issue #18, hole 1: the group's offsets are lost (the group deleted
/// while every instance is down) while storage holds the checkpoints its
/// tasks committed. A restarted instance refuses to start, naming a task
/// and `weir reset`, and writes nothing. After `weir reset` the job starts
/// over on purpose: empty state, the input from the source's start, and
/// nothing the job wrote into its repartition topic before read again, so
/// the output holds every count of the first run and every count of the
/// second, each exactly once.
#[test]
fn lost_group_offsets_are_refused_until_weir_reset_starts_the_job_over() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = Cluster::new(dir.path(), Storage::Shared(dir.path().join("shared")));
    let (lines, expected) = word_lines(seed(), 2_000, 10, 500);
    let total: u64 = expected.values().sum();
    let reset = |c: &Cluster| {
        std::process::Command::new(WEIR)
            .args(["reset", "--config"])
            .arg(c.config(0))
            .output()
            .unwrap()
    };
    c.start(0);
    produce(&c.input, 4, &lines);
    c.assert_exact(&expected);
    // Refused while an instance runs, naming it, and it goes on unharmed.
    let refused = reset(&c);
    assert!(
        !refused.status.success()
            && String::from_utf8_lossy(&refused.stderr).contains("stop every instance")
            && String::from_utf8_lossy(&refused.stderr).contains("weir-instance-i0"),
        "reset with a running instance: {:?} {}",
        refused.status,
        String::from_utf8_lossy(&refused.stderr)
    );
    eprintln!(
        "reset refused: {}",
        String::from_utf8_lossy(&refused.stderr).trim()
    );
    c.assert_alive();
    c.stop(0);
    let group = format!("weir-{}-{}", c.name, c.output);
    delete_group(&group);

    let log = c.start_refused(0, "without the group's offsets", Duration::from_secs(120));
    assert!(
        log.contains("no committed offset")
            && log.contains("task ")
            && log.contains("weir reset --config"),
        "the refusal does not say what and what to do:\n{}",
        log_tail(&log)
    );
    eprintln!(
        "refused: {}",
        log.lines().find(|l| l.contains("weir reset")).unwrap_or("")
    );
    assert!(
        !log.contains("task starts with empty state"),
        "a task started from empty state:\n{}",
        log_tail(&log)
    );
    let after = read_topic(
        &c.output,
        Isolation::Committed,
        Duration::from_secs(10),
        Duration::from_secs(2),
        |_| false,
    );
    assert_eq!(
        after.len() as u64,
        total,
        "output was committed after the refusal"
    );

    let done = reset(&c);
    assert!(
        done.status.success(),
        "weir reset failed: {}",
        String::from_utf8_lossy(&done.stderr)
    );
    let report = String::from_utf8_lossy(&done.stdout).to_string();
    assert!(
        report.contains(&format!("{TASKS} task partitions at their end"))
            && report.contains("4 input partitions"),
        "{report}"
    );

    c.start(0);
    let records = read_topic(
        &c.output,
        Isolation::Committed,
        Duration::from_secs(240),
        Duration::from_secs(3),
        |r| r.len() as u64 >= 2 * total,
    );
    c.stop(0);
    let got = weir_testkit::word_multiset(&records);
    let want: HashMap<(String, u64), u64> = weir_testkit::expected_multiset(&expected)
        .into_keys()
        .map(|k| (k, 2))
        .collect();
    if got != want {
        eprintln!("{}", c.logs());
    }
    assert_eq!(records.len() as u64, 2 * total, "records after the reset");
    assert_eq!(got, want, "each count of both runs exactly once");
}

/// Issue #18, hole 3: with `source.start = "latest"` the input partitions
/// start at their end as the job found it, and stay there until a commit
/// records it. Here the first three commits are refused (as a second
/// instance joining would have them refused) under a steady feed: each
/// refusal takes the instance back to that start, not to the end of the
/// moment, so every record fed after the start counts, exactly once. What
/// was in the topic before the start is not read.
#[test]
fn latest_start_loses_nothing_when_the_first_commits_are_refused() {
    let (_keep, base) = test_dir();
    let mut rng = Rng::new(seed());
    let mut c = Cluster::new(&base, Storage::Shared(base.join("checkpoints")));
    // The feed starts at once and lasts about 3 s: the refused commits, a
    // second apart, each come with records in their epoch.
    c.interval = "1s".into();
    c.start = "latest";
    let (old, _) = word_lines(rng.next_u64(), 500, 10, 2_000);
    produce(&c.input, 4, &old);
    let (lines, expected) = word_lines(rng.next_u64(), 6_000, 10, 2_000);
    c.start_with(0, &[("FAILPOINTS", "group-commit-refused=3*return")]);
    let w = c.running.get_mut(&0).unwrap();
    assert!(
        w.wait_for_log(
            "assigned partitions restored and resumed",
            1,
            Duration::from_secs(60)
        ),
        "the instance did not start:\n{}",
        log_tail(&w.log_text())
    );
    let log = w.log_text();
    assert_eq!(
        log.matches("input partition without a committed offset starts here")
            .count(),
        4,
        "{}",
        log_tail(&log)
    );
    let feeder = feed(&c.input, lines, 200, Duration::from_millis(100));
    feeder.join().unwrap();
    c.assert_exact(&expected);
    let log = std::fs::read_to_string(base.join("i0/weir.log")).unwrap();
    let refused = log.matches("failpoint group-commit-refused").count();
    assert_eq!(refused, 3, "refused commits:\n{}", c.logs());
    // Counted where an operator looks: `/tasks` and the metric.
    let w = c.running.get_mut(&0).unwrap();
    let addr = w.admin_addr(Duration::from_secs(30));
    let (status, body) = http(&addr, "GET", "/tasks", None);
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["commits_refused"], 3, "{body}");
    assert_eq!(v["commits_refused_in_a_row"], 0, "{body}");
    let (_, metrics) = http(&addr, "GET", "/metrics", None);
    assert!(
        metrics.contains("weir_group_commits_refused_total 3"),
        "{metrics}"
    );
    c.assert_alive();
    c.stop(0);
}

/// Issue #18, hole 6: an instance started with another
/// `job.max_parallelism` routes rows by other key groups. Each writer's
/// first record on a repartition partition in every transaction carries
/// its `job.max_parallelism` and `scale.tasks`; the task that reads
/// another instance's refuses it, naming both settings, before any of its
/// rows could put a key's state where no task looks for it (a row of a
/// key group the task does not own is refused too, as a second guard);
/// nothing wrong is committed.
#[test]
fn another_instances_settings_are_refused_before_its_rows() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = Cluster::new(dir.path(), Storage::Shared(dir.path().join("shared")));
    // A new job, so that no checkpoint's key groups refuse the second
    // instance first: the rows themselves must. A long epoch keeps the
    // first instance from committing task checkpoints (its first epoch
    // carries the sources' marks to every task) before the second joins.
    c.interval = "5s".into();
    c.start(0);
    c.start_with(1, &[("WEIR__JOB__MAX_PARALLELISM", "64")]);
    c.wait_all_tasks_owned(Duration::from_secs(90));
    let (lines, expected) = word_lines(seed(), 2_000, 10, 300);
    produce(&c.input, 4, &lines);
    let started = Instant::now();
    // Every writer's first record on a partition in each transaction is
    // its settings, so the reading task refuses the other instance's
    // before any of its rows, whatever their keys.
    let refusal = loop {
        let logs = c.logs();
        if let Some(line) = logs
            .lines()
            .find(|l| l.contains("writes with job.max_parallelism") || l.contains("which task"))
        {
            break line.to_string();
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "no instance refused the other's rows:\n{logs}"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    eprintln!("refused: {refusal}");
    assert!(
        refusal.contains("writes with job.max_parallelism = ")
            && refusal.contains("scale.tasks = 8")
            && refusal.contains("must have the same"),
        "not refused by the writer's settings: {refusal}"
    );
    for i in [0, 1] {
        c.kill9(i);
    }
    // Whatever was committed is a true prefix of each key's counts: no
    // count twice, none beyond the truth.
    let records = read_topic(
        &c.output,
        Isolation::Committed,
        Duration::from_secs(10),
        Duration::from_secs(2),
        |_| false,
    );
    let got = weir_testkit::word_multiset(&records);
    let mut wrong: Vec<String> = got
        .iter()
        .filter(|((w, n), times)| **times != 1 || *n > expected.get(w).copied().unwrap_or(0))
        .map(|(k, t)| format!("{k:?} x{t}"))
        .collect();
    wrong.sort();
    assert!(wrong.is_empty(), "{:?}", &wrong[..wrong.len().min(10)]);
}

/// Issue #18, hole 2: a paused instance (a zombie) whose tasks moved on
/// stops, and on its way out collects storage with its stale view of
/// them. It must not delete what the tasks' new owner committed: after a
/// wait past the grace period, the SIGTERM and the SIGCONT, the new owner
/// restores every task by download (its local state wiped) and the output
/// stays exact.
#[test]
fn a_zombie_never_collects_what_the_new_owner_committed() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(seed());
    let mut c = Cluster::new(dir.path(), Storage::Shared(dir.path().join("shared")));
    let (first, mut expected) = word_lines(rng.next_u64(), 2_000, 10, 1_000);
    c.start(0);
    c.start(1);
    c.wait_all_tasks_owned(Duration::from_secs(60));
    c.wait_owns_a_task(0, Duration::from_secs(30));
    produce(&c.input, 4, &first);
    c.assert_exact(&expected);
    let pid = c.running[&0].pid();
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    let started = Instant::now();
    while c.tasks_of(1).len() < TASKS as usize {
        assert!(
            started.elapsed() < Duration::from_secs(90),
            "tasks never moved to i1:\n{}",
            c.logs()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    // A burst the new owner commits, then quiet past the grace period
    // (2 × checkpoint.timeout = 10 s): its manifests are old enough for a
    // collector that takes them for aborted ones.
    let burst = more_lines(&mut rng, 2_000, 1_000, &mut expected);
    produce(&c.input, 4, &burst);
    c.assert_exact(&expected);
    std::thread::sleep(Duration::from_secs(12));
    unsafe {
        libc::kill(pid, libc::SIGTERM);
        libc::kill(pid, libc::SIGCONT);
    }
    let mut zombie = c.running.remove(&0).unwrap();
    zombie
        .wait(Duration::from_secs(60))
        .unwrap_or_else(|| panic!("the zombie did not exit:\n{}", log_tail(&zombie.log_text())));

    // Every task's committed pointer still names a manifest whose files
    // are all there; a restore by download succeeds.
    c.stop(1);
    let job = dir.path().join("shared").join(&c.name);
    let pointers = committed_pointers(
        &format!("weir-{}-{}", c.name, c.output),
        &format!("{}.word-count.repartition", c.name),
    );
    assert_eq!(pointers.len(), TASKS as usize, "{pointers:?}");
    for (task, key) in &pointers {
        let bytes = std::fs::read(job.join(key))
            .unwrap_or_else(|e| panic!("task {task}: committed manifest {key}: {e}"));
        let m: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        for f in m["files"].as_array().unwrap() {
            let k = f["key"].as_str().unwrap();
            assert!(
                job.join(k).exists(),
                "task {task}: {k} of {key} was deleted"
            );
        }
    }
    std::fs::remove_dir_all(dir.path().join("i1/state")).unwrap();
    let last = more_lines(&mut rng, 500, 1_000, &mut expected);
    c.start(1);
    produce(&c.input, 4, &last);
    c.assert_exact(&expected);
    c.assert_alive();
    c.stop(1);
}

/// An input partition whose committed offset the topic's retention passed
/// while every instance was down starts at its first offset, and the
/// instance says so, naming the partition and how many records went
/// unread; the output goes on exactly from there.
#[test]
fn input_deleted_by_retention_while_down_is_skipped_with_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(seed());
    let mut c = Cluster::new(dir.path(), Storage::Shared(dir.path().join("shared")));
    let (first, mut expected) = word_lines(rng.next_u64(), 1_000, 10, 300);
    c.start(0);
    produce(&c.input, 4, &first);
    c.assert_exact(&expected);
    c.stop(0);
    // Read by nobody, then deleted as retention would delete it.
    let (unread, _) = word_lines(rng.next_u64(), 400, 10, 300);
    produce(&c.input, 4, &unread);
    delete_to_end(&c.input);
    let last = more_lines(&mut rng, 500, 300, &mut expected);
    c.start(0);
    produce(&c.input, 4, &last);
    c.assert_exact(&expected);
    let log = std::fs::read_to_string(dir.path().join("i0/weir.log")).unwrap();
    let (warnings, lost) = unread_by_retention(&log);
    assert_eq!(warnings.len(), 4, "{}", log_tail(&log));
    assert_eq!(lost, 400, "{warnings:?}");
    c.assert_alive();
    c.stop(0);
}

/// Issue #18, hole 3: every partition is assigned at an explicit offset and
/// the group consumer's `auto.offset.reset` is `error`. Records deleted
/// while a running instance had not read them yet (it is paused for a
/// moment, short of its session timeout) put its fetch position out of
/// range: the attempt stops naming it and restarts, and the restart skips
/// to the first offset with the warning and the count a user can see
/// (librdkafka's own reset to `earliest` skipped them silently).
///
/// A fetch the instance sent before it was paused stays parked at the
/// broker and is answered with the first new records, which wait in the
/// socket until the instance resumes: those few were read before the
/// deletion, and must be counted, not skipped. The warnings say where each
/// partition's reading stopped (`committed=`), so the test expects exactly
/// the records below it and the count of the rest.
#[test]
fn input_deleted_under_a_running_instance_is_not_skipped_silently() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(seed());
    let mut c = Cluster::new(dir.path(), Storage::Shared(dir.path().join("shared")));
    let (first, mut expected) = word_lines(rng.next_u64(), 1_000, 10, 300);
    c.start(0);
    produce(&c.input, 4, &first);
    c.assert_exact(&expected);
    let (unread, _) = word_lines(rng.next_u64(), 400, 10, 300);
    let base = high_watermarks(&c.input);
    let pid = c.running[&0].pid();
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    produce(&c.input, 4, &unread);
    delete_to_end(&c.input);
    unsafe { libc::kill(pid, libc::SIGCONT) };
    let last = more_lines(&mut rng, 500, 300, &mut expected);
    produce(&c.input, 4, &last);
    // Wait for the restart's warnings: they say what was read before the
    // deletion (a partition without one had every record read).
    let log_path = dir.path().join("i0/weir.log");
    let deadline = Instant::now() + Duration::from_secs(120);
    let log = loop {
        let log = std::fs::read_to_string(&log_path).unwrap_or_default();
        if log.contains("deleted by the topic's retention before they were read")
            || Instant::now() > deadline
        {
            break log;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let (warnings, lost) = unread_by_retention(&log);
    let mut read = 0;
    for (p, &base) in base.iter().enumerate() {
        let warning = warnings
            .iter()
            .find(|l| l.contains(&format!(" partition={p} ")));
        let committed = match warning {
            Some(l) => {
                assert_eq!(
                    field(l, "first"),
                    base + 100,
                    "partition {p}'s first offset after the deletion: {l}"
                );
                field(l, "committed")
            }
            None => base + 100,
        };
        assert!(
            committed >= base,
            "partition {p} committed {committed}, below the {} read before the pause",
            base
        );
        // Round robin: partition p holds unread[p], unread[p + 4], ...
        let taken = (committed - base) as usize;
        for line in unread.iter().skip(p).step_by(4).take(taken) {
            for w in line.split_whitespace() {
                *expected.entry(w.to_lowercase()).or_insert(0) += 1;
            }
        }
        read += taken as u64;
    }
    eprintln!("read before the deletion: {read}, counted as lost: {lost}");
    c.assert_exact(&expected);
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(
        log.contains("fetch position is out of range"),
        "{}",
        log_tail(&log)
    );
    assert!(lost > 0, "{}", log_tail(&log));
    assert_eq!(
        lost + read,
        400,
        "records counted as lost and read before the deletion: {warnings:?}"
    );
    c.assert_alive();
    c.stop(0);
}

/// Each of `topic`'s 4 partitions' high watermark.
fn high_watermarks(topic: &str) -> Vec<i64> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .create()
        .unwrap();
    (0..4)
        .map(|p| {
            consumer
                .fetch_watermarks(topic, p, Duration::from_secs(10))
                .unwrap()
                .1
        })
        .collect()
}

/// A `name=<integer>` field of a log line.
fn field(line: &str, name: &str) -> i64 {
    line.split(&format!(" {name}="))
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no {name}= in {line}"))
}

/// Issue #18, hole 6 (in part): a restart finds the committed checkpoint's
/// local copy damaged (a file of the right size, other bytes). It is not
/// linked into the task's database: the instance says so, naming the file,
/// downloads the checkpoint from storage instead, and stays exact.
#[test]
fn a_damaged_local_copy_is_downloaded_again_not_linked() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(seed());
    let mut c = Cluster::new(dir.path(), Storage::Shared(dir.path().join("shared")));
    let (first, mut expected) = word_lines(rng.next_u64(), 2_000, 10, 500);
    c.start(0);
    produce(&c.input, 4, &first);
    c.assert_exact(&expected);
    c.stop(0);
    // The largest SST file of one task's committed local snapshot (the
    // state itself: group mode flushes before each snapshot).
    let stage = dir
        .path()
        .join("i0/state")
        .join(&c.name)
        .join("stages/word-count/0000/snapshots");
    let folder = std::fs::read_dir(&stage)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.join("WEIR-MANIFEST-KEY").exists())
        .unwrap_or_else(|| panic!("no committed local snapshot in {}", stage.display()));
    let largest = files_below(&folder)
        .into_iter()
        .map(|f| folder.join(f))
        .filter(|p| p.extension().is_some_and(|e| e == "sst"))
        .max_by_key(|p| std::fs::metadata(p).unwrap().len())
        .unwrap_or_else(|| panic!("no SST file in {}", folder.display()));
    let len = std::fs::metadata(&largest).unwrap().len() as usize;
    // A hard link shares its bytes with the live database: replace it.
    std::fs::remove_file(&largest).unwrap();
    std::fs::write(&largest, vec![0x5a; len]).unwrap();

    let more = more_lines(&mut rng, 500, 500, &mut expected);
    c.start(0);
    produce(&c.input, 4, &more);
    c.assert_exact(&expected);
    let log = std::fs::read_to_string(dir.path().join("i0/weir.log")).unwrap();
    let name = largest.file_name().unwrap().to_string_lossy().to_string();
    assert!(
        log.lines().any(
            |l| l.contains("the local copy of the checkpoint is damaged") && l.contains(&name)
        ),
        "no warning naming {name}:\n{}",
        log_tail(&log)
    );
    assert!(
        log.lines()
            .any(|l| l.contains("task restored") && l.contains("task=0") && l.contains("download")),
        "task 0 was not downloaded:\n{}",
        log_tail(&log)
    );
    c.assert_alive();
    c.stop(0);
}

/// A checkpoint file is uploaded streamed (read in chunks; on S3 in parts
/// once it is larger than one part) and reads back byte for byte, with the
/// size and CRC-32 the manifest records, on a shared folder and on S3.
#[test]
fn a_file_larger_than_a_part_is_uploaded_streamed_and_reads_back_whole() {
    let tmp = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(seed());
    // 20 MiB and a bit: two whole 8 MiB parts and a short last one.
    let bytes: Vec<u8> = (0..(20 << 20) + 12_345)
        .map(|_| rng.below(256) as u8)
        .collect();
    let source = tmp.path().join("000042.sst");
    std::fs::write(&source, &bytes).unwrap();
    for storage in [Storage::Shared(tmp.path().join("shared")), Storage::s3()] {
        let cluster = Cluster::new(tmp.path(), storage.clone());
        let config = weir::config::Config::load(&cluster.config(0)).unwrap();
        let shared = weir::engine::group::storage::SharedStorage::open(&config).unwrap();
        let key = "stages/count/0000/files/w-1/000042.sst";
        let (size, crc) = shared.put_file(key, &source).unwrap();
        assert_eq!(size, bytes.len() as u64, "{}", shared.location);
        assert_eq!(crc, crc32fast::hash(&bytes), "{}", shared.location);
        let back = shared.get(key).unwrap().expect("the uploaded object");
        assert!(
            back == bytes,
            "{}: the object differs from the file",
            shared.location
        );
        let listed = shared.list("stages/count/0000").unwrap();
        assert_eq!(listed.len(), 1, "{}: {listed:?}", shared.location);
        assert_eq!(listed[0].size, bytes.len() as u64);
    }
}

/// Issue #18, hole 4 (in part): a restore by download that takes longer
/// than `max.poll.interval.ms` does not cost the instance its membership.
/// The committed checkpoints are made ready locally off the poll thread
/// (the instance keeps polling), then linked. Storage is S3 behind a link
/// whose downloads are slowed to 256 KiB/s for the instance that restores
/// (its uploads, on the poll thread still, go at full speed: issue #18's
/// hole 4 has them in the background next), which runs the classic
/// protocol with a 6 s session and poll interval.
#[test]
fn a_download_longer_than_the_poll_interval_keeps_the_membership() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(seed());
    let mut c = Cluster::new(dir.path(), Storage::s3());
    let (first, mut expected) = word_lines(rng.next_u64(), 40_000, 10, 4_000_000);
    c.start(0);
    produce(&c.input, 4, &first);
    c.assert_exact(&expected);
    c.stop(0);
    let endpoint = s3_endpoint();
    let slow = weir_testkit::Throttle::downloads(
        endpoint.trim_start_matches("http://").trim_end_matches('/'),
        256 * 1024,
    );
    c.s3_endpoint = Some(slow.url());
    // The classic protocol: the client's session timeout bounds the poll
    // interval from below (6 s is the broker's smallest session).
    c.protocol = "classic";
    c.properties =
        "\"session.timeout.ms\" = \"6000\"\n\"max.poll.interval.ms\" = \"6000\"\n".into();
    // A new machine: nothing local, every task downloaded.
    c.start(1);
    let last = more_lines(&mut rng, 500, 300, &mut expected);
    produce(&c.input, 4, &last);
    c.assert_exact(&expected);
    let log = std::fs::read_to_string(dir.path().join("i1/weir.log")).unwrap();
    let took: Vec<u64> = log
        .lines()
        .filter(|l| l.contains("checkpoint ready locally") && l.contains("downloaded"))
        .map(|l| log_field(l, "took_ms"))
        .collect();
    assert_eq!(took.len(), TASKS as usize, "{}", log_tail(&log));
    // The downloads together outlast the poll interval: the case is real.
    assert!(took.iter().sum::<u64>() > 6_000, "{took:?}");
    assert!(
        !log.contains("maximum poll interval") && !log.contains("fenced"),
        "{}",
        log_tail(&log)
    );
    c.assert_alive();
    c.stop(1);
}

/// Issue #18, hole 4: an epoch is bounded in time, however long its
/// checkpoint takes to upload. One task holds over 1 GB of state (18,000
/// distinct words of 64 KiB of random letters, which LZ4 cannot shrink),
/// loaded through a fast link to S3; transactions time out after 10 s,
/// checkpoints after 5 s, one every second. Then the link's uploads are
/// slowed to 20 MiB/s and a compaction of the whole store (a failpoint)
/// rewrites it into new SST files, queued for upload as RocksDB installs
/// them: over 1 GB to upload again (about a minute), while a feed goes
/// on. The instance declines the checkpoints that are not on storage in
/// time, keeps their output in its transaction and renews that before it
/// times out: it is never fenced and never restarts, and the output is
/// exact. A new instance on
/// an empty machine then restores the checkpoint committed after the
/// compaction and counts on exactly.
#[test]
fn a_checkpoint_upload_longer_than_the_transaction_timeout_loses_nothing() {
    let (_keep, base) = test_dir();
    let mut rng = Rng::new(seed());
    let mut c = Cluster::new(&base, Storage::s3());
    c.tasks = 1;
    c.interval = "1s".into();
    c.timeout = "5s".into();
    c.transaction_timeout_ms = 10_000;
    let endpoint = s3_endpoint();
    let slow = weir_testkit::Throttle::uploads(
        endpoint.trim_start_matches("http://").trim_end_matches('/'),
        1 << 30,
    );
    c.s3_endpoint = Some(slow.url());
    let trigger = base.join("compact-now");
    let failpoints = format!("group-compact-after-commit=return({})", trigger.display());
    c.start_with(
        0,
        &[
            ("FAILPOINTS", failpoints.as_str()),
            ("RUST_LOG", "info,weir::engine::group=debug"),
        ],
    );

    const WORD: usize = 64 << 10;
    let pool: Vec<u8> = (0..1 << 20).map(|_| b'a' + rng.below(26) as u8).collect();
    let big: Vec<String> = (0..18_000)
        .map(|i| {
            let mut w = format!("w{i:05}");
            let at = rng.below((pool.len() - WORD) as u64) as usize;
            w.push_str(std::str::from_utf8(&pool[at..at + WORD - w.len()]).unwrap());
            w
        })
        .collect();
    let mut expected: HashMap<String, u64> = big.iter().map(|w| (w.clone(), 1)).collect();
    produce(&c.input, 4, &big);
    c.assert_exact_within(&expected, Duration::from_secs(900));

    // The next commit is followed by a compaction of the whole store; a
    // feed goes on while its files upload through the slow link.
    slow.set_rate(20 << 20);
    std::fs::write(&trigger, b"").unwrap();
    let lines = more_lines(&mut rng, 3_000, 2_000, &mut expected);
    let feeder = feed(&c.input, lines, 50, Duration::from_secs(1));
    let started = Instant::now();
    while trigger.exists() {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "no compaction:\n{}",
            c.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    feeder.join().unwrap();
    c.assert_exact_within(&expected, Duration::from_secs(900));
    let log = std::fs::read_to_string(base.join("i0/weir.log")).unwrap();
    let compacted = log
        .lines()
        .find(|l| l.contains("store compacted whole"))
        .unwrap_or_else(|| panic!("no compaction logged:\n{}", log_tail(&log)));
    let after = &log[log.find(compacted).unwrap()..];
    // The compaction's files were queued for upload as RocksDB installed
    // them, before any snapshot.
    let queued = after
        .lines()
        .find(|l| l.contains("new SST files queued for upload before their checkpoint"))
        .unwrap_or_else(|| panic!("no eager upload after the compaction:\n{}", log_tail(after)));
    let queued_bytes = log_field(queued, "bytes");
    // At least 1 GB of state, as stored.
    assert!(queued_bytes >= 1_000_000_000, "{queued}");
    let declined = after.matches("checkpoint declined").count();
    let renewed = after.matches("transaction renewed").count();
    eprintln!(
        "after the compaction: {queued_bytes} bytes queued for upload before a snapshot, \
         {declined} checkpoints declined, {renewed} transactions renewed"
    );
    // The compaction's upload alone outlasts the transaction timeout
    // several times over (a renewal every 8 s): the case is real. A
    // checkpoint declined once is not tried again until its files are
    // stored.
    assert!(declined >= 1 && renewed >= 3, "{}", log_tail(after));
    assert!(
        !log.contains("fenced") && !log.contains("instance attempt failed"),
        "{}",
        log_tail(&log)
    );
    c.assert_alive();
    let w = c.running.get_mut(&0).unwrap();
    let addr = w.admin_addr(Duration::from_secs(30));
    let (_, metrics) = http(&addr, "GET", "/metrics", None);
    let value = |name: &str| -> f64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {metrics}"))
    };
    assert!(value("weir_group_checkpoints_declined_total") >= 1.0);
    assert!(value("weir_group_transactions_renewed_total") >= 3.0);
    assert_eq!(value("weir_restarts_total"), 0.0);
    c.stop(0);

    // A new machine: the checkpoint written after the compaction is
    // downloaded (at full speed) and the counts go on from it.
    c.s3_endpoint = None;
    c.start(1);
    let again: Vec<String> = big.iter().step_by(64).cloned().collect();
    for w in &again {
        *expected.get_mut(w).unwrap() += 1;
    }
    let last = more_lines(&mut rng, 200, 2_000, &mut expected);
    produce(&c.input, 4, &again);
    produce(&c.input, 4, &last);
    c.assert_exact_within(&expected, Duration::from_secs(600));
    c.assert_alive();
    c.stop(1);
}

/// The number a log line gives as `name=<n>`.
fn log_field(line: &str, name: &str) -> u64 {
    line.split(&format!(" {name}="))
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no {name}= in {line}"))
}

/// Runs `weir <args>`: exit code, stdout, stderr.
fn weir_cli(args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(WEIR)
        .args(args)
        .output()
        .expect("run weir");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `weir state scan --format json` lines of the word count: count by word.
fn scanned_counts(text: &str) -> HashMap<String, u64> {
    text.lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("a JSON line");
            (
                v["key"].as_str().unwrap().to_string(),
                v["count"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// Issue #17 (state as tables, read by `weir state` in both modes):
/// `weir state get|scan` and `weir checkpoints show` of a group-mode job
/// read the task checkpoints its consumer group has committed, from
/// shared storage, decoded by the operator's codec. Read while two
/// instances run, no count is above the true one; read after both
/// stopped, the state is exactly the word counts of the whole input, and
/// `show` lists every task with its manifest and the inputs at their end.
/// The read changes nothing: the group's committed pointers and (on a
/// shared folder) every stored file are the same before and after.
fn offline_state_reads_the_committed_task_checkpoints(storage: Storage, base: &Path) {
    let mut c = Cluster::new(base, storage.clone());
    let (lines, expected) = word_lines(seed(), 3_000, 8, 400);
    c.start(0);
    c.start(1);
    produce(&c.input, 4, &lines);
    c.assert_exact(&expected);
    let config = c.config(0);
    let config = config.to_str().unwrap();
    let scan = [
        "state",
        "scan",
        "--checkpoint",
        "latest",
        "--config",
        config,
        "--operator",
        "word-count",
        "--format",
        "json",
    ];
    let (code, scanned, err) = weir_cli(&scan);
    assert_eq!(code, 0, "scan while running: {err}");
    for (word, n) in scanned_counts(&scanned) {
        assert!(
            n <= expected[&word],
            "{word}: {n} read, {} in the input",
            expected[&word]
        );
    }
    c.stop(1);
    c.stop(0);

    let group = format!("weir-{}-{}", c.name, c.output);
    let topic = format!("{}.word-count.repartition", c.name);
    let pointers = committed_pointers(&group, &topic);
    assert_eq!(pointers.len(), TASKS as usize, "{pointers:?}");
    let stored = match &storage {
        Storage::Shared(dir) => Some(fingerprint(dir)),
        Storage::S3 { .. } => None,
    };

    let (code, scanned, err) = weir_cli(&scan);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        scanned_counts(&scanned),
        expected,
        "the committed state after both stopped"
    );

    let (code, shown, err) = weir_cli(&[
        "checkpoints",
        "show",
        "latest",
        "--config",
        config,
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    let shown: serde_json::Value = serde_json::from_str(&shown).expect("show --format json");
    let tasks = shown["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), TASKS as usize, "{shown}");
    for t in tasks {
        let task = t["task"].as_u64().unwrap() as u32;
        assert_eq!(t["stage"], "word-count", "{t}");
        assert_eq!(
            t["manifest"].as_str(),
            Some(pointers[&task].as_str()),
            "{t}"
        );
    }
    let keys: u64 = shown["subtasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["keys"].as_u64().unwrap())
        .sum();
    assert_eq!(keys as usize, expected.len(), "{shown}");
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .create()
        .unwrap();
    let offsets = shown["source_offsets"].as_array().unwrap();
    assert_eq!(offsets.len(), 4, "{shown}");
    for o in offsets {
        let p = o["partition"].as_i64().unwrap() as i32;
        let (_, end) = consumer
            .fetch_watermarks(&c.input, p, Duration::from_secs(10))
            .unwrap();
        assert_eq!(o["offset"].as_i64(), Some(end), "input {p}: {shown}");
    }
    let (code, text, err) = weir_cli(&["checkpoints", "show", "latest", "--config", config]);
    assert_eq!(code, 0, "{err}");
    assert!(
        text.contains("group-mode job") && text.contains(&pointers[&0]),
        "{text}"
    );

    let (word, count) = expected.iter().max_by_key(|(_, n)| **n).unwrap();
    let get = |key: &str, operator: &str| {
        weir_cli(&[
            "state",
            "get",
            "--checkpoint",
            "latest",
            "--config",
            config,
            "--operator",
            operator,
            "--key",
            key,
        ])
    };
    let (code, got, err) = get(word, "word-count");
    assert_eq!(code, 0, "{err}");
    assert_eq!(got.trim(), format!("{word}\t{count}"));
    let (code, got, err) = get("no-such-word", "word-count");
    assert_eq!((code, got.as_str()), (1, ""), "{err}");
    assert!(err.contains("no key \"no-such-word\""), "{err}");
    let (code, _, err) = get(word, "nope");
    assert_eq!(code, 1);
    assert!(
        err.contains("operator \"nope\"") && err.contains("word-count"),
        "{err}"
    );
    let (code, _, err) = weir_cli(&["checkpoints", "show", "3", "--config", config]);
    assert_eq!(code, 1);
    assert!(
        err.contains("group mode") && err.contains("latest"),
        "{err}"
    );

    assert_eq!(
        committed_pointers(&group, &topic),
        pointers,
        "reading moved the group's offsets"
    );
    if let (Storage::Shared(dir), Some(before)) = (&storage, stored) {
        assert_eq!(
            fingerprint(dir),
            before,
            "reading modified {}",
            dir.display()
        );
    }
}

/// Every file under `dir` with its length and contents hash.
fn fingerprint(dir: &Path) -> BTreeMap<String, (u64, u64)> {
    use std::hash::{Hash, Hasher};
    files_below(dir)
        .into_iter()
        .map(|f| {
            let bytes = std::fs::read(dir.join(&f)).unwrap();
            let mut h = std::collections::hash_map::DefaultHasher::new();
            bytes.hash(&mut h);
            (f, (bytes.len() as u64, h.finish()))
        })
        .collect()
}

#[test]
fn shared_folder_offline_state_reads_the_committed_task_checkpoints() {
    let (_tmp, dir) = test_dir();
    offline_state_reads_the_committed_task_checkpoints(Storage::Shared(dir.join("shared")), &dir);
}

#[test]
fn s3_offline_state_reads_the_committed_task_checkpoints() {
    let (_tmp, dir) = test_dir();
    offline_state_reads_the_committed_task_checkpoints(Storage::s3(), &dir);
}
