#!/usr/bin/env python3
"""An independent producer for weir's format tests: writes JSON lines from
stdin to a topic with Confluent's own Schema Registry serializers
(confluent-kafka-python: AvroSerializer, ProtobufSerializer, JSONSerializer),
never with weir's encoder.

Each input line is one record:
  {"key": <json or null>, "value": <json object or null>,
   "partition": <int, optional>, "timestamp": <epoch ms, optional>,
   "headers": {"name": "text", ...} (optional)}
A null value writes a tombstone. With --raw-value-hex a line carries
"value_hex": "00000001ff..." (or null) instead of "value" and those bytes are
written as they are (bad-input tests: wrong magic byte, truncated record,
unknown schema id).

Subjects follow TopicNameStrategy (<topic>-value, <topic>-key); schemas are
registered automatically. Keys: --key-format string (the default: a JSON
string's text, anything else as JSON text), json (JSON text), raw (a hex
string), avro (with --key-schema, registered as <topic>-key).

Exits 0 only when every record was delivered; prints the count on stderr.

  produce.py --topic T --format avro --schema order.avsc < records.jsonl
  produce.py --topic T --format protobuf --schema order.proto --message shop.Order < records.jsonl
  produce.py --topic T --format json-schema --schema order.schema.json < records.jsonl
  produce.py --topic T --raw-value-hex < bad.jsonl
"""

import argparse
import json
import sys
import time

from common import DEFAULT_REGISTRY, AvroJson, json_to_pb, proto_message_from_file, registry_client

TOOL = "produce.py"


def fail(message):
    print(f"{TOOL}: {message}", file=sys.stderr)
    sys.exit(1)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--topic", required=True)
    p.add_argument("--bootstrap", default="127.0.0.1:9092")
    p.add_argument("--registry", default=DEFAULT_REGISTRY, help="the Confluent-API URL (default $WEIR_REGISTRY_URL)")
    p.add_argument("--format", choices=["avro", "protobuf", "json-schema"], help="value format")
    p.add_argument("--schema", help="value schema: .avsc, .proto or JSON Schema file")
    p.add_argument("--message", help="protobuf: the value message's full name, e.g. shop.Order")
    p.add_argument("--key-format", choices=["string", "json", "raw", "avro"], default="string")
    p.add_argument("--key-schema", help="key schema (.avsc) for --key-format avro")
    p.add_argument("--raw-value-hex", action="store_true", help="lines carry value_hex: write those bytes as they are")
    p.add_argument("--proto-schema-as", choices=["descriptor", "text"], default="descriptor",
                   help="protobuf: register the schema as confluent-kafka-python does (a base64 "
                        "FileDescriptorProto, the default) or as the .proto file's text")
    p.add_argument("--no-skip-known-types", action="store_true",
                   help="protobuf: also register google/protobuf/*.proto imports as references")
    p.add_argument("--compression", default="none", help="producer compression.type")
    a = p.parse_args()
    if not a.raw_value_hex:
        if not a.format or not a.schema:
            p.error("--format and --schema are required (or --raw-value-hex)")
        if a.format == "protobuf" and not a.message:
            p.error("--format protobuf needs --message (the full name, e.g. shop.Order)")
    if a.key_format == "avro" and not a.key_schema:
        p.error("--key-format avro needs --key-schema")
    return a


def value_serializer(a, client):
    """(convert JSON -> object, confluent serializer) for the value."""
    from confluent_kafka.schema_registry import Schema

    conf = {"auto.register.schemas": True}
    text = open(a.schema).read()
    if a.format == "avro":
        from confluent_kafka.schema_registry.avro import AvroSerializer

        conv = AvroJson(json.loads(text))
        return conv.convert, AvroSerializer(client, text, conf=conf)
    if a.format == "json-schema":
        from confluent_kafka.schema_registry.json_schema import JSONSerializer

        json.loads(text)  # a clear error for a file that is not JSON
        return (lambda v: v), JSONSerializer(text, client, conf=conf)
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

    cls, _ = proto_message_from_file(a.schema, a.message)
    conf["skip.known.types"] = not a.no_skip_known_types
    ser = ProtobufSerializer(cls, client, conf)
    if a.proto_schema_as == "text":
        # Register the file's text (as protoc users and Confluent's own
        # registry show it) instead of the serialized descriptor.
        ser._schema = Schema(text, schema_type="PROTOBUF")
    return (lambda v: json_to_pb(cls, v)), ser


def key_serializer(a, client):
    if a.key_format == "avro":
        from confluent_kafka.schema_registry.avro import AvroSerializer

        text = open(a.key_schema).read()
        conv = AvroJson(json.loads(text))
        ser = AvroSerializer(client, text, conf={"auto.register.schemas": True})
        return lambda k, ctx: ser(conv.convert(k), ctx)
    if a.key_format == "raw":
        return lambda k, ctx: bytes.fromhex(k)
    if a.key_format == "json":
        return lambda k, ctx: json.dumps(k, separators=(",", ":")).encode()
    return lambda k, ctx: (k if isinstance(k, str) else json.dumps(k, separators=(",", ":"))).encode()


def registry_retry(call):
    """`call()`, tried again when the registry refuses a registration with
    HTTP 409 ("already exists") or 500: Apicurio 2.4.2 answers so to one of
    two registrations of identical content under different subjects that
    race (another test's writer of the same schema), and the registration
    succeeds when tried again, as weir's own client does it
    (src/format/registry.rs)."""
    for attempt in range(6):
        try:
            return call()
        except Exception as e:  # noqa: BLE001 - only the registry's 409/500 are retried
            status = getattr(e, "http_status_code", None)
            if status not in (409, 500) or attempt == 5:
                raise
            time.sleep(0.2 * (attempt + 1))


def main():
    a = parse_args()
    from confluent_kafka import KafkaException, Producer
    from confluent_kafka.serialization import MessageField, SerializationContext

    needs_registry = not a.raw_value_hex or a.key_format == "avro"
    client = registry_client(a.registry) if needs_registry else None
    try:
        to_value, value_ser = (None, None) if a.raw_value_hex else value_serializer(a, client)
        key_ser = key_serializer(a, client)
    except (OSError, ValueError) as e:
        fail(str(e))

    producer = Producer({
        "bootstrap.servers": a.bootstrap,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        "compression.type": a.compression,
        # The Java client's default: keyed records land where a Java producer puts them.
        "partitioner": "murmur2_random",
        "message.timeout.ms": 30000,
    })
    state = {"delivered": 0, "failed": 0, "first_error": None}

    def on_delivery(err, msg):
        if err is not None:
            state["failed"] += 1
            if state["first_error"] is None:
                state["first_error"] = f"partition {msg.partition()}: {err}"
        else:
            state["delivered"] += 1

    key_ctx = SerializationContext(a.topic, MessageField.KEY)
    value_ctx = SerializationContext(a.topic, MessageField.VALUE)
    total = 0
    started = time.monotonic()
    for lineno, line in enumerate(sys.stdin, 1):
        line = line.strip()
        if not line:
            continue
        try:
            rec = json.loads(line)
            if not isinstance(rec, dict):
                raise ValueError("a line must be a JSON object")
            key = rec.get("key")
            kbytes = None if key is None else registry_retry(lambda: key_ser(key, key_ctx))
            if a.raw_value_hex:
                vh = rec.get("value_hex")
                vbytes = None if vh is None else bytes.fromhex(vh)
            else:
                value = rec.get("value")
                vbytes = None if value is None else registry_retry(
                    lambda: value_ser(to_value(value), value_ctx))
        except Exception as e:  # noqa: BLE001 - report any input or serializer error with its line
            fail(f"line {lineno}: {type(e).__name__}: {e}")
        kwargs = {"key": kbytes, "value": vbytes, "on_delivery": on_delivery}
        if rec.get("partition") is not None:
            kwargs["partition"] = int(rec["partition"])
        if rec.get("timestamp") is not None:
            kwargs["timestamp"] = int(rec["timestamp"])
        if rec.get("headers"):
            kwargs["headers"] = [(k, None if v is None else str(v).encode()) for k, v in rec["headers"].items()]
        while True:
            try:
                producer.produce(a.topic, **kwargs)
                break
            except BufferError:
                producer.poll(0.05)
            except KafkaException as e:
                fail(f"line {lineno}: {e}")
        total += 1
        if total % 1000 == 0:
            producer.poll(0)
    remaining = producer.flush(60)
    elapsed = time.monotonic() - started
    if remaining or state["failed"] or state["delivered"] != total:
        fail(f"delivered {state['delivered']} of {total} records to {a.topic} "
             f"({state['failed']} failed, {remaining} undelivered; first error: {state['first_error']})")
    print(f"{TOOL}: delivered {total} records to {a.topic} in {elapsed:.2f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
