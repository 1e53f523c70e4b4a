//! Task checkpoints on shared storage: the manifest that lists a task's
//! RocksDB files, where objects go, the pointer in the committed offset
//! metadata, and which objects garbage collection may delete.
//!
//! Layout below `<checkpoint.dir>/<job name>/`:
//! ```text
//! tasks/0003/manifests/<created ms>-<instance>-<writer>-<seq>.json
//! tasks/0003/files/<writer>/<file name>          SST files, uploaded once
//! tasks/0003/files/<writer>/<seq>/<file name>    small mutable files, per checkpoint
//! ```
//! A job graph's tasks use `stages/<stage>/0003/` the same way, and each
//! leaves `committed/<stage>/0003` once it has committed
//! ([`committed_marker`]).
//! `<writer>` is unique per process attempt, so no two writers ever write
//! the same key: a manifest needs no create-only support from the store,
//! and an SST file name (unique within one RocksDB's life) is never reused
//! for other contents under one writer.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// The prefix of a checkpoint pointer in committed offset metadata.
const POINTER: &str = "weir-task=";

/// Committed offset metadata of a task that starts with empty state at
/// that offset: written by `weir reset` (`crate::engine::group::reset`),
/// replaced by a checkpoint pointer at the task's first commit.
pub const EMPTY_START: &str = "weir-empty-start";

/// Committed offset metadata naming the task checkpoint that matches the
/// offset.
pub fn pointer(manifest_key: &str) -> String {
    format!("{POINTER}{manifest_key}")
}

/// The manifest key in committed offset metadata, if it is a pointer.
pub fn parse_pointer(metadata: &str) -> Option<&str> {
    metadata.strip_prefix(POINTER).filter(|k| !k.is_empty())
}

/// A writer id unique to this process attempt.
pub fn writer_id() -> String {
    // 128 random bits: a pid and a clock collide across containers (pid 1
    // in each) and hosts, and a writer id names objects no other writer may
    // write.
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).expect("the operating system's random source");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The instance that wrote the manifest under `key`
/// (`.../manifests/<created ms>-<instance>-<writer>-<seq>.json`). An
/// instance id may hold `-`; the writer is a 32-digit hex id
/// ([`writer_id`]), followed in a job graph's
/// manifests by `-<incarnation>`, and the sequence is digits. So the
/// instance is what lies between the creation time and the last 32-digit
/// hex part that only digits follow.
pub fn manifest_instance(key: &str) -> Option<&str> {
    let name = key.rsplit('/').next()?.strip_suffix(".json")?;
    let (_created, rest) = name.split_once('-')?;
    let is_hex_id = |p: &str| p.len() == 32 && p.bytes().all(|b| b.is_ascii_hexdigit());
    let is_digits = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    // Byte offsets of each `-` in `rest`: the writer starts after one.
    let dashes: Vec<usize> = rest.match_indices('-').map(|(i, _)| i).collect();
    dashes.iter().rev().find_map(|&at| {
        let (instance, after) = (&rest[..at], &rest[at + 1..]);
        let mut parts = after.split('-');
        let writer = parts.next()?;
        let tail: Vec<&str> = parts.collect();
        let fits =
            is_hex_id(writer) && (1..=2).contains(&tail.len()) && tail.iter().all(|p| is_digits(p));
        (fits && !instance.is_empty()).then_some(instance)
    })
}

/// The folder of task `task` (of the built-in pipeline's keyed operator).
pub fn task_prefix(task: u32) -> String {
    format!("tasks/{task:04}")
}

/// The folder of a job graph's task checkpoints in storage.
pub const STAGES: &str = "stages";

/// The folder of the tasks' committed markers ([`committed_marker`]).
pub const MARKERS: &str = "committed";

/// The folder where a group-mode job records the savepoints it was seeded
/// from (`engine::group::savepoint`); `weir reset` deletes it with the
/// task checkpoints.
pub const SEEDED: &str = "seeded";

/// The folder of task `task` of a job graph's stage headed by `stage`.
pub fn stage_task_prefix(stage: &str, task: u32) -> String {
    format!("{STAGES}/{stage}/{task:04}")
}

/// The marker a task writes after its first commit (of each incarnation):
/// the task has committed, so if the group ever has no offset for it, its
/// offsets were lost and it must not start over empty. Outside the task's
/// folder, which garbage collection owns. The body is the first pointer
/// it committed, for a reader.
pub fn committed_marker(stage: &str, task: u32) -> String {
    format!("{MARKERS}/{stage}/{task:04}")
}

/// Where a group-mode instance announces its group member id
/// ([`Presence`]), below the job's folder.
pub fn presence_key(instance: &str) -> String {
    format!("members/{instance}.json")
}

/// An instance's group member id, written each time it changes (a new
/// process, a new member after a classic-protocol rejoin), so that the
/// instances that take its tasks over can tell whether it, in its latest
/// incarnation, is still a member of the group
/// (`GraphInstance::fence_dead_owners`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Presence {
    pub instance: String,
    /// Empty while a process of the instance is starting
    /// ([`Presence::starting`]): written before its producer takes the
    /// transactional id over, so that no survivor fences the new process
    /// in the moment between that and its joining the group.
    pub member: String,
    /// The process attempt (`<writer>-<incarnation>`) that wrote it.
    pub writer: String,
    pub written_ms: u64,
    /// The newest repartition wire format (`engine::group::wire::FORMAT`)
    /// and task manifest format ([`FORMAT`]) the instance reads: what the
    /// group may write once every member reads it (rolling upgrades).
    pub wire_format: u32,
    pub manifest_format: u32,
}

impl Presence {
    /// A process of `instance` that has not joined the group yet: its own
    /// `init_transactions` fences its predecessor and aborts what that one
    /// left open, so nobody else needs to.
    pub fn starting(instance: &str, writer: &str) -> Self {
        Self {
            instance: instance.to_string(),
            member: String::new(),
            writer: writer.to_string(),
            written_ms: crate::runtime::now_ms(),
            wire_format: super::wire::FORMAT,
            manifest_format: FORMAT,
        }
    }

    pub fn is_starting(&self) -> bool {
        self.member.is_empty()
    }
}

/// One file of a task checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestFile {
    /// The file's name in the RocksDB checkpoint folder.
    pub name: String,
    /// Where it is stored, below the job's folder.
    pub key: String,
    pub size_bytes: u64,
    pub crc32: u32,
}

/// One task's checkpoint: written after its files, before the transaction
/// whose offsets point at it commits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskManifest {
    pub format: u32,
    pub job: String,
    pub operator_uid: String,
    pub task: u32,
    pub tasks: u32,
    /// Key groups `[start, end)` of the task.
    pub key_groups: (u32, u32),
    pub max_parallelism: u32,
    pub instance: String,
    /// The writer (one process attempt) and its checkpoint sequence.
    pub writer: String,
    pub seq: u64,
    pub created_ms: u64,
    /// The next repartition offset this state has consumed up to.
    pub offset: i64,
    pub files: Vec<ManifestFile>,
    /// A job graph's task: what else its checkpoint holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graph: Option<GraphTaskState>,
}

/// The parts of a graph task's checkpoint beyond its files (which are
/// named `<node uid>/<file>`, one RocksDB per keyed node of the chain).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GraphTaskState {
    /// The uid of the stage's head node.
    pub stage: String,
    /// Each keyed node's tables, `name kind codec`, as declared.
    pub tables: BTreeMap<String, Vec<String>>,
    /// Per writer, the watermark the records before `offset` gave.
    pub watermarks: BTreeMap<String, WriterMark>,
    /// Each keyed node of the stage as a single-mode checkpoint's
    /// `_metadata` records it (uid, kind, key columns, tables), so that
    /// `weir state` decodes a task's state from its manifest alone, with
    /// no job graph at hand. Empty in manifests of earlier versions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub operators: Vec<crate::checkpoint::metadata::OperatorInfo>,
}

/// What a reading task knows of one watermark writer (see
/// `engine::group::marks`): the highest watermark it sent, and whether it
/// is idle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriterMark {
    pub watermark: i64,
    pub idle: bool,
}

/// The newest task manifest format this build reads and writes. A field
/// added with a serde default (which earlier builds ignore, and which they
/// may leave out) keeps the format; any other change makes a new one,
/// which a build writes only once every member of the group announces
/// that it reads it (`Presence::manifest_format`, as for the repartition
/// wire format: `engine::group::wire`). Every format keeps `files[].key`,
/// which garbage collection reads ([`manifest_file_keys`]). Fixtures of
/// format 1 are in `tests/fixtures/group-v1/`.
pub const FORMAT: u32 = 1;

/// A task manifest from its stored bytes: refused with a message saying
/// what to do when a newer build wrote it.
pub fn parse_manifest(bytes: &[u8]) -> Result<TaskManifest, String> {
    #[derive(Deserialize)]
    struct Head {
        format: u32,
    }
    let head: Head = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    if head.format > FORMAT {
        return Err(format!(
            "it is of task manifest format {}, written by a newer weir build (this build reads \
             formats up to {FORMAT}); upgrade this instance to the build the job's other \
             instances run (docs/operations.md, \"Rolling upgrades\")",
            head.format
        ));
    }
    if head.format == 0 {
        return Err("its format is 0, which no weir build writes".into());
    }
    serde_json::from_slice(bytes).map_err(|e| e.to_string())
}

/// The stored files a manifest of any format references, for garbage
/// collection (which must keep them even when this build cannot read the
/// rest of the manifest); None if it is not a manifest.
pub fn manifest_file_keys(bytes: &[u8]) -> Option<Vec<String>> {
    #[derive(Deserialize)]
    struct Files {
        files: Vec<FileKey>,
    }
    #[derive(Deserialize)]
    struct FileKey {
        key: String,
    }
    let f: Files = serde_json::from_slice(bytes).ok()?;
    Some(f.files.into_iter().map(|f| f.key).collect())
}

impl TaskManifest {
    /// Where this manifest is stored.
    pub fn key(&self) -> String {
        format!(
            "{}/manifests/{:013}-{}-{}-{:08}.json",
            self.prefix(),
            self.created_ms,
            self.instance,
            self.writer,
            self.seq
        )
    }

    /// The task's folder.
    pub fn prefix(&self) -> String {
        match &self.graph {
            None => task_prefix(self.task),
            Some(g) => stage_task_prefix(&g.stage, self.task),
        }
    }

    pub fn size_bytes(&self) -> u64 {
        self.files.iter().map(|f| f.size_bytes).sum()
    }
}

/// The key of a newly uploaded file: SST files are immutable and keep
/// their name for the life of the RocksDB instance, so they are stored
/// once per writer; other files change and are stored per checkpoint.
pub fn file_key(prefix: &str, writer: &str, seq: u64, name: &str) -> String {
    if name.ends_with(".sst") {
        format!("{prefix}/files/{writer}/{name}")
    } else {
        format!("{prefix}/files/{writer}/{seq:08}/{name}")
    }
}

/// The creation time encoded at the start of a manifest's file name.
pub fn manifest_created_ms(key: &str) -> Option<u64> {
    let name = key.rsplit('/').next()?;
    name.split('-').next()?.parse().ok()
}

/// What the garbage collector sees of one task's folder.
#[derive(Debug, Clone, Default)]
pub struct TaskObjects {
    /// Manifests by key, with the files each references and its age.
    pub manifests: BTreeMap<String, (Vec<String>, i64)>,
    /// Every other object with its last-modified time.
    pub files: BTreeMap<String, i64>,
}

/// The objects of one task that the instance whose writer ids start with
/// `own_writer` may delete: every manifest except the committed one, the
/// `retained - 1` newest older than it, any newer one younger than
/// `grace_ms` (a checkpoint that may still commit) and any newer one
/// another writer wrote; then every file no kept manifest references and
/// older than `grace_ms` (uploaded for a manifest not yet written). When
/// `stopping`, the collector's own files are exempt from the grace period
/// (it has no upload in flight).
///
/// A manifest newer than the collector's committed one that another writer
/// wrote is never the collector's to delete: its view may be stale (a
/// paused instance whose task moved on), and that manifest may be what the
/// task's new owner committed. It becomes older than some committed
/// manifest at the owner's next commit, and collectable then.
pub fn collectable(
    objects: &TaskObjects,
    committed: &str,
    retained: u32,
    now_ms: i64,
    grace_ms: i64,
    own_writer: &str,
    stopping: bool,
) -> Vec<String> {
    let Some(committed_at) = manifest_created_ms(committed) else {
        return Vec::new();
    };
    if !objects.manifests.contains_key(committed) {
        // The committed pointer must resolve; never collect around a hole.
        return Vec::new();
    }
    let mut keep: BTreeSet<&str> = BTreeSet::new();
    keep.insert(committed);
    let older: Vec<&String> = objects
        .manifests
        .keys()
        .filter(|k| manifest_created_ms(k).is_some_and(|t| t < committed_at))
        .collect();
    for k in older.iter().rev().take(retained.saturating_sub(1) as usize) {
        keep.insert(k);
    }
    for (k, (_, modified)) in &objects.manifests {
        let newer = manifest_created_ms(k).is_none_or(|t| t >= committed_at);
        let foreign = !k
            .rsplit('/')
            .next()
            .is_some_and(|name| name.contains(&format!("-{own_writer}")));
        if newer && k.as_str() != committed && (foreign || now_ms - modified < grace_ms) {
            keep.insert(k);
        }
    }
    let referenced: BTreeSet<&str> = keep
        .iter()
        .filter_map(|k| objects.manifests.get(*k))
        .flat_map(|(files, _)| files.iter().map(String::as_str))
        .collect();
    let mut out: Vec<String> = objects
        .manifests
        .keys()
        .filter(|k| !keep.contains(k.as_str()))
        .cloned()
        .collect();
    for (k, modified) in &objects.files {
        if referenced.contains(k.as_str()) {
            continue;
        }
        let own = stopping && k.contains(&format!("/files/{own_writer}"));
        if own || now_ms - modified >= grace_ms {
            out.push(k.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(t: u64, files: &[&str]) -> (String, (Vec<String>, i64)) {
        (
            format!("tasks/0001/manifests/{t:013}-a-w-00000001.json"),
            (files.iter().map(|f| f.to_string()).collect(), t as i64),
        )
    }

    #[test]
    fn the_writing_instance_is_read_from_a_manifest_key() {
        let m = |instance: &str| TaskManifest {
            format: FORMAT,
            job: "j".into(),
            operator_uid: "u".into(),
            task: 3,
            tasks: 8,
            key_groups: (0, 16),
            max_parallelism: 128,
            instance: instance.into(),
            writer: writer_id(),
            seq: 7,
            created_ms: 3_500,
            offset: 0,
            files: Vec::new(),
            graph: None,
        };
        for id in ["a", "weir-2", "pod.x-y_z", "i1-7"] {
            assert_eq!(manifest_instance(&m(id).key()), Some(id), "{}", m(id).key());
            // A job graph's writer carries its incarnation.
            let mut graph = m(id);
            graph.writer = format!("{}-3", graph.writer);
            assert_eq!(manifest_instance(&graph.key()), Some(id), "{}", graph.key());
        }
        assert_eq!(manifest_instance("stages/s/0001/manifests/x.json"), None);
        assert_eq!(
            manifest_instance("tasks/0001/manifests/0000000003500-w-00000002.json"),
            None
        );
    }

    #[test]
    fn pointers_round_trip_and_other_metadata_is_not_one() {
        assert_eq!(
            parse_pointer(&pointer("tasks/0001/m.json")),
            Some("tasks/0001/m.json")
        );
        assert_eq!(parse_pointer(""), None);
        assert_eq!(parse_pointer("weir-checkpoint=3"), None);
        assert_eq!(parse_pointer("weir-task="), None);
    }

    #[test]
    fn sst_files_are_stored_once_per_writer_and_other_files_per_checkpoint() {
        assert_eq!(
            file_key(&task_prefix(3), "w1", 7, "000012.sst"),
            "tasks/0003/files/w1/000012.sst"
        );
        assert_eq!(
            file_key(&task_prefix(3), "w1", 7, "CURRENT"),
            "tasks/0003/files/w1/00000007/CURRENT"
        );
    }

    #[test]
    fn collection_keeps_what_the_committed_and_retained_checkpoints_reach() {
        let mut o = TaskObjects::default();
        o.manifests.extend([
            manifest(1_000, &["f/a", "f/b"]),
            manifest(2_000, &["f/a", "f/c"]),
            manifest(3_000, &["f/a", "f/d"]),
            // Newer than the committed one: young (may commit) and old (aborted).
            manifest(9_500, &["f/e"]),
        ]);
        // The collector's own (writer w), aborted; another writer's, as
        // old: the collector's view may be stale, so that one is kept.
        let old_newer = (
            "tasks/0001/manifests/0000000003500-a-w-00000002.json".to_string(),
            (vec!["f/x".to_string()], 3_500),
        );
        o.manifests.insert(old_newer.0.clone(), old_newer.1);
        let foreign_newer = (
            "tasks/0001/manifests/0000000003600-b-v-00000001.json".to_string(),
            (vec!["f/v".to_string()], 3_600),
        );
        o.manifests.insert(foreign_newer.0.clone(), foreign_newer.1);
        for (f, t) in [
            ("f/a", 1_000),
            ("f/b", 1_000),
            ("f/c", 2_000),
            ("f/d", 3_000),
            ("f/e", 9_500),
            ("f/x", 3_500),
            ("f/v", 3_600),
            ("f/young", 9_900),
        ] {
            o.files.insert(f.into(), t);
        }
        let committed = manifest(3_000, &[]).0;
        let mut gone = collectable(&o, &committed, 2, 10_000, 1_000, "w", false);
        gone.sort();
        assert_eq!(
            gone,
            vec![
                "f/b".to_string(),
                "f/x".to_string(),
                manifest(1_000, &[]).0,
                old_newer.0.clone(),
            ]
        );
        // Nothing is collected when the committed pointer does not resolve.
        assert!(collectable(
            &o,
            "tasks/0001/manifests/0000000004000-a-w-1.json",
            2,
            10_000,
            1_000,
            "w",
            false
        )
        .is_empty());
    }

    #[test]
    fn a_stopping_owner_collects_its_own_young_files_but_not_others() {
        let mut o = TaskObjects::default();
        o.manifests
            .extend([manifest(1_000, &["tasks/0001/files/w/1.sst"])]);
        o.files.insert("tasks/0001/files/w/1.sst".into(), 1_000);
        o.files.insert("tasks/0001/files/w/2.sst".into(), 9_990);
        o.files.insert("tasks/0001/files/v/3.sst".into(), 9_990);
        let committed = manifest(1_000, &[]).0;
        assert_eq!(
            collectable(&o, &committed, 1, 10_000, 1_000, "w", true),
            vec!["tasks/0001/files/w/2.sst".to_string()]
        );
    }

    /// Writer ids are 128 bits in hex, and no two are alike (the old
    /// `<pid><nanos><counter>` ids of two containers' pid-1 processes could
    /// be).
    #[test]
    fn writer_ids_are_random_128_bit_hex() {
        let ids: std::collections::BTreeSet<String> = (0..1000).map(|_| writer_id()).collect();
        assert_eq!(ids.len(), 1000);
        assert!(ids
            .iter()
            .all(|id| id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit())));
    }
}
