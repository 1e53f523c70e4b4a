//! Process metrics, registered once and updated where each event happens
//! (the same place that logs it). Served by `/metrics` in the Prometheus
//! text format by the `prometheus` crate.

use prometheus::{
    exponential_buckets, Encoder, Gauge, Histogram, HistogramOpts, IntCounter, IntCounterVec,
    IntGauge, IntGaugeVec, Opts, Registry, TextEncoder,
};

use std::collections::BTreeMap;

use serde::Serialize;

use crate::observe::now_ms;

/// Values a SQL expression could not compute (an overflow, a division by
/// zero, a bad cast) and made NULL, per operator uid. Process-wide, as the
/// expressions that count them are compiled before any job's metrics
/// exist; every [`Metrics`] registry exports it.
pub static EXPRESSION_ERRORS: std::sync::LazyLock<IntCounterVec> = std::sync::LazyLock::new(|| {
    IntCounterVec::new(
        Opts::new(
            "weir_expression_errors_total",
            "Values a SQL expression could not compute and made NULL, per operator",
        ),
        &["operator"],
    )
    .expect("metric")
});

/// Rows a user-defined function failed on (an error, a panic, a trap),
/// per operator and what the row became under its source's
/// `on_bad_record` (`sql::plan::on_failure`). Global for the reason
/// [`EXPRESSION_ERRORS`] is.
pub static FUNCTION_FAILURES: std::sync::LazyLock<IntCounterVec> = std::sync::LazyLock::new(|| {
    IntCounterVec::new(
            Opts::new(
                "weir_function_failures_total",
                "Rows a user-defined function failed on, per operator and policy (skip, dead-letter, fail)",
            ),
            &["operator", "policy"],
        )
        .expect("metric")
});

/// One sample of one metric, as `/metrics` shows it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// Every metric weir exports.
pub struct Metrics {
    registry: Registry,
    /// Records taken in, per operator uid.
    pub records_in: IntCounterVec,
    /// Records emitted, per operator uid.
    pub records_out: IntCounterVec,
    /// Bad records, per policy (`skip`, `dead-letter`).
    pub bad_records: IntCounterVec,
    /// Records between the source's position and the end of the partition.
    pub consumer_lag: IntGaugeVec,
    pub checkpoint_duration: Histogram,
    pub checkpoint_alignment: Histogram,
    pub checkpoint_sync: Histogram,
    pub checkpoint_size: Histogram,
    pub checkpoints_completed: IntCounter,
    pub checkpoints_failed: IntCounter,
    pub last_checkpoint_id: IntGauge,
    last_checkpoint_time_ms: IntGauge,
    last_checkpoint_age: Gauge,
    pub restarts: IntCounter,
    pub transactions_committed: IntCounter,
    pub transactions_aborted: IntCounter,
    /// Event-time watermark (ms) per keyed subtask.
    pub watermark: IntGaugeVec,
    /// Event-time watermark (ms) per source partition.
    pub source_watermark: IntGaugeVec,
    /// Bytes held, per component and task ([`crate::observe::memory`]).
    pub memory: IntGaugeVec,
    /// Records later than every window that could take them, per policy.
    pub late_records: IntCounterVec,
    /// Input records deleted by the topic's retention before weir read
    /// them (group mode starts such a partition at its first offset).
    pub records_deleted_unread: IntCounterVec,
    /// Group mode: epoch commits the group refused (a rebalance raced
    /// them); each one's epoch is redone.
    pub commits_refused: IntCounter,
    /// Group mode: epochs whose checkpoint was not on storage in time
    /// (`checkpoint.timeout`, or what the transaction timeout leaves): their
    /// output waits for a later epoch's checkpoint, nothing is redone.
    pub checkpoints_declined: IntCounter,
    /// Group mode: open transactions aborted and begun again with the same
    /// output, so that a late checkpoint never outlives
    /// `transaction.timeout.ms`.
    pub transactions_renewed: IntCounter,
    /// Windows open (not yet fired and expired) per keyed subtask.
    pub open_windows: IntGaugeVec,
    /// Rows a join dropped from its state because their time ran out
    /// (`state_ttl`, or an interval or window join's watermark).
    pub state_expired: IntCounterVec,
}

fn seconds_histogram(name: &str, help: &str) -> Histogram {
    Histogram::with_opts(
        HistogramOpts::new(name, help)
            .buckets(exponential_buckets(0.001, 2.0, 16).expect("buckets")),
    )
    .expect("histogram")
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let registry = Registry::new();
        let m = Self {
            records_in: IntCounterVec::new(
                Opts::new("weir_records_in_total", "Records taken in, per operator"),
                &["operator"],
            )
            .expect("metric"),
            records_out: IntCounterVec::new(
                Opts::new("weir_records_out_total", "Records emitted, per operator"),
                &["operator"],
            )
            .expect("metric"),
            commits_refused: IntCounter::new(
                "weir_group_commits_refused_total",
                "Group mode: epoch commits the consumer group refused (each epoch is redone)",
            )
            .expect("metric"),
            checkpoints_declined: IntCounter::new(
                "weir_group_checkpoints_declined_total",
                "Group mode: epochs whose checkpoint upload did not finish in time (their output \
                 waits for a later epoch)",
            )
            .expect("metric"),
            transactions_renewed: IntCounter::new(
                "weir_group_transactions_renewed_total",
                "Group mode: open transactions aborted and begun again with the same output while \
                 a checkpoint upload was late",
            )
            .expect("metric"),
            records_deleted_unread: IntCounterVec::new(
                Opts::new(
                    "weir_records_deleted_unread_total",
                    "Input records deleted by retention before they were read, per topic",
                ),
                &["topic"],
            )
            .expect("metric"),
            bad_records: IntCounterVec::new(
                Opts::new(
                    "weir_bad_records_total",
                    "Records that could not be decoded, per policy",
                ),
                &["policy"],
            )
            .expect("metric"),
            consumer_lag: IntGaugeVec::new(
                Opts::new(
                    "weir_consumer_lag_records",
                    "Records not yet read, per source partition",
                ),
                &["topic", "partition"],
            )
            .expect("metric"),
            checkpoint_duration: seconds_histogram(
                "weir_checkpoint_duration_seconds",
                "Trigger to completion (including the Kafka commit)",
            ),
            checkpoint_alignment: seconds_histogram(
                "weir_checkpoint_alignment_seconds",
                "Time a keyed subtask waited for barriers on all inputs",
            ),
            checkpoint_sync: seconds_histogram(
                "weir_checkpoint_sync_seconds",
                "Time a keyed subtask spent writing back its cache and snapshotting RocksDB",
            ),
            checkpoint_size: Histogram::with_opts(
                HistogramOpts::new(
                    "weir_checkpoint_size_bytes",
                    "State size referenced by a checkpoint",
                )
                .buckets(exponential_buckets(4096.0, 4.0, 12).expect("buckets")),
            )
            .expect("metric"),
            checkpoints_completed: IntCounter::new(
                "weir_checkpoints_completed_total",
                "Completed checkpoints",
            )
            .expect("metric"),
            checkpoints_failed: IntCounter::new(
                "weir_checkpoints_failed_total",
                "Failed or aborted checkpoints",
            )
            .expect("metric"),
            last_checkpoint_id: IntGauge::new(
                "weir_last_checkpoint_id",
                "Id of the last completed checkpoint",
            )
            .expect("metric"),
            last_checkpoint_time_ms: IntGauge::new(
                "weir_last_checkpoint_timestamp_ms",
                "Completion time of the last completed checkpoint (Unix ms)",
            )
            .expect("metric"),
            last_checkpoint_age: Gauge::new(
                "weir_last_checkpoint_age_seconds",
                "Seconds since the last completed checkpoint",
            )
            .expect("metric"),
            restarts: IntCounter::new(
                "weir_restarts_total",
                "In-process restarts from a checkpoint",
            )
            .expect("metric"),
            transactions_committed: IntCounter::new(
                "weir_transactions_committed_total",
                "Kafka transactions committed (exactly-once)",
            )
            .expect("metric"),
            transactions_aborted: IntCounter::new(
                "weir_transactions_aborted_total",
                "Kafka transactions aborted (exactly-once)",
            )
            .expect("metric"),
            watermark: IntGaugeVec::new(
                Opts::new(
                    "weir_watermark_ms",
                    "Event-time watermark of a keyed subtask (Unix ms)",
                ),
                &["operator", "subtask"],
            )
            .expect("metric"),
            source_watermark: IntGaugeVec::new(
                Opts::new(
                    "weir_source_watermark_ms",
                    "Event-time watermark of a source partition (Unix ms)",
                ),
                &["topic", "partition"],
            )
            .expect("metric"),
            memory: IntGaugeVec::new(
                Opts::new(
                    "weir_memory_bytes",
                    "Bytes held, per component (resident, allocator_committed, rocksdb_memtables, \
                     rocksdb_block_cache, rocksdb_table_readers, state_cache, kafka_fetch_queue) \
                     and task (empty for the whole process)",
                ),
                &["component", "task"],
            )
            .expect("metric"),
            late_records: IntCounterVec::new(
                Opts::new(
                    "weir_late_records_total",
                    "Records no window accepted any more, per on_late policy",
                ),
                &["policy"],
            )
            .expect("metric"),
            open_windows: IntGaugeVec::new(
                Opts::new(
                    "weir_open_windows",
                    "Windows held in state (open, or fired and within allowed lateness)",
                ),
                &["operator", "subtask"],
            )
            .expect("metric"),
            state_expired: IntCounterVec::new(
                Opts::new(
                    "weir_state_expired_total",
                    "Rows dropped from an operator's state because their time ran out \
                     (state_ttl, or the watermark passed what they could still match)",
                ),
                &["operator"],
            )
            .expect("metric"),
            registry,
        };
        let r = &m.registry;
        r.register(Box::new(m.records_in.clone()))
            .expect("register");
        r.register(Box::new(m.records_out.clone()))
            .expect("register");
        r.register(Box::new(m.bad_records.clone()))
            .expect("register");
        r.register(Box::new(m.records_deleted_unread.clone()))
            .expect("register");
        r.register(Box::new(m.commits_refused.clone()))
            .expect("register");
        r.register(Box::new(m.checkpoints_declined.clone()))
            .expect("register");
        r.register(Box::new(m.transactions_renewed.clone()))
            .expect("register");
        r.register(Box::new(m.consumer_lag.clone()))
            .expect("register");
        r.register(Box::new(m.checkpoint_duration.clone()))
            .expect("register");
        r.register(Box::new(m.checkpoint_alignment.clone()))
            .expect("register");
        r.register(Box::new(m.checkpoint_sync.clone()))
            .expect("register");
        r.register(Box::new(m.checkpoint_size.clone()))
            .expect("register");
        r.register(Box::new(m.checkpoints_completed.clone()))
            .expect("register");
        r.register(Box::new(m.checkpoints_failed.clone()))
            .expect("register");
        r.register(Box::new(m.last_checkpoint_id.clone()))
            .expect("register");
        r.register(Box::new(m.last_checkpoint_time_ms.clone()))
            .expect("register");
        r.register(Box::new(m.last_checkpoint_age.clone()))
            .expect("register");
        r.register(Box::new(m.restarts.clone())).expect("register");
        r.register(Box::new(m.transactions_committed.clone()))
            .expect("register");
        r.register(Box::new(m.transactions_aborted.clone()))
            .expect("register");
        r.register(Box::new(m.watermark.clone())).expect("register");
        r.register(Box::new(m.source_watermark.clone()))
            .expect("register");
        r.register(Box::new(m.memory.clone())).expect("register");
        r.register(Box::new(m.late_records.clone()))
            .expect("register");
        r.register(Box::new(EXPRESSION_ERRORS.clone()))
            .expect("register");
        r.register(Box::new(FUNCTION_FAILURES.clone()))
            .expect("register");
        r.register(Box::new(m.open_windows.clone()))
            .expect("register");
        r.register(Box::new(m.state_expired.clone()))
            .expect("register");
        m
    }

    /// Records a completed checkpoint.
    pub fn checkpoint_completed(&self, id: u64, duration_s: f64, size_bytes: u64) {
        self.checkpoints_completed.inc();
        self.checkpoint_duration.observe(duration_s);
        self.checkpoint_size.observe(size_bytes as f64);
        self.last_checkpoint_id.set(id as i64);
        self.last_checkpoint_time_ms.set(now_ms() as i64);
    }

    /// The gauges read when the metrics are: the last checkpoint's age
    /// and the process's memory.
    fn refresh_on_read(&self) {
        crate::observe::memory::refresh_process(&self.memory);
        let last = self.last_checkpoint_time_ms.get();
        if last > 0 {
            self.last_checkpoint_age
                .set((now_ms() as i64 - last).max(0) as f64 / 1000.0);
        }
    }

    /// Every sample `/metrics` shows, for the console: counters and gauges
    /// as they are, histograms as `<name>_sum` and `<name>_count`.
    pub fn samples(&self) -> Vec<Sample> {
        use prometheus::proto::MetricType;
        self.refresh_on_read();
        let mut out = Vec::new();
        for family in self.registry.gather() {
            let name = family.name();
            for m in family.get_metric() {
                let labels: BTreeMap<String, String> = m
                    .get_label()
                    .iter()
                    .map(|l| (l.name().to_string(), l.value().to_string()))
                    .collect();
                let mut push = |name: String, value: f64| {
                    out.push(Sample {
                        name,
                        labels: labels.clone(),
                        value,
                    })
                };
                match family.get_field_type() {
                    MetricType::COUNTER => push(name.to_string(), m.get_counter().get_value()),
                    MetricType::GAUGE => push(name.to_string(), m.get_gauge().get_value()),
                    MetricType::HISTOGRAM => {
                        let h = m.get_histogram();
                        push(format!("{name}_sum"), h.get_sample_sum());
                        push(format!("{name}_count"), h.get_sample_count() as f64);
                    }
                    _ => {}
                }
            }
        }
        out
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        self.refresh_on_read();
        let mut buf = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut buf)
            .expect("text encoding");
        String::from_utf8(buf).expect("prometheus text is UTF-8")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expression_errors_are_exported_per_operator() {
        let m = Metrics::new();
        crate::sql::note_eval_error("sql-metric-test", "division by zero");
        crate::sql::note_eval_error("sql-metric-test", "division by zero");
        let text = m.render();
        assert!(
            text.contains("weir_expression_errors_total{operator=\"sql-metric-test\"} 2"),
            "{text}"
        );
    }

    #[test]
    fn renders_prometheus_text() {
        let m = Metrics::new();
        m.records_in.with_label_values(&["kafka-source"]).inc_by(3);
        m.consumer_lag.with_label_values(&["words", "0"]).set(7);
        m.checkpoint_completed(4, 0.012, 1 << 20);
        let text = m.render();
        assert!(
            text.contains("weir_records_in_total{operator=\"kafka-source\"} 3"),
            "{text}"
        );
        assert!(
            text.contains("weir_consumer_lag_records{partition=\"0\",topic=\"words\"} 7"),
            "{text}"
        );
        assert!(text.contains("weir_last_checkpoint_id 4"), "{text}");
        // Read when rendered: the process's resident memory.
        assert!(
            text.contains("weir_memory_bytes{component=\"resident\",task=\"\"} "),
            "{text}"
        );
        assert!(
            text.contains("weir_checkpoint_duration_seconds_count 1"),
            "{text}"
        );
    }

    #[test]
    fn samples_are_the_numbers_the_text_shows() {
        let m = Metrics::new();
        m.records_in.with_label_values(&["count"]).inc_by(5);
        m.checkpoint_completed(2, 0.5, 4096);
        let samples = m.samples();
        let find = |name: &str| {
            samples
                .iter()
                .find(|s| s.name == name)
                .unwrap_or_else(|| panic!("{name} in {samples:?}"))
        };
        let records = find("weir_records_in_total");
        assert_eq!(records.value, 5.0);
        assert_eq!(
            records.labels.get("operator").map(String::as_str),
            Some("count")
        );
        assert_eq!(find("weir_checkpoint_duration_seconds_count").value, 1.0);
        assert_eq!(find("weir_checkpoint_duration_seconds_sum").value, 0.5);
        assert_eq!(find("weir_last_checkpoint_id").value, 2.0);
        let text = m.render();
        for s in &samples {
            if s.labels.is_empty() {
                assert!(
                    text.contains(&format!("{} {}", s.name, s.value)),
                    "{} in {text}",
                    s.name
                );
            }
        }
    }
}
