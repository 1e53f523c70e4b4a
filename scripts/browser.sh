#!/usr/bin/env bash
# What the browser check of the operator console (tests/browser/console_check.py)
# needs: Debian's Chromium and Playwright for Python in a cached virtualenv.
# Playwright drives the system Chromium (executable_path); it never downloads
# a browser of its own.
#
#   scripts/browser.sh install    install Chromium (apt, as root) and Playwright if missing
#   scripts/browser.sh python     install if needed, then print the virtualenv's python path:
#                                 "$(scripts/browser.sh python)" tests/browser/console_check.py ...
#   scripts/browser.sh chromium   install if needed, then print the Chromium path
#   scripts/browser.sh status     exit 0 when everything is installed
#
# Environment:
#   WEIR_BROWSER_VENV        virtualenv holding Playwright  (default ~/.cache/weir/browser-venv)
#   WEIR_BROWSER_PLAYWRIGHT  pip requirement for Playwright (default playwright==1.65.2)
#   WEIR_CHROMIUM            Chromium executable            (default: chromium on PATH)
#   PYTHON                   interpreter for the virtualenv (default python3)
set -euo pipefail

venv=${WEIR_BROWSER_VENV:-$HOME/.cache/weir/browser-venv}
requirement=${WEIR_BROWSER_PLAYWRIGHT:-playwright==1.65.2}
python=${PYTHON:-python3}

log() { printf 'browser.sh: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

# The Chromium executable, or nothing.
find_chromium() {
  if [ -n "${WEIR_CHROMIUM:-}" ]; then
    [ -x "$WEIR_CHROMIUM" ] && printf '%s\n' "$WEIR_CHROMIUM"
    return 0
  fi
  command -v chromium 2>/dev/null || true
}

install_chromium() {
  [ -n "$(find_chromium)" ] && return 0
  [ -n "${WEIR_CHROMIUM:-}" ] && die "WEIR_CHROMIUM=$WEIR_CHROMIUM is not an executable"
  local sudo=""
  if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then sudo="sudo -n"
    else die "chromium not found and not root: install it (Debian: apt-get install chromium) or set WEIR_CHROMIUM"; fi
  fi
  command -v apt-get >/dev/null || die "chromium not found and no apt-get: install Chromium and set WEIR_CHROMIUM to its path"
  log "installing chromium with apt-get"
  # An install from an empty or stale package list fails: update once and retry.
  if ! $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >&2; then
    $sudo apt-get update -q >&2 || die "apt-get update failed"
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >&2 \
      || die "apt-get install chromium failed"
  fi
  [ -n "$(find_chromium)" ] || die "chromium still not on PATH after apt-get install"
}

install_playwright() {
  # The marker names the requirement: changing WEIR_BROWSER_PLAYWRIGHT reinstalls.
  if [ -x "$venv/bin/python" ] && [ "$(cat "$venv/.complete" 2>/dev/null)" = "$requirement" ]; then
    return 0
  fi
  command -v "$python" >/dev/null || die "$python not found: install Python 3 (Debian: apt-get install python3 python3-venv)"
  if [ ! -x "$venv/bin/pip" ]; then
    log "creating virtualenv $venv"
    mkdir -p "$(dirname "$venv")"
    "$python" -m venv "$venv" >&2 || die "could not create a virtualenv at $venv (Debian: apt-get install python3-venv)"
  fi
  log "installing $requirement into $venv"
  # No `playwright install`: the browser is Debian's chromium, passed as executable_path.
  PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 "$venv/bin/pip" install --quiet --disable-pip-version-check "$requirement" >&2 \
    || die "pip install '$requirement' failed (is PyPI reachable?)"
  "$venv/bin/python" -c 'import playwright.sync_api' >&2 \
    || die "playwright does not import in $venv after install"
  printf '%s\n' "$requirement" > "$venv/.complete"
}

install() {
  install_chromium
  install_playwright
}

case "${1:-}" in
  install) install; log "ready: chromium $(find_chromium), python $venv/bin/python" ;;
  python) install; printf '%s\n' "$venv/bin/python" ;;
  chromium) install; find_chromium ;;
  status)
    if [ -n "$(find_chromium)" ] && [ -x "$venv/bin/python" ] \
      && [ "$(cat "$venv/.complete" 2>/dev/null)" = "$requirement" ]; then
      log "installed: chromium $(find_chromium), $requirement in $venv"
    else log "not installed; run: $0 install"; exit 1; fi ;;
  *) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
