#!/usr/bin/env bash
# README's test command: installs dependencies, starts the local Kafka broker
# (scripts/kafka.sh, idempotent) and runs every test against it, including
# the crash tests (named crash points need the `failpoints` feature).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/kafka.sh start
cargo test --features failpoints "$@"
