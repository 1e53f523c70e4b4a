#!/usr/bin/env bash
# Proves the Flink SQL peer reads Nexmark in Flink's plain 'avro' format (see
# ../SQL.md, "Avro"): generates Nexmark events (tests/sql/reference.py), writes
# each table with bench/peers/avro_topics.py (bare Avro for Flink on
# PREFIX-<table>, registry-framed Avro for weir on PREFIX-framed-<table>), runs
# nexmark-avro-check.sql (q0 over the bids, a copy of persons and of auctions,
# into JSON topics) and compares every output row with DuckDB's answer.
#   bench/peers/flink/sql/avro-check.sh [EVENTS]        (default 5000)
# Needs: the broker (scripts/kafka.sh start), the registry (scripts/registry.sh
# start), the peer built (cd bench/peers/flink && mvn -q package
# dependency:copy-dependencies), kcat, $FORMATS_PYTHON (confluent-kafka and
# fastavro; default ~/.cache/weir/formats-venv/bin/python) and DuckDB for
# tests/sql/reference.py ($PYTHON, default ~/.cache/weir/sql-venv/bin/python).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../../.." && pwd)
events=${1:-5000}
bootstrap=${BOOTSTRAP:-127.0.0.1:9092}
python=${PYTHON:-$HOME/.cache/weir/sql-venv/bin/python}
formats_python=${FORMATS_PYTHON:-$HOME/.cache/weir/formats-venv/bin/python}
registry=${WEIR_REGISTRY_URL:-http://127.0.0.1:8081/apis/ccompat/v7}
prefix=flinkavro-$$-$(date +%s)
work=$(mktemp -d /tmp/flinkavro-check.XXXXXX)
cd "$repo"

"$python" tests/sql/reference.py gen --events "$events" --seed 1 --out "$work/data" >/dev/null
for t in bid person auction; do
  "$formats_python" bench/peers/avro_topics.py --table $t --input "$work/data/$t.jsonl" \
    --plain "$prefix-$t" --framed "$prefix-framed-$t" --partitions 2 \
    --registry "$registry" --bootstrap "$bootstrap" > "$work/$t.topics.json"
done
for t in q0 person-copy auction-copy; do scripts/kafka.sh topic "$prefix-$t" 2 >/dev/null 2>&1; done
sed -e "s/@PREFIX@/$prefix/g" -e "s/@BOOTSTRAP@/$bootstrap/g" "$here/nexmark-avro-check.sql" > "$work/job.sql"

peer=bench/peers/flink
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
count() { kcat -C -b "$bootstrap" -t "$prefix-$1" -o beginning -e -q -X isolation.level=read_committed -f '\n' | wc -l; }
until grep -q 'flink-sql: job running' "$work/job.log"; do
  kill -0 $pid 2>/dev/null || { cat "$work/job.log" >&2; exit 1; }
  sleep 0.2
done
bids=$(wc -l < "$work/data/bid.jsonl") persons=$(wc -l < "$work/data/person.jsonl") auctions=$(wc -l < "$work/data/auction.jsonl")
deadline=$((SECONDS + 300))
until [ "$(count q0)" -ge "$bids" ] && [ "$(count person-copy)" -ge "$persons" ] \
    && [ "$(count auction-copy)" -ge "$auctions" ]; do
  kill -0 $pid 2>/dev/null || { echo "flink avro check: the job exited" >&2; tail -50 "$work/job.log" >&2; exit 1; }
  [ $SECONDS -lt $deadline ] || { echo "flink avro check: timed out (q0 $(count q0) of $bids)" >&2; exit 1; }
  sleep 1
done
kill $pid; wait $pid 2>/dev/null || true
"$python" - "$bootstrap" "$prefix" "$work/data" "$repo/tests/sql/reference.py" <<'PY'
import json, subprocess, sys
bootstrap, prefix, data, reference = sys.argv[1:5]

def kafka(topic):
    out = subprocess.run(['kcat', '-C', '-b', bootstrap, '-t', f'{prefix}-{topic}', '-o', 'beginning',
                          '-e', '-q', '-X', 'isolation.level=read_committed', '-f', '%s\n'],
                         capture_output=True, text=True, check=True).stdout
    return [json.loads(l) for l in out.split('\n') if l]

def duck(sql):
    out = subprocess.run([sys.executable, reference, 'query', '--dir', data, '--sql', sql],
                         capture_output=True, text=True, check=True).stdout
    return [json.loads(l) for l in out.split('\n') if l]

def ts3(s):
    base, _, frac = s.rstrip('Z').partition('.')
    return base + '.' + (frac + '000')[:3] + 'Z'

ok = True
for topic, sql, times in [
        ('q0', 'SELECT auction, bidder, price, date_time, extra FROM bid', ['date_time']),
        ('person-copy', 'SELECT * FROM person', ['date_time']),
        ('auction-copy', 'SELECT * FROM auction', ['date_time', 'expires'])]:
    got = kafka(topic)
    for r in got:
        for t in times:
            r[t] = ts3(r[t])
    got = sorted(json.dumps(r, sort_keys=True) for r in got)
    want = sorted(json.dumps(r, sort_keys=True) for r in duck(sql))
    same = got == want
    ok &= same
    print(f'{topic}: flink {len(got)} rows, duckdb {len(want)} rows, {"same" if same else "DIFFERENT"}')
    if not same:
        print('  only flink: ', sorted(set(got) - set(want))[:2])
        print('  only duckdb:', sorted(set(want) - set(got))[:2])
sys.exit(0 if ok else 1)
PY
echo "flink avro check: inputs in $work/*.topics.json, job log $work/job.log"
