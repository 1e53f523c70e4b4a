//! Which checkpoints to delete. Pure, like the recovery decision.

/// A retained checkpoint as retention sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retained {
    pub id: u64,
    /// Complete: committed (transactional sink) or prepared (otherwise).
    pub complete: bool,
}

/// Ids to delete so that `retained` complete checkpoints remain. Never
/// deletes the newest complete checkpoint (recovery needs it) nor anything
/// newer than it (a checkpoint in flight, or one whose commit is pending).
pub fn to_prune(checkpoints: &[Retained], retained: u32) -> Vec<u64> {
    let retained = retained.max(1) as usize;
    let mut complete: Vec<u64> = checkpoints
        .iter()
        .filter(|c| c.complete)
        .map(|c| c.id)
        .collect();
    complete.sort_unstable();
    let Some(&newest_complete) = complete.last() else {
        return Vec::new();
    };
    let keep_from = complete[complete.len().saturating_sub(retained)];
    let mut out: Vec<u64> = checkpoints
        .iter()
        .filter(|c| c.id < keep_from && c.id < newest_complete)
        .map(|c| c.id)
        .collect();
    out.sort_unstable();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(id: u64, complete: bool) -> Retained {
        Retained { id, complete }
    }

    #[test]
    fn keeps_the_newest_complete_ones() {
        let all = [c(1, true), c(2, true), c(3, true), c(4, true)];
        assert_eq!(to_prune(&all, 2), vec![1, 2]);
        assert_eq!(to_prune(&all, 10), Vec::<u64>::new());
    }

    #[test]
    fn never_prunes_what_recovery_may_need() {
        // 5 and 6 are prepared but not committed: the last committed (4) is
        // what recovery restores, whatever `retained` says.
        let all = [c(3, true), c(4, true), c(5, false), c(6, false)];
        assert_eq!(to_prune(&all, 1), vec![3]);
        // Abandoned incomplete ones older than the kept range go too.
        let all = [c(1, false), c(2, true), c(3, true)];
        assert_eq!(to_prune(&all, 1), vec![1, 2]);
        assert_eq!(to_prune(&[c(1, false), c(2, false)], 1), Vec::<u64>::new());
    }
}
