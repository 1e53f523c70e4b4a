//! The `weir` command: `run`, `validate`, `checkpoints list`.

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
    /// Check a configuration: exit 0, or print every problem and exit 2.
    Validate {
        #[arg(long)]
        config: PathBuf,
    },
    /// Inspect the job's checkpoints.
    Checkpoints {
        #[command(subcommand)]
        command: CheckpointsCommand,
    },
}

#[derive(Debug, Subcommand)]
pub enum CheckpointsCommand {
    /// List checkpoints: id, time, size, source offsets, status.
    List {
        #[arg(long)]
        config: PathBuf,
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
