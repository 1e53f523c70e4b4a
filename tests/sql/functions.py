#!/usr/bin/env python3
"""DuckDB's answers for weir's function table test (tests/functions.rs).

Reads one JSON document on stdin:

    {"columns": [["id", "BIGINT"], ["s", "VARCHAR"], ...],   # DuckDB types
     "rows": [[0, "text", ...], ...],                         # in column order
     "cases": [{"id": 7, "sql": "lpad(s, n, t)"}, ...]}

loads the rows into a DuckDB table `t` (TIMESTAMP values are given as
'YYYY-MM-DD HH:MM:SS.mmm' text, TIMESTAMPTZ values with their offset; the
session time zone is "zone", UTC if absent), and for each case
runs `SELECT TRY(<sql>) FROM t ORDER BY id`: a value DuckDB cannot compute
(an overflow, a malformed input) is NULL, as weir writes a value its
expression could not compute. Prints one JSON line per case:

    {"id": 7, "values": [...]}      one canonical value per row, in row order
    {"id": 7, "error": "..."}       DuckDB refused the expression itself

Canonical values are reference.py's (`canon`), with BLOB as lower-case hex.
This script never imports weir's code.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference import canon  # noqa: E402


def value(v):
    if isinstance(v, (bytes, bytearray)):
        return bytes(v).hex()
    return canon(v)


def main():
    import duckdb

    doc = json.load(sys.stdin)
    con = duckdb.connect(":memory:")
    # The session time zone of the run (a TIMESTAMPTZ is shown, cast and
    # read in it, as weir's [pipeline] time_zone does a TIMESTAMP_LTZ).
    con.execute("SET TimeZone = '%s'" % doc.get("zone", "UTC"))
    # The instant at which a zone's clocks show a wall-clock time, by
    # java.time's rule (Flink's): the earlier of the two in a fall-back
    # fold. DuckDB's casts (ICU) take the later one.
    con.execute(
        "CREATE MACRO earlier(ts) AS CASE "
        "WHEN ((ts - INTERVAL 1 HOUR)::TIMESTAMPTZ + INTERVAL 1 HOUR)::TIMESTAMP = ts "
        "THEN (ts - INTERVAL 1 HOUR)::TIMESTAMPTZ + INTERVAL 1 HOUR ELSE ts::TIMESTAMPTZ END")
    con.execute(
        "CREATE MACRO earlier_in(z, ts) AS CASE "
        "WHEN timezone(z, timezone(z, ts - INTERVAL 1 HOUR) + INTERVAL 1 HOUR) = ts "
        "THEN timezone(z, ts - INTERVAL 1 HOUR) + INTERVAL 1 HOUR ELSE timezone(z, ts) END")
    columns = doc["columns"]
    con.execute("CREATE TABLE t (%s)" % ", ".join("%s %s" % (n, ty) for n, ty in columns))
    marks = ", ".join("?" for _ in columns)
    con.executemany("INSERT INTO t VALUES (%s)" % marks, doc["rows"])
    out = sys.stdout
    out.reconfigure(encoding="utf-8")
    for case in doc["cases"]:
        try:
            rows = con.execute("SELECT TRY(%s) FROM t ORDER BY id" % case["sql"]).fetchall()
            line = {"id": case["id"], "values": [value(r[0]) for r in rows]}
        except duckdb.Error as e:
            line = {"id": case["id"], "error": str(e)}
        out.write(json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
