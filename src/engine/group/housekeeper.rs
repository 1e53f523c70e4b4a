//! Storage collection and repartition trimming for one instance, on a
//! thread of its own. Both list or delete over the network (every task's
//! storage prefix and manifests; the admin API's DeleteRecords), which the
//! poll thread must not wait for: it would stall reading, heartbeats of the
//! epoch and answers to queries for as long as storage is slow.
//!
//! A round covers only the tasks whose offsets the instance has just
//! committed: the commit proved the instance owned them then, and a
//! collection from an older view could delete what a new owner committed.
//! A round that finds the thread busy is skipped (the next one covers the
//! same tasks); the final round on the stop path is waited for.

use std::collections::BTreeMap;
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::thread::JoinHandle;

use rdkafka::admin::AdminClient;
use rdkafka::client::DefaultClientContext;
use tracing::{debug, warn};

use super::storage::SharedStorage;
use super::{checkpoints, repartition};
use crate::config::Config;
use crate::error::Result;

/// One task to collect: its storage prefix and the checkpoint its offset
/// now names.
#[derive(Debug, Clone)]
pub struct Collect {
    pub stage: usize,
    pub task: u32,
    pub prefix: String,
    pub committed: String,
}

/// What one round does.
#[derive(Debug, Default)]
pub struct Round {
    pub collect: Vec<Collect>,
    /// Per repartition topic, each task's committed offset: records below
    /// it are deleted.
    pub trim: BTreeMap<String, Vec<(i32, i64)>>,
    /// The instance is stopping: its own uncommitted manifests go too.
    pub stopping: bool,
}

/// How collection judges objects, fixed for the instance's attempt.
#[derive(Debug, Clone)]
pub struct Rules {
    pub retained: u32,
    pub grace_ms: i64,
    /// Prefix of this instance's writers' ids (`<writer>-`).
    pub own: String,
}

pub struct Housekeeper {
    rounds: Option<SyncSender<Round>>,
    thread: Option<JoinHandle<()>>,
}

impl Housekeeper {
    /// Its own storage client and admin client, kept for the attempt (a
    /// client per round cost a connection set-up every 10 s), so that the
    /// poll thread's storage calls never queue behind its own.
    pub fn start(config: &Config, rules: Rules) -> Result<Self> {
        let storage = SharedStorage::open(config)?;
        let admin = repartition::admin(config)?;
        let (tx, rx) = sync_channel::<Round>(0);
        let thread = std::thread::Builder::new()
            .name("weir-housekeeper".into())
            .spawn(move || {
                while let Ok(round) = rx.recv() {
                    run_round(&storage, &admin, &rules, &round);
                }
            })
            .expect("spawn the housekeeper thread");
        Ok(Self {
            rounds: Some(tx),
            thread: Some(thread),
        })
    }

    /// Hands `round` to the thread unless it is busy with the last one.
    pub fn offer(&self, round: Round) {
        let Some(tx) = &self.rounds else { return };
        match tx.try_send(round) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                debug!("housekeeping still running; this round is skipped")
            }
            Err(TrySendError::Disconnected(_)) => warn!("the housekeeper thread is gone"),
        }
    }

    /// Runs `round` after whatever is running, and waits for both: the
    /// stop path's final collection.
    pub fn finish(&mut self, round: Round) {
        if let Some(tx) = self.rounds.take() {
            let _ = tx.send(round);
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Housekeeper {
    fn drop(&mut self) {
        // Closing the channel ends the thread after its current round;
        // not waited for (an attempt failing must not wait for storage).
        self.rounds.take();
    }
}

fn run_round(
    storage: &SharedStorage,
    admin: &AdminClient<DefaultClientContext>,
    rules: &Rules,
    round: &Round,
) {
    for c in &round.collect {
        let collected = checkpoints::collect(
            storage,
            &c.prefix,
            &c.committed,
            rules.retained,
            rules.grace_ms,
            &rules.own,
            round.stopping,
        );
        match collected {
            Ok(n) if n > 0 => {
                debug!(
                    stage = c.stage,
                    task = c.task,
                    deleted = n,
                    "storage garbage collected"
                )
            }
            Ok(_) => {}
            Err(e) => {
                warn!(stage = c.stage, task = c.task, error = %e.report(), "storage garbage collection failed; retried later")
            }
        }
    }
    for (topic, offsets) in &round.trim {
        if let Err(e) = repartition::trim(admin, topic, offsets) {
            warn!(topic = %topic, error = %e.report(), "trimming a repartition topic failed; retried later");
        }
    }
}
