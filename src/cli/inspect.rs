//! `weir checkpoints show` and `weir state get|scan`: a checkpoint's
//! contents and keyed state, read offline (`checkpoint::reader`).

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::json;

use super::OutputFormat;
use crate::checkpoint::metadata::CheckpointMetadata;
use crate::checkpoint::reader::{CheckpointReader, SubtaskSummary};
use crate::checkpoint::store::COMMITTED;
use crate::checkpoint::CheckpointStore;
use crate::config::Config;
use crate::dataflow::json::format_timestamp as rfc3339_millis;
use crate::engine::group::committed::{self, GroupCheckpoint};
use crate::error::{Result, WeirError};

/// A checkpoint to read: its folder and, for a group-mode job, the
/// download that holds it (removed when this is dropped).
pub struct Resolved {
    pub folder: PathBuf,
    pub group: Option<GroupCheckpoint>,
}

impl Resolved {
    /// What a person is told the state was read from.
    pub fn describe(&self) -> String {
        match &self.group {
            Some(g) => g.describe(),
            None => self.folder.display().to_string(),
        }
    }
}

/// Finds the checkpoint `--checkpoint` names: a folder path (checkpoint or
/// savepoint), a checkpoint id, or `latest` (the newest completed one) of
/// the job `config` describes. For a group-mode job, `latest` is what its
/// consumer group has committed, downloaded from shared storage
/// (`engine::group::committed`); with `operator`, only that node's stage.
pub fn resolve(
    checkpoint: &str,
    config: Option<&Config>,
    operator: Option<&str>,
) -> Result<Resolved> {
    let as_path = Path::new(checkpoint);
    if as_path.is_dir() {
        return Ok(Resolved {
            folder: as_path.to_path_buf(),
            group: None,
        });
    }
    let Some(config) = config else {
        return Err(WeirError::Recovery(format!(
            "{checkpoint:?} is not a checkpoint folder; to name a checkpoint by id or as \
             `latest`, give the job's --config"
        )));
    };
    if config.is_group() {
        if checkpoint != "latest" {
            return Err(WeirError::Recovery(format!(
                "--checkpoint {checkpoint:?}: job {:?} runs in group mode, whose checkpoints \
                 are task manifests in shared storage, not numbered folders; read the one its \
                 consumer group has committed with --checkpoint latest",
                config.job.name
            )));
        }
        let group = committed::latest(config, operator)?;
        return Ok(Resolved {
            folder: group.folder().to_path_buf(),
            group: Some(group),
        });
    }
    let store = CheckpointStore::new(config.job_checkpoint_dir());
    let folder = if checkpoint == "latest" {
        store
            .latest_completed()?
            .map(|id| store.folder(id))
            .ok_or_else(|| {
                WeirError::Recovery(format!(
                    "no completed checkpoint in {}",
                    store.root().display()
                ))
            })?
    } else {
        let id: u64 = checkpoint.parse().map_err(|_| {
            WeirError::Recovery(format!(
                "--checkpoint {checkpoint:?} is neither a folder, a checkpoint id nor `latest`"
            ))
        })?;
        let folder = store.folder(id);
        if !folder.is_dir() {
            return Err(WeirError::Recovery(format!(
                "checkpoint {id} is not in {} (see `weir checkpoints list`)",
                store.root().display()
            )));
        }
        folder
    };
    Ok(Resolved {
        folder,
        group: None,
    })
}

/// Renders `weir checkpoints show`.
pub fn show(at: &Resolved, format: OutputFormat) -> Result<String> {
    let folder = at.folder.as_path();
    let reader = CheckpointReader::open(folder)?;
    let meta = reader.metadata();
    let subtasks = reader.summary()?;
    if let Some(group) = &at.group {
        return Ok(show_group(group, meta, &subtasks, format));
    }
    let committed = folder.join(COMMITTED).exists();
    if format == OutputFormat::Json {
        let body = json!({
            "checkpoint_id": meta.checkpoint_id,
            "job": meta.job,
            "folder": folder.display().to_string(),
            "committed": committed,
            "trigger_time_ms": meta.trigger_time_ms,
            "prepared_time_ms": meta.prepared_time_ms,
            "max_parallelism": meta.topology.max_parallelism,
            "operators": meta.topology.operators,
            "source_offsets": meta.source_offsets,
            "state_size_bytes": meta.state_size(),
            "subtasks": subtasks,
        });
        return Ok(format!(
            "{}\n",
            serde_json::to_string_pretty(&body).expect("json")
        ));
    }
    let mut out = String::new();
    out.push_str(&format!(
        "checkpoint {} of job {} in {}\n",
        meta.checkpoint_id,
        meta.job,
        folder.display()
    ));
    out.push_str(&format!(
        "  triggered {}, prepared {}, {}\n",
        rfc3339_millis(meta.trigger_time_ms as i64),
        rfc3339_millis(meta.prepared_time_ms as i64),
        if committed {
            "committed"
        } else {
            "not marked committed (the group's offsets decide)"
        }
    ));
    out.push_str(&format!(
        "  max parallelism {}, state {} bytes\n",
        meta.topology.max_parallelism,
        meta.state_size()
    ));
    push_operators_offsets_state(&mut out, meta, &subtasks, "subtask");
    Ok(out)
}

/// `weir checkpoints show latest` of a group-mode job: each task's
/// committed checkpoint, then what single mode shows (`subtask` is the
/// task).
fn show_group(
    group: &GroupCheckpoint,
    meta: &CheckpointMetadata,
    subtasks: &[SubtaskSummary],
    format: OutputFormat,
) -> String {
    if format == OutputFormat::Json {
        let body = json!({
            "mode": "group",
            "job": meta.job,
            "group": group.group,
            "storage": group.storage,
            "max_parallelism": meta.topology.max_parallelism,
            "operators": meta.topology.operators,
            "tasks": group.tasks,
            "empty_tasks": group.empty,
            "source_offsets": meta.source_offsets,
            "state_size_bytes": group.tasks.iter().map(|t| t.size_bytes).sum::<u64>(),
            "subtasks": subtasks,
        });
        return format!("{}\n", serde_json::to_string_pretty(&body).expect("json"));
    }
    let mut out = format!(
        "group-mode job {}: {}\n  max parallelism {}, {} tasks committed, state {} bytes\n",
        meta.job,
        group.describe(),
        meta.topology.max_parallelism,
        group.tasks.len(),
        group.tasks.iter().map(|t| t.size_bytes).sum::<u64>()
    );
    if !group.empty.is_empty() {
        out.push_str(&format!(
            "  with empty state (no checkpoint committed since `weir reset`, or no offset): {}\n",
            group.empty.join(", ")
        ));
    }
    out.push_str(&format!(
        "\ntasks\n  {:<20} {:>4} {:>11} {:>12} {:>12}  {:<24} {:<10} manifest\n",
        "stage", "task", "key groups", "offset", "bytes", "written (UTC)", "instance"
    ));
    for t in &group.tasks {
        out.push_str(&format!(
            "  {:<20} {:>4} {:>11} {:>12} {:>12}  {:<24} {:<10} {}\n",
            t.stage,
            t.task,
            format!("{}..{}", t.key_groups.0, t.key_groups.1),
            t.offset,
            t.size_bytes,
            rfc3339_millis(t.created_ms as i64),
            t.instance,
            t.manifest
        ));
    }
    push_operators_offsets_state(&mut out, meta, subtasks, "task");
    out
}

/// The operators, the source offsets and the keyed state of a checkpoint
/// as text (a group-mode job's per task).
fn push_operators_offsets_state(
    out: &mut String,
    meta: &CheckpointMetadata,
    subtasks: &[SubtaskSummary],
    subtask: &str,
) {
    out.push_str("\noperators\n");
    for o in &meta.topology.operators {
        out.push_str(&format!(
            "  {:<24} {:<20} parallelism {}\n",
            o.uid, o.kind, o.parallelism
        ));
    }
    out.push_str("\nsource offsets (next to read)\n");
    for o in &meta.source_offsets {
        let event_time = o
            .max_timestamp
            .map(|t| format!("  max event time {}", rfc3339_millis(t)))
            .unwrap_or_default();
        out.push_str(&format!(
            "  {}/{:<4} {:>12}{event_time}\n",
            o.topic, o.partition, o.offset
        ));
    }
    out.push_str(&format!(
        "\nkeyed state\n  {:<20} {:>7} {:>11} {:>10} {:>10} {:>12} {:>6}  watermark\n",
        "operator", subtask, "key groups", "keys", "windows", "bytes", "files"
    ));
    for s in subtasks {
        out.push_str(&format!(
            "  {:<20} {:>7} {:>11} {:>10} {:>10} {:>12} {:>6}  {}\n",
            s.operator,
            s.subtask,
            format!("{}..{}", s.key_groups.0, s.key_groups.1),
            s.keys,
            s.windows,
            s.size_bytes,
            s.files,
            s.watermark_ms.map_or("-".to_string(), rfc3339_millis)
        ));
    }
}

/// `weir state get`: the key's value (or windows), one line each; false
/// when the checkpoint holds nothing for the key.
pub fn get(
    folder: &Path,
    operator: &str,
    key: &str,
    table: Option<&str>,
    format: OutputFormat,
    out: &mut dyn Write,
) -> Result<bool> {
    let reader = CheckpointReader::open(folder)?;
    let info = state_info(&reader, operator)?;
    super::graph_state::get(&reader, operator, info, key, table, format, out)
}

/// `weir state scan`: every key under `prefix`, one line each (JSON lines
/// with `--format json`). Returns how many it wrote.
pub fn scan(
    folder: &Path,
    operator: &str,
    prefix: &str,
    table: Option<&str>,
    format: OutputFormat,
    out: &mut dyn Write,
) -> Result<u64> {
    let reader = CheckpointReader::open(folder)?;
    let info = state_info(&reader, operator)?;
    super::graph_state::scan(&reader, operator, info, prefix, table, format, out)
}

/// The recorded state of `operator`, or why there is none to read: no
/// keyed state by that uid, or state written before job graphs, whose
/// layout no checkpoint recorded.
fn state_info<'a>(
    reader: &'a CheckpointReader,
    operator: &str,
) -> Result<&'a crate::checkpoint::metadata::StateInfo> {
    if let Some(info) = super::graph_state::state_info(reader, operator) {
        return Ok(info);
    }
    if reader.snapshots(operator).is_ok() {
        return Err(WeirError::Recovery(format!(
            "operator {operator:?} in checkpoint {} was written by weir before job graphs: its \
             state has no recorded tables, and this weir reads state only by them; read it \
             with the weir that wrote it",
            reader.metadata().checkpoint_id
        )));
    }
    Err(reader.unknown_operator(operator))
}
