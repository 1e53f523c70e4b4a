//! weir: a Kafka-backed stream processor with keyed RocksDB state and
//! exactly-once checkpoints by asynchronous barrier snapshots.
//!
//! Layout:
//! - [`config`]: the TOML configuration tree, env overrides, validation.
//! - [`element`]: what flows on data channels (records, barriers, end).
//! - [`runtime`]: tasks, alignment, the Coordinator, the restart loop.
//! - [`checkpoint`]: `_metadata`, the folder layout, the recovery decision, retention.
//! - [`state`]: keyed state in RocksDB, key groups, snapshot and restore.
//! - [`kafka`]: consumer and producer configuration, offsets, the sink producer.
//! - [`pipelines`]: the TOML pipelines (`[pipeline]`), built as job graphs.
//! - [`observe`]: metrics and checkpoint history (a leaf: the runtime writes, the admin endpoint reads).
//! - [`admin`]: the HTTP endpoint: health, readiness, metrics, checkpoint history, savepoints.
//! - [`cli`]: the `weir` command's subcommands.
//! - [`time`]: event time: timestamps, per-partition watermarks, the watermark valve.
//! - [`window`]: window assignment and session merging.
//! - [`dataflow`]: job graphs: rows, operators, named state tables, the
//!   Rust API that builds a graph ([`dataflow::builder`]).
//! - [`engine`]: runs a job graph: one task core (`engine::core`) driven by
//!   single mode's runner (`engine::single`: threads, channels, barriers)
//!   or group mode's (`engine::group`: instances sharing a job through a
//!   consumer group, repartition topics and shared checkpoint storage).
//! - [`service`]: the admin endpoint, stop signals and job thread around a job.

/// See the `mimalloc` feature in Cargo.toml.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

pub mod admin;
pub mod checkpoint;
pub mod cli;
pub mod config;
pub mod dataflow;
pub mod element;
pub mod engine;
pub mod error;
pub mod format;
pub mod kafka;
pub mod observe;
pub mod pipelines;
pub mod runtime;
pub mod service;
pub mod sql;
pub mod state;
pub mod time;
pub mod udf;
pub mod window;

pub use config::Config;
pub use error::{Result, WeirError};

/// Runs a job graph built with [`dataflow::builder`] as the `weir` binary
/// runs its built-in pipelines: the configuration file `config` (Kafka,
/// checkpoints, state, restart, admin, log; see
/// [`Config::load_for_graph`]), the admin endpoint, SIGTERM for a final
/// checkpoint, and restarts from the last checkpoint. `RUST_LOG` or
/// `log.level` set what is logged. Returns the process's exit code.
pub fn run(graph: dataflow::Graph, config: &std::path::Path) -> std::process::ExitCode {
    observe::mark_process_start();
    let _failpoints = fail::FailScenario::setup();
    let config = match Config::load_for_graph(config) {
        Ok(c) => std::sync::Arc::new(c),
        Err(e) => {
            eprint!("{e}");
            return std::process::ExitCode::from(2);
        }
    };
    service::init_logging(cli::LogFormat::Text, config.log.level.as_deref());
    let info = admin::overview::JobInfo::from_graph(&config, &graph);
    let graph = std::sync::Arc::new(graph);
    service::serve(config, None, info, move |config, shared, restore_from| {
        engine::run(graph, config, shared, restore_from)
    })
}

/// `weir reset` for `graph`: starts its group-mode job over with empty
/// state ([`engine::group::reset`]), printing what it did. Returns the
/// process's exit code: 0, 1 when refused or failed (nothing deleted
/// unless every offset was committed first).
pub fn reset(graph: &dataflow::Graph, config: &Config) -> std::process::ExitCode {
    match engine::group::reset::reset(graph, config) {
        Ok(report) => {
            print!("{}", report.render());
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {}", e.report());
            std::process::ExitCode::FAILURE
        }
    }
}

/// `weir savepoint` for `graph` (`engine::group::savepoint::take`),
/// printing the savepoint's folder. Returns the process's exit code: 0, 1
/// when refused or failed.
pub fn savepoint(graph: dataflow::Graph, config: Config) -> std::process::ExitCode {
    match engine::group::savepoint::take(std::sync::Arc::new(graph), std::sync::Arc::new(config)) {
        Ok(folder) => {
            println!("{}", folder.display());
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {}", e.report());
            std::process::ExitCode::FAILURE
        }
    }
}

/// The `weir` binary's `main` with `functions` added to every SQL job it
/// plans: a binary that embeds weir for its own user-defined functions
/// (written in Rust, [`udf`]) calls this from its `main`, and is then run
/// as `weir` is (`<binary> run --config weir.toml`, `validate`, ...).
pub fn main_with_functions(functions: udf::Functions) -> std::process::ExitCode {
    if let Err(e) = udf::register(functions) {
        eprintln!("error: {e}");
        return std::process::ExitCode::from(2);
    }
    cli::binary::main()
}

/// The `main` of a job built in Rust, run as `<binary> run --config
/// weir.toml` (or `<binary> reset --config weir.toml`) like the `weir`
/// binary: builds the graph (a problem in it exits 2 with every problem
/// named) and runs it with [`run`], or resets it with [`reset`].
pub fn main_with(build: impl FnOnce() -> Result<dataflow::Graph>) -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let me = args.first().map_or("job", String::as_str);
    let usage = || {
        eprintln!("usage: {me} run|reset|savepoint --config <weir.toml>");
        std::process::ExitCode::from(2)
    };
    let Some(config) = args
        .iter()
        .position(|a| a == "--config")
        .and_then(|i| args.get(i + 1))
    else {
        return usage();
    };
    let command = args
        .get(1)
        .filter(|a| !a.starts_with("--"))
        .map_or("run", String::as_str);
    if !["run", "reset", "savepoint"].contains(&command) {
        return usage();
    }
    let graph = match build() {
        Ok(graph) => graph,
        Err(e) => {
            eprintln!("error: {}", e.report());
            return std::process::ExitCode::from(2);
        }
    };
    if command == "run" {
        return run(graph, std::path::Path::new(config));
    }
    match Config::load_for_graph(std::path::Path::new(config)) {
        Ok(c) => {
            service::init_logging(cli::LogFormat::Text, c.log.level.as_deref());
            if command == "savepoint" {
                return savepoint(graph, c);
            }
            reset(&graph, &c)
        }
        Err(e) => {
            eprint!("{e}");
            std::process::ExitCode::from(2)
        }
    }
}
