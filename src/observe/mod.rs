//! What weir reports about itself: Prometheus metrics and the checkpoint
//! history. A leaf module: the runtime writes here, the admin endpoint
//! reads here, and neither depends on the other through it.

pub mod history;
pub mod memory;
pub mod metrics;

/// When this process started (set first thing in `main`).
static PROCESS_START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();

/// Marks the process start; the first call wins.
pub fn mark_process_start() {
    PROCESS_START.get_or_init(std::time::Instant::now);
}

/// Time since [`mark_process_start`] (zero if it was never called).
pub fn since_process_start() -> std::time::Duration {
    PROCESS_START
        .get()
        .map_or(std::time::Duration::ZERO, |t| t.elapsed())
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
