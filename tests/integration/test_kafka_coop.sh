#!/bin/sh
# Kafka with the cooperative protocol (kafka.properties:
# partition.assignment.strategy: cooperative-sticky; docs/kafka.md,
# "Rebalance"): a receiver joining takes some partitions from a running one,
# which keeps the others.  Two devices, one on each of 2 partitions, each in
# the middle of a batch on r1 (their serves held: INGEST_TEST_KAFKA_SERVE_PAUSE,
# tests only) when r2 joins.  The serve of the partition r1 keeps goes on (it
# used to end with every other, leaving that batch cut off: the device
# waited out its 10-minute reply timeout), the partition r1 gives up is read
# by r2 from the batch's beginning, and both files land byte-identical
# within a minute of the release, one by each receiver.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/kafka_lib.sh"
setup_keys
start_mock 1 2
# the partition of a device's records: CRC-32 of its id modulo 2 (librdkafka's consistent partitioner)
pa=$(python3 -c 'import zlib; print(zlib.crc32(b"dev4") % 2)')
pb=$(python3 -c 'import zlib; print(zlib.crc32(b"dev1") % 2)')
[ "$pa" != "$pb" ] || fail "dev4 and dev1 share partition $pa: the test needs two"
for d in dev4; do
    (cd "$T/keys" && "$CTL" keygen "$d" > /dev/null)
    printf '%s %s\n' "$d" "$(cat "$T/keys/$d.pub")" >> "$T/keys/authorized"
done

KAFKA_PROPS='    partition.assignment.strategy: cooperative-sticky' write_kafka_receiver_config r1 'metrics:
  listen: 127.0.0.1:0'
KAFKA_PROPS='    partition.assignment.strategy: cooperative-sticky' write_kafka_receiver_config r2
touch "$T/pause"
export INGEST_TEST_KAFKA_SERVE_PAUSE="*:$T/pause"
start_kafka_receiver r1
unset INGEST_TEST_KAFKA_SERVE_PAUSE
wait_file_log "$T/r1.log" "2 partitions of ingest assigned" 1200

# metric NAME: its value at r1 (0 when not there yet)
maddr=$(sed -n 's|.*metrics on http://\([^/]*\)/metrics.*|\1|p' "$T/r1.log" | tail -1)
[ -n "$maddr" ] || fail "the receiver did not report its metrics address"
metric() {
    bash -c 'exec 3<>/dev/tcp/${0%:*}/${0##*:}; printf "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n" >&3; cat <&3' \
        "$maddr" | tr -d '\r' | awk -v n="$1" '$1 == n { v = $2 } END { print v + 0 }'
}

for d in dev4 dev1; do
    mkdir -p "$T/src-$d"
    gen_log "$T/src-$d/log.txt" 200000 "$(printf '%s' "$d" | cksum | cut -d' ' -f1)"
    write_kafka_agent_config "$d" "$T/src-$d"
    "$AGENT" --config "$T/$d.yaml" --once > "$T/$d.out" 2> "$T/$d.err" &
    eval "A_$d=\$!"
    EXTRA_PIDS="$EXTRA_PIDS $!"
done
# both batches begun on r1: their first records taken by the (held) serves
i=0
until [ "$(metric 'ingest_receiver_kafka_records_total{outcome="ok"}')" -ge 2 ]; do
    i=$((i + 1)); [ $i -gt 1200 ] && { tail -n 20 "$T/r1.log"; fail "r1 did not read both devices' records"; }
    sleep 0.05
done

start_kafka_receiver r2
# r1 gives one partition up and keeps the other; r2 takes it (the mock cluster may take a while)
wait_file_log "$T/r1.log" "1 partitions of ingest revoked" 2400
wait_file_log "$T/r2.log" "1 partitions of ingest assigned" 2400
! grep -q "2 partitions of ingest revoked" "$T/r1.log" || fail "r1 gave up both partitions: not a cooperative rebalance"
rm "$T/pause"
for d in dev4 dev1; do
    eval "p=\$A_$d"
    i=0
    while kill -0 "$p" 2>/dev/null; do
        i=$((i + 1))
        [ $i -gt 1200 ] && { cat "$T/$d.err"; tail -n 20 "$T/r1.log" "$T/r2.log"; fail "$d still shipping 60 s after the release"; }
        sleep 0.05
    done
    wait "$p" || { cat "$T/$d.err"; fail "agent $d failed"; }
    cmp "$T/src-$d/log.txt" "$T/bronze/$d/src-$d/log.txt" || fail "$d's file is not byte-identical"
done
l1=$(grep -c ' landed: ' "$T/r1.log" || true)
l2=$(grep -c ' landed: ' "$T/r2.log" || true)
[ "$l1" = 1 ] && [ "$l2" = 1 ] || fail "r1 landed $l1 batches and r2 $l2, not one each"
# the device r1 kept was served by one serve from start to end: connected once (a serve ended by the revoke
# and started again, or a partition set back, would connect it twice)
moved=$(sed -n 's/.*device \(dev[0-9]*\) connected from kafka.*/\1/p' "$T/r2.log" | sort -u)
[ "$(echo "$moved" | wc -w)" = 1 ] || fail "r2 served '$moved', not one device"
kept=dev4; [ "$moved" = dev4 ] && kept=dev1
n=$(grep -c "device $kept connected from kafka" "$T/r1.log" || true)
[ "$n" = 1 ] || fail "r1 connected $kept, whose partition it kept, $n times"
pass "cooperative rebalance with both devices mid-batch: $kept's serve went on at r1 (its partition kept), $moved's batch was read whole by r2; both landed"
