//! The service around a job: the admin endpoint, the stop signals (SIGTERM
//! or SIGINT take a final checkpoint; a second one exits at once) and the
//! job's thread. The `weir` binary and `weir::run` (jobs built in Rust)
//! both run their job through [`serve`].

use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tracing::{error, info, warn};

use crate::admin::{self, AdminState};
use crate::cli::LogFormat;
use crate::config::Config;
use crate::runtime::JobShared;
use tracing_subscriber::EnvFilter;

/// Logs to stderr as text or JSON; `RUST_LOG` wins over `log.level`.
pub fn init_logging(format: LogFormat, level: Option<&str>) {
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

/// Runs `job` as a service until it stops; the exit code says how.
pub fn serve(
    config: Arc<Config>,
    restore_from: Option<std::path::PathBuf>,
    job_info: admin::overview::JobInfo,
    job: impl FnOnce(Arc<Config>, JobShared, Option<std::path::PathBuf>) -> crate::Result<()>
        + Send
        + 'static,
) -> ExitCode {
    let (shared, savepoint_requests) = JobShared::new();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let result = runtime.block_on(async {
        // Installed first: from here on (and from the admin endpoint's
        // "listening", which tests and supervisors wait for) a SIGTERM is a
        // clean stop, not the default action's death by signal.
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
        let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
        if !config.admin.listen.is_empty() {
            let listener = match tokio::net::TcpListener::bind(&config.admin.listen).await {
                Ok(l) => l,
                Err(e) => {
                    return Err(crate::WeirError::io(
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
                job: job_info,
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
                // A source waiting for its schema registry stops waiting
                // (its task fails without skipping the record).
                crate::format::registry::stop_waiting();
            }
        });
        let job_config = config.clone();
        tokio::task::spawn_blocking(move || job(job_config, shared, restore_from))
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
