#!/usr/bin/env bash
# Quick start: starts the local broker, creates the topics, writes sample
# text, runs weir's exactly-once word count for a few seconds, stops it with
# SIGTERM (a final checkpoint), and prints the counts as read by Kafka's own
# console consumer with isolation.level=read_committed.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/kafka.sh start
cargo build --quiet
scripts/kafka.sh topic words 4
scripts/kafka.sh topic word-counts 4
mkdir -p .demo
echo "demo: producing demo/sample.txt (x20) to topic words" >&2
for _ in $(seq 1 20); do cat demo/sample.txt; done \
  | scripts/kafka.sh tool org.apache.kafka.tools.ConsoleProducer --bootstrap-server 127.0.0.1:9092 --topic words \
      --producer-property partitioner.class=org.apache.kafka.clients.producer.RoundRobinPartitioner
echo "demo: running weir (log: .demo/weir.log)" >&2
target/debug/weir run --config config/demo.toml >>.demo/weir.log 2>&1 &
pid=$!
sleep 8
kill -TERM "$pid"
wait "$pid" || { echo "demo: weir failed; see .demo/weir.log" >&2; tail -20 .demo/weir.log >&2; exit 1; }
grep -E "checkpoint completed" .demo/weir.log | tail -2 >&2 || true
target/debug/weir checkpoints list --config config/demo.toml
echo "demo: top words in word-counts (read_committed, last value per key):"
scripts/kafka.sh tool org.apache.kafka.tools.consumer.ConsoleConsumer --bootstrap-server 127.0.0.1:9092 \
    --topic word-counts --from-beginning --timeout-ms 5000 --isolation-level read_committed \
    --property print.key=true --property key.separator=$'\t' \
  | python3 -c '
import json, sys
last = {}
for line in sys.stdin:
    key, _, value = line.rstrip("\n").partition("\t")
    last[key] = json.loads(value)["count"]
for word, n in sorted(last.items(), key=lambda kv: (-kv[1], kv[0]))[:15]:
    print(f"{n:6d}  {word}")
print(f"({len(last)} distinct words)")
'
