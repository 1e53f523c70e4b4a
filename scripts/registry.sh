#!/usr/bin/env bash
# A local schema registry with Confluent's REST API (Apicurio Registry, in-memory
# storage) on 127.0.0.1 for weir's format tests (Avro, Protobuf, JSON Schema).
# Schemas live in memory: stopping the registry forgets them. Its default
# compatibility is NONE. The Confluent API is served at /apis/ccompat/v7.
#
#   scripts/registry.sh build    build the runnable jar with Maven (cached)
#   scripts/registry.sh start    build if needed, start, wait until it answers
#   scripts/registry.sh stop     stop the registry this script started (and only that one)
#   scripts/registry.sh status   exit 0 when our registry is running and answering
#   scripts/registry.sh env      print export lines: eval "$(scripts/registry.sh env)"
#
# Environment:
#   WEIR_REGISTRY_PORT      HTTP port                        (default 8081)
#   WEIR_REGISTRY_HOME      pid and log files                (default <repo>/.registry)
#   WEIR_REGISTRY_CACHE     the built jar and its lib/       (default ~/.cache/weir/apicurio-<version>-<pom hash>)
#   WEIR_REGISTRY_SETTINGS  Maven settings for the build     (default scripts/registry/settings.xml: Central only)
#   WEIR_REGISTRY_JAVA_OPTS JVM options                      (default -Xmx512m)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
pom="$here/registry/pom.xml"
version=$(sed -n 's:.*<apicurio.version>\(.*\)</apicurio.version>.*:\1:p' "$pom")
port=${WEIR_REGISTRY_PORT:-8081}
home=${WEIR_REGISTRY_HOME:-$repo/.registry}
pom_hash=$(sha1sum "$pom" | cut -c1-8)
cache=${WEIR_REGISTRY_CACHE:-$HOME/.cache/weir/apicurio-${version%.Final}-$pom_hash}
settings=${WEIR_REGISTRY_SETTINGS:-$here/registry/settings.xml}
java_opts=${WEIR_REGISTRY_JAVA_OPTS:--Xmx512m}
java=${JAVA:-java}
jar="$cache/apicurio-registry-runner.jar"
pidfile="$home/registry.pid"
logfile="$home/registry.log"
base="http://127.0.0.1:$port"
url="$base/apis/ccompat/v7"

log() { printf 'registry.sh: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

# Quarkus' build step over the published application jar (about 1.5 min with
# an empty ~/.m2, mostly downloads; seconds with a warm one). The result is
# built in a scratch folder and moved into the cache whole, so that an
# interrupted build never leaves a half cache behind.
build() {
  if [ -f "$cache/.complete" ]; then return 0; fi
  command -v mvn >/dev/null || die "mvn not found: install Maven (Debian: apt-get install maven)"
  command -v "$java" >/dev/null || die "$java not found: install Java 17 (Debian: apt-get install openjdk-17-jre-headless)"
  mkdir -p "$(dirname "$cache")"
  # One build at a time (two test runs starting together wait for each other).
  exec 9>"$cache.lock"
  flock 9
  if [ -f "$cache/.complete" ]; then exec 9>&-; return 0; fi
  local work; work=$(mktemp -d "${TMPDIR:-/tmp}/weir-registry-build.XXXXXX")
  cp "$pom" "$work/pom.xml"
  log "building Apicurio Registry $version with Maven into $cache (about 1.5 min on a fresh machine; log: $work/build.log)"
  local started=$SECONDS
  if ! mvn -B -Dstyle.color=never -s "$settings" -f "$work/pom.xml" package -DskipTests >"$work/build.log" 2>&1; then
    log "Maven build failed; last lines of $work/build.log:"
    grep -E '^\[ERROR\]' "$work/build.log" | head -20 >&2 || tail -30 "$work/build.log" >&2
    exit 1
  fi
  local runner; runner=$(ls "$work"/target/*-runner.jar 2>/dev/null | head -1 || true)
  [ -n "$runner" ] && [ -d "$work/target/lib" ] || die "no target/*-runner.jar and target/lib/ after the build; see $work/build.log"
  rm -rf "$cache.tmp"
  mkdir -p "$cache.tmp"
  # The runner's manifest names lib/ relative to itself: keep them side by side.
  mv "$runner" "$cache.tmp/apicurio-registry-runner.jar"
  mv "$work/target/lib" "$cache.tmp/lib"
  cp "$work/target/quarkus-artifact.properties" "$cache.tmp/" 2>/dev/null || true
  touch "$cache.tmp/.complete"
  rm -rf "$cache"
  mv "$cache.tmp" "$cache"
  rm -rf "$work"
  exec 9>&-  # unlock; and the registry started next must not inherit the lock
  log "built in $((SECONDS - started)) s"
}

# Our registry: the pid in the pidfile is alive and runs our jar (a pid
# reused by an unrelated process is not ours and is never signalled).
running() {
  [ -f "$pidfile" ] || return 1
  local pid; pid=$(cat "$pidfile")
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
  tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q apicurio-registry-runner.jar
}

# The Confluent API itself answers (Quarkus listens a moment before).
answering() {
  curl -sf -o /dev/null --max-time 2 "$url/subjects"
}

start() {
  build
  if running; then
    if answering; then log "already running (pid $(cat "$pidfile")) on $url"; return 0; fi
    die "pid $(cat "$pidfile") is running but $url does not answer; see $logfile, or run: $0 stop"
  fi
  if curl -s -o /dev/null --max-time 2 "$base/"; then
    die "something else already answers on $base; choose another port with WEIR_REGISTRY_PORT"
  fi
  mkdir -p "$home"
  log "starting Apicurio Registry $version on $url (log: $logfile)"
  # HTTP_PORT is the app's own setting; Quarkus binds every interface unless
  # told otherwise. In-memory (H2) storage is the app's default. It runs in
  # $home, where the transaction manager keeps its ObjectStore/ folder.
  (
    cd "$home"
    # shellcheck disable=SC2086
    HTTP_PORT=$port QUARKUS_HTTP_HOST=127.0.0.1 nohup "$java" $java_opts -jar "$jar" >>"$logfile" 2>&1 &
    echo $! > "$pidfile"
  )
  for _ in $(seq 1 120); do
    if ! running; then
      log "the registry exited during start-up; last lines of $logfile:"
      tail -20 "$logfile" >&2
      rm -f "$pidfile"
      exit 1
    fi
    if answering; then log "ready on $url"; return 0; fi
    sleep 0.5
  done
  die "the registry did not answer within 60 s; see $logfile"
}

stop() {
  if ! running; then log "no registry of ours is running"; rm -f "$pidfile"; return 0; fi
  local pid; pid=$(cat "$pidfile")
  kill "$pid"
  for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
  rm -f "$pidfile"
  log "stopped the registry (pid $pid)"
}

print_env() {
  echo "export WEIR_REGISTRY_URL=$url"
}

case "${1:-}" in
  build) build ;;
  start) start ;;
  stop) stop ;;
  status)
    if running && answering; then log "running (pid $(cat "$pidfile")) on $url"
    else log "not running"; exit 1; fi ;;
  env) print_env ;;
  *) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
