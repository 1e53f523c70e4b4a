#!/usr/bin/env bash
# Quick start: starts the local broker, creates the topics, writes sample
# text, runs weir's exactly-once word count in SQL (config/demo.toml: the
# counts, and the ten most frequent words ranked as they change) and prints
# the console's address. Sample text keeps arriving so the console has something to show;
# the counts are read back with kcat (isolation.level=read_committed, not
# weir's own code). Ctrl-C stops weir with a final checkpoint and prints the
# final counts.
#
#   scripts/demo.sh          run until Ctrl-C
#   scripts/demo.sh --once   run a few seconds, stop, print the counts (for scripts)
set -euo pipefail
cd "$(dirname "$0")/.."

once=false
case "${1:-}" in
  --once) once=true ;;
  "") ;;
  *) echo "usage: scripts/demo.sh [--once]" >&2; exit 2 ;;
esac

scripts/setup.sh
scripts/kafka.sh start
cargo build --quiet
scripts/kafka.sh topic words 4
scripts/kafka.sh topic word-counts 4
scripts/kafka.sh topic top-words 1
mkdir -p .demo
broker=127.0.0.1:9092
admin=$(sed -n 's/^listen = "\(.*\)"/\1/p' config/demo.toml)

top_words() {
  kcat -C -b "$broker" -t word-counts -o beginning -e -q \
      -X isolation.level=read_committed -f '%k\t%s\n' \
    | python3 -c '
import json, sys
last = {}
for line in sys.stdin:
    key, _, value = line.rstrip("\n").partition("\t")
    try:
        word = json.loads(key)["word"]
    except (ValueError, TypeError, KeyError):
        word = key  # written by an earlier demo: the word as the key
    if value:
        last[word] = json.loads(value)["count"]
    else:
        last.pop(word, None)
for word, n in sorted(last.items(), key=lambda kv: (-kv[1], kv[0]))[:15]:
    print(f"{n:6d}  {word}")
print(f"({len(last)} distinct words)")
'
}

# The ranks as the job keeps them: the last row of each rank.
ranked_words() {
  kcat -C -b "$broker" -t top-words -o beginning -e -q \
      -X isolation.level=read_committed -f '%k\t%s\n' \
    | python3 -c '
import json, sys
ranks = {}
for line in sys.stdin:
    key, _, value = line.rstrip("\n").partition("\t")
    rn = json.loads(key)["rn"]
    if value:
        ranks[rn] = json.loads(value)
    else:
        ranks.pop(rn, None)
for rn in sorted(ranks):
    r = ranks[rn]
    print("%3d. %s (%d)" % (rn, r["word"], r["count"]))
'
}

echo "demo: producing demo/sample.txt (x20) to topic words" >&2
for _ in $(seq 1 20); do cat demo/sample.txt; done | kcat -P -b "$broker" -t words -q

echo "demo: the job's plan (weir explain):" >&2
target/debug/weir explain --config config/demo.toml | sed -n '/^logical plan/,/^stage 0/p' | sed '$d' >&2
echo "demo: running weir (log: .demo/weir.log)" >&2
# weir and kcat run in their own sessions: Ctrl-C reaches only this script,
# which stops them in order (one SIGTERM to weir: a final checkpoint; EOF
# to kcat: it flushes and exits cleanly).
setsid target/debug/weir run --config config/demo.toml >>.demo/weir.log 2>&1 &
weir_pid=$!
gen_pid=""
kcat_pid=""

stop_weir() {
  if [ -n "$gen_pid" ]; then
    kill "$gen_pid" 2>/dev/null || true
    wait "$kcat_pid" 2>/dev/null || true
  fi
  kill -TERM "$weir_pid" 2>/dev/null || true
  if ! wait "$weir_pid"; then
    echo "demo: weir failed; see .demo/weir.log" >&2
    tail -20 .demo/weir.log >&2
    exit 1
  fi
  grep -E "checkpoint completed" .demo/weir.log | tail -1 >&2 || true
  target/debug/weir checkpoints list --config config/demo.toml
  echo "demo: top words in word-counts (read_committed, last value per key):"
  top_words
  echo "demo: top-words as the job ranked them (read_committed, last row per rank):"
  ranked_words
}

if $once; then
  sleep 8
  stop_weir
  exit 0
fi

# A line of sample text every 200 ms, so throughput and checkpoints move.
fifo=.demo/feed.fifo
rm -f "$fifo" && mkfifo "$fifo"
setsid kcat -P -b "$broker" -t words -q <"$fifo" &
kcat_pid=$!
(
  while true; do
    while IFS= read -r line; do
      printf '%s\n' "$line"
      sleep 0.2
    done < demo/sample.txt
  done
) >"$fifo" &
gen_pid=$!
trap 'echo; echo "demo: stopping (final checkpoint)" >&2; stop_weir; exit 0' INT TERM

for _ in $(seq 1 100); do
  curl -fsS "http://$admin/ready" >/dev/null 2>&1 && break
  sleep 0.2
done
cat <<EOF

  weir is running the SQL word count from topic "words" to "word-counts"
  and "top-words" (config/demo.toml).
  Console:      http://$admin/
  A key:        curl http://$admin/state/counts.aggregate/the
  Checkpoints:  target/debug/weir checkpoints show latest --config config/demo.toml
  Offline:      target/debug/weir state scan --checkpoint latest --config config/demo.toml --operator counts.aggregate --prefix th

  Press Ctrl-C to stop (weir takes a final checkpoint).

EOF
while kill -0 "$weir_pid" 2>/dev/null; do
  sleep 1 &
  wait $! || true
done
echo "demo: weir exited on its own; see .demo/weir.log" >&2
tail -20 .demo/weir.log >&2
exit 1
