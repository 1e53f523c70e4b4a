//! The physical limits a system is compared with, on the same broker and
//! input: a bare rdkafka consumer (how fast the input can be read at all),
//! and a bare consume → produce pipe that writes as many output records of
//! the same size as weir's every-update word count, with no state (how fast
//! per-update output can be written at all), plain and transactional.

use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};
use weir_testkit::{bootstrap, unique};

fn reader(group: &str) -> BaseConsumer {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false")
        .set("isolation.level", "read_committed")
        .create()
        .expect("bench consumer")
}

fn assign_from_start(c: &BaseConsumer, input: &str, ends: &[(i32, i64)]) {
    let mut tpl = TopicPartitionList::new();
    for (p, _) in ends {
        tpl.add_partition_offset(input, *p, Offset::Beginning)
            .expect("partition");
    }
    c.assign(&tpl).expect("assign");
}

/// Records per second a bare consumer reads, reading the input again and
/// again until at least `min` has passed, so that its time is not noise.
pub fn bare_consumer(input: &str, ends: &[(i32, i64)], min: Duration) -> f64 {
    let c = reader(&unique("bench-bare"));
    let total: i64 = ends.iter().map(|(_, e)| e).sum();
    let started = Instant::now();
    let mut read = 0i64;
    let mut bytes = 0usize;
    loop {
        assign_from_start(&c, input, ends);
        let mut n = 0i64;
        while n < total {
            if let Some(Ok(m)) = c.poll(Duration::from_millis(100)) {
                n += 1;
                bytes += m.payload().map_or(0, <[u8]>::len);
            }
        }
        read += n;
        if started.elapsed() >= min {
            break;
        }
    }
    std::hint::black_box(bytes);
    read as f64 / started.elapsed().as_secs_f64()
}

/// What one pipe run cost.
pub struct PipeRun {
    pub seconds: f64,
    pub cpu_seconds: f64,
    pub records_out: u64,
}

/// CPU seconds of this process so far (user + system).
fn own_cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = after.split_whitespace().collect();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (f.get(11).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0)
        + f.get(12).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0))
        / hz
}

/// Reads all of `input` and, per word of each record, writes one record
/// `{"key":"<word>","count":1}` keyed by the word to `output` (the number
/// and, up to the digits of the count, the size of weir's every-update
/// output). With `transactional`, as weir's exactly-once sink: one
/// transaction per second holding the output and the input offsets.
pub fn bare_pipe(input: &str, ends: &[(i32, i64)], output: &str, transactional: bool) -> PipeRun {
    let group = unique("bench-pipe");
    let c = reader(&group);
    assign_from_start(&c, input, ends);
    let mut pc = ClientConfig::new();
    pc.set("bootstrap.servers", bootstrap())
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .set("delivery.report.only.error", "true");
    if transactional {
        pc.set("transactional.id", unique("bench-pipe-txn"));
    }
    let p: ThreadedProducer<_> = pc.create().expect("pipe producer");
    if transactional {
        p.init_transactions(Duration::from_secs(30)).expect("init");
        p.begin_transaction().expect("begin");
    }
    let total: i64 = ends.iter().map(|(_, e)| e).sum();
    let cpu0 = own_cpu_seconds();
    let started = Instant::now();
    let mut last_commit = Instant::now();
    let (mut n, mut out) = (0i64, 0u64);
    let mut value = Vec::with_capacity(64);
    let commit = |p: &ThreadedProducer<_>, c: &BaseConsumer| {
        let positions = c.position().expect("positions");
        let meta = c.group_metadata().expect("group metadata");
        p.send_offsets_to_transaction(&positions, &meta, Duration::from_secs(30))
            .expect("send offsets");
        p.commit_transaction(Duration::from_secs(30))
            .expect("commit");
    };
    while n < total {
        let Some(Ok(m)) = c.poll(Duration::from_millis(100)) else {
            continue;
        };
        n += 1;
        let text = std::str::from_utf8(m.payload().unwrap_or_default()).unwrap_or_default();
        for word in text.split_whitespace() {
            let word = word.to_lowercase();
            value.clear();
            value.extend_from_slice(b"{\"key\":\"");
            value.extend_from_slice(word.as_bytes());
            value.extend_from_slice(b"\",\"count\":1}");
            let mut rec: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(output)
                .key(word.as_bytes())
                .payload(&value[..]);
            loop {
                match p.send(rec) {
                    Ok(()) => break,
                    Err((_, r)) => {
                        rec = r;
                        std::thread::sleep(Duration::from_micros(200));
                    }
                }
            }
            out += 1;
        }
        if transactional && last_commit.elapsed() >= Duration::from_secs(1) {
            commit(&p, &c);
            p.begin_transaction().expect("begin");
            last_commit = Instant::now();
        }
    }
    if transactional {
        commit(&p, &c);
    } else {
        p.flush(Duration::from_secs(60)).expect("flush");
    }
    PipeRun {
        seconds: started.elapsed().as_secs_f64(),
        cpu_seconds: own_cpu_seconds() - cpu0,
        records_out: out,
    }
}
