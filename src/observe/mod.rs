//! What weir reports about itself: Prometheus metrics and the checkpoint
//! history. A leaf module: the runtime writes here, the admin endpoint
//! reads here, and neither depends on the other through it.

pub mod history;
pub mod metrics;

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
