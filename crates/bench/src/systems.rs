//! The systems under test and how each is started: weir, and the peers in
//! `bench/peers/` (built by `bench/compare.sh`).

use std::path::{Path, PathBuf};

use weir_testkit::{bootstrap, JobSpec};

use crate::measure::ProcessGroup;

/// One run's topics and folders.
pub struct Ctx {
    pub name: String,
    pub input: String,
    pub output: String,
    pub dir: PathBuf,
    pub parallelism: u32,
    pub repo: PathBuf,
    pub weir: PathBuf,
    /// Kafka Streams' grace for the windowed job (its only way to wait
    /// for slower partitions), in ms.
    pub grace_ms: Option<i64>,
}

impl Ctx {
    /// A run named `<prefix>-...` on `input`, with a fresh output topic,
    /// its folders under `dir`.
    pub fn new(prefix: &str, input: &str, dir: &Path, parallelism: u32) -> Self {
        let output = weir_testkit::unique(&format!("{prefix}-counts"));
        weir_testkit::create_topic(&output, 4);
        Self {
            name: weir_testkit::unique(prefix),
            input: input.to_string(),
            output,
            dir: dir.to_path_buf(),
            parallelism,
            repo: PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")),
            weir: weir_binary(),
            grace_ms: None,
        }
    }
}

/// What Flink 2 on Java 17 needs opened (its own scripts pass them).
pub const FLINK_OPENS: &[&str] = &[
    "--add-opens=java.base/java.util=ALL-UNNAMED",
    "--add-opens=java.base/java.lang=ALL-UNNAMED",
    "--add-opens=java.base/java.lang.invoke=ALL-UNNAMED",
    "--add-opens=java.base/java.time=ALL-UNNAMED",
    "--add-opens=java.base/java.io=ALL-UNNAMED",
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens=java.base/java.net=ALL-UNNAMED",
    "--add-opens=java.base/java.text=ALL-UNNAMED",
    "--add-opens=java.base/java.util.concurrent=ALL-UNNAMED",
    "--add-opens=java.base/java.util.concurrent.atomic=ALL-UNNAMED",
    "--add-opens=java.base/java.lang.reflect=ALL-UNNAMED",
];

/// The class path of a JVM peer built by `bench/compare.sh`.
pub fn java_cp(peer: &str) -> String {
    let base = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .join("bench/peers")
        .join(peer)
        .join("target");
    format!(
        "{}:{}/dependency/*",
        base.join("classes").display(),
        base.display()
    )
}

/// weir's log filter in benchmarks: `info`, or `$WEIR_BENCH_LOG` (e.g.
/// `weir=debug` for the snapshot timings).
pub fn weir_log_filter() -> String {
    std::env::var("WEIR_BENCH_LOG").unwrap_or_else(|_| "info".into())
}

/// The command line of `weir run` with `config`.
pub fn weir_run(binary: &Path, config: &Path) -> Vec<String> {
    vec![
        binary.display().to_string(),
        "run".into(),
        "--config".into(),
        config.display().to_string(),
    ]
}

/// The release `weir` next to this benchmark binary, or `$WEIR_BIN` (to
/// compare two builds with the same harness).
pub fn weir_binary() -> PathBuf {
    let bin = std::env::var_os("WEIR_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::current_exe().unwrap().with_file_name("weir"));
    assert!(
        bin.exists(),
        "{} not found: cargo build --release --bins",
        bin.display()
    );
    bin
}

/// An example job built with weir's API, from `examples/` (release:
/// `cargo build --release --examples`), next to this benchmark's binary.
pub fn graph_example(name: &str) -> PathBuf {
    let bin = std::env::current_exe()
        .unwrap()
        .with_file_name("examples")
        .join(name);
    assert!(
        bin.exists(),
        "{} not found: cargo build --release --examples",
        bin.display()
    );
    bin
}

/// The configuration of the graph word count (`examples/word_count`) for
/// `spec`, the built-in word count's: its TOML without `[source]` and
/// `[pipeline]` (the example's code is the job) and with `[sink]` reduced
/// to its delivery; everything else (`[scale]` and the like in
/// `spec.extra`) is kept. Written to `<dir>/weir-graph.toml`, whose path
/// it returns.
pub fn write_graph_config(spec: &JobSpec, dir: &Path) -> PathBuf {
    let toml = spec.toml();
    let keep: Vec<&str> = toml
        .split("\n[")
        .filter(|section| !section.starts_with("source]") && !section.starts_with("pipeline]"))
        .collect();
    let toml = keep
        .join("\n[")
        .replace(&format!("topic = \"{}\"\n", spec.sink_topic), "")
        .replace("emit = \"every-update\"\n", "");
    std::fs::create_dir_all(dir).unwrap();
    let config = dir.join("weir-graph.toml");
    std::fs::write(&config, toml).unwrap();
    config
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum System {
    Weir {
        emit: String,
    },
    KafkaStreams,
    Flink,
    Quix,
    /// The windowed job (`weir-bench windowed`): a tumbling 10 s event-time
    /// count per key, exactly-once, in each system.
    WeirWindowed,
    KafkaStreamsWindowed,
    FlinkWindowed,
    /// Word count built with the job API (`examples/word_count.rs`) on the
    /// graph engine: the same output as `Weir` with every-update.
    WeirGraph,
}

impl System {
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "weir" => Self::Weir {
                emit: "every-update".into(),
            },
            "weir-on-checkpoint" => Self::Weir {
                emit: "on-checkpoint".into(),
            },
            "kafka-streams" => Self::KafkaStreams,
            "flink" => Self::Flink,
            "quix" => Self::Quix,
            "weir-windowed" => Self::WeirWindowed,
            "kafka-streams-windowed" => Self::KafkaStreamsWindowed,
            "flink-windowed" => Self::FlinkWindowed,
            "weir-graph" => Self::WeirGraph,
            _ => return None,
        })
    }

    pub fn name(&self) -> String {
        match self {
            Self::Weir { emit } if emit == "every-update" => "weir".into(),
            Self::Weir { emit } => format!("weir ({emit})"),
            Self::KafkaStreams => "kafka-streams".into(),
            Self::Flink => "flink".into(),
            Self::Quix => "quix-streams".into(),
            Self::WeirWindowed => "weir".into(),
            Self::KafkaStreamsWindowed => "kafka-streams".into(),
            Self::FlinkWindowed => "flink".into(),
            Self::WeirGraph => "weir-graph".into(),
        }
    }

    /// The consumer group whose committed offsets show its progress.
    pub fn group(&self, ctx: &Ctx) -> String {
        match self {
            Self::Weir { .. } | Self::WeirWindowed | Self::WeirGraph => {
                format!("weir-{}-{}", ctx.name, ctx.output)
            }
            _ => ctx.name.clone(),
        }
    }

    /// Starts the system; `restart` resumes from its own saved state.
    pub fn launch(&self, ctx: &Ctx, restart: bool) -> ProcessGroup {
        let log = ctx.dir.join("system.log");
        std::fs::create_dir_all(&ctx.dir).unwrap();
        let s = |p: &Path| p.display().to_string();
        let b = bootstrap();
        match self {
            Self::Weir { emit } => {
                let spec = JobSpec {
                    name: ctx.name.clone(),
                    parallelism: ctx.parallelism,
                    delivery: "exactly-once".into(),
                    emit: emit.clone(),
                    interval: "1s".into(),
                    ..JobSpec::word_count(&ctx.dir, &ctx.input, &ctx.output)
                };
                let config = spec.write();
                ProcessGroup::start(
                    &[weir_run(&ctx.weir, &config)],
                    &log,
                    &[("RUST_LOG", &weir_log_filter())],
                )
            }
            Self::WeirWindowed => {
                let spec = JobSpec {
                    name: ctx.name.clone(),
                    parallelism: ctx.parallelism,
                    delivery: "exactly-once".into(),
                    format: "json".into(),
                    interval: "1s".into(),
                    pipeline: "kind = \"aggregate\"\nkey = \"/key\"\nfunction = \"count\"".into(),
                    extra: "[source.event_time]\nfield = \"/ts\"\nmax_out_of_orderness = \"5s\"\nidle_timeout = \"30s\"\n\
                            [pipeline.window]\nkind = \"tumbling\"\nsize = \"10s\"\n"
                        .into(),
                    ..JobSpec::word_count(&ctx.dir, &ctx.input, &ctx.output)
                };
                let config = spec.write();
                ProcessGroup::start(
                    &[weir_run(&ctx.weir, &config)],
                    &log,
                    &[("RUST_LOG", &weir_log_filter())],
                )
            }
            Self::WeirGraph => {
                // The built-in word count's configuration without its
                // [source] and [pipeline] (the example's code is the job)
                // and with [sink] reduced to its delivery.
                let spec = JobSpec {
                    name: ctx.name.clone(),
                    parallelism: ctx.parallelism,
                    delivery: "exactly-once".into(),
                    interval: "1s".into(),
                    ..JobSpec::word_count(&ctx.dir, &ctx.input, &ctx.output)
                };
                let config = write_graph_config(&spec, &ctx.dir);
                ProcessGroup::start(
                    &[weir_run(&graph_example("word_count"), &config)],
                    &log,
                    &[
                        ("RUST_LOG", &weir_log_filter()),
                        ("WORD_COUNT_INPUT", &ctx.input),
                        ("WORD_COUNT_OUTPUT", &ctx.output),
                    ],
                )
            }
            Self::KafkaStreams | Self::KafkaStreamsWindowed => ProcessGroup::start(
                &[[
                    vec![
                        "java".into(),
                        "-Xmx2g".into(),
                        "-cp".into(),
                        java_cp("kafka-streams"),
                        if *self == Self::KafkaStreams {
                            "weirbench.KafkaStreamsWordCount".into()
                        } else {
                            "weirbench.KafkaStreamsWindowedCount".into()
                        },
                        b,
                        ctx.input.clone(),
                        ctx.output.clone(),
                        ctx.name.clone(),
                        s(&ctx.dir.join("state")),
                        ctx.parallelism.to_string(),
                    ],
                    ctx.grace_ms.map(|g| g.to_string()).into_iter().collect(),
                ]
                .concat()],
                &log,
                &[],
            ),
            Self::Flink | Self::FlinkWindowed => {
                let chk = ctx.dir.join("checkpoints");
                let mut argv: Vec<String> = vec!["java".into(), "-Xmx2g".into()];
                argv.extend(FLINK_OPENS.iter().map(|o| o.to_string()));
                argv.extend([
                    "-cp".into(),
                    java_cp("flink"),
                    if *self == Self::Flink {
                        "weirbench.FlinkWordCount".into()
                    } else {
                        "weirbench.FlinkWindowedCount".into()
                    },
                    b,
                    ctx.input.clone(),
                    ctx.output.clone(),
                    ctx.name.clone(),
                    s(&chk),
                    ctx.parallelism.to_string(),
                ]);
                if restart {
                    match latest_flink_checkpoint(&chk) {
                        Some(p) => argv.push(s(&p)),
                        None => eprintln!("flink: no retained checkpoint to restore from"),
                    }
                }
                ProcessGroup::start(&[argv], &log, &[])
            }
            Self::Quix => {
                let python = quix_python();
                let commands: Vec<Vec<String>> = (0..ctx.parallelism)
                    .map(|i| {
                        vec![
                            s(&python),
                            s(&ctx.repo.join("bench/peers/quix/wordcount.py")),
                            b.clone(),
                            ctx.input.clone(),
                            ctx.output.clone(),
                            ctx.name.clone(),
                            s(&ctx.dir.join(format!("state-{i}"))),
                        ]
                    })
                    .collect();
                ProcessGroup::start(&commands, &log, &[])
            }
        }
    }
}

/// The Python of the virtual environment `bench/compare.sh` installs
/// Quix Streams into.
pub fn quix_python() -> PathBuf {
    std::env::var_os("WEIR_BENCH_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/weir/bench-venv")
        })
        .join("bin/python")
}

/// The newest `<dir>/<job id>/chk-N` that has a `_metadata`.
fn latest_flink_checkpoint(dir: &Path) -> Option<PathBuf> {
    let mut best: Option<(u64, PathBuf)> = None;
    for job in std::fs::read_dir(dir).ok()?.flatten() {
        for chk in std::fs::read_dir(job.path()).ok()?.flatten() {
            let name = chk.file_name().to_string_lossy().into_owned();
            let Some(n) = name
                .strip_prefix("chk-")
                .and_then(|n| n.parse::<u64>().ok())
            else {
                continue;
            };
            if chk.path().join("_metadata").exists() && best.as_ref().is_none_or(|(b, _)| n > *b) {
                best = Some((n, chk.path()));
            }
        }
    }
    best.map(|(_, p)| p)
}
