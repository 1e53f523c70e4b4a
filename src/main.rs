//! The `weir` binary: parses the command line and hands over to the library.

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use clap::Parser;
use tracing::{error, info, warn};
use tracing_subscriber::EnvFilter;
use weir::cli::{self, CheckpointsCommand, Cli, Command, LogFormat};
use weir::config::Config;

fn init_logging(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    // Named crash points, only in builds with `--features failpoints`.
    let _failpoints = fail::FailScenario::setup();
    match cli.command {
        Command::Validate { config } => match Config::load(&config) {
            Ok(_) => {
                println!("{}: ok", config.display());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprint!("{e}");
                ExitCode::from(2)
            }
        },
        Command::Checkpoints {
            command: CheckpointsCommand::List { config },
        } => {
            let config = match Config::load(&config) {
                Ok(c) => c,
                Err(e) => {
                    eprint!("{e}");
                    return ExitCode::from(2);
                }
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
        Command::Run {
            config,
            restore_from,
        } => {
            let config = match Config::load(&config) {
                Ok(c) => Arc::new(c),
                Err(e) => {
                    eprint!("{e}");
                    return ExitCode::from(2);
                }
            };
            run(config, restore_from.map(|p| cli::absolute(&p)))
        }
    }
}

fn run(config: Arc<Config>, restore_from: Option<std::path::PathBuf>) -> ExitCode {
    let stop = Arc::new(AtomicBool::new(false));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let result = runtime.block_on(async {
        let signal_stop = stop.clone();
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
        let job_stop = stop.clone();
        tokio::task::spawn_blocking(move || weir::runtime::job::run(config, job_stop, restore_from))
            .await
            .expect("job thread")
    });
    match result {
        Ok(()) => {
            info!("weir stopped");
            ExitCode::SUCCESS
        }
        Err(e) => {
            error!(error = %e, "weir failed");
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
