#!/bin/sh
# Kafka: a device whose serve falls behind does not stop the devices of the
# other partitions (docs/kafka.md, "Receivers in a group").  dev1's serve is
# held (INGEST_TEST_KAFKA_SERVE_PAUSE, tests only) while it ships more than
# its queue holds (kafka.device_queue: 1 MiB here; librdkafka's mock cluster
# keeps only the last ~5 MiB of a partition, so the files are 3 MB): the
# receiver's consumer pauses dev1's partition
# instead of waiting, and dev2, on another partition, ships and lands
# meanwhile.  Released, dev1's batch lands byte-identical.  The receiver is
# then killed while dev1's partition is paused again and started anew: the
# committed offsets did not pass the record it could not take, so the batch
# lands without the device shipping it again.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/kafka_lib.sh"
setup_keys
start_mock 1 4
# the partition of a device's records: CRC-32 of its id modulo 4 (librdkafka's consistent partitioner)
p1=$(python3 -c 'import zlib; print(zlib.crc32(b"dev1") % 4)')
p2=$(python3 -c 'import zlib; print(zlib.crc32(b"dev2") % 4)')
[ "$p1" != "$p2" ] || fail "dev1 and dev2 share partition $p1: the test needs two"

KAFKA_KEYS='  device_queue: 1MiB' write_kafka_receiver_config r1 'metrics:
  listen: 127.0.0.1:0'
touch "$T/pause"
export INGEST_TEST_KAFKA_SERVE_PAUSE="dev1:$T/pause"
start_kafka_receiver r1
unset INGEST_TEST_KAFKA_SERVE_PAUSE
wait_file_log "$T/r1.log" "partitions of ingest assigned"

mkdir -p "$T/src1" "$T/src2"
head -c 3000000 /dev/urandom > "$T/src1/big.bin" # incompressible: 3 MB of records against the 1 MiB queue
gen_log "$T/src2/log.txt" 300000 5
write_kafka_agent_config dev1 "$T/src1"
write_kafka_agent_config dev2 "$T/src2"

# run_agent DEVICE: --once in the background, its pid in $APID
run_agent() {
    "$AGENT" --config "$T/$1.yaml" --once > "$T/$1.out" 2> "$T/$1.err" &
    APID=$!
    EXTRA_PIDS="$EXTRA_PIDS $APID"
}
# wait_agent PID DEVICE SECONDS: it exits 0 within SECONDS
wait_agent() {
    i=0
    while kill -0 "$1" 2>/dev/null; do
        i=$((i + 1))
        [ $i -gt $(($3 * 20)) ] && { cat "$T/$2.err"; tail -20 "$T/r1.log"; fail "agent $2 still shipping after $3 s"; }
        sleep 0.05
    done
    wait "$1" || { cat "$T/$2.err"; tail -20 "$T/r1.log"; fail "agent $2 failed"; }
}

run_agent dev1
A1=$APID
wait_file_log "$T/r1.log" "ingest \[$p1\] paused at offset" 600
run_agent dev2
wait_agent "$APID" dev2 60
cmp "$T/src2/log.txt" "$T/bronze/dev2/src2/log.txt" || fail "dev2's file did not land"
[ ! -e "$T/bronze/dev1/src1/big.bin" ] || fail "dev1's file landed while its serve was held"
kill -0 "$A1" 2>/dev/null || fail "dev1's agent ended while its serve was held"
# the pause is counted for dev1, none for dev2
maddr=$(sed -n 's|.*metrics on http://\([^/]*\)/metrics.*|\1|p' "$T/r1.log" | tail -1)
[ -n "$maddr" ] || fail "the receiver did not report its metrics address"
bash -c 'exec 3<>/dev/tcp/${0%:*}/${0##*:}; printf "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n" >&3; cat <&3' "$maddr" |
    tr -d '\r' > "$T/metrics"
np=$(sed -n 's/^ingest_receiver_kafka_partition_pauses_total{device="dev1"} \([0-9]*\)$/\1/p' "$T/metrics")
[ -n "$np" ] && [ "$np" -ge 1 ] || { grep kafka "$T/metrics"; fail "dev1's pauses are not counted"; }
! grep -q 'partition_pauses_total{device="dev2"}' "$T/metrics" || fail "a pause is counted for dev2"
pass "dev1's serve held with its queue full: its partition ($p1) paused (counted: $np), dev2 (partition $p2) shipped and landed"

rm "$T/pause"
wait_agent "$A1" dev1 60
cmp "$T/src1/big.bin" "$T/bronze/dev1/src1/big.bin" || fail "dev1's file is not byte-identical"
grep -q "paused at offset" "$T/r1.log" && ! grep -q "cannot pause" "$T/r1.log" || fail "the pause was not clean"
pass "released, dev1's batch lands byte-identical"

# Held again, the receiver killed while dev1's partition is paused, then started without the hold.
head -c 3000000 /dev/urandom > "$T/src1/big2.bin"
touch "$T/pause"
kill "$KPID_r1"
wait "$KPID_r1" 2>/dev/null || true
: > "$T/r1.log"
export INGEST_TEST_KAFKA_SERVE_PAUSE="dev1:$T/pause"
start_kafka_receiver r1
unset INGEST_TEST_KAFKA_SERVE_PAUSE
wait_file_log "$T/r1.log" "partitions of ingest assigned"
run_agent dev1
A1=$APID
wait_file_log "$T/r1.log" "ingest \[$p1\] paused at offset" 600
sleep 1 # offsets committed meanwhile (every 0.2 s) must stay before the record not taken
kill -KILL "$KPID_r1"
wait "$KPID_r1" 2>/dev/null || true
rm "$T/pause"
start_kafka_receiver r1
wait_agent "$A1" dev1 90
cmp "$T/src1/big2.bin" "$T/bronze/dev1/src1/big2.bin" || fail "big2.bin is not byte-identical"
[ "$(field dev1 files)" = 1 ] || fail "dev1 acknowledged $(field dev1 files) files, not 1"
grep -q "never came" "$T/r1.log" &&
    fail "records were skipped after the restart"
pass "killed while paused and started again: the batch lands from the committed offset, nothing skipped"
