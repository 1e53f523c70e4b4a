#!/usr/bin/env bash
# weir against Kafka Streams, Apache Flink and Quix Streams on the same broker,
# input and machine (issue #5). Builds the release binaries and the peers
# (Maven, PyPI), then runs `weir-bench compare`; further arguments go to it
# (--quick for a tenth of the input, --systems weir,flink, ...).
#   bench/compare.sh [--quick]
#   bench/compare.sh recovery --keys 1000000,10000000
#   bench/compare.sh checkpoint-cost --keys 1000000,10000000
#   bench/compare.sh windowed --events 1000000 --rounds 3
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/kafka.sh start
cargo build --release --workspace --bins --quiet
for peer in kafka-streams flink; do
  (cd "bench/peers/$peer" && mvn -q -B -Dstyle.color=never package dependency:copy-dependencies -DskipTests >&2)
done
venv=${WEIR_BENCH_VENV:-$HOME/.cache/weir/bench-venv}
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import quixstreams' 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q 'quixstreams==3.28.1'
fi
case "${1:-}" in
  scale-*)
    # Group mode: S3 runs need the emulator and its environment.
    scripts/s3.sh start
    eval "$(scripts/s3.sh env)"
    exec "${CARGO_TARGET_DIR:-target}"/release/weir-bench "$@" ;;
  recovery|checkpoint-cost|windowed) exec "${CARGO_TARGET_DIR:-target}"/release/weir-bench "$@" ;;
  *) exec "${CARGO_TARGET_DIR:-target}"/release/weir-bench compare "$@" ;;
esac
