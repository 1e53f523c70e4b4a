//! Event time and windows (issue #9) end to end: the real binary on the
//! real broker, checked by an independent read_committed reader against
//! results computed here from the input.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::time::Duration;

use weir_testkit::{
    http, log_tail, produce, read_topic, topic_pair, unique, Isolation, JobSpec, OutRecord, Rng,
    WeirProcess,
};

const WEIR: &str = env!("CARGO_BIN_EXE_weir");
/// 2026-11-30T00:00:00Z
const T0: i64 = 1_764_460_800_000;
const MINUTE: i64 = 60_000;

fn weir() -> &'static Path {
    Path::new(WEIR)
}

fn seed() -> u64 {
    let s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    eprintln!("random seed {s}");
    s
}

/// One input event, as produced.
#[derive(Debug, Clone)]
struct Event {
    id: u64,
    user: String,
    ts: i64,
}

impl Event {
    fn json(&self) -> String {
        format!(
            r#"{{"id":{},"user":{{"id":"{}"}},"ts":{},"amount":1}}"#,
            self.id, self.user, self.ts
        )
    }
}

/// `per_partition` events per partition, event time advancing `step` ms
/// per event with up to `jitter` ms of disorder (within the bound), users
/// drawn from `users`. Events are interleaved so that element i goes to
/// partition i % partitions (testkit's `produce`).
fn events(
    seed: u64,
    partitions: usize,
    per_partition: usize,
    step: i64,
    jitter: i64,
    users: u64,
) -> Vec<Event> {
    let mut rng = Rng::new(seed);
    let mut out = Vec::new();
    for i in 0..per_partition {
        for _p in 0..partitions {
            let ts = T0 + i as i64 * step - rng.below(jitter as u64 + 1) as i64;
            out.push(Event {
                id: out.len() as u64,
                user: format!("u{}", rng.below(users)),
                ts,
            });
        }
    }
    out
}

/// A flush event per partition, far enough ahead that every window of the
/// real events closes; their own windows stay open and are ignored.
fn flush_events(partitions: usize, after: i64, first_id: u64) -> Vec<Event> {
    (0..partitions)
        .map(|p| Event {
            id: first_id + p as u64,
            user: "__flush__".into(),
            ts: after,
        })
        .collect()
}

/// What a windowed output record says.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct WindowResult {
    key: String,
    start: String,
    end: String,
}

fn rfc3339(ms: i64) -> String {
    let t = jiff::Timestamp::from_millisecond(ms).unwrap();
    format!("{t:.3}")
}

fn parse(records: &[OutRecord]) -> Vec<(WindowResult, u64)> {
    records
        .iter()
        .map(|r| {
            let v: serde_json::Value = serde_json::from_str(r.value.as_deref().unwrap()).unwrap();
            assert_eq!(
                r.key.as_deref(),
                v["key"].as_str(),
                "record key = group key"
            );
            (
                WindowResult {
                    key: v["key"].as_str().unwrap().to_string(),
                    start: v["window_start"].as_str().unwrap().to_string(),
                    end: v["window_end"].as_str().unwrap().to_string(),
                },
                v["count"].as_u64().expect("count"),
            )
        })
        .filter(|(w, _)| w.key != "__flush__")
        .collect()
}

/// Exactly one result per (key, window), equal to `expected`.
fn assert_exact(records: &[OutRecord], expected: &BTreeMap<WindowResult, u64>, log: &str) {
    let got = parse(records);
    let mut seen: BTreeMap<WindowResult, Vec<u64>> = BTreeMap::new();
    for (w, c) in got {
        seen.entry(w).or_default().push(c);
    }
    let mut wrong = Vec::new();
    for (w, counts) in &seen {
        match expected.get(w) {
            Some(e) if counts == &vec![*e] => {}
            e => wrong.push(format!("{w:?}: got {counts:?}, expected {e:?}")),
        }
    }
    for (w, e) in expected {
        if !seen.contains_key(w) {
            wrong.push(format!("{w:?}: missing, expected {e}"));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} windows wrong, e.g. {:?}\n{}",
        wrong.len(),
        expected.len(),
        &wrong[..wrong.len().min(8)],
        log_tail(log)
    );
}

fn tumbling_expected(events: &[Event], size: i64) -> BTreeMap<WindowResult, u64> {
    let mut m = BTreeMap::new();
    for e in events {
        let start = e.ts - (e.ts).rem_euclid(size);
        *m.entry(WindowResult {
            key: e.user.clone(),
            start: rfc3339(start),
            end: rfc3339(start + size),
        })
        .or_insert(0) += 1;
    }
    m
}

fn read_until(topic: &str, n: usize, timeout: Duration) -> Vec<OutRecord> {
    read_topic(
        topic,
        Isolation::Committed,
        timeout,
        Duration::from_secs(2),
        |r| parse(r).len() >= n,
    )
}

fn window_spec(dir: &Path, input: &str, output: &str, window: &str, event_time: &str) -> JobSpec {
    JobSpec {
        format: "json".into(),
        delivery: "exactly-once".into(),
        pipeline: "kind = \"aggregate\"\nkey = \"/user/id\"\nfunction = \"count\"".into(),
        interval: "300ms".into(),
        max_attempts: 30,
        extra: format!("[source.event_time]\n{event_time}\n[pipeline.window]\n{window}\n"),
        ..JobSpec::word_count(dir, input, output)
    }
}

#[test]
fn tumbling_counts_are_exact_through_kills_and_late_events_go_to_the_dead_letter_topic() {
    let seed = seed();
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = topic_pair("tumbling", 4);
    let dlq = unique("tumbling-late");
    weir_testkit::create_topic(&dlq, 1);
    // 200,000 events over 4 partitions, 20 ms of event time apart per
    // partition (about 17 one-minute windows), up to 3 s out of order.
    let mut all = events(seed, 4, 50_000, 20, 3_000, 300);
    // Late events: an hour behind, every window they belong to closed
    // long before they arrive (see the feeder below).
    let mut late_ids = BTreeSet::new();
    for k in 0..40u64 {
        let ev = Event {
            id: 1_000_000 + k,
            user: format!("u{}", k % 7),
            ts: T0 - 3_600_000 + k as i64 * 1000,
        };
        late_ids.insert(ev.id);
        all.push(ev);
    }
    let on_time: Vec<Event> = all
        .iter()
        .filter(|e| !late_ids.contains(&e.id))
        .cloned()
        .collect();
    let expected = tumbling_expected(&on_time, MINUTE);
    let last = all.iter().map(|e| e.ts).max().unwrap();
    all.extend(flush_events(4, last + 3 * MINUTE, 2_000_000));
    let spec = JobSpec {
        dead_letter_topic: Some(dlq.clone()),
        ..window_spec(
            dir.path(),
            &input,
            &output,
            "kind = \"tumbling\"\nsize = \"1m\"\nallowed_lateness = \"0s\"\non_late = \"dead-letter\"\nemit = \"on-close\"",
            "field = \"/ts\"\nformat = \"epoch-millis\"\nmax_out_of_orderness = \"5s\"\nidle_timeout = \"0s\"",
        )
    };
    let config = spec.write();
    // The late events go in once a window has closed (its result is
    // committed), so the watermark is past all their windows whatever the
    // order partitions are read in; until then a partition not yet read
    // holds the watermark at its minimum and nothing is late.
    let (late_lines, lines): (Vec<Event>, Vec<Event>) =
        all.iter().cloned().partition(|e| late_ids.contains(&e.id));
    let lines: Vec<String> = lines.iter().map(Event::json).collect();
    let late_lines: Vec<String> = late_lines.iter().map(Event::json).collect();
    let (first_half, second_half) = lines.split_at(100_000);
    let (first_half, second_half) = (first_half.to_vec(), second_half.to_vec());
    let first_done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let go_on = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let feeder = {
        let input = input.clone();
        let (first_done, go_on) = (first_done.clone(), go_on.clone());
        std::thread::spawn(move || {
            for chunk in first_half.chunks(8_000) {
                produce(&input, 4, chunk);
                std::thread::sleep(Duration::from_millis(150));
            }
            first_done.store(true, std::sync::atomic::Ordering::SeqCst);
            while !go_on.load(std::sync::atomic::Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(50));
            }
            // Late events between on-time ones, in every partition, each
            // with a Kafka key its dead letter must carry.
            let per = second_half.len() / late_lines.len();
            for (i, chunk) in second_half.chunks(per).enumerate() {
                produce(&input, 4, chunk);
                if let Some(l) = late_lines.get(i) {
                    weir_testkit::produce_keyed(&input, i as i32 % 4, &format!("late-{i}"), l);
                }
                std::thread::sleep(Duration::from_millis(40));
            }
        })
    };
    let mut w = WeirProcess::start(weir(), &config, &[]);
    for kill in 0..6 {
        let wait = Duration::from_millis(500 + rng.below(2_500));
        std::thread::sleep(wait);
        eprintln!("kill {kill} after {wait:?}");
        w.kill9();
        w = WeirProcess::start(weir(), &config, &[]);
        if kill == 2 {
            while !first_done.load(std::sync::atomic::Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(50));
            }
            read_until(&output, 1, Duration::from_secs(120));
            go_on.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }
    feeder.join().unwrap();
    let records = read_until(&output, expected.len(), Duration::from_secs(180));
    let log = w.log_text();
    assert_exact(&records, &expected, &log);
    // The dead-letter topic holds exactly the late events, with headers
    // naming the window and the watermark.
    let dead = read_topic(
        &dlq,
        Isolation::Committed,
        Duration::from_secs(60),
        Duration::from_secs(2),
        |r| r.len() >= late_ids.len(),
    );
    // Each names the record it was read from (topic, partition, offset)
    // and carries its Kafka key, as a bad record's dead letter does.
    let read = read_topic(
        &input,
        Isolation::Uncommitted,
        Duration::from_secs(60),
        Duration::from_secs(2),
        |_| false,
    );
    let by_position: std::collections::HashMap<(i32, i64), &OutRecord> =
        read.iter().map(|r| ((r.partition, r.offset), r)).collect();
    let mut dead_ids = BTreeSet::new();
    for r in &dead {
        let v: serde_json::Value = serde_json::from_str(r.value.as_deref().unwrap()).unwrap();
        assert!(
            dead_ids.insert(v["id"].as_u64().unwrap()),
            "a late event twice: {v}"
        );
        for h in [
            "weir.late.window_start",
            "weir.late.window_end",
            "weir.late.watermark",
            "weir.source.topic",
            "weir.source.partition",
            "weir.source.offset",
        ] {
            assert!(r.headers.contains_key(h), "{h} missing: {:?}", r.headers);
        }
        assert_eq!(r.headers["weir.source.topic"], input);
        let at = (
            r.headers["weir.source.partition"].parse::<i32>().unwrap(),
            r.headers["weir.source.offset"].parse::<i64>().unwrap(),
        );
        let source = by_position
            .get(&at)
            .unwrap_or_else(|| panic!("no input record at {at:?}: {:?}", r.headers));
        assert_eq!(source.value, r.value, "the record at {at:?}");
        assert!(
            source
                .key
                .as_deref()
                .is_some_and(|k| k.starts_with("late-")),
            "{:?}",
            source.key
        );
        assert_eq!(r.key, source.key, "the dead letter's key");
    }
    assert_eq!(dead_ids, late_ids, "{}", log_tail(&log));
    // Bounded state: only the flush key's window is still open.
    let addr = w.admin_addr(Duration::from_secs(10));
    let metrics = http(&addr, "GET", "/metrics", None).1;
    let open: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("weir_open_windows{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(open, 1.0, "open windows after all closed:\n{metrics}");
    assert!(w.stop(Duration::from_secs(60)).success());
}

#[test]
fn hopping_windows_count_every_event_in_each_of_its_windows() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = topic_pair("hopping", 2);
    let evs = events(11, 2, 5_000, 40, 2_000, 50);
    let size = MINUTE;
    let slide = 20_000;
    let mut expected = BTreeMap::new();
    for e in &evs {
        let last_start = e.ts - e.ts.rem_euclid(slide);
        let mut start = last_start;
        while start > e.ts - size {
            *expected
                .entry(WindowResult {
                    key: e.user.clone(),
                    start: rfc3339(start),
                    end: rfc3339(start + size),
                })
                .or_insert(0) += 1;
            start -= slide;
        }
    }
    let mut all = evs.clone();
    let last = evs.iter().map(|e| e.ts).max().unwrap();
    all.extend(flush_events(2, last + 3 * MINUTE, 1_000_000));
    produce(&input, 2, &all.iter().map(Event::json).collect::<Vec<_>>());
    let spec = window_spec(
        dir.path(),
        &input,
        &output,
        "kind = \"hopping\"\nsize = \"1m\"\nslide = \"20s\"",
        "field = \"/ts\"\nmax_out_of_orderness = \"3s\"",
    );
    let mut w = WeirProcess::start(weir(), &spec.write(), &[]);
    let records = read_until(&output, expected.len(), Duration::from_secs(120));
    assert_exact(&records, &expected, &w.log_text());
    assert!(w.stop(Duration::from_secs(60)).success());
}

#[test]
fn toml_windows_run_in_group_mode_exact_when_an_instance_is_killed_and_replaced() {
    // `[pipeline.window]` with `scale.mode = "group"`: the TOML pipeline is
    // a job graph, whose watermarks cross the repartition topic.
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = topic_pair("group-windows", 4);
    let evs = events(17, 4, 4_000, 40, 2_000, 50);
    let expected = tumbling_expected(&evs, MINUTE);
    let mut all = evs.clone();
    let last = evs.iter().map(|e| e.ts).max().unwrap();
    all.extend(flush_events(4, last + 3 * MINUTE, 1_000_000));
    let name = unique("group-windows");
    let shared = dir.path().join("shared");
    let config = |i: usize| {
        let mut spec = window_spec(
            &dir.path().join(format!("i{i}")),
            &input,
            &output,
            "kind = \"tumbling\"\nsize = \"1m\"",
            // No idleness: a partition paused while it moves to another
            // instance must hold the watermark back, not be skipped.
            "field = \"/ts\"\nmax_out_of_orderness = \"3s\"",
        );
        spec.name = name.clone();
        spec.checkpoint_dir = shared.clone();
        spec.extra.push_str(&format!(
            "\n[scale]\nmode = \"group\"\ntasks = 4\ninstance = \"i{i}\"\n\n\
             [kafka.properties]\n\"transaction.timeout.ms\" = \"30000\"\n"
        ));
        spec.write()
    };
    let mut i0 = WeirProcess::start(weir(), &config(0), &[]);
    let mut i1 = WeirProcess::start(weir(), &config(1), &[]);
    let half = all.len() / 2;
    produce(
        &input,
        4,
        &all[..half].iter().map(Event::json).collect::<Vec<_>>(),
    );
    std::thread::sleep(Duration::from_secs(4));
    // One instance dies mid-stream; its replacement restores its tasks.
    i1.kill9();
    produce(
        &input,
        4,
        &all[half..].iter().map(Event::json).collect::<Vec<_>>(),
    );
    let mut i1 = WeirProcess::start(weir(), &config(1), &[]);
    let records = read_until(&output, expected.len(), Duration::from_secs(180));
    let log = format!("{}\n{}", i0.log_text(), i1.log_text());
    assert_exact(&records, &expected, &log);
    // Each task's watermark is reported by the one instance that owns it
    // (a task that moved away is no longer reported by its old owner),
    // past the last window.
    let mut reported: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for w in [&mut i0, &mut i1] {
        let metrics = http(
            &w.admin_addr(Duration::from_secs(10)),
            "GET",
            "/metrics",
            None,
        )
        .1;
        for l in metrics
            .lines()
            .filter(|l| l.starts_with("weir_watermark_ms{"))
        {
            let subtask = l
                .split("subtask=\"")
                .nth(1)
                .and_then(|r| r.split('"').next());
            let value = l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok());
            if let (Some(t), Some(v)) = (subtask, value) {
                reported.entry(t.to_string()).or_default().push(v);
            }
        }
    }
    assert_eq!(
        reported.keys().cloned().collect::<Vec<_>>(),
        ["0", "1", "2", "3"],
        "one watermark per task: {reported:?}"
    );
    for (task, values) in &reported {
        assert_eq!(
            values.len(),
            1,
            "task {task} reported by two instances: {values:?}"
        );
        assert!(
            values[0] >= (last + 2 * MINUTE) as f64,
            "task {task}'s watermark {} is not past the last window (last event {last})",
            values[0]
        );
    }
    assert!(i1.stop(Duration::from_secs(60)).success());
    assert!(i0.stop(Duration::from_secs(60)).success());
}

#[test]
fn session_windows_merge_events_closer_than_the_gap() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = topic_pair("session", 2);
    let gap = 30_000;
    // Per user, bursts of events a few seconds apart, bursts minutes apart.
    let mut rng = Rng::new(5);
    let mut evs = Vec::new();
    for burst in 0..20i64 {
        for user in 0..20u64 {
            let base = T0 + burst * 5 * MINUTE + rng.below(60_000) as i64;
            for j in 0..(1 + rng.below(6)) as i64 {
                evs.push(Event {
                    id: evs.len() as u64,
                    user: format!("s{user}"),
                    ts: base + j * rng.below(25_000) as i64,
                });
            }
        }
    }
    evs.sort_by_key(|e| e.ts);
    // Reference sessions: per user, sort times, split where the next event
    // is at or beyond the current session's end (last + gap).
    let mut by_user: HashMap<String, Vec<i64>> = HashMap::new();
    for e in &evs {
        by_user.entry(e.user.clone()).or_default().push(e.ts);
    }
    let mut expected = BTreeMap::new();
    for (user, mut ts) in by_user {
        ts.sort();
        let (mut start, mut end, mut n) = (ts[0], ts[0] + gap, 0u64);
        for t in ts {
            if t > end {
                expected.insert(
                    WindowResult {
                        key: user.clone(),
                        start: rfc3339(start),
                        end: rfc3339(end),
                    },
                    n,
                );
                start = t;
                n = 0;
            }
            end = end.max(t + gap);
            n += 1;
        }
        expected.insert(
            WindowResult {
                key: user,
                start: rfc3339(start),
                end: rfc3339(end),
            },
            n,
        );
    }
    let mut all = evs.clone();
    let last = evs.iter().map(|e| e.ts).max().unwrap();
    all.extend(flush_events(2, last + 10 * MINUTE, 1_000_000));
    produce(&input, 2, &all.iter().map(Event::json).collect::<Vec<_>>());
    let spec = window_spec(
        dir.path(),
        &input,
        &output,
        "kind = \"session\"\ngap = \"30s\"",
        "field = \"/ts\"\nmax_out_of_orderness = \"1s\"",
    );
    let mut w = WeirProcess::start(weir(), &spec.write(), &[]);
    let records = read_until(&output, expected.len(), Duration::from_secs(120));
    assert_exact(&records, &expected, &w.log_text());
    assert!(w.stop(Duration::from_secs(60)).success());
}

#[test]
fn windows_close_when_a_silent_partition_goes_idle() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = topic_pair("idle", 2);
    // Everything goes to partition 0; partition 1 stays silent.
    let evs: Vec<Event> = (0..2_000)
        .map(|i| Event {
            id: i,
            user: format!("u{}", i % 10),
            ts: T0 + i as i64 * 100,
        })
        .collect();
    let expected = tumbling_expected(&evs, MINUTE);
    let mut all = evs.clone();
    all.extend(flush_events(1, T0 + 2_000 * 100 + 3 * MINUTE, 10_000));
    produce(&input, 1, &all.iter().map(Event::json).collect::<Vec<_>>());
    let spec = window_spec(
        dir.path(),
        &input,
        &output,
        "kind = \"tumbling\"\nsize = \"1m\"",
        "field = \"/ts\"\nmax_out_of_orderness = \"1s\"\nidle_timeout = \"2s\"",
    );
    let mut w = WeirProcess::start(weir(), &spec.write(), &[]);
    let records = read_until(&output, expected.len(), Duration::from_secs(60));
    assert_exact(&records, &expected, &w.log_text());
    assert!(w.stop(Duration::from_secs(60)).success());
}

#[test]
fn restoring_at_another_parallelism_mid_stream_keeps_windows_exact() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = topic_pair("rescale", 4);
    let evs = events(23, 4, 10_000, 30, 2_000, 200);
    let expected = tumbling_expected(&evs, MINUTE);
    let mut all = evs.clone();
    let last = evs.iter().map(|e| e.ts).max().unwrap();
    all.extend(flush_events(4, last + 3 * MINUTE, 1_000_000));
    let lines: Vec<String> = all.iter().map(Event::json).collect();
    let (first, second) = lines.split_at(20_000);
    let spec = window_spec(
        dir.path(),
        &input,
        &output,
        "kind = \"tumbling\"\nsize = \"1m\"",
        "field = \"/ts\"\nmax_out_of_orderness = \"3s\"",
    );
    produce(&input, 4, first);
    let mut w = WeirProcess::start(weir(), &spec.write(), &[]);
    assert!(w.wait_for_log("checkpoint completed", 3, Duration::from_secs(60)));
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        w.stop(Duration::from_secs(60)).success(),
        "{}",
        log_tail(&w.log_text())
    );
    // Windows are open at the stop; the next run has 3 subtasks.
    let spec3 = JobSpec {
        parallelism: 3,
        ..spec
    };
    let mut w = WeirProcess::start(weir(), &spec3.write(), &[]);
    produce(&input, 4, second);
    let records = read_until(&output, expected.len(), Duration::from_secs(120));
    assert_exact(&records, &expected, &w.log_text());
    assert!(w.stop(Duration::from_secs(60)).success());
}

/// A failed write-back of the timers (issue #38): the job goes on, and the
/// timers stay pending, so the next completed checkpoint holds them and
/// every window fires after a SIGKILL and a restore from it. Before, the
/// write-back dropped its pending set before the write: restored from that
/// later checkpoint, the windows had no timers and never fired. (The
/// write-back now runs once the snapshot's job is done, after the
/// snapshot was taken, so the checkpoint that asked for it completes: its
/// changes file holds the timers.)
#[test]
fn timers_whose_write_back_failed_are_kept_and_fire_after_a_restore() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = topic_pair("timer-write-back", 2);
    // 24,000 users with one event each in one hour: one subtask holds a
    // timer per user's window, more than a snapshot lets pend (16,384),
    // so a snapshot writes them back.
    let evs: Vec<Event> = (0..24_000)
        .map(|i| Event {
            id: i,
            user: format!("u{i}"),
            ts: T0 + i as i64,
        })
        .collect();
    let expected = tumbling_expected(&evs, 60 * MINUTE);
    produce(&input, 2, &evs.iter().map(Event::json).collect::<Vec<_>>());
    let spec = JobSpec {
        parallelism: 1,
        checkpoint_extra: "tolerable_failures = 10".into(),
        ..window_spec(
            dir.path(),
            &input,
            &output,
            "kind = \"tumbling\"\nsize = \"1h\"",
            "field = \"/ts\"\nmax_out_of_orderness = \"1s\"",
        )
    };
    let config = spec.write();
    // The first timer write-back fails.
    let mut w = WeirProcess::start(
        weir(),
        &config,
        &[("FAILPOINTS", "timers-write-back=1*return")],
    );
    assert!(
        w.wait_for_log("state write-back failed", 1, Duration::from_secs(60)),
        "{}",
        log_tail(&w.log_text())
    );
    // A checkpoint completed after the failed write-back, then a crash:
    // the restart restores that checkpoint.
    let completed = w.log_text().matches("checkpoint completed").count();
    assert!(
        w.wait_for_log(
            "checkpoint completed",
            completed + 2,
            Duration::from_secs(60)
        ),
        "{}",
        log_tail(&w.log_text())
    );
    w.kill9();
    let mut w = WeirProcess::start(weir(), &config, &[]);
    let flush = flush_events(2, T0 + 3 * 60 * MINUTE, 1_000_000);
    produce(
        &input,
        2,
        &flush.iter().map(Event::json).collect::<Vec<_>>(),
    );
    let records = read_until(&output, expected.len(), Duration::from_secs(90));
    assert_exact(&records, &expected, &w.log_text());
    assert!(w.stop(Duration::from_secs(60)).success());
}

#[test]
fn validate_names_each_bad_window_key() {
    let dir = tempfile::tempdir().unwrap();
    let spec = JobSpec {
        dead_letter_topic: None,
        ..window_spec(
            dir.path(),
            "in",
            "out",
            "kind = \"hopping\"\nsize = \"10s\"\nslide = \"20s\"\ngap = \"5s\"\non_late = \"dead-letter\"",
            "field = \"/ts\"",
        )
    };
    let out = std::process::Command::new(weir())
        .args(["validate", "--config"])
        .arg(spec.write())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let text =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    for key in [
        "pipeline.window.slide",
        "pipeline.window.gap",
        "source.dead_letter_topic",
    ] {
        assert!(text.contains(key), "{key} not named:\n{text}");
    }
}
