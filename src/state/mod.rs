//! Keyed state's storage: one RocksDB instance per (operator uid, subtask)
//! over bytes ([`backend`]), the changes file a snapshot carries
//! ([`changes`]), a snapshot's asynchronous part ([`snapshot_job`]), key
//! groups ([`key_groups`]) and a timer service
//! ([`timers`]). Keys start with the key group (u16, big endian) in every
//! column family, so a key group is a contiguous range that can be copied
//! into another instance when the parallelism changes. The tables
//! operators declare are laid over this by `crate::dataflow::tables`.

pub mod backend;
pub mod changes;
pub mod key_groups;
pub mod snapshot_job;
pub mod timers;

/// Values: keyed state (`key_group | key [| namespace]`).
pub const VALUES: &str = "default";
/// The timer index: `key_group | fire time (sign-flipped, big endian) | payload`.
pub const TIMERS: &str = "timers";
/// Every column family, in the order they are opened and restored.
pub const FAMILIES: [&str; 2] = [VALUES, TIMERS];

/// The table byte (after the key group) of the entries that hold each key
/// group's watermark at a snapshot: `crate::dataflow::tables`'s
/// `WATERMARK_TABLE`, here so that the checkpoint readers know it without
/// reaching up into the dataflow layer.
pub const WATERMARK_TABLE_ID: u8 = 0xFF;

use std::path::Path;

use crate::checkpoint::SnapshotFile;
use crate::error::WeirError;

/// A snapshot just taken: its files, for `_metadata`.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub size_bytes: u64,
    pub files: Vec<SnapshotFile>,
}

/// Splits a RocksDB key into key group and the rest, or says it cannot be.
pub fn split_key(full: &[u8]) -> Option<(u32, &[u8])> {
    let (kg, key) = full.split_first_chunk::<2>()?;
    Some((u32::from(u16::from_be_bytes(*kg)), key))
}

/// The error for a value at `full_key` that cannot be decoded.
pub(crate) fn corrupt(path: &Path, full_key: &[u8], reason: String) -> WeirError {
    let (key_group, key) = split_key(full_key).unwrap_or((0, full_key));
    WeirError::CorruptState {
        uid: String::new(),
        key_group,
        key: String::from_utf8_lossy(&key[..key.len().min(256)]).into_owned(),
        location: path.display().to_string(),
        reason,
    }
}

/// A read error; RocksDB's corruption errors (bad checksums) are corrupt
/// state, which no restart can fix.
pub(crate) fn read_error(path: &Path, full_key: &[u8], e: rocksdb::Error) -> WeirError {
    if e.kind() == rocksdb::ErrorKind::Corruption {
        corrupt(path, full_key, e.into_string())
    } else {
        WeirError::state(format!("get from {}", path.display()), e)
    }
}

/// Builds a RocksDB key: key group prefix, then the key.
pub fn state_key(key_group: u32, key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(2 + key.len());
    k.extend_from_slice(&(key_group as u16).to_be_bytes());
    k.extend_from_slice(key);
    k
}
