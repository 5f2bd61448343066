#!/usr/bin/env bash
# A single-node Apache Kafka (KRaft: broker and controller in one JVM, no ZooKeeper) for the
# Kafka tests, run from the jars compat/kafka/pom.xml copies from Maven Central.
#   broker.sh install           copy the jars into compat/kafka/target/kafka-libs (once)
#   broker.sh start DIR         format DIR/data, start on 127.0.0.1 on free ports, wait until
#                               it serves; DIR/port holds the client port, DIR/pid the JVM
#   broker.sh restart DIR       start again after a stop, same ports and same data
#   broker.sh stop DIR          stop it (SIGTERM, SIGKILL after STOP_WAIT_S), idempotent
#   broker.sh tool DIR CLASS …  run a Kafka tool class (e.g. org.apache.kafka.tools.ConsoleProducer)
#                               with --bootstrap-server set to this broker
# Every wait is bounded: a broker that does not come up in START_WAIT_S is stopped and the
# command fails with the end of its log.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
libs="$here/target/kafka-libs"
START_WAIT_S=60
STOP_WAIT_S=20
HEAP="-Xmx512m"

need_java() {
  if ! command -v java >/dev/null 2>&1; then
    echo "compat/kafka: 'java' not found; install a JDK 17 (apt-get install openjdk-17-jdk-headless)" >&2
    exit 2
  fi
}

install() {
  if [ -f "$libs/kafka_2.13-$(kafka_version).jar" ]; then return; fi
  if ! command -v mvn >/dev/null 2>&1; then
    echo "compat/kafka: 'mvn' not found; install Maven (apt-get install maven)" >&2
    exit 2
  fi
  (cd "$here" && mvn -B -q --no-transfer-progress dependency:copy-dependencies)
}

kafka_version() {
  sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$here/pom.xml"
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

run_java() {
  java $HEAP -cp "$libs/*" "$@"
}

write_config() {
  local dir="$1" port="$2" cport="$3"
  cat > "$dir/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$cport
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$dir/data
num.partitions=4
auto.create.topics.enable=true
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
PROPS
}

launch() {
  local dir="$1" port
  port="$(cat "$dir/port")"
  nohup java $HEAP -cp "$libs/*" kafka.Kafka "$dir/server.properties" >>"$dir/broker.log" 2>&1 &
  echo $! > "$dir/pid"
  local deadline=$((SECONDS + START_WAIT_S))
  # Up when the broker answers a metadata request on its client port.
  until run_java org.apache.kafka.tools.BrokerApiVersionsCommand --bootstrap-server "127.0.0.1:$port" >/dev/null 2>&1; do
    if ! kill -0 "$(cat "$dir/pid")" 2>/dev/null || [ $SECONDS -ge $deadline ]; then
      echo "compat/kafka: the broker did not come up on 127.0.0.1:$port; the end of $dir/broker.log:" >&2
      tail -n 30 "$dir/broker.log" >&2 || true
      stop "$dir"
      exit 1
    fi
    sleep 1
  done
  echo "compat/kafka: broker up on 127.0.0.1:$port (pid $(cat "$dir/pid"))"
}

start() {
  local dir="$1"
  mkdir -p "$dir"
  local port cport
  port="$(free_port)"
  cport="$(free_port)"
  while [ "$cport" = "$port" ]; do cport="$(free_port)"; done
  echo "$port" > "$dir/port"
  write_config "$dir" "$port" "$cport"
  local id
  id="$(run_java kafka.tools.StorageTool random-uuid 2>/dev/null | tail -n 1)"
  run_java kafka.tools.StorageTool format -t "$id" -c "$dir/server.properties" >>"$dir/broker.log" 2>&1
  launch "$dir"
}

stop() {
  local dir="$1" pid
  [ -f "$dir/pid" ] || return 0
  pid="$(cat "$dir/pid")"
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    local deadline=$((SECONDS + STOP_WAIT_S))
    while kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.2; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$dir/pid"
}

cmd="${1:-}"
case "$cmd" in
  install) need_java; install ;;
  start) need_java; install; start "${2:?give the broker directory}" ;;
  restart) need_java; launch "${2:?give the broker directory}" ;;
  stop) stop "${2:?give the broker directory}" ;;
  tool)
    dir="${2:?give the broker directory}"; class="${3:?give a tool class}"; shift 3
    run_java "$class" --bootstrap-server "127.0.0.1:$(cat "$dir/port")" "$@" ;;
  *) echo "usage: broker.sh install | start DIR | restart DIR | stop DIR | tool DIR CLASS ARGS…" >&2; exit 2 ;;
esac
