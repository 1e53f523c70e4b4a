#!/usr/bin/env python3
"""Input generator and result checker for the windowed-count benchmark peers.

The job (weir, bench/peers/flink/.../FlinkWindowedCount.java,
bench/peers/kafka-streams/.../KafkaStreamsWindowedCount.java): JSON events
{"key":"k000123","ts":1764500000123,"amount":3.5}, event time = ts (epoch ms),
tumbling 10 s windows aligned to the epoch, out-of-orderness bound / grace 5 s,
one final count per (key, window) when the window closes, written as
{"key":"k000123","window_start":"2025-11-30T10:00:00.000Z",
 "window_end":"2025-11-30T10:00:10.000Z","count":42}
with Kafka key = the group key and record timestamp = window_end - 1 ms.

Generate (through `kcat -P`):
  windowed-check.py --generate 200000 --keys 10000 --topic T --partitions 4

  N events spread evenly over P partitions (Kafka key null). In each partition
  event i has ts = base + i ms, and --jitter-fraction of the events are moved
  back by up to --jitter-ms (default 3 s, inside the 5 s bound), so no event is
  ever late: the expected result is simply the count per (key, 10 s window).
  base defaults to now - (events per partition) ms - 60 s: the broker (Kafka 4
  rejects timestamps more than an hour ahead by default) and retention (7 days
  by record timestamp, which the outputs carry) both want times near now.
  Then, per partition, "flush" events with ts = (largest real ts) + 20 s push
  every partition's watermark (Flink) / every task's stream time (Kafka
  Streams) past the end + bound of every real window, so all of them close.
  Their keys are __flush__0, __flush__1, ...: enough of them that, hashed
  with Kafka's default partitioner (murmur2, as Kafka Streams' repartition
  topic does), every one of P partitions gets one -- Kafka Streams keeps
  stream time per task, so each task must see a flush event. The flush
  events form windows of their own that never close; the checker ignores
  every key that starts with __flush__.

  --no-flush leaves the flush events out, and
    windowed-check.py --flush --topic T [--flush-after-ms MS]
  appends them later (ts = largest ts in T + MS). Kafka Streams needs that
  on a pre-loaded input: it reads partitions unevenly and its stream time
  after the repartition is the maximum over all of them, so an inline flush
  event read early makes the unread rest of the other partitions late (and
  so does the partitions' own drift, unless grace covers it). For exact
  results run KafkaStreamsWindowedCount with a grace (7th argument, ms) of at
  least the input's event-time span, wait until its consumer group has
  committed the end of the input, then --flush with --flush-after-ms
  > 10 s + grace (e.g. 60000 and 80000 for 200,000 events on 4 partitions).

Check (reads both topics with `kcat -X isolation.level=read_committed`):
  windowed-check.py --input T --output T2

  Computes the expected final counts from the input independently and compares
  them with the output: exactly one record per (key, window), right count,
  exact value text, Kafka key, record timestamp. Prints `OK n results` and
  exits 0, or prints the first differences and exits 1. It also applies the
  lateness rule per partition in offset order (an event is late when its
  window_end <= (largest ts seen before it in its partition) - bound) and only
  expects windows that the flush events closed (window_end <= smallest
  per-partition max ts - bound); late events are reported and left out of the
  expected counts, since systems may legitimately disagree about them.
"""

import argparse
import json
import random
import subprocess
import sys
import time
from collections import Counter, defaultdict
from datetime import datetime, timezone

FLUSH_PREFIX = "__flush__"


def murmur2(data: bytes) -> int:
    """Kafka's org.apache.kafka.common.utils.Utils.murmur2 (signed 32-bit)."""
    m, r = 0x5BD1E995, 24
    length = len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    rest = length % 4
    tail = length - rest
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h ^= data[tail]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def kafka_partition(key: str, partitions: int) -> int:
    """The partition Kafka's default partitioner picks for a non-null key."""
    return (murmur2(key.encode()) & 0x7FFFFFFF) % partitions


def flush_keys(partitions: int) -> list[str]:
    """__flush__0, __flush__1, ... until every partition is hit at least once."""
    keys, hit, i = [], set(), 0
    while len(hit) < partitions:
        k = f"{FLUSH_PREFIX}{i}"
        p = kafka_partition(k, partitions)
        if p not in hit:
            hit.add(p)
            keys.append(k)
        i += 1
    return keys


def rfc3339_ms(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def result_value(key: str, start: int, window_ms: int, count: int) -> str:
    return json.dumps({
        "key": key,
        "window_start": rfc3339_ms(start),
        "window_end": rfc3339_ms(start + window_ms),
        "count": count,
    }, separators=(",", ":"), ensure_ascii=False)


def produce(bootstrap: str, topic: str, events: list[list[str]]) -> None:
    """events[p] = the values for partition p, in order (Kafka key null)."""
    for p, values in enumerate(events):
        if not values:
            continue
        subprocess.run(
            ["kcat", "-P", "-b", bootstrap, "-t", topic, "-p", str(p),
             "-X", "enable.idempotence=true", "-X", "linger.ms=20"],
            input=("\n".join(values) + "\n").encode(), check=True)


def flush_events(partitions: int, flush_ts: int) -> list[list[str]]:
    fkeys = flush_keys(partitions)
    return [[f'{{"key":"{k}","ts":{flush_ts},"amount":0.0}}' for k in fkeys] for _ in range(partitions)]


def flush(a) -> None:
    """Appends flush events after what the topic holds."""
    max_ts, partitions = None, set()
    for p, _o, _t, _k, value in consume(a.bootstrap, a.topic):
        partitions.add(p)
        try:
            ts = json.loads(value)["ts"]
        except Exception:
            continue
        max_ts = ts if max_ts is None else max(max_ts, ts)
    if max_ts is None:
        sys.exit(f"{a.topic} holds no events")
    n = max(partitions) + 1 if a.partitions is None else a.partitions
    flush_ts = max_ts + a.flush_after_ms
    produce(a.bootstrap, a.topic, flush_events(n, flush_ts))
    print(f"produced {len(flush_keys(n))} flush events per partition on {n} partitions at {flush_ts} "
          f"({rfc3339_ms(flush_ts)}; largest ts before: {max_ts})")


def generate(a) -> None:
    rng = random.Random(a.seed)
    a.partitions = a.partitions or 4
    per = [a.generate // a.partitions + (1 if p < a.generate % a.partitions else 0) for p in range(a.partitions)]
    base = a.base_ts if a.base_ts is not None else int(time.time() * 1000) - max(per) - 60_000
    events = [[] for _ in range(a.partitions)]
    max_ts = base
    for p in range(a.partitions):
        for i in range(per[p]):
            ts = base + i
            if rng.random() < a.jitter_fraction:
                ts -= rng.randint(0, a.jitter_ms)
            max_ts = max(max_ts, ts)
            key = f"k{rng.randrange(a.keys):06d}"
            amount = rng.randint(1, 200) / 2
            events[p].append(f'{{"key":"{key}","ts":{ts},"amount":{amount}}}')
    flush_ts = max_ts + a.flush_after_ms
    if not a.no_flush:
        for p, fl in enumerate(flush_events(a.partitions, flush_ts)):
            events[p].extend(fl)
    produce(a.bootstrap, a.topic, events)
    print(f"produced {sum(per)} events ({', '.join(map(str, per))} per partition), "
          f"ts {base}..{max_ts} ({rfc3339_ms(base)} .. {rfc3339_ms(max_ts)})"
          + ("" if a.no_flush else
             f", plus {len(flush_keys(a.partitions))} flush events per partition at {flush_ts} "
             f"({', '.join(flush_keys(a.partitions))})"))


def consume(bootstrap: str, topic: str):
    """(partition, offset, timestamp, key or None, value) of every committed record."""
    out = subprocess.run(
        ["kcat", "-C", "-b", bootstrap, "-t", topic, "-o", "beginning", "-e", "-q",
         "-X", "isolation.level=read_committed",
         "-f", "%p\t%o\t%T\t%K\t%k\t%s\n"],
        check=True, capture_output=True).stdout.decode()
    for line in out.splitlines():
        if not line:
            continue
        p, o, t, klen, rest = line.split("\t", 4)
        klen = int(klen)
        if klen < 0:  # null key: %K is -1 and %k empty
            key, value = None, rest.split("\t", 1)[1]
        else:
            key, value = rest[:klen], rest[klen + 1:]
        yield int(p), int(o), int(t), key, value


def check(a) -> int:
    w, bound = a.window_ms, a.bound_ms
    max_ts = {}  # partition -> largest ts so far
    expected = Counter()
    late = 0
    bad_input = 0
    n_in = 0
    for p, _o, _t, _k, value in sorted(consume(a.bootstrap, a.input), key=lambda r: (r[0], r[1])):
        try:
            e = json.loads(value)
            key, ts = e["key"], e["ts"]
            assert isinstance(key, str) and isinstance(ts, int)
        except Exception:
            bad_input += 1
            continue
        start = ts - ts % w
        seen = max_ts.get(p)
        if seen is not None and start + w <= seen - bound:
            late += 1
        elif not key.startswith(FLUSH_PREFIX):
            expected[(key, start)] += 1
            n_in += 1
        max_ts[p] = ts if seen is None else max(seen, ts)
    if not max_ts:
        print(f"input topic {a.input} is empty")
        return 1
    closed_until = min(max_ts.values()) - bound  # windows ending at or before this have closed
    open_windows = {kw for kw in expected if kw[1] + w > closed_until}
    for kw in open_windows:
        del expected[kw]
    notes = []
    if late:
        notes.append(f"{late} input events are late by the per-partition rule and not expected")
    if bad_input:
        notes.append(f"{bad_input} input records are not events and were skipped")
    if open_windows:
        notes.append(f"{len(open_windows)} (key, window) pairs never closed (no flush events?) and are not expected")

    diffs = []
    got = {}
    n_out = 0
    for p, o, t, key, value in consume(a.bootstrap, a.output):
        n_out += 1
        where = f"output {p}@{o}"
        try:
            r = json.loads(value)
            rkey, count = r["key"], r["count"]
            # fromisoformat takes any RFC 3339 form; the exact text is compared below.
            ws = datetime.fromisoformat(r["window_start"])
            start = int(ws.timestamp() * 1000) if ws.tzinfo else None
            assert start is not None, "window_start has no UTC offset"
        except Exception as ex:
            diffs.append(f"{where}: unreadable value {value!r} ({ex})")
            continue
        if rkey.startswith(FLUSH_PREFIX):
            continue
        canon = result_value(rkey, start, w, count)
        if value != canon:
            diffs.append(f"{where}: value {value!r}, expected the text {canon!r}")
        if key != rkey:
            diffs.append(f"{where}: Kafka key {key!r}, expected {rkey!r}")
        if t != start + w - 1:
            diffs.append(f"{where}: record timestamp {t}, expected window_end - 1 = {start + w - 1}")
        if (rkey, start) in got:
            diffs.append(f"{where}: second result for ({rkey}, {rfc3339_ms(start)}): "
                         f"count {count}, first was {got[(rkey, start)]}")
            continue
        got[(rkey, start)] = count
    for kw in sorted(set(expected) | set(got), key=lambda kw: (kw[1], kw[0])):
        want, have = expected.get(kw), got.get(kw)
        if want != have:
            label = f"({kw[0]}, {rfc3339_ms(kw[1])})"
            if have is None:
                diffs.append(f"missing {label}: expected count {want}")
            elif want is None:
                diffs.append(f"unexpected {label}: count {have}")
            else:
                diffs.append(f"wrong {label}: count {have}, expected {want}")
    for n in notes:
        print(f"note: {n}")
    if diffs:
        kinds = Counter(d.split(" ", 1)[0] if not d.startswith("output") else "output" for d in diffs)
        print(f"FAIL: {len(diffs)} differences ({dict(kinds)}); expected {len(expected)} results "
              f"from {n_in} events, read {n_out} output records")
        for d in diffs[:a.show]:
            print("  " + d)
        return 1
    print(f"OK {len(got)} results ({n_in} events, {n_out} output records)")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", default="127.0.0.1:9092")
    ap.add_argument("--window-ms", type=int, default=10_000)
    ap.add_argument("--bound-ms", type=int, default=5_000, help="out-of-orderness bound / grace")
    g = ap.add_argument_group("generate")
    g.add_argument("--generate", type=int, metavar="N", help="produce N events and exit")
    g.add_argument("--keys", type=int, default=10_000)
    g.add_argument("--topic")
    g.add_argument("--partitions", type=int, help="default 4 (--generate), the topic's (--flush)")
    g.add_argument("--jitter-ms", type=int, default=3_000)
    g.add_argument("--jitter-fraction", type=float, default=0.1)
    g.add_argument("--base-ts", type=int, help="first event time, epoch ms (default: near now)")
    g.add_argument("--seed", type=int, default=1)
    g.add_argument("--no-flush", action="store_true", help="leave out the flush events")
    g.add_argument("--flush", action="store_true", help="only append flush events to --topic")
    g.add_argument("--flush-after-ms", type=int, default=20_000,
                   help="flush ts = largest event ts + this (default 20 s)")
    c = ap.add_argument_group("check")
    c.add_argument("--input")
    c.add_argument("--output")
    c.add_argument("--show", type=int, default=20, help="differences to print")
    a = ap.parse_args()
    if a.flush:
        if not a.topic:
            ap.error("--flush needs --topic")
        flush(a)
        return 0
    if a.generate is not None:
        if not a.topic:
            ap.error("--generate needs --topic")
        if a.jitter_ms >= a.bound_ms:
            ap.error("--jitter-ms must stay below --bound-ms, or events would be late")
        generate(a)
        return 0
    if not (a.input and a.output):
        ap.error("give --generate N --topic T, or --input T --output T")
    return check(a)


if __name__ == "__main__":
    sys.exit(main())
