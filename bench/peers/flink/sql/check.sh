#!/usr/bin/env bash
# End-to-end check of the Flink SQL peer against DuckDB (see ../SQL.md):
# generates Nexmark events (tests/sql/reference.py), writes the bids round-robin
# to a 2-partition topic plus one far-future bid per partition (closes the last
# windows), runs nexmark-bid-check.sql in weirbench.FlinkSqlJob, waits until every
# output is committed, prints wall time and CPU of the JVM, compares each output
# (read_committed) with DuckDB's answer, and stops the job.
#   bench/peers/flink/sql/check.sh [EVENTS]        (default 200000)
# Needs: the broker (scripts/kafka.sh start), the peer built
# (cd bench/peers/flink && mvn -q package dependency:copy-dependencies), kcat,
# and DuckDB for tests/sql/reference.py ($PYTHON, default python3).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../../.." && pwd)
events=${1:-200000}
bootstrap=${BOOTSTRAP:-127.0.0.1:9092}
python=${PYTHON:-python3}
prefix=flinksql-$$-$(date +%s)
work=$(mktemp -d /tmp/flinksql-check.XXXXXX)
cd "$repo"

"$python" tests/sql/reference.py gen --events "$events" --seed 1 --out "$work/data" >/dev/null
for t in bid q0 q1 q2 tumble q17; do scripts/kafka.sh topic "$prefix-$t" 2 >/dev/null 2>&1; done
flush='{"auction":1,"bidder":1,"price":1,"channel":"flush","url":"","date_time":"2030-06-01T00:00:00.000Z","extra":"flush"}'
for p in 0 1; do
  { awk -v p=$p 'NR % 2 == 1 - p' "$work/data/bid.jsonl"; echo "$flush"; } \
    | kcat -P -b "$bootstrap" -t "$prefix-bid" -p $p
done
bids=$(wc -l < "$work/data/bid.jsonl")
windows=$("$python" tests/sql/reference.py query --dir "$work/data" --sql \
  "SELECT COUNT(*) AS n FROM (SELECT DISTINCT auction, epoch_ms(date_time) // 10000 FROM bid)" \
  | sed 's/[^0-9]//g')
sed -e "s/@PREFIX@/$prefix/g" -e "s/@BOOTSTRAP@/$bootstrap/g" "$here/nexmark-bid-check.sql" > "$work/job.sql"

peer=bench/peers/flink
t0=$(date +%s.%N)
java -Xmx2g \
  --add-opens=java.base/java.util=ALL-UNNAMED --add-opens=java.base/java.lang=ALL-UNNAMED \
  --add-opens=java.base/java.lang.invoke=ALL-UNNAMED --add-opens=java.base/java.time=ALL-UNNAMED \
  --add-opens=java.base/java.io=ALL-UNNAMED --add-opens=java.base/java.nio=ALL-UNNAMED \
  --add-opens=java.base/sun.nio.ch=ALL-UNNAMED --add-opens=java.base/java.net=ALL-UNNAMED \
  --add-opens=java.base/java.text=ALL-UNNAMED --add-opens=java.base/java.util.concurrent=ALL-UNNAMED \
  --add-opens=java.base/java.util.concurrent.atomic=ALL-UNNAMED --add-opens=java.base/java.lang.reflect=ALL-UNNAMED \
  -cp "$peer/target/classes:$peer/target/dependency/*" weirbench.FlinkSqlJob \
  --sql "$work/job.sql" --checkpoints "$work/checkpoints" --parallelism 2 --interval 1s \
  > "$work/job.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
tck=$(getconf CLK_TCK)
cpu() { awk -v t="$tck" '{ print ($14 + $15) / t }' /proc/$pid/stat; }
count() { kcat -C -b "$bootstrap" -t "$prefix-$1" -o beginning -e -q -X isolation.level=read_committed -f '\n' | wc -l; }
until grep -q 'flink-sql: job running' "$work/job.log"; do
  kill -0 $pid 2>/dev/null || { cat "$work/job.log" >&2; exit 1; }
  sleep 0.2
done
t1=$(date +%s.%N) c1=$(cpu)
deadline=$((SECONDS + 600))
# The tumbling output is complete only after the flush bids: all input was read.
until [ "$(count tumble)" -ge "$windows" ] && [ "$(count q0)" -ge $((bids + 2)) ] \
    && [ "$(count q17)" -ge $((bids + 2)) ]; do
  [ $SECONDS -lt $deadline ] || { echo "flink-sql check: timed out" >&2; exit 1; }
  sleep 1
done
t2=$(date +%s.%N) c2=$(cpu)
sleep 10
c3=$(cpu)
awk -v t0="$t0" -v t1="$t1" -v t2="$t2" -v c1="$c1" -v c2="$c2" -v c3="$c3" -v n="$bids" 'BEGIN {
  printf "flink-sql: %d bids; start to submitted %.1f s wall, %.1f s CPU\n", n, t1 - t0, c1
  printf "flink-sql: submitted to all outputs committed %.1f s wall, %.1f s CPU (polled every ~1 s)\n", t2 - t1, c2 - c1
  printf "flink-sql: idle afterwards %.2f CPU s per s\n", (c3 - c2) / 10 }'
echo "flink-sql: peak RSS $(awk '/VmHWM/ { print $2, $3 }' /proc/$pid/status)"
"$python" "$here/check.py" "$bootstrap" "$prefix" "$work/data" "$repo/tests/sql/reference.py"
