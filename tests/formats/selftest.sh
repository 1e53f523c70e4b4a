#!/usr/bin/env bash
# Proves the format tests' producer and reader against the real broker and
# registry: each example in tests/formats/examples/ goes through produce.py
# and back through consume.py, and the records read (key and value, in key
# order) must equal examples/<format>.expected.jsonl. Also checks the
# Confluent framing of the bytes on the topic. Starts the broker and the
# registry if they are not running (both idempotent); deletes its topics.
#
#   tests/formats/selftest.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
here=tests/formats
ex=$here/examples

log() { printf 'formats/selftest.sh: %s\n' "$*" >&2; }

python=$($here/venv.sh)
scripts/kafka.sh start
scripts/registry.sh start
eval "$(scripts/registry.sh env)"

run_id="weir-formats-selftest-$$"
# Topics through the Python admin client: one call, not a JVM per topic.
admin() {  # create|delete NAME:PARTITIONS...
  "$python" - "$@" <<'PY'
import sys
from confluent_kafka.admin import AdminClient, NewTopic
a = AdminClient({"bootstrap.servers": "127.0.0.1:9092"})
op, names = sys.argv[1], sys.argv[2:]
if op == "create":
    fs = a.create_topics([NewTopic(n.split(":")[0], int(n.split(":")[1]), 1) for n in names])
else:
    fs = a.delete_topics(names)
for f in fs.values():
    f.result(30)
PY
}
topics=(avro:4 avro-key:4 protobuf-descriptor:4 protobuf-text:4 protobuf-refs:4 protobuf-indexes:1 json-schema:4 raw:1)
created=()
for t in "${topics[@]}"; do created+=("$run_id-$t"); done
cleanup() { [ ${#created[@]} -eq 0 ] || admin delete "${created[@]%%:*}" || true; }
trap cleanup EXIT
admin create "${created[@]}"
topic() { echo "$run_id-$1"; }

# key + value of each record, sorted by key: partitioning does not matter here.
project() {
  "$python" -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin if l.strip()]
rows.sort(key=lambda r: json.dumps(r["key"], sort_keys=True))
for r in rows:
    print(json.dumps({"key": r["key"], "value": r["value"]}, separators=(",", ":")))'
}

check() {  # name expected-file actual-output
  if diff -u "$2" <(project < "$3"); then log "$1: ok"; else log "$1: FAILED"; exit 1; fi
}

out=$(mktemp -d)
trap 'cleanup; rm -rf "$out"' EXIT

# Avro: nullable field, enum, array of records, map, decimal, timestamp-millis, date, bytes.
t=$(topic avro)
"$python" $here/produce.py --topic "$t" --format avro --schema $ex/order.avsc < $ex/avro.jsonl
"$python" $here/consume.py --topic "$t" --format avro --expect 4 > "$out/avro"
check avro $ex/avro.expected.jsonl "$out/avro"

# Avro keys too (subject <topic>-key).
t=$(topic avro-key)
"$python" -c 'import json,sys
for l in sys.stdin:
    r = json.loads(l); r["key"] = {"id": r["key"]}; print(json.dumps(r))' < $ex/avro.jsonl |
  "$python" $here/produce.py --topic "$t" --format avro --schema $ex/order.avsc --key-format avro --key-schema $ex/key.avsc
"$python" $here/consume.py --topic "$t" --format avro --key-format avro --expect 4 > "$out/avro-key"
"$python" -c 'import json,sys
for l in sys.stdin:
    r = json.loads(l); r["key"] = {"id": r["key"]}; print(json.dumps(r, separators=(",", ":")))' < $ex/avro.expected.jsonl > "$out/avro-key.expected"
check avro-key "$out/avro-key.expected" "$out/avro-key"

# Protobuf: nested message, repeated, map, oneof, Timestamp, Int64Value, enum,
# bytes, proto3 optional. Read back by the schema id in each record (the
# registry's copy), and once more with the local .proto.
for variant in descriptor text; do
  t=$(topic "protobuf-$variant")
  "$python" $here/produce.py --topic "$t" --format protobuf --schema $ex/order.proto --message shop.Order \
    --proto-schema-as "$variant" < $ex/protobuf.jsonl
  "$python" $here/consume.py --topic "$t" --format protobuf --expect 4 > "$out/pb-$variant"
  check "protobuf ($variant schema)" $ex/protobuf.expected.jsonl "$out/pb-$variant"
done
"$python" $here/consume.py --topic "$t" --format protobuf --schema $ex/order.proto --message shop.Order \
  --expect 4 > "$out/pb-local"
check "protobuf (local .proto)" $ex/protobuf.expected.jsonl "$out/pb-local"
# With the well-known imports registered as references.
t=$(topic protobuf-refs)
"$python" $here/produce.py --topic "$t" --format protobuf --schema $ex/order.proto --message shop.Order \
  --no-skip-known-types < $ex/protobuf.jsonl
"$python" $here/consume.py --topic "$t" --format protobuf --expect 4 > "$out/pb-refs"
check "protobuf (references)" $ex/protobuf.expected.jsonl "$out/pb-refs"

# The framing: magic 0, a 4-byte schema id, message indexes [0] as one 0x00
# byte for the file's first message; [1] is 02 02. shop.Order.Line is [0,1]
# (04 00 02), not [0,0]: the map field `counts` declared before it makes a
# nested CountsEntry message, and it counts.
t=$(topic protobuf-indexes 1)
for m in shop.Order shop.Customer shop.Order.Line; do
  echo '{"key": "'$m'", "value": {}}' |
    "$python" $here/produce.py --topic "$t" --format protobuf --schema $ex/order.proto --message "$m"
done
"$python" $here/consume.py --topic "$t" --format raw --expect 3 > "$out/pb-raw"
"$python" - "$out/pb-raw" <<'PY'
import json, sys
rows = {r["key"]: r["value"] for r in map(json.loads, open(sys.argv[1]))}
want = {"shop.Order": "00", "shop.Customer": "0202", "shop.Order.Line": "040002"}
for k, idx in want.items():
    v = rows[k]
    assert v[:2] == "00" and v[10:10 + len(idx)] == idx, (k, v)
print("formats/selftest.sh: protobuf message indexes: ok", file=sys.stderr)
PY
"$python" $here/consume.py --topic "$t" --format protobuf --expect 3 > "$out/pb-indexes"
grep -q '"key":"shop.Order.Line","value":{"sku":"","qty":0,"price":0.0}' "$out/pb-indexes" ||
  { log "protobuf nested message by indexes: FAILED"; cat "$out/pb-indexes" >&2; exit 1; }

# JSON Schema.
t=$(topic json-schema)
"$python" $here/produce.py --topic "$t" --format json-schema --schema $ex/order.schema.json < $ex/json-schema.jsonl
"$python" $here/consume.py --topic "$t" --format json-schema --expect 3 > "$out/js"
check json-schema $ex/json-schema.expected.jsonl "$out/js"

# Raw bytes for bad-input tests: written as given, read back as hex.
t=$(topic raw 1)
printf '%s\n' '{"key":"magic","value_hex":"01000000010a"}' '{"key":"short","value_hex":"000000"}' \
  '{"key":"tomb","value_hex":null}' | "$python" $here/produce.py --topic "$t" --raw-value-hex
"$python" $here/consume.py --topic "$t" --format raw --expect 3 > "$out/raw"
printf '%s\n' '{"key":"magic","value":"01000000010a"}' '{"key":"short","value":"000000"}' \
  '{"key":"tomb","value":null}' > "$out/raw.expected"
check raw "$out/raw.expected" "$out/raw"
if "$python" $here/consume.py --topic "$t" --format avro --expect 3 > /dev/null 2>&1; then
  log "consume.py accepted a record with a wrong magic byte: FAILED"; exit 1
fi
log "all checks passed"
