//! The broker goes away (issue #8): the local broker of `scripts/kafka.sh`
//! is stopped for 20 s under a running exactly-once job and started again.
//! weir must ride it out in the same process and its committed output must
//! be exact. A file of its own, since it stops the broker every other test
//! uses; a guard starts the broker again whatever happens.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use weir_testkit::{
    assert_multiset, last_counts, log_tail, producer, read_topic, send_chunk, topic_pair,
    word_lines, Isolation, JobSpec, WeirProcess,
};

const WEIR: &str = env!("CARGO_BIN_EXE_weir");

fn tail(log: &str) -> &str {
    log_tail(log)
}

fn kafka_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/kafka.sh")
}

/// Runs `scripts/kafka.sh CMD`; true when it exits 0.
fn kafka(cmd: &str) -> bool {
    Command::new(kafka_script())
        .arg(cmd)
        .status()
        .unwrap_or_else(|e| panic!("run scripts/kafka.sh {cmd}: {e}"))
        .success()
}

/// Starts the broker again when dropped, also when the test panics.
struct BrokerGuard;

impl Drop for BrokerGuard {
    fn drop(&mut self) {
        if !kafka("status") && !kafka("start") {
            eprintln!("could not start the broker again: run scripts/kafka.sh start");
        }
    }
}

fn seed() -> u64 {
    let s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    eprintln!("random seed {s}");
    s
}

/// Produces lines in chunks on a background thread. [`Feeder::pause`]
/// returns once no chunk is in flight (each produced chunk is
/// acknowledged), so that no test input is lost or blocks while the broker
/// is down.
struct Feeder {
    paused: Arc<AtomicBool>,
    idle: Arc<AtomicBool>,
    done: Arc<AtomicBool>,
    cancel: Arc<AtomicBool>,
    fed: Arc<AtomicUsize>,
    total: usize,
    handle: Option<JoinHandle<()>>,
}

impl Feeder {
    fn start(topic: &str, lines: Vec<String>, chunk: usize, pause: Duration) -> Self {
        let paused = Arc::new(AtomicBool::new(false));
        let idle = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicBool::new(false));
        let cancel = Arc::new(AtomicBool::new(false));
        let fed = Arc::new(AtomicUsize::new(0));
        let total = lines.len();
        let handle = {
            let (paused, idle, done, cancel, fed) = (
                paused.clone(),
                idle.clone(),
                done.clone(),
                cancel.clone(),
                fed.clone(),
            );
            let topic = topic.to_string();
            std::thread::spawn(move || {
                // One producer for the whole feed: a new one per chunk
                // costs most of a second.
                let p = producer();
                let mut sent = 0usize;
                for c in lines.chunks(chunk) {
                    while paused.load(Ordering::SeqCst) && !cancel.load(Ordering::SeqCst) {
                        idle.store(true, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    idle.store(false, Ordering::SeqCst);
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
            paused,
            idle,
            done,
            cancel,
            fed,
            total,
            handle: Some(handle),
        }
    }

    fn fed(&self) -> usize {
        self.fed.load(Ordering::SeqCst)
    }

    /// Stops feeding at the next chunk boundary and waits for it.
    fn pause(&self) {
        self.paused.store(true, Ordering::SeqCst);
        let until = Instant::now() + Duration::from_secs(90);
        while !self.idle.load(Ordering::SeqCst) && !self.done.load(Ordering::SeqCst) {
            assert!(Instant::now() < until, "the feeder did not pause");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn resume(&self) {
        self.paused.store(false, Ordering::SeqCst);
    }

    fn join(mut self) {
        if let Some(h) = self.handle.take() {
            h.join().expect("the feeder thread panicked");
        }
        assert_eq!(self.fed(), self.total, "the feeder fed everything");
    }
}

impl Drop for Feeder {
    fn drop(&mut self) {
        self.cancel.store(true, Ordering::SeqCst);
    }
}

fn assert_running(w: &mut WeirProcess, when: &str) {
    if let Some(status) = w.child.try_wait().unwrap() {
        panic!(
            "weir exited ({status:?}) {when}; it must ride out a broker outage:\n{}",
            tail(&w.log_text())
        );
    }
}

#[test]
fn the_broker_stopped_for_20s_then_restarted_output_is_exact() {
    assert!(
        kafka("status"),
        "this test stops and starts the local broker of scripts/kafka.sh, which must be running"
    );
    let _broker = BrokerGuard;
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = topic_pair("outage", 4);
    let (lines, expected) = word_lines(seed(), 10_000, 10, 2_000);
    assert_eq!(expected.values().sum::<u64>(), 100_000);
    let total = lines.len();
    let spec = JobSpec {
        delivery: "exactly-once".into(),
        interval: "500ms".into(),
        max_attempts: 50,
        ..JobSpec::word_count(dir.path(), &input, &output)
    };
    let mut w = WeirProcess::start(Path::new(WEIR), &spec.write(), &[]);
    let feeder = Feeder::start(&input, lines, 200, Duration::from_millis(200));
    assert!(
        w.wait_for_log("checkpoint completed", 3, Duration::from_secs(60)),
        "{}",
        tail(&w.log_text())
    );

    feeder.pause();
    let fed = feeder.fed();
    assert!(
        fed < total / 2,
        "most input must arrive after the outage ({fed} of {total} lines fed before it)"
    );
    let completed_before = w.log_text().matches("checkpoint completed").count();
    assert!(kafka("stop"), "scripts/kafka.sh stop failed");
    assert!(!kafka("status"), "the broker is still up after stop");
    let stopped = Instant::now();
    eprintln!("broker stopped after {fed} of {total} lines");
    while stopped.elapsed() < Duration::from_secs(20) {
        assert_running(&mut w, "while the broker was down");
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(kafka("start"), "scripts/kafka.sh start failed");
    eprintln!("broker back after {:?}", stopped.elapsed());
    feeder.resume();

    // Recovery: checkpoints complete again in the same process.
    let recovered = w.wait_for_log(
        "checkpoint completed",
        completed_before + 3,
        Duration::from_secs(90),
    );
    assert_running(&mut w, "after the broker came back");
    assert!(
        recovered,
        "no checkpoint completed after the broker came back:\n{}",
        tail(&w.log_text())
    );
    eprintln!(
        "checkpoints complete again {:?} after the stop",
        stopped.elapsed()
    );
    feeder.join();
    read_topic(
        &output,
        Isolation::Committed,
        Duration::from_secs(120),
        Duration::from_secs(1),
        |r| last_counts(r) == expected,
    );
    assert_running(&mut w, "before SIGTERM");
    let status = w.stop(Duration::from_secs(60));
    assert!(status.success(), "{status:?}\n{}", tail(&w.log_text()));
    let committed = read_topic(
        &output,
        Isolation::Committed,
        Duration::from_secs(120),
        Duration::from_secs(3),
        |r| last_counts(r) == expected,
    );
    assert_multiset(&committed, &expected);
}
