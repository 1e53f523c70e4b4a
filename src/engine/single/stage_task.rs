//! A stage task: one subtask of a stage whose head reads from exchanges
//! (a keyed operator, a union, a sink after a hash edge), scheduled on a
//! thread of its own. It owns its inputs (one channel per upstream subtask
//! of each input edge, both inputs of a two-input operator alike) and
//! barrier alignment over all of them; what it reads goes through its
//! [`TaskCore`] (the chain, the watermark over the channels, the
//! snapshot), as a group-mode task's does.

use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Select, Sender};
use tracing::debug;

use super::alignment::BarrierAligner;
use crate::checkpoint::CheckpointStore;
use crate::config::CheckpointMode;
use crate::dataflow::Record;
use crate::element::{Barrier, Element};
use crate::engine::chain::TakenCheckpoint;
use crate::engine::core::{InputEvent, TaskCore};
use crate::error::{Result, WeirError};
use crate::runtime::gate::EpochGate;
use crate::runtime::query::StateQuery;
use crate::runtime::Ack;

/// One input channel and the head's input port it feeds.
pub struct Input {
    pub channel: Receiver<Element<Record>>,
    pub port: usize,
}

/// The name of input channel `i` in the task's watermark marks.
pub fn input_name(i: usize) -> String {
    format!("channel-{i}")
}

pub struct StageTask {
    pub core: TaskCore,
    pub inputs: Vec<Input>,
    pub mode: CheckpointMode,
    pub store: CheckpointStore,
    pub acks: Sender<Ack>,
    pub gate: std::sync::Arc<EpochGate>,
    /// Interactive queries, per keyed node of the chain (by slot).
    pub queries: Vec<(usize, Receiver<StateQuery>)>,
}

impl StageTask {
    pub fn run(mut self) -> Result<()> {
        let mut aligner = BarrierAligner::new(self.inputs.len(), self.mode);
        let names: Vec<String> = (0..self.inputs.len()).map(input_name).collect();
        let mut alignment_started: Option<Instant> = None;
        let records_in = self.core.chain.metrics.records_in.with_label_values(&[self
            .core
            .chain
            .slots[0]
            .uid
            .as_str()]);
        let inputs = std::mem::take(&mut self.inputs);
        loop {
            if self.core.chain.cancel.is_cancelled() {
                return Ok(());
            }
            self.core.chain.release_sinks()?;
            for (slot, queries) in &self.queries {
                while let Ok(q) = queries.try_recv() {
                    self.core.chain.answer(*slot, q, None);
                }
            }
            if let Some(pending) = aligner.pending() {
                let cancelled = self.gate.cancelled();
                if cancelled >= pending && aligner.cancel(cancelled) {
                    debug!(task = %self.core.chain.task, checkpoint_id = pending, "alignment cancelled");
                    alignment_started = None;
                }
            }
            let readable: Vec<usize> = (0..inputs.len())
                .filter(|i| aligner.is_live(*i) && !aligner.is_blocked(*i))
                .collect();
            if readable.is_empty() {
                if aligner.all_finished() {
                    return Ok(());
                }
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            let mut select = Select::new();
            for i in &readable {
                select.recv(&inputs[*i].channel);
            }
            let Ok(op) = select.select_timeout(Duration::from_millis(50)) else {
                continue;
            };
            let input = readable[op.index()];
            let Ok(element) = op.recv(&inputs[input].channel) else {
                if self.core.chain.cancel.is_cancelled() {
                    return Ok(());
                }
                return Err(WeirError::PeerGone {
                    task: self.core.chain.task.clone(),
                    reason: format!("input {input} stopped without end of stream"),
                });
            };
            match element {
                Element::Records(records) => {
                    records_in.inc_by(records.len() as u64);
                    let port = inputs[input].port;
                    self.core
                        .on_input(&names[input], InputEvent::Rows { port, records })?;
                    self.core.chain.flush()?;
                }
                Element::Watermark(w) => self
                    .core
                    .on_input(&names[input], InputEvent::Watermark(w))?,
                Element::Idle(idle) => self.core.on_input(&names[input], InputEvent::Idle(idle))?,
                Element::Barrier(b) => {
                    alignment_started.get_or_insert_with(Instant::now);
                    let aligned = aligner.on_barrier(input, b).map_err(|e| WeirError::Task {
                        task: self.core.chain.task.clone(),
                        reason: e.to_string(),
                    })?;
                    if let Some(b) = aligned {
                        let alignment = alignment_started
                            .take()
                            .map_or(Duration::ZERO, |t| t.elapsed());
                        self.checkpoint(b, alignment)?;
                    }
                }
                Element::EndOfStream => {
                    if let Some(b) = aligner.on_end_of_stream(input) {
                        let alignment = alignment_started
                            .take()
                            .map_or(Duration::ZERO, |t| t.elapsed());
                        self.checkpoint(b, alignment)?;
                    }
                    // Nothing may fire after the final snapshot.
                    self.core.on_input(&names[input], InputEvent::End)?;
                    if aligner.all_finished() {
                        self.core.chain.broadcast(Element::EndOfStream)?;
                        return Ok(());
                    }
                }
            }
        }
    }

    fn checkpoint(&mut self, b: Barrier, alignment: Duration) -> Result<()> {
        self.core
            .chain
            .metrics
            .checkpoint_alignment
            .observe(alignment.as_secs_f64());
        let started = Instant::now();
        if self.gate.cancelled() >= b.checkpoint_id {
            // The Coordinator gave up on it while it aligned; its folder is
            // gone and must stay gone. The barrier still goes downstream so
            // that later tasks unblock.
            self.core.chain.broadcast(Element::Barrier(b))?;
            return Ok(());
        }
        let key_groups = self.core.key_groups;
        let Some(taken) = self.core.chain.checkpoint(b, &self.store, key_groups)? else {
            return Ok(()); // cancelled
        };
        let sync = started.elapsed();
        self.core
            .chain
            .metrics
            .checkpoint_sync
            .observe(sync.as_secs_f64());
        let ack = TaskAck {
            acks: self.acks.clone(),
            task: self.core.chain.task.clone(),
            alignment,
            sync,
            started,
        };
        if taken.is_ready() {
            ack.send(taken);
        } else {
            // The snapshots' asynchronous parts run on their own threads;
            // the ack follows them while this task reads on.
            std::thread::Builder::new()
                .name("weir-ack".into())
                .spawn(move || ack.send(taken))
                .map_err(|e| WeirError::Task {
                    task: self.core.chain.task.clone(),
                    reason: format!("cannot start the thread of a checkpoint's ack: {e}"),
                })?;
        }
        self.core.chain.write_back_after_ack()
    }
}

/// A stage task's ack of one checkpoint, sent once its snapshots are
/// written.
struct TaskAck {
    acks: Sender<Ack>,
    task: String,
    alignment: Duration,
    /// The task's pause: from the aligned barrier to the snapshots' copy.
    sync: Duration,
    started: Instant,
}

impl TaskAck {
    fn send(self, taken: TakenCheckpoint) {
        let checkpoint_id = taken.checkpoint_id;
        let handles = taken.handles();
        crate::crash_point!("after-keyed-snapshot-before-ack");
        debug!(
            task = %self.task,
            checkpoint_id,
            alignment_ms = self.alignment.as_millis() as u64,
            sync_ms = self.sync.as_millis() as u64,
            async_ms = (self.started.elapsed() - self.sync).as_millis() as u64,
            "task snapshot"
        );
        let _ = self.acks.send(Ack::Task {
            task: self.task,
            checkpoint_id,
            handles,
            alignment_ms: self.alignment.as_millis() as u64,
            sync_ms: self.sync.as_millis() as u64,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataflow::ops::stateless::Union;
    use crate::dataflow::row::{Row, Value};
    use crate::dataflow::{Context, RecordKey};
    use crate::engine::chain::{Chain, ExchangeOut, Slot, SlotBody, Target};
    use crate::engine::core::marks::WriterMarks;
    use crossbeam_channel::bounded;
    use std::sync::Arc;
    use tokio_util::sync::CancellationToken;

    fn records(values: &[i64]) -> Element<Record> {
        Element::Records(
            values
                .iter()
                .map(|v| Record {
                    row: Row::insert(vec![Value::Int(*v)]),
                    timestamp: 0,
                    key_group: 0,
                    key: RecordKey::new(),
                })
                .collect(),
        )
    }

    fn values(e: Element<Record>) -> Vec<i64> {
        match e {
            Element::Records(r) => r
                .iter()
                .map(|r| r.row.values[0].as_int().unwrap())
                .collect(),
            other => panic!("records expected, got {other:?}"),
        }
    }

    /// The seed's alignment, in the engine's stage task with two inputs:
    /// after barrier 1 on the fast input, its records wait until the slow
    /// input's barrier 1 arrives; the slow input flows meanwhile; the
    /// barrier goes downstream before the held records.
    #[test]
    fn a_barrier_on_one_input_blocks_it_until_the_other_input_brings_its_barrier() {
        let dir = tempfile::tempdir().unwrap();
        let store = CheckpointStore::new(dir.path().to_path_buf());
        store.claim(1).unwrap().expect("folder 1");
        let (out_tx, out_rx) = bounded(16);
        let cancel = CancellationToken::new();
        let chain = Chain::new(
            "co-0".into(),
            0,
            vec![Slot {
                uid: "co".into(),
                body: SlotBody::Operator {
                    op: Box::new(Union),
                    ctx: Box::new(Context::new("co", 0, None)),
                    keyed: false,
                    late: None,
                },
                targets: vec![Target::Exchange(0)],
            }],
            vec![ExchangeOut::new(vec![out_tx], None)],
            128,
            cancel.clone(),
            Arc::new(crate::observe::metrics::Metrics::new()),
        );
        let (fast_tx, fast_rx) = bounded(16);
        let (slow_tx, slow_rx) = bounded(16);
        let (ack_tx, ack_rx) = crossbeam_channel::unbounded();
        let names = (0..2).map(input_name).collect();
        let task = StageTask {
            core: TaskCore::new(chain, WriterMarks::new(names, Default::default()), (0, 128))
                .unwrap(),
            inputs: vec![
                Input {
                    channel: fast_rx,
                    port: 0,
                },
                Input {
                    channel: slow_rx,
                    port: 1,
                },
            ],
            mode: CheckpointMode::ExactlyOnce,
            store,
            acks: ack_tx,
            gate: Arc::new(EpochGate::new(0)),
            queries: Vec::new(),
        };
        let running = std::thread::spawn(move || task.run());
        let wait = Duration::from_secs(5);
        let quiet = Duration::from_millis(300);
        let barrier = Barrier {
            checkpoint_id: 1,
            timestamp_ms: 0,
            then_stop: false,
        };

        fast_tx.send(records(&[1])).unwrap();
        assert_eq!(values(out_rx.recv_timeout(wait).unwrap()), vec![1]);
        fast_tx.send(Element::Barrier(barrier)).unwrap();
        fast_tx.send(records(&[2])).unwrap();
        assert!(
            out_rx.recv_timeout(quiet).is_err(),
            "the fast input is blocked after its barrier"
        );
        slow_tx.send(records(&[10])).unwrap();
        assert_eq!(
            values(out_rx.recv_timeout(wait).unwrap()),
            vec![10],
            "the slow input still flows"
        );
        assert!(
            ack_rx.try_recv().is_err(),
            "no snapshot before both barriers"
        );
        slow_tx.send(Element::Barrier(barrier)).unwrap();
        assert_eq!(
            out_rx.recv_timeout(wait).unwrap(),
            Element::Barrier(barrier)
        );
        assert_eq!(
            values(out_rx.recv_timeout(wait).unwrap()),
            vec![2],
            "held records follow the barrier"
        );
        match ack_rx.recv_timeout(wait).unwrap() {
            Ack::Task {
                checkpoint_id,
                handles,
                ..
            } => {
                assert_eq!(checkpoint_id, 1);
                assert_eq!(handles.unwrap(), vec![], "a stateless task has no snapshot");
            }
            other => panic!("a task ack expected, got {other:?}"),
        }
        fast_tx.send(Element::EndOfStream).unwrap();
        slow_tx.send(Element::EndOfStream).unwrap();
        assert_eq!(out_rx.recv_timeout(wait).unwrap(), Element::EndOfStream);
        running.join().unwrap().unwrap();
    }
}
