//! The `weir` command: `run`, `reset`, `validate`, `checkpoints
//! list|show`, `state get|scan`.

pub mod binary;
pub mod graph_state;
pub mod inspect;

use std::path::{Path, PathBuf};

use clap::{Parser, Subcommand, ValueEnum};

use crate::checkpoint::recovery::FolderContents;
use crate::checkpoint::CheckpointStore;
use crate::config::Config;

#[derive(Debug, Parser)]
#[command(
    name = "weir",
    version,
    about = "Kafka stream processing with RocksDB state and exactly-once checkpoints"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Log format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the job until SIGTERM/SIGINT (which take a final checkpoint).
    Run {
        #[arg(long)]
        config: PathBuf,
        /// Start from this checkpoint folder instead of searching.
        #[arg(long)]
        restore_from: Option<PathBuf>,
    },
    /// Start a group-mode job over with empty state, on purpose: commit
    /// every input partition at the source's `start` and every task at
    /// the end of its repartition partition, then delete the tasks'
    /// checkpoints. Refused while an instance runs (docs/scale-out.md).
    Reset {
        #[arg(long)]
        config: PathBuf,
    },
    /// Write a savepoint of the stopped job, restorable in either mode with
    /// `run --restore-from`: in group mode, drain the repartition topics
    /// (sources paused) and lay the committed task checkpoints out as a
    /// checkpoint folder; in single mode, copy the last completed
    /// checkpoint. Prints the folder (docs/scale-out.md).
    Savepoint {
        #[arg(long)]
        config: PathBuf,
    },
    /// Check a configuration: exit 0, or print every problem and exit 2.
    Validate {
        #[arg(long)]
        config: PathBuf,
    },
    /// Print the job's graph: operators, keys, edges, state tables, and
    /// what each sink receives (append-only or upsert by which key).
    Explain {
        #[arg(long)]
        config: PathBuf,
    },
    /// Inspect the job's checkpoints.
    Checkpoints {
        #[command(subcommand)]
        command: CheckpointsCommand,
    },
    /// Read keyed state from a checkpoint folder: no Kafka, no running job,
    /// nothing modified (safe while weir runs).
    State {
        #[command(subcommand)]
        command: StateCommand,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    Text,
    Json,
}

/// Which checkpoint, and of which job.
#[derive(Debug, clap::Args)]
pub struct CheckpointArgs {
    /// A checkpoint or savepoint folder, or a checkpoint id or `latest`
    /// (these need --config).
    #[arg(long)]
    pub checkpoint: String,
    /// The job's configuration (to find checkpoints by id).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// The keyed operator's uid (see `weir checkpoints show`).
    #[arg(long)]
    pub operator: String,
    /// Only this state table of a job graph's operator (all by default).
    #[arg(long)]
    pub table: Option<String>,
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub format: OutputFormat,
}

#[derive(Debug, Subcommand)]
pub enum StateCommand {
    /// One key's value (or its windows); exits 1 when the checkpoint has
    /// nothing for it.
    Get {
        #[command(flatten)]
        at: CheckpointArgs,
        #[arg(long)]
        key: String,
    },
    /// Every key, or the keys starting with --prefix, one per line
    /// (JSON lines with --format json).
    Scan {
        #[command(flatten)]
        at: CheckpointArgs,
        #[arg(long, default_value = "")]
        prefix: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum CheckpointsCommand {
    /// List checkpoints: id, time, size, source offsets, status.
    List {
        #[arg(long)]
        config: PathBuf,
    },
    /// One checkpoint: operators, subtasks with their key groups, number of
    /// keys, sizes, source offsets and watermarks.
    Show {
        /// A checkpoint or savepoint folder, or an id or `latest` (with --config).
        checkpoint: String,
        #[arg(long)]
        config: Option<PathBuf>,
        #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
        format: OutputFormat,
    },
}

/// Renders `weir checkpoints list`.
pub fn list_checkpoints(config: &Config) -> crate::Result<String> {
    let store = CheckpointStore::new(config.job_checkpoint_dir());
    let mut out = String::new();
    out.push_str(&format!(
        "{:<12} {:<24} {:>12}  {:<22} offsets\n",
        "id", "prepared (UTC)", "size", "status"
    ));
    for f in store.scan()? {
        let id = f.id.map_or("?".to_string(), |i| i.to_string());
        let size = f.id.map_or(0, |i| store.size(i));
        match &f.contents {
            FolderContents::Valid(m) => {
                let time = humantime::format_rfc3339_seconds(
                    std::time::UNIX_EPOCH + std::time::Duration::from_millis(m.prepared_time_ms),
                );
                let status = if f.committed_marker {
                    "completed"
                } else {
                    "prepared (not committed)"
                };
                let offsets: Vec<String> = m
                    .source_offsets
                    .iter()
                    .map(|o| format!("{}/{}={}", o.topic, o.partition, o.offset))
                    .collect();
                out.push_str(&format!(
                    "{id:<12} {:<24} {size:>12}  {status:<22} {}\n",
                    time.to_string(),
                    offsets.join(",")
                ));
            }
            FolderContents::Invalid(reason) => {
                out.push_str(&format!(
                    "{id:<12} {:<24} {size:>12}  unusable: {reason} ({})\n",
                    "-", f.name
                ));
            }
            FolderContents::Unfinished(reason) => {
                out.push_str(&format!(
                    "{id:<12} {:<24} {size:>12}  unfinished: {reason} ({})\n",
                    "-", f.name
                ));
            }
        }
    }
    Ok(out)
}

/// The folder of `--restore-from`, made absolute for messages.
pub fn absolute(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}
