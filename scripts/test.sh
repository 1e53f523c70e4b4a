#!/usr/bin/env bash
# README's test command: installs dependencies, starts the local Kafka broker
# (scripts/kafka.sh, idempotent) and runs every test against it, including
# the crash tests (named crash points need the `failpoints` feature).
# The S3 emulator (scripts/s3.sh, moto) serves the group-mode tests of
# checkpoints on S3.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/kafka.sh start
scripts/s3.sh start
scripts/browser.sh install
eval "$(scripts/s3.sh env)"
cargo test --features failpoints "$@"
