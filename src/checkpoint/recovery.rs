//! The recovery decision: a pure function from what is on disk and in Kafka
//! to what to restore. It performs no I/O, so every case is a unit test.

use std::collections::BTreeMap;

use super::metadata::{CheckpointMetadata, Topology};

/// What was found in one `chk-*` folder.
#[derive(Debug, Clone)]
pub struct FolderFacts {
    pub name: String,
    pub id: Option<u64>,
    pub contents: FolderContents,
    /// `_committed` is present: its Kafka transaction committed.
    pub committed_marker: bool,
}

#[derive(Debug, Clone)]
pub enum FolderContents {
    Valid(Box<CheckpointMetadata>),
    /// Prepared once (it has a `_metadata`) but not restorable now, with
    /// the reason: partial or corrupt `_metadata`, missing state. Its state
    /// may be what the job's history depends on.
    Invalid(String),
    /// Never prepared: no `_metadata` (perhaps a stale `_metadata.tmp`). A
    /// checkpoint in flight when the process died; it never held a
    /// checkpoint, so it does not stop a fresh start.
    Unfinished(String),
}

/// Offsets committed to the consumer group, read at start-up.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GroupOffsets {
    /// Next offset per source partition that has a committed offset.
    pub offsets: BTreeMap<(String, i32), i64>,
    /// The checkpoint named by the offsets' `weir-checkpoint=N` metadata,
    /// when every committed offset carries the same one.
    pub checkpoint_id: Option<u64>,
}

/// Everything the decision looks at.
#[derive(Debug, Clone)]
pub struct Observed {
    pub folders: Vec<FolderFacts>,
    /// `Some` when the sink is transactional: the group offsets are then the
    /// commit point.
    pub group: Option<GroupOffsets>,
    pub topology: Topology,
    /// An explicit `--restore-from` folder overrides the search.
    pub forced: Option<Box<CheckpointMetadata>>,
}

/// What to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// No usable history: start from the configured positions, empty state.
    Fresh { discard: Vec<u64> },
    /// Restore this checkpoint; delete the `discard` folders (prepared
    /// checkpoints whose transaction never committed).
    Restore {
        checkpoint: Box<CheckpointMetadata>,
        discard: Vec<u64>,
    },
    /// Do not start; the message says why and what was found.
    Refuse(String),
}

/// Folders that were skipped, with why; for the log.
pub fn skipped(observed: &Observed) -> Vec<(String, String)> {
    observed
        .folders
        .iter()
        .filter_map(|f| match &f.contents {
            FolderContents::Invalid(reason) | FolderContents::Unfinished(reason) => {
                Some((f.name.clone(), reason.clone()))
            }
            FolderContents::Valid(_) => None,
        })
        .collect()
}

/// Prepared checkpoints that cannot be restored: these, unlike unfinished
/// folders, forbid starting from empty state.
fn damaged(observed: &Observed) -> Vec<(String, String)> {
    observed
        .folders
        .iter()
        .filter_map(|f| match &f.contents {
            FolderContents::Invalid(reason) => Some((f.name.clone(), reason.clone())),
            _ => None,
        })
        .collect()
}

/// Decides what to restore.
pub fn decide(observed: &Observed) -> Decision {
    if let Some(forced) = &observed.forced {
        return check_topology(forced, &observed.topology, Vec::new());
    }
    let mut valid: Vec<(&CheckpointMetadata, bool)> = observed
        .folders
        .iter()
        .filter_map(|f| match &f.contents {
            FolderContents::Valid(m) => Some((m.as_ref(), f.committed_marker)),
            FolderContents::Invalid(_) | FolderContents::Unfinished(_) => None,
        })
        .collect();
    valid.sort_by_key(|(m, _)| m.checkpoint_id);
    let skipped = skipped(observed);
    let damaged = damaged(observed);
    let none_usable = || {
        let list: Vec<String> = damaged.iter().map(|(n, r)| format!("{n} ({r})")).collect();
        Decision::Refuse(format!(
            "checkpoints exist but none is usable: {}; refusing to start from empty state. \
             Fix or remove them, or restore one explicitly with --restore-from",
            list.join(", ")
        ))
    };

    let Some(group) = &observed.group else {
        // Without a transactional sink a prepared checkpoint is complete.
        return match valid.last() {
            Some((m, _)) => check_topology(m, &observed.topology, Vec::new()),
            None if !damaged.is_empty() => none_usable(),
            None => Decision::Fresh {
                discard: Vec::new(),
            },
        };
    };

    if group.offsets.is_empty() {
        // No transaction ever committed offsets for this group. Prepared
        // checkpoints without a marker never committed: discard them. A
        // marked one means the group's offsets expired; its state is the
        // truth then.
        if let Some((m, _)) = valid.iter().rev().find(|(_, marked)| *marked) {
            let discard = newer_than(&valid, m.checkpoint_id);
            return check_topology(m, &observed.topology, discard);
        }
        if valid.is_empty() && !damaged.is_empty() {
            return none_usable();
        }
        return Decision::Fresh {
            discard: valid.iter().map(|(m, _)| m.checkpoint_id).collect(),
        };
    }

    let matches = |m: &CheckpointMetadata| {
        let mine = m.offsets_map();
        group
            .offsets
            .iter()
            .all(|(tp, off)| mine.get(tp) == Some(off))
            && mine
                .keys()
                .filter(|tp| group.offsets.contains_key(*tp))
                .count()
                == group.offsets.len()
    };
    let chosen = match group.checkpoint_id {
        Some(n) => match valid.iter().find(|(m, _)| m.checkpoint_id == n) {
            Some((m, _)) if matches(m) => Some(*m),
            Some((m, _)) => {
                return Decision::Refuse(format!(
                    "the consumer group's committed offsets name checkpoint {n}, but its offsets differ: \
                     group {:?}, checkpoint {:?}",
                    group.offsets,
                    m.offsets_map()
                ))
            }
            None => None,
        },
        // The broker dropped the metadata: the newest checkpoint whose
        // offsets equal the committed ones.
        None => valid.iter().rev().find(|(m, _)| matches(m)).map(|(m, _)| *m),
    };
    match chosen {
        Some(m) => check_topology(m, &observed.topology, newer_than(&valid, m.checkpoint_id)),
        None => {
            let named = group
                .checkpoint_id
                .map(|n| format!("checkpoint {n}"))
                .unwrap_or_else(|| "no checkpoint id".into());
            let have: Vec<String> = valid
                .iter()
                .map(|(m, _)| m.checkpoint_id.to_string())
                .collect();
            let bad: Vec<String> = skipped.iter().map(|(n, r)| format!("{n} ({r})")).collect();
            Decision::Refuse(format!(
                "the consumer group's committed offsets {:?} ({named}) match no retained checkpoint \
                 (usable: [{}]; skipped: [{}]). The state that goes with the committed output is gone; \
                 refusing to start from empty state, which would emit wrong results",
                group.offsets,
                have.join(", "),
                bad.join(", ")
            ))
        }
    }
}

fn newer_than(valid: &[(&CheckpointMetadata, bool)], id: u64) -> Vec<u64> {
    valid
        .iter()
        .map(|(m, _)| m.checkpoint_id)
        .filter(|c| *c > id)
        .collect()
}

/// Whether checkpoint `m` fits the job's `current` topology: `Restore`
/// with `discard`, or `Refuse` saying why not.
pub fn check_topology(m: &CheckpointMetadata, current: &Topology, discard: Vec<u64>) -> Decision {
    if m.topology.max_parallelism != current.max_parallelism {
        return Decision::Refuse(format!(
            "checkpoint {} was taken with job.max_parallelism = {}, the job now has {}; \
             the number of key groups is fixed for the life of a job",
            m.checkpoint_id, m.topology.max_parallelism, current.max_parallelism
        ));
    }
    // The built-in pipelines' runtime before job graphs recorded its keyed
    // operator without tables (one fixed-size value per key): a job graph
    // cannot read that state, and must not start empty over it silently.
    if let Some(old) = m.topology.operators.iter().find(|o| {
        o.state.is_none()
            && (o.kind == "word-count" || o.kind.starts_with("aggregate/"))
            && current
                .operators
                .iter()
                .any(|n| n.uid == o.uid && n.state.is_some())
    }) {
        return Decision::Refuse(format!(
            "checkpoint {} was written by weir before job graphs (operator {:?}, {}, keeps one \
             fixed-size value per key); this weir runs every pipeline as a job graph, whose \
             state is named tables, and cannot restore it. Nothing was started. To start over \
             with empty state, run this job under a new `job.name` and a new \
             `kafka.group_id` (its own checkpoint directory, committed offsets and \
             transactional id; the sources start at `source.start`); until then the previous \
             weir can go on running it",
            m.checkpoint_id, old.uid, old.kind
        ));
    }
    let (only_checkpoint, only_job) = m.topology.uid_difference(current);
    if !only_checkpoint.is_empty() || !only_job.is_empty() {
        return Decision::Refuse(format!(
            "checkpoint {} does not match the pipeline: operator uids only in the checkpoint: {:?}; \
             only in the job: {:?}",
            m.checkpoint_id, only_checkpoint, only_job
        ));
    }
    // A job graph's keyed operator reads its state by its key types and
    // table codecs: state written under others would not decode, or would
    // decode as something else.
    for theirs in &m.topology.operators {
        let Some(mine) = current.operators.iter().find(|o| o.uid == theirs.uid) else {
            continue;
        };
        if let (Some(a), Some(b)) = (&theirs.state, &mine.state) {
            if a != b {
                let show = |s: &crate::checkpoint::metadata::StateInfo| {
                    let key: Vec<String> = s
                        .key
                        .iter()
                        .map(|k| format!("{} {}", k.name, k.data_type))
                        .collect();
                    let tables: Vec<String> = s
                        .tables
                        .iter()
                        .map(|t| format!("{} ({} of {})", t.name, t.kind, t.codec))
                        .collect();
                    format!("key ({}), tables [{}]", key.join(", "), tables.join(", "))
                };
                return Decision::Refuse(format!(
                    "checkpoint {} holds state of operator {:?} with {}, but the job's operator {:?} has {}: \
                     its state cannot be read. Give the changed operator a new uid to start it with empty \
                     state, or run the version of the job that wrote the checkpoint",
                    m.checkpoint_id,
                    theirs.uid,
                    show(a),
                    mine.uid,
                    show(b)
                ));
            }
        }
    }
    Decision::Restore {
        checkpoint: Box::new(m.clone()),
        discard,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::metadata::{OperatorInfo, PartitionOffset, FORMAT_VERSION};

    fn topology(uid: &str) -> Topology {
        Topology {
            max_parallelism: 128,
            operators: vec![
                OperatorInfo {
                    uid: "kafka-source".into(),
                    kind: "source".into(),
                    parallelism: 2,
                    state: None,
                },
                OperatorInfo {
                    uid: uid.into(),
                    kind: "keyed".into(),
                    parallelism: 2,
                    state: None,
                },
            ],
        }
    }

    fn meta(id: u64, offset: i64) -> CheckpointMetadata {
        CheckpointMetadata {
            format_version: FORMAT_VERSION,
            job: "wc".into(),
            checkpoint_id: id,
            trigger_time_ms: 0,
            prepared_time_ms: 0,
            topology: topology("word-count"),
            source_offsets: vec![
                PartitionOffset {
                    topic: "words".into(),
                    partition: 0,
                    offset,
                    max_timestamp: None,
                },
                PartitionOffset {
                    topic: "words".into(),
                    partition: 1,
                    offset: offset * 2,
                    max_timestamp: None,
                },
            ],
            state: vec![],
        }
    }

    fn valid(id: u64, offset: i64, marked: bool) -> FolderFacts {
        FolderFacts {
            name: format!("chk-{id:010}"),
            id: Some(id),
            contents: FolderContents::Valid(Box::new(meta(id, offset))),
            committed_marker: marked,
        }
    }

    fn invalid(name: &str, reason: &str) -> FolderFacts {
        FolderFacts {
            name: name.into(),
            id: None,
            contents: FolderContents::Invalid(reason.into()),
            committed_marker: false,
        }
    }

    fn unfinished(name: &str, reason: &str) -> FolderFacts {
        FolderFacts {
            contents: FolderContents::Unfinished(reason.into()),
            ..invalid(name, reason)
        }
    }

    fn group(id: Option<u64>, offset: i64) -> GroupOffsets {
        GroupOffsets {
            offsets: [
                (("words".to_string(), 0), offset),
                (("words".to_string(), 1), offset * 2),
            ]
            .into_iter()
            .collect(),
            checkpoint_id: id,
        }
    }

    fn observed(folders: Vec<FolderFacts>, group: Option<GroupOffsets>) -> Observed {
        Observed {
            folders,
            group,
            topology: topology("word-count"),
            forced: None,
        }
    }

    fn restored(d: &Decision) -> (u64, Vec<u64>) {
        match d {
            Decision::Restore {
                checkpoint,
                discard,
            } => (checkpoint.checkpoint_id, discard.clone()),
            other => panic!("expected a restore, got {other:?}"),
        }
    }

    #[test]
    fn a_checkpoint_from_before_job_graphs_is_refused_saying_why_and_what_to_do() {
        // What weir wrote before job graphs: the keyed operator by its
        // pipeline kind, without a record of its tables.
        let mut old = meta(7, 70);
        old.topology.operators[1].kind = "word-count".into();
        // This weir's graph of the same pipeline, with its tables.
        let mut current = topology("word-count");
        current.operators[1].kind = "pipeline:word-count".into();
        current.operators[1].state = Some(crate::checkpoint::metadata::StateInfo {
            key: vec![],
            tables: vec![],
        });
        let folders = vec![FolderFacts {
            contents: FolderContents::Valid(Box::new(old)),
            ..valid(7, 70, false)
        }];
        let o = Observed {
            topology: current,
            ..observed(folders, None)
        };
        match decide(&o) {
            Decision::Refuse(msg) => {
                assert!(msg.contains("checkpoint 7"), "{msg}");
                assert!(msg.contains("before job graphs"), "{msg}");
                assert!(msg.contains("\"word-count\""), "names the operator: {msg}");
                assert!(
                    msg.contains("new `job.name`") && msg.contains("`kafka.group_id`"),
                    "says what to do: {msg}"
                );
            }
            other => panic!("a silent empty start or a restore: {other:?}"),
        }
    }

    #[test]
    fn nothing_on_disk_is_a_fresh_start() {
        assert_eq!(
            decide(&observed(vec![], None)),
            Decision::Fresh { discard: vec![] }
        );
        assert_eq!(
            decide(&observed(vec![], Some(GroupOffsets::default()))),
            Decision::Fresh { discard: vec![] }
        );
    }

    #[test]
    fn without_transactions_the_newest_valid_checkpoint_wins() {
        let d = decide(&observed(
            vec![
                valid(3, 30, false),
                valid(5, 50, false),
                invalid("chk-0000000006", "missing _metadata"),
            ],
            None,
        ));
        assert_eq!(restored(&d), (5, vec![]));
    }

    #[test]
    fn missing_or_partial_metadata_or_temp_files_are_never_restored() {
        let folders = vec![
            unfinished("chk-0000000007", "missing _metadata (never prepared)"),
            invalid(
                "chk-0000000008",
                "partial or corrupt _metadata: EOF while parsing",
            ),
            unfinished("chk-0000000009", "stale temp file _metadata.tmp"),
            invalid("chk-0000000010", "state of word-count subtask 1 is missing"),
        ];
        let o = observed(folders.clone(), None);
        let skipped: Vec<String> = skipped(&o).into_iter().map(|(n, _)| n).collect();
        assert_eq!(skipped.len(), 4, "every folder is reported: {skipped:?}");
        match decide(&o) {
            Decision::Refuse(msg) => {
                for name in ["chk-0000000008", "chk-0000000010"] {
                    assert!(msg.contains(name), "{msg}");
                }
                assert!(msg.contains("partial or corrupt _metadata"), "{msg}");
            }
            other => {
                panic!("prepared but damaged checkpoints must refuse a fresh start, got {other:?}")
            }
        }
        let mut with_good = folders;
        with_good.push(valid(4, 40, false));
        assert_eq!(restored(&decide(&observed(with_good, None))), (4, vec![]));
    }

    #[test]
    fn a_checkpoint_in_flight_at_a_crash_does_not_block_a_fresh_start() {
        // The first checkpoint never finished: nothing was ever prepared.
        let folders = vec![
            unfinished("chk-0000000001", "missing _metadata (never prepared)"),
            unfinished("chk-0000000002", "stale temp file _metadata.tmp"),
        ];
        assert_eq!(
            decide(&observed(folders.clone(), None)),
            Decision::Fresh { discard: vec![] }
        );
        assert_eq!(
            decide(&observed(folders.clone(), Some(GroupOffsets::default()))),
            Decision::Fresh { discard: vec![] }
        );
        // With a newer good checkpoint, it is simply not chosen.
        let mut with_good = folders;
        with_good.push(valid(3, 30, false));
        assert_eq!(restored(&decide(&observed(with_good, None))), (3, vec![]));
    }

    #[test]
    fn transactional_restore_follows_the_group_offsets() {
        // 6 is prepared but its transaction never committed: discarded.
        let d = decide(&observed(
            vec![valid(4, 40, true), valid(5, 50, false), valid(6, 60, false)],
            Some(group(Some(5), 50)),
        ));
        assert_eq!(restored(&d), (5, vec![6]));
    }

    #[test]
    fn transactional_restore_without_metadata_matches_offsets() {
        let d = decide(&observed(
            vec![valid(4, 40, true), valid(5, 50, false), valid(6, 60, false)],
            Some(group(None, 50)),
        ));
        assert_eq!(restored(&d), (5, vec![6]));
    }

    #[test]
    fn prepared_but_never_committed_checkpoints_are_discarded_on_first_run() {
        let d = decide(&observed(
            vec![valid(1, 10, false), valid(2, 20, false)],
            Some(GroupOffsets::default()),
        ));
        assert_eq!(
            d,
            Decision::Fresh {
                discard: vec![1, 2]
            }
        );
    }

    #[test]
    fn committed_offsets_matching_no_checkpoint_refuse_to_start() {
        let d = decide(&observed(
            vec![valid(4, 40, true)],
            Some(group(Some(9), 90)),
        ));
        match d {
            Decision::Refuse(msg) => {
                assert!(msg.contains("checkpoint 9"), "{msg}");
                assert!(msg.contains("[4]"), "{msg}");
            }
            other => panic!("must refuse, got {other:?}"),
        }
        // State disk lost entirely.
        assert!(matches!(
            decide(&observed(vec![], Some(group(Some(9), 90)))),
            Decision::Refuse(_)
        ));
    }

    #[test]
    fn named_checkpoint_with_other_offsets_is_refused() {
        let d = decide(&observed(
            vec![valid(5, 51, false)],
            Some(group(Some(5), 50)),
        ));
        assert!(matches!(d, Decision::Refuse(m) if m.contains("differ")));
    }

    #[test]
    fn a_changed_topology_is_refused_naming_the_uids() {
        let mut o = observed(vec![valid(3, 30, false)], None);
        o.topology = topology("aggregate-sum-amount-by-user");
        match decide(&o) {
            Decision::Refuse(msg) => {
                assert!(msg.contains("\"word-count\""), "{msg}");
                assert!(msg.contains("\"aggregate-sum-amount-by-user\""), "{msg}");
            }
            other => panic!("must refuse, got {other:?}"),
        }
        let mut o = observed(vec![valid(3, 30, false)], None);
        o.topology.max_parallelism = 64;
        assert!(matches!(decide(&o), Decision::Refuse(m) if m.contains("max_parallelism")));
    }

    #[test]
    fn stateless_transforms_may_come_and_go_but_not_sources_or_sinks() {
        use crate::checkpoint::metadata::OperatorInfo;
        let node = |uid: &str, kind: &str| OperatorInfo {
            uid: uid.into(),
            kind: kind.into(),
            parallelism: 2,
            state: None,
        };
        // The checkpoint's job had a filter and a map the job now merges.
        let mut o = observed(vec![valid(3, 30, false)], None);
        o.topology
            .operators
            .extend([node("q.where", "filter"), node("q.select", "map")]);
        let mut checkpoint = valid(3, 30, false);
        if let FolderContents::Valid(m) = &mut checkpoint.contents {
            m.topology
                .operators
                .extend([node("q.where", "filter"), node("q.where-2", "filter")]);
        }
        o.folders = vec![checkpoint];
        assert_eq!(restored(&decide(&o)).0, 3);
        // A source or a sink that is gone is refused.
        for kind in ["kafka-source", "kafka-sink"] {
            let mut o = observed(vec![valid(3, 30, false)], None);
            let mut checkpoint = valid(3, 30, false);
            if let FolderContents::Valid(m) = &mut checkpoint.contents {
                m.topology.operators.push(node("gone", kind));
            }
            o.folders = vec![checkpoint];
            assert!(
                matches!(decide(&o), Decision::Refuse(m) if m.contains("\"gone\"")),
                "{kind}"
            );
        }
    }

    #[test]
    fn a_graph_operator_whose_tables_changed_is_refused_naming_both() {
        use crate::checkpoint::metadata::{KeyColumn, StateInfo, TableInfo};
        let state = |codec: &str| {
            Some(StateInfo {
                key: vec![KeyColumn {
                    name: "user".into(),
                    data_type: "VARCHAR".into(),
                }],
                tables: vec![TableInfo {
                    name: "acc".into(),
                    kind: "value".into(),
                    codec: codec.into(),
                }],
            })
        };
        let mut checkpoint = meta(3, 30);
        checkpoint.topology.operators[1].state = state("accumulators");
        let mut o = observed(vec![], None);
        o.forced = Some(Box::new(checkpoint));
        o.topology = topology("word-count");
        o.topology.operators[1].state = state("accumulators");
        assert_eq!(
            restored(&decide(&o)),
            (3, vec![]),
            "the same tables restore"
        );
        o.topology.operators[1].state = state("row");
        match decide(&o) {
            Decision::Refuse(msg) => {
                assert!(msg.contains("\"word-count\""), "{msg}");
                assert!(
                    msg.contains("acc (value of accumulators)")
                        && msg.contains("acc (value of row)"),
                    "{msg}"
                );
                assert!(msg.contains("new uid"), "{msg}");
            }
            other => panic!("must refuse, got {other:?}"),
        }
    }

    #[test]
    fn expired_group_offsets_fall_back_to_the_newest_committed_marker() {
        let d = decide(&observed(
            vec![valid(4, 40, true), valid(5, 50, false)],
            Some(GroupOffsets::default()),
        ));
        assert_eq!(restored(&d), (4, vec![5]));
    }

    #[test]
    fn forced_restore_still_checks_topology() {
        let mut o = observed(vec![], None);
        o.forced = Some(Box::new(meta(11, 1)));
        assert_eq!(restored(&decide(&o)), (11, vec![]));
        o.topology = topology("other");
        assert!(matches!(decide(&o), Decision::Refuse(_)));
    }
}
