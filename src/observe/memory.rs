//! Where a process's memory goes, as `weir_memory_bytes{component, task}`:
//! an operator sizing a container needs to know whether RocksDB, weir's
//! own state cache or librdkafka's queues hold it, not only the resident
//! total.
//!
//! - Per task, after each checkpoint's ack (`Chain::write_back_after_ack`):
//!   each keyed store's RocksDB memtables, block cache and table readers
//!   (RocksDB's own properties) and its state cache.
//! - Per source task of single mode, with librdkafka's statistics (once a
//!   second): the records its consumer fetched ahead (`fetchq_size`).
//! - For the whole process (task ""), when `/metrics` is read: resident
//!   memory, and what the allocator (mimalloc) has committed.

use prometheus::IntGaugeVec;

/// Components of `weir_memory_bytes`.
pub const RESIDENT: &str = "resident";
pub const ALLOCATOR_COMMITTED: &str = "allocator_committed";
pub const ROCKSDB_MEMTABLES: &str = "rocksdb_memtables";
pub const ROCKSDB_BLOCK_CACHE: &str = "rocksdb_block_cache";
pub const ROCKSDB_TABLE_READERS: &str = "rocksdb_table_readers";
pub const STATE_CACHE: &str = "state_cache";
pub const KAFKA_FETCH_QUEUE: &str = "kafka_fetch_queue";

/// What one task's keyed stores hold.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct StoreMemory {
    pub memtables: u64,
    pub block_cache: u64,
    pub table_readers: u64,
    /// weir's cache in front of RocksDB: its hash tables' slots (keys and
    /// values up to 24 bytes are inline) and the listed maps' entries.
    /// Longer keys and values, held apart, are not counted.
    pub state_cache: u64,
}

impl std::ops::AddAssign for StoreMemory {
    fn add_assign(&mut self, o: Self) {
        self.memtables += o.memtables;
        self.block_cache += o.block_cache;
        self.table_readers += o.table_readers;
        self.state_cache += o.state_cache;
    }
}

/// Sets task `task`'s store components in `gauge` (`Metrics::memory`).
pub fn report_stores(gauge: &IntGaugeVec, task: &str, m: StoreMemory) {
    for (component, bytes) in [
        (ROCKSDB_MEMTABLES, m.memtables),
        (ROCKSDB_BLOCK_CACHE, m.block_cache),
        (ROCKSDB_TABLE_READERS, m.table_readers),
        (STATE_CACHE, m.state_cache),
    ] {
        set(gauge, component, task, bytes);
    }
}

pub fn set(gauge: &IntGaugeVec, component: &str, task: &str, bytes: u64) {
    gauge
        .with_label_values(&[component, task])
        .set(i64::try_from(bytes).unwrap_or(i64::MAX));
}

/// The process-wide components, read now, into `gauge`.
pub fn refresh_process(gauge: &IntGaugeVec) {
    if let Some(resident) = resident_bytes() {
        set(gauge, RESIDENT, "", resident);
    }
    if let Some(committed) = allocator_committed_bytes() {
        set(gauge, ALLOCATOR_COMMITTED, "", committed);
    }
}

/// Resident set size from `/proc/self/statm` (Linux), in bytes.
pub fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * u64::try_from(page).ok()?)
}

/// What mimalloc has committed (its estimate on Linux: the memory it
/// reserved read/write), when it is the allocator.
#[cfg(feature = "mimalloc")]
fn allocator_committed_bytes() -> Option<u64> {
    let (mut elapsed, mut user, mut system) = (0usize, 0usize, 0usize);
    let (mut rss, mut peak_rss, mut commit, mut peak_commit, mut faults) =
        (0usize, 0usize, 0usize, 0usize, 0usize);
    // SAFETY: every pointer is to a live local of the type asked for.
    unsafe {
        libmimalloc_sys::mi_process_info(
            &mut elapsed,
            &mut user,
            &mut system,
            &mut rss,
            &mut peak_rss,
            &mut commit,
            &mut peak_commit,
            &mut faults,
        );
    }
    Some(commit as u64)
}

#[cfg(not(feature = "mimalloc"))]
fn allocator_committed_bytes() -> Option<u64> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gauge() -> IntGaugeVec {
        IntGaugeVec::new(
            prometheus::Opts::new("weir_memory_bytes", "test"),
            &["component", "task"],
        )
        .unwrap()
    }

    #[test]
    fn the_process_components_are_read() {
        let g = gauge();
        // Something this test holds, so both figures are well above it.
        let held = vec![1u8; 8 << 20];
        refresh_process(&g);
        let value = |component: &str| g.with_label_values(&[component, ""]).get();
        assert!(value(RESIDENT) > 8 << 20, "{}", value(RESIDENT));
        #[cfg(feature = "mimalloc")]
        assert!(
            value(ALLOCATOR_COMMITTED) > 8 << 20,
            "{}",
            value(ALLOCATOR_COMMITTED)
        );
        drop(held);
    }

    #[test]
    fn a_tasks_store_components_are_labelled_with_the_task() {
        let g = gauge();
        let mut total = StoreMemory {
            memtables: 1,
            block_cache: 2,
            table_readers: 3,
            state_cache: 4,
        };
        total += total;
        report_stores(&g, "counts.aggregate-1", total);
        for (component, v) in [
            (ROCKSDB_MEMTABLES, 2),
            (ROCKSDB_BLOCK_CACHE, 4),
            (ROCKSDB_TABLE_READERS, 6),
            (STATE_CACHE, 8),
        ] {
            let got = g
                .with_label_values(&[component, "counts.aggregate-1"])
                .get();
            assert_eq!(got, v, "{component}");
        }
    }
}
