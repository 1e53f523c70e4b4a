#!/usr/bin/env python3
"""Independent reference for weir's SQL tests: Nexmark data + DuckDB answers.

Subcommands
-----------
gen    Write DIR/person.jsonl, DIR/auction.jsonl, DIR/bid.jsonl (one JSON object
       per line, in event-id order) and print {"person": n, "auction": n,
       "bid": n}.  Deterministic for a given --seed.

         reference.py gen --events N --seed S --out DIR
                          [--start-ms MS] [--rate-per-sec R] [--max-delay-ms D]

       The model follows the Nexmark generator (Beam / Flink / RisingWave): of
       every 50 events 1 is a person, 3 are auctions, 46 are bids; person and
       auction ids start at 1000; categories are 10..14; bids go mostly to the
       current "hot" auction and come mostly from a "hot" bidder; prices are
       round(100 * 10^(6u)).  Event i has base time start_ms + floor(i*1000/R),
       minus a uniform jitter in [0, D] ms (never later, never more than D), so
       each file is in event-time order up to D ms of disorder.
       Deviations from Nexmark, on purpose: ids only reference persons/auctions
       whose events came earlier (no "lead" into the future, and the early hot
       bidder is clamped), `extra` is a few characters instead of padding, and
       strings are shorter.  Because of the jitter, a bid's date_time may be
       up to D ms earlier than that of the auction/person it references.

query  Load each DIR/{person,auction,bid}.jsonl present (and the other tables
       of SCHEMAS: account_changes, side_input, probes, rate_changes, ttl_events, ...) as a
       DuckDB table named after the file stem, with an explicit schema
       (BIGINT, VARCHAR, BOOLEAN, and TIMESTAMP for date_time/expires/
       valid_from/t, session TimeZone=UTC),
       run the SQL and print one JSON object per result row, keys = column
       names in order.

         reference.py query --dir DIR (--sql-file F | --sql "SELECT ...")

       Canonical value forms (rows are then sorted by their JSON text):
         TIMESTAMP / TIMESTAMPTZ  "YYYY-MM-DDTHH:MM:SS.mmmZ" (UTC, exactly 3
                                  decimals; sub-millisecond digits truncated)
         integer types            JSON integer
         DOUBLE / REAL            JSON number (Python repr); NaN / Infinity /
                                  -Infinity as the strings "NaN", "Infinity",
                                  "-Infinity"
         DECIMAL(p,s)             JSON *string* with exactly s decimals, no
                                  exponent: DECIMAL(23,3) 4.54 -> "4.540"
         BOOLEAN                  true / false
         NULL                     null
         VARCHAR                  JSON string
         DATE / TIME / INTERVAL   ISO-ish string (str() of the Python value)
         LIST / STRUCT            JSON array / object of canonical values
       Lines are compact JSON (separators "," and ":"), non-ASCII kept as is.
       On a query error, DuckDB's message goes to stderr and the exit code is 1.

This script never imports weir code: expected results come from DuckDB running
the batch equivalent of each streaming query over the same generated events.
"""
import argparse
import datetime as dt
import decimal
import json
import math
import os
import random
import sys

DEFAULT_START_MS = 1796032800000  # 2026-11-30T10:00:00Z
PERSON_PROP, AUCTION_PROP, BID_PROP = 1, 3, 46
TOTAL_PROP = PERSON_PROP + AUCTION_PROP + BID_PROP
FIRST_PERSON_ID = FIRST_AUCTION_ID = 1000
FIRST_CATEGORY_ID, NUM_CATEGORIES = 10, 5
NUM_ACTIVE_PEOPLE, NUM_IN_FLIGHT_AUCTIONS = 1000, 100
HOT_AUCTION_RATIO = HOT_SELLER_RATIO = HOT_BIDDER_RATIO = 100
HOT_AUCTION_ODDS, HOT_SELLER_ODDS, HOT_BIDDER_ODDS, HOT_CHANNEL_ODDS = 2, 4, 4, 2
HOT_CHANNELS = ["Google", "Facebook", "Baidu", "Apple"]
NUM_CHANNELS = 10_000
US_STATES = ["AZ", "CA", "ID", "OR", "WA", "WY"]
US_CITIES = ["Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland",
             "Bend", "Redmond", "Seattle", "Kent", "Cheyenne"]
FIRST_NAMES = ["Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate",
               "Julie", "Sarah", "Deiter", "Walter"]
LAST_NAMES = ["Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton",
              "Smith", "Jones", "Noris"]
LETTERS = "abcdefghijklmnopqrstuvwxyz"


# ----------------------------------------------------------------- generator
def last_person(event_id):
    """Base-0 id of the last person created at or before event_id."""
    epoch, offset = divmod(event_id, TOTAL_PROP)
    return epoch * PERSON_PROP + min(offset, PERSON_PROP - 1)


def last_auction(event_id):
    """Base-0 id of the last auction created at or before event_id (-1: none)."""
    epoch, offset = divmod(event_id, TOTAL_PROP)
    if offset < PERSON_PROP:
        epoch, offset = epoch - 1, AUCTION_PROP - 1
    elif offset >= PERSON_PROP + AUCTION_PROP:
        offset = AUCTION_PROP - 1
    else:
        offset -= PERSON_PROP
    return epoch * AUCTION_PROP + offset


def fmt_ms(ms):
    t = dt.datetime.fromtimestamp(ms // 1000, dt.timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S") + ".%03dZ" % (ms % 1000)


class Generator:
    def __init__(self, seed, start_ms, rate, max_delay):
        self.rng = random.Random(seed)
        # Separate stream: the jitter does not change any other field.
        self.jitter_rng = random.Random("%d/jitter" % seed)
        self.start_ms, self.rate, self.max_delay = start_ms, rate, max_delay
        self.channel_urls = {}
        self.hot_urls = [self.base_url() + "&channel_id=%d" % self.reverse32(i)
                         for i in range(len(HOT_CHANNELS))]

    def word(self, lo, hi):
        return "".join(self.rng.choice(LETTERS) for _ in range(self.rng.randint(lo, hi)))

    def base_url(self):
        return "https://www.nexmark.com/%s/item.htm?query=1" % self.word(3, 5)

    @staticmethod
    def reverse32(n):  # abs(Integer.reverse(n)) as in Nexmark's channel ids
        r = int("{:032b}".format(n)[::-1], 2)
        return abs(r - (1 << 32) if r >= 1 << 31 else r)

    def price(self):
        return round(10.0 ** (self.rng.random() * 6.0) * 100.0)

    def base_time(self, event_id):
        return self.start_ms + int(event_id * 1000 // self.rate)

    def event_time(self, event_id):
        return self.base_time(event_id) - self.jitter_rng.randint(0, self.max_delay)

    def some_person(self, event_id):
        """A recently active existing person (Nexmark nextBase0PersonId, no lead)."""
        num_people = last_person(event_id) + 1
        active = min(num_people, NUM_ACTIVE_PEOPLE)
        return num_people - active + self.rng.randrange(active)

    def some_auction(self, event_id):
        """An in-flight existing auction (Nexmark nextBase0AuctionId, no lead)."""
        hi = last_auction(event_id)
        lo = max(hi - NUM_IN_FLIGHT_AUCTIONS, 0)
        return lo + self.rng.randrange(hi - lo + 1)

    def person(self, eid, ts):
        return {"id": last_person(eid) + FIRST_PERSON_ID,
                "name": "%s %s" % (self.rng.choice(FIRST_NAMES), self.rng.choice(LAST_NAMES)),
                "email_address": "%s@%s.com" % (self.word(3, 7), self.word(3, 5)),
                "credit_card": " ".join("%04d" % self.rng.randrange(10000) for _ in range(4)),
                "city": self.rng.choice(US_CITIES), "state": self.rng.choice(US_STATES),
                "date_time": fmt_ms(ts), "extra": self.word(2, 5)}

    def auction(self, eid, ts):
        if self.rng.randrange(HOT_SELLER_ODDS) > 0:
            seller = (last_person(eid) // HOT_SELLER_RATIO) * HOT_SELLER_RATIO
        else:
            seller = self.some_person(eid)
        initial = self.price()
        reserve = initial + self.price()
        # Nexmark: expire within ~2x the time it takes to create 100 auctions.
        horizon = self.base_time(eid + NUM_IN_FLIGHT_AUCTIONS * TOTAL_PROP // AUCTION_PROP) \
            - self.base_time(eid)
        expires = ts + 1 + self.rng.randrange(max(horizon * 2, 1))
        return {"id": last_auction(eid) + FIRST_AUCTION_ID,
                "item_name": self.word(4, 12), "description": self.word(8, 24),
                "initial_bid": initial, "reserve": reserve,
                "date_time": fmt_ms(ts), "expires": fmt_ms(expires),
                "seller": seller + FIRST_PERSON_ID,
                "category": FIRST_CATEGORY_ID + self.rng.randrange(NUM_CATEGORIES),
                "extra": self.word(2, 5)}

    def bid(self, eid, ts):
        if self.rng.randrange(HOT_AUCTION_ODDS) > 0:
            auction = (last_auction(eid) // HOT_AUCTION_RATIO) * HOT_AUCTION_RATIO
        else:
            auction = self.some_auction(eid)
        if self.rng.randrange(HOT_BIDDER_ODDS) > 0:
            bidder = min((last_person(eid) // HOT_BIDDER_RATIO) * HOT_BIDDER_RATIO + 1,
                         last_person(eid))
        else:
            bidder = self.some_person(eid)
        price = self.price()
        if self.rng.randrange(HOT_CHANNEL_ODDS) > 0:
            i = self.rng.randrange(len(HOT_CHANNELS))
            channel, url = HOT_CHANNELS[i], self.hot_urls[i]
        else:
            n = self.rng.randrange(NUM_CHANNELS)
            channel = "channel-%d" % n
            if n not in self.channel_urls:
                url = self.base_url()
                if self.rng.randrange(10) > 0:
                    url += "&channel_id=%d" % self.reverse32(n)
                self.channel_urls[n] = url
            url = self.channel_urls[n]
        return {"auction": auction + FIRST_AUCTION_ID, "bidder": bidder + FIRST_PERSON_ID,
                "price": price, "channel": channel, "url": url,
                "date_time": fmt_ms(ts), "extra": self.word(2, 5)}

    def events(self, n):
        for eid in range(n):
            ts = self.event_time(eid)
            offset = eid % TOTAL_PROP
            if offset < PERSON_PROP:
                yield "person", self.person(eid, ts)
            elif offset < PERSON_PROP + AUCTION_PROP:
                yield "auction", self.auction(eid, ts)
            else:
                yield "bid", self.bid(eid, ts)


def cmd_gen(a):
    if a.rate_per_sec <= 0 or a.max_delay_ms < 0 or a.events < 0:
        sys.exit("need --rate-per-sec > 0, --max-delay-ms >= 0, --events >= 0")
    os.makedirs(a.out, exist_ok=True)
    gen = Generator(a.seed, a.start_ms, a.rate_per_sec, a.max_delay_ms)
    files = {k: open(os.path.join(a.out, k + ".jsonl"), "w", encoding="utf-8")
             for k in ("person", "auction", "bid")}
    counts = dict.fromkeys(files, 0)
    for kind, row in gen.events(a.events):
        files[kind].write(json.dumps(row, separators=(",", ":")) + "\n")
        counts[kind] += 1
    for f in files.values():
        f.close()
    print(json.dumps(counts))


# --------------------------------------------------------------------- query
SCHEMAS = {
    # The changes of a table read from an upsert topic, in the order they
    # were written (`seq`); `deleted` marks a tombstone (tests/sql.rs).
    "account_changes": dict(seq="BIGINT", id="BIGINT", state="VARCHAR", balance="BIGINT",
                            deleted="BOOLEAN"),
    "person": dict(id="BIGINT", name="VARCHAR", email_address="VARCHAR",
                   credit_card="VARCHAR", city="VARCHAR", state="VARCHAR",
                   date_time="TIMESTAMP", extra="VARCHAR"),
    "auction": dict(id="BIGINT", item_name="VARCHAR", description="VARCHAR",
                    initial_bid="BIGINT", reserve="BIGINT", date_time="TIMESTAMP",
                    expires="TIMESTAMP", seller="BIGINT", category="BIGINT",
                    extra="VARCHAR"),
    "bid": dict(auction="BIGINT", bidder="BIGINT", price="BIGINT", channel="VARCHAR",
                url="VARCHAR", date_time="TIMESTAMP", extra="VARCHAR"),
    # Nexmark q13's versioned side input (crates/testkit/src/nexmark.rs,
    # side_input_rows): an upsert table keyed by `key`, each version valid
    # from `valid_from` on, in event time.
    "side_input": dict(key="BIGINT", value="VARCHAR", valid_from="TIMESTAMP"),
    # A stream probing a versioned table (tests/sql_review.rs): `probes`
    # at event time `t`, and the table's changes in the order they were
    # written (`seq`), a tombstone marked `deleted` with the time from
    # which it deletes its key as `valid_from`.
    "probes": dict(id="BIGINT", key="BIGINT", t="TIMESTAMP"),
    "rate_changes": dict(seq="BIGINT", key="BIGINT", rate="VARCHAR", valid_from="TIMESTAMP",
                         deleted="BOOLEAN"),
    # A product table's Debezium changes in the order they were made
    # (`seq`), a delete marked `deleted` with the row it deleted, and the
    # orders joined to it (tests/formats.rs).
    "product_changes": dict(seq="BIGINT", id="BIGINT", name="VARCHAR", price="BIGINT",
                            category="BIGINT", deleted="BOOLEAN"),
    "orders": dict(order_id="BIGINT", product_id="BIGINT", qty="BIGINT"),
    # Events at instants across daylight saving's end in New York
    # (tests/time_zones.rs): `ms` since 1970, `v` a value to sum.
    "events": dict(id="BIGINT", ms="BIGINT", v="BIGINT"),
    # Values per key in the order they were written, on one partition
    # (tests/json_aggregates.rs): `tag` names each, `v` may be NULL.
    "tagged": dict(id="BIGINT", k="BIGINT", tag="VARCHAR", v="BIGINT"),
    # Keyed events with the "life" of their key: 1 for an event after its
    # key's state expired (tests/sql_plan.rs, state_ttl).
    "ttl_events": dict(seq="BIGINT", k="BIGINT", v="BIGINT", life="BIGINT"),
}


def load_tables(con, d):
    for table, schema in SCHEMAS.items():
        path = os.path.join(d, table + ".jsonl")
        if not os.path.exists(path):
            continue
        # Read timestamps as text, then parse them as RFC 3339 instants
        # (TIMESTAMPTZ honours the offset) and store them as UTC TIMESTAMP.
        raw = {c: ("VARCHAR" if t == "TIMESTAMP" else t) for c, t in schema.items()}
        cols = ", ".join(
            "CAST(CAST(%s AS TIMESTAMPTZ) AS TIMESTAMP) AS %s" % (c, c) if t == "TIMESTAMP"
            else c for c, t in schema.items())
        spec = "{%s}" % ", ".join("'%s': '%s'" % kv for kv in raw.items())
        con.execute("CREATE TABLE %s AS SELECT %s FROM read_json(?, format = 'newline_delimited', "
                    "columns = %s)" % (table, cols, spec), [path])


def canon(v):
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else ("NaN" if math.isnan(v) else
                                           ("Infinity" if v > 0 else "-Infinity"))
    if isinstance(v, decimal.Decimal):
        return format(v, "f")
    if isinstance(v, dt.datetime):
        if v.tzinfo is not None:
            v = v.astimezone(dt.timezone.utc)
        return v.strftime("%Y-%m-%dT%H:%M:%S") + ".%03dZ" % (v.microsecond // 1000)
    if isinstance(v, (list, tuple)):
        return [canon(x) for x in v]
    if isinstance(v, dict):
        return {str(k): canon(x) for k, x in v.items()}
    return str(v)


def cmd_query(a):
    import duckdb
    sql = a.sql if a.sql is not None else open(a.sql_file, encoding="utf-8").read()
    con = duckdb.connect(":memory:")
    con.execute("SET TimeZone = 'UTC'")
    try:
        load_tables(con, a.dir)
        cur = con.execute(sql)
        names = [d[0] for d in cur.description or []]
        rows = cur.fetchall() if names else []
    except duckdb.Error as e:
        print(str(e), file=sys.stderr)
        sys.exit(1)
    if len(set(names)) != len(names):
        print("duplicate result column names: %s" % names, file=sys.stderr)
        sys.exit(1)
    lines = sorted(json.dumps({n: canon(v) for n, v in zip(names, row)},
                              separators=(",", ":"), ensure_ascii=False) for row in rows)
    out = sys.stdout
    out.reconfigure(encoding="utf-8")
    for line in lines:
        out.write(line + "\n")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("gen", help="generate Nexmark events as JSONL")
    g.add_argument("--events", type=int, required=True)
    g.add_argument("--seed", type=int, required=True)
    g.add_argument("--out", required=True)
    g.add_argument("--start-ms", type=int, default=DEFAULT_START_MS)
    g.add_argument("--rate-per-sec", type=float, default=1000.0)
    g.add_argument("--max-delay-ms", type=int, default=0)
    q = sub.add_parser("query", help="run SQL with DuckDB over generated events")
    q.add_argument("--dir", required=True)
    src = q.add_mutually_exclusive_group(required=True)
    src.add_argument("--sql")
    src.add_argument("--sql-file")
    a = p.parse_args()
    cmd_gen(a) if a.cmd == "gen" else cmd_query(a)


if __name__ == "__main__":
    main()
