#!/usr/bin/env python3
"""Nexmark events as Avro on two topics, for `weir-bench nexmark --format avro`.

One table's JSON lines (person.jsonl, auction.jsonl or bid.jsonl as
tests/sql/reference.py and weir-testkit's `sql::generate` write them) become
Avro records twice:

  --framed TOPIC  registry-framed, written by confluent-kafka's AvroSerializer
                  (magic byte 0, the schema id, the Avro body; subject
                  <TOPIC>-value, TopicNameStrategy): what weir reads with
                  format = "avro".
  --plain TOPIC   the bare Avro body (fastavro's schemaless_writer): what Flink
                  SQL's plain 'avro' format reads (Confluent's registry client,
                  which 'avro-confluent' needs, is not served here).

The schema is bench/peers/avro/<table>.avsc: the schema Flink's
AvroSchemaConverter derives from the Flink DDL (bench/peers/flink/SQL.md,
"Avro"): record org.apache.flink.avro.generated.record, every field a union
with null (default null), event times timestamp-millis longs. Flink reads
with that derived schema and no writer schema, so the bytes must be exactly
what it describes.

Both topics get the same records in the same order, line i to partition
i % partitions (as weir-testkit's `produce` does). Every value of the framed
topic is checked to be the frame plus the plain topic's value, byte for byte.
Topics that do not exist are created (the broker does not auto-create).

Prints one JSON object on stdout: {"table", "records", "schema_id",
"framed": {"topic", "ends": [[partition, end offset], ...]}, "plain": {...}}.

  /root/.cache/weir/formats-venv/bin/python bench/peers/avro_topics.py \\
      --table bid --input DIR/bid.jsonl --framed T-bid --plain T-bid-flink \\
      [--partitions 4] [--registry http://127.0.0.1:8081/apis/ccompat/v7] \\
      [--bootstrap 127.0.0.1:9092] [--limit N]

Needs confluent-kafka and fastavro (tests/formats/venv.sh installs both).
"""

import argparse
import datetime as dt
import io
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
MS = dt.timedelta(milliseconds=1)


def fail(msg):
    print(f"avro_topics.py: {msg}", file=sys.stderr)
    sys.exit(1)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--table", required=True, choices=["person", "auction", "bid"])
    p.add_argument("--input", required=True, help="the table's JSON lines")
    p.add_argument("--framed", help="topic for registry-framed records (weir)")
    p.add_argument("--plain", help="topic for bare Avro records (Flink)")
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--schema-dir", default=os.path.join(HERE, "avro"))
    p.add_argument("--registry", default=os.environ.get(
        "WEIR_REGISTRY_URL", "http://127.0.0.1:8081/apis/ccompat/v7"))
    p.add_argument("--bootstrap", default=os.environ.get("BOOTSTRAP", "127.0.0.1:9092"))
    p.add_argument("--limit", type=int, help="only the first N lines")
    a = p.parse_args()
    if not a.framed and not a.plain:
        p.error("give --framed TOPIC, --plain TOPIC or both")
    return a


def millis(text):
    """`2026-11-30T10:00:00.004Z` (or epoch milliseconds) as epoch milliseconds."""
    if isinstance(text, int):
        return text
    t = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.timezone.utc)
    return (t - EPOCH) // MS


def converter(schema):
    """JSON line -> the Avro datum of `schema` (timestamp-millis fields as ints)."""
    times = []
    names = []
    for f in schema["fields"]:
        names.append(f["name"])
        branches = f["type"] if isinstance(f["type"], list) else [f["type"]]
        if any(isinstance(b, dict) and b.get("logicalType") == "timestamp-millis" for b in branches):
            times.append(f["name"])

    def convert(row):
        unknown = set(row) - set(names)
        if unknown:
            raise ValueError(f"fields {sorted(unknown)} are not in the schema")
        out = {n: row.get(n) for n in names}
        for n in times:
            if out[n] is not None:
                out[n] = millis(out[n])
        return out

    return convert


def ensure_topic(admin, topic, partitions):
    from confluent_kafka.admin import NewTopic

    md = admin.list_topics(timeout=10)
    if topic in md.topics and not md.topics[topic].error:
        have = len(md.topics[topic].partitions)
        if have != partitions:
            fail(f"topic {topic} has {have} partitions, not {partitions}")
        return
    for f in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        f.result()


def end_offsets(bootstrap, topic, partitions):
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "avro-topics-ends",
                  "enable.auto.commit": False})
    try:
        return [[p, c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]]
                for p in range(partitions)]
    finally:
        c.close()


def main():
    a = parse_args()
    import fastavro
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.serialization import MessageField, SerializationContext

    path = os.path.join(a.schema_dir, f"{a.table}.avsc")
    text = open(path).read()
    schema = json.loads(text)
    parsed = fastavro.parse_schema(schema)
    convert = converter(schema)

    framed_ser = None
    if a.framed:
        from confluent_kafka.schema_registry import SchemaRegistryClient
        from confluent_kafka.schema_registry.avro import AvroSerializer

        client = SchemaRegistryClient({"url": a.registry})
        framed_ser = AvroSerializer(client, text, conf={"auto.register.schemas": True})
        ctx = SerializationContext(a.framed, MessageField.VALUE)

    admin = AdminClient({"bootstrap.servers": a.bootstrap})
    for t in (a.framed, a.plain):
        if t:
            ensure_topic(admin, t, a.partitions)

    producer = Producer({
        "bootstrap.servers": a.bootstrap,
        "enable.idempotence": True,
        "acks": "all",
        # Batches as full as the JSON input's (weir-testkit writes 10,000
        # records per batch from Rust; Python produces slower, and a 20 ms
        # linger would cut the log into batches of a few hundred, which
        # costs every reader more fetches): the input's shape is the same.
        "linger.ms": 1000,
        "batch.size": 4194304,
        "batch.num.messages": 10000,
        "queue.buffering.max.messages": 1000000,
        "message.timeout.ms": 60000,
    })
    state = {"failed": 0, "first_error": None}

    def on_delivery(err, msg):
        if err is not None:
            state["failed"] += 1
            state["first_error"] = state["first_error"] or f"{msg.topic()}: {err}"

    def send(topic, value, partition):
        while True:
            try:
                producer.produce(topic, value=value, partition=partition, on_delivery=on_delivery)
                return
            except BufferError:
                producer.poll(0.05)

    started = time.monotonic()
    n = 0
    schema_id = None
    buf = io.BytesIO()
    with open(a.input) as f:
        for i, line in enumerate(f):
            if a.limit is not None and i >= a.limit:
                break
            line = line.strip()
            if not line:
                continue
            try:
                datum = convert(json.loads(line))
            except (ValueError, TypeError) as e:
                fail(f"{a.input} line {i + 1}: {e}")
            buf.seek(0)
            buf.truncate()
            fastavro.schemaless_writer(buf, parsed, datum)
            plain = buf.getvalue()
            partition = n % a.partitions
            if framed_ser is not None:
                framed = framed_ser(datum, ctx)
                if schema_id is None:
                    schema_id = int.from_bytes(framed[1:5], "big")
                if framed[:1] != b"\x00" or framed[5:] != plain:
                    fail(f"line {i + 1}: AvroSerializer's body differs from schemaless_writer's")
                send(a.framed, framed, partition)
            if a.plain:
                send(a.plain, plain, partition)
            n += 1
            if n % 10000 == 0:
                producer.poll(0)
    left = producer.flush(60)
    if left or state["failed"]:
        fail(f"{left} records not delivered, {state['failed']} failed: {state['first_error']}")
    out = {"table": a.table, "records": n, "schema_id": schema_id}
    for key, t in (("framed", a.framed), ("plain", a.plain)):
        if t:
            out[key] = {"topic": t, "ends": end_offsets(a.bootstrap, t, a.partitions)}
    print(json.dumps(out))
    print(f"avro_topics.py: {n} {a.table} records to "
          f"{' and '.join(t for t in (a.framed, a.plain) if t)} in "
          f"{time.monotonic() - started:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
