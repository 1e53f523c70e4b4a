#!/usr/bin/env python3
"""An independent reader for weir's format tests: reads a topic from the
beginning (isolation.level=read_committed) and decodes it with Confluent's
own Schema Registry deserializers (confluent-kafka-python), never with
weir's decoder. Prints one JSON line per record, in partition then offset
order within each partition as fetched:

  {"partition":p,"offset":o,"key":<decoded or null>,"value":<decoded or null>}

(with --timestamps also "timestamp": the record's epoch ms.)

Formats (--format for values, --key-format for keys):
  avro         AvroDeserializer with the writer schema from the registry (by the record's id)
  protobuf     the writer schema from the registry by the record's id, the message picked by
               the record's message indexes (no --schema needed); --schema FILE --message NAME
               decodes with a local .proto instead, through ProtobufDeserializer
  json-schema  JSONDeserializer, validating against the writer schema from the registry
  json         plain JSON text (no registry)
  string       UTF-8 text (keys' default)
  raw          the bytes as hex
Values as JSON: timestamps as epoch ms ints, decimals as strings, bytes as
hex (see common.py for every rule).

Stops after --idle-ms (default 5000) without a new record, when --expect N
records were read, or with --eof when every partition is at its end;
whichever comes first. Exits 0 (also when fewer than --expect arrived: the
count read is on stderr); exits 1 when a record cannot be decoded (naming its
partition and offset) or the consumer fails.
"""

import argparse
import json
import sys
import time
import uuid

from common import DEFAULT_REGISTRY, RegistryProtobuf, pb_to_json, plain_json, proto_message_from_file, registry_client

TOOL = "consume.py"
FORMATS = ["avro", "protobuf", "json-schema", "json", "string", "raw"]


def fail(message):
    print(f"{TOOL}: {message}", file=sys.stderr)
    sys.exit(1)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--topic", required=True)
    p.add_argument("--bootstrap", default="127.0.0.1:9092")
    p.add_argument("--registry", default=DEFAULT_REGISTRY, help="the Confluent-API URL (default $WEIR_REGISTRY_URL)")
    p.add_argument("--format", choices=FORMATS, default="raw", help="value format (default raw)")
    p.add_argument("--key-format", choices=FORMATS, default="string", help="key format (default string)")
    p.add_argument("--schema", help="protobuf: decode values with this local .proto (with --message)")
    p.add_argument("--message", help="protobuf: the message's full name for --schema")
    p.add_argument("--idle-ms", type=int, default=5000)
    p.add_argument("--expect", type=int, help="stop after N records")
    p.add_argument("--eof", action="store_true", help="stop when every partition is at its end")
    p.add_argument("--timestamps", action="store_true", help="add each record's timestamp (epoch ms)")
    a = p.parse_args()
    if a.schema and not a.message:
        p.error("--schema needs --message")
    return a


def decoder(fmt, field, a, client, rp):
    """A function bytes -> JSON value for one side of the record."""
    from confluent_kafka.serialization import MessageField, SerializationContext

    ctx = SerializationContext(a.topic, field)
    if fmt == "raw":
        return lambda b: b.hex()
    if fmt == "string":
        return lambda b: b.decode("utf-8")
    if fmt == "json":
        return lambda b: json.loads(b)
    if fmt == "avro":
        from confluent_kafka.schema_registry.avro import AvroDeserializer

        des = AvroDeserializer(client)
        return lambda b: plain_json(des(b, ctx))
    if fmt == "json-schema":
        from confluent_kafka.schema_registry.json_schema import JSONDeserializer

        des = JSONDeserializer(None, schema_registry_client=client)
        return lambda b: plain_json(des(b, ctx))
    if fmt == "protobuf":
        if a.schema and field == MessageField.VALUE:
            from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer

            cls, _ = proto_message_from_file(a.schema, a.message)
            des = ProtobufDeserializer(cls, {})
            return lambda b: pb_to_json(des(b, ctx))
        return lambda b: pb_to_json(rp.decode(b))
    raise ValueError(fmt)


def main():
    a = parse_args()
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition
    from confluent_kafka.serialization import MessageField

    needs_registry = {a.format, a.key_format} & {"avro", "protobuf", "json-schema"}
    client = registry_client(a.registry) if needs_registry else None
    rp = RegistryProtobuf(client) if client else None
    try:
        decode_key = decoder(a.key_format, MessageField.KEY, a, client, rp)
        decode_value = decoder(a.format, MessageField.VALUE, a, client, rp)
    except (OSError, ValueError) as e:
        fail(str(e))

    consumer = Consumer({
        "bootstrap.servers": a.bootstrap,
        "group.id": f"weir-formats-consume-{uuid.uuid4()}",
        "enable.auto.commit": False,
        "isolation.level": "read_committed",
        "enable.partition.eof": True,
        "auto.offset.reset": "earliest",
    })
    idle = a.idle_ms / 1000.0
    deadline = time.monotonic() + idle
    partitions = None
    while partitions is None:
        md = consumer.list_topics(a.topic, timeout=max(1.0, min(10.0, idle)))
        t = md.topics.get(a.topic)
        if t is not None and t.error is None and t.partitions:
            partitions = sorted(t.partitions)
        elif time.monotonic() >= deadline:
            print(f"{TOOL}: topic {a.topic} does not exist; read 0 records", file=sys.stderr)
            consumer.close()
            return
        else:
            time.sleep(0.2)
    consumer.assign([TopicPartition(a.topic, p, OFFSET_BEGINNING) for p in partitions])

    count = 0
    at_eof = set()
    deadline = time.monotonic() + idle
    out = sys.stdout
    while True:
        if a.expect is not None and count >= a.expect:
            break
        if a.eof and len(at_eof) == len(partitions):
            break
        left = deadline - time.monotonic()
        if left <= 0:
            break
        msg = consumer.poll(min(left, 0.5))
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() == KafkaError._PARTITION_EOF:
                at_eof.add(msg.partition())
                continue
            fail(f"consumer error: {msg.error()}")
        at_eof.discard(msg.partition())
        deadline = time.monotonic() + idle
        p, o = msg.partition(), msg.offset()
        try:
            key = None if msg.key() is None else decode_key(msg.key())
        except Exception as e:  # noqa: BLE001
            fail(f"partition {p} offset {o}: cannot decode the key as {a.key_format}: {type(e).__name__}: {e}")
        try:
            value = None if msg.value() is None else decode_value(msg.value())
        except Exception as e:  # noqa: BLE001
            fail(f"partition {p} offset {o}: cannot decode the value as {a.format}: {type(e).__name__}: {e}")
        rec = {"partition": p, "offset": o, "key": key, "value": value}
        if a.timestamps:
            rec["timestamp"] = msg.timestamp()[1]
        out.write(json.dumps(rec, separators=(",", ":"), ensure_ascii=False) + "\n")
        count += 1
    consumer.close()
    out.flush()
    short = f" (expected {a.expect})" \
        if a.expect is not None and count < a.expect else ""
    print(f"{TOOL}: read {count} records from {a.topic}{short}", file=sys.stderr)


if __name__ == "__main__":
    try:
        main()
    except BrokenPipeError:
        sys.exit(1)
