//! The `weir` binary's `main`, in the library so that a binary that
//! embeds weir with its own user-defined functions
//! ([`crate::main_with_functions`]) is the same program.

use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;

use super::{CheckpointsCommand, Cli, Command, StateCommand};
use crate::config::Config;

/// `RUST_LOG` wins over `[log] level`, which wins over "info".
fn load(path: &std::path::Path) -> Result<Config, ExitCode> {
    Config::load(path).map_err(|e| {
        eprint!("{e}");
        ExitCode::from(2)
    })
}

/// A built-in pipeline's configuration, or a job graph's (no `[source]`
/// or `[pipeline]`): reading checkpoints needs only where they are.
fn load_any(path: &std::path::Path) -> Result<Config, ExitCode> {
    Config::load(path).or_else(|e| {
        Config::load_for_graph(path).map_err(|_| {
            eprint!("{e}");
            ExitCode::from(2)
        })
    })
}

/// Parses the command line and runs its command; the process's exit code.
pub fn main() -> ExitCode {
    crate::observe::mark_process_start();
    let cli = Cli::parse();
    // Named crash points, only in builds with `--features failpoints`.
    let _failpoints = fail::FailScenario::setup();
    if matches!(
        cli.command,
        Command::Validate { .. } | Command::Explain { .. }
    ) {
        // A registry that cannot be reached is named, not waited for.
        crate::sql::formats::impatient();
    }
    match cli.command {
        Command::Validate { config } => match load(&config) {
            Ok(c) => {
                if let Err(code) = sql_problems(&c) {
                    return code;
                }
                println!("{}: ok", config.display());
                if c.is_group() {
                    println!(
                        "group mode: instance {:?} (must differ on every instance; its state.dir \
                         must be its own)\nthese must be the same on every instance of the job:",
                        c.instance()
                    );
                    for (key, value) in c.shared_settings() {
                        println!("  {key} = {value}");
                    }
                }
                ExitCode::SUCCESS
            }
            Err(code) => code,
        },
        Command::Explain { config } => {
            let c = match load(&config) {
                Ok(c) => c,
                Err(code) => return code,
            };
            if c.sql().is_some() {
                return match crate::sql::plan(&c) {
                    Ok(plan) => {
                        print!("{}", plan.describe());
                        ExitCode::SUCCESS
                    }
                    Err(_) => sql_problems(&c).err().unwrap_or(ExitCode::from(2)),
                };
            }
            // A TOML pipeline: its plan, then the SQL it was compiled from.
            match crate::pipelines::plan(&c) {
                Ok(plan) => {
                    print!("{}", plan.describe());
                    if let Some(b) = c.builtin() {
                        let (job, _) = crate::pipelines::sql_job(&c, b);
                        println!("sql ({})", job.origin);
                        for line in job.text.lines() {
                            println!("  {line}");
                        }
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: {}", e.report());
                    ExitCode::from(2)
                }
            }
        }
        Command::Checkpoints {
            command: CheckpointsCommand::List { config },
        } => {
            let config = match load_any(&config) {
                Ok(c) => c,
                Err(code) => return code,
            };
            match super::list_checkpoints(&config) {
                Ok(text) => {
                    print!("{text}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Checkpoints {
            command:
                CheckpointsCommand::Show {
                    checkpoint,
                    config,
                    format,
                },
        } => {
            let config = match config.as_deref().map(load_any).transpose() {
                Ok(c) => c,
                Err(code) => return code,
            };
            match super::inspect::resolve(&checkpoint, config.as_ref(), None)
                .and_then(|at| super::inspect::show(&at, format))
            {
                Ok(text) => {
                    print!("{text}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: {}", e.report());
                    ExitCode::FAILURE
                }
            }
        }
        Command::State { command } => state_command(command),
        Command::Reset { config } => {
            let config = match load(&config) {
                Ok(c) => c,
                Err(code) => return code,
            };
            crate::service::init_logging(cli.log_format, config.log.level.as_deref());
            match crate::pipelines::graph(&config) {
                Ok(graph) => crate::reset(&graph, &config),
                Err(e) => {
                    eprintln!("error: {}", e.report());
                    ExitCode::from(2)
                }
            }
        }
        Command::Savepoint { config } => {
            let config = match load(&config) {
                Ok(c) => c,
                Err(code) => return code,
            };
            crate::service::init_logging(cli.log_format, config.log.level.as_deref());
            match crate::pipelines::graph(&config) {
                Ok(graph) => crate::savepoint(graph, config),
                Err(e) => {
                    eprintln!("error: {}", e.report());
                    ExitCode::from(2)
                }
            }
        }
        Command::Run {
            config,
            restore_from,
        } => {
            let config = match load(&config) {
                Ok(c) => Arc::new(c),
                Err(code) => return code,
            };
            crate::service::init_logging(cli.log_format, config.log.level.as_deref());
            run(config, restore_from.map(|p| super::absolute(&p)))
        }
    }
}

/// A SQL job's statements planned: every problem printed with its line,
/// column and text, and exit 2; Ok for a job without SQL.
fn sql_problems(c: &Config) -> Result<(), ExitCode> {
    let Some(sql) = c.sql() else {
        return Ok(());
    };
    match crate::sql::plan(c) {
        Ok(_) => Ok(()),
        Err(errors) => {
            eprintln!("{} problem(s) in the job's SQL:", errors.len());
            for e in &errors {
                eprintln!("{}", e.render(&sql.origin, &sql.text));
            }
            Err(ExitCode::from(2))
        }
    }
}

/// `weir state get|scan`: exit 0 with output, 1 when `get` finds nothing
/// or the checkpoint cannot be read, 2 for a bad configuration.
fn state_command(command: StateCommand) -> ExitCode {
    let at = match &command {
        StateCommand::Get { at, .. } | StateCommand::Scan { at, .. } => at,
    };
    let config = match at.config.as_deref().map(load_any).transpose() {
        Ok(c) => c,
        Err(code) => return code,
    };
    let resolved =
        match super::inspect::resolve(&at.checkpoint, config.as_ref(), Some(&at.operator)) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("error: {}", e.report());
                return ExitCode::FAILURE;
            }
        };
    let folder = resolved.folder.as_path();
    let mut stdout = std::io::stdout().lock();
    let result = match &command {
        StateCommand::Get { key, .. } => super::inspect::get(
            folder,
            &at.operator,
            key,
            at.table.as_deref(),
            at.format,
            &mut stdout,
        )
        .inspect(|found| {
            if !found {
                eprintln!(
                    "no key {key:?} in operator {} at {}",
                    at.operator,
                    resolved.describe()
                );
            }
        }),
        StateCommand::Scan { prefix, .. } => super::inspect::scan(
            folder,
            &at.operator,
            prefix,
            at.table.as_deref(),
            at.format,
            &mut stdout,
        )
        .map(|_| true),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: {}", e.report());
            ExitCode::FAILURE
        }
    }
}

/// Runs the TOML pipeline as a job graph ([`crate::pipelines`]) on the
/// graph engine, as a job built in Rust runs.
fn run(config: Arc<Config>, restore_from: Option<std::path::PathBuf>) -> ExitCode {
    // A SQL job's console lists its planned operators; the built-in
    // pipelines keep their own description.
    let info = match config
        .sql()
        .is_some()
        .then(|| crate::pipelines::graph(&config))
    {
        Some(Ok(graph)) => crate::admin::overview::JobInfo::from_graph(&config, &graph),
        _ => crate::admin::overview::JobInfo::from_config(&config),
    };
    crate::service::serve(
        config,
        restore_from,
        info,
        |config, shared, restore_from| {
            let graph = crate::pipelines::graph(&config)?;
            crate::engine::run(Arc::new(graph), config, shared, restore_from)
        },
    )
}
