//! A group-mode job's instances for tests: each with its own folder
//! (config, log, state), all sharing the job name, the group and the
//! checkpoint folder; SIGKILLs of random instances while input is fed.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use weir_testkit::{http, log_tail, produce, unique, Rng, WeirProcess};

use crate::graph_jobs::{example, graph_config_with};

/// Tasks per stage in every group-mode test job (`scale.tasks`).
pub const TASKS: u32 = 4;

/// One graph job's instances: each has its own folder (config, log,
/// state); all share the job name, the group and the checkpoint folder.
pub struct Cluster {
    pub base: PathBuf,
    pub name: String,
    pub binary: PathBuf,
    pub env: Vec<(String, String)>,
    pub running: BTreeMap<usize, WeirProcess>,
    /// More configuration for every instance (a SQL job's sections).
    pub sections: String,
    /// How many processes had said "admin endpoint listening" in each
    /// instance's (appended) log when its running process was started.
    listening_before: BTreeMap<usize, usize>,
}

impl Cluster {
    pub fn new(base: &Path, example_name: &str, env: &[(&str, &str)]) -> Self {
        Self {
            base: base.to_path_buf(),
            name: unique("graph-group"),
            binary: example(example_name),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            running: BTreeMap::new(),
            sections: String::new(),
            listening_before: BTreeMap::new(),
        }
    }

    /// A SQL job's instances: `weir run` with `sections` in each one's file.
    pub fn sql(base: &Path, sections: &str) -> Self {
        Self {
            base: base.to_path_buf(),
            name: unique("sql-group"),
            binary: crate::sql_kit::weir(),
            env: Vec::new(),
            running: BTreeMap::new(),
            sections: sections.to_string(),
            listening_before: BTreeMap::new(),
        }
    }

    pub fn start(&mut self, i: usize) {
        self.start_with(i, &[]);
    }

    /// As [`Cluster::start`], with `args` after `--config` (`--restore-from`).
    pub fn start_with(&mut self, i: usize, args: &[&str]) {
        let extra = format!(
            "\n[scale]\nmode = \"group\"\ntasks = {TASKS}\ninstance = \"i{i}\"\n\n\
             [kafka.properties]\n\"transaction.timeout.ms\" = \"30000\"\n{}",
            self.sections
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
        let listening = std::fs::read_to_string(config.with_file_name("weir.log"))
            .map_or(0, |log| log.matches("admin endpoint listening").count());
        self.listening_before.insert(i, listening);
        let w = WeirProcess::start_with(&self.binary, &config, args, &env);
        self.running.insert(i, w);
    }

    pub fn kill9(&mut self, i: usize) {
        if let Some(mut w) = self.running.remove(&i) {
            w.kill9();
            let _ = w.wait(Duration::from_secs(10));
        }
    }

    pub fn logs(&self) -> String {
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
    pub fn assert_alive(&mut self) {
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
    pub fn owned(&mut self) -> BTreeMap<String, Vec<u32>> {
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

    /// SIGTERMs every instance and expects a clean stop (a final
    /// checkpoint). One just (re)started is first waited for until it
    /// listens, as a supervisor's stop would find it running: a SIGTERM
    /// before weir installs its handler is the default action's death.
    pub fn stop_all(&mut self) {
        let ids: Vec<usize> = self.running.keys().copied().collect();
        for i in ids {
            let mut w = self.running.remove(&i).unwrap();
            let before = self.listening_before.get(&i).copied().unwrap_or(0);
            let up = w.wait_for_log(
                "admin endpoint listening",
                before + 1,
                Duration::from_secs(60),
            );
            assert!(up, "i{i} never listened:\n{}", log_tail(&w.log_text()));
            let status = w.stop(Duration::from_secs(60));
            assert!(
                status.success(),
                "i{i} did not stop cleanly:\n{}",
                log_tail(&w.log_text())
            );
        }
    }
}

/// Feeds `chunks` to `input` while SIGKILLing a random instance after
/// every `chunks / (kills + 1)` chunks and starting it again after a
/// random pause.
pub fn feed_with_random_kills(
    c: &mut Cluster,
    input: (&str, i32),
    chunks: &[Vec<String>],
    kills: usize,
    rng: &mut Rng,
) {
    feed_with_random_kills_by(c, chunks.len(), kills, rng, |i| {
        produce(input.0, input.1, &chunks[i])
    });
}

/// As [`feed_with_random_kills`], with `send(i)` writing chunk `i`.
pub fn feed_with_random_kills_by(
    c: &mut Cluster,
    chunks: usize,
    kills: usize,
    rng: &mut Rng,
    send: impl Fn(usize),
) {
    let every = (chunks / (kills + 1)).max(1);
    let mut killed = 0;
    for i in 0..chunks {
        send(i);
        std::thread::sleep(Duration::from_millis(100 + rng.below(300)));
        if killed < kills && i % every == every - 1 {
            c.assert_alive();
            // One of the running instances (0, 1, 2 for a cluster of three).
            let ids: Vec<usize> = c.running.keys().copied().collect();
            let victim = ids[rng.below(ids.len() as u64) as usize];
            eprintln!("kill {killed}: SIGKILL i{victim}");
            c.kill9(victim);
            killed += 1;
            std::thread::sleep(Duration::from_millis(rng.below(2_000)));
            c.start(victim);
        }
    }
    assert_eq!(killed, kills, "every planned kill happened");
}
