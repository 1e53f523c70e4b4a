//! Job graphs in group mode (`scale.mode = "group"`): several instances
//! of an example's binary share one job through Kafka's consumer group,
//! its repartition topics (one per keyed stage) and a shared checkpoint
//! folder; random instances are SIGKILLed and replaced. An independent
//! read_committed reader checks the output.

use std::collections::BTreeMap;
use std::time::Duration;

use weir_testkit::{create_topic, http, produce, unique, Rng};

#[path = "support/graph_jobs.rs"]
mod graph_jobs;
use graph_jobs::*;
#[path = "support/formats_kit.rs"]
mod formats_kit;
#[path = "support/group_cluster.rs"]
mod group_cluster;
#[path = "support/sql_kit.rs"]
mod sql_kit;
use group_cluster::*;

#[test]
fn two_stage_job_in_group_mode_is_exact_under_random_sigkills_of_three_instances() {
    let seed = seed();
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().unwrap();
    let (input, output, per_key) = (
        unique("gg-two-stage-in"),
        unique("gg-two-stage-out"),
        unique("gg-two-stage-windows"),
    );
    create_topic(&input, 3);
    create_topic(&output, 2);
    create_topic(&per_key, 2);
    let TwoStage { chunks, want } = two_stage_input(&mut rng);
    let env = [
        ("TWO_STAGE_INPUT", input.as_str()),
        ("TWO_STAGE_OUTPUT", output.as_str()),
        ("TWO_STAGE_WINDOWS", per_key.as_str()),
    ];
    let mut c = Cluster::new(dir.path(), "two_stage", &env);
    for i in 0..3 {
        c.start(i);
    }
    feed_with_random_kills(&mut c, (&input, 3), &chunks, 8, &mut rng);
    let records = read_final_table_within(&output, &want, Duration::from_secs(240));
    let got = table(&records);
    if got != want {
        eprintln!("{}", c.logs());
    }
    assert_eq!(
        got.len(),
        want.len(),
        "keys of the final table (seed {seed})"
    );
    assert_eq!(got, want, "final table (seed {seed})");
    assert_counts_up_by_one(&records, "keys", seed);
    c.assert_alive();
    // Both keyed stages ran as tasks of the group, each task owned once.
    let owned = c.owned();
    let all: Vec<u32> = (0..TASKS).collect();
    assert_eq!(owned.get("per-key"), Some(&all), "{owned:?}");
    assert_eq!(owned.get("keys-per-count"), Some(&all), "{owned:?}");
    c.stop_all();
}

/// 2026-11-30T00:00:00Z
const W0: i64 = 1_764_460_800_000;
const GAP: i64 = 30_000;

/// One input event of the windows example.
#[derive(Debug, Clone)]
struct Event {
    id: u64,
    user: String,
    ts: i64,
}

impl Event {
    fn json(&self) -> String {
        format!(
            r#"{{"id":{},"user":"{}","ts":{}}}"#,
            self.id, self.user, self.ts
        )
    }
}

/// What a window result says: (user, start, end) → count.
type Results = BTreeMap<(String, String, String), u64>;

fn rfc3339(ms: i64) -> String {
    let t = jiff::Timestamp::from_millisecond(ms).unwrap();
    format!("{t:.3}")
}

fn add(m: &mut Results, user: &str, start: i64, end: i64) {
    *m.entry((user.to_string(), rfc3339(start), rfc3339(end)))
        .or_default() += 1;
}

/// The three results the windows example must write for `events`.
fn expected_windows(events: &[Event]) -> [Results; 3] {
    let (mut tumbling, mut hopping, mut session) = (Results::new(), Results::new(), Results::new());
    let mut per_user: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
    for e in events {
        let start = e.ts - e.ts.rem_euclid(60_000);
        add(&mut tumbling, &e.user, start, start + 60_000);
        let last = e.ts - e.ts.rem_euclid(20_000);
        for k in 0..3 {
            let s = last - k * 20_000;
            add(&mut hopping, &e.user, s, s + 60_000);
        }
        per_user.entry(&e.user).or_default().push(e.ts);
    }
    for (user, mut times) in per_user {
        times.sort_unstable();
        let mut current: Option<(i64, i64, u64)> = None;
        for ts in times {
            current = match current {
                Some((s, end, n)) if ts <= end => Some((s, end.max(ts + GAP), n + 1)),
                Some((s, end, n)) => {
                    *session
                        .entry((user.to_string(), rfc3339(s), rfc3339(end)))
                        .or_default() += n;
                    Some((ts, ts + GAP, 1))
                }
                None => Some((ts, ts + GAP, 1)),
            };
        }
        if let Some((s, end, n)) = current {
            *session
                .entry((user.to_string(), rfc3339(s), rfc3339(end)))
                .or_default() += n;
        }
    }
    [tumbling, hopping, session]
}

/// Every result in `records`, each once per time it was written.
fn window_results(records: &[weir_testkit::OutRecord]) -> Vec<((String, String, String), u64)> {
    records
        .iter()
        .map(|r| {
            let v: serde_json::Value = serde_json::from_str(r.value.as_deref().unwrap()).unwrap();
            let user = v["user"].as_str().unwrap().to_string();
            assert_eq!(r.key.as_deref(), Some(user.as_str()), "record key = user");
            (
                (
                    user,
                    v["window_start"].as_str().unwrap().to_string(),
                    v["window_end"].as_str().unwrap().to_string(),
                ),
                v["count"].as_u64().expect("count"),
            )
        })
        .filter(|((user, _, _), _)| user != "__flush__")
        .collect()
}

fn read_results(topic: &str, n: usize, timeout: Duration) -> Vec<weir_testkit::OutRecord> {
    weir_testkit::read_topic(
        topic,
        weir_testkit::Isolation::Committed,
        timeout,
        Duration::from_secs(3),
        |r| window_results(r).len() >= n,
    )
}

/// Exactly one result per (user, window), with the true count.
fn assert_exactly_once(kind: &str, records: &[weir_testkit::OutRecord], want: &Results) {
    let mut seen: BTreeMap<(String, String, String), Vec<u64>> = BTreeMap::new();
    for (w, n) in window_results(records) {
        seen.entry(w).or_default().push(n);
    }
    let mut wrong = Vec::new();
    for (w, counts) in &seen {
        match want.get(w) {
            Some(n) if counts == &vec![*n] => {}
            n => wrong.push(format!("{w:?}: got {counts:?}, expected {n:?}")),
        }
    }
    for (w, n) in want {
        if !seen.contains_key(w) {
            wrong.push(format!("{w:?}: missing, expected {n}"));
        }
    }
    assert!(
        wrong.is_empty(),
        "{kind}: {} of {} windows wrong, e.g. {:?}",
        wrong.len(),
        want.len(),
        &wrong[..wrong.len().min(8)]
    );
}

#[test]
fn tumbling_hopping_and_session_windows_in_group_mode_are_exact_under_ten_sigkills() {
    let seed = seed();
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (unique("gg-events"), unique("gg-windows"));
    create_topic(&input, 4);
    let kinds = ["tumbling", "hopping", "session"];
    for kind in kinds {
        create_topic(&format!("{output}.{kind}"), 2);
        create_topic(&format!("{output}.{kind}.late"), 1);
    }
    // 4 partitions of 6,000 events, 20 ms of event time apart per
    // partition, up to 3 s out of order (the bound is 5 s), in bursts of
    // 20 s separated by 45 s of silence (so users have several sessions).
    let (partitions, per_partition, users) = (4usize, 6_000usize, 40u64);
    let mut on_time = Vec::new();
    for i in 0..per_partition {
        for _ in 0..partitions {
            let base = W0 + i as i64 * 20 + (i as i64 / 1_000) * 45_000;
            on_time.push(Event {
                id: on_time.len() as u64,
                user: format!("u{}", rng.below(users)),
                ts: base - rng.below(3_001) as i64,
            });
        }
    }
    // Late: an hour behind; they go in once a result is committed, so
    // every window they belong to has closed whatever the read order.
    let late: Vec<Event> = (0..30u64)
        .map(|k| Event {
            id: 1_000_000 + k,
            user: format!("u{}", k % 7),
            ts: W0 - 3_600_000 + k as i64 * 1_000,
        })
        .collect();
    let want = expected_windows(&on_time);
    let last = on_time.iter().map(|e| e.ts).max().unwrap();
    let flush: Vec<String> = (0..partitions)
        .map(|p| {
            Event {
                id: 2_000_000 + p as u64,
                user: "__flush__".into(),
                ts: last + 3 * 60_000,
            }
            .json()
        })
        .collect();
    let lines: Vec<String> = on_time.iter().map(Event::json).collect();
    let (first_half, second_half) = lines.split_at(lines.len() / 2);
    let (first_half, second_half) = (first_half.to_vec(), second_half.to_vec());
    let late_lines: Vec<String> = late.iter().map(Event::json).collect();
    let first_done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let go_on = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let feeder = {
        let input = input.clone();
        let (first_done, go_on) = (first_done.clone(), go_on.clone());
        std::thread::spawn(move || {
            use std::sync::atomic::Ordering::SeqCst;
            // Chunks of a multiple of the partition count keep each
            // partition's events in order (testkit's `produce` deals
            // element i to partition i % partitions).
            for chunk in first_half.chunks(400) {
                produce(&input, 4, chunk);
                std::thread::sleep(Duration::from_millis(250));
            }
            first_done.store(true, SeqCst);
            while !go_on.load(SeqCst) {
                std::thread::sleep(Duration::from_millis(50));
            }
            let per = second_half.len() / late_lines.len();
            for (i, chunk) in second_half.chunks(per).enumerate() {
                let mut lines = chunk.to_vec();
                if let Some(l) = late_lines.get(i) {
                    // The chunk's events move up one partition: a few ms
                    // of event time, far within the 5 s bound.
                    lines.insert(0, l.clone());
                }
                produce(&input, 4, &lines);
                std::thread::sleep(Duration::from_millis(100));
            }
            produce(&input, 4, &flush);
        })
    };
    let env = [
        ("WINDOWS_INPUT", input.as_str()),
        ("WINDOWS_OUTPUT", output.as_str()),
    ];
    let mut c = Cluster::new(dir.path(), "windows", &env);
    for i in 0..3 {
        c.start(i);
    }
    for kill in 0..10 {
        std::thread::sleep(Duration::from_millis(1_500 + rng.below(2_500)));
        c.assert_alive();
        let victim = rng.below(3) as usize;
        eprintln!("kill {kill}: SIGKILL i{victim}");
        c.kill9(victim);
        std::thread::sleep(Duration::from_millis(rng.below(2_000)));
        c.start(victim);
        if kill == 3 {
            while !first_done.load(std::sync::atomic::Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(50));
            }
            read_results(&format!("{output}.tumbling"), 1, Duration::from_secs(120));
            go_on.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }
    feeder.join().unwrap();
    for (kind, want) in kinds.iter().zip(&want) {
        let records = read_results(
            &format!("{output}.{kind}"),
            want.len(),
            Duration::from_secs(240),
        );
        if window_results(&records).len() < want.len() {
            eprintln!("{}", c.logs());
        }
        assert_exactly_once(kind, &records, want);
        // The dead-letter topic holds each late event once, with the
        // window and watermark in headers.
        let dead = weir_testkit::read_topic(
            &format!("{output}.{kind}.late"),
            weir_testkit::Isolation::Committed,
            Duration::from_secs(60),
            Duration::from_secs(2),
            |r| r.len() >= late.len(),
        );
        let mut ids: Vec<u64> = dead
            .iter()
            .map(|r| {
                for h in [
                    "weir.late.window_start",
                    "weir.late.window_end",
                    "weir.late.watermark",
                ] {
                    assert!(
                        r.headers.contains_key(h),
                        "{kind}: {h} missing: {:?}",
                        r.headers
                    );
                }
                let v: serde_json::Value =
                    serde_json::from_str(r.value.as_deref().unwrap()).unwrap();
                v["id"].as_u64().unwrap()
            })
            .collect();
        ids.sort_unstable();
        let want_ids: Vec<u64> = late.iter().map(|e| e.id).collect();
        assert_eq!(
            ids, want_ids,
            "{kind}: the late events, each once (seed {seed})"
        );
    }
    c.assert_alive();
    c.stop_all();
}

#[test]
fn an_updating_result_crosses_a_repartition_topic_and_ends_exact_under_sigkills() {
    let seed = seed();
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (unique("gg-payments"), unique("gg-users-per-total"));
    create_topic(&input, 3);
    create_topic(&output, 2);
    let Payments {
        lines,
        want,
        totals,
        ..
    } = payments(&mut rng, 40, 5000, 5);
    let chunks: Vec<Vec<String>> = lines.chunks(400).map(<[String]>::to_vec).collect();
    let env = [
        ("TOTALS_INPUT", input.as_str()),
        ("TOTALS_OUTPUT", output.as_str()),
    ];
    let mut c = Cluster::new(dir.path(), "running_totals", &env);
    for i in 0..3 {
        c.start(i);
    }
    feed_with_random_kills(&mut c, (&input, 3), &chunks, 5, &mut rng);
    // Each change of a user's total is a retraction of the old total and
    // an addition to the new one in the second stage, through the
    // repartition topic: the final table is the true distribution.
    let records = read_final_table_within(&output, &want, Duration::from_secs(240));
    let got = table(&records);
    if got != want {
        eprintln!("{}", c.logs());
    }
    assert_eq!(got, want, "users per current total (seed {seed})");
    c.assert_alive();
    // Interactive queries: of the running instances, exactly the one that
    // owns a user's task answers with the user's total; the others answer
    // 421 naming the task.
    let all: Vec<u32> = (0..TASKS).collect();
    let started = std::time::Instant::now();
    while c.owned().get("totals") != Some(&all) {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "tasks owned: {:?}",
            c.owned()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    let addrs: Vec<String> = c
        .running
        .values_mut()
        .map(|w| w.admin_addr(Duration::from_secs(30)))
        .collect();
    for (u, total) in totals.iter().take(10) {
        let mut answered = 0;
        for addr in &addrs {
            let (status, body) = http(addr, "GET", &format!("/state/totals/u{u}"), None);
            match status {
                200 => {
                    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
                    assert_eq!(v["value"], serde_json::json!({"total": total}), "{body}");
                    answered += 1;
                }
                421 => assert!(body.contains("\"task\""), "{body}"),
                other => panic!("u{u} at {addr}: {other} {body}"),
            }
        }
        assert_eq!(answered, 1, "u{u} answered by one instance");
    }
    c.stop_all();
}

#[test]
fn a_two_input_operator_in_group_mode_is_exact_under_sigkills() {
    let seed = seed();
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().unwrap();
    let (clicks, views, counts) = (
        unique("gg-clicks"),
        unique("gg-views"),
        unique("gg-clicks-views"),
    );
    // Different partition counts: the two inputs of a key meet in the
    // stage's one repartition topic, not by partition.
    create_topic(&clicks, 4);
    create_topic(&views, 1);
    create_topic(&counts, 2);
    let input = clicks_views_input(&mut rng, seed, &views);
    let env = [
        ("CLICKS", clicks.as_str()),
        ("VIEWS", views.as_str()),
        ("COUNTS", counts.as_str()),
    ];
    let mut c = Cluster::new(dir.path(), "clicks_views", &env);
    for i in 0..3 {
        c.start(i);
    }
    feed_with_random_kills(&mut c, (&clicks, 4), &input.chunks, 5, &mut rng);
    let want = ClicksViews::want(&input.clicks, &input.views.join().unwrap());
    let records = read_final_table_within(&counts, &want, Duration::from_secs(240));
    let got = table(&records);
    if got != want {
        eprintln!("{}", c.logs());
    }
    assert_eq!(got, want, "clicks and views per user (seed {seed})");
    assert_each_update_moves_one_count(&records, seed);
    c.assert_alive();
    c.stop_all();
}

#[test]
fn sql_queries_in_group_mode_are_exact_under_sigkills_of_three_instances() {
    let seed = seed();
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().unwrap();
    let sql_kit::Bids { data, bids, flush } = sql_kit::nexmark_bids(dir.path(), seed, 3);
    let (bid_topic, dlq) = (unique("gg-sql-bid"), unique("gg-sql-dlq"));
    create_topic(&bid_topic, 3);
    create_topic(&dlq, 1);
    let queries: Vec<weir_testkit::sql::Query> = weir_testkit::sql::queries()
        .into_iter()
        .filter(|q| ["q1", "q11", "q17", "hot_items"].contains(&q.sink))
        .collect();
    let sinks: Vec<(String, String)> = queries
        .iter()
        .map(|q| (q.sink.to_string(), unique(&format!("gg-sql-{}", q.sink))))
        .collect();
    for (_, topic) in &sinks {
        create_topic(topic, 2);
    }
    let sections =
        weir_testkit::sql::sql_sections(&bid_topic, &dlq, &sinks, &sql_kit::job_sql(&queries));
    let mut c = Cluster::sql(dir.path(), &sections);
    for i in 0..3 {
        c.start(i);
    }
    let mut chunks: Vec<Vec<String>> = bids
        .chunks(bids.len() / 10 + 1)
        .map(<[String]>::to_vec)
        .collect();
    chunks.push(flush);
    feed_with_random_kills(&mut c, (&bid_topic, 3), &chunks, 5, &mut rng);
    for (q, (_, topic)) in queries.iter().zip(&sinks) {
        sql_kit::assert_matches_duckdb(q, topic, &data, Duration::from_secs(240), &|| {
            format!("seed {seed}\n{}", c.logs())
        });
    }
    c.assert_alive();
    c.stop_all();
}

/// Nexmark's joins in group mode (q3 a regular join, q5 and q8 window
/// joins, q9 an interval join under a top-N), three instances over three
/// input topics, five SIGKILLs: a join's two inputs cross repartition
/// topics and align there, and each result equals DuckDB's.
#[test]
fn sql_joins_in_group_mode_are_exact_under_sigkills_of_three_instances() {
    let seed = seed();
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().unwrap();
    let input = sql_kit::nexmark_streams(dir.path(), seed, 6000, 3);
    let topics: BTreeMap<&str, String> = ["person", "auction", "bid"]
        .into_iter()
        .map(|t| (t, unique(&format!("gg-sqlj-{t}"))))
        .collect();
    for t in topics.values() {
        create_topic(t, 3);
    }
    let queries: Vec<weir_testkit::sql::Query> = weir_testkit::nexmark::join_queries()
        .into_iter()
        .filter(|q| ["q3", "q5", "q8", "q9"].contains(&q.sink))
        .collect();
    assert_eq!(queries.len(), 4);
    let sinks: Vec<(String, String)> = queries
        .iter()
        .map(|q| (q.sink.to_string(), unique(&format!("gg-sqlj-{}", q.sink))))
        .collect();
    for (_, topic) in &sinks {
        create_topic(topic, 2);
    }
    let sql = sql_kit::inserts(&queries);
    let sections = sql_kit::nexmark_sections(&topics, &sinks, "", &sql);
    let mut c = Cluster::sql(dir.path(), &sections);
    for i in 0..3 {
        c.start(i);
    }
    let chunks = 10;
    feed_with_random_kills_by(&mut c, chunks + 1, 5, &mut rng, |i| {
        for (table, lines) in input.chunk(i, chunks) {
            produce(&topics[table], 3, &lines);
        }
    });
    for (q, (_, topic)) in queries.iter().zip(&sinks) {
        sql_kit::assert_matches_duckdb(q, topic, &input.data, Duration::from_secs(240), &|| {
            format!("seed {seed}\n{}", c.logs())
        });
    }
    c.assert_alive();
    c.stop_all();
}

/// Operators over updating input in group mode (three instances, five
/// SIGKILLs): a WHERE over a GROUP BY whose rows leave the range, MIN/MAX
/// over an updating aggregate (every value kept) and a top-3 per bidder
/// over one (every row kept), each behind a repartition topic that carries
/// the changes; a top-3 and a deduplication per window straight over
/// TUMBLE's rows; NOT EXISTS (persons without an auction, taken back when
/// one appears) and EXCEPT as anti-joins. Each equal to DuckDB's answer.
#[test]
fn sql_over_updating_input_in_group_mode_is_exact_under_sigkills_of_three_instances() {
    let seed = seed();
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().unwrap();
    let input = sql_kit::nexmark_streams(dir.path(), seed, 6000, 3);
    let topics: BTreeMap<&str, String> = ["person", "auction", "bid"]
        .into_iter()
        .map(|t| (t, unique(&format!("gg-sqlu-{t}"))))
        .collect();
    for t in topics.values() {
        create_topic(t, 3);
    }
    let queries: Vec<weir_testkit::sql::Query> = weir_testkit::sql::updating_queries()
        .into_iter()
        .chain(weir_testkit::sql::window_row_queries())
        .chain(weir_testkit::sql::subquery_queries())
        .filter(|q| {
            [
                "where_over_group_by",
                "min_max_over_updating",
                "top3_over_updating",
                "window_top3",
                "window_dedup",
                "not_exists",
                "except",
            ]
            .contains(&q.sink)
        })
        .collect();
    assert_eq!(queries.len(), 7);
    let sinks: Vec<(String, String)> = queries
        .iter()
        .map(|q| (q.sink.to_string(), unique(&format!("gg-sqlu-{}", q.sink))))
        .collect();
    for (_, topic) in &sinks {
        create_topic(topic, 2);
    }
    let sql = format!(
        "{}{}",
        weir_testkit::sql::UPDATING_VIEWS,
        sql_kit::inserts(&queries)
    );
    let sections = sql_kit::nexmark_sections(&topics, &sinks, "", &sql);
    let mut c = Cluster::sql(dir.path(), &sections);
    for i in 0..3 {
        c.start(i);
    }
    let chunks = 10;
    feed_with_random_kills_by(&mut c, chunks + 1, 5, &mut rng, |i| {
        for (table, lines) in input.chunk(i, chunks) {
            produce(&topics[table], 3, &lines);
        }
    });
    for (q, (_, topic)) in queries.iter().zip(&sinks) {
        sql_kit::assert_matches_duckdb(q, topic, &input.data, Duration::from_secs(240), &|| {
            format!("seed {seed}\n{}", c.logs())
        });
    }
    c.assert_alive();
    c.stop_all();
}

/// Nexmark with bids in Avro and persons and auctions in Protobuf
/// (confluent-kafka's serializers, through the registry) in group mode:
/// three instances over three-partition topics, five SIGKILLs; q0, q17
/// (an updating aggregate), q3 (a regular join of persons and auctions)
/// and q5 (a window join of bids) each equal DuckDB's answer.
#[test]
fn sql_over_avro_and_protobuf_in_group_mode_is_exact_under_sigkills_of_three_instances() {
    let seed = seed();
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().unwrap();
    let input = sql_kit::nexmark_streams(dir.path(), seed, 6000, 3);
    let topics: BTreeMap<&str, String> = ["person", "auction", "bid"]
        .into_iter()
        .map(|t| (t, unique(&format!("gg-fmt-{t}"))))
        .collect();
    for t in topics.values() {
        create_topic(t, 3);
    }
    let queries: Vec<weir_testkit::sql::Query> = weir_testkit::sql::queries()
        .into_iter()
        .filter(|q| ["q0", "q17"].contains(&q.sink))
        .chain(
            weir_testkit::nexmark::join_queries()
                .into_iter()
                .filter(|q| ["q3", "q5"].contains(&q.sink)),
        )
        .collect();
    assert_eq!(queries.len(), 4);
    let sinks: Vec<(String, String)> = queries
        .iter()
        .map(|q| (q.sink.to_string(), unique(&format!("gg-fmt-{}", q.sink))))
        .collect();
    let mut sections = formats_kit::nexmark_format_sections(&topics);
    for (name, topic) in &sinks {
        create_topic(topic, 2);
        sections.push_str(&format!(
            "\n[sinks.{name}]\ntopic = \"{topic}\"\ndelivery = \"exactly-once\"\n"
        ));
    }
    sections.push_str(&format!(
        "\n[pipeline]\nsql = \"\"\"\n{}\n\"\"\"\n",
        sql_kit::inserts(&queries)
    ));
    let chunks = 10;
    // The persons' and auctions' columns come from the registry: their
    // first events are there before the instances plan.
    for (table, lines) in input.chunk(0, chunks) {
        formats_kit::produce_nexmark(&topics[table], 3, table, &lines);
    }
    let mut c = Cluster::sql(dir.path(), &sections);
    for i in 0..3 {
        c.start(i);
    }
    feed_with_random_kills_by(&mut c, chunks, 5, &mut rng, |i| {
        for (table, lines) in input.chunk(i + 1, chunks) {
            formats_kit::produce_nexmark(&topics[table], 3, table, &lines);
        }
    });
    for (q, (_, topic)) in queries.iter().zip(&sinks) {
        sql_kit::assert_matches_duckdb(q, topic, &input.data, Duration::from_secs(240), &|| {
            format!("seed {seed}\n{}", c.logs())
        });
    }
    c.assert_alive();
    c.stop_all();
}
