//! Checks of meaning across keys: every problem is reported with the key
//! it is about, together with all the others.

use std::time::Duration;

use super::*;

impl Config {
    /// Checks meanings across keys; returns every problem found.
    pub fn validate(&self) -> Vec<ConfigProblem> {
        let mut p = Vec::new();
        let mut bad = |key: &str, message: String| {
            p.push(ConfigProblem {
                key: key.into(),
                message,
            })
        };
        if self.job.name.is_empty()
            || !self
                .job
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
        {
            bad(
                "job.name",
                format!(
                    "{:?} is not allowed: use 1 or more of A-Z a-z 0-9 - _ . (it names a folder)",
                    self.job.name
                ),
            );
        }
        if self.job.parallelism == 0 || self.job.parallelism > 256 {
            bad(
                "job.parallelism",
                format!("{} is out of range 1..=256", self.job.parallelism),
            );
        }
        if self.job.max_parallelism == 0 || self.job.max_parallelism > 32_768 {
            bad(
                "job.max_parallelism",
                format!("{} is out of range 1..=32768", self.job.max_parallelism),
            );
        } else if self.job.parallelism > self.job.max_parallelism {
            bad(
                "job.parallelism",
                format!(
                    "{} exceeds job.max_parallelism ({}): each subtask needs at least one key group",
                    self.job.parallelism, self.job.max_parallelism
                ),
            );
        }
        if self.kafka.bootstrap_servers.trim().is_empty() {
            bad("kafka.bootstrap_servers", "must not be empty".into());
        }
        if self.kafka.group_id.trim().is_empty() {
            bad("kafka.group_id", "must not be empty".into());
        }
        for key in self.kafka.properties.keys() {
            if RESERVED_PROPERTIES.contains(&key.as_str()) {
                bad(
                    &format!("kafka.properties.\"{key}\""),
                    "is set by weir itself and may not be overridden".into(),
                );
            }
        }
        if self.checkpoint.interval < Duration::from_millis(10) {
            bad(
                "checkpoint.interval",
                format!(
                    "{} is too short; the minimum is 10ms",
                    humantime::format_duration(self.checkpoint.interval)
                ),
            );
        }
        if self.checkpoint.timeout < Duration::from_millis(100) {
            bad("checkpoint.timeout", "must be at least 100ms".to_string());
        }
        if self.checkpoint.retained == 0 {
            bad(
                "checkpoint.retained",
                "must be at least 1: recovery needs a checkpoint".into(),
            );
        }
        if self.checkpoint.dir.as_os_str().is_empty() {
            bad("checkpoint.dir", "must not be empty".into());
        }
        if self.state.dir.as_os_str().is_empty() {
            bad("state.dir", "must not be empty".into());
        }
        if self.state.cache_entries == 0 {
            bad("state.cache_entries", "must be at least 1".into());
        }
        if self.restart.backoff.is_zero() {
            bad("restart.backoff", "must be greater than 0".into());
        }
        if let Some(b) = self.builtin() {
            b.validate(&mut bad);
        }
        let listen_loopback = admin_listen_is_loopback(&self.admin.listen);
        if !self.admin.listen.is_empty() && listen_loopback.is_none() {
            bad(
                "admin.listen",
                format!(
                    "{:?} is not an address like 127.0.0.1:9249 or localhost:9249",
                    self.admin.listen
                ),
            );
        }
        if let Some(var) = &self.admin.token_env {
            if std::env::var(var).map_or(true, |t| t.is_empty()) {
                bad(
                    "admin.token_env",
                    format!("environment variable {var} is not set or empty"),
                );
            }
            if self.admin.allow_unauthenticated {
                bad(
                    "admin.allow_unauthenticated",
                    "is true while admin.token_env is set: choose one (the token, or an open \
                     endpoint)"
                        .into(),
                );
            }
        } else if listen_loopback == Some(false) && !self.admin.allow_unauthenticated {
            bad(
                "admin.token_env",
                format!(
                    "must be set: admin.listen {} is reachable beyond loopback, and without a \
                     token anyone who reaches it reads keyed state (/state) and takes \
                     savepoints. Name an environment variable holding a bearer token \
                     (token_env = \"WEIR_ADMIN_TOKEN\"), listen on 127.0.0.1, or set \
                     admin.allow_unauthenticated = true to serve it open on purpose",
                    self.admin.listen
                ),
            );
        }
        if let Some(level) = &self.log.level {
            if tracing_subscriber::EnvFilter::try_new(level).is_err() {
                bad(
                    "log.level",
                    format!("{level:?} is not a valid filter such as \"info\""),
                );
            }
        }
        if self.output.instance.is_empty() {
            bad("sink.instance", "must not be empty".into());
        }
        self.validate_scale(&mut bad);
        if self.output.delivery == Delivery::ExactlyOnce
            && self.checkpoint.mode == CheckpointMode::AtLeastOnce
        {
            // Without alignment, records after barrier N reach the state and
            // transaction N while their offsets are not in checkpoint N: a
            // replay would count them twice, inside committed output.
            bad(
                "checkpoint.mode",
                "\"at-least-once\" cannot be combined with sink.delivery = \"exactly-once\": \
                 unaligned checkpoints put records of epoch N+1 into transaction N, so a replay \
                 would commit them twice. Use checkpoint.mode = \"exactly-once\" (the default) or \
                 sink.delivery = \"at-least-once\""
                    .into(),
            );
        }
        if self.output.delivery == Delivery::ExactlyOnce {
            match self.transaction_timeout_ms() {
                Err(msg) => bad("kafka.properties.\"transaction.timeout.ms\"", msg),
                Ok(ms) => {
                    let needed = self.checkpoint.interval + self.checkpoint.timeout;
                    if Duration::from_millis(ms) <= needed {
                        bad(
                            "kafka.properties.\"transaction.timeout.ms\"",
                            format!(
                                "{ms} ms must exceed checkpoint.interval + checkpoint.timeout ({} ms), \
                                 or the broker aborts a transaction before its checkpoint can commit it",
                                needed.as_millis()
                            ),
                        );
                    }
                }
            }
        }
        p
    }

    /// `[scale]` and the checkpoint location it needs.
    fn validate_scale(&self, bad: &mut impl FnMut(&str, String)) {
        let s3 = self.checkpoint_url().is_some();
        if self.checkpoint.s3.is_some() && !s3 {
            bad(
                "checkpoint.s3",
                "applies only to an s3:// checkpoint.dir".into(),
            );
        }
        if !self.is_group() {
            if s3 {
                bad(
                    "checkpoint.dir",
                    "an s3:// location needs scale.mode = \"group\"; a single process keeps its \
                     checkpoints in a local folder"
                        .into(),
                );
            }
            return;
        }
        if let Some(url) = self.checkpoint_url() {
            let bucket = url
                .trim_start_matches("s3://")
                .split('/')
                .next()
                .unwrap_or("");
            if bucket.is_empty() {
                bad(
                    "checkpoint.dir",
                    format!("{url:?} names no bucket: use s3://bucket/prefix"),
                );
            }
        }
        if self.scale.instance.is_none() && self.output.instance == super::defaults::instance() {
            bad(
                "scale.instance",
                "must be set in group mode: a stable id unique to this instance (the pod or host \
                 name, e.g. \"${HOSTNAME}\"); instances sharing an id fence each other"
                    .into(),
            );
        }
        let instance = self.instance();
        if instance.is_empty()
            || !instance
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
        {
            bad(
                "scale.instance",
                format!(
                    "{instance:?} is not allowed: use 1 or more of A-Z a-z 0-9 - _ . (it names \
                     checkpoint objects and the transactional id)"
                ),
            );
        }
        if self.scale.tasks == 0 || self.scale.tasks > self.job.max_parallelism {
            bad(
                "scale.tasks",
                format!(
                    "{} is out of range 1..={} (job.max_parallelism): a task holds at least one \
                     key group",
                    self.scale.tasks, self.job.max_parallelism
                ),
            );
        }
        if self.output.delivery != Delivery::ExactlyOnce {
            bad(
                "sink.delivery",
                "must be \"exactly-once\" with scale.mode = \"group\": one transaction per \
                 instance and epoch is what ties its repartition writes, output and offsets \
                 together"
                    .into(),
            );
        }
    }

    /// What must be the same in the configuration of every instance of a
    /// job in group mode, for `weir validate`.
    pub fn shared_settings(&self) -> Vec<(String, String)> {
        let mut settings = vec![
            ("job.name".into(), self.job.name.clone()),
            (
                "job.max_parallelism".into(),
                self.job.max_parallelism.to_string(),
            ),
            ("scale.tasks".into(), self.scale.tasks.to_string()),
            ("kafka.group_id".into(), self.kafka.group_id.clone()),
            (
                "checkpoint.dir".into(),
                self.checkpoint.dir.display().to_string(),
            ),
            (
                "sink.transactional_id_prefix".into(),
                self.output
                    .transactional_id_prefix
                    .clone()
                    .unwrap_or_else(|| format!("(job.name) {}", self.job.name)),
            ),
        ];
        if let Some(b) = self.builtin() {
            settings.extend([
                ("source.topics".into(), b.source.topics.join(", ")),
                ("pipeline (operator uid)".into(), b.keyed_uid()),
                ("sink.topic".into(), b.sink.topic.clone()),
            ]);
        }
        settings
    }

    /// The transaction timeout the producer will use.
    pub fn transaction_timeout_ms(&self) -> Result<u64, String> {
        match self.kafka.properties.get("transaction.timeout.ms") {
            None => Ok(DEFAULT_TRANSACTION_TIMEOUT_MS),
            Some(v) => v
                .parse()
                .map_err(|_| format!("{v:?} is not a whole number of milliseconds")),
        }
    }
}

/// Whether an `admin.listen` value is a loopback address (127.0.0.0/8,
/// `[::1]`, `localhost`); None when it is not an address at all.
fn admin_listen_is_loopback(listen: &str) -> Option<bool> {
    if let Ok(addr) = listen.parse::<std::net::SocketAddr>() {
        return Some(addr.ip().is_loopback());
    }
    let port = listen.strip_prefix("localhost:")?;
    port.parse::<u16>().ok().map(|_| true)
}

impl BuiltinJob {
    /// `[source]`, `[pipeline]` and `[sink]` of a built-in pipeline.
    fn validate(&self, bad: &mut impl FnMut(&str, String)) {
        if self.source.topics.is_empty() {
            bad("source.topics", "needs at least one topic".into());
        }
        for (i, t) in self.source.topics.iter().enumerate() {
            if t.trim().is_empty() {
                bad(&format!("source.topics[{i}]"), "empty topic name".into());
            }
        }
        match (&self.source.on_bad_record, &self.source.dead_letter_topic) {
            (BadRecordPolicy::DeadLetter, None) => bad(
                "source.dead_letter_topic",
                "is required when source.on_bad_record = \"dead-letter\"".into(),
            ),
            (_, Some(t)) if self.source.topics.contains(t) || *t == self.sink.topic => bad(
                "source.dead_letter_topic",
                format!("{t:?} must differ from the source and sink topics"),
            ),
            _ => {}
        }
        match &self.pipeline {
            PipelineConfig::WordCount { .. } => {}
            PipelineConfig::Aggregate {
                key,
                field,
                function,
                ..
            } => {
                if self.source.format != RecordFormat::Json {
                    bad(
                        "source.format",
                        "must be \"json\" for pipeline.kind = \"aggregate\"".into(),
                    );
                }
                if key.is_empty() || key == "/" {
                    bad(
                        "pipeline.key",
                        "must name the JSON field to group by (a pointer such as \"/user/id\")"
                            .into(),
                    );
                }
                if *function != AggregateFunction::Count
                    && field.as_deref().is_none_or(|f| f.is_empty() || f == "/")
                {
                    bad(
                        "pipeline.field",
                        format!(
                            "is required for function {:?} (a pointer to the JSON number)",
                            function.name()
                        ),
                    );
                }
            }
        }
        if let Some(uid) = self.pipeline.uid() {
            if uid.is_empty() || uid == SOURCE_UID || uid.contains('/') {
                bad(
                    "pipeline.uid",
                    format!("{uid:?} is not allowed (empty, contains '/', or is reserved)"),
                );
            }
        }
        if let Some(et) = &self.source.event_time {
            if et.field.is_some() && matches!(self.pipeline, PipelineConfig::WordCount { .. }) {
                bad(
                    "source.event_time.field",
                    "does not apply to word-count, whose records are text or JSON strings; leave it \
                     out to use the Kafka record timestamp"
                        .into(),
                );
            } else if et.field.is_some() && self.source.format != RecordFormat::Json {
                bad(
                    "source.event_time.field",
                    "needs source.format = \"json\"; leave it out to use the Kafka record timestamp"
                        .into(),
                );
            }
        }
        if let Some(w) = self.pipeline.window() {
            self.validate_window(w, bad);
        }
        if self.sink.topic.trim().is_empty() {
            bad("sink.topic", "must not be empty".into());
        } else if self.source.topics.contains(&self.sink.topic) {
            bad(
                "sink.topic",
                format!(
                    "{:?} is also a source topic: the job would read its own output",
                    self.sink.topic
                ),
            );
        }
    }

    /// `[pipeline.window]`: each key the kind needs, none it does not.
    fn validate_window(&self, w: &WindowConfig, bad: &mut impl FnMut(&str, String)) {
        let ms = |d: Duration| d.as_millis();
        if self.source.event_time.is_none() {
            bad(
                "source.event_time",
                "is required with pipeline.window: windows are over event time (an empty \
                 [source.event_time] section uses the Kafka record timestamp)"
                    .into(),
            );
        }
        if self.sink.emit != EmitMode::EveryUpdate {
            bad(
                "sink.emit",
                "does not apply to windows; use pipeline.window.emit (\"on-close\" or \"every-update\")"
                    .into(),
            );
        }
        let unwanted =
            |bad: &mut dyn FnMut(&str, String), key: &str, v: Option<Duration>, kind: &str| {
                if v.is_some() {
                    bad(
                        &format!("pipeline.window.{key}"),
                        format!("does not apply to {kind} windows"),
                    );
                }
            };
        let positive =
            |bad: &mut dyn FnMut(&str, String), key: &str, v: Option<Duration>, kind: &str| match v
            {
                None => bad(
                    &format!("pipeline.window.{key}"),
                    format!("is required for {kind} windows"),
                ),
                Some(d) if d.as_millis() == 0 => bad(
                    &format!("pipeline.window.{key}"),
                    "must be at least 1ms".into(),
                ),
                Some(_) => {}
            };
        match w.kind {
            WindowKind::Tumbling => {
                positive(bad, "size", w.size, "tumbling");
                unwanted(bad, "slide", w.slide, "tumbling");
                unwanted(bad, "gap", w.gap, "tumbling");
                if let (Some(size), Some(offset)) = (w.size, w.offset) {
                    if ms(offset) >= ms(size) && ms(size) > 0 {
                        bad(
                            "pipeline.window.offset",
                            format!("{} ms must be less than size ({} ms)", ms(offset), ms(size)),
                        );
                    }
                }
            }
            WindowKind::Hopping => {
                positive(bad, "size", w.size, "hopping");
                positive(bad, "slide", w.slide, "hopping");
                unwanted(bad, "gap", w.gap, "hopping");
                if let (Some(size), Some(slide)) = (w.size, w.slide) {
                    if ms(slide) > ms(size) {
                        bad(
                            "pipeline.window.slide",
                            format!("{} ms must not exceed size ({} ms)", ms(slide), ms(size)),
                        );
                    }
                    if let Some(offset) = w.offset {
                        if ms(offset) >= ms(slide) && ms(slide) > 0 {
                            bad(
                                "pipeline.window.offset",
                                format!(
                                    "{} ms must be less than slide ({} ms)",
                                    ms(offset),
                                    ms(slide)
                                ),
                            );
                        }
                    }
                }
            }
            WindowKind::Session => {
                positive(bad, "gap", w.gap, "session");
                unwanted(bad, "size", w.size, "session");
                unwanted(bad, "slide", w.slide, "session");
                unwanted(bad, "offset", w.offset, "session");
            }
        }
        if let Err(reason) = w.spec().validate() {
            if w.kind == WindowKind::Hopping {
                bad("pipeline.window.slide", reason);
            }
        }
        if w.on_late == LatePolicy::DeadLetter && self.source.dead_letter_topic.is_none() {
            bad(
                "source.dead_letter_topic",
                "is required when pipeline.window.on_late = \"dead-letter\"".into(),
            );
        }
    }
}
