//! The timer service: event-time timers of one subtask, persisted in their
//! own column family as a time-ordered index
//! `key_group | fire time (sign-flipped, big endian) | payload`, so that the
//! timers of a key group are one contiguous, time-ordered range (restore
//! and rescale split it by key group like every other family).
//!
//! An in-memory ordered index mirrors the family (loaded at open and
//! restore), so finding the due timers at a watermark costs a range of that
//! index, not a RocksDB scan per watermark; changes reach RocksDB at
//! write-back (after a snapshot, once many are pending) and go into each
//! snapshot's changes file until then. Memory: one entry per pending timer
//! (one or two per open window).

use std::collections::BTreeSet;

use rocksdb::WriteBatch;
use rustc_hash::FxHashMap;

use super::backend::StateBackend;
use super::changes::{self, ChangesWriter};
use super::TIMERS;
use crate::error::{Result, WeirError};

/// A timer: when it fires and what it is for (`key_group | rest`).
pub type Timer = (i64, Vec<u8>);

/// Big-endian bytes that sort like the signed time.
fn flip(time: i64) -> [u8; 8] {
    ((time as u64) ^ (1 << 63)).to_be_bytes()
}

fn unflip(b: [u8; 8]) -> i64 {
    (u64::from_be_bytes(b) ^ (1 << 63)) as i64
}

/// The column family key of a timer.
pub fn timer_key(time: i64, payload: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(payload.len() + 8);
    k.extend_from_slice(&payload[..2.min(payload.len())]);
    k.extend_from_slice(&flip(time));
    k.extend_from_slice(payload.get(2..).unwrap_or_default());
    k
}

fn parse_timer_key(k: &[u8]) -> Option<Timer> {
    let kg = k.get(..2)?;
    let time = unflip(k.get(2..10)?.try_into().ok()?);
    let mut payload = kg.to_vec();
    payload.extend_from_slice(&k[10..]);
    Some((time, payload))
}

#[derive(Default)]
pub struct TimerService {
    index: BTreeSet<Timer>,
    /// Changes since the last write-back: true = registered, false = deleted.
    dirty: FxHashMap<Timer, bool>,
}

impl TimerService {
    /// Loads the pending timers of `backend` (after open or restore).
    pub fn load(backend: &StateBackend) -> Result<Self> {
        let mut index = BTreeSet::new();
        for item in backend
            .db()
            .iterator_cf(backend.cf(TIMERS), rocksdb::IteratorMode::Start)
        {
            let (k, _) = item.map_err(|e| {
                WeirError::state(format!("read timers of {}", backend.path().display()), e)
            })?;
            let timer = parse_timer_key(&k).ok_or_else(|| {
                WeirError::Recovery(format!(
                    "timer key of {} bytes in {} is shorter than key group and time: the state is corrupt",
                    k.len(),
                    backend.path().display()
                ))
            })?;
            index.insert(timer);
        }
        Ok(Self {
            index,
            dirty: FxHashMap::default(),
        })
    }

    /// Registers a timer at `time` for `payload` (which starts with its key
    /// group); registering it twice is one timer.
    pub fn register(&mut self, time: i64, payload: Vec<u8>) {
        let timer = (time, payload);
        if self.index.insert(timer.clone()) {
            self.dirty.insert(timer, true);
        }
    }

    pub fn delete(&mut self, time: i64, payload: &[u8]) {
        let timer = (time, payload.to_vec());
        if self.index.remove(&timer) {
            self.dirty.insert(timer, false);
        }
    }

    /// The earliest pending timer's time.
    pub fn next_time(&self) -> Option<i64> {
        self.index.first().map(|(t, _)| *t)
    }

    /// Removes and returns the timers due at `watermark` (time ≤ watermark),
    /// earliest first.
    pub fn pop_due(&mut self, watermark: i64) -> Vec<Timer> {
        let mut due = Vec::new();
        while let Some(first) = self.index.first() {
            if first.0 > watermark {
                break;
            }
            let timer = self.index.pop_first().expect("first exists");
            self.dirty.insert(timer.clone(), false);
            due.push(timer);
        }
        due
    }

    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// The pending timers, earliest first.
    pub fn iter(&self) -> impl Iterator<Item = &Timer> {
        self.index.iter()
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Changes not yet written back.
    pub fn pending_changes(&self) -> usize {
        self.dirty.len()
    }

    /// Adds the changes since the last write-back to a snapshot's changes
    /// file; they stay pending.
    pub fn collect_dirty(&self, out: &mut ChangesWriter) {
        for ((time, payload), present) in &self.dirty {
            let key = timer_key(*time, payload);
            out.entry(changes::TIMERS, &key, present.then_some(&[][..]));
        }
    }

    /// Writes the changes since the last write-back to the timer family.
    ///
    /// The changes stay pending until RocksDB took them: if the write
    /// fails (the checkpoint that asked for it is declined and the job
    /// goes on), the next snapshot's changes file still carries them, so
    /// no later checkpoint loses a timer and no window fails to fire after
    /// a restore from it.
    pub fn write_back(&mut self, backend: &StateBackend) -> Result<()> {
        if self.dirty.is_empty() {
            return Ok(());
        }
        let cf = backend.cf(TIMERS);
        let mut batch = WriteBatch::default();
        for ((time, payload), present) in &self.dirty {
            let key = timer_key(*time, payload);
            if *present {
                batch.put_cf(cf, &key, []);
            } else {
                batch.delete_cf(cf, &key);
            }
        }
        fail::fail_point!("timers-write-back", |_| Err(WeirError::Io {
            path: backend.path().to_path_buf(),
            source: std::io::Error::other("failpoint timers-write-back"),
        }));
        backend.write(batch)?;
        self.dirty.clear();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timer_keys_sort_by_key_group_then_time_including_negative_times() {
        let payload = |kg: u16| {
            let mut p = kg.to_be_bytes().to_vec();
            p.extend_from_slice(b"k");
            p
        };
        let mut keys = [
            timer_key(5, &payload(1)),
            timer_key(-5, &payload(1)),
            timer_key(i64::MIN, &payload(1)),
            timer_key(0, &payload(0)),
            timer_key(i64::MAX, &payload(0)),
        ];
        keys.sort();
        let parsed: Vec<Timer> = keys.iter().map(|k| parse_timer_key(k).unwrap()).collect();
        assert_eq!(
            parsed,
            vec![
                (0, payload(0)),
                (i64::MAX, payload(0)),
                (i64::MIN, payload(1)),
                (-5, payload(1)),
                (5, payload(1)),
            ]
        );
    }

    #[test]
    fn timers_survive_write_back_and_load_and_fire_in_time_order() {
        let tmp = tempfile::tempdir().unwrap();
        let backend = StateBackend::open(&tmp.path().join("db")).unwrap();
        let mut t = TimerService::load(&backend).unwrap();
        t.register(30, b"\x00\x01a".to_vec());
        t.register(10, b"\x00\x02b".to_vec());
        t.register(20, b"\x00\x01c".to_vec());
        t.register(20, b"\x00\x01c".to_vec());
        t.delete(30, b"\x00\x01a");
        t.write_back(&backend).unwrap();
        let mut again = TimerService::load(&backend).unwrap();
        assert_eq!(again.len(), 2);
        assert_eq!(again.next_time(), Some(10));
        assert_eq!(
            again.pop_due(25),
            vec![(10, b"\x00\x02b".to_vec()), (20, b"\x00\x01c".to_vec())]
        );
        again.write_back(&backend).unwrap();
        assert!(TimerService::load(&backend).unwrap().is_empty());
    }
}
