#!/usr/bin/env bash
# Word-count benchmark: throughput and CPU-seconds per million records of the
# release `weir` binary against the local broker. Arguments go to weir-bench
# (e.g. --words 1000000, --matrix, --interval 100ms).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/kafka.sh start
cargo build --release --workspace --bins --quiet
exec "${CARGO_TARGET_DIR:-target}"/release/weir-bench run "$@"
