//! The `weir` binary: parses the command line and hands over to the library.

use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use weir::cli::{self, CheckpointsCommand, Cli, Command, StateCommand};
use weir::config::Config;

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

fn main() -> ExitCode {
    weir::observe::mark_process_start();
    let cli = Cli::parse();
    // Named crash points, only in builds with `--features failpoints`.
    let _failpoints = fail::FailScenario::setup();
    if matches!(
        cli.command,
        Command::Validate { .. } | Command::Explain { .. }
    ) {
        // A registry that cannot be reached is named, not waited for.
        weir::sql::formats::impatient();
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
                return match weir::sql::plan(&c) {
                    Ok(plan) => {
                        print!("{}", plan.describe());
                        ExitCode::SUCCESS
                    }
                    Err(_) => sql_problems(&c).err().unwrap_or(ExitCode::from(2)),
                };
            }
            // A TOML pipeline: its plan, then the SQL it was compiled from.
            match weir::pipelines::plan(&c) {
                Ok(plan) => {
                    print!("{}", plan.describe());
                    if let Some(b) = c.builtin() {
                        let (job, _) = weir::pipelines::sql_job(&c, b);
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
            match cli::list_checkpoints(&config) {
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
            match cli::inspect::resolve(&checkpoint, config.as_ref(), None)
                .and_then(|at| cli::inspect::show(&at, format))
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
            weir::service::init_logging(cli.log_format, config.log.level.as_deref());
            match weir::pipelines::graph(&config) {
                Ok(graph) => weir::reset(&graph, &config),
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
            weir::service::init_logging(cli.log_format, config.log.level.as_deref());
            match weir::pipelines::graph(&config) {
                Ok(graph) => weir::savepoint(graph, config),
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
            weir::service::init_logging(cli.log_format, config.log.level.as_deref());
            run(config, restore_from.map(|p| cli::absolute(&p)))
        }
    }
}

/// A SQL job's statements planned: every problem printed with its line,
/// column and text, and exit 2; Ok for a job without SQL.
fn sql_problems(c: &Config) -> Result<(), ExitCode> {
    let Some(sql) = c.sql() else {
        return Ok(());
    };
    match weir::sql::plan(c) {
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
    let resolved = match cli::inspect::resolve(&at.checkpoint, config.as_ref(), Some(&at.operator))
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {}", e.report());
            return ExitCode::FAILURE;
        }
    };
    let folder = resolved.folder.as_path();
    let mut stdout = std::io::stdout().lock();
    let result = match &command {
        StateCommand::Get { key, .. } => cli::inspect::get(
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
        StateCommand::Scan { prefix, .. } => cli::inspect::scan(
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

/// Runs the TOML pipeline as a job graph ([`weir::pipelines`]) on the
/// graph engine, as a job built in Rust runs.
fn run(config: Arc<Config>, restore_from: Option<std::path::PathBuf>) -> ExitCode {
    // A SQL job's console lists its planned operators; the built-in
    // pipelines keep their own description.
    let info = match config
        .sql()
        .is_some()
        .then(|| weir::pipelines::graph(&config))
    {
        Some(Ok(graph)) => weir::admin::overview::JobInfo::from_graph(&config, &graph),
        _ => weir::admin::overview::JobInfo::from_config(&config),
    };
    weir::service::serve(
        config,
        restore_from,
        info,
        |config, shared, restore_from| {
            let graph = weir::pipelines::graph(&config)?;
            weir::engine::run(Arc::new(graph), config, shared, restore_from)
        },
    )
}
