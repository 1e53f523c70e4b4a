#!/usr/bin/env bash
# Where a record's CPU goes in weir's word count: runs `weir-bench run`
# under `perf record` (cpu-clock sampling) and summarises the samples by
# component (bench/profile-summary.py). Further arguments go to
# `weir-bench run`, e.g. --words 2000000 --delivery at-least-once.
#   bench/profile.sh [--words N] [--delivery D] [--emit E] [--interval I]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/kafka.sh start
cargo build --release --workspace --bins --quiet
target=${CARGO_TARGET_DIR:-target}
out=$(mktemp -d)/weir
"$target"/release/weir-bench run --perf "$out" "$@"
for data in "$out"-*.data; do
  echo "## $(basename "$data" .data)"
  perf report -i "$data" --stdio --no-children -F overhead,dso,sym --percent-limit 0.05 2>/dev/null \
    | python3 bench/profile-summary.py
done
