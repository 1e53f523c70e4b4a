#!/usr/bin/env python3
"""A timeline of one weir process: CPU by thread, every 100 ms.

Waits for a process whose command line contains PATTERN (default
`weir run`), samples /proc/PID/task/*/stat until it exits, and prints per
STEP (default 0.5 s) each thread group's share of a core, grouped by
thread name with digits folded (`rdk:broker1` and `rdk:broker2` are
`rdk:broker#`). When the process's stdout is a file (the benchmarks log
there), the log lines that mark the pipeline's progress are printed on
the same time axis: the first record read, each checkpoint's completion
and each sink transaction's commit.

Used for #43 target 5 (what paces the simple Nexmark queries):

    bench/timeline.py & target/release/weir-bench nexmark --systems weir \
        --queries pipe --events 1000000 --rounds 1

Reads /proc only: the process is not slowed by anything but the sampling.
"""
import argparse
import collections
import json
import os
import re
import sys
import time

TICK = os.sysconf("SC_CLK_TCK")


def find(pattern, timeout):
    deadline = time.time() + timeout
    me = os.getpid()
    while time.time() < deadline:
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or int(pid) == me:
                continue
            try:
                cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if pattern in cmd and "timeline.py" not in cmd:
                return int(pid)
        time.sleep(0.02)
    sys.exit(f"timeline: no process matching {pattern!r} within {timeout} s")


def threads(pid):
    """{tid: (name, cpu ticks)} of every thread alive now."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for tid in tids:
        try:
            stat = open(f"/proc/{pid}/task/{tid}/stat").read()
        except OSError:
            continue
        # The name is in parentheses and may hold spaces.
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        out[tid] = (name, int(fields[11]) + int(fields[12]))
    return out


def group(name):
    return re.sub(r"\d+", "#", name)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pattern", default="weir run")
    ap.add_argument("--step", type=float, default=0.5)
    ap.add_argument("--wait", type=float, default=600)
    ap.add_argument("--json", help="also write the samples here")
    ap.add_argument("--save-log", help="also copy the process's whole log here")
    args = ap.parse_args()
    pid = find(args.pattern, args.wait)
    started = time.time()
    try:
        log_path = os.readlink(f"/proc/{pid}/fd/1")
        # Held open: the benchmark deletes its directory when the run ends.
        log = open(log_path, errors="replace")
    except OSError:
        log_path, log = None, None
    print("process found at " + time.strftime("%H:%M:%S", time.gmtime(started))
          + f".{int(started % 1 * 1000):03d} UTC")
    samples = []  # (t, {tid: (name, ticks)})
    while True:
        t = threads(pid)
        if not t:
            break
        samples.append((time.time() - started, t))
        time.sleep(0.1)
    # CPU per group per step.
    buckets = collections.defaultdict(lambda: collections.Counter())
    seen = {}
    for at, t in samples:
        b = int(at / args.step)
        for tid, (name, ticks) in t.items():
            prev = seen.get(tid, 0)
            buckets[b][group(name)] += ticks - prev
            seen[tid] = ticks
    names = sorted({n for c in buckets.values() for n in c},
                   key=lambda n: -sum(c[n] for c in buckets.values()))
    shown = [n for n in names if sum(c[n] for c in buckets.values()) > 0][:8]
    print("t_s " + " ".join(f"{n[:14]:>14}" for n in shown) + "      total")
    for b in sorted(buckets):
        c = buckets[b]
        share = lambda n: c[n] / TICK / args.step
        print(f"{b * args.step:4.1f} " + " ".join(f"{share(n):14.2f}" for n in shown)
              + f" {sum(c.values()) / TICK / args.step:10.2f}")
    totals = collections.Counter()
    for c in buckets.values():
        totals.update(c)
    print("CPU-s by thread group: " + ", ".join(
        f"{n} {totals[n] / TICK:.2f}" for n in names if totals[n]))
    if log:
        marks = re.compile(r"first record read|checkpoint completed|committed|restor|listening")
        print(f"log ({log_path}):")
        lines = log.readlines()
        if args.save_log:
            open(args.save_log, "w").writelines(lines)
        for line in lines:
            if marks.search(line):
                print("  " + line.rstrip()[:220])
    if args.json:
        json.dump([(at, {k: v for k, v in t.items()}) for at, t in samples], open(args.json, "w"))


if __name__ == "__main__":
    main()
