#!/usr/bin/env python3
"""Summarises a flat `perf report` by component of weir's hot path.

Reads `perf report --stdio --no-children -F overhead,dso,sym` on stdin and
prints the share of CPU samples per component, then the top symbols of each.
A symbol goes to the first component whose pattern it matches; the patterns
are substrings of demangled Rust/C++ names and librdkafka's C names.
"""
import re
import sys
from collections import defaultdict

# (component, patterns) in match order: specific before general.
COMPONENTS = [
    ("librdkafka produce", ["rd_kafka_msgset_writer", "rd_kafka_produce", "rd_kafka_msg_new",
                            "rd_kafka_msg_partitioner", "rd_kafka_msgq", "rd_kafka_toppar_producer",
                            "rd_kafka_broker_produce", "rd_kafka_producev", "rd_kafka_dr_",
                            "rd_kafka_msgbatch", "rd_kafka_msg_destroy", "rd_kafka_txn",
                            "rd_kafka_idemp", "murmur2", "rd_kafka_msg_sticky_partition",
                            "rd_kafka_msg_partitioner", "rd_kafka_topic_partition_available",
                            "rdkafka::producer", "rd_kafka_purge", "rd_kafka_curr_msgs"]),
    ("librdkafka consume", ["rd_kafka_msgset_reader", "rd_kafka_fetch", "rd_kafka_consume",
                            "rd_kafka_consumer", "rd_kafka_toppar_fetch", "rd_kafka_op_",
                            "rd_kafka_q_serve", "rd_kafka_poll", "rd_kafka_message_",
                            "rdkafka::consumer", "rdkafka::message", "rd_kafka_offset",
                            "rd_kafka_q_pop", "rd_kafka_q_enq", "rd_kafka_q_", "rd_kafka_event"]),
    ("librdkafka other (CRC, buffers, broker I/O)", ["rd_crc32", "crc32c", "rd_buf", "rd_slice",
                            "rd_kafka_", "rd_", "rdkafka"]),
    ("RocksDB", ["rocksdb", "Rocksdb", "LZ4", "lz4"]),
    ("state (write-back cache, keyed state)", ["weir::state", "ValueState", "KeyedState"]),
    ("hash maps and hashing", ["hashbrown", "ahash", "xxh", "fxhash", "murmur", "SipHasher",
                               "key_group", "core::hash"]),
    ("exchange (channels between tasks)", ["crossbeam", "mpsc", "weir::runtime::exchange",
                                           "std::sync::mpmc", "flume"]),
    ("decode (JSON, splitting words)", ["serde_json::de", "simd_json", "memchr", "weir::operators",
                                        "from_utf8", "core::str", "serde::de", "json::read"]),
    ("encode (output values)", ["serde_json::ser", "itoa", "ryu", "weir::runtime::output",
                                "format", "core::fmt"]),
    ("memory (malloc, free, memcpy)", ["malloc", "free", "realloc", "calloc", "memcpy", "memmove",
                                       "memset", "__rust_alloc", "__rust_dealloc", "alloc::",
                                       "_int_", "cfree", "tcache", "arena"]),
    ("locks and thread wake-ups", ["pthread_mutex", "pthread_cond", "futex", "parking_lot",
                                   "std::sync::mutex", "lll_lock", "__lll", "sem_"]),
    ("tokio and the admin endpoint", ["tokio", "axum", "hyper", "mio"]),
    ("weir runtime (tasks, alignment, sources)", ["weir::"]),
]

LINE = re.compile(r"^\s*([\d.]+)%\s+(\S+)\s+\[(.)\]\s+(.*)$")


def component(dso, kind, sym):
    for name, patterns in COMPONENTS:
        if any(p in sym for p in patterns):
            return name
    if kind == "k" or "kernel" in dso:
        return "kernel (syscalls, network, page faults, scheduling)"
    if dso.startswith("libc") or dso.startswith("ld-linux"):
        return "libc (other)"
    return "other"


def main():
    shares = defaultdict(float)
    top = defaultdict(list)
    for line in sys.stdin:
        m = LINE.match(line)
        if not m:
            continue
        pct, dso, kind, sym = float(m.group(1)), m.group(2), m.group(3), m.group(4).strip()
        c = component(dso, kind, sym)
        shares[c] += pct
        top[c].append((pct, sym))
    total = sum(shares.values())
    print("| component | share of CPU samples |")
    print("|---|---|")
    for c, pct in sorted(shares.items(), key=lambda kv: -kv[1]):
        print(f"| {c} | {pct / total * 100:.1f} % |")
    print()
    for c, pct in sorted(shares.items(), key=lambda kv: -kv[1]):
        syms = sorted(top[c], reverse=True)[:5]
        shown = ", ".join(f"{s[:70]} {p:.1f} %" for p, s in syms)
        print(f"- {c}: {shown}")


if __name__ == "__main__":
    main()
