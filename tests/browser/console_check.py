#!/usr/bin/env python3
"""Drive weir's operator console (GET / of the admin endpoint) in headless Chromium and
check what it shows against the endpoint's own answers.

  "$(scripts/browser.sh python)" tests/browser/console_check.py \
      --url http://127.0.0.1:PORT/ [--token T] --chromium /usr/bin/chromium \
      --metrics-url http://127.0.0.1:PORT/metrics \
      --lookup-operator word-count --lookup-key fox --expect-count 42 \
      --missing-key no-such-word --screenshot docs/console.png \
      [--wait-checkpoints 3] [--timeout 60]

Checks, in order:
  - the header shows the job name of /api/overview, the pipeline shows every operator,
    and a token given as #token=... is gone from the address bar;
  (a) every counter (*_total) number on the page ([data-metric]) equals /metrics: a counter
      that is still for the whole round must be equal, a moving one must lie between the
      /metrics values read before and after; the records_in total of every operator and
      the completed checkpoints must be among them;
  (b) the checkpoint chart (#checkpoint-chart [data-checkpoint-id]) gains --wait-checkpoints
      new checkpoints, and failed or aborted rows of the table show their reason;
  (c) a lookup of --lookup-key shows --expect-count in #lookup-count, and one of
      --missing-key says "not found" in #lookup-result;
  (d) a full-page screenshot (1280x900 viewport) goes to --screenshot;
  (e) with --token, a tab without it gets the token form, and the token typed there works;
  and no page error, no console error (but the browser's own log line for the expected 404 of
  the missing key, and for the 401s before the token form), no request off the weir origin and
  no token in any URL was seen.
Exit 0 when all hold; otherwise a message naming what differed, and exit 1.
"""
import argparse
import json
import os
import re
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

POLL = 0.25


class CheckFailed(Exception):
    pass


def http_get(url, token, timeout=10):
    req = urllib.request.Request(url)
    if token:
        req.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as res:
            return res.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        raise CheckFailed("GET %s answered HTTP %d: %s" % (url, e.code, e.read().decode("utf-8", "replace").strip()[:300]))
    except (urllib.error.URLError, OSError) as e:
        raise CheckFailed("GET %s failed: %s" % (url, e))


SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+-?\d+)?$")
LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')


def unescape(v):
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), v)


def label_key(labels):
    """The page's data-labels form: k=v,k=v sorted by key."""
    return ",".join("%s=%s" % (k, labels[k]) for k in sorted(labels))


def parse_prometheus(text):
    """{(name, "k=v,k=v"): value} for every sample line of the text format."""
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        if not m:
            raise CheckFailed("cannot parse /metrics line: %r" % line)
        labels = {k: unescape(v) for k, v in LABEL.findall(m.group(2) or "")}
        out[(m.group(1), label_key(labels))] = float(m.group(3))
    return out


def same_origin(url, origin):
    parts = urllib.parse.urlsplit(url)
    if parts.scheme in ("data", "blob", "about"):
        return True
    return "%s://%s" % (parts.scheme, parts.netloc) == origin


def wait_until(what, fn, timeout, detail=None):
    """Polls fn until it returns something truthy; CheckFailed naming `what` otherwise."""
    deadline = time.monotonic() + timeout
    while True:
        got = fn()
        if got:
            return got
        if time.monotonic() > deadline:
            extra = detail() if detail else ""
            raise CheckFailed("timed out after %ss waiting until %s%s" % (timeout, what, ("; " + extra) if extra else ""))
        time.sleep(POLL)


class Watch:
    """What a page did that it must not: console errors, page errors, off-origin requests."""

    def __init__(self, page, origin, tag):
        self.origin, self.tag = origin, tag
        self.console, self.page_errors, self.requests = [], [], []
        page.on("console", self.on_console)
        page.on("pageerror", lambda e: self.page_errors.append(str(e)))
        page.on("request", lambda r: self.requests.append(r.url))

    def on_console(self, msg):
        if msg.type == "error":
            loc = msg.location or {}
            self.console.append((msg.text, loc.get("url", "")))

    def problems(self, allowed, token):
        out = []
        for text, url in self.console:
            if not any(a(text, url) for a in allowed):
                out.append("%s: console error %r (at %s)" % (self.tag, text, url or "?"))
        out += ["%s: page error: %s" % (self.tag, e) for e in self.page_errors]
        out += ["%s: request off the weir origin %s: %s" % (self.tag, self.origin, u) for u in self.requests if not same_origin(u, self.origin)]
        if token:
            out += ["%s: the token appears in a request URL: %s" % (self.tag, u.replace(token, "<token>")) for u in self.requests if token in u]
        return out


def resource_error(status, url_suffix):
    """Chromium's own log line for a fetch answered with `status` (the page cannot silence it)."""
    def allowed(text, url):
        return text.startswith("Failed to load resource: the server responded with a status of %d" % status) and url.endswith(url_suffix)
    return allowed


def page_metrics(page):
    return page.eval_on_selector_all(
        "[data-metric]", "els => els.map(e => [e.dataset.metric, e.dataset.labels || '', e.textContent.trim()])")


def check_metrics(page, args, operators, timeout):
    """(a): counters on the page equal /metrics. Returns (numbers compared, description)."""
    deadline = time.monotonic() + timeout
    while True:
        before = parse_prometheus(http_get(args.metrics_url, args.token))
        time.sleep(2.5)  # > the page's refresh interval: what it shows now was read after `before`
        shown = page_metrics(page)
        after = parse_prometheus(http_get(args.metrics_url, args.token))
        problems, compared, seen = [], 0, set()
        for name, labels, text in shown:
            if not name.endswith("_total"):
                continue
            key = (name, labels)
            seen.add(key)
            desc = "%s{%s}" % (name, labels)
            if not re.fullmatch(r"-?\d+", text):
                problems.append("%s shows %r, not a plain integer" % (desc, text))
                continue
            value = int(text)
            if key not in after:
                problems.append("%s is on the page (%d) but not in /metrics" % (desc, value))
                continue
            lo, hi = before.get(key, 0.0), after[key]
            if lo == hi and value != hi:
                problems.append("%s shows %d, /metrics says %d" % (desc, value, hi))
            elif lo != hi and not (lo <= value <= hi):
                problems.append("%s shows %d, /metrics moved from %d to %d meanwhile" % (desc, value, lo, hi))
            else:
                compared += 1
        required = [("weir_records_in_total", "operator=" + uid) for uid in operators]
        required.append(("weir_checkpoints_completed_total", ""))
        for key in required:
            if key not in after:
                problems.append("%s{%s} is missing from /metrics" % key)
            elif key not in seen:
                problems.append("%s{%s} is not shown on the page (no [data-metric] element)" % key)
        if not problems:
            return compared
        if time.monotonic() > deadline:
            raise CheckFailed("page numbers differ from /metrics:\n  " + "\n  ".join(problems))


def chart_ids(page):
    return page.eval_on_selector_all("#checkpoint-chart [data-checkpoint-id]", "els => els.map(e => e.dataset.checkpointId)")


def check_checkpoints(page, args, timeout):
    """(b): the chart grows; failed rows show their reason. Returns (before, after) point counts."""
    first = chart_ids(page)
    if not first:
        first = wait_until("the checkpoint chart shows a checkpoint", lambda: chart_ids(page), timeout)
    known = set(first)
    top = max(int(i) for i in first)
    grown = []

    def new_points():
        ids = chart_ids(page)
        grown[:] = [i for i in ids if i not in known and int(i) > top]
        return len(grown) >= args.wait_checkpoints and ids

    last = wait_until("the checkpoint chart gains %d checkpoints (it had %d, up to id %d)" % (args.wait_checkpoints, len(first), top),
                      new_points, timeout, lambda: "new ones seen: %s" % (grown or "none"))
    history = {str(c["id"]): c for c in json.loads(http_get(urljoin(args.url, "checkpoints"), args.token))}
    rows = page.eval_on_selector_all("#checkpoint-table tr[data-checkpoint-id]", "els => els.map(e => [e.dataset.checkpointId, e.className, e.textContent])")
    if not rows:
        raise CheckFailed("the checkpoint table has no row with data-checkpoint-id")
    for cid, cls, text in rows:
        c = history.get(cid)
        if c and c["status"] != "completed":
            if c.get("reason") and c["reason"] not in text:
                raise CheckFailed("checkpoint %s is %s with reason %r, its table row shows %r" % (cid, c["status"], c["reason"], text))
            if "bad" not in cls.split():
                raise CheckFailed("checkpoint %s is %s but its table row is not highlighted" % (cid, c["status"]))
    return len(first), len(last)


def text_of(page, selector):
    return page.evaluate("s => { const e = document.querySelector(s); return e ? e.textContent.trim() : null; }", selector)


def check_lookup(page, args, timeout):
    """(c): a key that exists shows its count, a missing one says not found."""
    option = '#lookup-operator option[value="%s"]' % args.lookup_operator.replace('"', '\\"')
    wait_until("operator %r is offered in #lookup-operator" % args.lookup_operator,
               lambda: page.query_selector(option), timeout,
               lambda: "offered: %s" % page.eval_on_selector_all("#lookup-operator option", "els => els.map(e => e.value)"))
    page.select_option("#lookup-operator", args.lookup_operator)
    page.fill("#lookup-key", args.lookup_key)
    page.click("#lookup-submit")
    want = str(args.expect_count)
    wait_until("#lookup-count shows %s for key %r" % (want, args.lookup_key),
               lambda: text_of(page, "#lookup-count") == want, timeout,
               lambda: "#lookup-count is %r, #lookup-result says %r" % (text_of(page, "#lookup-count"), text_of(page, "#lookup-result")))
    page.fill("#lookup-key", args.missing_key)
    page.click("#lookup-submit")

    def says_missing():
        t = text_of(page, "#lookup-result") or ""
        return page.query_selector("#lookup-count") is None and re.search(r"not found|no key", t, re.I)
    wait_until("#lookup-result says key %r is not found" % args.missing_key, says_missing, timeout,
               lambda: "#lookup-result says %r" % text_of(page, "#lookup-result"))


def show_lookup(page, args, timeout):
    """The found key again, so that the screenshot shows a result."""
    page.fill("#lookup-key", args.lookup_key)
    page.click("#lookup-submit")
    wait_until("#lookup-count shows %s again" % args.expect_count,
               lambda: text_of(page, "#lookup-count") == str(args.expect_count), timeout)


def check_token_form(browser, args, name, origin, timeout):
    """(e): without the token the page asks for it; once typed, the job shows."""
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        page = ctx.new_page()
        watch = Watch(page, origin, "token form tab")
        page.goto(args.url, wait_until="domcontentloaded")
        page.wait_for_selector("#token-input", state="visible", timeout=timeout * 1000)
        page.fill("#token-input", args.token)
        page.click("#token-submit")
        wait_until("the header shows job %r after the token form" % name,
                   lambda: text_of(page, "#job-name") == name, timeout)
        if page.is_visible("#token-panel"):
            raise CheckFailed("the token form is still shown after a right token")
        time.sleep(0.3)
        return watch.problems([resource_error(401, "")], args.token)
    finally:
        ctx.close()


def urljoin(base, path):
    return urllib.parse.urljoin(base, path)


def run(args):
    from playwright.sync_api import sync_playwright

    parts = urllib.parse.urlsplit(args.url)
    origin = "%s://%s" % (parts.scheme, parts.netloc)
    overview = json.loads(http_get(urljoin(args.url, "api/overview"), args.token))
    name = overview["job"]["name"]
    # The sink is chained to the keyed operator: its records are that
    # operator's records out, so it has no records_in series of its own.
    pipeline = [o["uid"] for o in overview["job"]["operators"]]
    operators = [o["uid"] for o in overview["job"]["operators"] if o["kind"] != "sink"]
    timeout = args.timeout
    done = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=args.chromium, headless=True, args=["--no-sandbox"])
        try:
            ctx = browser.new_context(viewport={"width": 1280, "height": 900})
            page = ctx.new_page()
            page.set_default_timeout(timeout * 1000)
            watch = Watch(page, origin, "console tab")
            target = args.url + ("#token=" + urllib.parse.quote(args.token, safe="") if args.token else "")
            try:
                page.goto(target, wait_until="domcontentloaded")
                wait_until("the header (#job-name) shows job %r" % name, lambda: text_of(page, "#job-name") == name, timeout,
                           lambda: "#job-name is %r; banner: %r; token form shown: %s" % (
                               text_of(page, "#job-name"), text_of(page, "#banner"), page.is_visible("#token-panel")))
                if args.token and "token=" in page.url:
                    raise CheckFailed("the token stays in the address bar: %s" % page.url.replace(args.token, "<token>"))
                shown_ops = page.eval_on_selector_all("#pipeline [data-operator]", "els => els.map(e => e.dataset.operator)")
                if shown_ops != pipeline:
                    raise CheckFailed("the pipeline shows operators %s, /api/overview has %s" % (shown_ops, pipeline))
                done.append("header and pipeline of %s (%s)" % (name, " -> ".join(pipeline)))

                compared = check_metrics(page, args, operators, min(timeout, 30))
                done.append("%d counter numbers equal /metrics" % compared)

                n0, n1 = check_checkpoints(page, args, timeout)
                done.append("checkpoint chart grew from %d to %d points" % (n0, n1))

                marked = len(watch.console)
                check_lookup(page, args, timeout)
                time.sleep(0.5)  # console events of the lookups arrive
                missing_url = "/state/%s/%s" % (urllib.parse.quote(args.lookup_operator, safe=""), urllib.parse.quote(args.missing_key, safe=""))
                for text, url in watch.console[marked:]:
                    if not resource_error(404, missing_url)(text, url):
                        raise CheckFailed("console error during the key lookups: %r (at %s)" % (text, url))
                done.append("lookup %s/%s shows count %s, %r not found" % (args.lookup_operator, args.lookup_key, args.expect_count, args.missing_key))

                if args.screenshot:
                    show_lookup(page, args, timeout)
                    os.makedirs(os.path.dirname(os.path.abspath(args.screenshot)), exist_ok=True)
                    page.evaluate("window.scrollTo(0, 0)")
                    page.screenshot(path=args.screenshot, full_page=True)
                    done.append("screenshot %s" % args.screenshot)
            except CheckFailed:
                if args.screenshot:
                    try:
                        failed = re.sub(r"(\.png)?$", "-failed.png", args.screenshot, count=1)
                        page.screenshot(path=failed, full_page=True)
                        print("console_check: screenshot of the failure: %s" % failed, file=sys.stderr)
                    except Exception:  # the failure itself is what matters
                        pass
                raise
            problems = watch.problems([resource_error(404, missing_url)], args.token)
            ctx.close()
            if args.token:
                problems += check_token_form(browser, args, name, origin, timeout)
                done.append("token form")
            if problems:
                raise CheckFailed("the page misbehaved:\n  " + "\n  ".join(problems))
            done.append("no console or page error, no off-origin request (%d requests)" % len(watch.requests))
        finally:
            browser.close()
    return done


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", required=True, help="the console, e.g. http://127.0.0.1:9249/")
    p.add_argument("--token", help="admin bearer token (sent to the page as #token=...)")
    p.add_argument("--chromium", default="/usr/bin/chromium", help="Chromium executable")
    p.add_argument("--metrics-url", help="Prometheus text endpoint (default: <url>metrics)")
    p.add_argument("--lookup-operator", required=True)
    p.add_argument("--lookup-key", required=True)
    p.add_argument("--expect-count", type=int, required=True)
    p.add_argument("--missing-key", required=True)
    p.add_argument("--screenshot", help="PNG to write (full page)")
    p.add_argument("--wait-checkpoints", type=int, default=3, help="new checkpoints the chart must gain")
    p.add_argument("--timeout", type=float, default=60, help="seconds for each wait")
    args = p.parse_args()
    if not args.url.endswith("/"):
        args.url += "/"
    args.metrics_url = args.metrics_url or urljoin(args.url, "metrics")
    try:
        done = run(args)
    except CheckFailed as e:
        print("console_check: FAILED: %s" % e, file=sys.stderr)
        return 1
    except Exception as e:  # Playwright or Chromium could not start, the page vanished, ...
        print("console_check: FAILED: %s: %s" % (type(e).__name__, e), file=sys.stderr)
        return 1
    print("console_check: OK: " + "; ".join(done))
    return 0


if __name__ == "__main__":
    sys.exit(main())
