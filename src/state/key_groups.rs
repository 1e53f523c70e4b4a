//! Key groups: the unit in which keyed state is partitioned and moved.
//!
//! `key_group = xxh3(key) % max_parallelism`, with a fixed seed, so the
//! same key lands in the same group in every process, on every machine and
//! in every weir version (std's hasher is randomly seeded per process and
//! would scatter state on restart). Subtask `i` of `p` owns a contiguous
//! range, as in Flink, so a checkpoint taken at one parallelism can be
//! split or merged into another.

use xxhash_rust::xxh3::xxh3_64_with_seed;

const SEED: u64 = 0x7765_6972; // "weir"

/// The key group of `key`.
pub fn key_group(key: &[u8], max_parallelism: u32) -> u32 {
    (xxh3_64_with_seed(key, SEED) % u64::from(max_parallelism)) as u32
}

/// Key groups `[start, end)` owned by subtask `index` of `parallelism`.
pub fn range_for_subtask(index: u32, parallelism: u32, max_parallelism: u32) -> (u32, u32) {
    let (i, p, m) = (
        u64::from(index),
        u64::from(parallelism),
        u64::from(max_parallelism),
    );
    let start = (i * m).div_ceil(p);
    let end = ((i + 1) * m).div_ceil(p);
    (start as u32, end as u32)
}

/// The subtask that owns `key_group`.
pub fn subtask_for_key_group(key_group: u32, parallelism: u32, max_parallelism: u32) -> u32 {
    (u64::from(key_group) * u64::from(parallelism) / u64::from(max_parallelism)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn hash_is_stable_across_versions() {
        // Changing these values would scatter every existing job's state.
        assert_eq!(key_group(b"hello", 128), key_group(b"hello", 128));
        let golden: Vec<u32> = ["hello", "world", "weir", ""]
            .iter()
            .map(|k| key_group(k.as_bytes(), 128))
            .collect();
        assert_eq!(golden, GOLDEN.to_vec());
    }
    const GOLDEN: [u32; 4] = [1, 25, 0, 103];

    proptest! {
        #[test]
        fn ranges_partition_all_groups(p in 1u32..64, extra in 0u32..200) {
            let m = p + extra;
            let mut next = 0;
            for i in 0..p {
                let (s, e) = range_for_subtask(i, p, m);
                prop_assert_eq!(s, next);
                prop_assert!(e > s, "every subtask owns at least one group");
                for kg in s..e {
                    prop_assert_eq!(subtask_for_key_group(kg, p, m), i);
                }
                next = e;
            }
            prop_assert_eq!(next, m);
        }
    }
}
