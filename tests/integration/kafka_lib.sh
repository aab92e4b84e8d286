# Helpers of the Kafka tests (docs/kafka.md): source after lib.sh.  They run
# the real programs against tests/tools/kafka-mock, librdkafka's mock
# cluster on loopback.
skip_kafka_under_tsan
MOCK="$BUILD/tools/kafka-mock"
[ -x "$MOCK" ] || fail "kafka-mock not built (make tests)"
MOCK_PID=""
# kafka_stop_all: the receivers and agents first (a receiver leaving its group talks to the cluster), each
# given 10 s after SIGTERM and then killed, so that none outlives the test; then the cluster
kafka_stop_all() {
    for p in ${EXTRA_PIDS:-}; do kill "$p" 2>/dev/null || true; done
    for p in ${EXTRA_PIDS:-}; do
        i=0
        while kill -0 "$p" 2>/dev/null && [ $i -lt 200 ]; do i=$((i + 1)); sleep 0.05; done
        kill -KILL "$p" 2>/dev/null || true
    done
    [ -n "$MOCK_PID" ] && kill "$MOCK_PID" 2>/dev/null
    return 0
}
trap 'kafka_stop_all; cleanup' EXIT

# start_mock BROKERS PARTITIONS: the cluster with topics ingest and ingest-replies; $BOOT
start_mock() {
    mkfifo "$T/mock.in"
    "$MOCK" --brokers "$1" --topic "ingest:$2" --topic "ingest-replies:$2" --ready-file "$T/mock.ready" \
        < "$T/mock.in" > "$T/mock.out" 2> "$T/mock.err" &
    MOCK_PID=$!
    exec 9> "$T/mock.in"
    i=0
    while [ ! -s "$T/mock.ready" ]; do
        i=$((i + 1))
        [ $i -gt 200 ] && { cat "$T/mock.err"; fail "kafka-mock did not start"; }
        sleep 0.05
    done
    BOOT=$(cat "$T/mock.ready")
}

# mock_cmd LINE: a command to the cluster (down ID, up ID)
mock_cmd() { echo "$1" >&9; }

# write_kafka_receiver_config NAME [extra yaml]: $T/NAME.yaml with its own state dir, the shared bronze;
# $KAFKA_KEYS (lines "  key: value") goes into its kafka map, $KAFKA_PROPS (lines "    key: value") into its
# kafka.properties
write_kafka_receiver_config() {
    mkdir -p "$T/bronze" "$T/rstate-$1"
    cat > "$T/$1.yaml" <<EOT
listen: 127.0.0.1:0
key: keys/receiver.key
authorized_devices: keys/authorized
dedup_key: keys/fleet.dedup
state_dir: rstate-$1
bronze: bronze
layout: "{device}/{path}"
kafka:
  brokers: $BOOT
${KAFKA_KEYS:-}
  properties:
    # a member that joins or dies is noticed within seconds (the mock waits out the session timeout)
    session.timeout.ms: "6000"
    heartbeat.interval.ms: "500"
${KAFKA_PROPS:-}
log:
  level: info
${2:-}
EOT
}

# start_kafka_receiver NAME: in the background, logging to $T/NAME.log; its pid in $KPID_NAME
start_kafka_receiver() {
    rm -f "$T/$1.addr"
    "$RECEIVER" --config "$T/$1.yaml" --ready-file "$T/$1.addr" >> "$T/$1.log" 2>&1 &
    eval "KPID_$1=\$!"
    EXTRA_PIDS="${EXTRA_PIDS:-} $!"
    i=0
    while [ ! -s "$T/$1.addr" ]; do
        i=$((i + 1))
        [ $i -gt 200 ] && { cat "$T/$1.log"; fail "receiver $1 did not start"; }
        sleep 0.05
    done
}

# write_kafka_agent_config DEVICE SRC [extra yaml]
write_kafka_agent_config() {
    mkdir -p "$T/astate-$1"
    cat > "$T/$1.yaml" <<EOT
device:
  id: $1
  key: keys/$1.key
core:
  receiver_key: keys/receiver.pub
transport: kafka
kafka:
  brokers: $BOOT
dedup_key: keys/fleet.dedup
sources:
  - path: $2
state_dir: astate-$1
${3:-}
EOT
}

# wait_file_log FILE PATTERN [TRIES]: wait (50 ms steps, default 20 s) for PATTERN in FILE
wait_file_log() {
    i=0
    while ! grep -q -- "$2" "$1" 2>/dev/null; do
        i=$((i + 1))
        [ $i -gt "${3:-400}" ] && { tail -20 "$1"; fail "no '$2' in $1"; }
        sleep 0.05
    done
}
