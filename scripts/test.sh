#!/usr/bin/env bash
# README's test command: installs dependencies, starts the local Kafka broker
# (scripts/kafka.sh, idempotent) and runs every test against it, including
# the crash tests (named crash points need the `failpoints` feature).
# The S3 emulator (scripts/s3.sh, moto) serves the group-mode tests of
# checkpoints on S3. The schema registry (scripts/registry.sh, Apicurio with
# Confluent's API) and the format tests' independent producer and reader
# (tests/formats/, a Python virtualenv) serve the Avro, Protobuf and JSON
# Schema tests.
set -euo pipefail
cd "$(dirname "$0")/.."
# The broker stops when its disk fills ("all log dirs have failed") and
# every later test then fails on a timeout: say so first, where it shows.
free_kb=$(df -Pk . | awk 'NR == 2 { print $4 }')
if [ "${free_kb:-0}" -lt $((8 * 1024 * 1024)) ]; then
  echo "test.sh: warning: only $((free_kb / 1024)) MB free on $(df -P . | awk 'NR == 2 { print $6 }');" \
    "the suite's build, broker and checkpoints need about 8 GB, and the broker stops" \
    "when its disk is full (every test after that fails)" >&2
fi
scripts/setup.sh
scripts/kafka.sh start
scripts/s3.sh start
scripts/registry.sh start
scripts/browser.sh install
formats_python=$(tests/formats/venv.sh)
eval "$(scripts/s3.sh env)"
eval "$(scripts/registry.sh env)"
export WEIR_FORMATS_PYTHON=$formats_python
cargo test --features failpoints "$@"
