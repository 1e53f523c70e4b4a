#!/usr/bin/env bash
# A local, single-node Apache Kafka (KRaft) on 127.0.0.1 for weir's tests, demo and CI.
#
#   scripts/kafka.sh fetch             fetch the jars from Maven Central (cached)
#   scripts/kafka.sh start             fetch if needed, format once, start, wait until it answers
#   scripts/kafka.sh stop              stop the broker this script started (and only that one)
#   scripts/kafka.sh status            exit 0 when our broker is running and answering
#   scripts/kafka.sh topic NAME [PARTS]  create a topic if it does not exist (default 4 partitions)
#   scripts/kafka.sh tool CLASS ARGS   run a Kafka tool class (e.g. org.apache.kafka.tools.TopicCommand)
#
# Environment:
#   KAFKA_PORT        broker port                   (default 9092; the controller uses PORT+1)
#   WEIR_KAFKA_HOME   data, pid and log files       (default <repo>/.kafka)
#   WEIR_KAFKA_CACHE  where the jars are cached     (default ~/.cache/weir/kafka-<version>-<pom hash>)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
version=$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$here/kafka/pom.xml")
port=${KAFKA_PORT:-9092}
controller_port=$((port + 1))
home=${WEIR_KAFKA_HOME:-$repo/.kafka}
pom_hash=$(sha1sum "$here/kafka/pom.xml" | cut -c1-8)
cache=${WEIR_KAFKA_CACHE:-$HOME/.cache/weir/kafka-$version-$pom_hash}
libs="$cache/libs"
pidfile="$home/broker.pid"
logfile="$home/broker.log"
java=${JAVA:-java}

log() { printf 'kafka.sh: %s\n' "$*" >&2; }

fetch() {
  if [ -f "$cache/.complete" ]; then return 0; fi
  command -v mvn >/dev/null || { log "mvn not found: install Maven (Debian: apt-get install maven)"; exit 1; }
  log "fetching Apache Kafka $version jars from Maven Central into $libs"
  mkdir -p "$libs"
  mvn -q -B -Dstyle.color=never -f "$here/kafka/pom.xml" dependency:copy-dependencies \
    -DoutputDirectory="$libs" -DincludeScope=runtime >&2
  touch "$cache/.complete"
}

classpath() { echo "$libs/*"; }

run_class() {
  "$java" -Xmx256m -Dlog4j2.configurationFile="$home/log4j2.properties" -cp "$(classpath)" "$@"
}

running() {
  [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null
}

answering() {
  # A TCP connect is not enough: the broker listens before it has joined the quorum.
  run_class org.apache.kafka.tools.TopicCommand --bootstrap-server "127.0.0.1:$port" --list >/dev/null 2>&1
}

write_config() {
  mkdir -p "$home/data"
  cat > "$home/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$controller_port
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$controller_port
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$home/data
num.partitions=4
auto.create.topics.enable=false
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
group.initial.rebalance.delay.ms=0
# Keep every record whatever its timestamp. weir writes a window's result
# with the window's end as its Kafka timestamp, and the tests (and the
# demo) use fixed event times long past: time-based retention (7 days by
# default) would delete results between their commit and the reader.
log.retention.ms=-1
# A small footprint per partition: tests and benchmarks create thousands of
# topics. Every partition's active segment preallocates its offset and time
# indexes at log.index.size.max.bytes (10 MiB each by default); 1 MiB holds
# the index of a whole 64 MiB segment. The internal topics keep their own
# settings (offsets.topic.segment.bytes, transaction.state.log.segment.bytes).
log.index.size.max.bytes=1048576
log.segment.bytes=67108864
# A deleted topic's files go after 5 s instead of 60 s (the test kit deletes
# each test process's topics when it exits).
log.segment.delete.delay.ms=5000
# Let a killed producer's open transaction be aborted quickly in tests.
transaction.abort.timed.out.transaction.cleanup.interval.ms=5000
# Group mode (KIP-848): the broker owns the session timeout. 6 s instead of
# 45 s, so that tests which kill instances see their tasks move quickly.
group.consumer.min.session.timeout.ms=3000
group.consumer.session.timeout.ms=6000
group.consumer.min.heartbeat.interval.ms=500
group.consumer.heartbeat.interval.ms=1000
PROPS
  cat > "$home/log4j2.properties" <<PROPS
rootLogger.level=WARN
rootLogger.appenderRef.stderr.ref=STDERR
appender.stderr.type=Console
appender.stderr.name=STDERR
appender.stderr.target=SYSTEM_ERR
appender.stderr.layout.type=PatternLayout
appender.stderr.layout.pattern=[%d] %p %m (%c)%n
logger.kafka.name=kafka
logger.kafka.level=INFO
PROPS
}

start() {
  fetch
  if running; then
    if answering; then log "broker already running (pid $(cat "$pidfile")) on 127.0.0.1:$port"; return 0; fi
  fi
  write_config
  if [ ! -f "$home/data/meta.properties" ]; then
    local cluster_id
    cluster_id=$(run_class kafka.tools.StorageTool random-uuid)
    run_class kafka.tools.StorageTool format -t "$cluster_id" -c "$home/server.properties" >>"$logfile" 2>&1
  fi
  log "starting Kafka $version on 127.0.0.1:$port (log: $logfile)"
  nohup "$java" -Xmx1g -Xms512m -XX:+UseG1GC \
    -Dlog4j2.configurationFile="$home/log4j2.properties" \
    -cp "$(classpath)" kafka.Kafka "$home/server.properties" >>"$logfile" 2>&1 &
  echo $! > "$pidfile"
  for _ in $(seq 1 120); do
    if ! running; then log "broker exited during start-up; last lines of $logfile:"; tail -20 "$logfile" >&2; exit 1; fi
    if answering; then log "broker ready on 127.0.0.1:$port"; return 0; fi
    sleep 1
  done
  log "broker did not answer within 120 s; see $logfile"
  exit 1
}

stop() {
  if ! running; then log "no broker of ours is running"; rm -f "$pidfile"; return 0; fi
  local pid; pid=$(cat "$pidfile")
  kill "$pid"
  for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
  kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
  rm -f "$pidfile"
  log "stopped broker (pid $pid)"
}

topic() {
  local name=$1 parts=${2:-4}
  run_class org.apache.kafka.tools.TopicCommand --bootstrap-server "127.0.0.1:$port" \
    --create --if-not-exists --topic "$name" --partitions "$parts" --replication-factor 1 >&2
}

case "${1:-}" in
  fetch) fetch ;;
  start) start ;;
  stop) stop ;;
  status) running && answering && log "running (pid $(cat "$pidfile")) on 127.0.0.1:$port" ;;
  topic) shift; topic "$@" ;;
  tool) shift; run_class "$@" ;;
  *) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
