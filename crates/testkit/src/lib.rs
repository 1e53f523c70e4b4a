//! Helpers for black-box tests and benchmarks against a real broker: topics,
//! input generation, an independent read_committed reader, and the `weir`
//! process itself. The reader is a plain rdkafka consumer, not weir's code
//! path, so a bug in weir's Kafka handling cannot hide from it.

pub mod nexmark;
pub mod sql;
pub mod throttle;
pub use throttle::Throttle;

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, Once};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};

/// The broker tests use: `WEIR_TEST_BOOTSTRAP`, default `127.0.0.1:9092`
/// (what `scripts/kafka.sh start` runs).
pub fn bootstrap() -> String {
    std::env::var("WEIR_TEST_BOOTSTRAP").unwrap_or_else(|_| "127.0.0.1:9092".into())
}

/// A name no other test run uses. The process remembers it: when the
/// process exits, every topic whose name contains it (the topic itself, or
/// one weir derived from a job name, such as `<job>.<uid>.repartition`)
/// is deleted ([`delete_topics_of_this_process`]).
pub fn unique(prefix: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let name = format!(
        "{prefix}-{}-{t}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    );
    remember(&name);
    name
}

/// Names [`unique`] handed out in this process.
static NAMES: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn remember(name: &str) {
    NAMES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(name.to_string());
    static AT_EXIT: Once = Once::new();
    AT_EXIT.call_once(|| {
        if keep_topics() {
            return;
        }
        // librdkafka's global set-up (and the TLS library's, which may
        // register exit handlers of its own) runs with the first client.
        // Exit handlers run in the reverse order of registration: made
        // after that, ours runs while Kafka clients can still be created.
        drop(admin_client());
        // SAFETY: registers a function with no arguments that catches its
        // own panics; atexit has no other requirement.
        unsafe {
            libc::atexit(delete_at_exit);
        }
        // What processes that never reached their exit left (killed,
        // interrupted with Ctrl-C), in the background.
        std::thread::spawn(|| {
            if let Err(e) = delete_topics_of_dead_processes(Duration::from_secs(600)) {
                eprintln!("weir-testkit: could not delete topics of earlier test processes: {e}");
            }
        });
    });
}

/// The pid and the time (Unix ms) in a name that [`unique`] made, or in
/// one derived from it.
fn maker_of(topic: &str) -> Option<(u32, u128)> {
    static PATTERN: std::sync::LazyLock<regex::Regex> =
        std::sync::LazyLock::new(|| regex::Regex::new(r"-(\d{1,10})-(\d{13})-\d+").unwrap());
    let c = PATTERN.captures(topic)?;
    Some((c[1].parse().ok()?, c[2].parse().ok()?))
}

fn process_is_alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Deletes topics named by [`unique`] in a process of this machine that no
/// longer runs, made more than `min_age` ago (the age keeps a broker shared
/// with other machines' test runs, whose pids mean nothing here, safe for
/// that long); returns the topics deleted.
pub fn delete_topics_of_dead_processes(min_age: Duration) -> Result<Vec<String>, String> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let doomed = list_topics()?
        .into_iter()
        .filter(|topic| {
            maker_of(topic).is_some_and(|(pid, made)| {
                now.saturating_sub(made) > min_age.as_millis() && !process_is_alive(pid)
            })
        })
        .collect();
    delete_topics(doomed)
}

fn list_topics() -> Result<Vec<String>, String> {
    let lister: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .create()
        .map_err(|e| format!("metadata client: {e}"))?;
    let metadata = lister
        .fetch_metadata(None, Duration::from_secs(10))
        .map_err(|e| format!("list topics on {}: {e}", bootstrap()))?;
    Ok(metadata
        .topics()
        .iter()
        .map(|t| t.name().to_string())
        .collect())
}

/// Deletes `topics` (asked, not awaited: the broker removes the logs in
/// the background); a topic already gone is no failure.
fn delete_topics(topics: Vec<String>) -> Result<Vec<String>, String> {
    if topics.is_empty() {
        return Ok(topics);
    }
    let admin = admin_client();
    let options = AdminOptions::new().request_timeout(Some(Duration::from_secs(30)));
    for chunk in topics.chunks(200) {
        let names: Vec<&str> = chunk.iter().map(String::as_str).collect();
        let results = block_on(admin.delete_topics(&names, &options))
            .map_err(|e| format!("delete {} topics: {e}", names.len()))?;
        for r in results {
            if let Err((topic, code)) = r {
                if code != rdkafka::types::RDKafkaErrorCode::UnknownTopicOrPartition {
                    return Err(format!("delete topic {topic}: {code}"));
                }
            }
        }
    }
    Ok(topics)
}

/// `WEIR_TEST_KEEP_TOPICS=1` keeps a test process's topics (to look at
/// them after a failure).
fn keep_topics() -> bool {
    std::env::var_os("WEIR_TEST_KEEP_TOPICS").is_some_and(|v| !v.is_empty() && v != "0")
}

extern "C" fn delete_at_exit() {
    // A panic must not unwind into libc; a failure to clean up must not
    // change the process's exit code either.
    let _ = std::panic::catch_unwind(|| match delete_topics_of_this_process() {
        Ok(deleted) if !deleted.is_empty() => {
            eprintln!(
                "weir-testkit: deleted this process's {} topics",
                deleted.len()
            )
        }
        Ok(_) => {}
        Err(e) => eprintln!("weir-testkit: could not delete this process's topics: {e}"),
    });
}

fn admin_client() -> AdminClient<DefaultClientContext> {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .create()
        .expect("admin client")
}

/// Deletes every topic whose name contains a name [`unique`] handed out in
/// this process, and forgets those names; returns the topics deleted.
/// Runs by itself when the process exits (tests and benchmarks alike), so
/// that topics are never deleted under a test still running; call it
/// directly only when nothing of this process uses its topics any more.
pub fn delete_topics_of_this_process() -> Result<Vec<String>, String> {
    let names = std::mem::take(&mut *NAMES.lock().unwrap_or_else(|e| e.into_inner()));
    if names.is_empty() {
        return Ok(Vec::new());
    }
    let doomed = list_topics()?
        .into_iter()
        .filter(|topic| names.iter().any(|n| topic.contains(n.as_str())))
        .collect();
    delete_topics(doomed)
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(f)
}

/// Creates a topic (fails loudly when the broker is not there).
pub fn create_topic(name: &str, partitions: i32) {
    create_topic_with(name, partitions, &[]);
}

/// A compacted topic (`cleanup.policy=compact`), as a table source's
/// changelog is kept in production: the broker keeps each key's last value.
pub fn create_compacted_topic(name: &str, partitions: i32) {
    create_topic_with(name, partitions, &[("cleanup.policy", "compact")]);
}

/// A topic with the given topic configs, ready (every partition has a
/// leader) when this returns.
pub fn create_topic_with(name: &str, partitions: i32, configs: &[(&str, &str)]) {
    let admin = admin_client();
    let topic = configs.iter().fold(
        NewTopic::new(name, partitions, TopicReplication::Fixed(1)),
        |topic, (key, value)| topic.set(key, value),
    );
    let res = block_on(admin.create_topics([&topic], &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)))))
        .unwrap_or_else(|e| panic!("cannot create topic {name} on {}: {e}. Is the broker running (scripts/kafka.sh start)?", bootstrap()));
    for r in res {
        r.unwrap_or_else(|(t, e)| panic!("create topic {t}: {e}"));
    }
    // Created is not yet usable: a broker loading many logs (a restart with
    // a full data dir) elects the new partitions' leaders a moment later,
    // and a job started before then finds the topic without partitions.
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .create()
        .expect("metadata client");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let ready = consumer
            .fetch_metadata(Some(name), Duration::from_secs(5))
            .ok()
            .and_then(|md| {
                md.topics()
                    .iter()
                    .find(|t| t.name() == name && t.error().is_none())
                    .map(|t| {
                        t.partitions().len() == partitions as usize
                            && t.partitions().iter().all(|p| p.leader() >= 0)
                    })
            })
            .unwrap_or(false);
        if ready {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "topic {name} was created but has no leader for all {partitions} partitions after 30 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A fresh input and output topic, `<prefix>-words-*` and `<prefix>-counts-*`.
pub fn topic_pair(prefix: &str, partitions: i32) -> (String, String) {
    let input = unique(&format!("{prefix}-words"));
    let output = unique(&format!("{prefix}-counts"));
    create_topic(&input, partitions);
    create_topic(&output, partitions);
    (input, output)
}

/// The last part of a log, for assertion messages.
pub fn log_tail(log: &str) -> &str {
    let mut start = log.len().saturating_sub(6000);
    while !log.is_char_boundary(start) {
        start += 1;
    }
    &log[start..]
}

/// A small deterministic PRNG (xorshift64*), so inputs are reproducible
/// from a seed without another dependency.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// Lines of words for a word count: `lines` lines of `words_per_line`
/// words drawn from `vocabulary` distinct words, in mixed case (weir
/// lower-cases) and with varied whitespace. Returns the lines and the true
/// count of each lower-cased word.
pub fn word_lines(
    seed: u64,
    lines: usize,
    words_per_line: usize,
    vocabulary: u64,
) -> (Vec<String>, HashMap<String, u64>) {
    let mut rng = Rng::new(seed);
    let mut counts = HashMap::new();
    let mut out = Vec::with_capacity(lines);
    let separators = [" ", "  ", "\t", " \u{3000}"];
    for _ in 0..lines {
        let mut line = String::new();
        for i in 0..words_per_line {
            // Skewed: low ranks are much more frequent.
            let r = rng.below(vocabulary);
            let rank = r * rng.below(vocabulary) / vocabulary;
            let word = format!("w{rank}");
            if i > 0 {
                line.push_str(separators[rng.below(4) as usize]);
            }
            if rng.below(5) == 0 {
                line.push_str(&word.to_uppercase());
            } else {
                line.push_str(&word);
            }
            *counts.entry(word).or_insert(0) += 1;
        }
        out.push(line);
    }
    (out, counts)
}

/// Lines of words drawn from a Zipf distribution (exponent `s`) over
/// `vocabulary` distinct words, as word-count benchmarks use. Returns the
/// lines and the true count of each word.
pub fn zipf_lines(
    seed: u64,
    lines: usize,
    words_per_line: usize,
    vocabulary: usize,
    s: f64,
) -> (Vec<String>, HashMap<String, u64>) {
    let mut cdf = Vec::with_capacity(vocabulary);
    let mut total = 0.0;
    for rank in 1..=vocabulary {
        total += 1.0 / (rank as f64).powf(s);
        cdf.push(total);
    }
    let names: Vec<String> = (0..vocabulary).map(|i| format!("w{i}")).collect();
    let mut rng = Rng::new(seed);
    let mut counts: HashMap<String, u64> = HashMap::new();
    let mut out = Vec::with_capacity(lines);
    for _ in 0..lines {
        let mut line = String::with_capacity(words_per_line * 7);
        for i in 0..words_per_line {
            let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * total;
            let idx = cdf.partition_point(|c| *c < u).min(vocabulary - 1);
            if i > 0 {
                line.push(' ');
            }
            line.push_str(&names[idx]);
            *counts.entry(names[idx].clone()).or_insert(0) += 1;
        }
        out.push(line);
    }
    (out, counts)
}

/// Lines in which every word is distinct: `keys` words `w0..` in lines of
/// `words_per_line`, for state-size benchmarks.
pub fn distinct_lines(keys: usize, words_per_line: usize) -> Vec<String> {
    (0..keys.div_ceil(words_per_line))
        .map(|l| {
            (l * words_per_line..((l + 1) * words_per_line).min(keys))
                .map(|i| format!("k{i}"))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

/// An idempotent producer for test input.
pub fn producer() -> ThreadedProducer<DefaultProducerContext> {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("enable.idempotence", "true")
        .set("linger.ms", "20")
        .set("batch.num.messages", "10000")
        .set("queue.buffering.max.messages", "1000000")
        .create()
        .expect("producer")
}

/// Produces values round-robin over `partitions` and waits for every ack.
pub fn produce<V: AsRef<[u8]>>(topic: &str, partitions: i32, values: &[V]) {
    send_round_robin(&producer(), topic, partitions, 0, values);
}

/// Produces one record with `key` to `partition` and waits for its ack.
pub fn produce_keyed(topic: &str, partition: i32, key: &str, value: &str) {
    let p = producer();
    let rec: BaseRecord<'_, str, str> = BaseRecord::to(topic)
        .key(key)
        .payload(value)
        .partition(partition);
    p.send(rec)
        .map_err(|(e, _)| e)
        .expect("send keyed test input");
    p.flush(Duration::from_secs(60)).expect("flush test input");
}

/// Produces `(partition, key, value)` records in order (a value of None
/// is a tombstone) and waits for every ack.
pub fn produce_records(topic: &str, records: &[(i32, String, Option<String>)]) {
    let p = producer();
    for (partition, key, value) in records {
        let mut rec: BaseRecord<'_, str, str> = BaseRecord::to(topic)
            .key(key.as_str())
            .partition(*partition);
        if let Some(v) = value {
            rec = rec.payload(v.as_str());
        }
        let mut rec = rec;
        loop {
            match p.send(rec) {
                Ok(()) => break,
                Err((e, back)) => {
                    assert!(
                        matches!(
                            e,
                            rdkafka::error::KafkaError::MessageProduction(
                                rdkafka::types::RDKafkaErrorCode::QueueFull
                            )
                        ),
                        "send test input: {e}"
                    );
                    rec = back;
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        }
    }
    p.flush(Duration::from_secs(60)).expect("flush test input");
}

/// Sends `values` through `p`, the i-th to partition `(first + i) %
/// partitions`, waiting while the queue is full, then waits for every ack.
fn send_round_robin<V: AsRef<[u8]>>(
    p: &ThreadedProducer<DefaultProducerContext>,
    topic: &str,
    partitions: i32,
    first: usize,
    values: &[V],
) {
    for (i, v) in values.iter().enumerate() {
        let mut rec: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(topic)
            .payload(v.as_ref())
            .partition(((first + i) % partitions as usize) as i32);
        loop {
            match p.send(rec) {
                Ok(()) => break,
                Err((_, r)) => {
                    rec = r;
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        }
    }
    p.flush(Duration::from_secs(60)).expect("flush test input");
}

/// One output record as an independent reader sees it.
#[derive(Debug, Clone)]
pub struct OutRecord {
    pub partition: i32,
    pub offset: i64,
    pub key: Option<String>,
    pub value: Option<String>,
    pub value_bytes: Option<Vec<u8>>,
    pub headers: BTreeMap<String, String>,
}

impl OutRecord {
    /// The `count` field of a word-count output value.
    pub fn count(&self) -> u64 {
        let v: serde_json::Value =
            serde_json::from_str(self.value.as_deref().unwrap_or("null")).expect("output is JSON");
        v["count"].as_u64().expect("output has a count")
    }
}

/// `read_committed` or `read_uncommitted`.
#[derive(Debug, Clone, Copy)]
pub enum Isolation {
    Committed,
    Uncommitted,
}

/// Reads `topic` from the beginning with a fresh consumer until `done`
/// holds for what was read and then nothing new arrives for `quiet`, or
/// until `timeout`. Records come in partition order.
pub fn read_topic(
    topic: &str,
    isolation: Isolation,
    timeout: Duration,
    quiet: Duration,
    done: impl Fn(&[OutRecord]) -> bool,
) -> Vec<OutRecord> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("group.id", unique("weir-test-reader"))
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false")
        .set(
            "isolation.level",
            match isolation {
                Isolation::Committed => "read_committed",
                Isolation::Uncommitted => "read_uncommitted",
            },
        )
        .create()
        .expect("reader");
    let md = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .expect("metadata");
    let mut tpl = TopicPartitionList::new();
    for p in md.topics()[0].partitions() {
        tpl.add_partition_offset(topic, p.id(), Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&tpl).expect("assign");
    let started = Instant::now();
    let mut last = Instant::now();
    let mut out = Vec::new();
    let mut satisfied = false;
    // `done` may look at every record read so far: asked at most this
    // often, reading millions of records stays linear.
    const ASK_EVERY: Duration = Duration::from_millis(500);
    let mut asked = Instant::now() - ASK_EVERY;
    while started.elapsed() < timeout {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                let mut headers = BTreeMap::new();
                if let Some(h) = m.headers() {
                    for hd in h.iter() {
                        headers.insert(
                            hd.key.to_string(),
                            String::from_utf8_lossy(hd.value.unwrap_or_default()).into_owned(),
                        );
                    }
                }
                out.push(OutRecord {
                    partition: m.partition(),
                    offset: m.offset(),
                    key: m.key().map(|k| String::from_utf8_lossy(k).into_owned()),
                    value: m.payload().map(|v| String::from_utf8_lossy(v).into_owned()),
                    value_bytes: m.payload().map(<[u8]>::to_vec),
                    headers,
                });
                last = Instant::now();
                satisfied = false;
            }
            Some(Err(e)) => panic!("reading {topic}: {e}"),
            None => {
                if !satisfied && asked.elapsed() >= ASK_EVERY {
                    asked = Instant::now();
                    satisfied = done(&out);
                    if satisfied {
                        last = Instant::now();
                    }
                }
                if satisfied && last.elapsed() >= quiet {
                    break;
                }
            }
        }
    }
    out
}

/// The last count per word in partition order (the value a consumer of the
/// output topic ends up with).
pub fn last_counts(records: &[OutRecord]) -> HashMap<String, u64> {
    let mut last = HashMap::new();
    for r in records {
        last.insert(r.key.clone().expect("output has a key"), r.count());
    }
    last
}

/// A job configuration for tests, written as TOML.
#[derive(Debug, Clone)]
pub struct JobSpec {
    pub name: String,
    /// Holds the config file, the log and the state directory.
    pub dir: PathBuf,
    /// The checkpoint directory (by default `<dir>/checkpoints`).
    pub checkpoint_dir: PathBuf,
    pub parallelism: u32,
    pub source_topics: Vec<String>,
    pub sink_topic: String,
    pub interval: String,
    pub delivery: String,
    pub emit: String,
    pub format: String,
    /// `[source] start`: "earliest" or "latest".
    pub start: String,
    pub on_bad_record: String,
    pub dead_letter_topic: Option<String>,
    pub pipeline: String,
    pub max_attempts: u32,
    /// `[admin] listen`; port 0 picks a free port, which the log names
    /// (see [`WeirProcess::admin_addr`]).
    pub admin_listen: String,
    /// Extra lines for `[checkpoint]` and `[admin]`.
    pub checkpoint_extra: String,
    pub admin_extra: String,
    /// Appended at the end of the file.
    pub extra: String,
}

impl JobSpec {
    /// A word count from `input` to `output` with its folders under `dir`.
    pub fn word_count(dir: &Path, input: &str, output: &str) -> Self {
        Self {
            name: unique("wc"),
            dir: dir.to_path_buf(),
            checkpoint_dir: dir.join("checkpoints"),
            parallelism: 2,
            source_topics: vec![input.into()],
            sink_topic: output.into(),
            interval: "500ms".into(),
            delivery: "at-least-once".into(),
            emit: "every-update".into(),
            format: "text".into(),
            start: "earliest".into(),
            on_bad_record: "fail".into(),
            dead_letter_topic: None,
            pipeline: "kind = \"word-count\"".into(),
            max_attempts: 3,
            admin_listen: "127.0.0.1:0".into(),
            checkpoint_extra: String::new(),
            admin_extra: String::new(),
            extra: String::new(),
        }
    }

    pub fn toml(&self) -> String {
        let topics: Vec<String> = self
            .source_topics
            .iter()
            .map(|t| format!("{t:?}"))
            .collect();
        let dlq = self
            .dead_letter_topic
            .as_ref()
            .map(|t| format!("dead_letter_topic = {t:?}\n"))
            .unwrap_or_default();
        format!(
            r#"[job]
name = "{name}"
parallelism = {p}
max_parallelism = 128

[kafka]
bootstrap_servers = "{bootstrap}"
group_id = "weir-{name}-{group}"

[checkpoint]
interval = "{interval}"
dir = "{checkpoints}"
timeout = "20s"
retained = 2
{checkpoint_extra}

[state]
dir = "{dir}/state"

[restart]
max_attempts = {max_attempts}
backoff = "200ms"

[admin]
listen = "{admin_listen}"
{admin_extra}

[source]
topics = [{topics}]
format = "{format}"
start = "{start}"
on_bad_record = "{policy}"
{dlq}
[pipeline]
{pipeline}

[sink]
topic = "{sink}"
delivery = "{delivery}"
emit = "{emit}"
{extra}
"#,
            name = self.name,
            p = self.parallelism,
            bootstrap = bootstrap(),
            group = self.sink_topic,
            interval = self.interval,
            dir = self.dir.display(),
            checkpoints = self.checkpoint_dir.display(),
            topics = topics.join(", "),
            format = self.format,
            start = self.start,
            policy = self.on_bad_record,
            pipeline = self.pipeline,
            sink = self.sink_topic,
            delivery = self.delivery,
            emit = self.emit,
            extra = self.extra,
            checkpoint_extra = self.checkpoint_extra,
            max_attempts = self.max_attempts,
            admin_listen = self.admin_listen,
            admin_extra = self.admin_extra,
        )
    }

    /// Writes `<dir>/weir.toml` and returns its path.
    pub fn write(&self) -> PathBuf {
        fs::create_dir_all(&self.dir).expect("job dir");
        let path = self.dir.join("weir.toml");
        fs::write(&path, self.toml()).expect("write config");
        path
    }
}

/// A running `weir run` process whose output goes to a log file.
pub struct WeirProcess {
    pub child: Child,
    pub log: PathBuf,
}

impl WeirProcess {
    /// Starts `binary run --config config`, appending stdout and stderr to
    /// `<config dir>/weir.log`; `env` adds variables (e.g. `FAILPOINTS`).
    pub fn start(binary: &Path, config: &Path, env: &[(&str, &str)]) -> Self {
        Self::start_with(binary, config, &[], env)
    }

    /// As [`WeirProcess::start`], with `args` after `--config <config>`
    /// (`--restore-from <folder>`).
    pub fn start_with(binary: &Path, config: &Path, args: &[&str], env: &[(&str, &str)]) -> Self {
        let log = config.with_file_name("weir.log");
        let out = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .expect("log");
        let mut cmd = Command::new(binary);
        cmd.args(["run", "--config"])
            .arg(config)
            .args(args)
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdout(Stdio::from(out.try_clone().expect("log")))
            .stderr(Stdio::from(out));
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("start weir");
        Self { child, log }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: sending a signal to our own child process.
        unsafe {
            libc::kill(self.pid(), sig);
        }
    }

    /// SIGKILL and reap.
    pub fn kill9(&mut self) {
        self.signal(libc::SIGKILL);
        let _ = self.child.wait();
    }

    /// Waits for exit up to `timeout`.
    pub fn wait(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let until = Instant::now() + timeout;
        while Instant::now() < until {
            if let Some(s) = self.child.try_wait().expect("try_wait") {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    /// SIGTERM, then wait for a clean exit (a final checkpoint).
    pub fn stop(&mut self, timeout: Duration) -> ExitStatus {
        self.signal(libc::SIGTERM);
        match self.wait(timeout) {
            Some(s) => s,
            None => {
                self.kill9();
                panic!(
                    "weir did not stop within {timeout:?} after SIGTERM; log: {}",
                    self.log_text()
                );
            }
        }
    }

    pub fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until the log mentions `needle` `n` times.
    pub fn wait_for_log(&mut self, needle: &str, n: usize, timeout: Duration) -> bool {
        let until = Instant::now() + timeout;
        while Instant::now() < until {
            if self.log_text().matches(needle).count() >= n {
                return true;
            }
            if let Ok(Some(_)) = self.child.try_wait() {
                return false;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }
}

impl WeirProcess {
    /// The admin endpoint's address, from its "admin endpoint listening" log line.
    pub fn admin_addr(&mut self, timeout: Duration) -> String {
        assert!(
            self.wait_for_log("admin endpoint listening", 1, timeout),
            "no admin endpoint: {}",
            self.log_text()
        );
        admin_addr_in(&self.log_text()).expect("listen= field")
    }
}

/// The admin endpoint's address in a weir log ("admin endpoint listening
/// listen=ADDR"), if it is there: the last one, since a log appended to by
/// restarted processes names each of their addresses.
pub fn admin_addr_in(log: &str) -> Option<String> {
    log.lines()
        .rfind(|l| l.contains("admin endpoint listening"))
        .and_then(|l| l.split("listen=").nth(1))
        .and_then(|r| r.split_whitespace().next())
        .map(|a| a.trim_matches('"').to_string())
}

/// A minimal HTTP/1.1 client for the admin endpoint: returns the status
/// code and the body.
pub fn http(addr: &str, method: &str, path: &str, token: Option<&str>) -> (u16, String) {
    use std::io::{Read, Write};
    let mut stream =
        std::net::TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    stream
        .set_read_timeout(Some(Duration::from_secs(120)))
        .unwrap();
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Content-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad response: {response}"));
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

impl Drop for WeirProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.kill9();
        }
    }
}

/// The multiset of (word, count) pairs in word-count output.
pub fn word_multiset(records: &[OutRecord]) -> HashMap<(String, u64), u64> {
    let mut m = HashMap::new();
    for r in records {
        *m.entry((r.key.clone().unwrap(), r.count())).or_insert(0) += 1;
    }
    m
}

/// {(w, 1), ..., (w, n_w)} for every word, each exactly once.
pub fn expected_multiset(counts: &HashMap<String, u64>) -> HashMap<(String, u64), u64> {
    counts
        .iter()
        .flat_map(|(w, n)| (1..=*n).map(move |i| ((w.clone(), i), 1)))
        .collect()
}

/// Exactly-once every-update word count: the committed output holds each
/// (w, i), i in 1..=n_w, exactly once, and nothing else.
pub fn assert_multiset(records: &[OutRecord], expected: &HashMap<String, u64>) {
    let got = word_multiset(records);
    let want = expected_multiset(expected);
    let mut wrong: Vec<String> = want
        .iter()
        .filter(|(k, n)| got.get(*k) != Some(n))
        .map(|(k, n)| {
            format!(
                "{k:?}: expected {n}, got {}",
                got.get(k).copied().unwrap_or(0)
            )
        })
        .collect();
    wrong.extend(
        got.iter()
            .filter(|(k, _)| !want.contains_key(*k))
            .map(|(k, n)| format!("{k:?}: unexpected x{n}")),
    );
    wrong.sort();
    assert!(
        wrong.is_empty(),
        "{} of {} pairs wrong (committed records: {}), e.g. {:?}",
        wrong.len(),
        want.len(),
        records.len(),
        &wrong[..wrong.len().min(10)]
    );
}

/// Sends `lines` round-robin over 4 partitions through a producer the
/// caller keeps open (one per feeder: creating one per chunk costs more
/// than the chunk), counting what was sent in `sent`.
pub fn send_chunk(
    p: &ThreadedProducer<DefaultProducerContext>,
    topic: &str,
    sent: &mut usize,
    lines: &[String],
) {
    send_round_robin(p, topic, 4, *sent, lines);
    *sent += lines.len();
}

/// The value of one sample line of Prometheus text (`series` with its
/// labels, as the exposition writes them).
pub fn metric_sample(metrics: &str, series: &str) -> Option<f64> {
    metrics
        .lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_maker_of_a_unique_name_is_found_in_names_derived_from_it() {
        let name = unique("wc");
        let (pid, made) = maker_of(&name).unwrap();
        assert_eq!(pid, std::process::id());
        assert!(made > 1_600_000_000_000);
        let derived = format!("{name}.word-count.repartition");
        assert_eq!(maker_of(&derived), Some((pid, made)));
        assert_eq!(
            maker_of(&format!("weir-{name}-{}", unique("out"))).map(|m| m.0),
            Some(pid)
        );
        assert_eq!(maker_of("words"), None);
        assert_eq!(maker_of("word-counts-2"), None);
        assert!(process_is_alive(pid));
    }
}
