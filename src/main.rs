//! The `weir` binary: parses the command line and hands over to the library.

use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use clap::Parser;
use tracing::{error, info, warn};
use tracing_subscriber::EnvFilter;
use weir::admin::{self, AdminState};
use weir::cli::{self, CheckpointsCommand, Cli, Command, LogFormat, StateCommand};
use weir::config::Config;
use weir::runtime::JobShared;

/// `RUST_LOG` wins over `[log] level`, which wins over "info".
fn init_logging(format: LogFormat, level: Option<&str>) {
    let filter = EnvFilter::try_from_default_env()
        .ok()
        .or_else(|| level.and_then(|l| EnvFilter::try_new(l).ok()))
        .unwrap_or_else(|| EnvFilter::new("info"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn load(path: &std::path::Path) -> Result<Config, ExitCode> {
    Config::load(path).map_err(|e| {
        eprint!("{e}");
        ExitCode::from(2)
    })
}

fn main() -> ExitCode {
    weir::observe::mark_process_start();
    let cli = Cli::parse();
    // Named crash points, only in builds with `--features failpoints`.
    let _failpoints = fail::FailScenario::setup();
    match cli.command {
        Command::Validate { config } => match load(&config) {
            Ok(c) => {
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
        Command::Checkpoints {
            command: CheckpointsCommand::List { config },
        } => {
            let config = match load(&config) {
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
            let config = match config.as_deref().map(load).transpose() {
                Ok(c) => c,
                Err(code) => return code,
            };
            match cli::inspect::resolve(&checkpoint, config.as_ref())
                .and_then(|folder| cli::inspect::show(&folder, format))
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
        Command::Run {
            config,
            restore_from,
        } => {
            let config = match load(&config) {
                Ok(c) => Arc::new(c),
                Err(code) => return code,
            };
            init_logging(cli.log_format, config.log.level.as_deref());
            run(config, restore_from.map(|p| cli::absolute(&p)))
        }
    }
}

/// `weir state get|scan`: exit 0 with output, 1 when `get` finds nothing
/// or the checkpoint cannot be read, 2 for a bad configuration.
fn state_command(command: StateCommand) -> ExitCode {
    let at = match &command {
        StateCommand::Get { at, .. } | StateCommand::Scan { at, .. } => at,
    };
    let config = match at.config.as_deref().map(load).transpose() {
        Ok(c) => c,
        Err(code) => return code,
    };
    let folder = match cli::inspect::resolve(&at.checkpoint, config.as_ref()) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("error: {}", e.report());
            return ExitCode::FAILURE;
        }
    };
    let mut stdout = std::io::stdout().lock();
    let result = match &command {
        StateCommand::Get { key, .. } => {
            cli::inspect::get(&folder, &at.operator, key, at.format, &mut stdout).inspect(|found| {
                if !found {
                    eprintln!(
                        "no key {key:?} in operator {} at {}",
                        at.operator,
                        folder.display()
                    );
                }
            })
        }
        StateCommand::Scan { prefix, .. } => {
            cli::inspect::scan(&folder, &at.operator, prefix, at.format, &mut stdout).map(|_| true)
        }
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

fn run(config: Arc<Config>, restore_from: Option<std::path::PathBuf>) -> ExitCode {
    if config.is_group() && restore_from.is_some() {
        eprintln!(
            "error: --restore-from does not apply with scale.mode = \"group\": each task restores \
             the checkpoint its committed offset names"
        );
        return ExitCode::from(2);
    }
    let (shared, savepoint_requests) = JobShared::new();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let result = runtime.block_on(async {
        if !config.admin.listen.is_empty() {
            let listener = match tokio::net::TcpListener::bind(&config.admin.listen).await {
                Ok(l) => l,
                Err(e) => {
                    return Err(weir::WeirError::io(
                        std::path::Path::new(&format!("admin.listen {}", config.admin.listen)),
                        e,
                    ));
                }
            };
            let state = Arc::new(AdminState {
                metrics: shared.metrics.clone(),
                history: shared.history.clone(),
                ready: shared.ready.clone(),
                savepoints: savepoint_requests,
                token: config
                    .admin
                    .token_env
                    .as_ref()
                    .and_then(|var| std::env::var(var).ok()),
                savepoint_timeout: config.checkpoint.interval + config.checkpoint.timeout * 2,
                ownership: shared.ownership.clone(),
                group_mode: config.is_group(),
                job: admin::overview::JobInfo::from_config(&config),
                queries: shared.queries.clone(),
            });
            let bound = listener
                .local_addr()
                .map_or_else(|_| config.admin.listen.clone(), |a| a.to_string());
            info!(listen = %bound, "admin endpoint listening");
            tokio::spawn(admin::serve(listener, state));
        }
        let signal_stop = shared.stop.clone();
        tokio::spawn(async move {
            use tokio::signal::unix::{signal, SignalKind};
            let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
            let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
            loop {
                tokio::select! {
                    _ = term.recv() => {},
                    _ = int.recv() => {},
                }
                if signal_stop.swap(true, Ordering::SeqCst) {
                    warn!("second stop signal: exiting without a final checkpoint");
                    std::process::exit(130);
                }
                info!("stop requested: taking a final checkpoint");
            }
        });
        let job_config = config.clone();
        tokio::task::spawn_blocking(move || {
            weir::runtime::job::run(job_config, shared, restore_from)
        })
        .await
        .expect("job thread")
    });
    match result {
        Ok(()) => {
            info!("weir stopped");
            ExitCode::SUCCESS
        }
        Err(e) => {
            error!(error = %e.report(), "weir failed");
            eprintln!("error: {}", e.report());
            ExitCode::FAILURE
        }
    }
}
