//! Job graphs in group mode (`scale.mode = "group"`): several instances
//! of an example's binary share one job through Kafka's consumer group,
//! its repartition topics (one per keyed stage) and a shared checkpoint
//! folder; random instances are SIGKILLed and replaced. An independent
//! read_committed reader checks the output.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use weir_testkit::{create_topic, http, log_tail, produce, unique, Rng, WeirProcess};

#[path = "support/graph_jobs.rs"]
mod graph_jobs;
use graph_jobs::*;

const TASKS: u32 = 4;

/// One graph job's instances: each has its own folder (config, log,
/// state); all share the job name, the group and the checkpoint folder.
struct Cluster {
    base: PathBuf,
    name: String,
    binary: PathBuf,
    env: Vec<(String, String)>,
    running: BTreeMap<usize, WeirProcess>,
}

impl Cluster {
    fn new(base: &Path, example_name: &str, env: &[(&str, &str)]) -> Self {
        Self {
            base: base.to_path_buf(),
            name: unique("graph-group"),
            binary: example(example_name),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            running: BTreeMap::new(),
        }
    }

    fn start(&mut self, i: usize) {
        let extra = format!(
            "\n[scale]\nmode = \"group\"\ntasks = {TASKS}\ninstance = \"i{i}\"\n\n\
             [kafka.properties]\n\"transaction.timeout.ms\" = \"30000\"\n"
        );
        let config = graph_config_with(
            &self.base.join(format!("i{i}")),
            &self.name,
            1,
            &self.base.join("checkpoints"),
            &extra,
        );
        let mut env: Vec<(&str, &str)> = self
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        env.push(("RUST_LOG", "info"));
        let w = WeirProcess::start(&self.binary, &config, &env);
        self.running.insert(i, w);
    }

    fn kill9(&mut self, i: usize) {
        if let Some(mut w) = self.running.remove(&i) {
            w.kill9();
            let _ = w.wait(Duration::from_secs(10));
        }
    }

    fn logs(&self) -> String {
        let mut out = String::new();
        for i in 0..4 {
            if let Ok(text) = std::fs::read_to_string(self.base.join(format!("i{i}/weir.log"))) {
                out.push_str(&format!("==== i{i}\n{}\n", log_tail(&text)));
            }
        }
        out
    }

    /// Every running instance is alive; one the group fenced (unresponsive
    /// past the session timeout on a loaded machine: it exits saying so,
    /// the specified behaviour) is restarted, as its supervisor would.
    fn assert_alive(&mut self) {
        let mut fenced = Vec::new();
        let mut dead = Vec::new();
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

    /// The stages' tasks the running instances report, all together.
    fn owned(&mut self) -> BTreeMap<String, Vec<u32>> {
        let mut all: BTreeMap<String, Vec<u32>> = BTreeMap::new();
        for w in self.running.values_mut() {
            let addr = w.admin_addr(Duration::from_secs(30));
            let (status, body) = http(&addr, "GET", "/tasks", None);
            assert_eq!(status, 200, "{body}");
            let v: serde_json::Value = serde_json::from_str(&body).unwrap();
            if let Some(stages) = v["stages"].as_object() {
                for (stage, tasks) in stages {
                    let tasks = tasks
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|t| t.as_u64().unwrap() as u32);
                    all.entry(stage.clone()).or_default().extend(tasks);
                }
            }
        }
        for tasks in all.values_mut() {
            tasks.sort();
        }
        all
    }

    fn stop_all(&mut self) {
        let ids: Vec<usize> = self.running.keys().copied().collect();
        for i in ids {
            let mut w = self.running.remove(&i).unwrap();
            let status = w.stop(Duration::from_secs(60));
            assert!(
                status.success(),
                "i{i} did not stop cleanly:\n{}",
                log_tail(&w.log_text())
            );
        }
    }
}

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
    let kills = 8;
    let every = (chunks.len() / (kills + 1)).max(1);
    let mut killed = 0;
    for (i, chunk) in chunks.iter().enumerate() {
        produce(&input, 3, chunk);
        std::thread::sleep(Duration::from_millis(100 + rng.below(300)));
        if killed < kills && i % every == every - 1 {
            c.assert_alive();
            let victim = rng.below(3) as usize;
            eprintln!("kill {killed}: SIGKILL i{victim}");
            c.kill9(victim);
            killed += 1;
            std::thread::sleep(Duration::from_millis(rng.below(2_000)));
            c.start(victim);
        }
    }
    assert_eq!(killed, kills, "every planned kill happened");
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
