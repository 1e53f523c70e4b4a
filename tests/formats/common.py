"""Shared pieces of produce.py and consume.py: the Schema Registry client,
Protobuf schemas built at run time (protoc from grpcio-tools, or a
FileDescriptorProto as the registry returns it), and the mapping between JSON
and Avro / Protobuf values.

JSON conventions, the same both ways:
  * Avro timestamp-millis / local-timestamp-millis: epoch milliseconds (int);
    the producer also takes an ISO-8601 string. timestamp-micros: epoch
    microseconds. date: days since 1970-01-01 (int); the producer also takes
    "YYYY-MM-DD". time-millis: milliseconds since midnight.
  * Avro decimal: a string ("12.30"); the producer also takes a number.
  * bytes (Avro bytes/fixed, Protobuf bytes, BytesValue): lowercase hex.
  * Protobuf google.protobuf.Timestamp: epoch milliseconds (int); the producer
    also takes an RFC 3339 string. Duration: milliseconds. Wrappers
    (Int64Value, ...): the plain value, or null when unset. int64: a JSON number.
"""

import base64
import datetime as dt
import decimal
import json
import os
import subprocess
import sys
import tempfile
import uuid

DEFAULT_REGISTRY = os.environ.get("WEIR_REGISTRY_URL", "http://127.0.0.1:8081/apis/ccompat/v7")
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
EPOCH_DATE = dt.date(1970, 1, 1)


def die(tool, message, code=1):
    print(f"{tool}: {message}", file=sys.stderr)
    sys.exit(code)


def registry_client(url):
    from confluent_kafka.schema_registry import SchemaRegistryClient

    return SchemaRegistryClient({"url": url})


# --------------------------------------------------------------------------
# Protobuf schemas
# --------------------------------------------------------------------------

def _wkt_include():
    import grpc_tools

    return os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")


def _is_builtin(name):
    return name.startswith("google/protobuf/") or name.startswith("google/type/") or name.startswith("confluent/")


def compile_proto(path, include_dirs=()):
    """Compiles a .proto file with protoc (grpcio-tools) and returns the
    FileDescriptorProtos of it and of everything it imports, imports first."""
    from google.protobuf import descriptor_pb2
    from grpc_tools import protoc

    path = os.path.abspath(path)
    with tempfile.TemporaryDirectory(prefix="weir-proto-") as tmp:
        out = os.path.join(tmp, "set.pb")
        args = ["protoc", f"-I{os.path.dirname(path)}"]
        args += [f"-I{d}" for d in include_dirs]
        args += [f"-I{_wkt_include()}", "--include_imports", f"--descriptor_set_out={out}", path]
        # protoc reports errors on stderr itself.
        if protoc.main(args) != 0:
            raise ValueError(f"protoc could not compile {path}")
        fds = descriptor_pb2.FileDescriptorSet()
        with open(out, "rb") as f:
            fds.ParseFromString(f.read())
    return list(fds.file)


def pool_of(file_protos):
    """A fresh DescriptorPool holding the well-known types and the given
    files (in dependency order; files already present are skipped)."""
    from google.protobuf import descriptor_pool
    from google.protobuf import (any_pb2, duration_pb2, empty_pb2, field_mask_pb2, struct_pb2,
                                 timestamp_pb2, wrappers_pb2)

    pool = descriptor_pool.DescriptorPool()
    for m in (any_pb2, duration_pb2, empty_pb2, field_mask_pb2, struct_pb2, timestamp_pb2, wrappers_pb2):
        pool.AddSerializedFile(m.DESCRIPTOR.serialized_pb)
    for fp in file_protos:
        try:
            pool.FindFileByName(fp.name)
            continue
        except KeyError:
            pass
        pool.Add(fp)
    return pool


def message_class(pool, full_name):
    from google.protobuf.message_factory import GetMessageClass

    try:
        return GetMessageClass(pool.FindMessageTypeByName(full_name))
    except KeyError:
        raise ValueError(f"no message {full_name!r} in the schema (give the full name, package included)")


def proto_message_from_file(path, full_name):
    files = compile_proto(path)
    pool = pool_of(files)
    return message_class(pool, full_name), files[-1]


def message_by_indexes(file_proto, indexes):
    """The full name of the message that Confluent's message indexes point
    at in a FileDescriptorProto ([0] is its first top-level message)."""
    path = []
    messages = file_proto.message_type
    for i in indexes:
        if i < 0 or i >= len(messages):
            raise ValueError(f"message index {i} out of range in {indexes}")
        path.append(messages[i].name)
        messages = messages[i].nested_type
    pkg = file_proto.package
    return (pkg + "." if pkg else "") + ".".join(path)


def read_message_indexes(buf, pos):
    """Confluent Protobuf framing after the magic byte and the schema id: a
    zigzag varint count, then that many zigzag varint indexes; a count of 0
    (the single byte 0x00) means [0]. Returns (indexes, position after)."""

    def varint(p):
        shift = result = 0
        while True:
            if p >= len(buf):
                raise ValueError("truncated message indexes")
            b = buf[p]
            p += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                break
            shift += 7
            if shift > 63:
                raise ValueError("message index varint too long")
        return (result >> 1) ^ -(result & 1), p

    count, pos = varint(pos)
    if count == 0:
        return [0], pos
    if count < 0 or count > 100:
        raise ValueError(f"bad message index count {count}")
    indexes = []
    for _ in range(count):
        i, pos = varint(pos)
        indexes.append(i)
    return indexes, pos


class RegistryProtobuf:
    """Protobuf writer schemas fetched from the registry by id. The registry
    may hold a schema as .proto text or as a base64 FileDescriptorProto
    (what confluent-kafka-python registers; Apicurio 2.4.2 stores and returns
    it as given). References are fetched by subject and version; the
    well-known types (google/protobuf/*) are built in."""

    def __init__(self, client):
        self.client = client
        self.by_id = {}

    def _files_of(self, schema, name, tmp, seen):
        """FileDescriptorProtos of a registry schema and its references,
        references first. Text schemas are written under tmp and compiled."""
        from google.protobuf import descriptor_pb2

        files = []
        for ref in schema.references or []:
            if _is_builtin(ref.name) or ref.name in seen:
                continue
            seen.add(ref.name)
            registered = self.client.get_version(ref.subject, ref.version)
            files += self._files_of(registered.schema, ref.name, tmp, seen)
        text = schema.schema_str
        fp = None
        try:
            raw = base64.b64decode(text, validate=True)
            fp = descriptor_pb2.FileDescriptorProto()
            fp.ParseFromString(raw)
            fp.name = name
        except Exception:
            fp = None
        if fp is None:
            target = os.path.join(tmp, name)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "w") as f:
                f.write(text)
            compiled = compile_proto(target, include_dirs=[tmp])
            # protoc names the main file relative to its own folder; every
            # other file is an import, already named as imported.
            compiled[-1].name = name
            files += compiled
        else:
            files.append(fp)
        return files

    def decoder(self, schema_id):
        if schema_id not in self.by_id:
            schema = self.client.get_schema(schema_id)
            with tempfile.TemporaryDirectory(prefix="weir-proto-") as tmp:
                files = self._files_of(schema, f"schema-{schema_id}.proto", tmp, set())
            main = files[-1]
            self.by_id[schema_id] = (pool_of(files), main)
        return self.by_id[schema_id]

    def decode(self, data):
        if len(data) < 6 or data[0] != 0:
            raise ValueError(f"not Confluent-framed Protobuf (first bytes {data[:6].hex()})")
        schema_id = int.from_bytes(data[1:5], "big")
        indexes, pos = read_message_indexes(data, 5)
        pool, main = self.decoder(schema_id)
        cls = message_class(pool, message_by_indexes(main, indexes))
        msg = cls()
        msg.ParseFromString(data[pos:])
        return msg


# --------------------------------------------------------------------------
# JSON -> Protobuf (produce.py)
# --------------------------------------------------------------------------

def _is_repeated(field):
    r = getattr(field, "is_repeated", None)
    if r is not None:
        return r
    return field.label == field.LABEL_REPEATED


def _is_map(field):
    return field.message_type is not None and field.message_type.GetOptions().map_entry and _is_repeated(field)


def _ms_to_rfc3339(ms):
    t = EPOCH + dt.timedelta(milliseconds=int(ms))
    return t.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _json_to_pb_value(field, value):
    from google.protobuf.descriptor import FieldDescriptor

    if value is None:
        return None
    mt = field.message_type
    if mt is not None:
        name = mt.full_name
        if name == "google.protobuf.Timestamp" and isinstance(value, (int, float)) and not isinstance(value, bool):
            return _ms_to_rfc3339(value)
        if name == "google.protobuf.Duration" and isinstance(value, (int, float)) and not isinstance(value, bool):
            return f"{decimal.Decimal(int(value)) / 1000}s"
        if name == "google.protobuf.BytesValue" and isinstance(value, str):
            return base64.b64encode(bytes.fromhex(value)).decode()
        if isinstance(value, dict) and not name.startswith("google.protobuf."):
            return json_to_pb_dict(mt, value)
        return value
    if field.type == FieldDescriptor.TYPE_BYTES and isinstance(value, str):
        return base64.b64encode(bytes.fromhex(value)).decode()
    return value


_FIELDS = {}


def json_to_pb_dict(descriptor, value):
    """Rewrites a JSON object into what json_format.ParseDict takes: hex
    bytes to base64, epoch-ms Timestamps to RFC 3339, recursively."""
    fields = _FIELDS.get(descriptor.full_name)
    if fields is None:
        fields = {}
        for f in descriptor.fields:
            fields[f.name] = f
            fields[f.json_name] = f
        _FIELDS[descriptor.full_name] = fields
    out = {}
    for k, v in value.items():
        f = fields.get(k)
        if f is None:
            raise ValueError(f"{descriptor.full_name} has no field {k!r}")
        if v is None:
            continue
        if _is_map(f):
            vf = f.message_type.fields_by_name["value"]
            out[k] = {mk: _json_to_pb_value(vf, mv) for mk, mv in v.items()}
        elif _is_repeated(f):
            out[k] = [_json_to_pb_value(f, x) for x in v]
        else:
            out[k] = _json_to_pb_value(f, v)
    return out


def json_to_pb(cls, value):
    from google.protobuf import json_format

    msg = cls()
    json_format.ParseDict(json_to_pb_dict(cls.DESCRIPTOR, value), msg)
    return msg


# --------------------------------------------------------------------------
# Protobuf -> JSON (consume.py)
# --------------------------------------------------------------------------

_WRAPPERS = {
    "google.protobuf.DoubleValue", "google.protobuf.FloatValue", "google.protobuf.Int64Value",
    "google.protobuf.UInt64Value", "google.protobuf.Int32Value", "google.protobuf.UInt32Value",
    "google.protobuf.BoolValue", "google.protobuf.StringValue", "google.protobuf.BytesValue",
}


def _is_synthetic_oneof(oneof):
    syn = getattr(oneof, "is_synthetic", None)
    if syn is not None:
        return syn() if callable(syn) else syn
    return len(oneof.fields) == 1 and oneof.name == "_" + oneof.fields[0].name


def _pb_scalar(field, v):
    from google.protobuf.descriptor import FieldDescriptor

    if field.type == FieldDescriptor.TYPE_BYTES:
        return v.hex()
    if field.type == FieldDescriptor.TYPE_ENUM:
        ev = field.enum_type.values_by_number.get(v)
        return ev.name if ev is not None else v
    return v


def _pb_value(field, v):
    if field.message_type is not None:
        return pb_to_json(v)
    return _pb_scalar(field, v)


def pb_to_json(msg):
    """A message as JSON: every field in declaration order by its .proto
    name; unset message fields and proto3 `optional` fields are null; of a
    oneof only the member that is set appears; map entries in key order."""
    from google.protobuf import json_format

    d = msg.DESCRIPTOR
    name = d.full_name
    if name == "google.protobuf.Timestamp":
        return msg.seconds * 1000 + msg.nanos // 1_000_000
    if name == "google.protobuf.Duration":
        return msg.seconds * 1000 + int(msg.nanos / 1_000_000)
    if name in _WRAPPERS:
        return _pb_scalar(d.fields_by_name["value"], msg.value)
    if name in ("google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue",
                "google.protobuf.Any", "google.protobuf.FieldMask", "google.protobuf.Empty"):
        return json_format.MessageToDict(msg, preserving_proto_field_name=True)
    out = {}
    for f in d.fields:
        if _is_map(f):
            vf = f.message_type.fields_by_name["value"]
            m = getattr(msg, f.name)
            # Map order on the wire is unspecified: keys sorted (natively).
            out[f.name] = {_map_key(k): _pb_value(vf, m[k]) for k in sorted(m)}
        elif _is_repeated(f):
            out[f.name] = [_pb_value(f, x) for x in getattr(msg, f.name)]
        else:
            oneof = f.containing_oneof
            if oneof is not None and not _is_synthetic_oneof(oneof):
                if msg.WhichOneof(oneof.name) == f.name:
                    out[f.name] = _pb_value(f, getattr(msg, f.name))
            elif f.message_type is not None or f.has_presence:
                out[f.name] = _pb_value(f, getattr(msg, f.name)) if msg.HasField(f.name) else None
            else:
                out[f.name] = _pb_scalar(f, getattr(msg, f.name))
    return out


def _map_key(k):
    if isinstance(k, bool):
        return "true" if k else "false"
    return str(k)


# --------------------------------------------------------------------------
# JSON <-> Avro
# --------------------------------------------------------------------------

_PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}


def _fullname(name, namespace):
    if "." in name or not namespace:
        return name
    return f"{namespace}.{name}"


class AvroJson:
    """Turns JSON values into what fastavro writes, guided by the schema
    (logical types, hex bytes, union branches)."""

    def __init__(self, schema):
        self.schema = schema
        self.names = {}
        self._collect(schema, None)

    def _collect(self, s, ns):
        if isinstance(s, list):
            for b in s:
                self._collect(b, ns)
        elif isinstance(s, dict):
            t = s.get("type")
            if t in ("record", "error", "enum", "fixed"):
                ns2 = s.get("namespace", ns) if "." not in s["name"] else s["name"].rsplit(".", 1)[0]
                full = _fullname(s["name"], s.get("namespace", ns))
                self.names[full] = (s, ns2)
                self.names.setdefault(s["name"].rsplit(".", 1)[-1], (s, ns2))
                if t in ("record", "error"):
                    for f in s.get("fields", []):
                        self._collect(f["type"], ns2)
            elif t == "array":
                self._collect(s["items"], ns)
            elif t == "map":
                self._collect(s["values"], ns)
            elif isinstance(t, (dict, list)):
                self._collect(t, ns)

    def _resolve(self, s, ns):
        """(schema dict or primitive name, namespace) for s."""
        if isinstance(s, str):
            if s in _PRIMITIVES:
                return s, ns
            key = _fullname(s, ns)
            if key in self.names:
                return self.names[key]
            if s in self.names:
                return self.names[s]
            raise ValueError(f"unknown Avro type {s!r}")
        if isinstance(s, dict) and s.get("type") in _PRIMITIVES and not s.get("logicalType"):
            return s["type"], ns
        if isinstance(s, dict) and isinstance(s.get("type"), (dict, list)):
            return self._resolve(s["type"], ns)
        if isinstance(s, dict) and isinstance(s.get("type"), str) and s["type"] not in _PRIMITIVES \
                and s["type"] not in ("record", "error", "enum", "fixed", "array", "map"):
            return self._resolve(s["type"], ns)
        return s, ns

    def convert(self, value):
        return self._to(self.schema, value, None)

    def _matches(self, s, v):
        t = s if isinstance(s, str) else s.get("type")
        lt = None if isinstance(s, str) else s.get("logicalType")
        if v is None:
            return t == "null"
        if isinstance(v, bool):
            return t == "boolean"
        if isinstance(v, int):
            return t in ("int", "long", "float", "double") or lt == "decimal"
        if isinstance(v, float):
            return t in ("float", "double") or lt == "decimal"
        if isinstance(v, str):
            if t == "string":
                return True
            if t == "enum":
                return v in s.get("symbols", [])
            if lt in ("decimal", "timestamp-millis", "timestamp-micros", "local-timestamp-millis",
                      "local-timestamp-micros", "date", "time-millis", "time-micros"):
                return True
            if t in ("bytes", "fixed"):
                try:
                    bytes.fromhex(v)
                    return True
                except ValueError:
                    return False
            return False
        if isinstance(v, list):
            return t == "array"
        if isinstance(v, dict):
            if t in ("record", "error"):
                names = {f["name"] for f in s.get("fields", [])}
                return set(v) <= names
            return t == "map"
        return False

    def _to(self, s, v, ns):
        if isinstance(s, list):
            if v is None:
                if "null" in s or {"type": "null"} in s:
                    return None
                raise ValueError("null for a union without null")
            branches = [self._resolve(b, ns) for b in s]
            # The first branch, in the union's order, that the value fits.
            for b, bns in branches:
                if self._matches(b, v):
                    out = self._to(b, v, bns)
                    named = [x for x, _ in branches if isinstance(x, dict) and x.get("type") in
                             ("record", "error", "enum", "fixed")]
                    if isinstance(b, dict) and b in named and len(named) > 1:
                        return (_fullname(b["name"], b.get("namespace", bns)), out)
                    return out
            raise ValueError(f"{json.dumps(v)[:80]} matches no branch of union {json.dumps(s)[:200]}")
        s, ns = self._resolve(s, ns)
        if v is None:
            return None
        if isinstance(s, str):
            if s == "bytes" and isinstance(v, str):
                return bytes.fromhex(v)
            if s in ("float", "double") and isinstance(v, int) and not isinstance(v, bool):
                return float(v)
            return v
        t = s.get("type")
        lt = s.get("logicalType")
        if lt == "decimal":
            if isinstance(v, float):
                return decimal.Decimal(repr(v))
            return decimal.Decimal(str(v))
        if lt in ("timestamp-millis", "timestamp-micros") and isinstance(v, str):
            t0 = dt.datetime.fromisoformat(v)
            return t0 if t0.tzinfo else t0.replace(tzinfo=dt.timezone.utc)
        if lt in ("local-timestamp-millis", "local-timestamp-micros") and isinstance(v, str):
            return dt.datetime.fromisoformat(v).replace(tzinfo=None)
        if lt == "date" and isinstance(v, str):
            return dt.date.fromisoformat(v)
        if lt in ("time-millis", "time-micros") and isinstance(v, str):
            return dt.time.fromisoformat(v)
        if lt == "uuid" and isinstance(v, str):
            return v
        if t in ("record", "error"):
            if not isinstance(v, dict):
                raise ValueError(f"record {s['name']} needs a JSON object, not {json.dumps(v)[:80]}")
            rns = s.get("namespace", ns) if "." not in s["name"] else s["name"].rsplit(".", 1)[0]
            out = {}
            for f in s.get("fields", []):
                if f["name"] in v:
                    out[f["name"]] = self._to(f["type"], v[f["name"]], rns)
            extra = set(v) - {f["name"] for f in s.get("fields", [])}
            if extra:
                raise ValueError(f"record {s['name']} has no field(s) {sorted(extra)}")
            return out
        if t == "array":
            return [self._to(s["items"], x, ns) for x in v]
        if t == "map":
            return {k: self._to(s["values"], x, ns) for k, x in v.items()}
        if t == "fixed" and isinstance(v, str):
            return bytes.fromhex(v)
        if t in ("float", "double") and isinstance(v, int) and not isinstance(v, bool):
            return float(v)
        if t == "bytes" and isinstance(v, str):
            return bytes.fromhex(v)
        return v


def plain_json(v):
    """What fastavro (and friends) return, as plain JSON values."""
    if isinstance(v, dict):
        return {str(k): plain_json(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [plain_json(x) for x in v]
    if isinstance(v, dt.datetime):
        if v.tzinfo is None:
            v = v.replace(tzinfo=dt.timezone.utc)
        return (v - EPOCH) // dt.timedelta(milliseconds=1)
    if isinstance(v, dt.date):
        return (v - EPOCH_DATE).days
    if isinstance(v, dt.time):
        return ((v.hour * 60 + v.minute) * 60 + v.second) * 1000 + v.microsecond // 1000
    if isinstance(v, decimal.Decimal):
        return format(v, "f")
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).hex()
    if isinstance(v, uuid.UUID):
        return str(v)
    return v
