#!/usr/bin/env bash
# A local S3 emulator (moto in server mode) on 127.0.0.1 for the tests of
# shared checkpoint storage (`checkpoint.dir = "s3://..."`). Buckets live in
# memory: stopping the server forgets them.
#
#   scripts/s3.sh install         install moto into a cached virtualenv
#   scripts/s3.sh start           install if needed, start, wait until it answers
#   scripts/s3.sh stop            stop the server this script started (and only that one)
#   scripts/s3.sh status          exit 0 when our server is running and answering
#   scripts/s3.sh env             print export lines for clients: eval "$(scripts/s3.sh env)"
#   scripts/s3.sh bucket NAME     create a bucket if it does not exist
#
# Environment:
#   WEIR_S3_PORT      server port                     (default 9300)
#   WEIR_S3_HOME      pid and log files               (default <repo>/.s3)
#   WEIR_S3_VENV      virtualenv holding moto         (default ~/.cache/weir/moto-venv)
#   WEIR_S3_MOTO      pip requirement for moto        (default moto[server]==5.2.5)
#   PYTHON            interpreter for the virtualenv  (default python3)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
port=${WEIR_S3_PORT:-9300}
home=${WEIR_S3_HOME:-$repo/.s3}
venv=${WEIR_S3_VENV:-$HOME/.cache/weir/moto-venv}
requirement=${WEIR_S3_MOTO:-moto[server]==5.2.5}
python=${PYTHON:-python3}
pidfile="$home/moto.pid"
logfile="$home/moto.log"
endpoint="http://127.0.0.1:$port"

log() { printf 's3.sh: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

install() {
  # The marker names the requirement: changing WEIR_S3_MOTO reinstalls.
  if [ -x "$venv/bin/moto_server" ] && [ "$(cat "$venv/.complete" 2>/dev/null)" = "$requirement" ]; then
    return 0
  fi
  command -v "$python" >/dev/null || die "$python not found: install Python 3 (Debian: apt-get install python3 python3-venv)"
  command -v curl >/dev/null || die "curl not found (Debian: apt-get install curl)"
  if [ ! -x "$venv/bin/pip" ]; then
    log "creating virtualenv $venv"
    mkdir -p "$(dirname "$venv")"
    "$python" -m venv "$venv" >&2 || die "could not create a virtualenv at $venv (Debian: apt-get install python3-venv)"
  fi
  log "installing $requirement into $venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "$requirement" >&2 \
    || die "pip install '$requirement' failed (is PyPI reachable?)"
  [ -x "$venv/bin/moto_server" ] || die "$venv/bin/moto_server missing after install"
  printf '%s\n' "$requirement" > "$venv/.complete"
}

# Our server: the pid in the pidfile is alive and is a moto_server (a pid
# reused by an unrelated process is not ours and is never signalled).
running() {
  [ -f "$pidfile" ] || return 1
  local pid; pid=$(cat "$pidfile")
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
  tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q moto_server
}

# Any HTTP answer counts (S3 answers GET / with a bucket list).
answering() {
  curl -s -o /dev/null --max-time 2 "$endpoint/"
}

start() {
  install
  if running; then
    if answering; then log "already running (pid $(cat "$pidfile")) on $endpoint"; return 0; fi
    die "pid $(cat "$pidfile") is running but $endpoint does not answer; see $logfile, or run: $0 stop"
  fi
  if answering; then
    die "something else already answers on $endpoint; choose another port with WEIR_S3_PORT"
  fi
  mkdir -p "$home"
  log "starting moto S3 on $endpoint (log: $logfile)"
  nohup "$venv/bin/moto_server" -H 127.0.0.1 -p "$port" >>"$logfile" 2>&1 &
  echo $! > "$pidfile"
  for _ in $(seq 1 60); do
    if ! running; then
      log "moto_server exited during start-up; last lines of $logfile:"
      tail -20 "$logfile" >&2
      rm -f "$pidfile"
      exit 1
    fi
    if answering; then log "ready on $endpoint"; return 0; fi
    sleep 0.5
  done
  die "moto_server did not answer within 30 s; see $logfile"
}

stop() {
  if ! running; then log "no S3 emulator of ours is running"; rm -f "$pidfile"; return 0; fi
  local pid; pid=$(cat "$pidfile")
  kill "$pid"
  for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
  rm -f "$pidfile"
  log "stopped moto S3 (pid $pid)"
}

print_env() {
  cat <<ENV
export AWS_ACCESS_KEY_ID=test
export AWS_SECRET_ACCESS_KEY=test
export AWS_REGION=us-east-1
export AWS_ENDPOINT_URL=$endpoint
export WEIR_S3_ENDPOINT=$endpoint
ENV
}

bucket() {
  local name=${1:?usage: $0 bucket NAME}
  if ! { running && answering; }; then die "not running; start it first: $0 start"; fi
  local code
  code=$(curl -s -o /dev/null -w '%{http_code}' -X PUT "$endpoint/$name")
  case "$code" in
    200) log "bucket $name ready" ;;
    409) log "bucket $name already exists" ;;
    *) die "creating bucket $name answered HTTP $code" ;;
  esac
}

case "${1:-}" in
  install) install ;;
  start) start ;;
  stop) stop ;;
  status)
    if running && answering; then log "running (pid $(cat "$pidfile")) on $endpoint"
    else log "not running"; exit 1; fi ;;
  env) print_env ;;
  bucket) shift; bucket "$@" ;;
  *) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
