#!/usr/bin/env python3
"""Compares the outputs of nexmark-bid-check.sql (read_committed) with DuckDB's
answers over the same bids, row by row.

  check.py BOOTSTRAP PREFIX DATADIR REFERENCE_PY

Rows of the far-future flush bids (auction 1) are left out. Flink's JSON is
normalised first: TIMESTAMP_LTZ(3) is written "...SS.fffZ" with trailing zeros
of the fraction dropped ("10:00:05.56Z", "10:00:05Z"), TIMESTAMP(3) without the
"Z"; DECIMAL values are compared as numbers. For the upsert topic (q17) the
last value of each key is the result (an empty value deletes the key).
Exit code 1 on any difference.
"""
import json
import subprocess
import sys
from decimal import Decimal

BOOTSTRAP, PREFIX, DATA, REFERENCE = sys.argv[1:5]


def kafka(topic, keys=False):
    fmt = '%k\t%s\n' if keys else '%s\n'
    out = subprocess.run(
        ['kcat', '-C', '-b', BOOTSTRAP, '-t', f'{PREFIX}-{topic}', '-o', 'beginning', '-e', '-q',
         '-X', 'isolation.level=read_committed', '-f', fmt],
        capture_output=True, text=True, check=True).stdout
    return [line for line in out.split('\n') if line]


def duck(sql):
    out = subprocess.run([sys.executable, REFERENCE, 'query', '--dir', DATA, '--sql', sql],
                         capture_output=True, text=True, check=True).stdout
    return [json.loads(line) for line in out.split('\n') if line]


def ts3(s):
    """'2026-11-30T10:00:05.56Z' / '2026-11-30T10:00:05' -> '2026-11-30T10:00:05.560Z'."""
    base, _, frac = s.rstrip('Z').partition('.')
    return base + '.' + (frac + '000')[:3] + 'Z'


def flush(r):
    return r.get('auction') == 1


ok = True


def report(name, got, want):
    global ok
    same = sorted(got) == sorted(want)
    ok &= same
    print(f'{name}: flink {len(got)} rows, duckdb {len(want)} rows, {"same" if same else "DIFFERENT"}')
    if not same:
        g, w = set(got), set(want)
        print('  only flink: ', sorted(g - w)[:3])
        print('  only duckdb:', sorted(w - g)[:3])


def dumps(r):
    return json.dumps(r, sort_keys=True)


rows = [json.loads(line) for line in kafka('q0')]
for r in rows:
    r['date_time'] = ts3(r['date_time'])
report('q0', [dumps(r) for r in rows if not flush(r)],
       [dumps(r) for r in duck('SELECT auction, bidder, price, date_time, extra FROM bid')])


def q1row(r):
    return (r['auction'], r['bidder'], Decimal(str(r['price'])).normalize(), ts3(r['date_time']), r['extra'])


rows = [json.loads(line, parse_float=Decimal) for line in kafka('q1')]
report('q1', [q1row(r) for r in rows if not flush(r)],
       [q1row(r) for r in duck('SELECT auction, bidder, 0.908 * price AS price, date_time, extra FROM bid')])

report('q2', [dumps(json.loads(line)) for line in kafka('q2')],
       [dumps(r) for r in duck('SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0')])

rows = [json.loads(line) for line in kafka('tumble')]
report('tumble', [(r['auction'], ts3(r['window_start']), ts3(r['window_end']), r['num']) for r in rows],
       [(r['auction'], r['window_start'], r['window_end'], r['num']) for r in duck(
           'SELECT auction, to_timestamp((epoch_ms(date_time) // 10000) * 10) AS window_start, '
           'to_timestamp((epoch_ms(date_time) // 10000) * 10 + 10) AS window_end, COUNT(*) AS num '
           'FROM bid GROUP BY 1, 2, 3')])

final = {}
records = kafka('q17', keys=True)
for line in records:
    key, _, value = line.partition('\t')
    if value:
        final[key] = json.loads(value)
    else:
        final.pop(key, None)
print(f'q17: {len(records)} upserts in the topic, {len(final)} keys (incl. the flush bid\'s)')
report('q17', [dumps(v) for v in final.values() if not flush(v)], [dumps(r) for r in duck(
    "SELECT auction, strftime(date_time, '%Y-%m-%d') AS day, COUNT(*) AS total_bids, "
    'MIN(price) AS min_price, MAX(price) AS max_price, SUM(price) AS sum_price FROM bid GROUP BY 1, 2')])

print('flink-sql check: all outputs equal DuckDB' if ok else 'flink-sql check: MISMATCH')
sys.exit(0 if ok else 1)
